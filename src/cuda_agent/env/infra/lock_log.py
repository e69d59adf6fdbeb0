"""Reading the device lock's log (CUDA_AGENT_LOCK_LOG, written by locks.py): how busy the lock was
and who kept it. When evaluations queue for the lock, its busy time per evaluation sets their rate."""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path


def read_log(path: Path, outside: bool = False) -> list[dict]:
    """The holds (X: exclusive, S: shared), or with `outside` the device work logged beside them
    without the lock (O: a worker's start-up, locks.log_outside_hold)."""
    holds = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) != 6 or (parts[2] == "O") != outside:
            continue
        pid, label, kind, asked, got, released = parts
        holds.append({"pid": int(pid), "label": label, "shared": kind == "S",
                      "asked": float(asked), "got": float(got), "released": float(released)})
    return holds


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[list[float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def _length(intervals: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in intervals)


def occupancy(holds: list[dict]) -> dict:
    """Wall time split into exclusive, shared, handover (free while asked for) and idle seconds."""
    if not holds:
        return {}
    start = min(h["asked"] for h in holds)
    end = max(h["released"] for h in holds)
    busy = _union([(h["got"], h["released"]) for h in holds])
    exclusive = sum(h["released"] - h["got"] for h in holds if not h["shared"])
    shared = _length(_union([(h["got"], h["released"]) for h in holds if h["shared"]]))
    # free while somebody waited: the waits' union less what was busy
    waiting = _union([(h["asked"], h["got"]) for h in holds if h["got"] > h["asked"]])
    handover = _length(waiting) - _overlap(waiting, busy)
    wall = end - start
    return {"wall_s": round(wall, 3), "exclusive_s": round(exclusive, 3), "shared_s": round(shared, 3),
            "handover_s": round(handover, 3), "idle_s": round(wall - _length(busy) - handover, 3),
            "busy_fraction": round(_length(busy) / wall, 3) if wall else 0.0}


def _overlap(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    total, j = 0.0, 0
    for start, end in a:
        while j < len(b) and b[j][1] <= start:
            j += 1
        k = j
        while k < len(b) and b[k][0] < end:
            total += max(0.0, min(end, b[k][1]) - max(start, b[k][0]))
            k += 1
    return total


def by_label(holds: list[dict]) -> list[dict]:
    groups: dict[tuple[str, bool], list[dict]] = defaultdict(list)
    for h in holds:
        groups[(h["label"], h["shared"])].append(h)
    rows = []
    for (label, shared), items in sorted(groups.items(), key=lambda kv: -sum(h["released"] - h["got"] for h in kv[1])):
        held = [(h["released"] - h["got"]) * 1e3 for h in items]
        waited = [(h["got"] - h["asked"]) * 1e3 for h in items]
        rows.append({"label": label, "mode": "shared" if shared else "alone", "holds": len(items),
                     "held_median_ms": round(statistics.median(held), 3), "held_total_s": round(sum(held) / 1e3, 3),
                     "wait_median_ms": round(statistics.median(waited), 3),
                     "wait_total_s": round(sum(waited) / 1e3, 3)})
    return rows
