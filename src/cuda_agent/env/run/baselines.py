"""The baseline store: eager and torch.compile timings per task, device, torch version and settings.

Every evaluation times eager itself, paired call by call with the candidate, so the eager speedup never
rests on a stored number. The store saves torch.compile's time (its compilation costs seconds to
minutes): an evaluation reuses it only while the eager time it just measured agrees with the one stored
beside it (`agrees`), scaled by their ratio; otherwise it times torch.compile afresh and
replaces the entry. Only the harness writes here (the sandbox does not see this folder); entries carry
the task's source, so `cuda-agent cache verify` can re-time a sample of them.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from cuda_agent.env.result import Timing
from cuda_agent.tasks.task import Task

# The ratio scaling absorbs the machine's drift, so the window only has to catch another machine
# state or a tampered entry; a narrow one would re-time torch.compile for the noise of a small eager time.
AGREEMENT = 0.5
# A launch-bound task's eager time is mostly the host's time to queue a few kernels, which the machine's
# load moves by more than any fraction of it: within this many milliseconds eager times agree whatever
# their ratio (the ratio scaling still applies), so such a task is not re-timed for the host's noise.
HOST_NOISE_MS = 0.05


@dataclass
class BaselineEntry:
    task: str                      # task name, for people
    task_digest: str
    device: str
    torch: str
    settings: dict
    eager: dict                    # Timing fields
    compile: dict | None = None    # Timing fields, or None with compile_error
    compile_error: str | None = None
    code: str = ""                 # the task's source (for `cache verify`)
    # the CUDA-graph baseline (feedback.py): Timing fields and the eager median timed beside it, or
    # why the reference could not be captured
    graph: dict | None = None
    graph_eager_ms: float | None = None
    graph_error: str | None = None
    created: float = field(default_factory=time.time)

    @property
    def eager_ms(self) -> float:
        return self.eager["median_ms"]

    @property
    def compile_ms(self) -> float | None:
        return self.compile["median_ms"] if self.compile else None


def timing_settings(config, backend: str) -> dict:
    """The settings that change what a baseline time means (the store is keyed by them)."""
    settings = {"backend": backend, "flush_l2": config.flush_l2}
    if config.settle_ms:   # absent when off, so entries stored before the option keep their keys
        settings["settle_ms"] = config.settle_ms
    if backend == "cuda" and config.hold:   # held calls measure less than unheld ones: never mixed; and
        # since each held call counts its side's host floor, not its own host time (hold.call_times),
        # launch-bound baselines measure less than with their own host time: kept apart too
        settings["timer"] = "held-floor"
    if backend == "cpu":   # one thread's CPU time (eager alike), not a wall clock: never mixed with those
        settings["timer"] = "cpu-time-1-thread"
    return settings


def entry_key(task_digest: str, device: str, torch_version: str, settings: dict) -> str:
    key = {"task": task_digest, "device": device, "torch": torch_version, **settings}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]


def task_key(task: Task, device: str, config, backend: str) -> str:
    """The store's key for a task's baselines timed on `device` with this torch and these settings."""
    import torch

    return entry_key(task.digest, device, torch.__version__, timing_settings(config, backend))


def task_entry(task: Task, device: str, config, backend: str, eager: Timing, compile_timing: Timing | None,
               compile_error: str | None) -> BaselineEntry:
    """An entry of the task's eager and torch.compile times (or why torch.compile has none)."""
    import torch

    return BaselineEntry(task=task.name, task_digest=task.digest, device=device, torch=torch.__version__,
                         settings=timing_settings(config, backend), eager=eager.__dict__,
                         compile=compile_timing.__dict__ if compile_timing else None,
                         compile_error=compile_error, code=task.code)


def keep_graph_fields(entry: BaselineEntry, kept: BaselineEntry | None) -> BaselineEntry:
    """`entry` with the CUDA-graph baseline's fields of the entry it replaces (they carry their own eager time)."""
    if kept is None:
        return entry
    return replace(entry, graph=kept.graph, graph_eager_ms=kept.graph_eager_ms, graph_error=kept.graph_error)


class BaselineStore:
    def __init__(self, cache_dir: Path):
        self.folder = Path(cache_dir) / "baselines"

    def _path(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def get(self, key: str) -> BaselineEntry | None:
        try:
            data = json.loads(self._path(key).read_text())
            return BaselineEntry(**data)
        except (OSError, ValueError, TypeError):
            return None   # missing or unreadable: time it afresh

    def put(self, key: str, entry: BaselineEntry) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / f".{key}.tmp{os.getpid()}"
        tmp.write_text(json.dumps(asdict(entry)))
        os.replace(tmp, self._path(key))

    @contextmanager
    def _locked(self, key: str) -> Iterator[None]:
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / f".{key}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def update(self, key: str, change: Callable[[BaselineEntry | None], BaselineEntry]) -> BaselineEntry:
        """Read, change and write an entry as one step: evaluations of one task running at once each
        write their own fields (torch.compile's, the CUDA graph's) without losing the other's."""
        with self._locked(key):
            entry = change(self.get(key))
            self.put(key, entry)
            return entry

    def entries(self) -> list[tuple[str, BaselineEntry]]:
        found = []
        for path in sorted(self.folder.glob("*.json")):
            entry = self.get(path.stem)
            if entry is not None:
                found.append((path.stem, entry))
        return found


def agrees(measured_eager_ms: float, stored_eager_ms: float | None) -> bool:
    """Whether an eager time measured now agrees with one stored beside a baseline: within `AGREEMENT`
    of it, or within `HOST_NOISE_MS`."""
    if not stored_eager_ms:
        return False
    return abs(measured_eager_ms - stored_eager_ms) <= max(AGREEMENT * stored_eager_ms, HOST_NOISE_MS)
