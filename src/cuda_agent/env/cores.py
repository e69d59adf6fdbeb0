"""A CPU core kept for timing: the host side of a timed call runs alone on it.

A held call counts the larger of the device's time and the host's own time to queue the forward
(hold.py), and for a kernel under about 0.1 ms the two are close. Under load (three or four
evaluations per GPU, sandboxed workers importing torch: a run queue of up to 67 on 16 cores was
measured) the thread that queues a timed forward waits for a CPU like any other, so a small kernel's
time became the machine's load (docs/benchmarks.md, tenth session).

So each GPU gets one physical core (with its hyperthread siblings) that only timed calls use: every
worker starts on the other cores, and its calling thread moves onto the GPU's core for the timed
part of a call alone, while the harness holds that GPU's lock exclusively (one thread at a time).
The harness chooses (`core_plan`, from `EvalConfig.timing_core`) and tells the worker through the
environment (`CUDA_AGENT_TIMING_CPUS`); a worker that cannot set its affinity runs as before.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Iterable

CPUS_ENV = "CUDA_AGENT_TIMING_CPUS"
MIN_OTHER_CORES = 3   # "auto" reserves only where the rest of the work keeps at least this many per GPU


@dataclass(frozen=True)
class CorePlan:
    timing: frozenset[int]   # this GPU's core: timed calls only
    others: frozenset[int]   # every other CPU no GPU keeps: everything else

    def to_env(self) -> str:
        return f"{_cpu_list(self.timing)};{_cpu_list(self.others)}"

    @classmethod
    def from_env(cls, text: str | None) -> "CorePlan | None":
        if not text:
            return None
        try:
            timing, others = (frozenset(int(c) for c in part.split(",") if c) for part in text.split(";"))
        except ValueError:
            return None
        return cls(timing, others) if timing and others else None


def _cpu_list(cpus: Iterable[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


def _read_siblings(cpu: int) -> set[int]:
    """The CPUs sharing `cpu`'s physical core (itself alone where the kernel does not say)."""
    try:
        with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list") as fh:
            text = fh.read().strip()
    except OSError:
        return {cpu}
    found = set()
    for part in text.split(","):
        low, _, high = part.partition("-")
        found.update(range(int(low), int(high or low) + 1))
    return found


def physical_cores(cpus: Iterable[int], siblings: Callable[[int], set[int]] = _read_siblings) -> list[frozenset[int]]:
    """The allowed CPUs grouped by physical core, in the order of each core's lowest CPU."""
    allowed, cores, seen = set(cpus), [], set()
    for cpu in sorted(allowed):
        if cpu not in seen:
            core = frozenset(siblings(cpu) & allowed | {cpu})
            seen |= core
            cores.append(core)
    return cores


def core_plan(cpus: Iterable[int], gpu: int, gpus: int, *, min_other_cores: int = MIN_OTHER_CORES,
              siblings: Callable[[int], set[int]] = _read_siblings) -> CorePlan | None:
    """GPU `gpu` of `gpus` gets the (gpu+1)-th physical core from the end; the others are what no GPU
    keeps. None where that would leave fewer than `min_other_cores` cores per GPU for the rest."""
    cores = physical_cores(cpus, siblings)
    gpus = max(1, gpus)
    if not 0 <= gpu < gpus or len(cores) - gpus < max(1, min_other_cores * gpus):
        return None
    kept = cores[len(cores) - gpus:]
    others = frozenset().union(*cores[:len(cores) - gpus])
    return CorePlan(timing=kept[len(kept) - 1 - gpu], others=others)


@lru_cache(maxsize=None)
def _visible_gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def plan_for(setting: str, backend: str, gpu: int | None) -> CorePlan | None:
    """The harness's choice for a worker of `gpu` under `EvalConfig.timing_core`: "auto" keeps a core
    per GPU on CUDA machines with room for it, "on" wherever two cores allow it (the CPU backend
    too: its tests), "off" never."""
    if setting == "off" or (setting == "auto" and backend != "cuda"):
        return None
    gpus = _visible_gpu_count() if backend == "cuda" else 1
    index = gpu if gpu is not None else 0
    return core_plan(os.sched_getaffinity(0), index, max(gpus, index + 1),
                     min_other_cores=MIN_OTHER_CORES if setting == "auto" else 1)


# -- the worker's side ------------------------------------------------------------------------------


def _set(cpus: frozenset[int]) -> bool:
    try:
        os.sched_setaffinity(0, cpus)   # this thread only (and the threads it starts from now on)
        return True
    except OSError:
        return False


def start_on_others() -> CorePlan | None:
    """Called first thing in a worker: its threads, and every thread they start, on the other cores.
    The plan (None: no core kept, or the affinity cannot be set here) for `on_timing_core`."""
    plan = CorePlan.from_env(os.environ.get(CPUS_ENV))
    return plan if plan is not None and _set(plan.others) else None


@contextmanager
def on_timing_core(plan: CorePlan | None):
    """The calling thread on the GPU's timing core for the block, back on the others after it."""
    if plan is None or not _set(plan.timing):
        yield
        return
    try:
        yield
    finally:
        _set(plan.others)
