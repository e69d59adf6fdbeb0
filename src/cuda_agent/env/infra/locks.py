"""A device's lock: timed work alone on the device, everything else of the evaluations beside each other.

A timed call holds the lock exclusively; the short device work around it (draws, verification calls,
comparisons) holds it shared and waits for its own device work before letting go. A waiting writer
closes a gate to new shared holders, so shared sections cannot starve a timed call, and `Hold.share()`
turns the rest of an exclusive hold shared with nobody getting in between. Each holder opens the files
itself (flock's locks belong to an open file), so threads of one process exclude each other as
processes do. CUDA_AGENT_LOCK_LOG=FILE records every hold; the design is in docs/environment.md.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path


def lock_path(backend: str, gpu: int | None) -> Path:
    folder = Path(os.environ.get("CUDA_AGENT_LOCK_DIR") or Path(tempfile.gettempdir()) / "cuda-agent-locks")
    folder.mkdir(parents=True, exist_ok=True)
    if backend != "cuda":
        return folder / "cpu.lock"
    from cuda_agent.env.infra.devices import physical_gpu

    return folder / f"cuda-{physical_gpu(gpu)}.lock"   # the same GPU, whatever the process's mapping


class DeviceLock:
    """The lock of one device, by its file (`lock_path`); `held()` exclusive, `held(shared=True)` shared."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.gate = self.path.with_name(self.path.name + ".gate")

    @classmethod
    def of(cls, backend: str, gpu: int | None) -> "DeviceLock":
        return cls(lock_path(backend, gpu))

    @contextmanager
    def held(self, shared: bool = False, label: str = ""):
        """Yields the `Hold`; `label` names the holder in the lock log (CUDA_AGENT_LOCK_LOG), when one is kept."""
        hold = Hold(label, shared)
        gate = os.open(self.gate, os.O_RDWR | os.O_CREAT, 0o666)
        main = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        hold.files = (gate, main)
        try:
            fcntl.flock(gate, fcntl.LOCK_EX)
            if shared:   # through the gate and out again: only a waiting writer keeps it closed
                fcntl.flock(main, fcntl.LOCK_SH)
                fcntl.flock(gate, fcntl.LOCK_UN)
            else:        # the gate stays closed while this writer waits and works
                fcntl.flock(main, fcntl.LOCK_EX)
            hold.got = time.monotonic()
            yield hold
        finally:
            fcntl.flock(main, fcntl.LOCK_UN)
            fcntl.flock(gate, fcntl.LOCK_UN)
            os.close(main)
            os.close(gate)
            hold.files = None
            if hold.got is not None and os.environ.get("CUDA_AGENT_LOCK_LOG"):
                hold.log(time.monotonic())


class Hold:
    """One hold of a `DeviceLock`, as `held()` yields it."""

    def __init__(self, label: str, shared: bool):
        self.label, self.shared = label, shared
        self.asked, self.got, self.shared_at = time.monotonic(), None, None
        self.files: tuple[int, int] | None = None   # (gate, main) while held

    def share(self) -> None:
        """The rest of an exclusive hold shared (nothing for a shared one): the gate stays closed
        while the lock is converted, so no other holder gets in between, then opens."""
        if self.shared or self.files is None:
            return
        gate, main = self.files
        fcntl.flock(main, fcntl.LOCK_SH)
        fcntl.flock(gate, fcntl.LOCK_UN)
        self.shared, self.shared_at = True, time.monotonic()

    def log(self, released: float) -> None:
        """Its lines in the lock log: one per part, the exclusive part and the shared rest apart."""
        if self.shared_at is None:
            _log_hold(self.label, self.shared, self.asked, self.got, released)
            return
        _log_hold(self.label, False, self.asked, self.got, self.shared_at)
        _log_hold(self.label + ".shared", True, self.shared_at, self.shared_at, released)


def _log_hold(label: str, shared: bool, asked: float, got: float, released: float) -> None:
    """One line per hold, appended in one write (lines of many processes do not interleave)."""
    _log_line(f"{os.getpid()} {label or '-'} {'S' if shared else 'X'} {asked:.6f} {got:.6f} {released:.6f}\n")


def _log_line(line: str) -> None:
    fd = os.open(os.environ["CUDA_AGENT_LOCK_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def log_outside_hold(label: str, start: float, end: float) -> None:
    """Diagnosis: device work done without the lock (a worker's start-up), on the lock log's timeline
    as an "O" line."""
    _log_line(f"{os.getpid()} {label} O {start:.6f} {start:.6f} {end:.6f}\n")
