"""Starting and stopping worker processes: own process group, own GPU, optional sandbox.

A worker is `python -m cuda_agent.env.workers ROLE`, the candidate inside bubblewrap (sandbox.py).
An evaluation's folder holds the harness's own files (the workers' logs) and `box/`, the only place
the candidate can write: its solution, the reference's initial weights (written by the judge) and
the outputs it hands over. A worker is killed with its whole process group; a sandboxed one with
its whole PID namespace, so nothing it started outlives it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from cuda_agent.env.infra import teardown
from cuda_agent.env.workers import heap_fill
from cuda_agent.env.workers.messages import Command
from cuda_agent.env.workers.protocol import HANDOVER_FD_ENV, PROTOCOL_FD_ENV, STAGING_FD_ENV, ParentChannel

# Startup is importing torch and (on CUDA) creating a context; generous, but finite.
STARTUP_TIMEOUT_S = 120.0

# The CPU workers' glibc heap, alike on both sides and steady: blocks up to 32 MiB come from the heap
# (no mmap per tensor: fresh pages, a fault per 4 KiB, inside the timed call) and freed memory stays
# (no trim: the next call's tensors reuse pages already mapped). Values are glibc's tunables' aliases.
STEADY_HEAP = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 40)}
# both CPU workers alike: one thread each (timed by CPU time), the same allocator
CPU_WORKER_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", **STEADY_HEAP}


def box_of(job_dir: Path) -> Path:
    """The candidate's writable folder inside a job folder."""
    return Path(job_dir) / "box"



@dataclass
class Worker:
    role: str
    proc: subprocess.Popen
    channel: ParentChannel
    log_path: Path
    spawned: float                                     # monotonic time just before the process was started
    expected: set[int] = field(default_factory=set)   # processes below it once it was ready
    main_pid: int | None = None                        # the Python worker itself (inside a sandbox: its host PID)
    # (diagnosis) seconds from spawn to its main (imports), its device set-up, and from spawn to ready
    startup: dict[str, float] = field(default_factory=dict)
    stopped: bool = False                              # SIGSTOPped between commands (`stop`)
    has_staging: bool = False                          # handed the pair's staging file (the harness's own fact)
    notes: list[str] = field(default_factory=list)     # for the result's warnings (how it was started)
    gpu: int | None = None                             # the GPU it was started on (teardown.py)
    reaping: bool = False                              # killed; its exit reaped in the background
    handover: socket.socket | None = None              # a persistent judge's socket for its jobs' staging files
    own_dir: Path | None = None                        # a folder of its own, removed once it has exited
    log_start: int = 0                                 # where its current job's part of its log begins
    exited: threading.Event = field(default_factory=threading.Event)   # set once a killed worker is reaped

    def log_tail(self, limit: int = 2000) -> str:
        try:
            fd = os.open(self.log_path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return ""
        with os.fdopen(fd, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(self.log_start, size - limit))   # a kept judge's log holds earlier jobs too
            return fh.read().decode(errors="replace")

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT_S) -> None:
        from cuda_agent.env.infra.sandbox import descendants

        hello = self.channel.receive(timeout)
        if not hello.get("ready"):
            raise RuntimeError(f"{self.role} worker did not start: {hello}")
        setup = hello.get("device_setup")   # (diagnosis) when its device set-up (context, first kernels) ran
        if isinstance(setup, list) and len(setup) == 2 and all(isinstance(t, (int, float)) for t in setup):
            self.startup = {"imports": setup[0] - self.spawned, "device_setup": setup[1] - setup[0],
                            "ready": setup[1] - self.spawned}
            if os.environ.get("CUDA_AGENT_LOCK_LOG"):   # beside the lock's holds
                from cuda_agent.env.infra.locks import log_outside_hold

                log_outside_hold(f"startup.{self.role}", *setup)
        self.expected = descendants(self.proc.pid)
        self.main_pid = self.proc.pid
        while True:   # bwrap -> its init -> the worker: the deepest of the chain
            below = [p for p in self.expected if _parent(p) == self.main_pid]
            if len(below) != 1:
                break
            self.main_pid = below[0]

    def cpu_seconds(self) -> float | None:
        """CPU time every thread of the worker's process has used, from the kernel's scheduler
        statistics (read here, out of the worker's reach; other processes on a loaded machine do not
        inflate it). Final while the worker is stopped (`stop`)."""
        from cuda_agent.env.measure.outside import cpu_seconds

        return cpu_seconds(self.main_pid) if self.main_pid else None

    def stop(self, wait: bool = True) -> None:
        """Stop the worker between commands (outside.stop): none of its threads, signal handlers or
        timers runs until the next command is sent (`send`). `wait`: until every thread has stopped,
        so that its CPU time is final (the CPU backend's measure); a GPU's calls are timed otherwise."""
        from cuda_agent.env.measure.outside import stop

        if self.main_pid and not self.stopped:
            self.stopped = stop(self.main_pid, wait)

    def resume(self) -> None:
        """Let a stopped worker go on with what it does without a command (loading its solution)."""
        if self.stopped:
            from cuda_agent.env.measure.outside import resume

            resume(self.main_pid)
            self.stopped = False

    def send(self, message: Command) -> None:
        """A command to the worker (messages.py), which is resumed first if it was stopped."""
        self.resume()
        self.channel.send(message)

    def extra_processes(self) -> list[int]:
        """Processes started below the worker since it was ready (none for an honest candidate)."""
        from cuda_agent.env.infra.sandbox import descendants

        return sorted(descendants(self.proc.pid) - self.expected)

    def kill(self) -> None:
        """SIGKILL the worker's process group (for a sandbox: bwrap, whose namespace init then takes
        every process inside down with it); the exit (a CUDA context's teardown can take a second or
        more) is reaped in the background, off the evaluation's critical path."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        for pid in self.extra_processes():   # unsandboxed: whatever escaped the process group
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            self.proc.stdin.close()
        except (OSError, AttributeError):
            pass
        self.channel.close()
        if self.handover is not None:
            self.handover.close()
        if not self.reaping:
            self.reaping = True
            teardown.exiting(self.gpu)
            threading.Thread(target=self._reap, daemon=True).start()

    def _reap(self) -> None:
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
        finally:
            if self.own_dir is not None:
                shutil.rmtree(self.own_dir, ignore_errors=True)
            teardown.gone(self.gpu)
            if self.proc.poll() is not None:
                self.exited.set()


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def fork_judges() -> bool:
    """Judges come from the fork server unless CUDA_AGENT_FORK_JUDGES=0 (each then starts Python anew)."""
    return os.environ.get("CUDA_AGENT_FORK_JUDGES", "1") != "0"


def worker_env(role: str, backend: str, gpu: int | None, base: dict) -> dict:
    """A worker's environment: `base` (the harness's) with the settings of its role and backend."""
    env = dict(base)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["CUDA_AGENT_WORKER_BACKEND"] = backend  # lets the worker create its CUDA context early
    if backend == "cuda" and gpu is not None:   # our index, named as the machine names it (devices.py)
        from cuda_agent.env.infra.devices import physical_gpu

        env["CUDA_VISIBLE_DEVICES"] = physical_gpu(gpu)
    elif backend == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU evaluation must not touch (or hog) a GPU
    if backend == "cuda":
        # One CPU thread per worker unless the harness's environment says otherwise (as Ray does for its
        # actors): a GPU worker's CPU work is small, and a pool of a thread per core in each of a
        # host's dozens of workers spent more CPU waking them than on the work (docs/benchmarks.md).
        env.setdefault("OMP_NUM_THREADS", "1")
        env.setdefault("MKL_NUM_THREADS", env["OMP_NUM_THREADS"])
    if role == "judge":
        # torch.compile compiles in the judge itself: no pool of compile processes left running (and
        # loading the machine) while the baselines are timed
        env["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
        if backend == "cuda":
            # One hardware queue for the judge's context (it runs one stream): the host makes and ends
            # such contexts half again as fast, and a pool's evaluations wait for them (docs/benchmarks.md).
            # The candidate keeps the default, so streams of its own still run side by side.
            env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    if backend == "cpu":   # both sides alike: one thread each (timed by CPU time), the same allocator
        env.update(CPU_WORKER_ENV)
    if role == "candidate":
        # heap memory comes back as garbage, never stale results: from the start, then in verification
        # calls only (the worker sets it per call, heap_fill); the judge times eager without it
        env["MALLOC_PERTURB_"] = str(heap_fill.FILL_BYTE)
        # OpenMP workers park at once after a parallel region (instead of spinning for a while):
        # the thread watch counts any CPU time the solution's threads use between calls.
        env.update(OMP_WAIT_POLICY="PASSIVE", GOMP_SPINCOUNT="0", KMP_BLOCKTIME="0")
    # Our package must be importable in the child even when it is not installed.
    src = str(Path(__file__).resolve().parents[3])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    return env


def start_worker(role: str, job_dir: Path, backend: str, gpu: int | None,
                 wrap: list[str] | None = None, staging_fd: int | None = None,
                 handover_fd: int | None = None, zygote: bool = True) -> Worker:
    """Start a worker process (inside the sandbox when `wrap` is bubblewrap's command prefix); call
    `wait_ready()` before sending it work. `zygote`: a candidate may come from the candidate zygote where
    that is on (zygote.py). `staging_fd`: the pair's staging file (transfer.Staging),
    which the worker inherits (the caller keeps and closes its own descriptor); `handover_fd`, instead:
    a persistent judge's end of its socket, through which each job's staging file comes (handover.py)."""
    from cuda_agent.env.infra.sandbox import seccomp_program

    read_fd, write_fd = os.pipe()
    keep = [write_fd]
    plain_wrap = wrap   # (without the filter: the zygote installs the same program itself)
    program = seccomp_program(no_processes=backend == "cpu") if wrap else None   # sandbox.py says why
    if program is not None:   # bubblewrap reads the filter from a file descriptor it inherits
        filter_fd = os.memfd_create("cuda-agent-seccomp")
        os.write(filter_fd, program)
        os.lseek(filter_fd, 0, os.SEEK_SET)
        keep.append(filter_fd)
        wrap = [*wrap, "--seccomp", str(filter_fd)]
    env = worker_env(role, backend, gpu, dict(os.environ))
    env[PROTOCOL_FD_ENV] = str(write_fd)
    env.pop(STAGING_FD_ENV, None)
    env.pop(HANDOVER_FD_ENV, None)
    # one descriptor inherited beside the protocol's: the staging file, or a persistent judge's socket
    fd_env, passed_fd = (HANDOVER_FD_ENV, handover_fd) if handover_fd is not None else (STAGING_FD_ENV, staging_fd)
    if passed_fd is not None:
        env[fd_env] = str(passed_fd)
    box = box_of(job_dir)
    box.mkdir(parents=True, exist_ok=True)
    log_path = Path(job_dir) / f"{role}.log"
    log = open(log_path, "w+b")
    cwd = box if role == "candidate" else job_dir
    spawned = time.monotonic()   # before the process exists: a forked judge reaches its main at once
    notes, proc = [], None
    try:
        if role == "judge" and not wrap and fork_judges():   # no torch import to wait for (forkserver.py)
            from cuda_agent.env.infra.forkserver import fork_worker

            proc = fork_worker(role, env, cwd, write_fd, log.fileno(), passed_fd, device=gpu, fd_env=fd_env)
        elif role == "candidate" and wrap and zygote and os.environ.get("CUDA_AGENT_CANDIDATE_ZYGOTE") == "1":
            forked = seccomp_program(no_processes=backend == "cpu", no_exec=True)   # (it never needs exec)
            proc = _from_zygote(plain_wrap, forked, env, box, write_fd, log, backend, gpu, staging_fd, notes)
        if proc is None:
            cmd = [*(wrap or []), sys.executable, "-m", "cuda_agent.env.workers", role]
            passed = (*keep, passed_fd) if passed_fd is not None else tuple(keep)
            proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                                    pass_fds=passed, env=env, cwd=cwd, start_new_session=True)
    finally:
        for fd in keep:
            os.close(fd)
        log.close()
    return Worker(role, proc, ParentChannel(proc, read_fd), log_path, spawned,
                  has_staging=passed_fd is not None, notes=notes, gpu=gpu)


def _from_zygote(wrap: list[str], program: bytes | None, env: dict, box: Path, protocol_fd: int, log, backend: str, gpu: int | None,
                 staging_fd: int | None, notes: list[str]):
    """A candidate forked from the sandboxed zygote (zygote.py), or None (with the reason in `notes`):
    then it starts afresh."""
    from cuda_agent.env.infra.zygote import ZygoteUnavailable, fork_candidate

    try:
        return fork_candidate(wrap, program, env, box, protocol_fd, log.fileno(), backend, gpu, staging_fd)
    except (ZygoteUnavailable, OSError) as exc:
        log.flush()
        log.seek(0)
        said = log.read().decode(errors="replace").strip().splitlines()[-1:] if log.readable() else []
        log.seek(0)
        log.truncate()
        notes.append(f"candidate zygote unavailable ({exc}{': ' + said[0] if said else ''}); the candidate "
                     "was started afresh")
        return None
