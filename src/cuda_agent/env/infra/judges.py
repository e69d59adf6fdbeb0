"""Persistent judges: one judge process serves evaluations one after another (opt-in, CUDA only).

With CUDA_AGENT_PERSISTENT_JUDGE=1 an evaluation on the CUDA backend, as its job starts, takes an idle
judge of its GPU when one is alive, else starts one, and at its end hands the judge back instead of
killing it: one CUDA context fewer to make and end per evaluation (a host makes and ends only a few a
second, which caps a pool's evaluations: docs/benchmarks.md). The candidate stays a fresh process per
evaluation; a spare started ahead (spares.py) is a candidate alone, so only evaluations in flight hold
judges.

The judge is trusted (it runs only the task's code) and never runs the candidate's; between jobs it
lets go of everything of the last one (workers/judge.py's `_Judge.drop`) and gets each job's staging
file anew over its own socket (workers/handover.py). A judge whose job did not end cleanly (the task
failed, a timeout, a crash, an answer still due or one unexpected) is killed, as every judge was
before; so is one over `IDLE_PER_GPU`, and every idle one at exit. A judge is handed out only once its
last candidate's processes have exited and it has let go of its last job (`take`, which waits a little
for one that is about to be: cheaper than starting one). The CPU backend keeps fresh judges: its timing
depends on the judge's heap (`BACKENDS`).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from cuda_agent.env.infra.isolation import Worker, start_worker
from cuda_agent.env.workers.handover import hand_staging, handover_pair
from cuda_agent.env.workers.messages import NextJob
from cuda_agent.env.workers.protocol import ChildDied, ChildTimeout, ForgedMessage

ENV = "CUDA_AGENT_PERSISTENT_JUDGE"
BACKENDS = {"cuda"}   # where the flag applies (tests add "cpu": the lifecycle is the same)
IDLE_PER_GPU = 3      # idle judges kept per (backend, GPU); more are killed
ANSWER_POLL_S = 0.005   # how long `take` looks for a judge's answer to NextJob
# How long `take` waits for an idle judge to become ready (its candidate's CUDA context torn down, its
# last job let go: a few tenths of a second) before the caller starts a judge (a second or more, and
# one more of the few CUDA contexts a host makes a second).
TAKE_WAIT_S = 1.0
TAKE_POLL_S = 0.01


@dataclass
class _Idle:
    """A judge told NextJob, with what decides when it may serve again."""

    judge: Worker
    candidate: Worker | None           # its last job's candidate
    pidfds: list[int] = field(default_factory=list)   # of that candidate's processes (`_watch`)
    fit: bool | None = None            # its answer to NextJob, once read

    def ready(self) -> bool:
        """Whether its candidate has exited and its answer has come (read now if it has)."""
        if not _gone(self.candidate, self.pidfds):
            return False
        if self.fit is None:
            self.fit = _let_go(self.judge)
        return self.fit is not None

    def close(self) -> None:
        for fd in self.pidfds:
            os.close(fd)
        self.pidfds = []


# (backend, gpu) -> its idle judges, oldest first
_idle: dict[tuple, list[_Idle]] = {}
_lock = threading.Lock()   # held while an idle judge's channel is read, too


def enabled(backend: str) -> bool:
    return os.environ.get(ENV) == "1" and backend in BACKENDS


def judge_for(backend: str, gpu: int | None, staging_fd: int | None) -> Worker:
    """A persistent judge for the next evaluation, handed its staging file: an idle one, else one
    started now (`wait_ready` before its job, as for any worker)."""
    judge = take(backend, gpu)
    if judge is not None:
        try:
            hand_staging(judge.handover, staging_fd)
            judge.log_start = os.path.getsize(judge.log_path)   # its messages quote this job's lines only
            return judge
        except OSError:   # gone since its answer: a fresh one
            judge.kill()
    judge = start(backend, gpu)
    try:
        hand_staging(judge.handover, staging_fd)
    except BaseException:
        judge.kill()
        raise
    return judge


def start(backend: str, gpu: int | None) -> Worker:
    """A persistent judge in a folder of its own (its log; removed once it has exited), which outlives
    the evaluations' folders."""
    home = Path(tempfile.mkdtemp(prefix="cuda-agent-judge-"))
    ours, theirs = handover_pair()
    try:
        judge = start_worker("judge", home, backend, gpu, handover_fd=theirs.fileno())
    except BaseException:
        ours.close()
        shutil.rmtree(home, ignore_errors=True)
        raise
    finally:
        theirs.close()
    judge.handover, judge.own_dir = ours, home
    return judge


def take(backend: str, gpu: int | None) -> Worker | None:
    """An idle judge of (backend, gpu) ready for a job, or None (the caller starts a judge): its last
    candidate has exited and it has answered its NextJob, fit. Until that candidate's process is gone
    its kernels may still be writing into memory it mapped of the judge's (the device slot), which the
    judge's next job could be handed again; letting go of a job (garbage collection) takes the judge a
    fraction of a second. With idle judges none of which is ready yet (an evaluation that starts just as
    the last one ended), it waits up to TAKE_WAIT_S for one; with none idle it returns at once."""
    import time

    deadline = time.monotonic() + TAKE_WAIT_S
    while True:
        with _lock:
            waiting = _idle.get((backend, gpu)) or []
            entry = next((entry for entry in waiting if entry.ready()), None)
            if entry is not None:
                waiting.remove(entry)
            finishing = bool(waiting)
        if entry is None:
            if not finishing or time.monotonic() >= deadline:
                return None
            time.sleep(TAKE_POLL_S)
            continue
        entry.close()
        if entry.fit:
            return entry.judge
        entry.judge.kill()


def _watch(candidate: Worker | None) -> list[int]:
    """Pidfds of the killed candidate's processes (inside a sandbox: its namespace's init and the
    worker), taken when it is given back: the Worker's `exited` follows only bwrap, which is reaped
    while the processes inside still tear down (an exit that frees much memory, or a CUDA context,
    takes a while)."""
    pids = set(getattr(candidate, "expected", None) or ()) | {getattr(candidate, "main_pid", None)}
    pidfds = []
    for pid in pids - {None}:
        try:
            pidfds.append(os.pidfd_open(pid))
        except OSError:   # gone already
            pass
    return pidfds


def _gone(candidate: Worker | None, pidfds: list[int]) -> bool:
    """Whether the candidate and every process `_watch` saw have exited (now: nothing waits)."""
    import select

    if candidate is not None and not candidate.exited.is_set():
        return False
    for fd in pidfds:   # readable once the process has exited (its memory and files let go)
        poller = select.poll()   # not select(): a pool's harness may hold descriptors past 1024
        poller.register(fd, select.POLLIN)
        if not poller.poll(0):
            return False
    return True


def _let_go(judge: Worker) -> bool | None:
    """Whether the judge let go of its last job and is fit for another (its answer to NextJob), or None
    while that answer is still to come."""
    try:
        return judge.channel.receive(ANSWER_POLL_S).get("ok") is True
    except ChildTimeout:
        return None
    except (ChildDied, ForgedMessage):
        return False


def give_back(judge: Worker, backend: str, gpu: int | None, candidate: Worker | None = None) -> None:
    """After an evaluation the judge did in full (its `candidate` killed): told to let go of its job
    (its answer is read by a later `take`, off this evaluation's path) and put with the idle ones. Over
    the cap one is killed: the oldest not ready yet, else the newest."""
    try:
        judge.channel.send(NextJob())
    except ChildDied:
        judge.kill()
        return
    with _lock:
        waiting = _idle.setdefault((backend, gpu), [])
        waiting.append(_Idle(judge, candidate, _watch(candidate)))
        evicted = None
        if len(waiting) > IDLE_PER_GPU:
            evicted = next((entry for entry in waiting if not entry.ready()), waiting[-1])
            waiting.remove(evicted)
    if evicted is not None:
        evicted.close()
        evicted.judge.kill()


def idle(backend: str, gpu: int | None) -> list[Worker]:
    """The idle judges of (backend, gpu) now (a copy)."""
    with _lock:
        return [entry.judge for entry in _idle.get((backend, gpu), [])]


def all_ready() -> bool:
    """Whether every idle judge is ready for a job (tests that follow one judge wait for this)."""
    with _lock:
        return all(entry.ready() for waiting in _idle.values() for entry in waiting)


@atexit.register
def discard_all() -> None:
    """Kill every idle judge (at exit, or to start afresh)."""
    with _lock:
        kept = [entry for waiting in _idle.values() for entry in waiting]
        _idle.clear()
    for entry in kept:
        entry.close()
        entry.judge.kill()
