"""Persistent judges: one judge process serves evaluations one after another (opt-in, CUDA only).

With CUDA_AGENT_PERSISTENT_JUDGE=1 an evaluation on the CUDA backend takes an idle judge of its GPU
when one is alive, else starts one, and at its end hands the judge back instead of killing it: one
CUDA context fewer to make and end per evaluation (a host makes and ends only a few a second, which
caps a pool's evaluations: docs/benchmarks.md). The candidate stays a fresh process per evaluation.

The judge is trusted (it runs only the task's code) and never runs the candidate's; between jobs it
lets go of everything of the last one (workers/judge.py's `_Judge.drop`) and gets each job's staging
file anew over its own socket (workers/handover.py). A judge whose job did not end cleanly (the task
failed, a timeout, a crash, an answer still due or one unexpected) is killed, as every judge was
before; so is one over `IDLE_PER_GPU`, and every idle one at exit. A judge is handed out only once its
last candidate's processes have exited (`take`). The CPU backend keeps fresh judges: its timing
depends on the judge's heap (`BACKENDS`).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from pathlib import Path

from cuda_agent.env.infra.isolation import Worker, start_worker
from cuda_agent.env.workers.handover import hand_staging, handover_pair
from cuda_agent.env.workers.messages import NextJob
from cuda_agent.env.workers.protocol import ChildDied, ChildTimeout, ForgedMessage

ENV = "CUDA_AGENT_PERSISTENT_JUDGE"
BACKENDS = {"cuda"}   # where the flag applies (tests add "cpu": the lifecycle is the same)
IDLE_PER_GPU = 3      # idle judges kept per (backend, GPU); more are killed
DROP_TIMEOUT_S = 30.0   # for a judge's answer to NextJob (letting go of a job is collecting garbage)

# (backend, gpu) -> (judge told NextJob, its last job's candidate, pidfds of that one's processes), oldest first
_idle: dict[tuple, list[tuple[Worker, Worker | None, list[int]]]] = {}
_lock = threading.Lock()


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
    """An idle judge of (backend, gpu) whose last candidate has exited and that answered its NextJob
    fit, or None (the caller starts a judge). One whose candidate is still tearing down stays idle for
    a later evaluation rather than be waited for: until that process is gone its kernels may still be
    writing into memory it mapped of the judge's (the device slot), which the judge's next job could be
    handed again, and an exit can take seconds on a busy host."""
    while True:
        with _lock:
            waiting = _idle.get((backend, gpu)) or []
            gone = next((i for i, (_, candidate, pidfds) in enumerate(waiting) if _gone(candidate, pidfds)),
                        None)
            if gone is None:
                return None
            judge, _, pidfds = waiting.pop(gone)
        for fd in pidfds:
            os.close(fd)
        if _let_go(judge):
            return judge
        judge.kill()


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


def _let_go(judge: Worker) -> bool:
    """Whether the judge let go of its last job and is fit for another (its answer to NextJob)."""
    try:
        return judge.channel.receive(DROP_TIMEOUT_S).get("ok") is True
    except (ChildDied, ChildTimeout, ForgedMessage):
        return False


def give_back(judge: Worker, backend: str, gpu: int | None, candidate: Worker | None = None) -> None:
    """After an evaluation the judge did in full (its `candidate` killed): told to let go of its job
    (its answer is read by the next `take`, off this evaluation's path) and put with the idle ones. Over
    the cap one is killed: the oldest whose candidate is still there, else the newest."""
    try:
        judge.channel.send(NextJob())
    except ChildDied:
        judge.kill()
        return
    with _lock:
        waiting = _idle.setdefault((backend, gpu), [])
        waiting.append((judge, candidate, _watch(candidate)))
        evicted = None
        if len(waiting) > IDLE_PER_GPU:
            lingering = [i for i, (_, c, pidfds) in enumerate(waiting) if not _gone(c, pidfds)]
            evicted = waiting.pop(lingering[0] if lingering else -1)
    if evicted is not None:
        for fd in evicted[2]:
            os.close(fd)
        evicted[0].kill()


def idle(backend: str, gpu: int | None) -> list[Worker]:
    """The idle judges of (backend, gpu) now (a copy)."""
    with _lock:
        return [judge for judge, _, _ in _idle.get((backend, gpu), [])]


@atexit.register
def discard_all() -> None:
    """Kill every idle judge (at exit, or to start afresh)."""
    with _lock:
        kept = [entry for waiting in _idle.values() for entry in waiting]
        _idle.clear()
    for judge, _, pidfds in kept:
        for fd in pidfds:
            os.close(fd)
        judge.kill()
