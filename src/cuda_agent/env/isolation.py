"""Starting and stopping worker processes: own process group, own GPU, optional sandbox.

A worker is `python -m cuda_agent.env.worker ROLE`, optionally inside bubblewrap (see
sandbox.py). Its stdout/stderr go to a log file whose tail is reported; it is killed with its
whole process group on timeout, so a hung kernel or a forked helper cannot outlive it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from cuda_agent.env.protocol import PROTOCOL_FD_ENV, ParentChannel

# Startup is importing torch and (on CUDA) creating a context; generous, but finite.
STARTUP_TIMEOUT_S = 120.0


@dataclass
class Worker:
    role: str
    proc: subprocess.Popen
    channel: ParentChannel
    log_path: Path

    def log_tail(self, limit: int = 2000) -> str:
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return ""
        return data[-limit:].decode(errors="replace")

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT_S) -> None:
        hello = self.channel.receive(timeout)
        if not hello.get("ready"):
            raise RuntimeError(f"{self.role} worker did not start: {hello}")

    def kill(self) -> None:
        """SIGKILL the worker's process group; the exit (a CUDA context's teardown can take a
        second or more) is reaped in the background, off the evaluation's critical path."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        try:
            self.proc.stdin.close()
        except (OSError, AttributeError):
            pass
        self.channel.close()
        threading.Thread(target=self._reap, daemon=True).start()

    def _reap(self) -> None:
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass


def start_worker(role: str, job_dir: Path, backend: str, gpu: int | None,
                 wrap: list[str] | None = None) -> Worker:
    """Start a worker process; call `wait_ready()` before sending it work."""
    read_fd, write_fd = os.pipe()
    env = dict(os.environ)
    env[PROTOCOL_FD_ENV] = str(write_fd)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["CUDA_AGENT_WORKER_BACKEND"] = backend  # lets the worker create its CUDA context early
    if backend == "cuda" and gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
    elif backend == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU evaluation must not touch (or hog) a GPU
    if role == "candidate":
        env["MALLOC_PERTURB_"] = "165"  # heap memory comes back as garbage, never stale results
    # Our package must be importable in the child even when it is not installed.
    src = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    log_path = job_dir / f"{role}.log"
    log = open(log_path, "wb")
    cmd = [*(wrap or []), sys.executable, "-m", "cuda_agent.env.worker", role]
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                                pass_fds=(write_fd,), env=env, cwd=job_dir, start_new_session=True)
    finally:
        os.close(write_fd)
        log.close()
    return Worker(role, proc, ParentChannel(proc, read_fd), log_path)
