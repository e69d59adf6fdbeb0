"""A run beside the published description of CUDA-Agent-Ops-6K, the five published filters' counts, and
the decontamination report: sections of `datasheet.md`, and `decontamination.csv` beside it.

The published figures are the system brief's (../shared/docs/system-brief.md): 6,000 tasks; 1 to 5
torch operators chained, or a standalone transformers module; the chain-length mix below; an eager
runtime between 1 and 100 ms on the GPU; and five filters, all required.
"""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

PUBLISHED_TASKS = 6000
PUBLISHED_MIX = {"torch#1": 3.4, "torch#2": 83.8, "torch#3": 7.6, "torch#4": 2.8, "torch#5": 1.2, "transformers": 1.2}
PUBLISHED_WINDOW_MS = (1.0, 100.0)
PUBLISHED_THRESHOLD = 0.9

# The five published filters, and the drop reasons of ours that each one stands for.
FILTERS = (
    ("runs in eager and under torch.compile", ("eager_error", "oom", "compile_error", "compile_mismatch")),
    ("no random operators", ("random_operator",)),
    ("outputs not constant or numerically indistinguishable",
     ("nondeterministic", "nonfinite_output", "constant_output", "low_variation")),
    ("eager runtime in the window", ("runtime_below_window", "runtime_above_window")),
    ("AST similarity to KernelBench at most the threshold", ("kernelbench_similar",)),
)
NOT_THE_TASKS_FAULT = ("timeout", "crashed", "device_busy", "internal_error")


def _share(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f} %" if whole else "-"


def beside_published(rows: list[dict], window_ms: tuple, threshold: float, random_ops_excluded: int) -> list[str]:
    """The datasheet's section "Beside the published description"."""
    n = len(rows)
    by_class = Counter(r["data_source"] for r in rows)
    fused = sum(1 for r in rows if r["data_source"] != "torch#1" and r["data_source"] != "transformers")
    eager = sorted(r["eager_ms"] for r in rows if r.get("eager_ms"))
    lines = ["## Beside the published description", "",
             "Published: the system brief's description of CUDA-Agent-Ops-6K (not measured here).", "",
             "| | published | this run |", "|---|---:|---:|",
             f"| tasks | {PUBLISHED_TASKS:,} | {n:,} |"]
    for key, share in PUBLISHED_MIX.items():
        lines.append(f"| {key} | {share:.1f} % | {_share(by_class[key], n)} |")
    published_fused = sum(s for k, s in PUBLISHED_MIX.items() if k not in ("torch#1", "transformers"))
    lines.append(f"| fused (2 to 5 operators) | {published_fused:.1f} % | {_share(fused, n)} |")
    span = f"{eager[0]:.3g} to {eager[-1]:.3g} ms" if eager else "-"
    lines += [f"| eager runtime window | {PUBLISHED_WINDOW_MS[0]:g} to {PUBLISHED_WINDOW_MS[1]:g} ms | "
              f"{window_ms[0]:g} to {window_ms[1]:g} ms (written: {span}) |",
              f"| decontamination: AST similarity to KernelBench above | {PUBLISHED_THRESHOLD} | {threshold} |",
              f"| random operators | excluded | excluded ({random_ops_excluded} in the catalog) |",
              "| operator categories | not published | see \"Operator families\" |", ""]
    return lines


def filter_counts(candidates: list[dict], results: list[dict]) -> list[str]:
    """The datasheet's section "The five published filters": how many candidates each removed."""
    reasons = Counter(c["reason"] for c in candidates if c.get("status") == "dropped")
    reasons.update(r["reason"] for r in results if not r["ok"])
    lines = ["## The five published filters", "",
             "Candidates each filter removed (our drop reasons in brackets; a random operator never enters a "
             "chain, since the catalog excludes them).", "",
             "| filter | removed | our reasons |", "|---|---:|---|"]
    for name, ours in FILTERS:
        lines.append(f"| {name} | {sum(reasons[r] for r in ours)} | "
                     + ", ".join(f"`{r}` {reasons[r]}" for r in ours) + " |")
    infra = sum(reasons[r] for r in NOT_THE_TASKS_FAULT)
    lines += ["", f"Not a filter's verdict: {infra} candidates lost to a worker's timeout, crash, a full GPU or "
                  "an error of ours (" + ", ".join(f"`{r}` {reasons[r]}" for r in NOT_THE_TASKS_FAULT) + ").", ""]
    return lines


def write_decontamination(path: Path, candidates: list[dict]) -> int:
    """`decontamination.csv`: every candidate that reached decontamination, its nearest KernelBench
    program (level/file) and the AST similarity, and whether it was dropped there. Returns the rows."""
    rows = [c for c in candidates if c.get("kb_similarity") is not None]
    with Path(path).open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["id", "kb_nearest", "kb_similarity", "dropped"])
        for c in rows:
            out.writerow([c["id"], c.get("kb_nearest", ""), c["kb_similarity"],
                          int(c.get("reason") == "kernelbench_similar")])
    return len(rows)
