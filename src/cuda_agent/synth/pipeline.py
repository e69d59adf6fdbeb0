"""The synthesis pipeline: catalog -> compose -> dedupe -> decontaminate -> filters -> write.

Resumable: finished work is appended (and fsync'd) to JSONL files in the run folder's `work`; a rerun
with the same settings reads them back and does only what is missing. Deterministic for a seed:
candidate j of class c draws from its own RNG seeded with (seed, c, j), candidates are submitted in j
order, and a class submits only while `accepted + in_flight < quota`, so each class accepts exactly
its first `quota` passing candidates in j order however the workers interleave (given reproducible
verdicts: a timing at a window edge or a timeout can flip).
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cuda_agent.synth import decontaminate as dc
from cuda_agent.synth.catalog import Catalog, build_catalog
from cuda_agent.synth.compose import PROFILES, ComposeError, compose_chain, render_candidate
from cuda_agent.synth.dedupe import Deduper
from cuda_agent.synth.filters import DEVICE_BUSY, FilterConfig, run_filters
from cuda_agent.synth.preflight import kernelbench_problem
from cuda_agent.synth.workers import failure

# The published mix (CUDA-Agent-Ops-6K): chain length -> share in percent.
DEFAULT_MIX = {"1": 3.4, "2": 83.8, "3": 7.6, "4": 2.8, "5": 1.2, "transformers": 1.2}
CLASSES = ("1", "2", "3", "4", "5", "transformers")
DEFAULT_WINDOW = {"cuda": (1.0, 100.0), "cpu": (0.1, 10.0)}
DEFAULT_TIMEOUT = {"cuda": 600.0, "cpu": 300.0}
MAX_COMPILE_THREADS = 32   # inductor's own cap on its pool of compile processes
MAX_BUSY_TRIES = 3   # a candidate that found the GPU full this often is recorded as `device_busy`
WORKER_MAX_TASKS = 100   # a filter worker is replaced after this many tasks (docs/synthesis.md: its growth)
# the RSS bound's floor: a CUDA filter worker holds torch, the CUDA libraries and inductor before any task
WORKER_MIN_RSS_BOUND_MB = 8192.0


@dataclass
class SynthConfig:
    num: int
    out: str
    backend: str = "cpu"
    seed: int = 0
    workers: int | None = None              # default: 3/4 of the cores on cuda (sharing the GPUs), all on cpu
    mix: dict = field(default_factory=lambda: dict(DEFAULT_MIX))
    window_ms: tuple | None = None          # default per backend (DEFAULT_WINDOW)
    profile: str | None = None              # base shapes: "gpu" on cuda, "tiny" on cpu
    kernelbench: str | None = None          # folder with level1..3 (or $CUDA_AGENT_KERNELBENCH)
    decontaminate: bool = True
    similarity_threshold: float = dc.THRESHOLD
    compile: bool = True
    include_transformers: bool = True
    composer: str = "rules"                 # rules | llm
    llm_model: str | None = None
    llm_base_url: str | None = None
    task_timeout_s: float | None = None
    max_attempts_factor: float = 20.0       # per class: give up after factor * quota + 20 candidates
    ray_address: str | None = None
    progress: bool = True
    draws: int = 3
    min_varying_fraction: float = 0.01
    max_rescales: int = 4
    warmup: int | None = None
    iters: int | None = None
    worker_max_tasks: int | None = None     # replace a filter worker after this many tasks (0: never)
    worker_max_rss_mb: float | None = None  # ... or once its RSS after a task passes this (0: no bound)

    def resolved(self) -> "SynthConfig":
        c = SynthConfig(**asdict(self))
        c.window_ms = tuple(c.window_ms or DEFAULT_WINDOW[c.backend])
        c.profile = c.profile or ("gpu" if c.backend == "cuda" else "tiny")
        c.task_timeout_s = c.task_timeout_s or DEFAULT_TIMEOUT[c.backend]
        c.kernelbench = c.kernelbench or os.environ.get("CUDA_AGENT_KERNELBENCH")
        if c.workers is None:
            if c.backend == "cuda":
                import torch

                # A filter job is mostly CPU (torch.compile, shape checks) around short GPU timings,
                # so several workers share one GPU.
                c.workers = max(1, torch.cuda.device_count(), (os.cpu_count() or 2) * 3 // 4)
            else:
                c.workers = max(1, os.cpu_count() or 1)
        c.warmup = c.warmup if c.warmup is not None else (10 if c.backend == "cuda" else 3)
        c.iters = c.iters if c.iters is not None else (50 if c.backend == "cuda" else 20)
        if c.worker_max_tasks is None:
            c.worker_max_tasks = WORKER_MAX_TASKS
        if c.worker_max_rss_mb is None:
            c.worker_max_rss_mb = worker_rss_bound_mb(c.workers)
        return c

    def fingerprint(self) -> dict:
        """Settings that change which tasks come out; a resumed run must match them."""
        keys = ("backend", "seed", "mix", "window_ms", "profile", "decontaminate", "similarity_threshold",
                "compile", "include_transformers", "composer", "llm_model", "draws",
                "min_varying_fraction", "max_rescales")
        d = asdict(self)
        return json.loads(json.dumps({k: d[k] for k in keys}))


def worker_rss_bound_mb(workers: int) -> float | None:
    """A worker's fair share of the host's memory (the cgroup's limit where there is one), at least
    WORKER_MIN_RSS_BOUND_MB; None where the host's memory cannot be read."""
    from cuda_agent.synth.memory import memory_limit_mb

    limit = memory_limit_mb()
    return None if limit is None else round(max(WORKER_MIN_RSS_BOUND_MB, limit / max(1, workers)))


def quotas(num: int, mix: dict) -> dict[str, int]:
    """Largest-remainder rounding of num * share, so the quotas sum to num exactly."""
    total = sum(mix.values())
    raw = {c: num * mix[c] / total for c in mix}
    q = {c: math.floor(v) for c, v in raw.items()}
    for c in sorted(raw, key=lambda c: (-(raw[c] - q[c]), CLASSES.index(c) if c in CLASSES else 99)):
        if sum(q.values()) >= num:
            break
        q[c] += 1
    return q


class _Journal:
    """Append-only JSONL with fsync per record; a torn last line (crash mid-write) is skipped."""

    def __init__(self, path: Path):
        self.path = path
        self.records: list[dict] = []
        if path.is_file():
            for line in path.read_text().splitlines():
                try:
                    self.records.append(json.loads(line))
                except json.JSONDecodeError:
                    break
            # Rewrite without the torn tail so later appends start on a clean line.
            good = "".join(json.dumps(r) + "\n" for r in self.records)
            if good != path.read_text():
                path.write_text(good)
        self._f = open(path, "a")

    def append(self, record: dict) -> None:
        self.records.append(record)
        self._f.write(json.dumps(record) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()


@dataclass
class _Class:
    name: str
    quota: int
    max_attempts: int
    next_j: int = 0
    accepted: list = field(default_factory=list)    # (j, id)
    in_flight: int = 0
    pending: list = field(default_factory=list)     # candidates passed static checks, not yet filtered
    deduper: Deduper = field(default_factory=Deduper)
    settled_deficit: bool = False

    @property
    def need(self) -> int:
        return self.quota - len(self.accepted) - self.in_flight

    @property
    def exhausted(self) -> bool:
        return self.next_j >= self.max_attempts and not self.pending

    @property
    def done(self) -> bool:
        return len(self.accepted) >= self.quota or (self.exhausted and self.in_flight == 0)


def load_catalog(work: Path, include_transformers: bool) -> Catalog:
    path = work / "catalog.json"
    if path.is_file():
        return Catalog.from_dict(json.loads(path.read_text()))
    catalog = build_catalog(include_transformers=include_transformers)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(catalog.to_dict()))
    tmp.replace(path)
    return catalog


class Pipeline:
    def __init__(self, config: SynthConfig, composer=None, pool_factory=None):
        self.cfg = config.resolved()
        # before anything is written or crawled (the catalog alone takes a minute), as the command does
        why = kernelbench_problem(Path(self.cfg.kernelbench) if self.cfg.kernelbench else None, self.cfg.decontaminate)
        if why:
            raise ValueError(why)
        self.out = Path(self.cfg.out)
        self.work = self.out / "work"
        self.work.mkdir(parents=True, exist_ok=True)
        self._check_config()
        self.catalog = load_catalog(self.work, self.cfg.include_transformers)
        self.ops = self.catalog.by_name()
        self.profile = PROFILES[self.cfg.profile]
        self.llm = composer
        if self.cfg.composer == "llm" and self.llm is None:
            from cuda_agent.synth.llm import LLMComposer

            self.llm = LLMComposer.from_env(self.catalog, self.cfg.llm_model, self.cfg.llm_base_url)
        self.pool_factory = pool_factory
        self.refs = self._references()
        self.mix_used = self._mix()
        self.classes = {c: _Class(c, q, int(self.cfg.max_attempts_factor * q) + 20)
                        for c, q in quotas(self.cfg.num, self.mix_used).items()}
        self.candidates = _Journal(self.work / "candidates.jsonl")
        self.results = _Journal(self.work / "results.jsonl")
        # tasks a stopped run left running, with the time they had run: a resumed run counts it
        # against the timeout, so a task longer than a part ends as `timeout` instead of running
        # again from nothing in every part
        self.interrupted = _Journal(self.work / "interrupted.jsonl")
        self.spent: dict[str, float] = {}
        self.by_id: dict[str, dict] = {}
        self.deficits: dict[str, tuple[int, str]] = {}   # class -> (tasks handed over, heir class)
        self.busy_tries: Counter = Counter()   # candidate id -> times it found the device full
        self._replay()

    # -- setup ---------------------------------------------------------------------------------
    def _check_config(self) -> None:
        path = self.work / "config.json"
        mine = self.cfg.fingerprint()
        if path.is_file():
            theirs = json.loads(path.read_text())
            if theirs != mine:
                diff = sorted(k for k in mine if mine.get(k) != theirs.get(k))
                raise ValueError(f"{self.out} holds a run with other settings ({', '.join(diff)}); "
                                 "use another --out, or the same settings to resume")
        else:
            path.write_text(json.dumps(mine, indent=2))

    def _references(self) -> list:
        if not self.cfg.decontaminate:
            return []
        return dc.kernelbench_trees(self.cfg.kernelbench, cache_dir=self.work)

    def _mix(self) -> dict:
        mix = {str(k): float(v) for k, v in self.cfg.mix.items() if float(v) > 0}
        unknown = set(mix) - set(CLASSES)
        if unknown:
            raise ValueError(f"unknown mix classes {sorted(unknown)} (use 1..5 and transformers)")
        if "transformers" in mix and not self.catalog.blocks:
            mix.pop("transformers")   # not installed: its share goes to the others, pro rata
        return mix

    def _replay(self) -> None:
        """Rebuild the state from the journals (no-op on a fresh run)."""
        done = {r["id"]: r for r in self.results.records}
        for rec in self.interrupted.records:
            self.spent[rec["id"]] = max(self.spent.get(rec["id"], 0.0), rec["seconds"])
        for rec in self.candidates.records:
            self.by_id[rec["id"]] = rec
            cls = self.classes.get(rec["class"])
            if cls is None:
                continue
            cls.next_j = max(cls.next_j, rec["j"] + 1)
            if rec.get("exact_key"):
                cls.deduper.add(rec["id"], rec["exact_key"], rec["near_key"])
            if rec["status"] == "queued":
                res = done.get(rec["id"])
                if res is None:
                    cls.pending.append(rec)
                elif res["ok"]:
                    cls.accepted.append((rec["j"], rec["id"]))
        for cls in self.classes.values():
            cls.pending.sort(key=lambda r: r["j"])
            cls.accepted.sort()
            self._settle(cls)

    # -- static stages (main process) ------------------------------------------------------------
    def _compose(self, cls: _Class, j: int) -> dict:
        rng = random.Random(f"{self.cfg.seed}:{cls.name}:{j}")
        ident = f"{'hf' if cls.name == 'transformers' else 'op' + cls.name}-{j:05d}"
        rec = {"id": ident, "class": cls.name, "j": j}
        try:
            if cls.name == "transformers":
                from cuda_agent.synth.hf_blocks import BlockSpec, compose_block

                blocks = [BlockSpec(**b) for b in self.catalog.blocks]
                spec = compose_block(blocks, rng, self.cfg.profile)
                rec.update(kind="block", spec=spec, ops=[spec["block"]["name"]],
                           families=[spec["block"]["family"]], data_source="transformers")
            elif self.llm is not None:
                code, ops = self.llm.compose(int(cls.name), rng)
                rec.update(kind="code", code=code, ops=ops,
                           families=[self.ops[o].family if o in self.ops else "other" for o in ops],
                           data_source=f"torch#{len(ops)}")
            else:
                spec = compose_chain(self.catalog, int(cls.name), rng, self.profile)
                rec.update(kind="chain", spec=spec.to_dict(), ops=spec.ops,
                           families=[self.ops[o].family for o in spec.ops],
                           data_source=f"torch#{len(spec.ops)}")
            code = render_candidate(rec, self.ops)
        except ComposeError as exc:
            rec.update(status="dropped", stage="compose", reason="compose_failed", detail=str(exc))
            return rec
        except Exception as exc:  # noqa: BLE001 - a composer bug must not stop the run
            rec.update(status="dropped", stage="compose", reason="compose_failed",
                       detail=f"{type(exc).__name__}: {exc}")
            return rec
        return self._static_checks(cls, rec, code)

    def _static_checks(self, cls: _Class, rec: dict, code: str) -> dict:
        from cuda_agent.tasks import Task, TaskError

        try:
            Task(rec["id"], code).check_syntax()
            tree = dc.tree_of(code)
        except (TaskError, SyntaxError) as exc:
            rec.update(status="dropped", stage="compose", reason="invalid_source", detail=str(exc))
            return rec
        reason, ek, nk, first = cls.deduper.check(rec["id"], code, tree)
        rec.update(exact_key=ek, near_key=nk)
        if reason:
            rec.update(status="dropped", stage="dedupe", reason=reason, detail=f"repeats {first}")
            return rec
        if self.refs:
            match = dc.nearest_kernelbench(code, self.refs, self.cfg.similarity_threshold)
            rec.update(kb_similarity=match.similarity, kb_nearest=match.nearest)
            if match.contaminated:
                rec.update(status="dropped", stage="decontaminate", reason="kernelbench_similar",
                           detail=f"similarity {match.similarity} to {match.nearest}")
                return rec
        rec.update(status="queued")
        return rec

    def _next_candidate(self, cls: _Class) -> dict | None:
        while cls.pending or cls.next_j < cls.max_attempts:
            if cls.pending:
                return cls.pending.pop(0)
            j = cls.next_j
            cls.next_j += 1
            rec = self._compose(cls, j)
            self.candidates.append(rec)
            self.by_id[rec["id"]] = rec
            if rec["status"] == "queued":
                return rec
        return None

    # -- deficits: a class that cannot fill its quota hands the rest to the largest class -----
    def _settle(self, cls: _Class) -> None:
        if cls.settled_deficit or not cls.done or len(cls.accepted) >= cls.quota:
            return
        cls.settled_deficit = True
        deficit = cls.quota - len(cls.accepted)
        heirs = [c for c in self.classes.values() if not c.exhausted and c.name != "transformers" and c is not cls]
        if heirs:
            heir = max(heirs, key=lambda c: (c.quota, -CLASSES.index(c.name)))
            heir.quota += deficit
            heir.max_attempts += int(self.cfg.max_attempts_factor * deficit)
            cls.quota -= deficit
            self.deficits[cls.name] = (deficit, heir.name)

    # -- filters (worker processes) --------------------------------------------------------------
    def _filter_config(self, pool) -> dict:
        cfg = self.cfg
        threads = 1 if cfg.backend == "cpu" else 4
        return FilterConfig(backend=cfg.backend, window_ms=tuple(cfg.window_ms), max_rescales=cfg.max_rescales,
                            draws=cfg.draws, min_varying_fraction=cfg.min_varying_fraction,
                            compile=cfg.compile, warmup=cfg.warmup, iters=cfg.iters, seed=cfg.seed,
                            threads=threads, catalog_path=str(self.work / "catalog.json"),
                            sharing=self._sharing(pool)).to_dict()

    def _sharing(self, pool) -> int:
        """Filter workers per device: on cuda the workers spread over the GPUs (`_make_pool`); under Ray
        the pool says how many tasks share a GPU (`RayPool.sharing`)."""
        if self.cfg.backend != "cuda":
            return 1
        if getattr(pool, "sharing", None):
            return pool.sharing
        import torch

        return max(1, -(-self.cfg.workers // max(1, torch.cuda.device_count())))

    def _worker_env(self, cores: int | None = None) -> dict:
        """The filter workers' environment: torch.compile's Triton builds get the host's cores shared
        among the workers (by default each worker would start a pool of compile processes as large as
        the host's cores, up to 32: dozens of workers oversubscribe the host many times over). Under
        Ray the workers' hosts are not this one: one compile thread each. CPU workers run one thread."""
        if self.cfg.ray_address:
            threads = 1
        else:
            cores = cores or len(os.sched_getaffinity(0))
            threads = max(1, min(MAX_COMPILE_THREADS, cores // max(1, self.cfg.workers)))
        env = {"TORCHINDUCTOR_COMPILE_THREADS": str(threads)}
        return env if self.cfg.backend == "cuda" else {"OMP_NUM_THREADS": "1", **env}

    def _make_pool(self):
        if self.pool_factory is not None:
            return self.pool_factory(run_filters, self.cfg.workers, self.cfg.task_timeout_s)
        recycling = dict(max_tasks=self.cfg.worker_max_tasks or None, max_rss_mb=self.cfg.worker_max_rss_mb or None)
        if self.cfg.ray_address:
            from cuda_agent.synth.workers import RayPool

            return RayPool(run_filters, self.cfg.workers, self.cfg.task_timeout_s, self.cfg.ray_address,
                           gpu=self.cfg.backend == "cuda", env=self._worker_env(), **recycling)
        from cuda_agent.synth.workers import ProcessPool

        env = self._worker_env()
        if self.cfg.backend == "cuda":
            import torch

            from cuda_agent.env.infra.devices import physical_gpu

            ngpu = max(1, torch.cuda.device_count())
            return ProcessPool(run_filters, self.cfg.workers, self.cfg.task_timeout_s,   # one GPU per worker
                               env_for_slot=lambda i: {"CUDA_VISIBLE_DEVICES": physical_gpu(i % ngpu), **env},
                               **recycling)
        return ProcessPool(run_filters, self.cfg.workers, self.cfg.task_timeout_s, env_for_slot=lambda i: env,
                           **recycling)

    def _record(self, result: dict) -> None:
        rec = self.by_id[result["id"]]
        cls = self.classes[rec["class"]]
        cls.in_flight -= 1
        if result["reason"] == DEVICE_BUSY and self.busy_tries[rec["id"]] < MAX_BUSY_TRIES:
            self.busy_tries[rec["id"]] += 1   # not journalled: a resumed run tries it afresh
            cls.pending.append(rec)
            return
        result = {**result, "at": round(time.time(), 2)}   # when it came back: the run's rate over time
        self.results.append(result)
        if result["ok"]:
            cls.accepted.append((rec["j"], rec["id"]))
            cls.accepted.sort()
        self._settle(cls)

    def _pick_class(self) -> _Class | None:
        """The unfinished class furthest from its quota (ties: fixed class order)."""
        open_ = [c for c in self.classes.values() if c.need > 0 and not c.exhausted]
        if not open_:
            return None
        return max(open_, key=lambda c: (c.need / max(c.quota, 1), -CLASSES.index(c.name)))

    def run(self) -> dict:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        pool = fcfg = None
        workers_memory: dict = {}
        progress = Progress(TextColumn("[bold]synth[/]"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("{task.fields[status]}"), TimeElapsedColumn(),
                            disable=not self.cfg.progress, transient=False)
        try:
            with progress:
                bar = progress.add_task("synth", total=self.cfg.num, status="")
                while True:
                    if pool is None and any(c.need > 0 and not c.exhausted for c in self.classes.values()):
                        pool = self._make_pool()
                        fcfg = self._filter_config(pool)
                    while pool is not None and pool.free():
                        cls = self._pick_class()
                        if cls is None:
                            break
                        rec = self._next_candidate(cls)
                        if rec is None:
                            self._settle(cls)
                            continue
                        cls.in_flight += 1
                        spent = self.spent.get(rec["id"], 0.0)
                        if spent >= self.cfg.task_timeout_s:
                            self._record(failure(rec["id"], "timeout",
                                                 f"ran {spent:.0f} s in earlier runs, stopped each time before it "
                                                 f"finished (timeout {self.cfg.task_timeout_s:.0f} s)"))
                            continue
                        pool.submit(rec["id"], {"config": fcfg, "candidate": rec}, spent_s=spent)
                    if pool is None or pool.busy() == 0:
                        if self._pick_class() is None:
                            break
                        continue
                    for _key, result in pool.wait(0.5):
                        self._record(result)
                    accepted = sum(min(len(c.accepted), c.quota) for c in self.classes.values())
                    progress.update(bar, completed=accepted,
                                    status=f"candidates {len(self.candidates.records)}, "
                                           f"filtered {len(self.results.records)}")
        finally:
            if pool is not None:
                for key, seconds in getattr(pool, "running_seconds", list)():
                    self.interrupted.append({"id": key, "seconds": round(seconds, 1), "at": round(time.time(), 2)})
                workers_memory = getattr(pool, "memory_summary", dict)()   # a test's pool may have none
                pool.shutdown()
            self.candidates.close()
            self.results.close()
            self.interrupted.close()
        return {**self.write(), **workers_memory}

    # -- output ------------------------------------------------------------------------------------
    def selected(self) -> list[dict]:
        results = {r["id"]: r for r in self.results.records if r["ok"]}
        rows = []
        for name in CLASSES:
            cls = self.classes.get(name)
            if cls is None:
                continue
            for j, ident in cls.accepted[:cls.quota]:
                rec, res = self.by_id[ident], results[ident]
                rows.append({
                    "name": f"synth/{ident}", "code": res["code"], "ops": list(rec["ops"]),
                    "data_source": rec["data_source"], "eager_ms": res["eager_ms"],
                    "compile_ms": res.get("compile_ms"), "families": list(rec["families"]),
                    "batch": res.get("batch"), "output_shape": res.get("output_shape"),
                    "kb_similarity": rec.get("kb_similarity"), "kb_nearest": rec.get("kb_nearest"),
                    "backend": self.cfg.backend, "seed": self.cfg.seed, "id": ident,
                    "device": res.get("device"), "torch": res.get("torch"),   # where its times were taken
                })
        return rows

    def write(self) -> dict:
        import pyarrow as pa
        import pyarrow.parquet as pq

        from cuda_agent.synth.datasheet import write_datasheet
        from cuda_agent.tasks import load_dataset

        rows = self.selected()
        jsonl = self.out / "tasks.jsonl"
        tmp = jsonl.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        tmp.replace(jsonl)
        parquet = self.out / "tasks.parquet"
        table = pa.Table.from_pylist(rows, schema=_schema()) if rows else _schema().empty_table()
        pq.write_table(table, str(parquet) + ".tmp")
        os.replace(str(parquet) + ".tmp", parquet)
        # Every written task must load with the environment's loader, from both files.
        for path in (jsonl, parquet):
            tasks = load_dataset(path)
            assert [t.code for t in tasks] == [r["code"] for r in rows], f"{path} does not round-trip"
            for t in tasks:
                t.check_syntax()
        summary = write_datasheet(self.out, self.cfg, self.catalog, self.candidates.records,
                                  self.results.records, rows, self.mix_used, dict(self.deficits))
        return summary


def _schema():
    import pyarrow as pa

    return pa.schema([
        ("name", pa.string()), ("code", pa.string()), ("ops", pa.list_(pa.string())),
        ("data_source", pa.string()), ("eager_ms", pa.float64()), ("compile_ms", pa.float64()),
        ("families", pa.list_(pa.string())), ("batch", pa.int64()), ("output_shape", pa.list_(pa.int64())),
        ("kb_similarity", pa.float64()), ("kb_nearest", pa.string()), ("backend", pa.string()),
        ("seed", pa.int64()), ("id", pa.string()), ("device", pa.string()), ("torch", pa.string()),
    ])


def synthesize(config: SynthConfig, composer=None, pool_factory=None) -> dict:
    """Run (or resume) a synthesis into `config.out`; returns the datasheet's summary numbers."""
    return Pipeline(config, composer=composer, pool_factory=pool_factory).run()
