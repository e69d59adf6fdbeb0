"""One evaluation: compile, verify, profile, reward, across a judge and a candidate process.

    harness (this process)            judge (task's code only)         candidate (sandboxed solution)
    static checks; builds, link check  reference model, initial weights
                                       torch.compile (when not stored)  loads the harness's builds
    for every call of the schedule (the device held alone only while something is timed: locks.py):
      seed (+ structured transform) ->                               -> draws, runs ModelNew (timed),
                                                                        samples its output at once
                                    <- same draw: reference (timed) <- output samples (or a file)
      compare, check rules, time

The calls follow the schedule (schedule.py); the candidate learns each call's seed only when the
call starts, every call runs under the same guard and has its output checked (rounds.py, the
judge's verdicts in batches: judge_pipe.py), and the eager and torch.compile references are timed
on the same draws in between: the speedup is a ratio of paired measurements (scoring.py). The
caller's process never runs candidate code; every failure becomes an `EvalResult` with the phase
that failed and a message an LLM can act on. This module runs the phases; its parts: the workers
and their clock (worker_run.py), the builds served to the candidate (serving.py), the timing's
stop rule and clock check (measures.py), the baseline store's use (stored.py), the feedback after
timing (feedback.py: the profiler's tables, the CUDA-graph baseline).
"""

from __future__ import annotations

import os
import random
import secrets
import shutil
import tempfile
import time
import traceback
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Callable

from cuda_agent.env.builds.handed import hand
from cuda_agent.env.config import EvalConfig
from cuda_agent.env.result import EvalError, EvalResult, Timing
from cuda_agent.env.rules import registry as rules
from cuda_agent.env.rules.call_verdict import CallVerdicts
from cuda_agent.env.rules.verify import FP32_PRECISION_WARNING, share
from cuda_agent.env.run.calibration import Calibration
from cuda_agent.env.run.feedback import Feedback
from cuda_agent.env.run.judge_pipe import JudgePipe
from cuda_agent.env.run.measures import (as_scored, calls_to_add, check_clock, less_overhead, overhead_spread,
                                         precise_enough)
from cuda_agent.env.run.rounds import CallRounds
from cuda_agent.env.run.schedule import (NULL_CALLS, Call, empty_calls, fresh_seed, judge_batch, shortened,
                                         timing_calls, verification_calls)
from cuda_agent.env.run.scoring import note_intervals, paired_speedup, round_times, score
from cuda_agent.env.run.start_retry import with_second_start
from cuda_agent.env.run.serving import BuildServing
from cuda_agent.env.run.stored import StoredBaselines
from cuda_agent.env.run.twin import Twin
from cuda_agent.env.run.unscored import UnscoredTiming
from cuda_agent.env.run.worker_run import WorkerRun, Failed, start_spare, job_root
from cuda_agent.env.workers import messages as msg
from cuda_agent.tasks.solution import Solution, missing_model_new
from cuda_agent.tasks.task import Task, TaskError, strip_reference_model


TEARDOWN_WAIT_S = 60.0   # the most a large task waits for the killed workers before it to exit


@lru_cache(maxsize=256)
def _too_large(task: Task, backend: str, trials: int, gpu: int | None) -> str | None:
    """Whether the task's tensors cannot fit this machine (measured on the meta device in a child
    process, once per task; TaskError when the task's code exits, crashes or hangs there)."""
    from cuda_agent.env.infra.capacity import too_large

    return too_large(task, backend, trials, gpu=gpu)


def evaluate(task: Task, solution: Solution, config: EvalConfig | None = None, *,
             gpu: int | None = None, stop_after: str | None = None,
             progress: Callable[[str], None] | None = None) -> EvalResult:
    """Evaluate `solution` against `task`. Never raises for anything the solution or task does.

    `stop_after="compile"` only builds and imports the solution (in the sandboxed candidate process,
    no reference needed); `stop_after="verify"` skips timing. The agent's compile/verify commands.
    `progress(text)` is told what is happening as it starts (e.g. for a spinner on a terminal).
    A worker that never became ready is started anew once, the evaluation from scratch (start_retry.py).
    """
    if stop_after not in (None, "compile", "verify"):
        raise ValueError("stop_after must be None, 'compile' or 'verify'")
    config = config or EvalConfig()
    say = progress or (lambda text: None)
    return with_second_start(lambda fresh: _evaluate_once(task, solution, config, gpu, stop_after, say, fresh))


def _evaluate_once(task: Task, solution: Solution, config: EvalConfig, gpu: int | None, stop_after: str | None,
                   say: Callable[[str], None], fresh: bool) -> tuple[EvalResult, bool]:
    """One evaluation from scratch, and whether it ended because a worker never became ready.
    `fresh`: with workers started for it alone (no spare, no kept judge), none prepared for the next
    evaluation."""
    from cuda_agent.env.infra import spares

    backend = config.resolved_backend()
    result = EvalResult(task=task.name, backend=backend, protocol=config.protocol)
    key = (backend, gpu, config.sandbox, str(config.cache_dir))
    prewarm = config.prewarm and not fresh
    spare = spares.take(key) if prewarm else None
    job_dir = spare.job_dir if spare else Path(tempfile.mkdtemp(prefix="cuda-agent-job-", dir=job_root()))
    evaluation = _Evaluation(task, solution, config, backend, job_dir, gpu, result, stop_after, say, fresh)
    if spare:
        evaluation.take_spare(spare)
    if prewarm:  # the next evaluation's workers start while this one runs
        spares.prepare(key, lambda folder: start_spare(config, backend, folder, gpu), job_root(), int(config.prewarm))
    not_started = False
    try:
        evaluation.run()
    except Failed as failure:
        result.error = failure.error
        result.correct = False  # whatever passed before, a rejection at any phase stands
        not_started = failure.not_started
    except TaskError as exc:   # the task's code where the harness had it run (its size: infra/task_child.py)
        result.error = EvalError("task", str(exc))
        result.correct = False
    except Exception:  # a bug of ours: still a structured answer, never a crashed caller
        result.error = EvalError("internal", traceback.format_exc()[-3000:])
    finally:
        evaluation.shutdown()
        shutil.rmtree(job_dir, ignore_errors=True)
    score(result, partial=stop_after is not None)
    return result, not_started


class _Evaluation(BuildServing, Calibration, Twin, CallRounds, StoredBaselines, Feedback, UnscoredTiming, WorkerRun):
    """One evaluation's phases in order (`run`); its parts are the classes it is made of."""

    def __init__(self, task, solution, config, backend, job_dir, gpu, result, stop_after, say, fresh=False):
        super().__init__(task, config, backend, job_dir, gpu, result, say)
        self.solution, self.stop_after = solution, stop_after
        self.fresh = fresh   # a judge of its own, never a kept one (`evaluate`'s second attempt)
        self.strict = config.protocol == "strict"
        self.index = 0
        self.seeds = [self.cfg.seed + i for i in range(config.num_correct_trials)]
        self.result.seeds = self.seeds
        self.rounds: list[dict] = []       # what each timed call measured
        self.null_walls: list[float] = []
        self.compile_mode = "off"          # off | paired | stored

    def shutdown(self) -> None:
        self._close_memory()
        self._close_twin_sampling()
        super().shutdown()

    # -- the evaluation --------------------------------------------------------------------

    def run(self) -> None:
        try:
            self.task.check_syntax()
            inputs_code = strip_reference_model(self.task.code)
        except TaskError as exc:
            raise Failed("task", str(exc))
        problem = missing_model_new(self.solution)
        if problem:
            raise Failed("compile", problem)
        self._static_check()
        too_big = _too_large(self.task, self.backend, self.config.num_correct_trials, self.gpu)
        if too_big:
            raise Failed("task", too_big, rule=rules.TOO_LARGE)
        solution_dir = self.solution.write(self.box / "solution")
        guard_lib, kernels = self._start_builds()
        need_judge = self.stop_after != "compile"
        begun = time.perf_counter()
        self._start_workers(need_judge, persistent=not self.fresh, timed=self.stop_after is None)
        self.result.warnings += self.candidate.notes   # how it was started, when not as asked (zygote.py)
        if need_judge:   # the judge sets up (the task's model, its first run) while the candidate loads
            self._wait_for_memory()
            self._send_judge_job()
        begun = self._traced("compile.judge_job", begun)
        guard_path = self._built(lambda: str(hand(guard_lib.result(), self.box)), need_judge)   # handed too
        self._wait_ready(self.candidate)
        begun = self._traced("compile.candidate_ready", begun)
        self.refused_by = None
        # opened now, before any of the solution's code runs: the harness's own view of its calls
        self.verdicts = CallVerdicts(self.candidate.main_pid, guard_path if self.cfg.guard else None,
                                     self._sampling() if self.cfg.guard else None)
        if self.verdicts.problem:   # nothing of the solution's has run yet: this machine's doing, not its
            raise Failed("internal", f"the harness cannot read its candidate worker's memory ({self.verdicts.problem}); "
                                     "the guard's verdict needs /proc/PID/mem of the harness's own descendants "
                                     "(kernel.yama.ptrace_scope 0 or 1)")
        if self.backend == "cpu":   # its memory too, for reading its calls' outputs (outside.Memory)
            self._open_memory()
        # the job, its empty calls, the twin's job and the judge's start all go on while the kernels build
        self.candidate.send(msg.CandidateJob(task_inputs_code=inputs_code, solution_dir=str(solution_dir),
                                             backend=self.backend, config=self._candidate_config(), box=str(self.box),
                                             guard_lib=guard_path, crash_lib=self._crash_path(),
                                             hold_lib=(hold := self._hold_path()) and str(hand(Path(hold), self.box)),
                                             calibration_calls=self._calibration_calls(), early_model=need_judge))
        self._calibrate()
        self._twin_job(inputs_code, guard_lib.result(), hold)
        begun = self._traced("compile.calibration", begun)
        prebuilt = {} if kernels is None else {"cuda_extension": self._built(lambda: str(kernels.result()), need_judge)}
        begun = self._traced("compile.builds", begun)
        self.candidate.send(msg.LoadSolution(prebuilt=prebuilt))   # it loads while the judge finishes setting up
        if need_judge:
            self._start_judge()
            begun = self._traced("compile.judge_setup", begun)
        built = self._ask(self.candidate, self.config.timeout_compile, "compile")
        self._traced("compile.candidate_load", begun)
        self._lap("compile")
        if not built["ok"]:
            rule = built.get("rule") or self.refused_by
            raise Failed("compile", built["message"], rule)
        self.result.compiled = True
        if self.stop_after == "compile":
            return
        self._finish_judge_setup()
        self._verify()
        self._other_scale()
        if self.stop_after == "verify":
            self._unscored_end()
            return
        self._profile()
        self._speed_of_light()
        # feedback, once every timed call is over and its figures read (feedback.py)
        self._own_operators()
        self._lap("feedback")
        self._baselines()
        self._reference_operators()
        self._graph_baseline()   # last in the judge: a capture that fails leaves the process's CUDA RNG unusable
        self._lap("feedback")
        self._unscored_end()

    crash_lib = None   # a future of the crash report's library (serving.py)

    def _candidate_config(self) -> EvalConfig:
        """The settings the candidate gets: the weights' seed in place of the evaluation's, from which
        the verification calls' seeds follow (workers/common.py `weights_seed`)."""
        from cuda_agent.env.workers.common import weights_seed

        return replace(self.cfg, seed=weights_seed(self.cfg.seed))

    def _crash_path(self, box: Path | None = None) -> str | None:
        """The crash report's library, handed to the candidate (or into `box`: the twin's); None when it did
        not build (our helper: the evaluation goes on, its crashes reported without native frames)."""
        from cuda_agent.env.builds.compiler import BuildError

        try:
            return str(hand(self.crash_lib.result(), box or self.box)) if self.crash_lib is not None else None
        except (BuildError, OSError):
            return None

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
        self.candidate.send(msg.Init(output_bytes=self.output_bytes, device_slot=self.device_slot))
        init = self._ask(self.candidate, self.config.timeout_verify, "verify")
        self.builds_closed = True   # the model is made: no build from here on (serving.py)
        if not init["ok"]:
            raise Failed("verify", init["message"], init.get("rule"))
        if self.device_slot and init.get("device_slot") is not True:
            self.device_slot = False
            self.result.warnings.append("large outputs go through files: the device slot was not mapped "
                                        f"({init.get('device_slot_error') or 'no reason given'})")
        self.verdicts.mark()
        self.result.weights = init["weights"]
        if self.backend == "cpu":   # inputs from the judge, outputs and times read from outside
            handed = self.candidate.has_staging   # decided by what the harness gave, never by the answer
            if handed and init.get("staging") is not True:
                raise Failed("verify", "the solution's process answered that it has no staging file, but the harness "
                                       "handed it one", rule=rules.PROTOCOL_FORGERY)
            self.outside = self.inputs_fit and handed and self._memory_held()
            if not self.outside:
                self.result.warnings.append("verdicts and times decided inside the solution's process: no staging "
                                            "file, inputs larger than its slots, or no access to the solution's "
                                            "memory here before it loaded (see docs/verification.md)")
                self._stop_sampling("calls decided inside the solution's process, where the harness's own "
                                    "draws and output samples use PyTorch's operators within each call")

    def _stop_sampling(self, why: str) -> None:
        """No sampled verdict where the candidate's calls include the harness's own PyTorch work."""
        if self.verdicts.sampling is not None:
            self.verdicts.sampling.close()
            self.verdicts.sampling = None
            self.sampling_unavailable = why

    outside = False   # the CPU backend's calls are decided from outside the candidate (rounds.py, _outside_*)
    verdicts = None   # the guard's verdicts on its calls, from outside it (rules/call_verdict.py)
    memory = None     # the candidate's memory (outside.Memory), for those

    def _open_memory(self) -> None:
        """The candidate's memory opened before any of the solution's code runs (None where this machine
        does not allow it: nothing of the solution's can have caused that)."""
        from cuda_agent.env.measure.outside import Memory

        try:
            self.memory = Memory(self.candidate.main_pid)
        except OSError:
            self.memory = None

    def _memory_held(self) -> bool:
        """Whether the calls are read from outside: the memory opened before the solution loaded, and
        still readable now that its model is made. A solution that took it away since is refused,
        never answered with decisions made inside its own process."""
        from cuda_agent.env.measure.outside import HiddenMemory

        if self.memory is None:
            return False
        try:
            self.memory.check()
        except HiddenMemory as exc:
            raise Failed("verify", f"the harness lost its view of the solution's memory while the solution loaded "
                                   f"({exc}): a process that hides its memory from the harness is refused",
                         rule=rules.PROTOCOL_FORGERY) from None
        return True

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
            raise Failed("compile", "the solution was rejected before running:\n" +
                          "\n".join(f.describe() for f in rejections[:5]), rule=rules.RULES[f"static:{rejections[0].rule}"])


    # -- phases ------------------------------------------------------------------------------

    def _verify(self) -> None:
        self.say("verifying")
        calls = verification_calls(self.seeds, self.strict)
        # each output file goes to the judge while the candidate computes the next one
        pipe = JudgePipe(self, "verify", batch=1, on_verdict=self._note_accuracy)
        for n, call in enumerate(calls, 1):
            self.say(f"verifying: input set {n} of {len(calls)}")
            out = pipe.run(call, self.config.timeout_verify)
            if out is not None and out.get("device"):   # the slot is the judge's until its verdict
                pipe.drain()
        pipe.drain()
        self._inputs_kept("verify")
        if self.strict and self.unscored_failure is None:
            self.judge.channel.send(msg.Dependence())
            message = self._ask(self.judge, self.config.timeout_verify, "verify").get("message")
            if message:
                raise Failed("verify", message, rule=rules.INPUT_INDEPENDENT)
        self.result.correct = self.unscored_failure is None
        self._lap("verify")

    def _other_scale(self) -> None:
        """The strict protocol's second size of the task (other_scale.py), once this size passed."""
        if not (self.strict and self.config.other_scale) or self.unscored_failure is not None:
            return
        from cuda_agent.env.run.other_scale import verify_other_scale

        self.say("verifying at a second size of the task")
        failure = verify_other_scale(self.task, self.solution, self.config, self.gpu, evaluate)
        self._lap("other_scale")
        if failure is not None:
            raise failure

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
        calls = timing_calls(self.config.warmup, iters, self.strict, nulls, rng, settle_nulls=self.outside)
        pipe = JudgePipe(self, "profile", batch=judge_batch(self.backend))
        started, done = time.monotonic(), 0
        budget_checked, budget = False, None
        measured: list[tuple] = []   # the candidate's timed calls so far, (device, host) ms (verdicts come later)
        try:
            while done < len(calls) or self._more_timed(calls, len(measured), iters, budget, pipe, started, deadline):
                call = calls[done]
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise Failed("profile", f"timing took longer than {self.config.timeout_profile:g} s",
                                  rule=rules.TIMEOUT)
                out = pipe.run(call, min(self.config.timeout_verify, remaining))
                done += 1
                if call.kind == "timed" and out is not None:
                    measured.append((out["wall_ms"] if out.get("read_outside") else out["ms"], out.get("host_ms")))
                    if precise_enough(self.config, as_scored(self.rounds, self.twin_walls, self.null_walls, self.outside), measured,
                                      pipe, self._compile_scale(), self._overhead_spread()):   # the timed calls left are not needed
                        calls = calls[:done] + [c for c in calls[done:] if c.kind != "timed"]
                if not budget_checked and call.kind == "warmup" and done >= 2:
                    pipe.drain()   # the judge's part of these calls counts too
                    per_call = (time.monotonic() - started) / done
                    if per_call * len(calls) > self.config.profile_budget_s:   # slow calls: fewer timed ones
                        keep = max(5, int(self.config.profile_budget_s / max(per_call, 1e-9)))
                        calls, budget = shortened(calls, keep), keep
                    budget_checked = True
            self._verdict("profile", self.verdicts.timing_done)
            self.candidate.send(msg.Final())   # its dispatcher's tables checked while the judge finishes
            pipe.drain()
            final = self._ask(self.candidate, self.config.timeout_verify, "profile")
            if not final["ok"]:
                raise Failed("profile", final["message"], final.get("rule"))
            self._inputs_kept("profile")
            if self.strict and self.unscored_failure is None:
                self.judge.channel.send(msg.Dependence(later=True))
                message = self._ask(self.judge, self.config.timeout_verify, "profile").get("message")
                if message:
                    raise Failed("profile", message, rule=rules.INPUT_INDEPENDENT)
        except Failed:
            self.result.correct = False
            raise
        if self.outside:
            less_overhead(self.rounds, self.twin_walls, self.null_walls)
        kernel = Timing.from_samples(round_times(self.rounds, "kernel"))
        self.result.timings["kernel"] = kernel
        self.result.kernel_ms = kernel.median_ms
        check_clock(self.config, self.outside, self.rounds, self.null_walls)
        self._lap("profile")

    def _speed_of_light(self) -> None:
        """The task's work and the kernel's fraction of the device's peak, from the harness's side alone
        (the task's source here, the device the judge names); feedback, never read by the reward."""
        from cuda_agent.env.measure.speed_of_light import speed_of_light

        try:
            self.result.speed_of_light = speed_of_light(self.task, self.result.device, self.backend,
                                                        self.result.kernel_ms, self.config.cache_dir, self.gpu)
        except Exception as exc:   # feedback: it never fails an evaluation that was timed
            self.result.warnings.append(f"speed of light not computed: {type(exc).__name__}: {exc}")

    def _more_timed(self, calls: list[Call], timed: int, iters: int, budget: int | None, pipe: JudgePipe,
                    started: float, deadline: float) -> bool:
        """Once the schedule's calls are done: more timed calls at its end while the reward's margin
        lies inside a speedup's interval that decides it (measures.calls_to_add), as many as fit in
        what is left of the profile's time budget and timeout, headed by empty calls in the schedule's
        proportion where calls are measured from outside; False when none."""
        if self.config.precision is None or not self.config.baselines or not calls:
            return False
        pipe.drain()   # every call judged: the decision reads them all
        now = time.monotonic()
        per_call = (now - started) / len(calls)
        left = min(started + self.config.profile_budget_s, deadline) - now
        room = int(left / max(per_call, 1e-9))
        add = min(room, calls_to_add(self.config, as_scored(self.rounds, self.twin_walls, self.null_walls, self.outside), timed,
                                     iters, budget, self._compile_scale(), self._overhead_spread()))
        if add <= 0:
            return False
        more = [Call("timed", fresh_seed()) for _ in range(add)]
        if self.outside:   # the overhead's interval is in the decision's: it narrows with the calls added
            # first, so that timing stopped early (`precise_enough` drops the timed calls left) leaves
            # none to run after the decision, whose next empty call could reopen it
            empties = max(1, round(add * NULL_CALLS / iters))
            more = [call for _ in range(empties) for call in empty_calls(settle=True)] + more
        calls += more
        return True

    def _overhead_spread(self) -> tuple[float, float]:
        """How far the overhead taken off the calls measured from outside may be off (`measures.overhead_spread`);
        none where the calls are timed inside."""
        return overhead_spread(self.twin_walls, self.null_walls) if self.outside else (0.0, 0.0)

    def _compile_scale(self) -> float | None:
        """Where torch.compile's time comes from the store: its speedup over eager's there (the speedup
        over it is the eager one times this, `_baselines`)."""
        if self.compile_mode != "stored" or not self.stored or self.stored[1].compile is None:
            return None
        entry = self.stored[1]
        return entry.compile_ms / entry.eager_ms if entry.compile_ms and entry.eager_ms else None

    def _inputs_kept(self, phase: str) -> None:
        """The judge's word on the inputs it put into the candidate's slots (the CPU path)."""
        if not self.outside:
            return
        self.judge.channel.send(msg.InputsKept())
        mutated = self._ask(self.judge, self.config.timeout_reference, "task").get("mutated")
        if mutated:
            raise Failed(phase, f"forward modified its inputs (input set {mutated[0]}); inputs must be left "
                                 "unchanged", rule=rules.INPUT_MUTATION)

    def _wait_for_memory(self) -> None:
        """A task that takes much of the GPU waits until the workers of the evaluations before it have
        exited (their CUDA contexts torn down in the background): their memory is not free until then."""
        from cuda_agent.env.infra import capacity, teardown

        if self.backend == "cuda" and teardown.pending(self.gpu) and capacity.takes_much_of_gpu(
                self.task, self.config.num_correct_trials, self.gpu):
            waited = teardown.wait_gone(self.gpu, TEARDOWN_WAIT_S)
            if self.trace is not None:
                self.trace["compile.teardown_wait"] = waited

    def _kill_candidate(self) -> None:
        """Nothing of the candidate's is alive from here on (its sandbox's PID namespace goes with it)."""
        if os.environ.get("CUDA_AGENT_TRACE_CALLS") == "1":   # the per-call traces, both workers'
            self.result.log = self.candidate.log_tail(400_000) + (self.judge.log_tail(400_000) if self.judge else "")
        else:
            self.result.log = self.candidate.log_tail()
        if os.environ.get("CUDA_AGENT_LOG_ROUNDS") == "1":   # diagnosis: every timed call's measures, in order
            import json

            self.result.log += "\nrounds " + json.dumps({"rounds": self.rounds, "null_walls": self.null_walls,
                                                          "twin_walls": self.twin_walls, "calibrated": self.calibrated}) + "\n"
        self._close_memory()
        self.candidate.kill()
        self.candidate = None

    def _close_memory(self) -> None:
        if self.memory is not None:
            self.memory.close()
            self.memory = None
        if self.verdicts is not None:
            if self.verdicts.sampling is not None:   # where the sampled calls' time went (feedback)
                self.result.cpu_samples = self.verdicts.sampling.summary()
            elif self.sampling_unavailable:
                self.result.cpu_samples = {"unavailable": self.sampling_unavailable}
            self.verdicts.close()

    def _sampling(self):
        """The harness's sampling of the candidate's CPU time (rules/op_samples.py), attached while the
        candidate waits for its job (its thread pools started); None where it is unavailable (the result's
        `cpu_samples` says why)."""
        from cuda_agent.env.rules.op_samples import start_sampling

        # torch's own load_inline (fast_build off) builds the solution's library in a folder the candidate writes
        sampling, self.sampling_unavailable = start_sampling(self.candidate.main_pid, self.backend,
                                                             judge_files=self.config.fast_build)
        return sampling

    sampling_unavailable: str | None = None   # why the candidate's CPU time could not be sampled

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
        note_intervals(self.result, self.rounds, self._overhead_spread())
        if self.config.compile_baseline and self.result.compile_ms is None:
            error = self.compile_error or (self.stored[1].compile_error if self.stored else None)
            self.result.warnings.append(f"torch.compile baseline unavailable: {error or 'not timed'}")
        self._lap("baselines")
