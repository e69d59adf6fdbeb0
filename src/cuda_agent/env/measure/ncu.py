"""Nsight Compute's view of a solution's kernels, as a digest sized for an LLM (`profile --ncu`).

`ncu` profiles a process: ncu_target.py loads the solution (the harness's builds, inside the
candidate's sandbox) and calls forward a few times inside an NVTX range, which alone is profiled
(sections SpeedOfLight, Occupancy, LaunchStats); the report is read back as CSV (`ncu --import ...
--csv --page details`: one row per kernel launch and metric) and digested here: per kernel, its
duration, achieved occupancy, memory and compute throughput as a percentage of the device's peak,
the unit that limits it, registers per thread and shared memory per block. Feedback only: it comes
from a process running the solution's code and never reaches a time or the reward.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field

SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats")
RANGE = "cuda_agent_profiled"   # the NVTX range around the profiled forwards (ncu_target.py)
MAX_LINES = 40
BUSY = 60.0   # % of peak: a unit above it limits the kernel; neither above it, latency does

# metric name -> our field (names as Nsight Compute's sections print them; older releases' aliases)
_METRICS = {
    "Duration": "duration",
    "Memory Throughput": "memory_pct", "Memory [%]": "memory_pct",
    "Compute (SM) Throughput": "compute_pct", "Compute (SM) [%]": "compute_pct", "SM [%]": "compute_pct",
    "Achieved Occupancy": "achieved_occupancy", "Theoretical Occupancy": "theoretical_occupancy",
    "Registers Per Thread": "registers",
    "Static Shared Memory Per Block": "static_shared", "Dynamic Shared Memory Per Block": "dynamic_shared",
}
_TIME_UNITS = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3,
               "s": 1e6, "second": 1e6}
_BYTE_UNITS = {"byte": 1, "kbyte": 1e3, "mbyte": 1e6, "kib": 1024, "mib": 1 << 20}


@dataclass
class Launch:
    """One kernel launch's metrics (None where the report has none)."""
    name: str
    block: str = ""
    grid: str = ""
    duration_us: float | None = None
    values: dict[str, float] = field(default_factory=dict)


class NcuReportError(ValueError):
    """The text is not Nsight Compute's CSV details page."""


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def parse_csv(text: str) -> list[Launch]:
    """The launches of `ncu --csv --page details` output, in order. Lines before the header (ncu's
    `==PROF==` messages) are skipped; rows without a metric (rule results) are ignored."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise NcuReportError("no CSV header (\"ID\", ...) in ncu's output")
    launches: dict[str, Launch] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        launch_id, name = row.get("ID"), row.get("Kernel Name")
        if launch_id is None or name is None:
            continue
        launch = launches.setdefault(launch_id, Launch(name, row.get("Block Size", ""), row.get("Grid Size", "")))
        key = _METRICS.get(row.get("Metric Name") or "")
        value = _number(row.get("Metric Value") or "")
        if key is None or value is None:
            continue
        unit = (row.get("Metric Unit") or "").strip().lower()
        if key == "duration":
            launch.duration_us = value * _TIME_UNITS.get(unit, 1.0)
        elif key.endswith("_shared"):
            launch.values[key] = value * _BYTE_UNITS.get(unit.split("/")[0], 1)
        else:
            launch.values[key] = value
    return list(launches.values())


def _short_name(name: str, width: int = 70) -> str:
    """A kernel's name without its arguments, its middle cut when long (library kernels that differ
    only near the end, cuBLAS's split-K variants say, stay apart)."""
    name = re.sub(r"^void ", "", name)
    name = name.split("(")[0] if "(" in name else name
    if len(name) <= width:
        return name
    head = width // 2
    return name[:head] + "..." + name[-(width - head - 3):]


def limiter(memory_pct: float | None, compute_pct: float | None) -> str:
    """The unit that limits a kernel, from its throughputs as % of peak (Nsight Compute's reading of
    its Speed Of Light section): the busier one above BUSY %, else latency (neither is busy)."""
    if memory_pct is None or compute_pct is None:
        return "unknown"
    if max(memory_pct, compute_pct) < BUSY:
        return f"latency (memory and compute both under {BUSY:.0f}% of peak)"
    return "memory" if memory_pct >= compute_pct else "compute"


def _size(nbytes: float | None) -> str:
    if nbytes is None:
        return "?"
    return f"{nbytes / 1024:.3g} KiB" if nbytes >= 1024 else f"{nbytes:.0f} B"


def _pct(value: float | None) -> str:
    return "?" if value is None else f"{value:.0f}%"


def digest(launches: list[Launch], forwards: int, max_lines: int = MAX_LINES) -> list[str]:
    """At most `max_lines` lines: the kernels by their total duration per forward, three lines each."""
    kernels: dict[str, list[Launch]] = {}
    for launch in launches:
        kernels.setdefault(launch.name, []).append(launch)
    total = sum(l.duration_us or 0.0 for l in launches)
    order = sorted(kernels.items(), key=lambda item: -sum(l.duration_us or 0.0 for l in item[1]))
    lines = [f"Nsight Compute: {len(launches)} kernel launches in {forwards} forward calls "
             f"({len(kernels)} kernels; feedback only, not the timed calls)"]
    for rank, (name, group) in enumerate(order, 1):
        if len(lines) + 3 > max_lines - 1:
            lines.append(f"  ... {len(order) - rank + 1} more kernels")
            break
        first = group[0]
        spent = sum(l.duration_us or 0.0 for l in group)

        def mean(key: str) -> float | None:
            values = [l.values[key] for l in group if key in l.values]
            return sum(values) / len(values) if values else None

        share = f", {100 * spent / total:.0f}% of the kernel time" if total else ""
        lines.append(f"  {rank}. {_short_name(name)}: {spent / 1e3 / max(forwards, 1):.4g} ms per forward "
                     f"({len(group)} launch{'es' if len(group) > 1 else ''}, {spent / len(group):.4g} us each{share})")
        memory, compute = mean("memory_pct"), mean("compute_pct")
        lines.append(f"     memory {_pct(memory)} of peak, compute {_pct(compute)}: limited by "
                     f"{limiter(memory, compute)}")
        registers = mean("registers")
        resources = "" if registers is None else (
            f"; {registers:.0f} registers/thread; shared {_size(mean('static_shared'))} static + "
            f"{_size(mean('dynamic_shared'))} dynamic per block")
        lines.append(f"     occupancy {_pct(mean('achieved_occupancy'))} achieved of "
                     f"{_pct(mean('theoretical_occupancy'))}{resources}; grid {first.grid} block {first.block}")
    return lines
