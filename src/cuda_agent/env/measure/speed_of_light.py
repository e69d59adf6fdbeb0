"""The candidate's speed against the limit: its achieved bandwidth and FLOP rate, and their fraction of
the device's peak (the roofline's floor: the larger of bytes / peak bandwidth and FLOPs / peak FLOP rate).

Every figure but the candidate's median time comes from the harness: the work from the task's source
(work.py, in a child process), the peak from the device the judge names (peaks.py). Feedback only: the
reward never reads it (env/reward.py).
"""

from __future__ import annotations

from pathlib import Path

from cuda_agent.env.measure.peaks import Peak, device_peak
from cuda_agent.env.measure.work import Work, task_work
from cuda_agent.env.result import SpeedOfLight
from cuda_agent.tasks.task import Task


def held_against(work: Work, kernel_ms: float, peak: Peak | None) -> SpeedOfLight:
    """`work` done in `kernel_ms`, as rates and (with a peak) as the fraction of it."""
    seconds = kernel_ms / 1e3
    sol = SpeedOfLight(flops=work.flops, bytes=work.bytes, dtype=work.dtype, kernel_ms=kernel_ms,
                       achieved_gbps=work.bytes / seconds / 1e9,
                       achieved_gflops=work.flops / seconds / 1e9 if work.flops else None)
    if peak is None:
        return sol
    sol.peak, sol.peak_gbps = peak.name, peak.bandwidth_gbps
    sol.peak_gflops = peak.gflops.get(work.dtype)
    memory_ms = work.bytes / (peak.bandwidth_gbps * 1e9) * 1e3
    compute_ms = work.flops / (sol.peak_gflops * 1e9) * 1e3 if work.flops and sol.peak_gflops else 0.0
    sol.floor_ms = max(memory_ms, compute_ms)
    sol.bound = "compute" if compute_ms > memory_ms else "memory"
    sol.fraction = sol.floor_ms / kernel_ms
    return sol


def speed_of_light(task: Task, device: str, backend: str, kernel_ms: float | None,
                   cache_dir: Path, gpu: int | None = None) -> SpeedOfLight | None:
    """The candidate's speed of light on `task`, from its median time; None without a time or work figures
    (the work measured in a child process from `backend`'s fork server for `gpu`: infra/task_child.py)."""
    if not kernel_ms or kernel_ms <= 0:
        return None
    work = task_work(task, backend, gpu)
    if work is None or work.bytes == 0:
        return None
    return held_against(work, kernel_ms, device_peak(device, backend, cache_dir))


# -- its words ------------------------------------------------------------------------------------------

def _amount(value: float, unit: str) -> str:
    for prefix in ("", "K", "M", "G", "T", "P"):
        if abs(value) < 1000 or prefix == "P":
            return f"{value:.3g} {prefix}{unit}"
        value /= 1000
    return f"{value:.3g} P{unit}"


def percent(fraction: float) -> str:
    """A fraction of peak as a percentage with the digits that matter: 0.42 %, 9.4 %, 87 %."""
    value = 100 * fraction
    return f"{value:.2g} %" if value < 1 else f"{value:.1f} %" if value < 10 else f"{value:.0f} %"


def describe(sol: SpeedOfLight, device: str) -> list[str]:
    """Two lines for a policy: the task's work, and the kernel's fraction of the device's peak with its rates."""
    flops = _amount(sol.flops, "FLOP") if sol.flops else "no FLOPs counted (no matmul, convolution or attention)"
    lines = [f"  work: {flops}, {_amount(sol.bytes, 'B')} moved at least ({sol.dtype}; inputs and weights read "
             "once, outputs written once)"]
    rates = _amount(sol.achieved_gbps * 1e9, "B/s") + (
        f", {_amount(sol.achieved_gflops * 1e9, 'FLOP/s')}" if sol.achieved_gflops else "")
    if sol.fraction is None:
        lines.append(f"  speed of light: no peak is known for {device or 'this device'} (tabled: H100, H200; the "
                     f"CPU is measured), so no fraction; you reach {rates}")
        return lines
    limit, over = ("memory bandwidth", "bytes") if sol.bound == "memory" else (f"{sol.dtype} FLOP peak", "FLOPs")
    lines.append(f"  speed of light: {percent(sol.fraction)} of the {limit} of {sol.peak}: {sol.bound}-bound, "
                 f"{over} / peak {sol.floor_ms:.3g} ms against your {sol.kernel_ms:.4g} ms; you reach {rates}")
    if sol.fraction > 1:   # the reference's FLOPs or bytes are not the least the task needs
        lines.append("  (above 100 %: your kernel does less work than the reference's forward counts, e.g. another "
                     "algorithm, or the output computed from fewer of the inputs)")
    if sol.flops and sol.peak_gflops is None:
        lines.append(f"  (no {sol.dtype} FLOP peak for this device: the memory bound alone)")
    return lines
