"""What an evaluation and a baseline run share: worker processes in one job folder.

Starting them (a judge; a candidate inside the sandbox; the staging file the pair shares), asking
them (a timeout, a death or a forged message becomes a structured failure), the judge's job and its
answer (the task's reference ran), the device hold's library, and the clock of the phases with the
trace of where the harness waits (CUDA_AGENT_TRACE_CALLS=1).
"""

from __future__ import annotations

import os
import secrets
import shutil
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Callable

from cuda_agent.env.config import EvalConfig
from cuda_agent.env.infra.isolation import Worker, box_of, start_worker
from cuda_agent.env.result import EvalError, EvalResult
from cuda_agent.env.rules import registry as rules
from cuda_agent.env.run.schedule import JUDGE_BATCH
from cuda_agent.env.workers import messages as msg
from cuda_agent.env.workers.protocol import ChildDied, ChildTimeout, ForgedMessage
from cuda_agent.tasks.task import Task


def job_footprint(task: Task, backend: str | None = None, gpu: int | None = None) -> dict | None:
    """The task's one input set and one output in bytes (on the meta device in a child process, once per
    task), by which the judge sizes the memory it asks for in its set-up (reserve.py)."""
    from cuda_agent.env.infra.task_child import estimate_footprint

    found = estimate_footprint(task, backend, gpu)
    return None if found is None else {"input_bytes": found.input_bytes, "output_bytes": found.output_bytes}


class Failed(Exception):
    """Ends an evaluation (or a baseline run) early with a structured error. `not_started`: a worker
    never became ready, before any job was sent to it (`WorkerRun._wait_ready`; a kept judge's start,
    `pair_judge`): the harness's own failure: the evaluation runs once more (start_retry.py)."""

    def __init__(self, phase: str, message: str, rule: rules.Rule | str | None = None, not_started: bool = False):
        super().__init__(message)
        self.error = EvalError(phase, message, rules.reported(rule))   # a worker's answer may name the rule
        self.not_started = not_started


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


def _start_worker(role: str, config: EvalConfig, backend: str, job_dir: Path, gpu: int | None,
                  staging_fd: int | None = None) -> Worker:
    """A judge, or a candidate inside the sandbox (raises SandboxUnavailable when it cannot be), or the
    candidate's twin (run/twin.py): a candidate's worker started alike, in a folder of its own."""
    from cuda_agent.env.infra.sandbox import sandbox_prefix

    if role == "twin":
        job_dir = twin_dir(job_dir)
    box = box_of(job_dir)
    box.mkdir(parents=True, exist_ok=True)
    wrap = sandbox_prefix(config, box) if role in ("candidate", "twin") else None
    # the twin starts afresh: the zygote serves job folders side by side, and the twin's lies in its candidate's
    worker = start_worker("candidate" if role == "twin" else role, job_dir, backend, gpu, wrap, staging_fd,
                          zygote=role != "twin")
    worker.role = role
    return worker


def twin_dir(job_dir: Path) -> Path:
    """The twin's job folder, beside (never inside) the candidate's box."""
    return Path(job_dir) / "twin"


def needs_twin(backend: str) -> bool:
    """Whether an evaluation has a twin: the CPU backend's calls are measured from outside (run/twin.py)."""
    return backend == "cpu"


def pair_judge(config: EvalConfig, backend: str, job_dir: Path, gpu: int | None, staging_fd: int | None,
               persistent: bool = True) -> Worker:
    """An evaluation's judge: with CUDA_AGENT_PERSISTENT_JUDGE=1 (CUDA) and `persistent` an idle
    persistent one, or one started to be kept (infra/judges.py); else a judge of its own, started now."""
    from cuda_agent.env.infra import judges

    if persistent and judges.enabled(backend):
        try:
            return judges.judge_for(backend, gpu, staging_fd)
        except OSError as exc:   # a judge that died as it started, before its staging file reached it
            raise Failed("internal", f"could not start the judge worker: {exc}", not_started=True) from None
    return _start_worker("judge", config, backend, job_dir, gpu, staging_fd)


def start_spare(config: EvalConfig, backend: str, job_dir: Path, gpu: int | None):
    """Workers started ahead for a later evaluation (infra/spares.py): a judge and a candidate sharing a
    staging file, both fresh, with the candidate's twin where there is one (`needs_twin`); with kept judges
    (infra/judges.py) the candidate (and its twin) alone, the staging file kept open for the judge its
    evaluation takes when its job starts (`WorkerRun.spare_staging`)."""
    from cuda_agent.env.infra import judges
    from cuda_agent.env.infra.spares import Spare

    if judges.enabled(backend):
        fd = create_pair_staging()
        try:
            candidate = _start_worker("candidate", config, backend, job_dir, gpu, fd)
            try:
                twin = _start_worker("twin", config, backend, job_dir, gpu, fd) if needs_twin(backend) else None
            except BaseException:
                candidate.kill()
                raise
            return Spare(job_dir, candidate, staging_fd=fd, twin=twin)
        except BaseException:
            close_staging(fd)
            raise
    with pair_staging() as fd:
        started = [_start_worker("judge", config, backend, job_dir, gpu, fd)]
        try:
            started.append(_start_worker("candidate", config, backend, job_dir, gpu, fd))
            twin = _start_worker("twin", config, backend, job_dir, gpu, fd) if needs_twin(backend) else None
        except BaseException:
            for worker in started:
                worker.kill()
            raise
        return Spare(job_dir, started[1], judge=started[0], twin=twin)


def create_pair_staging() -> int | None:
    """The staging file a pair of workers shares (transfer.create_staging), or None where there are no
    sealed memory files (outputs then go through files); the caller closes it once both workers have it."""
    from cuda_agent.env.workers.transfer import create_staging

    try:
        return create_staging()
    except (OSError, AttributeError):
        return None


def close_staging(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


@contextmanager
def pair_staging():
    """The staging file a pair of workers shares (`create_pair_staging`), ours only until both have it."""
    fd = create_pair_staging()
    try:
        yield fd
    finally:
        close_staging(fd)


class WorkerRun:
    """A run's workers and its clock. An evaluation (evaluation.py) has a judge and a candidate, whose
    build requests it serves (`_serve_build`); a baseline run (baseline_run.py) has a judge only."""

    judge: Worker | None = None
    candidate: Worker | None = None
    twin: Worker | None = None   # the candidate's twin (run/twin.py): an evaluation's, on the CPU backend

    def __init__(self, task: Task, config: EvalConfig, backend: str, job_dir: Path, gpu: int | None,
                 result: EvalResult, say: Callable[[str], None]):
        from cuda_agent.env.infra.locks import DeviceLock

        self.task, self.config = task, config
        self.backend, self.job_dir, self.gpu, self.result, self.say = backend, job_dir, gpu, result, say
        self.box = box_of(job_dir)
        self.clock = self.started = time.monotonic()
        self.lock = DeviceLock.of(backend, gpu)
        base = config.seed if config.seed is not None else secrets.randbelow(1 << 31)
        self.cfg = replace(config, seed=base)   # what the workers get: the settings, the seed decided
        # CUDA_AGENT_TRACE_CALLS=1: where the harness's side of the rounds waits, summed per step
        # (phase_seconds "trace.*"), beside the workers' own per-call traces in the log
        self.trace: dict[str, float] | None = {} if os.environ.get("CUDA_AGENT_TRACE_CALLS") == "1" else None

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
        requests from the candidate (load_inline) are served on the way, within the same `timeout`: the
        candidate's own time and its builds' together (each build gets what is left: serving.py)."""
        deadline = time.monotonic() + timeout
        try:
            while True:
                message = worker.channel.receive(max(0.001, deadline - time.monotonic()))
                if worker.role not in ("candidate", "twin"):
                    return message
                if worker.role == "twin" or message.get("request") != "build":   # the twin builds nothing
                    worker.stop(wait=self.backend == "cpu")   # nothing of it runs until its next command
                    return message
                self.ask_deadline = deadline
                try:
                    reply = self._serve_build(message)
                finally:
                    self.ask_deadline = None
                worker.send(msg.BuildReply(**reply))
        except ChildTimeout:
            if worker.role == "twin":
                raise Failed("internal", f"the candidate's twin did not answer within {timeout:g} s") from None
            raise Failed("task" if worker.role == "judge" else phase, self._timeout_message(worker, timeout, phase),
                          rule=rules.TIMEOUT) from None
        except ForgedMessage as forged:
            if worker.role == "twin":
                raise Failed("internal", f"the candidate's twin answered out of protocol: {forged}") from None
            raise Failed("task" if worker.role == "judge" else phase,
                          f"{forged}: the solution wrote to the harness's own channel", rule=rules.PROTOCOL_FORGERY) from None
        except ChildDied as died:
            if worker.role == "twin":
                raise Failed("internal", f"the candidate's twin died ({died}): {worker.log_tail()}") from None
            phase = "task" if worker.role == "judge" else phase
            raise Failed(phase, self._crash_message(worker, str(died), phase), rule=rules.CRASH) from None

    def _timeout_message(self, worker: Worker, timeout: float, phase: str) -> str:
        """What a worker's silence past `timeout` says."""
        what = "the task's reference" if worker.role == "judge" else "the solution"
        return f"{what} timed out after {timeout:g} s in the {phase} phase (an infinite loop or a hung kernel?)"

    def _crash_message(self, worker: Worker, died: str, phase: str) -> str:
        """What a worker's death says: how it died and its last output."""
        tail = worker.log_tail()
        return f"{died} during the {phase} phase" + (f"; its last output:\n{tail}" if tail else "")

    def _serve_build(self, request: dict) -> dict:
        """A candidate's build request (its load_inline / load calls): only a run with a candidate has one."""
        raise NotImplementedError

    def shutdown(self) -> None:
        from cuda_agent.env.infra import judges

        self._close_spare_staging()
        if self.twin is not None:
            self.twin.kill()
        for worker in (self.candidate, self.judge):
            if worker is not None:
                if worker.role == "candidate":
                    self.result.log = worker.log_tail()
                if worker is self.judge and self._judge_reusable():
                    judges.give_back(worker, self.backend, self.gpu, candidate=self.candidate)
                else:
                    worker.kill()

    judge_set_up = False   # the judge answered its job: the task's reference ran

    def _judge_reusable(self) -> bool:
        """Whether a persistent judge may serve another evaluation: it did this one's job in full (set
        up, no answer of it still due) and nothing failed on the task's side or ours (its timeout, crash
        or malformed answer fails the task phase too)."""
        error = self.result.error
        return (self.judge.handover is not None and self.judge_set_up and not self.judge.channel.awaiting
                and (error is None or error.phase not in ("task", "internal")))

    spare_staging: int | None = None   # a spare's staging file: its candidate has it, its judge not yet

    def take_spare(self, spare) -> None:
        """Workers started ahead (infra/spares.py): a candidate and its twin, and with fresh judges its judge."""
        self.judge, self.candidate, self.spare_staging = spare.judge, spare.candidate, spare.staging_fd
        self.twin = spare.twin

    def _start_workers(self, need_judge: bool, persistent: bool, timed: bool = False) -> None:
        """The run's candidate and (`need_judge`) its judge, and (`timed`, on the CPU backend) its twin, sharing
        a staging file: started now, or a spare's; a spare's candidate alone (kept judges) gets its judge now, as its job starts (`pair_judge`:
        an idle kept judge, else one started; `persistent` False: a judge of its own), handed the staging file
        the spare kept."""
        if self.candidate is None:   # not handed a spare
            with pair_staging() as fd:
                self.judge = (pair_judge(self.config, self.backend, self.job_dir, self.gpu, fd, persistent=persistent)
                              if need_judge else None)
                self.candidate = self._start("candidate", fd)
                if timed and needs_twin(self.backend):
                    self.twin = self._start("twin", fd)
        elif need_judge and self.judge is None:
            self.judge = pair_judge(self.config, self.backend, self.job_dir, self.gpu, self.spare_staging,
                                    persistent=persistent)
        self._close_spare_staging()   # the judge has it, or none needs it

    def _close_spare_staging(self) -> None:
        fd, self.spare_staging = self.spare_staging, None
        close_staging(fd)

    def _start(self, role: str, staging_fd: int | None = None) -> Worker:
        from cuda_agent.env.infra.sandbox import SandboxUnavailable

        try:
            return _start_worker(role, self.config, self.backend, self.job_dir, self.gpu, staging_fd)
        except SandboxUnavailable as exc:
            from cuda_agent.env.infra.doctor import Machine, check_sandbox

            fix = check_sandbox(Machine(), self.config.sandbox).line()
            raise Failed("internal", f"{exc}\n{fix}", rule=rules.SANDBOX) from None

    def _wait_ready(self, worker: Worker) -> None:
        if worker.main_pid is not None:   # ready before: a persistent judge's later evaluation
            return
        try:
            worker.wait_ready()
        except (ChildDied, ChildTimeout) as exc:
            raise Failed("internal", f"could not start the {worker.role} worker: {exc}\n{worker.log_tail()}",
                         not_started=True) from None
        if self.trace is not None:   # how long the worker took to start (a spare's head start is beside it)
            for step, seconds in worker.startup.items():
                self.trace[f"startup.{worker.role}.{step}"] = seconds
            self.trace[f"startup.{worker.role}.taken_at"] = self.started - worker.spawned

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
            raise Failed("internal", f"the device hold did not build: {exc.summary}") from None

    def _send_judge_job(self, candidate: bool = True) -> None:
        self._wait_ready(self.judge)
        self.judge.channel.send(msg.JudgeJob(task_code=self.task.code, task_name=self.task.name, backend=self.backend,
                                             config=self.cfg, box=str(self.box), save_init=candidate,
                                             lock=str(self.lock.path), hold_lib=self._hold_path(),
                                             footprint=job_footprint(self.task, self.backend, self.gpu),
                                             batch=JUDGE_BATCH))

    def _judge_ready(self) -> None:
        """The judge's answer to its job: the task's reference ran."""
        self.say("computing the reference")
        reference = self._ask(self.judge, self.config.timeout_reference, "task")
        if not reference["ok"]:
            raise Failed("task", f"the task's reference failed: {reference['message']}")
        self.judge_set_up = True
        self.result.device = reference["device"]
        self.output_bytes = reference.get("output_bytes")
        # a call's inputs can go through the pair's staging file (the CPU backend's calls from outside)
        self.inputs_fit = 0 <= (reference.get("input_bytes") or 0) <= (reference.get("slot_bytes") or -1)
        # outputs larger than a staging slot: on the device, when the judge made its slot (device_slot.py)
        self.device_slot = bool(reference.get("device_slot"))
        if reference.get("device_slot_error"):
            self.result.warnings.append(f"large outputs go through files: no device slot ({reference['device_slot_error']})")

    output_bytes: int | None = None   # the reference's output in a staging slot (the judge's first run)
    inputs_fit = False
    device_slot = False   # the judge's device slot, mapped by the candidate too
