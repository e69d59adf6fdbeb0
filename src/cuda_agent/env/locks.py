"""One timed call at a time per device, across threads and processes.

Evaluations overlap everything but timing: while one evaluation's calls run, others build, start
their workers, load their solutions or write files. Each call round (the candidate's call and the
judge's reference run for the same inputs) holds the device's lock, so no other evaluation's work
lands on the GPU (or the CPU cores, for the CPU backend) while it is timed.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path


def lock_path(backend: str, gpu: int | None) -> Path:
    folder = Path(os.environ.get("CUDA_AGENT_LOCK_DIR") or Path(tempfile.gettempdir()) / "cuda-agent-locks")
    folder.mkdir(parents=True, exist_ok=True)
    if backend != "cuda":
        return folder / "cpu.lock"
    index = gpu or 0
    visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    physical = visible[index] if index < len(visible) else str(index)   # the same GPU, whatever the mapping
    return folder / f"cuda-{physical.strip()}.lock"


class DeviceLock:
    """An exclusive lock on a device; each holder opens the file itself, so threads of one process
    exclude each other as processes do."""

    def __init__(self, backend: str, gpu: int | None):
        self.path = lock_path(backend, gpu)

    @contextmanager
    def held(self):
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
