"""The task's own code, run for the harness in a process of its own: its size and its work, measured on
PyTorch's `meta` device (tasks/footprint.py `measure_footprint`, env/measure/work.py `measure_work`),
and for the synthesis a composed candidate's shape check (tasks/shapes.py `check_shapes`).

A task is trusted, but a broken one must cost an evaluation, never the harness: code that exits
(`os._exit`, `sys.exit`), crashes (a segfault through ctypes) or never finishes would take the
harness's process with it. So the harness never runs it itself: each measurement is a child forked
from the judges' fork server (forkserver.py: torch already imported, so a fork costs milliseconds; the
CPU backend's server has also loaded what a first forward on meta loads; with
`CUDA_AGENT_FORK_JUDGES=0`, or when the server cannot fork, a fresh interpreter). The child sees no GPU, reads the task from its stdin and writes its answer
(plain data: the result dataclass's fields as JSON) to a file the harness reads once it has exited.
An exit, a crash or TIMEOUT_S (KIND_TIMEOUT_S for a kind with a limit of its own) without an answer
becomes a TaskError naming what happened; an exception the task raises is, as in the measurement
itself, an estimate of what could be measured (or None), or for the shape check its answer.

Each outcome, a TaskError's message included (but not a SIGKILL from outside), is kept per task code:
the measurement depends on the source alone, so the first evaluation of a task pays one fork and later
ones a dictionary look-up. `backend` and `gpu` name the fork server to use, the one the evaluation's
judges come from: a server started here starts with that judge's environment (glibc reads its
allocator's settings at a process's start, and the judges forked later inherit them). The child's side
is workers/measure.py.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
from collections import OrderedDict

from cuda_agent.env.workers.measure import KINDS, ROLE
from cuda_agent.env.workers.protocol import signal_name
from cuda_agent.tasks.task import Task, TaskError

TIMEOUT_S = 120.0      # a recurrent model's forward takes seconds on meta (KernelBench's LSTMs and GRUs)
CACHE_SIZE = 512       # outcomes kept, each kind's together
# a synthesised candidate's shape check waits less: the synthesis composes one candidate at a time
KIND_TIMEOUT_S = {"shape": 30.0}
WORDS = {"footprint": "its size was measured", "work": "its work was measured",   # KINDS, in words
         "shape": "its shapes were checked"}

_outcomes: OrderedDict = OrderedDict()   # (kind, code) -> (value, error message)
_guard = threading.Lock()
_measuring: dict = {}                    # (kind, code) -> the lock of the measurement under way


def measured(kind: str, task: Task, backend: str | None = None, gpu: int | None = None):
    """What `kind` measures of `task` (None where meta cannot tell), from a child process the first
    time, kept after that. Raises TaskError when the task's code exited, crashed or did not finish."""
    key = (kind, task.code)
    outcome = _kept(key)
    if outcome is None:
        with _guard:
            lock = _measuring.setdefault(key, threading.Lock())
        with lock:   # threads asking for the same task wait for one measurement
            outcome = _kept(key)
            if outcome is None:
                try:
                    outcome, keep = _in_child(kind, task, backend, gpu)
                    if keep:
                        _keep(key, outcome)
                finally:
                    with _guard:
                        _measuring.pop(key, None)
    value, error = outcome
    if error is not None:
        raise TaskError(error)
    return value


def estimate_footprint(task: Task, backend: str | None = None, gpu: int | None = None):
    """Input, output and weight bytes of `task` (tasks/footprint.py's `Footprint`), or None when not
    even its inputs can be measured; once per task code (the capacity check and the judge's memory
    both ask for it). Raises TaskError when the task's code exits, crashes or does not finish."""
    return measured("footprint", task, backend, gpu)


def _keep(key, outcome: tuple) -> None:
    with _guard:
        _outcomes[key] = outcome
        while len(_outcomes) > CACHE_SIZE:
            _outcomes.popitem(last=False)


def _kept(key):
    with _guard:
        outcome = _outcomes.get(key)
        if outcome is not None:
            _outcomes.move_to_end(key)
        return outcome


def _in_child(kind: str, task: Task, backend: str | None, gpu: int | None) -> tuple[tuple, bool]:
    """((value, error message), whether to keep it): a child killed from outside (SIGKILL: the OOM
    killer, or its fork server gone) says nothing certain about the task, and is asked again next time."""
    words, (module, _, cls) = WORDS[kind], KINDS[kind]
    timeout = KIND_TIMEOUT_S.get(kind, TIMEOUT_S)
    request = json.dumps({"kind": kind, "name": task.name, "code": task.code, "origin": task.origin}).encode()
    with tempfile.TemporaryFile() as answer, tempfile.TemporaryFile() as log:
        proc = _start(backend, gpu, answer.fileno(), log.fileno())
        try:
            proc.stdin.write(request)
            proc.stdin.close()
        except OSError:   # it ended before reading: its status says how
            pass
        try:
            status = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            _kill(proc)
            return (None, f"the task's code did not finish within {timeout:g} s while {words}"), True
        answer.seek(0)
        text = answer.read()
        log.seek(0, os.SEEK_END)
        log.seek(max(0, log.tell() - 4000))
        output = log.read().decode(errors="replace")
    if status != 0 or not text:
        return (None, _ended(status, words, output, task)), status != -signal.SIGKILL
    try:
        found = json.loads(text)
        if "raised" in found:
            return (None, f"the task's code raised {found['raised']} while {words}"), True
        value = found["value"]
        return (None if value is None else getattr(importlib.import_module(module), cls)(**value), None), True
    except (ValueError, TypeError, KeyError):   # its answer written over (the task's code has the descriptor)
        return (None, f"the task's code garbled the answer of the process in which {words}"), True


def _start(backend: str | None, gpu: int | None, answer_fd: int, log_fd: int):
    """The child, forked from the fork server of `backend`'s judges on `gpu` (a fresh interpreter
    where judges are not forked or the server cannot fork); the caller keeps its descriptors."""
    from cuda_agent.env.config import detect_backend
    from cuda_agent.env.infra.isolation import fork_judges, worker_env
    from cuda_agent.env.workers.protocol import PROTOCOL_FD_ENV

    judge_env = worker_env("judge", backend or detect_backend(), gpu, dict(os.environ))
    env = dict(judge_env, CUDA_VISIBLE_DEVICES="")   # on meta: no GPU, no CUDA context
    env.pop("CUDA_AGENT_WORKER_BACKEND", None)
    cwd = tempfile.gettempdir()
    if fork_judges():
        from cuda_agent.env.infra.forkserver import fork_worker

        try:
            return fork_worker(ROLE, env, cwd, answer_fd, log_fd, device=gpu, server_env=judge_env)
        except OSError:
            pass
    return subprocess.Popen([sys.executable, "-m", "cuda_agent.env.workers", ROLE], stdin=subprocess.PIPE,
                            stdout=log_fd, stderr=log_fd, pass_fds=(answer_fd,), cwd=cwd, start_new_session=True,
                            env={**env, PROTOCOL_FD_ENV: str(answer_fd)})


def _kill(proc) -> None:
    """SIGKILL the child's session (it is its group's leader) and reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        pass


def _ended(status: int, words: str, output: str, task: Task) -> str:
    """Why the child gave no answer, in words: its exit or its signal, and where or what it said."""
    if status < 0:
        name = signal_name(-status)
        where = _crash_site(output, task.origin or task.name)
        return f"the task's code crashed ({name}) while {words}" + (f" ({where})" if where else "")
    said = [line.strip() for line in output.splitlines() if line.strip()]
    last = f"; its last output: {said[-1][:300]}" if said else ""
    if status == 0:
        return f"the task's code ended its process (exit status 0) while {words}{last}"
    return f"the task's code exited with status {status} while {words}{last}"


def _crash_site(output: str, filename: str) -> str | None:
    """The innermost line of the task's own code in faulthandler's dump ("in get_inputs, line 7")."""
    for line in output.splitlines():   # faulthandler lists the innermost frame first
        found = re.match(r'\s*File "(.*)", line (\d+) in (\S+)', line)
        if found and found[1] == filename:
            return f"in {found[3]}, line {found[2]}"
    return None
