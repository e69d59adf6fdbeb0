"""`datasheet.md`: what a synthesis run produced, what it dropped and why, and its runtime spread."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from pathlib import Path

from cuda_agent.env.reward import PERCENT, is_faster_speedup
from cuda_agent.synth.published import beside_published, filter_counts, write_decontamination

STAGES = [   # (stage, reasons it can give), in pipeline order
    ("compose", ("compose_failed", "invalid_source")),
    ("dedupe", ("duplicate_exact", "duplicate_near")),
    ("decontaminate", ("kernelbench_similar",)),
    ("filters", ("eager_error", "oom", "runtime_below_window", "runtime_above_window", "nondeterministic",
                 "nonfinite_output", "constant_output", "low_variation", "compile_error", "compile_mismatch",
                 "timeout", "crashed", "device_busy", "internal_error")),
]


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f} %" if whole else "-"


def _quantiles(values: list[float]) -> dict:
    if not values:
        return {}
    v = sorted(values)
    q = lambda p: v[min(len(v) - 1, int(round(p * (len(v) - 1))))]  # noqa: E731
    return {"min": v[0], "p10": q(0.1), "p50": q(0.5), "p90": q(0.9), "max": v[-1]}


def _log_bins(values: list[float], lo: float, hi: float, per_decade: int = 4) -> list[tuple[float, float, int]]:
    if not values:
        return []
    start = math.floor(math.log10(min(min(values), lo)) * per_decade)
    stop = math.ceil(math.log10(max(max(values), hi)) * per_decade)
    edges = [10 ** (k / per_decade) for k in range(start, stop + 1)]
    counts = [0] * (len(edges) - 1)
    for x in values:
        for i in range(len(counts)):
            if edges[i] <= x < edges[i + 1] or (i == len(counts) - 1 and x == edges[-1]):
                counts[i] += 1
                break
    return [(edges[i], edges[i + 1], counts[i]) for i in range(len(counts))]


def _histogram_png(path: Path, eager: list[float], compiled: list[float], window: tuple, backend: str) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=110)
    values = [v for v in eager + compiled if v and v > 0]
    if values:
        lo, hi = min(values + [window[0]]), max(values + [window[1]])
        bins = [10 ** (math.log10(lo) + k * (math.log10(hi) - math.log10(lo)) / 30) for k in range(31)]
        ax.hist(eager, bins=bins, alpha=0.65, label="eager")
        if compiled:
            ax.hist(compiled, bins=bins, alpha=0.5, label="torch.compile")
        ax.set_xscale("log")
    for edge in window:
        ax.axvline(edge, color="k", linestyle="--", linewidth=0.8)
    ax.set_xlabel(f"median runtime per call (ms, {backend})")
    ax.set_ylabel("tasks")
    ax.set_title("Runtime of written tasks (dashed: eager window)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def _timed_on(cfg, results: list[dict], rows: list[dict]) -> list[str]:
    """Where the written tasks' eager and torch.compile times were taken, from each task's record
    (a build's parts may run on different machines): one table row per device, torch and sharing."""
    passed = {r["id"]: r for r in results if r["ok"]}
    places = Counter()
    for row in rows:
        rec = passed.get(row["id"], {})
        if rec.get("device"):
            shared = f", {rec.get('sharing', 1)} filter workers sharing it" if cfg.backend == "cuda" else ""
            places[f"{rec['device']}, torch {rec.get('torch', '?')}{shared}"] += 1
        else:
            places["not recorded"] += 1
    method = "medians per call (`time_callable`: fresh inputs per call" + (", L2 flushed)" if cfg.backend == "cuda" else ")")
    lines = [f"| eager / torch.compile times | {method} |"]
    lines += [f"| timed on | {place}: {count} tasks |" for place, count in places.most_common()]
    return lines


def write_datasheet(out: Path, cfg, catalog, candidates: list[dict], results: list[dict], rows: list[dict],
                    mix_used: dict, deficits: dict) -> dict:
    """Write OUT/datasheet.md and OUT/runtime_hist.png; return the headline numbers."""
    out = Path(out)
    reasons = Counter(c["reason"] for c in candidates if c.get("status") == "dropped")
    reasons.update(r["reason"] for r in results if not r["ok"])
    examples = {}
    for rec in list(candidates) + list(results):
        if rec.get("reason") and rec["reason"] not in examples:
            examples[rec["reason"]] = (rec.get("detail") or "").splitlines()[0][:110] if rec.get("detail") else ""
    generated = len(candidates)
    accepted = sum(1 for r in results if r["ok"])
    lines = ["# Datasheet: synthesised tasks", ""]
    lines += [f"`cuda-agent synth --num {cfg.num} --backend {cfg.backend} --seed {cfg.seed}`: "
              f"{len(rows)} tasks written to `tasks.parquet` / `tasks.jsonl`.", ""]

    # Settings (the machine that writes the datasheet need not be the one that timed the tasks)
    lines += ["## Settings", "", "| setting | value |", "|---|---|",
              f"| backend | {cfg.backend} |",
              f"| seed | {cfg.seed} |", f"| base shapes | {cfg.profile} |",
              f"| eager runtime window | {cfg.window_ms[0]} to {cfg.window_ms[1]} ms |",
              f"| decontamination | {'AST similarity > ' + str(cfg.similarity_threshold) if cfg.decontaminate else 'off'} |",
              f"| torch.compile filter | {'on' if cfg.compile else 'off'} |",
              f"| composer | {cfg.composer} |", *_timed_on(cfg, results, rows), ""]

    # Counts per stage
    lines += ["## Counts per stage", "", "| stage | in | dropped | out |", "|---|---:|---:|---:|"]
    remaining = generated
    stage_counts = {}
    for stage, stage_reasons in STAGES:
        dropped = sum(reasons[r] for r in stage_reasons)
        if stage == "filters":
            inflow = len(results)
            lines.append(f"| {stage} | {inflow} | {dropped} | {accepted} |")
            stage_counts[stage] = (inflow, dropped, accepted)
            remaining = accepted
            continue
        lines.append(f"| {stage} | {remaining} | {dropped} | {remaining - dropped} |")
        stage_counts[stage] = (remaining, dropped, remaining - dropped)
        remaining -= dropped
    lines += [f"| selection (first quota per class, in candidate order) | {accepted} | "
              f"{accepted - len(rows)} | {len(rows)} |", ""]
    not_run = generated - sum(stage_counts[s][1] for s in ("compose", "dedupe", "decontaminate")) - len(results)
    if not_run > 0:
        lines += [f"{not_run} candidates passed the static stages but were not filtered (not needed, "
                  "or in flight when the run stopped).", ""]

    # Drop reasons
    lines += ["## Drops by reason", "", "| stage | reason | count | share of generated | example |",
              "|---|---|---:|---:|---|"]
    for stage, stage_reasons in STAGES:
        for r in stage_reasons:
            if reasons[r]:
                example = examples.get(r, "").replace("|", "\\|")
                lines.append(f"| {stage} | `{r}` | {reasons[r]} | {_pct(reasons[r], generated)} | {example} |")
    lines.append("")

    # Chain-length mix
    written_by = Counter(r["data_source"] for r in rows)
    total_mix = sum(mix_used.values()) or 1
    lines += ["## Chain-length mix", "", "| class | target share | written | written share |",
              "|---|---:|---:|---:|"]
    for cls, share in mix_used.items():
        key = "transformers" if cls == "transformers" else f"torch#{cls}"
        lines.append(f"| {key} | {100 * share / total_mix:.1f} % | {written_by[key]} | "
                     f"{_pct(written_by[key], len(rows))} |")
    lines.append("")
    if "transformers" in cfg.mix and "transformers" not in mix_used:
        lines += ["`transformers` is not installed (or has no usable blocks): its share went to the "
                  "other classes pro rata.", ""]
    for cls, (n, heir) in deficits.items():
        lines += [f"Class {cls} ran out of candidates: {n} of its tasks were given to class {heir}.", ""]

    # Families and operators
    fam = Counter(f for r in rows for f in r["families"])
    ops = Counter(o for r in rows for o in r["ops"])
    n_ops = sum(fam.values()) or 1
    lines += ["## Operator families", "", f"{n_ops} operator uses, {len(ops)} distinct operators.", "",
              "| family | uses | share |", "|---|---:|---:|"]
    for f, n in fam.most_common():
        lines.append(f"| {f} | {n} | {_pct(n, n_ops)} |")
    lines += ["", "Most used operators: " + ", ".join(f"`{o}` ({n})" for o, n in ops.most_common(15)), ""]

    # Runtime
    eager = [r["eager_ms"] for r in rows if r.get("eager_ms")]
    compiled = [r["compile_ms"] for r in rows if r.get("compile_ms")]
    png = _histogram_png(out / "runtime_hist.png", eager, compiled, tuple(cfg.window_ms), cfg.backend)
    lines += ["## Runtime", ""]
    if png:
        lines += ["![runtime histogram](runtime_hist.png)", ""]
    lines += ["| ms | min | p10 | p50 | p90 | max |", "|---|---:|---:|---:|---:|---:|"]
    for label, vals in (("eager", eager), ("torch.compile", compiled)):
        q = _quantiles(vals)
        if q:
            lines.append(f"| {label} | " + " | ".join(f"{q[k]:.4g}" for k in ("min", "p10", "p50", "p90", "max")) + " |")
    ratio = [r["eager_ms"] / r["compile_ms"] for r in rows if r.get("compile_ms") and r.get("eager_ms")]
    if ratio:
        faster = sum(1 for x in ratio if is_faster_speedup(x))   # the reward's "faster"
        lines += ["", f"torch.compile takes more than {PERCENT} less time than eager on {faster} of {len(ratio)} tasks "
                      f"(median eager/compile ratio {statistics.median(ratio):.2f})."]
    lines += ["", "Eager runtime histogram (log bins):", "", "```"]
    bins = _log_bins(eager, *cfg.window_ms)
    peak = max((c for _, _, c in bins), default=1) or 1
    for a, b, c in bins:
        lines.append(f"{a:9.3g} - {b:<9.3g} ms | {'#' * round(40 * c / peak)} {c}")
    lines += ["```", ""]

    # Decontamination
    sims = [r["kb_similarity"] for r in rows if r.get("kb_similarity") is not None]
    if sims:
        q = _quantiles(sims)
        checked = write_decontamination(out / "decontamination.csv", candidates)
        lines += ["## Decontamination", "",
                  f"Nearest-KernelBench AST similarity of written tasks: p50 {q['p50']:.3f}, p90 {q['p90']:.3f}, "
                  f"max {q['max']:.3f} (threshold {cfg.similarity_threshold}; "
                  f"{reasons['kernelbench_similar']} candidates dropped above it). Each of the {checked} candidates "
                  "checked, with its nearest KernelBench program (levels 1-3): `decontamination.csv`.", ""]

    # Catalog
    kinds = Counter(op.kind for op in catalog.ops)
    why = Counter(v.split(":")[0] for v in catalog.excluded.values())
    randoms = catalog.random_ops()
    lines += beside_published(rows, tuple(cfg.window_ms), cfg.similarity_threshold, len(randoms))
    lines += filter_counts(candidates, results)
    lines += ["## Operator catalog", "",
              f"{len(catalog.ops)} operators ({', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))})"
              f" and {len(catalog.blocks)} transformers blocks; {len(catalog.excluded)} candidates excluded:", "",
              "| why excluded | count |", "|---|---:|"]
    for w, n in why.most_common(12):
        lines.append(f"| {w} | {n} |")
    lines += ["", f"Random operators excluded ({len(randoms)}): " + ", ".join(f"`{r}`" for r in randoms), ""]

    (out / "datasheet.md").write_text("\n".join(lines))
    return {"written": len(rows), "generated": generated, "filtered": len(results), "accepted": accepted,
            "drops": dict(reasons), "stages": stage_counts, "datasheet": str(out / "datasheet.md")}
