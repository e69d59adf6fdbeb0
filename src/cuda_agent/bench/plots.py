"""The report's figures (matplotlib, no display): each returns PNG bytes. matplotlib is optional
(`missing()` says why it cannot be used; the report is then written without figures)."""

from __future__ import annotations

import io

from cuda_agent.bench.runview import RunView

BASELINES = (("eager", "eager PyTorch"), ("compile", "torch.compile"))


def missing() -> str | None:
    """Why the figures cannot be drawn here (matplotlib not importable), else None."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def times_label(value: float) -> str:
    """A ratio as the report writes it: 1.06x, 0.99x, 10x (three significant digits, no exponent)."""
    import numpy as np

    return np.format_float_positional(value, precision=3, unique=True, fractional=False, trim="-") + "x"


def _times_axis(ax) -> None:
    """Plain ratio labels on a log y axis, at the ticks matplotlib would label (its own read 1.06x10^0)."""
    from matplotlib.ticker import LogFormatter

    class Times(LogFormatter):
        def _num_to_string(self, x, vmin, vmax):   # LogFormatter picks which ticks get a label, this writes it
            return times_label(x)

    ax.yaxis.set_major_formatter(Times())
    ax.yaxis.set_minor_formatter(Times(labelOnlyBase=False))


def _figure(width: float, height: float, columns: int = 1):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, columns, figsize=(width, height), squeeze=False)
    return plt, fig, axes[0]


def _png(plt, fig) -> bytes:
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    return buffer.getvalue()


def _groups(runs: list[RunView]) -> list[str]:
    seen: list[str] = []
    for run in runs:
        for m in run.metrics[:-1]:
            if m.group not in seen:
                seen.append(m.group)
    return seen


def speedup_distribution(runs: list[RunView]) -> bytes:
    """Speedups of the correct tasks per group (log scale), one box per run, vs eager and vs compile."""
    plt, fig, axes = _figure(11, 4.2, 2)
    groups = _groups(runs)
    width = 0.8 / max(1, len(runs))
    for ax, (baseline, label) in zip(axes, BASELINES):
        for r, run in enumerate(runs):
            data, positions = [], []
            for g, group in enumerate(groups):
                values = [s.speedup(baseline) for s in run.scores if s.group == group and s.speedup(baseline)]
                if values:
                    data.append(values)
                    positions.append(g + (r - (len(runs) - 1) / 2) * width)
            if data:
                boxes = ax.boxplot(data, positions=positions, widths=width * 0.9, patch_artist=True,
                                   showfliers=True, manage_ticks=False)
                color = f"C{r}"
                for patch in boxes["boxes"]:
                    patch.set_facecolor(color)
                    patch.set_alpha(0.45)
                ax.plot([], [], color=color, linewidth=6, alpha=0.45, label=run.name)
        ax.axhline(1.0, color="grey", linewidth=0.8, linestyle=":")
        ax.set_yscale("log")
        _times_axis(ax)
        ax.set_xticks(range(len(groups)), groups)
        ax.set_title(f"speedup vs {label} (correct tasks)")
        ax.set_xlabel("group")
        ax.set_ylabel(f"speedup over {label} (log scale)")
        if len(runs) > 1:
            ax.legend(fontsize=8)
    return _png(plt, fig)


def fast_p_curves(runs: list[RunView], p_max: float = 4.0) -> bytes:
    """KernelBench's fast_p against the speedup threshold p: per group and overall, per run;
    solid lines vs eager, dashed vs torch.compile."""
    from cuda_agent.bench.metrics import fast_p

    groups = _groups(runs) + ["overall"]
    plt, fig, axes = _figure(3.6 * len(groups), 3.4, len(groups))
    ps = [i * p_max / 200 for i in range(201)]
    for ax, group in zip(axes, groups):
        for r, run in enumerate(runs):
            scored = [s for s in run.scores if s.state == "scored" and (group == "overall" or s.group == group)]
            if not scored:
                continue
            for baseline, style in (("eager", "-"), ("compile", "--")):
                ax.plot(ps, [fast_p(scored, p, baseline) for p in ps], style, color=f"C{r}",
                        label=f"{run.name} vs {baseline}")
        ax.set_title(group)
        ax.set_xlabel("p (speedup threshold)")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("fast_p")
    if axes[0].get_legend_handles_labels()[0]:
        axes[0].legend(fontsize=7)
    return _png(plt, fig)


def compile_over_eager(run: RunView, reference: dict[str, tuple[float, float]] | None) -> bytes:
    """torch.compile time / eager time per task, measured here and (when given) KernelBench's."""
    plt, fig, axes = _figure(9, 3.8)
    ax = axes[0]
    groups = sorted({t["grp"] for t in run.tasks})
    measured = {b.task_key: b for b in run.baselines if b.eager_ms and b.compile_ms}
    group_of = {t["key"]: t["grp"] for t in run.tasks}
    for g, group in enumerate(groups):
        keys = sorted(k for k in measured if group_of.get(k) == group)
        ours = [measured[k].compile_ms / measured[k].eager_ms for k in keys]
        ax.scatter([g - 0.12] * len(ours), ours, s=10, color="C0", alpha=0.6, label="this run" if g == 0 else None)
        if reference:
            theirs = [reference[k][1] / reference[k][0] for k in keys if k in reference]
            ax.scatter([g + 0.12] * len(theirs), theirs, s=10, color="C1", alpha=0.6,
                       label="KernelBench's timings" if g == 0 else None)
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle=":")
    ax.set_yscale("log")
    _times_axis(ax)
    ax.set_xticks(range(len(groups)), groups)
    ax.set_title(f"torch.compile time over eager time per task: {run.name}")
    ax.set_xlabel("group")
    ax.set_ylabel("torch.compile / eager (above 1: compile slower)")
    ax.legend(fontsize=8)
    return _png(plt, fig)


def _percent_axis(ax) -> None:
    """Percentages on a log y axis (0.1 %, 1 %, 10 %, 100 %), never 10^k."""
    from matplotlib.ticker import FuncFormatter

    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{100 * y:g} %"))


def speed_of_light(runs: list[RunView]) -> bytes:
    """Each correct task's fraction of the device's peak, sorted from the highest, one series per run;
    circles are memory-bound tasks, triangles compute-bound ones (log scale; the dotted line is the peak)."""
    plt, fig, axes = _figure(9, 3.8)
    ax = axes[0]
    for r, run in enumerate(runs):
        sols = sorted((s.speed_of_light for s in run.scores if s.speed_of_light), key=lambda d: -d["fraction"])
        for bound, marker in (("memory", "o"), ("compute", "^")):
            ranks = [i for i, sol in enumerate(sols, 1) if sol["bound"] == bound]
            ax.scatter(ranks, [sols[i - 1]["fraction"] for i in ranks], s=14, marker=marker, color=f"C{r}",
                       alpha=0.7, label=f"{run.name}, {bound}-bound" if ranks else None)
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle=":")
    ax.set_yscale("log")
    _percent_axis(ax)
    ax.set_title("speed of light per task (correct tasks, sorted)")
    ax.set_xlabel("task rank (highest fraction first)")
    ax.set_ylabel("fraction of the device's peak (log scale)")
    ax.legend(fontsize=8)
    return _png(plt, fig)
