"""Run filter jobs in worker processes: one task per process at a time, with a per-task timeout.

`ProcessPool` keeps one single-worker `ProcessPoolExecutor` (spawn context) per slot, so a crash or a
timeout is pinned on the task that caused it: the slot's worker is killed (timeout) or found dead
(crash), the task recorded as `timeout` / `crashed`, and the slot gets a fresh executor; other slots
are not disturbed. `RayPool` has the same interface and sends each job to a Ray cluster as a task
(on the CUDA backend each holds a share of a GPU); Ray is an optional import.
"""

from __future__ import annotations

import concurrent.futures as cf
import math
import multiprocessing
import os
import signal
import time
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Callable


@dataclass
class _Slot:
    executor: cf.ProcessPoolExecutor
    pid: int
    key: Any = None
    future: cf.Future | None = None
    started: float = 0.0
    killed: bool = False
    process: Any = None   # its multiprocessing.Process, whose exit code says how a crashed worker died


def _failure(key, reason: str, detail: str) -> dict:
    return {"id": key, "ok": False, "reason": reason, "detail": detail}


class ProcessPool:
    """`submit(key, payload)` while `free() > 0`; `wait()` returns finished (key, result) pairs."""

    def __init__(self, fn: Callable[[dict], dict], workers: int, timeout_s: float,
                 env_for_slot: Callable[[int], dict] | None = None):
        self.fn, self.timeout_s = fn, timeout_s
        self.env_for_slot = env_for_slot
        # every worker starts at once (a spawned worker takes a second or more to import): one after
        # another, 48 workers spent most of a short run starting
        executors = [self._executor(i) for i in range(max(1, workers))]
        started = [executor.submit(os.getpid) for executor in executors]
        self.slots = [_slot(executor, pid.result(timeout=300)) for executor, pid in zip(executors, started)]

    def _executor(self, index: int) -> cf.ProcessPoolExecutor:
        env = self.env_for_slot(index) if self.env_for_slot else {}
        return cf.ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                      initializer=_set_env, initargs=(env,))

    def _new_slot(self, index: int) -> _Slot:
        executor = self._executor(index)
        pid = executor.submit(os.getpid).result(timeout=300)   # starts the worker; we may kill it later
        return _slot(executor, pid)

    def free(self) -> int:
        return sum(1 for s in self.slots if s.future is None)

    def busy(self) -> int:
        return len(self.slots) - self.free()

    def submit(self, key, payload: dict) -> None:
        slot = next(s for s in self.slots if s.future is None)
        slot.key, slot.started, slot.killed = key, time.monotonic(), False
        slot.future = slot.executor.submit(self.fn, payload)

    def wait(self, timeout: float = 0.5) -> list[tuple[Any, dict]]:
        running = {s.future: s for s in self.slots if s.future is not None}
        if not running:
            return []
        done, _ = cf.wait(running, timeout=timeout, return_when=cf.FIRST_COMPLETED)
        now = time.monotonic()
        for slot in running.values():
            if slot.future not in done and not slot.killed and now - slot.started > self.timeout_s:
                _kill(slot.pid)        # the future then fails with BrokenProcessPool
                slot.killed = True
        finished = []
        for future in done:
            slot = running[future]
            try:
                result = future.result()
            except BrokenProcessPool:
                result = (_failure(slot.key, "timeout", f"killed after {self.timeout_s:.0f} s") if slot.killed
                          else _failure(slot.key, "crashed", f"the worker process died ({_how_it_died(slot)})"))
                self._replace(slot)
            except Exception as exc:  # noqa: BLE001 - e.g. a result that cannot be pickled
                result = _failure(slot.key, "internal_error", f"{type(exc).__name__}: {exc}")
            finished.append((slot.key, result))
            slot.future, slot.key = None, None
        return finished

    def _replace(self, slot: _Slot) -> None:
        slot.executor.shutdown(wait=False, cancel_futures=True)
        fresh = self._new_slot(self.slots.index(slot))
        slot.executor, slot.pid, slot.process = fresh.executor, fresh.pid, fresh.process

    def shutdown(self) -> None:
        """Stop now: kill our worker processes (in-flight tasks are simply not recorded)."""
        for slot in self.slots:
            if slot.future is not None:
                _kill(slot.pid)
            slot.executor.shutdown(wait=False, cancel_futures=True)


def _slot(executor: cf.ProcessPoolExecutor, pid: int) -> _Slot:
    # the executor's own record of its worker (not public API: without it a crash says less)
    return _Slot(executor, pid, process=(getattr(executor, "_processes", None) or {}).get(pid))


def _how_it_died(slot: _Slot) -> str:
    """The crashed worker's signal or exit status, once the executor has reaped it."""
    process, code = slot.process, None
    deadline = time.monotonic() + 5.0
    # the executor's own thread reaps it too: the one of two waits that loses sees no status, so look
    # again until that thread has recorded it
    while process is not None and (code := process.exitcode) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    if code is None:
        return "segfault, abort or OOM"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}" + (": out of memory?" if code == -signal.SIGKILL else "")
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def _set_env(env: dict) -> None:
    import faulthandler

    os.environ.update(env)
    faulthandler.enable()   # a crash prints the worker's Python stack to the run's error output


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class RayPool:
    """The same interface over Ray tasks; `address` is the cluster (`ray.init(address=...)`). With
    `gpu`, each task holds an equal share of the cluster's GPUs, so that `workers` tasks run at once
    spread over them (a filter job is mostly CPU work around short GPU timings, as in `ProcessPool`,
    whose workers share the GPUs too); `sharing` is how many tasks share a GPU. `env` is set in the
    tasks' worker processes."""

    def __init__(self, fn: Callable[[dict], dict], workers: int, timeout_s: float, address: str,
                 gpu: bool = False, env: dict | None = None):
        try:
            import ray
        except ImportError as exc:
            raise RuntimeError("--ray needs the `ray` package (pip install 'cuda-agent[ray]')") from exc
        self.ray = ray
        if not ray.is_initialized():
            ray.init(address=address, ignore_reinit_error=True)
        self.capacity, self.timeout_s = max(1, workers), timeout_s
        self.num_gpus, self.sharing = 0.0, 1
        if gpu:
            gpus = int(ray.cluster_resources().get("GPU", 0))
            if gpus < 1:
                raise RuntimeError(f"the Ray cluster at {address} has no GPUs (ray.cluster_resources())")
            self.sharing = -(-self.capacity // gpus)
            self.num_gpus = math.floor(1e4 / self.sharing) / 1e4   # Ray counts GPU shares to 1e-4
        options = {"num_gpus": self.num_gpus, "max_retries": 0}
        if env:
            options["runtime_env"] = {"env_vars": dict(env)}
        self.remote = ray.remote(**options)(fn)
        self.running: dict[Any, tuple[Any, float]] = {}   # ref -> (key, started)

    def free(self) -> int:
        return self.capacity - len(self.running)

    def busy(self) -> int:
        return len(self.running)

    def submit(self, key, payload: dict) -> None:
        self.running[self.remote.remote(payload)] = (key, time.monotonic())

    def wait(self, timeout: float = 0.5) -> list[tuple[Any, dict]]:
        if not self.running:
            return []
        ready, _ = self.ray.wait(list(self.running), num_returns=1, timeout=timeout)
        finished = []
        for ref in ready:
            key, _started = self.running.pop(ref)
            try:
                finished.append((key, self.ray.get(ref)))
            except Exception as exc:  # noqa: BLE001 - worker died or task raised
                finished.append((key, _failure(key, "crashed", f"{type(exc).__name__}: {exc}")))
        now = time.monotonic()
        for ref, (key, started) in list(self.running.items()):
            if now - started > self.timeout_s:
                self.ray.cancel(ref, force=True)
                del self.running[ref]
                finished.append((key, _failure(key, "timeout", f"cancelled after {self.timeout_s:.0f} s")))
        return finished

    def shutdown(self) -> None:
        for ref in list(self.running):
            self.ray.cancel(ref, force=True)
        self.running.clear()
