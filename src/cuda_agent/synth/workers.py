"""Run filter jobs in worker processes: one task per process at a time, with a per-task timeout.

`ProcessPool` keeps one single-worker `ProcessPoolExecutor` (spawn context) per slot, so a crash or a
timeout is pinned on the task that caused it: the slot's worker is killed (timeout) or found dead
(crash), the task recorded as `timeout` / `crashed`, and the slot gets a fresh executor; other slots
are not disturbed. A slot's worker is also replaced, between two tasks, once it has run `max_tasks`
tasks or its resident memory after a task passes `max_rss_mb` (a long-lived worker keeps every
task's imports, compiled code and allocator caches). Each result carries the worker's memory
(`RSS_FIELD`, `PEAK_FIELD`), and a worker killed by SIGKILL that the pool did not kill is reported
with what is known of the memory at that moment. `RayPool` has the same interface and slots on a
Ray cluster: one long-lived actor per slot (on the CUDA backend each holds a share of a GPU),
replaced the same way; Ray is an optional import.
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

from cuda_agent.env.workers.protocol import signal_name
from cuda_agent.synth import memory

RSS_FIELD = "worker_rss_mb"     # the worker's resident memory after the task, MiB
PEAK_FIELD = "worker_peak_mb"   # its high-water mark during the task, MiB
START_TIMEOUT_S = 300.0         # a worker that has not started by then is a broken host, not a task
SAMPLE_EVERY_S = 0.5            # how often the pool reads its running workers' RSS


@dataclass
class _Slot:
    executor: cf.ProcessPoolExecutor
    pid: int | None = None            # None while its worker starts
    starting: cf.Future | None = None  # the starting worker's os.getpid, until it answers
    start_asked: float = 0.0
    key: Any = None
    future: cf.Future | None = None
    started: float = 0.0
    killed: bool = False
    process: Any = None   # its multiprocessing.Process, whose exit code says how a crashed worker died
    tasks: int = 0                     # tasks its worker has finished
    rss_mb: float | None = None        # its worker's RSS after its last task
    seen_rss_mb: float | None = None   # the largest RSS the pool read during the running task


def failure(key, reason: str, detail: str) -> dict:
    return {"id": key, "ok": False, "reason": reason, "detail": detail}


def run_measured(fn: Callable[[dict], dict], payload: dict) -> dict:
    """The worker's side of a task: `fn(payload)`, with the worker's memory added to its result."""
    memory.reset_peak_rss()   # where the kernel does not allow it, the peak is the worker's lifetime's
    result = fn(payload)
    if isinstance(result, dict):
        result = {**result, RSS_FIELD: memory.rss_mb(), PEAK_FIELD: memory.peak_rss_mb()}
    return result


class _Wear:
    """What both pools keep of their workers' age and memory: when a slot's worker is due for
    replacement (`max_tasks` jobs, or its RSS after a job past `max_rss_mb`; None: no bound), the
    largest worker memory seen and how many were replaced. A slot has `tasks` and `rss_mb`."""

    max_tasks: int | None = None
    max_rss_mb: float | None = None
    recycled: int = 0
    peak_rss_mb: float | None = None

    def _peak(self, mb: float | None) -> None:
        if mb is not None:
            self.peak_rss_mb = max(mb, self.peak_rss_mb or 0.0)

    def _note_memory(self, slot, result) -> None:
        if isinstance(result, dict):
            slot.rss_mb = result.get(RSS_FIELD)
            self._peak(result.get(PEAK_FIELD))
            self._peak(slot.rss_mb)

    def _worn(self, slot) -> bool:
        """Whether the slot's worker is due for replacement before its next job."""
        if self.max_tasks and slot.tasks >= self.max_tasks:
            return True
        return bool(self.max_rss_mb and slot.rss_mb is not None and slot.rss_mb > self.max_rss_mb)

    @staticmethod
    def _own_memory(slot) -> str:
        """The worker's memory as the pool last saw it: after its last task, and during this one."""
        runs = f"{slot.tasks} task{'s' if slot.tasks != 1 else ''} run"
        own = (f"its RSS {_size(slot.rss_mb)} after its last task ({runs})" if slot.tasks
               else "its RSS not reported yet (its first task)")
        if getattr(slot, "seen_rss_mb", None) is not None:
            own += f", at least {_size(slot.seen_rss_mb)} during this one"
        return own

    def memory_summary(self) -> dict:
        """The workers' largest memory seen and how many were replaced for their age or size."""
        return {"worker_peak_rss_mb": self.peak_rss_mb, "workers_recycled": self.recycled}


class ProcessPool(_Wear):
    """`submit(key, payload)` while `free() > 0`; `wait()` returns finished (key, result) pairs.
    `max_tasks` / `max_rss_mb` (None: no bound) say when a slot's worker is replaced between tasks;
    `recycled` counts those replacements and `peak_rss_mb` is the largest worker memory seen. (The
    executor's own `max_tasks_per_child` would swap the worker behind the slot's back: a pid the
    timeout's kill does not know.)"""

    def __init__(self, fn: Callable[[dict], dict], workers: int, timeout_s: float,
                 env_for_slot: Callable[[int], dict] | None = None, max_tasks: int | None = None,
                 max_rss_mb: float | None = None):
        self.fn, self.timeout_s = fn, timeout_s
        self.env_for_slot = env_for_slot
        self.max_tasks, self.max_rss_mb = max_tasks, max_rss_mb
        self.recycled, self.peak_rss_mb = 0, None
        self.oom_kills_before = memory.cgroup_memory().get("oom_kill")
        self._sampled = 0.0
        # every worker starts at once (a spawned worker takes a second or more to import): one after
        # another, 48 workers spent most of a short run starting
        self.slots = [self._start(_Slot(self._executor(i))) for i in range(max(1, workers))]
        for slot in self.slots:
            self._started(slot, block=True)

    def _executor(self, index: int) -> cf.ProcessPoolExecutor:
        env = self.env_for_slot(index) if self.env_for_slot else {}
        return cf.ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                      initializer=_set_env, initargs=(env,))

    @staticmethod
    def _start(slot: _Slot) -> _Slot:
        slot.starting, slot.start_asked = slot.executor.submit(os.getpid), time.monotonic()
        return slot

    def _started(self, slot: _Slot, block: bool = False) -> bool:
        """Whether the slot's worker is up (and its pid known), taking it over once it has answered."""
        if slot.starting is None:
            return True
        if not block and not slot.starting.done():
            if time.monotonic() - slot.start_asked > START_TIMEOUT_S:
                raise RuntimeError(f"a filter worker did not start in {START_TIMEOUT_S:.0f} s")
            return False
        slot.pid = slot.starting.result(timeout=START_TIMEOUT_S)   # starts the worker; we may kill it later
        # the executor's own record of its worker (not public API: without it a crash says less)
        slot.process = (getattr(slot.executor, "_processes", None) or {}).get(slot.pid)
        slot.starting = None
        return True

    def free(self) -> int:
        return sum(1 for s in self.slots if s.future is None and self._started(s))

    def busy(self) -> int:
        return len(self.slots) - self.free()

    def submit(self, key, payload: dict, spent_s: float = 0.0) -> None:
        """`spent_s`: what earlier runs of this task already spent (it counts against the timeout)."""
        slot = next(s for s in self.slots if s.future is None and self._started(s))
        slot.key, slot.started, slot.killed, slot.seen_rss_mb = key, time.monotonic() - spent_s, False, None
        slot.future = slot.executor.submit(run_measured, self.fn, payload)

    def running_seconds(self) -> list[tuple[Any, float]]:
        """(key, seconds spent on it, earlier runs included) for each task running now."""
        now = time.monotonic()
        return [(s.key, now - s.started) for s in self.slots if s.future is not None]

    def wait(self, timeout: float = 0.5) -> list[tuple[Any, dict]]:
        running = {s.future: s for s in self.slots if s.future is not None}
        starting = [s.starting for s in self.slots if s.starting is not None]
        if not running and not starting:
            return []
        # a worker that finishes starting ends the wait too: its slot can take a task
        done, _ = cf.wait([*running, *starting], timeout=timeout, return_when=cf.FIRST_COMPLETED)
        for slot in self.slots:
            if slot.starting is not None and slot.starting.done():
                self._started(slot)
        now = time.monotonic()
        self._sample(running.values(), now)
        for slot in running.values():
            if slot.future not in done and not slot.killed and now - slot.started > self.timeout_s:
                _kill(slot.pid)        # the future then fails with BrokenProcessPool
                slot.killed = True
        finished = []
        for future in done:
            slot = running.get(future)
            if slot is None:
                continue   # a worker that started (taken over above)
            try:
                result = future.result()
            except BrokenProcessPool:
                result = (failure(slot.key, "timeout", f"killed after {self.timeout_s:.0f} s") if slot.killed
                          else failure(slot.key, "crashed", self._crash_detail(slot)))
                self._replace(slot)
            except Exception as exc:  # noqa: BLE001 - e.g. a result that cannot be pickled
                result = failure(slot.key, "internal_error", f"{type(exc).__name__}: {exc}")
                slot.tasks += 1
            else:
                slot.tasks += 1
                self._note_memory(slot, result)
            finished.append((slot.key, result))
            slot.future, slot.key = None, None
            if slot.starting is None and self._worn(slot):
                self._replace(slot)
                self.recycled += 1
        return finished

    def _sample(self, slots, now: float) -> None:
        """Read the running workers' RSS now and then: a worker the kernel kills for memory reports
        nothing itself."""
        if now - self._sampled < SAMPLE_EVERY_S:
            return
        self._sampled = now
        for slot in slots:
            rss = memory.rss_mb(slot.pid)
            if rss is not None:
                slot.seen_rss_mb = max(rss, slot.seen_rss_mb or 0.0)
                self._peak(rss)

    def _crash_detail(self, slot: _Slot) -> str:
        how = _how_it_died(slot)
        detail = f"the worker process died ({how})"
        if how.startswith("killed by SIGKILL"):   # not the pool's kill (that is a timeout): the kernel's?
            detail += "; " + self._memory_facts(slot)
        return detail

    def _memory_facts(self, slot: _Slot) -> str:
        """What is known of the memory when a worker was found killed: its own, the host's, the cgroup's."""
        host = memory.host_memory_mb()
        facts = [self._own_memory(slot), f"host MemAvailable {_size(host['MemAvailable'])} of {_size(host['MemTotal'])}, "
                      f"Shmem {_size(host['Shmem'])}"]
        group = memory.cgroup_memory()
        if group:
            use = f"cgroup {_size(_mib(group['current']))}"
            if group["limit"] is not None:
                use += f" of {_size(_mib(group['limit']))}"
            kills = group["oom_kill"]
            if kills is not None:
                use += f", oom_kill {kills}"
                if self.oom_kills_before is not None:
                    use += f" ({kills - self.oom_kills_before} since the pool started)"
            facts.append(use)
        return "; ".join(facts)

    def _replace(self, slot: _Slot) -> None:
        """A fresh worker for the slot, started now; the slot takes tasks once it has answered."""
        slot.executor.shutdown(wait=False, cancel_futures=True)
        slot.executor = self._executor(self.slots.index(slot))
        slot.pid, slot.process, slot.tasks, slot.rss_mb, slot.seen_rss_mb = None, None, 0, None, None
        self._start(slot)

    def shutdown(self) -> None:
        """Stop now: kill our worker processes (in-flight tasks are simply not recorded)."""
        for slot in self.slots:
            if slot.future is not None:
                _kill(slot.pid)
            slot.executor.shutdown(wait=False, cancel_futures=True)


def _mib(n_bytes: int | None) -> float | None:
    return None if n_bytes is None else n_bytes / 2**20


def _size(mb: float | None) -> str:
    if mb is None:
        return "unknown"
    return f"{mb / 1024:.1f} GiB" if mb >= 1024 else f"{mb:.0f} MiB"


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
        return f"killed by {signal_name(-code)}" + (", not by the pool: out of memory?" if code == -signal.SIGKILL else "")
    return f"exit status {code}"


def _actor_death(exc: BaseException, chars: int = 300) -> str:
    """Why Ray says an actor died, without its identity lines (class, id, pid, namespace, ip: indented)
    and its generic advice: the worker's exit type and detail, or the memory monitor's kill."""
    lines = str(exc).splitlines()
    cause = " ".join(line.strip() for line in lines[1:] if line.strip() and not line[:1].isspace())
    cause = cause.split(" Some common causes include")[0].split(" To troubleshoot")[0] or (lines or [""])[0]
    if "memory pressure" in cause or "low on memory" in cause:
        cause = "killed by Ray's memory monitor, its node low on memory: " + cause
    return cause if len(cause) <= chars else cause[:chars] + "..."


def _set_env(env: dict) -> None:
    import faulthandler

    os.environ.update(env)
    faulthandler.enable()   # a crash prints the worker's Python stack to the run's error output


def _kill(pid: int | None) -> None:
    if pid is None:
        return
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class _FilterActor:
    """A filter worker on a Ray cluster: one long-lived process that runs one job at a time (a Ray
    task holding a GPU share would get a fresh process per job, Ray's `max_calls=1` for GPU tasks)."""

    def __init__(self, fn: Callable[[dict], dict]):
        self.fn = fn

    def pid(self) -> int:
        return os.getpid()

    def run(self, payload: dict) -> dict:
        return run_measured(self.fn, payload)


@dataclass
class _ActorSlot:
    actor: Any = None
    starting: Any = None     # the ref to its actor's os.getpid, until it answers
    start_asked: float = 0.0
    pid: int | None = None   # None while its actor starts
    key: Any = None
    ref: Any = None          # the running job's result
    started: float = 0.0
    tasks: int = 0
    rss_mb: float | None = None


class RayPool(_Wear):
    """The same interface over Ray actors; `address` is the cluster (`ray.init(address=...)`). One
    actor per slot (`_FilterActor`, `num_cpus=1`), started together, each running one job at a time in
    its own long-lived process, as `ProcessPool`'s workers do. With `gpu`, each actor holds an equal
    share of the cluster's GPUs, so that `workers` jobs run at once spread over them (a filter job is
    mostly CPU work around short GPU timings); `sharing` is how many actors share a GPU. Ray gives an
    actor its GPU for its lifetime (a reused task worker keeps the device it first used while Ray may
    give its next task another). `env` is set in the actors' processes. A job past `timeout_s` has its
    actor killed (`timeout`), an actor that dies under a job gives `crashed` with Ray's cause; either
    way, and after `max_tasks` jobs or once its RSS after a job passes `max_rss_mb`, the slot gets a
    fresh actor, which takes jobs once it has answered. A slot whose actor the cluster cannot place
    yet (too few CPUs or GPU shares) waits for it; no actor up after `START_TIMEOUT_S` is an error."""

    def __init__(self, fn: Callable[[dict], dict], workers: int, timeout_s: float, address: str,
                 gpu: bool = False, env: dict | None = None, max_tasks: int | None = None,
                 max_rss_mb: float | None = None):
        try:
            import ray
        except ImportError as exc:
            raise RuntimeError("--ray needs the `ray` package (pip install 'cuda-agent[ray]')") from exc
        self.ray = ray
        if not ray.is_initialized():
            ray.init(address=address, ignore_reinit_error=True)
        self.fn, self.capacity, self.timeout_s = fn, max(1, workers), timeout_s
        self.max_tasks, self.max_rss_mb = max_tasks, max_rss_mb
        self.recycled, self.peak_rss_mb = 0, None
        self.num_gpus, self.sharing = 0.0, 1
        if gpu:
            gpus = int(ray.cluster_resources().get("GPU", 0))
            if gpus < 1:
                raise RuntimeError(f"the Ray cluster at {address} has no GPUs (ray.cluster_resources())")
            self.sharing = -(-self.capacity // gpus)
            self.num_gpus = math.floor(1e4 / self.sharing) / 1e4   # Ray counts GPU shares to 1e-4
        self.options = {"num_gpus": self.num_gpus, "num_cpus": 1, "max_restarts": 0, "max_task_retries": 0}
        if env:
            self.options["runtime_env"] = {"env_vars": dict(env)}
        self.actor_class = ray.remote(_FilterActor)
        # creating an actor does not wait for it: every slot's actor starts at once
        self.slots = [self._start(_ActorSlot()) for _ in range(self.capacity)]

    def _start(self, slot: _ActorSlot) -> _ActorSlot:
        slot.actor = self.actor_class.options(**self.options).remote(self.fn)
        slot.starting, slot.start_asked = slot.actor.pid.remote(), time.monotonic()
        slot.pid, slot.tasks, slot.rss_mb = None, 0, None
        return slot

    def _replace(self, slot: _ActorSlot) -> None:
        try:
            self.ray.kill(slot.actor, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass
        slot.key, slot.ref = None, None
        self._start(slot)

    def free(self) -> int:
        return sum(1 for s in self.slots if s.pid is not None and s.ref is None)

    def busy(self) -> int:
        """Jobs running; with none running and no slot free, the starting slots (the pool waits for
        one). An actor the cluster cannot place yet is not waited for while another slot can work."""
        running = sum(1 for s in self.slots if s.ref is not None)
        if running or self.free():
            return running
        return sum(1 for s in self.slots if s.starting is not None)

    def submit(self, key, payload: dict, spent_s: float = 0.0) -> None:
        """`spent_s`: what earlier runs of this task already spent (it counts against the timeout)."""
        slot = next(s for s in self.slots if s.pid is not None and s.ref is None)
        slot.key, slot.started = key, time.monotonic() - spent_s
        slot.ref = slot.actor.run.remote(payload)

    def running_seconds(self) -> list[tuple[Any, float]]:
        """(key, seconds spent on it, earlier runs included) for each job running now."""
        now = time.monotonic()
        return [(s.key, now - s.started) for s in self.slots if s.ref is not None]

    def wait(self, timeout: float = 0.5) -> list[tuple[Any, dict]]:
        running = {s.ref: s for s in self.slots if s.ref is not None}
        starting = {s.starting: s for s in self.slots if s.starting is not None}
        refs = [*running, *starting]
        if not refs:
            return []
        # an actor that finishes starting ends the wait too: its slot can take a job
        ready, _ = self.ray.wait(refs, num_returns=1, timeout=timeout)
        if ready:
            ready, _ = self.ray.wait(refs, num_returns=len(refs), timeout=0)
        finished = []
        for ref in ready:
            if ref in starting:
                self._started(starting[ref])
            else:
                slot = running[ref]
                finished.append((slot.key, self._result(slot, ref)))
        now = time.monotonic()
        for slot in self.slots:
            if slot.ref is not None and now - slot.started > self.timeout_s:
                finished.append((slot.key, failure(slot.key, "timeout", f"killed after {self.timeout_s:.0f} s")))
                self._replace(slot)
        if all(s.pid is None and now - s.start_asked > START_TIMEOUT_S for s in self.slots):
            raise RuntimeError(f"no filter actor started in {START_TIMEOUT_S:.0f} s: can the Ray cluster place "
                               f"one with num_cpus=1, num_gpus={self.num_gpus}?")
        return finished

    def _started(self, slot: _ActorSlot) -> None:
        try:
            slot.pid = self.ray.get(slot.starting)
        except Exception as exc:  # noqa: BLE001 - a broken cluster or environment, not a task
            raise RuntimeError(f"a filter actor did not start: {type(exc).__name__}: {exc}") from exc
        slot.starting = None

    def _result(self, slot: _ActorSlot, ref) -> dict:
        key = slot.key
        try:
            result = self.ray.get(ref)
        except self.ray.exceptions.RayActorError as exc:   # its process died (a crash, or killed for memory)
            detail = f"the filter actor (pid {slot.pid}) died: {_actor_death(exc)}; {self._own_memory(slot)}"
            self._replace(slot)
            return failure(key, "crashed", detail)
        except Exception as exc:  # noqa: BLE001 - the job raised; its actor lives on
            result = failure(key, "internal_error", f"{type(exc).__name__}: {exc}")
        else:
            self._note_memory(slot, result)
        slot.tasks += 1
        slot.key, slot.ref = None, None
        if self._worn(slot):
            self._replace(slot)
            self.recycled += 1
        return result

    def shutdown(self) -> None:
        """Stop now: kill the actors (in-flight jobs are simply not recorded)."""
        for slot in self.slots:
            try:
                self.ray.kill(slot.actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
            slot.ref = slot.starting = None
