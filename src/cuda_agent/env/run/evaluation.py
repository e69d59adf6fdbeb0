"""One evaluation: compile, verify, profile, reward, across a judge and a candidate process.

    harness (this process)            judge (task's code only)         candidate (sandboxed solution)
    static checks; builds, link check  reference model, initial weights
                                       torch.compile (when not stored)  loads the harness's builds
    for every call of the schedule (the device held alone only while something is timed: locks.py):
      seed (+ structured transform) ->                               -> draws, runs ModelNew (timed),
                                                                        samples its output at once
                                    <- same draw: reference (timed) <- output samples (or a file)
      compare, check rules, time

The schedule: verification calls (the task's draws, plus structured sets in the strict protocol),
then warm-up, then timed calls with structured spot checks and a few empty calls (the harness's
own overhead, for the clock cross-check) at random places. The candidate learns each call's seed
only when the call starts, every call runs under the same guard and has its output checked, and
the eager and torch.compile references are timed on the same draws in between: the speedup is a
ratio of paired measurements. The caller's process never runs candidate code; every failure
becomes an `EvalResult` with the phase that failed and a message an LLM can act on.
"""

from __future__ import annotations

import os
import random
import secrets
import shutil
import statistics
import tempfile
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Callable

from cuda_agent.env.config import EvalConfig
from cuda_agent.env.builds.handed import hand
from cuda_agent.env.measure.hold import call_times, floor_precise
from cuda_agent.env.infra.isolation import Worker, box_of, start_worker
from cuda_agent.env.workers import messages as msg
from cuda_agent.env.workers.protocol import ChildDied, ChildTimeout, ForgedMessage
from cuda_agent.env.result import EvalError, EvalResult, Timing
from cuda_agent.env.reward import MARGIN, NEEDED, milestone_reward, reward_from_speedups
from cuda_agent.env.measure.stats import median_precision
from cuda_agent.env.rules.verify import FP32_PRECISION_WARNING, share
from cuda_agent.tasks.solution import Solution, missing_model_new
from cuda_agent.tasks.task import Task, TaskError, strip_reference_model

MAX_BUILD_REQUESTS = 16    # load_inline/load calls one candidate may ask the harness to build
NULL_CALLS = 12            # empty calls for the clock cross-check
JUDGE_BATCH = 8            # timed calls the judge takes at once, beside the candidate's next ones
CLOCK_ALLOWANCE_MS = 3.0   # per call: what the harness's own work may differ between empty and real calls
MIN_CALL_MS = 1e-4         # a call measured from outside, less the overhead, is never counted as free


@lru_cache(maxsize=256)
def _too_large(task: Task, backend: str, trials: int) -> str | None:
    """Whether the task's tensors cannot fit this machine (measured on the meta device, once per task)."""
    from cuda_agent.env.infra.capacity import too_large

    return too_large(task, backend, trials)


def _footprint(task: Task) -> dict | None:
    """The task's one input set and one output in bytes (on the meta device, once per task), by which
    the judge sizes the memory it asks for in its set-up (reserve.py)."""
    from cuda_agent.tasks.footprint import estimate_footprint

    found = estimate_footprint(task)
    return None if found is None else {"input_bytes": found.input_bytes, "output_bytes": found.output_bytes}


class _Failed(Exception):
    """Ends an evaluation early with a structured error."""

    def __init__(self, phase: str, message: str, rule: str | None = None):
        super().__init__(message)
        self.error = EvalError(phase, message, rule)


def job_root() -> str | None:
    """RAM-backed /dev/shm when it has room (outputs travel through files), else the temp dir."""
    import os

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
    from cuda_agent.env.infra import spares

    config = config or EvalConfig()
    backend = config.resolved_backend()
    result = EvalResult(task=task.name, backend=backend, protocol=config.protocol)
    key = (backend, gpu, config.sandbox, str(config.cache_dir))
    pair = spares.take(key) if config.prewarm else None
    job_dir = pair.job_dir if pair else Path(tempfile.mkdtemp(prefix="cuda-agent-job-", dir=job_root()))
    evaluation = _Evaluation(task, solution, config, backend, job_dir, gpu, result, stop_after,
                             progress or (lambda text: None))
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


def _start_worker(role: str, config: EvalConfig, backend: str, job_dir: Path, gpu: int | None,
                  staging_fd: int | None = None) -> Worker:
    """A judge, or a candidate inside the sandbox (raises SandboxUnavailable when it cannot be)."""
    from cuda_agent.env.infra.sandbox import sandbox_prefix

    box = box_of(job_dir)
    box.mkdir(parents=True, exist_ok=True)
    wrap = sandbox_prefix(config, box) if role == "candidate" else None
    return start_worker(role, job_dir, backend, gpu, wrap, staging_fd)


def _start_pair(config: EvalConfig, backend: str, job_dir: Path, gpu: int | None):
    from cuda_agent.env.infra.spares import WorkerPair

    with _staging() as fd:
        judge = _start_worker("judge", config, backend, job_dir, gpu, fd)
        try:
            return WorkerPair(job_dir, judge, _start_worker("candidate", config, backend, job_dir, gpu, fd))
        except BaseException:
            judge.kill()
            raise


@contextmanager
def _staging():
    """The staging file a pair of workers shares (transfer.create_staging), ours only until both have it."""
    from cuda_agent.env.workers.transfer import create_staging

    try:
        fd = create_staging()
    except (OSError, AttributeError):   # no sealed memory files here: outputs go through files
        fd = None
    try:
        yield fd
    finally:
        if fd is not None:
            os.close(fd)


def _score(result: EvalResult, partial: bool = False) -> None:
    if result.task_error:
        result.reward = None
        return
    if partial:  # a compile- or verify-only run earns no milestone; failures still score -1
        result.reward = None if result.error is None else -1
        return
    if result.correct and result.kernel_ms:
        # the profile phase sets paired speedups (medians of per-call ratios); times alone otherwise
        if result.eager_ms and result.speedup_vs_eager is None:
            result.speedup_vs_eager = result.eager_ms / result.kernel_ms
        if result.compile_ms and result.speedup_vs_compile is None:
            result.speedup_vs_compile = result.compile_ms / result.kernel_ms
    if result.correct and result.speedup_vs_eager is not None:
        result.reward = reward_from_speedups(True, result.speedup_vs_eager, result.speedup_vs_compile)
    else:
        result.reward = milestone_reward(result.correct, result.kernel_ms, result.eager_ms, result.compile_ms)
    result.reward_continuous = (result.speedup_vs_compile or 0.0) if result.correct else 0.0


# -- the schedule ------------------------------------------------------------------------------------


@dataclass
class Call:
    kind: str                    # verify | warmup | null | timed | spot
    seed: int
    transform: str | None = None
    index: int = 0


def _fresh_seed() -> int:
    return secrets.randbelow(1 << 62)


def verification_calls(seeds: list[int], strict: bool) -> list[Call]:
    from cuda_agent.env.workers.draws import TRANSFORMS

    calls = [Call("verify", seed) for seed in seeds]
    if strict:
        calls += [Call("verify", _fresh_seed(), transform) for transform in TRANSFORMS]
    return calls


def timing_calls(warmup: int, iters: int, strict: bool, null_calls: int, rng: random.Random) -> list[Call]:
    """Warm-up, then timed calls; structured spot checks (strict) and empty calls at random places.
    The counts vary a little from evaluation to evaluation, so no solution can count on them."""
    warm = [Call("warmup", _fresh_seed()) for _ in range(warmup + rng.randrange(4))]
    body = [Call("timed", _fresh_seed()) for _ in range(iters + rng.randrange(max(2, iters // 10)))]
    extras = [Call("null", 0) for _ in range(null_calls)]
    if strict:
        extras += [Call("spot", _fresh_seed(), "spikes") for _ in range(max(2, iters // 20))]
    for extra in extras:
        body.insert(rng.randrange(len(body) + 1), extra)
    return warm + body


# -- one evaluation ----------------------------------------------------------------------------------


class _Evaluation:
    def __init__(self, task, solution, config, backend, job_dir, gpu, result, stop_after, say):
        from cuda_agent.env.infra.locks import DeviceLock

        self.task, self.solution, self.config, self.stop_after = task, solution, config, stop_after
        self.backend, self.job_dir, self.gpu, self.result, self.say = backend, job_dir, gpu, result, say
        self.box = box_of(job_dir)
        self.judge: Worker | None = None
        self.candidate: Worker | None = None
        self.build_requests = 0
        self.clock = self.started = time.monotonic()
        self.lock = DeviceLock.of(backend, gpu)
        self.strict = config.protocol == "strict"
        self.index = 0
        base = config.seed if config.seed is not None else secrets.randbelow(1 << 31)
        self.cfg = replace(config, seed=base)   # what the workers get: the settings, the seed decided
        self.seeds = [base + i for i in range(config.num_correct_trials)]
        self.result.seeds = self.seeds
        self.rounds: list[dict] = []       # what each timed call measured
        self.null_walls: list[float] = []
        self.compile_mode = "off"          # off | paired | stored
        self.stored = None                 # (key, entry) when a stored compile time is used
        # CUDA_AGENT_TRACE_CALLS=1: where the harness's side of the rounds waits, summed per step
        # (phase_seconds "trace.*"), beside the workers' own per-call traces in the log
        self.trace: dict[str, float] | None = {} if os.environ.get("CUDA_AGENT_TRACE_CALLS") == "1" else None

    # -- plumbing --------------------------------------------------------------------------

    def _lap(self, phase: str) -> None:
        now = time.monotonic()
        self.result.phase_seconds[phase] = round(self.result.phase_seconds.get(phase, 0.0) + now - self.clock, 3)
        self.clock = now
        for step, seconds in (self.trace or {}).items():
            self.result.phase_seconds[f"trace.{step}"] = round(seconds, 3)

    def _traced(self, step: str, since: float) -> float:
        """Adds the time since `since` to `step` of the trace (when tracing); returns now."""
        now = time.perf_counter()
        if self.trace is not None:
            self.trace[step] = self.trace.get(step, 0.0) + now - since
        return now

    def _ask(self, worker: Worker, timeout: float, phase: str) -> dict:
        """Wait for a worker's answer; a timeout or death becomes a failure of `phase`. Build
        requests from the candidate (load_inline) are served on the way, each with a fresh clock."""
        try:
            while True:
                message = worker.channel.receive(timeout)
                if worker.role != "candidate":
                    return message
                if message.get("request") != "build":
                    worker.stop(wait=self.backend == "cpu")   # nothing of it runs until its next command
                    return message
                worker.send(msg.BuildReply(**self._serve_build(message)))
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

    def _build(self, name: str, files: dict, **flags) -> Path:
        """Build for the solution (harness side), checking what the library links against before it is
        published (a refused one is deleted); returns the copy handed to the candidate (handed.py)."""
        from cuda_agent.env.builds.compiler import BuildError, build_extension
        from cuda_agent.env.rules.symbols import ToolMissing, check_library, toolchain_imports

        build_cache = Path(self.config.cache_dir) / "build"
        exempt = toolchain_imports(self.backend, str(build_cache)) if self.config.guard else None

        def check(so: Path, objects) -> None:
            try:
                findings = check_library(so, objects, exempt)
            except ToolMissing as exc:
                raise BuildError(str(exc)) from None
            if findings:
                raise _LinkRefused("the built library imports what a solution may not use:\n" +
                                   "\n".join(f.describe() for f in findings[:12]))

        report = build_extension(name, files, self.backend, build_cache, max_jobs=self.config.max_jobs,
                                 timeout=self.config.timeout_compile, check=check if self.config.guard else None,
                                 **flags)
        return hand(report.path, self.box)

    def _serve_build(self, request: dict) -> dict:
        """Compile for the candidate (its load_inline / load calls): the shared build cache is
        written by the harness only. Sources and flags are checked like any build input."""
        from cuda_agent.env.builds.compiler import BuildError

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
            return {"ok": True, "path": str(self._build(name, files, **flags))}
        except _LinkRefused as refused:
            self.link_refusal = str(refused)
            return {"ok": False, "message": str(refused)}
        except BuildError as exc:
            return {"ok": False, "message": exc.summary}

    def shutdown(self) -> None:
        self._close_memory()
        for worker in (self.candidate, self.judge):
            if worker is not None:
                if worker.role == "candidate":
                    self.result.log = worker.log_tail()
                worker.kill()

    def _start(self, role: str, staging_fd: int | None = None) -> Worker:
        from cuda_agent.env.infra.sandbox import SandboxUnavailable

        try:
            return _start_worker(role, self.config, self.backend, self.job_dir, self.gpu, staging_fd)
        except SandboxUnavailable as exc:
            from cuda_agent.env.infra.doctor import Machine, check_sandbox

            fix = check_sandbox(Machine(), self.config.sandbox).line()
            raise _Failed("internal", f"{exc}\n{fix}", rule="sandbox") from None

    def _wait_ready(self, worker: Worker) -> None:
        try:
            worker.wait_ready()
        except (ChildDied, ChildTimeout) as exc:
            raise _Failed("internal", f"could not start the {worker.role} worker: {exc}\n{worker.log_tail()}")
        if self.trace is not None:   # how long the worker took to start (a spare's head start is beside it)
            for step, seconds in worker.startup.items():
                self.trace[f"startup.{worker.role}.{step}"] = seconds
            self.trace[f"startup.{worker.role}.taken_at"] = self.started - worker.spawned

    # -- the evaluation --------------------------------------------------------------------

    def run(self) -> None:
        try:
            self.task.check_syntax()
            inputs_code = strip_reference_model(self.task.code)
        except TaskError as exc:
            raise _Failed("task", str(exc))
        problem = missing_model_new(self.solution)
        if problem:
            raise _Failed("compile", problem)
        self._static_check()
        too_big = _too_large(self.task, self.backend, self.config.num_correct_trials)
        if too_big:
            raise _Failed("task", too_big, rule="too-large")
        solution_dir = self.solution.write(self.box / "solution")
        guard_lib, kernels = self._start_builds()
        need_judge = self.stop_after != "compile"
        begun = time.perf_counter()
        if self.candidate is None:  # not handed a pre-started pair
            with _staging() as fd:
                self.judge = self._start("judge", fd) if need_judge else None
                self.candidate = self._start("candidate", fd)
        if need_judge:   # the judge sets up (the task's model, its first run) while the candidate loads
            self._send_judge_job()
        begun = self._traced("compile.judge_job", begun)
        prebuilt = {}
        try:
            guard_path = str(hand(guard_lib.result(), self.box))   # the harness's libraries too: handed
            if kernels is not None:
                prebuilt["cuda_extension"] = str(kernels.result())
        except _LinkRefused as refused:
            self._task_first(need_judge)
            raise _Failed("compile", str(refused), rule="native-symbol") from None
        except Exception as exc:
            from cuda_agent.env.builds.compiler import BuildError

            if not isinstance(exc, BuildError):
                raise
            self._task_first(need_judge)
            raise _Failed("compile", exc.summary) from None
        begun = self._traced("compile.builds", begun)
        self._wait_ready(self.candidate)
        begun = self._traced("compile.candidate_ready", begun)
        self.link_refusal = None
        self.candidate.send(msg.CandidateJob(task_inputs_code=inputs_code, solution_dir=str(solution_dir),
                                             backend=self.backend, config=self.cfg, box=str(self.box),
                                             prebuilt=prebuilt, guard_lib=guard_path,
                                             hold_lib=(hold := self._hold_path()) and str(hand(Path(hold), self.box))))
        if need_judge:
            self._start_judge()
            begun = self._traced("compile.judge_setup", begun)
        built = self._ask(self.candidate, self.config.timeout_compile, "compile")
        self._traced("compile.candidate_load", begun)
        self._lap("compile")
        if not built["ok"]:
            rule = built.get("rule") or ("native-symbol" if self.link_refusal else None)
            raise _Failed("compile", built["message"], rule)
        self.result.compiled = True
        if self.stop_after == "compile":
            return
        self._finish_judge_setup()
        self._verify()
        if self.stop_after == "verify":
            return
        self._profile()
        self._baselines()

    def _task_first(self, need_judge: bool) -> None:
        """Before a build's failure is reported: a broken task is reported instead (the judge's answer)."""
        if need_judge:
            self._judge_ready()
        self._lap("compile")

    def _start_builds(self):
        """The guard library and the workspace's kernels build in the harness (never in the candidate,
        which only reads the build cache) while the workers start."""
        from concurrent.futures import ThreadPoolExecutor

        from cuda_agent.env.builds.compiler import BuildError, header_ready
        from cuda_agent.env.rules.guard import build_guard

        build_root = Path(self.config.cache_dir) / "build"
        pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="build")
        guard_lib = pool.submit(build_guard, build_root)
        self.hold_lib = pool.submit(self._hold_library)
        kernels = None
        if self.solution.kernel_files:
            try:
                first = not header_ready(self.backend, build_root)
            except BuildError:
                first = False   # the build itself reports the broken toolchain
            self.say("building kernels" + (" (precompiling torch headers first: once per machine, about a minute)"
                                           if first else ""))
            kernels = pool.submit(self._build, "cuda_extension", self._kernel_sources())
        pool.shutdown(wait=False)
        return guard_lib, kernels

    hold_lib = None   # a future of `_hold_library`'s path, once the builds have started

    def _hold_library(self) -> str | None:
        """The device hold's library (hold.py) when timing on a GPU uses it; None otherwise."""
        from cuda_agent.env.measure.hold import build_hold

        if self.backend != "cuda" or not self.config.hold:
            return None
        return str(build_hold(Path(self.config.cache_dir) / "build"))

    def _hold_path(self) -> str | None:
        from cuda_agent.env.builds.compiler import BuildError

        try:
            return self.hold_lib.result() if self.hold_lib is not None else self._hold_library()
        except BuildError as exc:   # the harness's own helper: ours to fix, never the solution's
            raise _Failed("internal", f"the device hold did not build: {exc.summary}") from None

    def _start_judge_only(self, candidate: bool = True) -> None:
        """The judge's setup without any decision about the baselines (`measure_baselines`, which has no
        `candidate` to hand the model's weights to)."""
        self._send_judge_job(candidate)
        self._judge_ready()

    def _send_judge_job(self, candidate: bool = True) -> None:
        self._wait_ready(self.judge)
        self.judge.channel.send(msg.JudgeJob(task_code=self.task.code, task_name=self.task.name, backend=self.backend,
                                             config=self.cfg, box=str(self.box), save_init=candidate,
                                             lock=str(self.lock.path), hold_lib=self._hold_path(),
                                             footprint=_footprint(self.task), batch=JUDGE_BATCH))

    def _judge_ready(self) -> None:
        """The judge's answer to its job: the task's reference ran."""
        self.say("computing the reference")
        reference = self._ask(self.judge, self.config.timeout_reference, "task")
        if not reference["ok"]:
            raise _Failed("task", f"the task's reference failed: {reference['message']}")
        self.result.device = reference["device"]
        self.output_bytes = reference.get("output_bytes")
        # a call's inputs can go through the pair's staging file (the CPU backend's calls from outside)
        self.inputs_fit = 0 <= (reference.get("input_bytes") or 0) <= (reference.get("slot_bytes") or -1)

    def _start_judge(self) -> None:
        """The judge's answer to the job `_send_judge_job` sent, and the compile baseline's mode."""
        self._judge_ready()
        if self.stop_after is None and self.config.baselines and self.config.compile_baseline:
            self.stored = self._stored_baseline()
            self.compile_mode = "stored" if self.stored and self.config.compile_timing == "stored" else "paired"
            if self.compile_mode == "paired":   # compiles while the candidate loads
                self.judge.channel.send(msg.Compile())
                self.compile_pending = True

    compile_pending = False

    def _finish_judge_setup(self) -> None:
        if self.compile_pending:
            self.say("compiling the torch.compile baseline")
            answer = self._ask(self.judge, self.config.timeout_reference, "profile")
            self.compile_pending = False
            if not answer["ok"]:
                self.compile_error = answer["error"]
                self.compile_mode = "off"
        self.candidate.send(msg.Init(output_bytes=self.output_bytes))
        init = self._ask(self.candidate, self.config.timeout_verify, "verify")
        if not init["ok"]:
            raise _Failed("verify", init["message"], init.get("rule"))
        self.result.weights = init["weights"]
        if self.backend == "cpu":   # inputs from the judge, outputs and times read from outside
            self.outside = self.inputs_fit and bool(init.get("staging")) and self._open_memory()
            if not self.outside:
                self.result.warnings.append("verdicts and times decided inside the solution's process: no staging "
                                            "file, inputs larger than its slots, or no access to the solution's "
                                            "memory here (see docs/verification.md)")

    outside = False   # the CPU backend's calls are decided from outside the candidate (_outside_round)
    inputs_fit = False
    memory = None     # the candidate's memory (outside.Memory), for those

    def _open_memory(self) -> bool:
        from cuda_agent.env.measure.outside import Memory

        try:
            self.memory = Memory(self.candidate.main_pid)
        except OSError:
            return False
        return True

    compile_error: str | None = None
    output_bytes: int | None = None   # the reference's output in a staging slot (the judge's first run)

    def _kernel_sources(self) -> dict[str, str]:
        from cuda_agent.tasks.solution import KERNEL_SUFFIXES

        return {path: text for path, text in sorted(self.solution.kernel_files.items())
                if path.endswith(KERNEL_SUFFIXES)}

    def _static_check(self) -> None:
        from cuda_agent.env.rules.static_check import check_native_source, check_source, native_sources_in_python

        findings = []
        for path, text in self.solution.files.items():
            if path.endswith(".py"):
                findings += check_source(text, path)
                findings += check_native_source(native_sources_in_python(text), path)
            else:
                findings += check_native_source(text, path)
        self.result.warnings += [f.describe() for f in findings if not f.reject]
        rejections = [f for f in findings if f.reject]
        if rejections and self.config.guard:
            self._lap("compile")
            raise _Failed("compile", "the solution was rejected before running:\n" +
                          "\n".join(f.describe() for f in rejections[:5]), rule=f"static:{rejections[0].rule}")

    # -- calls -------------------------------------------------------------------------------

    def _candidate_round(self, call: Call, phase: str, timeout: float) -> dict | None:
        """The candidate's half of a call: its answer, or None for an empty call. The call holds the
        device alone unless it is a verification call (untimed, and told apart by its place anyway);
        its inputs are drawn beside other evaluations' work."""
        self.index += 1
        call.index = self.index
        if self.outside:
            return self._outside_round(call, phase, timeout)
        save = call.kind == "verify"
        asked = time.perf_counter()
        with self.lock.held(shared=True, label=f"harness.{phase}.prepare"):
            asked = self._traced(f"{phase}.lock_shared", asked)
            # the inputs first (drawing them costs more, and varies more, than many kernels take)
            self.candidate.send(msg.Prepare(seed=call.seed, transform=call.transform, save=save))
            ready = self._ask(self.candidate, timeout, phase)
        asked = self._traced(f"{phase}.prepare", asked)
        if not ready["ok"]:
            raise _Failed(phase, ready["message"], ready.get("rule"))
        with self.lock.held(shared=save, label=f"harness.{phase}.{call.kind}") as hold:
            asked = self._traced(f"{phase}.lock_call", asked)
            # the harness's own clock covers the call itself; the CPU backend's measure is the
            # worker's CPU time (`_outside_clock`), a GPU's wall time
            cpu_start = self.candidate.cpu_seconds() if self.backend == "cpu" else None
            start = time.perf_counter()
            sent = time.monotonic()   # on the lock log's clock (diagnosis: CUDA_AGENT_LOG_ROUNDS)
            self.candidate.send(msg.CandidateCall(index=call.index, seed=call.seed, transform=call.transform, save=save,
                                                  null=call.kind == "null", slot=call.index % 2, release=not save))
            out = self._ask(self.candidate, timeout, phase)
            wall_ms = self._outside_clock(start, cpu_start)
            if out.get("timed"):   # timing is over and the device idle: its checks run beside others' work
                hold.share()
                self.candidate.send(msg.Finish())
                out = self._ask(self.candidate, timeout, phase)
            out["sent"] = sent
        asked = self._traced(f"{phase}.call", asked)
        self._check_processes(phase)
        asked = self._traced(f"{phase}.check_processes", asked)
        if not out["ok"]:
            raise _Failed(phase, out["message"], out.get("rule"))
        if call.kind == "null":
            self.null_walls.append(wall_ms)
            return None
        if save and not out.get("staged"):   # its output to the box's file, now that the device is let go
            self.candidate.send(msg.Write(index=call.index))
            written = self._ask(self.candidate, timeout, phase)
            if not written["ok"]:
                raise _Failed(phase, written["message"], written.get("rule"))
            self._traced(f"{phase}.write", asked)
        out["wall_ms"] = wall_ms
        return out

    def _outside_round(self, call: Call, phase: str, timeout: float) -> dict | None:
        """A call on the CPU backend, decided from outside the candidate's process: the judge draws the
        inputs into a staging slot; the candidate, resumed, runs its forward on them and answers where
        its output is; stopped again, its CPU time (all threads) is the call's time and its output is
        read from its memory, at positions drawn now (whole for a verification call). Its own checks
        (the guard's verdict) come after that, on `finish`."""
        from cuda_agent.env.measure.outside import UnreadableOutput, read_samples, write_whole
        from cuda_agent.env.rules.verify import SAMPLES_PER_TENSOR

        save, slot = call.kind == "verify", call.index % 2
        asked = time.perf_counter()
        with self.lock.held(shared=True, label=f"harness.{phase}.prepare"):
            asked = self._traced(f"{phase}.lock_shared", asked)
            self.judge.channel.send(msg.Draw(index=call.index, seed=call.seed, transform=call.transform, slot=slot))
            drawn = self._ask(self.judge, self.config.timeout_reference, "task")
        asked = self._traced(f"{phase}.prepare", asked)
        if "task_error" in drawn:
            raise _Failed("task", f"the task's inputs could not be drawn: {drawn['task_error']}")
        if not drawn["ok"]:
            raise _Failed("internal", drawn["message"])
        if drawn["layout"] is None:   # a structured set this task's inputs do not admit
            self.result.skipped_sets.append(f"{call.transform}: the task's inputs do not admit it")
            return None
        read = None
        with self.lock.held(shared=save, label=f"harness.{phase}.{call.kind}") as hold:
            asked = self._traced(f"{phase}.lock_call", asked)
            cpu_start = self.candidate.cpu_seconds()
            sent = time.monotonic()   # on the lock log's clock (diagnosis: CUDA_AGENT_LOG_ROUNDS)
            self.candidate.send(msg.CandidateCall(index=call.index, seed=call.seed, transform=call.transform, save=save,
                                                  null=call.kind == "null",
                                                  inputs={"slot": slot, "layout": drawn["layout"]}))
            out = self._ask(self.candidate, timeout, phase)
            cpu_end = self.candidate.cpu_seconds()
            if not save:   # the measured part is over: reading and checking go beside others' work
                hold.share()
            if out["ok"] and call.kind != "null":
                try:
                    if save:
                        path = self.job_dir / f"out_{call.index}.bin"
                        read = {"path": str(path), "layout": write_whole(self.memory, out["output"], path)}
                    else:
                        read = {"samples": read_samples(self.memory, out["output"], SAMPLES_PER_TENSOR)}
                except (UnreadableOutput, OSError, ValueError, KeyError, TypeError) as exc:
                    read = exc
            if out["ok"]:
                self.candidate.send(msg.Finish())
                out = self._ask(self.candidate, timeout, phase)
        asked = self._traced(f"{phase}.call", asked)
        self._check_processes(phase)
        self._traced(f"{phase}.check_processes", asked)
        if not out["ok"]:
            raise _Failed(phase, out["message"], out.get("rule"))
        if isinstance(read, Exception):
            raise _Failed(phase, f"the output could not be read from the solution's memory ({read}): return "
                                 "plain CPU tensors or Python numbers", rule="uncomparable-output")
        wall_ms = (cpu_end - cpu_start) * 1e3 if cpu_start is not None and cpu_end is not None else float("nan")
        if call.kind == "null":
            self.null_walls.append(wall_ms)
            return None
        out.update(read, wall_ms=wall_ms, read_outside=True, sent=sent)
        return out

    def _judge_request(self, call: Call, out: dict) -> dict:
        """What the judge gets for one call: the same draw, whether to time the references on it, and
        the candidate's output to compare (its file for a verification call, else its samples)."""
        save = call.kind == "verify"
        timed = call.kind in ("warmup", "timed")
        whole = {"path": str(self.box / f"out_{call.index}.bin"), "layout": out.get("layout")}
        if out.get("read_outside") and save:   # read by the harness into a file of its own
            whole = {"path": out["path"], "layout": out["layout"]}
        elif out.get("staged"):   # in the staging file's slot of the call (transfer.Staging), not in the file
            whole["slot"] = call.index % 2
        return dict(index=call.index, seed=call.seed, transform=call.transform, time=timed,
                    compile=timed and self.compile_mode == "paired",
                    compare=whole if save else {"samples": out["samples"]},
                    # verification's own draws set the spread; later calls' whole comparisons are held to it
                    dependence=self.strict and not call.transform and call.kind != "null")

    def _judged(self, call: Call, phase: str, out: dict, verdict: dict) -> dict | None:
        """The judge's verdict on one call: a rejection raises; a timed call's measures are kept."""
        if "task_error" in verdict:
            raise _Failed("task", f"the task's reference failed on an input set: {verdict['task_error']}")
        if call.kind == "verify":
            (self.box / f"out_{call.index}.bin").unlink(missing_ok=True)
            (self.job_dir / f"out_{call.index}.bin").unlink(missing_ok=True)
        if verdict.get("skipped"):
            self.result.skipped_sets.append(f"{call.transform}: {verdict['skipped']}")
            return None
        if not verdict["ok"]:
            self._reject(call, phase, verdict)
        if call.kind == "timed":
            # each side's device time and its host's time to queue the forward (None: timed unheld);
            # round_times weighs the two
            kernel = out["wall_ms"] if out.get("read_outside") else out["ms"]
            self.rounds.append({"kernel": kernel, "kernel_host": out.get("host_ms"), "wall": out["wall_ms"],
                                "eager": verdict.get("eager_ms"), "eager_host": verdict.get("eager_host_ms"),
                                "compile": verdict.get("compile_ms"), "compile_host": verdict.get("compile_host_ms"),
                                "sent": out.get("sent")})
            if self.backend == "cuda":   # how each side was timed (hold.Timer), as of its last call
                self.result.timer = {"kernel": out.get("timer"), **verdict.get("timers", {})}
        return verdict

    def _reject(self, call: Call, phase: str, verdict: dict) -> None:
        where = f"on input set {call.index}" + (f" (structured: {call.transform})" if call.transform else
                                                f" (seed {call.seed})" if call.kind == "verify" else "")
        if verdict.get("rule"):
            raise _Failed(phase, f"{where}: {verdict['message']}", verdict["rule"])
        if call.transform and verdict.get("nonfinite"):
            raise _Failed(phase, f"wrong output {where}: {verdict['message']}; the reference stays finite on these "
                                 "inputs (scaled or spiked values): compute stably (e.g. subtract the max before exp)",
                          rule="numerically-fragile")
        if call.kind == "verify":
            raise _Failed(phase, f"wrong output {where}: {verdict['message']}", rule="correctness")
        raise _Failed(phase, f"an output produced while timing is wrong for its inputs, although verification "
                             f"passed (results cached, work skipped or approximated?): {verdict['message']}",
                      rule="recheck-after-timing")

    def _outside_clock(self, start: float, cpu_start: float | None) -> float:
        """How long the candidate's call took, measured out of its process's reach: wall time on a GPU;
        on the CPU backend its main thread's CPU time (the kernel's scheduler statistics), which a
        loaded machine's other processes do not inflate. An honest forward's CPU time is at most its
        wall time, which is what its clock reports."""
        cpu_end = self.candidate.cpu_seconds() if self.backend == "cpu" else None
        if cpu_start is not None and cpu_end is not None:
            return (cpu_end - cpu_start) * 1e3
        return (time.perf_counter() - start) * 1e3

    def _check_processes(self, phase: str) -> None:
        if not self.config.guard:
            return
        extras = self.candidate.extra_processes()
        if extras:
            raise _Failed(phase, f"the solution started {len(extras)} process(es) of its own; kernels run in the "
                                 "calling process and finish inside forward", rule="extra-process")

    # -- phases ------------------------------------------------------------------------------

    def _verify(self) -> None:
        self.say("verifying")
        calls = verification_calls(self.seeds, self.strict)
        # each output file goes to the judge while the candidate computes the next one
        pipe = _JudgePipe(self, "verify", batch=1, on_verdict=self._note_accuracy)
        for n, call in enumerate(calls, 1):
            self.say(f"verifying: input set {n} of {len(calls)}")
            pipe.run(call, self.config.timeout_verify)
        pipe.drain()
        self._inputs_kept("verify")
        if self.strict:
            self.judge.channel.send(msg.Dependence())
            message = self._ask(self.judge, self.config.timeout_verify, "verify").get("message")
            if message:
                raise _Failed("verify", message, rule="input-independent")
        self.result.correct = True
        self._lap("verify")

    def _note_accuracy(self, call: Call, verdict: dict) -> None:
        self.result.max_abs_error.append(verdict["max_abs_error"])
        worst = verdict.get("worst")
        if worst and (not self.result.tolerance_used or share(worst) > share(self.result.tolerance_used)):
            self.result.tolerance_used = [float(worst[0]), float(worst[1])]
        relative = verdict.get("fp32_relative_error", 0.0)
        if relative > FP32_PRECISION_WARNING and not any("precision" in w for w in self.result.warnings):
            self.result.warnings.append(
                f"precision: a float32 output is off by {relative:.1e} of its scale, more than float32 "
                "arithmetic explains (computed in bf16/fp16 or TF32?)")

    def _profile(self) -> None:
        self.say("timing the solution" + (" against eager PyTorch" if self.config.baselines else ""))
        rng = random.Random(secrets.randbits(64))
        iters = self.config.timed_iters(self.backend)
        deadline = time.monotonic() + self.config.timeout_profile
        nulls = NULL_CALLS if self.config.clock_check or self.outside else 0   # outside: they measure the overhead
        calls = timing_calls(self.config.warmup, iters, self.strict, nulls, rng)
        pipe = _JudgePipe(self, "profile", batch=JUDGE_BATCH)
        started, done = time.monotonic(), 0
        budget_checked = False
        measured: list[tuple] = []   # the candidate's timed calls so far, (device, host) ms (verdicts come later)
        try:
            while done < len(calls):
                call = calls[done]
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise _Failed("profile", f"timing took longer than {self.config.timeout_profile:g} s",
                                  rule="timeout")
                out = pipe.run(call, min(self.config.timeout_verify, remaining))
                done += 1
                if call.kind == "timed" and out is not None:
                    measured.append((out["wall_ms"] if out.get("read_outside") else out["ms"], out.get("host_ms")))
                    if self._precise_enough(measured, pipe):   # the timed calls left are not needed
                        calls = calls[:done] + [c for c in calls[done:] if c.kind != "timed"]
                if not budget_checked and call.kind == "warmup" and done >= 2:
                    pipe.drain()   # the judge's part of these calls counts too
                    per_call = (time.monotonic() - started) / done
                    if per_call * len(calls) > self.config.profile_budget_s:   # slow calls: fewer timed ones
                        keep = max(5, int(self.config.profile_budget_s / max(per_call, 1e-9)))
                        calls = self._shortened(calls, keep)
                    budget_checked = True
            self.candidate.send(msg.Final())   # its dispatcher's tables checked while the judge finishes
            pipe.drain()
            final = self._ask(self.candidate, self.config.timeout_verify, "profile")
            if not final["ok"]:
                raise _Failed("profile", final["message"], final.get("rule"))
            self._inputs_kept("profile")
            if self.strict:
                self.judge.channel.send(msg.Dependence(later=True))
                message = self._ask(self.judge, self.config.timeout_verify, "profile").get("message")
                if message:
                    raise _Failed("profile", message, rule="input-independent")
        except _Failed:
            self.result.correct = False
            raise
        if self.outside:
            self._less_overhead()
        kernel = Timing.from_samples(round_times(self.rounds, "kernel"))
        self.result.timings["kernel"] = kernel
        self.result.kernel_ms = kernel.median_ms
        self._check_clock()
        self._lap("profile")

    def _less_overhead(self) -> None:
        """CPU calls measured from outside include the harness's own steps in the candidate's process
        (reading the command, viewing the inputs, answering): the median empty call's, taken off each."""
        overhead = statistics.median(self.null_walls) if self.null_walls else 0.0
        for entry in self.rounds:
            entry["kernel"] = max(entry["kernel"] - overhead, MIN_CALL_MS)

    def _inputs_kept(self, phase: str) -> None:
        """The judge's word on the inputs it put into the candidate's slots (the CPU path)."""
        if not self.outside:
            return
        self.judge.channel.send(msg.InputsKept())
        mutated = self._ask(self.judge, self.config.timeout_reference, "task").get("mutated")
        if mutated:
            raise _Failed(phase, f"forward modified its inputs (input set {mutated[0]}); inputs must be left "
                                 "unchanged", rule="input-mutation")

    def _precise_enough(self, measured: list[tuple], pipe: "_JudgePipe") -> bool:
        """Whether the kernel's median time (`measured`: every timed call so far, its device and host
        times), its host floor where that decides (hold.floor_precise) and its median paired speedups
        (the calls judged so far) are all known to within `precision` (`stats`). The calls left are
        then dropped: at most `iters` are timed, at least `min_iters`. The judge's verdicts trail the
        candidate by a batch or two: when the kernel is known well enough and a batch's worth of calls
        awaits the judge, they are judged first."""
        precision = self.config.precision
        if precision is None or len(measured) < self.config.min_iters:
            return False
        devices, hosts = zip(*measured)
        if median_precision(call_times(devices, hosts)) > precision or not floor_precise(devices, hosts, precision):
            return False
        if self.config.baselines and pipe.pending() >= JUDGE_BATCH:
            pipe.drain()
        return not self.config.baselines or self._speedups_precise(precision)

    def _speedups_precise(self, precision: float) -> bool:
        for baseline in ("eager", "compile"):
            ratios = paired_ratios(self.rounds, baseline)
            if ratios and not floor_precise(*side_measures(self.rounds, baseline), precision):
                return False
            if (ratios or baseline == "eager") and median_precision(ratios) > precision:   # inf for a handful
                return False
        return True

    @staticmethod
    def _shortened(calls: list[Call], keep: int) -> list[Call]:
        """The schedule with at most `keep` timed calls (warm-up, spots and empty calls stay)."""
        out, timed = [], 0
        for call in calls:
            if call.kind == "timed":
                timed += 1
                if timed > keep:
                    continue
            out.append(call)
        return out

    def _check_clock(self) -> None:
        """The candidate reports its own call times, and its process could have rewritten its clock.
        The harness's own measure of a call (`_outside_clock`), less its own overhead (the median empty
        call), must account for what was reported, up to the noise of that overhead: a kernel well above
        the noise that claims less than half of it is rejected. Medians, so outliers do not decide.

        The allowance is at least 3 ms: a real call does work an empty one does not (the extension's
        allocations and launches, the guard's bookkeeping, the output checks, the garbage they leave);
        measured on an H100, 1.6 ms more than an empty call for a 128 MB input and a 0.14 ms kernel
        (the draw then inside the measure), and on a loaded 2-core CPU up to 1.8 ms more main-thread
        CPU for a kernel of 0.1-0.6 ms. The inputs are drawn before the harness's clock starts
        (`prepare`), so the overhead is the call's own, not the draw's. Forged clocks are caught on
        kernels of several milliseconds; below that, the link and static checks stand before a
        forged timer."""
        if self.outside or not self.config.clock_check or len(self.null_walls) < 3 or not self.rounds:
            return   # outside: the harness's measure is the time itself
        overhead = statistics.median(self.null_walls)
        noise = statistics.median(abs(w - overhead) for w in self.null_walls)
        allowance = max(CLOCK_ALLOWANCE_MS, 4 * noise)
        implied = statistics.median(r["wall"] for r in self.rounds) - overhead
        reported = statistics.median(round_times(self.rounds, "kernel"))
        if implied - reported > allowance and reported < 0.5 * (implied - allowance):
            raise _Failed("profile", f"a timed call took {implied:.2f} ms by the harness's measure (less its own "
                                     f"overhead) but the solution's process measured {reported:.2f} ms: its clock "
                                     "disagrees with the harness's", rule="clock-disagreement")

    def _kill_candidate(self) -> None:
        """Nothing of the candidate's is alive from here on (its sandbox's PID namespace goes with it)."""
        if os.environ.get("CUDA_AGENT_TRACE_CALLS") == "1":   # the per-call traces, both workers'
            self.result.log = self.candidate.log_tail(400_000) + (self.judge.log_tail(400_000) if self.judge else "")
        else:
            self.result.log = self.candidate.log_tail()
        if os.environ.get("CUDA_AGENT_LOG_ROUNDS") == "1":   # diagnosis: every timed call's measures, in order
            import json

            self.result.log += "\nrounds " + json.dumps({"rounds": self.rounds, "null_walls": self.null_walls}) + "\n"
        self._close_memory()
        self.candidate.kill()
        self.candidate = None

    def _close_memory(self) -> None:
        if self.memory is not None:
            self.memory.close()
            self.memory = None

    def _baselines(self) -> None:
        self._kill_candidate()
        if not self.config.baselines:
            return
        eager = Timing.from_samples(round_times(self.rounds, "eager"))
        self.result.timings["eager"] = eager
        self.result.eager_ms = eager.median_ms
        # Speedups are medians of per-call ratios: candidate and eager ran a moment apart on the same
        # draw, so the GPU's slow clock drift cancels call by call instead of through two medians.
        self.result.speedup_vs_eager = paired_speedup(self.rounds, "eager")
        if self.compile_mode == "paired":
            compile_ms = [t for t in round_times(self.rounds, "compile") if t is not None]
            if compile_ms:
                timing = Timing.from_samples(compile_ms)
                self.result.timings["compile"] = timing
                self.result.compile_ms = timing.median_ms
                self.result.speedup_vs_compile = paired_speedup(self.rounds, "compile")
                self.result.baseline_source = "paired"
            self._store_baseline(eager, self.result.timings.get("compile"))
        elif self.compile_mode == "stored":
            self._use_stored(eager)
        if self.result.compile_ms and self.result.speedup_vs_compile is None and self.result.speedup_vs_eager:
            # stored or re-timed: torch.compile's time relative to eager, applied to the paired speedup
            self.result.speedup_vs_compile = self.result.speedup_vs_eager * self.result.compile_ms / eager.median_ms
        self._note_noise()
        if self.config.compile_baseline and self.result.compile_ms is None:
            error = self.compile_error or (self.stored[1].compile_error if self.stored else None)
            self.result.warnings.append(f"torch.compile baseline unavailable: {error or 'not timed'}")
        self._lap("baselines")

    def _note_noise(self) -> None:
        """A warning where a paired speedup's 95 % interval holds the reward's margin: the milestone
        it decides could have come out the other way on another run."""
        for baseline, name in (("eager", "eager"), ("compile", "torch.compile")):
            ratios = paired_ratios(self.rounds, baseline)
            if len(ratios) < 6:
                continue
            speedup, half = statistics.median(ratios), median_precision(ratios)
            low, high = speedup * (1 - half), speedup * (1 + half)
            if low < NEEDED < high:
                self.result.warnings.append(
                    f"noise: the speedup vs {name} ({speedup:.3f}x, 95 % interval {low:.3f}-{high:.3f}x) holds the "
                    f"{MARGIN:.0%} margin ({NEEDED:.3f}x): the reward was decided within the noise")

    # -- the baseline store ----------------------------------------------------------------------

    def _store_key(self) -> str:
        import torch

        from cuda_agent.env.run.baselines import entry_key, timing_settings

        return entry_key(self.task.digest, self.result.device, torch.__version__,
                         timing_settings(self.config, self.backend))

    def _stored_baseline(self):
        from cuda_agent.env.run.baselines import BaselineStore

        key = self._store_key()
        entry = BaselineStore(self.config.cache_dir).get(key)
        return (key, entry) if entry is not None and (entry.compile or entry.compile_error) else None

    def _store_baseline(self, eager: Timing, compile_timing: Timing | None) -> None:
        import torch

        from cuda_agent.env.run.baselines import BaselineEntry, BaselineStore, timing_settings

        entry = BaselineEntry(task=self.task.name, task_digest=self.task.digest, device=self.result.device,
                              torch=torch.__version__, settings=timing_settings(self.config, self.backend),
                              eager=eager.__dict__, compile=compile_timing.__dict__ if compile_timing else None,
                              compile_error=self.compile_error, code=self.task.code)
        BaselineStore(self.config.cache_dir).put(self._store_key(), entry)

    def _use_stored(self, eager: Timing) -> None:
        """A stored compile time, trusted only while this evaluation's eager time agrees with the
        eager time stored beside it; otherwise torch.compile is timed afresh (paired with eager)."""
        from cuda_agent.env.run.baselines import agrees

        key, entry = self.stored
        if entry.compile is None:
            return
        if agrees(eager.median_ms, entry):
            ratio = eager.median_ms / entry.eager_ms   # the machine's drift since, applied to both
            self.result.compile_ms = entry.compile_ms * ratio
            self.result.timings["compile"] = Timing(**{**entry.compile, "median_ms": self.result.compile_ms})
            self.result.baseline_source = "stored"
            return
        self.say("re-timing the torch.compile baseline (the stored one no longer agrees)")
        self.judge.channel.send(msg.Compile())
        answer = self._ask(self.judge, self.config.timeout_reference, "profile")
        if not answer["ok"]:
            self.compile_error = answer["error"]
            self._store_baseline(eager, None)
            return
        pairs = []
        for _ in range(max(5, len(self.rounds))):   # the judge holds the device for its timed runs
            self.judge.channel.send(msg.JudgeCall(seed=_fresh_seed(), transform=None, time=True, compile=True))
            pairs.append(self._ask(self.judge, self.config.timeout_reference, "profile"))
        fresh_eager = Timing.from_samples(call_times([p["eager_ms"] for p in pairs],
                                                     [p.get("eager_host_ms") for p in pairs]))
        fresh_compile = Timing.from_samples(call_times([p["compile_ms"] for p in pairs],
                                                       [p.get("compile_host_ms") for p in pairs]))
        # the candidate was paired with this run's eager: scale the fresh compile time to it
        self.result.compile_ms = fresh_compile.median_ms * eager.median_ms / fresh_eager.median_ms
        self.result.timings["compile"] = Timing(**{**fresh_compile.__dict__, "median_ms": self.result.compile_ms})
        self.result.baseline_source = "re-timed"
        self._store_baseline(fresh_eager, fresh_compile)


def side_measures(rounds: list[dict], side: str) -> tuple[list, list]:
    """One side's ("kernel", "eager" or "compile") device and host times, round by round (None where
    the round has none)."""
    return [r.get(side) for r in rounds], [r.get(f"{side}_host") for r in rounds]


def round_times(rounds: list[dict], side: str) -> list[float | None]:
    """One side's time in each round, its device and host measures weighed by hold.call_times."""
    return call_times(*side_measures(rounds, side))


def paired_ratios(rounds: list[dict], baseline: str) -> list[float]:
    """Baseline time / candidate time, round by round (each pair from one round)."""
    pairs = zip(round_times(rounds, baseline), round_times(rounds, "kernel"))
    return [b / k for b, k in pairs if b and k]


def paired_speedup(rounds: list[dict], baseline: str) -> float | None:
    """Median over the timed calls of baseline time / candidate time."""
    ratios = paired_ratios(rounds, baseline)
    return statistics.median(ratios) if ratios else None


class _LinkRefused(Exception):
    """A built library imports a symbol a solution may not use (symbols.py)."""


class _JudgePipe:
    """Calls the candidate has answered, on their way to the judge. One batch is with the judge while
    the candidate goes on with the next calls, so the two workers' parts of the schedule overlap (each
    takes the device's lock for its own timed parts). Verdicts are settled in the schedule's order, at
    most two batches after their call: a rejection then ends the evaluation as it did call by call."""

    def __init__(self, evaluation: "_Evaluation", phase: str, batch: int,
                 on_verdict: Callable[[Call, dict], None] | None = None):
        self.evaluation, self.phase, self.batch, self.on_verdict = evaluation, phase, batch, on_verdict
        self.queued: list[tuple[Call, dict]] = []
        self.in_flight: list[tuple[Call, dict]] = []

    def run(self, call: Call, timeout: float) -> dict | None:
        """The candidate's half of `call` now (its answer, None for an empty call), the judge's with its batch."""
        if self.evaluation.outside:   # the judge draws this call's inputs first: its answers come in order
            self._collect()
        try:
            out = self.evaluation._candidate_round(call, self.phase, timeout)
        except _Failed:
            self.drain()   # a verdict on an earlier call comes first, as in the schedule
            raise
        self.add(call, out)
        return out

    def add(self, call: Call, out: dict | None) -> None:
        if out is None:   # an empty call: nothing to judge
            return
        self.queued.append((call, out))
        if len(self.queued) >= self.batch:
            self._collect()
            self._send()

    def pending(self) -> int:
        """Calls the candidate answered that the judge has not yet answered for."""
        return len(self.queued) + len(self.in_flight)

    def drain(self) -> None:
        self._collect()
        self._send()
        self._collect()

    def _send(self) -> None:
        if not self.queued:
            return
        evaluation = self.evaluation
        asked = time.perf_counter()
        evaluation.judge.channel.send(msg.JudgeCalls(items=[evaluation._judge_request(call, out)
                                                            for call, out in self.queued]))
        evaluation._traced(f"{self.phase}.judge_send", asked)
        self.in_flight, self.queued = self.queued, []

    def _collect(self) -> None:
        if not self.in_flight:
            return
        evaluation = self.evaluation
        asked = time.perf_counter()
        answers = evaluation._ask(evaluation.judge, evaluation.config.timeout_reference, "task")["answers"]
        evaluation._traced(f"{self.phase}.judge_wait", asked)
        batch, self.in_flight = self.in_flight, []
        for (call, out), verdict in zip(batch, answers):
            verdict = evaluation._judged(call, self.phase, out, verdict)
            if verdict is not None and self.on_verdict is not None:
                self.on_verdict(call, verdict)
        if len(answers) != len(batch):
            raise _Failed("internal", f"the judge answered {len(answers)} of {len(batch)} calls")


# -- baselines alone (`cuda-agent baseline`, `cuda-agent cache verify`) ----------------------------


# The device time one task's baselines may hold: the device lock is the one resource every task of a
# `cuda-agent baseline` run queues for, so its total sets the run's floor. Medians over at least
# BASELINE_MIN_CALLS pairs of calls lasting milliseconds are as stable as over 100 (the spread of a
# long kernel is small), so a slow task takes fewer calls instead of the full count.
BASELINE_BUDGET_S = 2.0
BASELINE_MIN_CALLS = 30


def baseline_calls(per_call_s: float, warmup: int, timed: int) -> tuple[int, int]:
    """(warm-up, timed) call counts for baselines whose paired call holds the device `per_call_s`:
    the full counts while they fit in BASELINE_BUDGET_S, else down to BASELINE_MIN_CALLS timed calls
    (never more than asked) and a tenth as many warm-ups (at least 3)."""
    fits = int(BASELINE_BUDGET_S / max(per_call_s, 1e-9))
    if fits >= timed:
        return warmup, timed
    keep = min(timed, max(BASELINE_MIN_CALLS, fits))
    return min(warmup, max(3, keep // 10)), keep


@dataclass
class BaselineRun:
    entry: "object | None"          # BaselineEntry, None when the task is broken
    error: str | None = None
    seconds: float = 0.0
    # where the seconds went: start (the judge's process and the task's model), compile (torch.compile
    # and its warm-up), timing (the timed calls), of which wait (waiting for the device's lock)
    steps: dict = field(default_factory=dict)


def measure_baselines(task: Task, config: EvalConfig | None = None, *, gpu: int | None = None,
                      calls: int | None = None, store: bool = True,
                      progress: Callable[[str], None] | None = None) -> BaselineRun:
    """Time the task's eager and torch.compile references on their own (no candidate), paired call by
    call on fresh draws, as every evaluation does, and (with `store`) save them in the baseline store.
    Compilation and input drawing run in parallel with other measurements; only the timed calls hold
    the device. Never raises for anything the task does."""
    import torch

    from cuda_agent.env.run.baselines import BaselineEntry, BaselineStore, entry_key, timing_settings

    config = config or EvalConfig()
    backend = config.resolved_backend()
    say = progress or (lambda text: None)
    started = time.monotonic()
    job_dir = Path(tempfile.mkdtemp(prefix="cuda-agent-job-", dir=job_root()))
    result = EvalResult(task=task.name, backend=backend, protocol=config.protocol)
    run = _Evaluation(task, Solution({"model_new.py": ""}), config, backend, job_dir, gpu, result, "baselines", say)
    steps: dict[str, float] = {}

    def lap(name: str, since: float) -> float:
        now = time.monotonic()
        steps[name] = round(now - since, 3)
        return now

    try:
        task.check_syntax()
        run.judge = run._start("judge")
        run._start_judge_only(candidate=False)
        mark = lap("start", started)
        compiled = {"ok": False, "error": "not asked for"}
        if config.compile_baseline:
            say("compiling the torch.compile baseline")
            run.judge.channel.send(msg.Compile())
            compiled = run._ask(run.judge, config.timeout_reference, "task")
        mark = lap("compile", mark)
        say("timing eager" + (" and torch.compile" if compiled["ok"] else ""))
        if calls:   # as asked (`cache verify`)
            warmup = min(config.warmup, calls // 2)
            timed = calls - warmup
        else:
            warmup, timed = config.warmup, config.timed_iters(backend)
        pairs, held, waited = [], [], 0.0
        i = 0
        while i < warmup + timed:
            asked = time.monotonic()
            run.judge.channel.send(msg.JudgeCall(seed=_fresh_seed(), transform=None, time=True, compile=compiled["ok"]))
            answer = run._ask(run.judge, config.timeout_reference, "task")   # the judge locks the device itself
            waited += answer.get("lock_wait_s", 0.0)
            held.append(time.monotonic() - asked - answer.get("lock_wait_s", 0.0))
            if "task_error" in answer:
                raise _Failed("task", answer["task_error"])
            if i >= warmup:   # the first calls warm up
                pairs.append(answer)
            elif calls is None and i == min(2, warmup - 1):   # slow calls: fewer of them (baseline_calls)
                warmup, timed = baseline_calls(statistics.median(held), config.warmup, timed)
            i += 1
        eager = Timing.from_samples([p["eager_ms"] for p in pairs])
        compile_timing = Timing.from_samples([p["compile_ms"] for p in pairs]) if compiled["ok"] else None
        entry = BaselineEntry(task=task.name, task_digest=task.digest, device=result.device, torch=torch.__version__,
                              settings=timing_settings(config, backend), eager=eager.__dict__,
                              compile=compile_timing.__dict__ if compile_timing else None,
                              compile_error=None if compiled["ok"] else compiled.get("error"), code=task.code)
        lap("timing", mark)
        steps["wait"] = round(waited, 3)
        if store:
            BaselineStore(config.cache_dir).put(entry_key(task.digest, result.device, torch.__version__,
                                                          entry.settings), entry)
        return BaselineRun(entry, None, time.monotonic() - started, steps)
    except _Failed as failure:
        return BaselineRun(None, failure.error.message, time.monotonic() - started, steps)
    except TaskError as exc:
        return BaselineRun(None, str(exc), time.monotonic() - started, steps)
    finally:
        run.shutdown()
        shutil.rmtree(job_dir, ignore_errors=True)
