"""End to end: outputs, loader round-trip, datasheet, determinism, resumption, config guard."""

from __future__ import annotations

import json
import time

import pyarrow.parquet as pq
import pytest

from cuda_agent.synth.pipeline import SynthConfig, quotas, synthesize
from cuda_agent.tasks import load_dataset
from tests.synth.conftest import InlinePool, seeded_folder

FAST = dict(backend="cpu", window_ms=(0.005, 50.0), compile=False, progress=False, include_transformers=False)


def config(out, kernelbench, **kw):
    return SynthConfig(**{**FAST, "num": 8, "out": str(out), "kernelbench": str(kernelbench), **kw})


def codes(out):
    return [json.loads(line)["code"] for line in (out / "tasks.jsonl").read_text().splitlines()]


def test_quotas_follow_the_published_mix():
    q = quotas(6000, {"1": 3.4, "2": 83.8, "3": 7.6, "4": 2.8, "5": 1.2, "transformers": 1.2})
    assert q == {"1": 204, "2": 5028, "3": 456, "4": 168, "5": 72, "transformers": 72}
    assert sum(quotas(7, {"1": 1, "2": 1, "3": 1}).values()) == 7


@pytest.fixture(scope="module")
def reference(tmp_path_factory, catalog_file, kernelbench):
    """One uninterrupted run of 8 tasks (seed 0), shared by the tests that only read it: its folder and
    summary."""
    from tests.synth.conftest import InlinePool

    out = seeded_folder(tmp_path_factory.mktemp("reference") / "out", catalog_file)
    return out, synthesize(config(out, kernelbench), pool_factory=InlinePool)


def test_outputs_load_with_the_environment_loader(reference):
    seeded_out, summary = reference
    assert summary["written"] == 8
    rows = [json.loads(line) for line in (seeded_out / "tasks.jsonl").read_text().splitlines()]
    table = pq.read_table(seeded_out / "tasks.parquet").to_pylist()
    assert [r["code"] for r in rows] == [r["code"] for r in table]
    for r in rows:
        assert r["data_source"] == f"torch#{len(r['ops'])}"
        assert r["eager_ms"] > 0 and r["kb_similarity"] <= 0.9
    assert sum(r["data_source"] == "torch#2" for r in rows) >= 6
    tasks = load_dataset(seeded_out / "tasks.parquet")
    assert len(tasks) == 8 and all(t.check_syntax() is None for t in tasks)
    sheet = (seeded_out / "datasheet.md").read_text()
    for heading in ("## Counts per stage", "## Drops by reason", "## Chain-length mix", "## Operator families",
                    "## Runtime", "Random operators excluded", "## Beside the published description",
                    "## The five published filters", "| eager / torch.compile times |"):
        assert heading in sheet
    checked = (seeded_out / "decontamination.csv").read_text().splitlines()
    assert checked[0] == "id,kb_nearest,kb_similarity,dropped" and len(checked) > 8
    assert (seeded_out / "runtime_hist.png").stat().st_size > 1000


def test_same_seed_same_tasks_and_resume_after_interrupt(reference, kernelbench, inline_pool, tmp_path, catalog_file):
    seeded_out, _ = reference   # the reference run, uninterrupted
    # Same seed, interrupted after 3 filtered tasks (as by Ctrl-C), then resumed.
    other = seeded_folder(tmp_path / "other", catalog_file)
    with pytest.raises(KeyboardInterrupt):
        synthesize(config(other, kernelbench), pool_factory=lambda *a: inline_pool(*a, fail_after=3))
    results = (other / "work" / "results.jsonl").read_text().splitlines()
    assert len(results) == 3 and not (other / "tasks.jsonl").exists()
    # A torn line (killed mid-write) is tolerated.
    with open(other / "work" / "candidates.jsonl", "a") as f:
        f.write('{"id": "op2-9')
    synthesize(config(other, kernelbench), pool_factory=inline_pool)
    ids = [json.loads(line)["id"] for line in (other / "work" / "results.jsonl").read_text().splitlines()]
    assert ids[:3] == [json.loads(line)["id"] for line in results]      # finished work kept ...
    assert len(ids) == len(set(ids))                                     # ... and never redone
    assert codes(other) == codes(seeded_out)                             # deterministic for the seed
    # A finished run resumed again does nothing new.
    before = (other / "work" / "results.jsonl").read_text()
    synthesize(config(other, kernelbench), pool_factory=inline_pool)
    assert (other / "work" / "results.jsonl").read_text() == before


def test_time_a_stopped_run_spent_on_a_task_counts_when_it_resumes(kernelbench, tmp_path, catalog_file):
    """A task longer than a part of the build must not start from nothing in every part (it never
    ends, and the build stalls): the time it ran before the stop counts against the timeout."""
    out = seeded_folder(tmp_path / "out", catalog_file)
    with pytest.raises(KeyboardInterrupt):
        synthesize(config(out, kernelbench, task_timeout_s=100.0),
                   pool_factory=lambda *a: InlinePool(*a, fail_after=2, running_for=60.0))
    stopped = [json.loads(x) for x in (out / "work" / "interrupted.jsonl").read_text().splitlines()]
    assert [r["seconds"] for r in stopped] == [60.0]
    key = stopped[0]["id"]
    # a second part: the task goes on with its 60 s counted, and is stopped again at 120 s
    pools = []

    def second_part(*a):
        pools.append(InlinePool(*a, fail_after=0, running_for=60.0))
        return pools[-1]

    with pytest.raises(KeyboardInterrupt):
        synthesize(config(out, kernelbench, task_timeout_s=100.0), pool_factory=second_part)
    assert pools[0].spent[key] == 60.0
    # the third part records it as a timeout without running it again, and goes on with the others
    pools.clear()
    synthesize(config(out, kernelbench, task_timeout_s=100.0),
               pool_factory=lambda *a: pools.append(InlinePool(*a)) or pools[-1])
    assert key not in pools[0].spent
    results = {r["id"]: r for r in map(json.loads, (out / "work" / "results.jsonl").read_text().splitlines())}
    assert results[key]["reason"] == "timeout" and not results[key]["ok"]
    assert "ran 120 s in earlier runs" in results[key]["detail"]
    assert (out / "tasks.jsonl").exists()


def test_another_seed_gives_other_tasks(seeded_out, kernelbench, inline_pool, tmp_path, catalog_file):
    synthesize(config(seeded_out, kernelbench, num=4), pool_factory=inline_pool)
    other = seeded_folder(tmp_path / "seed1", catalog_file)
    synthesize(config(other, kernelbench, num=4, seed=1), pool_factory=inline_pool)
    assert codes(other) != codes(seeded_out)


def test_resuming_with_other_settings_is_refused(seeded_out, kernelbench, inline_pool):
    synthesize(config(seeded_out, kernelbench, num=2), pool_factory=inline_pool)
    with pytest.raises(ValueError, match="other settings"):
        synthesize(config(seeded_out, kernelbench, num=2, seed=5), pool_factory=inline_pool)
    # A larger --num with the same settings extends the run.
    summary = synthesize(config(seeded_out, kernelbench, num=4), pool_factory=inline_pool)
    assert summary["written"] == 4


def test_decontamination_needs_kernelbench_and_says_so_before_any_work(tmp_path, monkeypatch):
    """From Python as from the command line: refused at once with the reason, before the catalog crawl
    (a minute or more), the LLM composer or anything written to `out`."""
    import cuda_agent.synth.pipeline as pipeline

    def no_crawl(**_):
        raise AssertionError("the catalog was built before KernelBench was looked for")

    monkeypatch.setattr(pipeline, "build_catalog", no_crawl)
    monkeypatch.delenv("CUDA_AGENT_KERNELBENCH", raising=False)   # the user's own setting must not matter
    out = tmp_path / "out"
    with pytest.raises(ValueError, match="decontamination needs KernelBench: pass --kernelbench DIR .*--no-decontaminate"):
        synthesize(SynthConfig(**{**FAST, "num": 1, "out": str(out), "kernelbench": None}))
    empty = tmp_path / "nowhere"
    with pytest.raises(ValueError, match=f"no KernelBench problems \\(levelN/\\*.py\\) under {empty}"):
        synthesize(SynthConfig(**{**FAST, "num": 1, "out": str(out), "kernelbench": str(empty), "composer": "llm"}))
    assert not out.exists()


@pytest.mark.slow
def test_real_process_pool_with_torch_compile(seeded_out, kernelbench):
    """The real thing: spawned workers, torch.compile filter, the default CPU window (two tasks for
    two workers: each torch.compile costs seconds, and more tasks say nothing more about the pool)."""
    cfg = SynthConfig(num=2, out=str(seeded_out), kernelbench=str(kernelbench), backend="cpu", workers=2,
                      progress=False, include_transformers=False, mix={"2": 1.0})
    summary = synthesize(cfg)
    assert summary["written"] == 2
    rows = [json.loads(line) for line in (seeded_out / "tasks.jsonl").read_text().splitlines()]
    assert all(r["compile_ms"] > 0 and 0.1 <= r["eager_ms"] <= 10.0 for r in rows)
    journal = [json.loads(line) for line in (seeded_out / "work" / "results.jsonl").read_text().splitlines()]
    assert len({r.get("pid") for r in journal} - {None}) >= 1
    assert all(0 <= time.time() - r["at"] < 600 for r in journal)   # when each came back


@pytest.mark.slow
def test_written_tasks_evaluate_in_the_environment_with_their_reference(seeded_out, kernelbench, inline_pool):
    """The environment takes a written task as is: its reference gives the eager and compile baselines."""
    env = pytest.importorskip("cuda_agent.env")
    from cuda_agent.tasks import Solution

    synthesize(config(seeded_out, kernelbench, num=1, mix={"2": 1.0}), pool_factory=inline_pool)
    task = load_dataset(seeded_out / "tasks.jsonl")[0]
    # The reference itself as the candidate (guard off: it is plain PyTorch, not custom kernels).
    solution = Solution.from_code(task.code.replace("class Model(nn.Module)", "class ModelNew(nn.Module)"))
    result = env.evaluate(task, solution, env.EvalConfig(backend="cpu", guard=False, iters=5, warmup=1))
    assert result.error is None, result.error
    assert result.correct and result.eager_ms > 0 and result.compile_ms > 0


def test_a_candidate_that_found_the_device_full_is_tried_again_not_dropped(kernelbench, tmp_path, catalog_file):
    """Workers share a GPU: an out-of-memory error while others held it is not the task's fault."""
    from cuda_agent.synth import pipeline
    from cuda_agent.synth.filters import DEVICE_BUSY
    from tests.synth.conftest import InlinePool

    tries: dict[str, int] = {}

    def busy_at_first(job):   # each candidate finds the device full twice, then runs
        cid = job["candidate"]["id"]
        tries[cid] = tries.get(cid, 0) + 1
        if tries[cid] <= 2:
            return {"id": cid, "ok": False, "reason": DEVICE_BUSY, "detail": "full", "seconds": 0.0}
        return pipeline.run_filters(job)

    out = seeded_folder(tmp_path / "out", catalog_file)
    summary = synthesize(config(out, kernelbench, num=3), pool_factory=lambda fn, *a: InlinePool(busy_at_first, *a))
    assert summary["written"] == 3
    journal = [json.loads(x) for x in (out / "work" / "results.jsonl").read_text().splitlines()]
    assert journal and all(r["reason"] != DEVICE_BUSY for r in journal)
    assert max(tries.values()) == 3

    def always_busy(job):
        return {"id": job["candidate"]["id"], "ok": False, "reason": DEVICE_BUSY, "detail": "full", "seconds": 0.0}

    stuck = seeded_folder(tmp_path / "stuck", catalog_file)
    synthesize(config(stuck, kernelbench, num=1, max_attempts_factor=1.0), pool_factory=lambda fn, *a: InlinePool(always_busy, *a))
    journal = [json.loads(x) for x in (stuck / "work" / "results.jsonl").read_text().splitlines()]
    assert journal and all(r["reason"] == DEVICE_BUSY for r in journal)


def test_the_datasheet_says_where_each_task_was_timed(reference, kernelbench):
    """Rows carry their device and torch; the datasheet counts the places from the records, so a
    build continued on other machines (or records from before they were kept) is told as it was."""
    import platform
    import shutil

    import torch

    seeded_out, _ = reference
    rows = pq.read_table(seeded_out / "tasks.parquet").to_pylist()
    assert {(r["device"], r["torch"]) for r in rows} == {(f"CPU ({platform.machine()})", torch.__version__)}
    sheet = (seeded_out / "datasheet.md").read_text()
    assert f"| timed on | CPU ({platform.machine()}), torch {torch.__version__}: 8 tasks |" in sheet

    other = seeded_out.parent / "retimed"
    shutil.copytree(seeded_out, other)
    journal = other / "work" / "results.jsonl"
    records = [json.loads(line) for line in journal.read_text().splitlines()]
    passed = [r for r in records if r["ok"]]
    passed[0].update(device="NVIDIA H100 80GB HBM3", torch="2.11.0+cu130", sharing=12)
    for r in passed[1:3]:
        for key in ("device", "torch", "sharing"):
            r.pop(key)
    journal.write_text("".join(json.dumps(r) + "\n" for r in records))
    from cuda_agent.synth.pipeline import Pipeline

    Pipeline(config(other, kernelbench)).write()
    sheet = (other / "datasheet.md").read_text()
    assert f"| timed on | CPU ({platform.machine()}), torch {torch.__version__}: 5 tasks |" in sheet
    assert "| timed on | not recorded: 2 tasks |" in sheet
    assert "| timed on | NVIDIA H100 80GB HBM3, torch 2.11.0+cu130: 1 tasks |" in sheet   # cpu: no sharing


def test_filter_workers_per_gpu_follow_the_pool(monkeypatch):
    """What the datasheet records as sharing: the local workers spread over this machine's GPUs, or
    what the Ray pool says (the driver may see no GPU)."""
    from types import SimpleNamespace

    import torch

    from cuda_agent.synth.pipeline import Pipeline

    def sharing(pool=None, **kw):   # the method on a pipeline holding only its resolved config
        config = SynthConfig(**{**FAST, "num": 1, "out": "unused", "workers": 12, **kw}).resolved()
        return Pipeline._sharing(SimpleNamespace(cfg=config), pool)

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    assert sharing(backend="cuda") == 3
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    assert sharing(SimpleNamespace(sharing=6), backend="cuda", ray_address="auto") == 6
    assert sharing() == 1   # cpu


def test_filter_workers_share_the_host_s_cores_for_torch_compile():
    """Each local filter worker's torch.compile builds get the host's cores over the workers (12 on
    64 cores: 5 each; 48: 1), never inductor's default of up to 32 each; Ray's workers run elsewhere: 1."""
    from types import SimpleNamespace

    from cuda_agent.synth.pipeline import Pipeline

    def env(cores, **kw):
        config = SynthConfig(**{**FAST, "num": 1, "out": "unused", "backend": "cuda", **kw}).resolved()
        return Pipeline._worker_env(SimpleNamespace(cfg=config), cores)

    assert env(64, workers=12) == {"TORCHINDUCTOR_COMPILE_THREADS": "5"}
    assert env(64, workers=48)["TORCHINDUCTOR_COMPILE_THREADS"] == "1"
    assert env(64, workers=100)["TORCHINDUCTOR_COMPILE_THREADS"] == "1"
    assert env(256, workers=2)["TORCHINDUCTOR_COMPILE_THREADS"] == "32"
    assert env(64, workers=12, ray_address="auto")["TORCHINDUCTOR_COMPILE_THREADS"] == "1"
    assert env(64, workers=12, backend="cpu") == {"OMP_NUM_THREADS": "1", "TORCHINDUCTOR_COMPILE_THREADS": "5"}


def test_the_workers_memory_is_in_the_run_s_records_not_in_the_tasks_or_the_datasheet(kernelbench, tmp_path,
                                                                                      catalog_file):
    """Each filter result carries its worker's memory (results.jsonl: where a run's memory is read
    from later); the written tasks and the datasheet do not, and the run's summary has the pool's."""
    from functools import partial

    from cuda_agent.synth.workers import PEAK_FIELD, RSS_FIELD, run_measured
    from tests.synth.conftest import InlinePool

    class MeasuredPool(InlinePool):   # in this process, reporting memory as a ProcessPool worker does
        def __init__(self, fn, *args):
            super().__init__(partial(run_measured, fn), *args)

        def memory_summary(self):
            return {"worker_peak_rss_mb": 321.0, "workers_recycled": 2}

    out = seeded_folder(tmp_path / "out", catalog_file)
    summary = synthesize(config(out, kernelbench, num=2), pool_factory=MeasuredPool)
    journal = [json.loads(x) for x in (out / "work" / "results.jsonl").read_text().splitlines()]
    assert journal and all(r[RSS_FIELD] > 0 and r[PEAK_FIELD] > 0 for r in journal)
    rows = [json.loads(line) for line in (out / "tasks.jsonl").read_text().splitlines()]
    columns = pq.read_table(out / "tasks.parquet").column_names
    assert len(rows) == 2 and not any(k.startswith("worker_") for k in [*rows[0], *columns])
    assert "worker_" not in (out / "datasheet.md").read_text()
    assert summary["worker_peak_rss_mb"] == 321.0 and summary["workers_recycled"] == 2


def test_filter_workers_are_replaced_after_100_tasks_or_past_half_their_share_of_memory(monkeypatch):
    """The defaults: 48 workers on a 512 GiB host may each keep 10.7 GiB; never less than 8 GiB; 0 is off."""
    from cuda_agent.synth import memory

    def resolved(limit_gib, **kw):
        monkeypatch.setattr(memory, "memory_limit_mb", lambda: limit_gib * 1024.0)
        return SynthConfig(**{**FAST, "num": 1, "out": "unused", **kw}).resolved()

    c = resolved(512, workers=48)
    assert c.worker_max_tasks == 100 and c.worker_max_rss_mb == round(512 * 1024 / 48)
    assert resolved(64, workers=64).worker_max_rss_mb == 8192
    off = resolved(512, workers=48, worker_max_tasks=0, worker_max_rss_mb=0)
    assert off.worker_max_tasks == 0 and off.worker_max_rss_mb == 0
