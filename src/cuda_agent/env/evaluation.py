"""One evaluation: compile, verify, profile, reward, across a judge and a candidate process.

    judge (reference)                    candidate (solution)
    draw inputs, reference outputs  ||   build kernels, import model_new.py      (in parallel)
                                         run each input set -> outputs file
    compare outputs file            <-
                                         time the solution, re-check last output
    compare re-check output         <-
    time eager / torch.compile (cached per task, device and settings)

The caller's process never runs candidate code; every failure becomes an `EvalResult` with the
phase that failed and a message an LLM can act on.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
import traceback
from pathlib import Path
from typing import Callable

from cuda_agent.env.config import EvalConfig
from cuda_agent.env.isolation import Worker, start_worker
from cuda_agent.env.protocol import ChildDied, ChildTimeout, ForgedMessage
from cuda_agent.env.result import EvalError, EvalResult, Timing
from cuda_agent.env.reward import continuous_reward, milestone_reward
from cuda_agent.env.verify import FP32_PRECISION_WARNING
from cuda_agent.tasks.solution import Solution
from cuda_agent.tasks.task import Task, TaskError, strip_reference_model


MAX_BUILD_REQUESTS = 16  # load_inline/load calls one candidate may ask the harness to build


class _Failed(Exception):
    """Ends an evaluation early with a structured error."""

    def __init__(self, phase: str, message: str, rule: str | None = None):
        super().__init__(message)
        self.error = EvalError(phase, message, rule)


def job_root() -> str | None:
    """RAM-backed /dev/shm when it has room (outputs travel through files), else the temp dir."""
    shm = Path("/dev/shm")
    try:
        if shm.is_dir() and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free > (8 << 30):
            return str(shm)
    except OSError:
        pass
    return None


def evaluate(task: Task, solution: Solution, config: EvalConfig | None = None, *,
             gpu: int | None = None, stop_after: str | None = None,
             progress: Callable[[str], None] | None = None) -> EvalResult:
    """Evaluate `solution` against `task`. Never raises for anything the solution or task does.

    `stop_after="compile"` only builds and imports the solution (in the sandboxed candidate process,
    no reference needed); `stop_after="verify"` skips timing. The agent's compile/verify commands.
    `progress(text)` is told what is happening as it starts (e.g. for a spinner on a terminal).
    """
    if stop_after not in (None, "compile", "verify"):
        raise ValueError("stop_after must be None, 'compile' or 'verify'")
    from cuda_agent.env import spares

    config = config or EvalConfig()
    backend = config.resolved_backend()
    result = EvalResult(task=task.name, backend=backend)
    key = (backend, gpu, config.sandbox, str(config.cache_dir))
    pair = spares.take(key) if config.prewarm else None
    job_dir = pair.job_dir if pair else Path(tempfile.mkdtemp(prefix="cuda-agent-job-", dir=job_root()))
    evaluation = _Evaluation(task, solution, config, backend, job_dir, gpu, result, stop_after)
    evaluation.say = progress or (lambda text: None)
    if pair:
        evaluation.judge, evaluation.candidate = pair.judge, pair.candidate
    if config.prewarm:  # the next evaluation's workers start while this one runs
        spares.prepare(key, lambda folder: _start_pair(config, backend, folder, gpu), job_root(), int(config.prewarm))
    try:
        evaluation.run()
    except _Failed as failure:
        result.error = failure.error
        result.correct = False  # whatever passed before, a rejection at any phase stands
    except Exception:  # a bug of ours: still a structured answer, never a crashed caller
        result.error = EvalError("internal", traceback.format_exc()[-3000:])
    finally:
        evaluation.shutdown()
        shutil.rmtree(job_dir, ignore_errors=True)
    _score(result, partial=stop_after is not None)
    return result


def _start_worker(role: str, config: EvalConfig, backend: str, job_dir: Path, gpu: int | None) -> Worker:
    """A judge, or a candidate inside the sandbox (raises SandboxUnavailable when it cannot be)."""
    from cuda_agent.env.sandbox import sandbox_prefix

    wrap = sandbox_prefix(config, job_dir) if role == "candidate" else None
    return start_worker(role, job_dir, backend, gpu, wrap)


def _start_pair(config: EvalConfig, backend: str, job_dir: Path, gpu: int | None):
    from cuda_agent.env.spares import WorkerPair

    return WorkerPair(job_dir, _start_worker("judge", config, backend, job_dir, gpu),
                      _start_worker("candidate", config, backend, job_dir, gpu))


def _score(result: EvalResult, partial: bool = False) -> None:
    if result.task_error:
        result.reward = None
        return
    if partial:  # a compile- or verify-only run earns no milestone; failures still score -1
        result.reward = None if result.error is None else -1
        return
    if result.correct and result.kernel_ms:
        if result.eager_ms:
            result.speedup_vs_eager = result.eager_ms / result.kernel_ms
        if result.compile_ms:
            result.speedup_vs_compile = result.compile_ms / result.kernel_ms
    result.reward = milestone_reward(result.correct, result.kernel_ms, result.eager_ms, result.compile_ms)
    result.reward_continuous = continuous_reward(result.correct, result.kernel_ms, result.compile_ms)


class _Evaluation:
    def __init__(self, task, solution, config, backend, job_dir, gpu, result, stop_after=None):
        self.task, self.solution, self.config, self.stop_after = task, solution, config, stop_after
        self.backend, self.job_dir, self.gpu, self.result = backend, job_dir, gpu, result
        self.judge: Worker | None = None
        self.candidate: Worker | None = None
        self.build_requests = 0
        self.phase = "task"
        self.clock = time.monotonic()
        import secrets

        base = config.seed if config.seed is not None else secrets.randbelow(1 << 31)
        self.cfg = dict(config.to_dict(), iters=config.timed_iters(backend), seed=base,
                        seeds=[base + i for i in range(config.num_correct_trials)],
                        timing_seed=secrets.randbelow(1 << 31) + (1 << 31))  # never a verification seed
        self.result.seeds = self.cfg["seeds"]

    # -- plumbing --------------------------------------------------------------------------

    def _lap(self, phase: str) -> None:
        now = time.monotonic()
        self.result.phase_seconds[phase] = round(self.result.phase_seconds.get(phase, 0.0) + now - self.clock, 3)
        self.clock = now

    def _ask(self, worker: Worker, timeout: float, phase: str) -> dict:
        """Wait for a worker's answer; a timeout or death becomes a failure of `phase`. Build
        requests from the candidate (load_inline) are served on the way, each with a fresh clock."""
        try:
            while True:
                message = worker.channel.receive(timeout)
                if worker.role != "candidate" or message.get("request") != "build":
                    return message
                worker.channel.send(**self._serve_build(message))
        except ChildTimeout:
            what = "the task's reference" if worker.role == "judge" else "the solution"
            raise _Failed("task" if worker.role == "judge" else phase,
                          f"{what} timed out after {timeout:g} s in the {phase} phase "
                          "(an infinite loop or a hung kernel?)", rule="timeout") from None
        except ForgedMessage as forged:
            raise _Failed("task" if worker.role == "judge" else phase,
                          f"{forged}: the solution wrote to the harness's own channel", rule="protocol-forgery") from None
        except ChildDied as died:
            tail = worker.log_tail()
            phase = "task" if worker.role == "judge" else phase
            raise _Failed(phase, f"{died} during the {phase} phase" + (f"; its last output:\n{tail}" if tail else ""),
                          rule="crash") from None

    def _build(self, name: str, files: dict, **flags):
        from cuda_agent.env.compiler import build_extension

        return build_extension(name, files, self.backend, Path(self.config.cache_dir) / "build",
                               max_jobs=self.config.max_jobs, timeout=self.config.timeout_compile, **flags)

    def _serve_build(self, request: dict) -> dict:
        """Compile for the candidate (its load_inline / load calls): the shared build cache is
        written by the harness only. Sources and flags are checked like any build input."""
        from cuda_agent.env.compiler import BuildError

        self.build_requests += 1
        if self.build_requests > MAX_BUILD_REQUESTS:
            return {"ok": False, "message": f"more than {MAX_BUILD_REQUESTS} extension builds in one evaluation"}
        files, name = request.get("files"), request.get("name")
        flags = {k: request.get(k) for k in ("extra_cflags", "extra_cuda_cflags", "extra_ldflags", "extra_include_paths")}
        if not (isinstance(name, str) and isinstance(files, dict)
                and all(isinstance(k, str) and isinstance(v, str) for k, v in files.items())
                and all(v is None or (isinstance(v, list) and all(isinstance(f, str) for f in v)) for v in flags.values())):
            return {"ok": False, "message": "malformed build request"}
        try:
            return {"ok": True, "path": str(self._build(name, files, **flags).path)}
        except BuildError as exc:
            return {"ok": False, "message": exc.summary}

    def shutdown(self) -> None:
        for worker in (self.candidate, self.judge):
            if worker is not None:
                if worker.role == "candidate":
                    self.result.log = worker.log_tail()
                worker.kill()

    def _start(self, role: str) -> Worker:
        from cuda_agent.env.sandbox import SandboxUnavailable

        try:
            return _start_worker(role, self.config, self.backend, self.job_dir, self.gpu)
        except SandboxUnavailable as exc:
            raise _Failed("internal", str(exc), rule="sandbox") from None

    def _wait_ready(self, worker: Worker) -> None:
        role = worker.role
        try:
            worker.wait_ready()
        except (ChildDied, ChildTimeout) as exc:
            log = (self.job_dir / f"{role}.log")
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise _Failed("internal", f"could not start the {role} worker: {exc}\n{tail}")

    # -- the evaluation --------------------------------------------------------------------

    def run(self) -> None:
        try:
            self.task.check_syntax()
            inputs_code = strip_reference_model(self.task.code)
        except TaskError as exc:
            raise _Failed("task", str(exc))
        self._static_check()
        solution_dir = self.solution.write(self.job_dir / "solution")

        # All at once: the workspace's kernels build here (never in the candidate, which only reads
        # the build cache) while the workers start and the judge computes the reference.
        # A compile-only run needs no reference.
        building = None
        if self.solution.kernel_files:
            from concurrent.futures import ThreadPoolExecutor

            from cuda_agent.env.compiler import BuildError, header_ready

            try:
                first = not header_ready(self.backend, Path(self.config.cache_dir) / "build")
            except BuildError:
                first = False   # the build itself reports the broken toolchain
            self.say("building kernels" + (" (precompiling torch headers first: once per machine, about a minute)"
                                           if first else ""))
            pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="build")
            building = pool.submit(self._build, "cuda_extension", self._kernel_sources())
            pool.shutdown(wait=False)
        need_judge = self.stop_after != "compile"
        if self.candidate is None:  # not handed a pre-started pair
            self.judge = self._start("judge") if need_judge else None
            self.candidate = self._start("candidate")
        if need_judge:
            self._wait_ready(self.judge)
            self.judge.channel.send(task_code=self.task.code, task_name=self.task.name, backend=self.backend,
                                    config=self.cfg, job_dir=str(self.job_dir))
        prebuilt = {}
        if building is not None:
            from cuda_agent.env.compiler import BuildError

            try:
                prebuilt["cuda_extension"] = str(building.result().path)
            except BuildError as exc:
                self.phase = "compile"
                self._lap("compile")
                raise _Failed("compile", exc.summary) from None
        self._wait_ready(self.candidate)
        self.candidate.channel.send(task_inputs_code=inputs_code, solution_dir=str(solution_dir),
                                    backend=self.backend, config=self.cfg, job_dir=str(self.job_dir),
                                    prebuilt=prebuilt)

        if need_judge:
            self.say("computing the reference outputs")
            reference = self._ask(self.judge, self.config.timeout_reference, "task")
            if not reference["ok"]:
                raise _Failed("task", f"the task's reference failed: {reference['message']}")
            self.result.device = reference["device"]

        self.phase = "compile"
        built = self._ask(self.candidate, self.config.timeout_compile, "compile")
        self._lap("compile")
        if not built["ok"]:
            raise _Failed("compile", built["message"])
        self.result.compiled = True
        if self.stop_after == "compile":
            return

        self._verify()
        if self.stop_after == "verify":
            return
        self._profile()
        self.candidate.kill()
        self._baselines()

    def _kernel_sources(self) -> dict[str, str]:
        from cuda_agent.tasks.solution import KERNEL_SUFFIXES

        return {path: text for path, text in sorted(self.solution.kernel_files.items())
                if path.endswith(KERNEL_SUFFIXES)}

    def _static_check(self) -> None:
        from cuda_agent.env.static_check import check_native_source, check_source

        findings = []
        for path, text in self.solution.files.items():
            if path.endswith(".py"):
                findings += check_source(text, path)
            else:
                findings += check_native_source(text, path)
            # single-file solutions carry their C++ inside Python strings
            if path.endswith(".py") and ("load_inline" in text or "#include" in text):
                findings += check_native_source(text, path)
        self.result.warnings += [f.describe() for f in findings if not f.reject]
        rejections = [f for f in findings if f.reject]
        if rejections and self.config.guard:
            self._lap("compile")
            raise _Failed("compile", "the solution was rejected before running:\n" +
                          "\n".join(f.describe() for f in rejections[:5]), rule=f"static:{rejections[0].rule}")

    def _verify(self) -> None:
        self.say("verifying")
        self.phase = "verify"
        self.candidate.channel.send(cmd="verify")
        for _ in self.result.seeds:
            out = self._ask(self.candidate, self.config.timeout_verify, "verify")
            if not out["ok"]:
                raise _Failed("verify", out["message"], out.get("rule"))
            self.result.weights = out["weights"]
            verdict = self._compare(out["path"], out["trial"])
            if not verdict["ok"]:
                raise _Failed("verify", f"wrong output on input set {out['trial']} "
                                        f"(seed {self.result.seeds[out['trial']]}): {verdict['message']}",
                              rule="correctness")
            self.candidate.channel.send(cmd="continue")
            relative = verdict.get("fp32_relative_error", 0.0)
            if relative > FP32_PRECISION_WARNING and not any("precision" in w for w in self.result.warnings):
                self.result.warnings.append(
                    f"precision: a float32 output is off by {relative:.1e} of its scale, more than float32 "
                    "arithmetic explains (computed in bf16/fp16 or TF32?)")
        self.result.correct = True
        self._lap("verify")

    def _compare(self, path: str, trial: int | None = None, seed: int | None = None) -> dict:
        if seed is not None:
            self.judge.channel.send(cmd="compare", path=path, seed=seed)
        else:
            self.judge.channel.send(cmd="compare", path=path, trial=trial)
        verdict = self._ask(self.judge, self.config.timeout_verify, "verify")
        self.result.max_abs_error.append(verdict["max_abs_error"])
        Path(path).unlink(missing_ok=True)
        return verdict

    def _profile(self) -> None:
        self.say("timing the solution")
        self.phase = "profile"
        self.candidate.channel.send(cmd="profile", iters=self.cfg["iters"])
        out = self._ask(self.candidate, self.config.timeout_profile, "profile")
        if not out["ok"]:
            self.result.correct = False
            raise _Failed("profile", out["message"], out.get("rule"))
        for seed, path in out["rechecks"]:  # timed, spot-checked and post-timing calls, each its own draw
            verdict = self._compare(path, seed=seed)
            self.result.max_abs_error.pop()
            if not verdict["ok"]:
                self.result.correct = False
                raise _Failed("profile", "an output produced while or after timing is wrong for its inputs, "
                                         f"although verification passed (results cached or work skipped?): "
                                         f"{verdict['message']}", rule="recheck-after-timing")
        timing = Timing(**out["timing"])
        self.result.timings["kernel"] = timing
        self.result.kernel_ms = timing.median_ms
        self._lap("profile")

    def _baselines(self) -> None:
        if not self.config.baselines:
            return
        want_compile = self.config.compile_baseline
        cache_file = self._baseline_cache_file()
        cached = json.loads(cache_file.read_text()) if cache_file.exists() else None
        if cached is None or (want_compile and "compile" not in cached and "compile_error" not in cached):
            self.say("timing the eager and torch.compile baselines (once per task)")
            self.judge.channel.send(cmd="baselines", compile=want_compile)
            cached = self._ask(self.judge, self.config.timeout_reference + self.config.timeout_profile, "profile")
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache_file.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps(cached))
            os.replace(tmp, cache_file)
        self.result.timings["eager"] = Timing(**cached["eager"])
        self.result.eager_ms = cached["eager"]["median_ms"]
        if want_compile and "compile" in cached:
            self.result.timings["compile"] = Timing(**cached["compile"])
            self.result.compile_ms = cached["compile"]["median_ms"]
        elif want_compile:
            self.result.warnings.append(f"torch.compile baseline unavailable: {cached.get('compile_error')}")
        self._lap("baselines")

    def _baseline_cache_file(self) -> Path:
        import torch

        # input values do not change timings: the (secret) seed is not part of the key
        key = {k: self.cfg[k] for k in ("warmup", "iters", "flush_l2")}
        key.update(task=self.task.digest, backend=self.backend, device=self.result.device, torch=torch.__version__)
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
        return Path(self.config.cache_dir) / "baselines" / f"{digest}.json"
