"""`cuda-agent report RUN [--compare RUN2 ...]`: Markdown and a self-contained HTML page.

    RUN/report.md, RUN/report_files/*.png, RUN/report.html   (or under --out DIR)

Sections: the run (environment, settings, wall time), metrics per group and overall (one row per
run when comparing), our overall rows beside the published figures, the speedup distribution and
fast_p figures, each correct task's speed of light (fraction of the device's peak, sorted), verdict
counts, the baselines the run measured (with KernelBench's own timings when given), and a per-task
table (with its speed of light) linking each solution and trajectory.
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

from cuda_agent.bench import plots
from cuda_agent.bench.document import Document, Figure, Heading, Link, Paragraph, Table, write_html, write_markdown
from cuda_agent.bench.metrics import FAST_P, Metrics, geometric_mean, p_label
from cuda_agent.bench.published import PUBLISHED, PUBLISHED_NOTE
from cuda_agent.bench.runview import RunView, load_run
from cuda_agent.env.measure.speed_of_light import percent
from cuda_agent.env.reward import PERCENT

ERROR_CHARS = 120


def pct(x: float | None) -> str | None:
    return None if x is None else f"{100 * x:.1f} %"


def times(x: float | None) -> str | None:
    return None if x is None else f"{x:.2f}x"


def ms(x: float | None) -> str | None:
    return None if x is None else f"{x:.4g}"


def write_report(run_dir: Path, compare: list[Path] = (), out: Path | None = None,
                 reference: dict | None = None) -> tuple[Path, Path]:
    """Write the report of `run_dir` (compared with `compare`); returns (markdown, html) paths."""
    runs = [load_run(run_dir)] + [load_run(c) for c in compare]
    out = Path(out) if out else Path(run_dir)
    out.mkdir(parents=True, exist_ok=True)
    doc = build_document(runs, out, reference)
    md, page = out / "report.md", out / "report.html"
    write_markdown(doc, md, out / "report_files")
    write_html(doc, page)
    return md, page


NO_FIGURES = ("This report is written without figures: matplotlib cannot be imported here ({why}). Install it "
              "(`pip install matplotlib`, or the `bench` extra) and run `cuda-agent report RUN` again for them.")


def build_document(runs: list[RunView], out: Path, reference: dict | None = None) -> Document:
    main = runs[0]
    title = f"cuda-agent {main.kind}: {main.name}" + (f" compared with {', '.join(r.name for r in runs[1:])}"
                                                      if len(runs) > 1 else "")
    doc = Document(title)
    no_figures = plots.missing()
    figures = no_figures is None
    if no_figures:
        doc.add(Paragraph(NO_FIGURES.format(why=no_figures)))
    doc.add(Heading("Runs"), _runs_table(runs))
    scored = [r for r in runs if r.kind == "bench"]
    if scored:
        doc.add(Heading("Results"), Paragraph(_metrics_note(scored[0])), _metrics_table(scored))
        doc.add(Heading("Beside the published figures"), _published_table(scored), Paragraph(PUBLISHED_NOTE))
        if figures and any(s.correct for r in scored for s in r.scores):
            doc.add(Figure("speedup_distribution", plots.speedup_distribution(scored),
                           "Speedup of the correct tasks per group (log scale; the dotted line is 1x)"))
        if figures:
            doc.add(Figure("fast_p", plots.fast_p_curves(scored),
                           "fast_p: share of tasks correct and faster than p times the baseline (solid: eager, "
                           "dashed: torch.compile)"))
        if figures and any(s.speed_of_light for r in scored for s in r.scores):
            doc.add(Figure("speed_of_light", plots.speed_of_light(scored),
                           "Speed of light: each correct task's kernel time against the device's peak (the larger "
                           "of bytes / peak bandwidth and FLOPs / peak FLOP rate, over the kernel's median time), "
                           "tasks sorted; circles memory-bound, triangles compute-bound"))
        doc.add(Heading("Verdicts"), _verdict_table(scored))
    for run in runs:
        if run.baselines:
            doc.add(*_baseline_section(run, reference, figures))
    if scored:
        doc.add(Heading("Per task"), _task_table(scored, out))
    return doc


def _runs_table(runs: list[RunView]) -> Table:
    rows = []
    for run in runs:
        env, cfg = run.environment, run.settings
        gpus = ", ".join(sorted(set(env.get("gpus") or []))) or "cpu"
        rows.append([run.name, run.kind, gpus, env.get("torch"), cfg.get("backend"), cfg.get("protocol"),
                     cfg.get("mode") or "", str(len(run.tasks)), f"{run.wall_seconds / 60:.1f} min",
                     str(len(run.sessions))])
    return Table(["run", "kind", "GPU", "torch", "backend", "protocol", "mode", "tasks", "wall", "sessions"], rows)


def _metrics_note(run: RunView) -> str:
    return ("Metrics over each group's scored tasks (broken tasks, whose reference fails, tasks not yet "
            "scored, and failed ones, whose every attempt ended because the model endpoint or our evaluator "
            "failed, are left out of every denominator and counted apart). Faster means more than "
            f"{PERCENT} less time (the reward's margin, read from the paired speedup as the reward reads it); "
            "GM is the geometric-mean speedup over correct tasks; fast_p is the share of tasks correct with a "
            "speedup over eager above p (KernelBench's metric). Overall pools every task (weighted by task count).")


def _metric_cells(m: Metrics) -> list:
    return ([str(m.tasks), str(m.broken), str(m.pending), str(m.failed), pct(m.pass_rate), pct(m.faster_eager), pct(m.faster_compile),
             times(m.gm_vs_eager), times(m.gm_vs_compile)] + [pct(m.fast_p.get(p_label(p))) for p in FAST_P]
            + [None if m.mean_reward is None else f"{m.mean_reward:.2f}"])


def _metrics_table(runs: list[RunView]) -> Table:
    headers = ["group", "tasks", "broken", "pending", "failed", "pass", "> eager", "> compile", "GM vs eager", "GM vs compile"]
    headers += [f"fast_{p_label(p)}" for p in FAST_P] + ["mean reward"]
    several = len(runs) > 1
    rows = []
    for run in runs:
        for m in run.metrics:
            rows.append(([run.name] if several else []) + [m.group] + _metric_cells(m))
    return Table((["run"] if several else []) + headers, rows)


def _published_table(runs: list[RunView]) -> Table:
    rows = []
    for run in runs:
        m = run.overall()
        rows.append([f"{run.name} (this harness, {m.tasks} tasks)", pct(m.pass_rate), pct(m.faster_eager),
                     pct(m.faster_compile), times(m.gm_vs_eager), times(m.gm_vs_compile)])
    for p in PUBLISHED:
        rows.append([p.label, pct(p.pass_rate), pct(p.faster_eager), pct(p.faster_compile), times(p.gm_vs_eager),
                     times(p.gm_vs_compile)])
    return Table(["overall", "pass", "> eager", "> compile", "GM vs eager", "GM vs compile"], rows)


def _verdict_table(runs: list[RunView]) -> Table:
    names = sorted({s.verdict for r in runs for s in r.scores})
    rows = [[v] + [str(sum(s.verdict == v for s in r.scores)) for r in runs] for v in names]
    return Table(["verdict (best attempt per task)"] + [r.name for r in runs], rows)


def sol_cell(sol: dict | None) -> str | None:
    """A task's speed of light as the per-task table writes it: the fraction of peak and the bound."""
    return None if sol is None else f"{percent(sol['fraction'])} ({sol['bound']})"


def _link(run: RunView, path: str | None, out: Path, text: str) -> Link | None:
    if not path:
        return None
    target = Path(path) if Path(path).is_absolute() else run.run_dir / path
    return Link(text, Path(os.path.relpath(target.resolve(), out.resolve())).as_posix())


def _task_table(runs: list[RunView], out: Path) -> Table:
    main = runs[0]
    others = {r.name: {s.key: s for s in r.scores} for r in runs[1:]}
    headers = ["task", "verdict", "attempts", "kernel ms", "eager ms", "compile ms", "vs eager", "vs compile",
               "reward", "speed of light", "solution", "trajectory", "error"]
    headers += [f"{name}: vs eager / vs compile" for name in others]
    rows = []
    for s in main.scores:
        b = s.best
        error = None
        if b is not None and not b.correct and b.error_message:
            first = b.error_message.strip().splitlines()[0] if b.error_message.strip() else ""
            error = (f"{b.error_phase}: " if b.error_phase else "") + first[:ERROR_CHARS]
        row = [s.key, s.verdict, str(s.attempts), ms(b.kernel_ms) if b else None, ms(b.eager_ms) if b else None,
               ms(b.compile_ms) if b else None, times(s.speedup("eager")), times(s.speedup("compile")),
               None if b is None or b.reward is None else f"{b.reward:g}", sol_cell(s.speed_of_light),
               _link(main, b.solution_path if b else None, out, "solution"),
               _link(main, b.trajectory_path if b else None, out, "trajectory"), error]
        for scores in others.values():
            o = scores.get(s.key)
            row.append(f"{times(o.speedup('eager')) or '-'} / {times(o.speedup('compile')) or '-'}"
                       if o is not None and o.correct else (o.verdict if o is not None else None))
        rows.append(row)
    return Table(headers, rows)


# -- baselines ------------------------------------------------------------------------------------------


STEP_NAMES = {"start": "the judge's start (process, task, model)", "compile": "torch.compile and its warm-up",
              "timing": "the timed calls", "wait": "of which waiting for the GPU"}


def _summed_steps(baselines) -> dict:
    """Seconds per step of the measurements that recorded them (`BaselineRun.steps`), with their count."""
    recorded = [json.loads(b.steps) for b in baselines if b.steps]
    if not recorded:
        return {}
    return {"tasks": len(recorded), **{k: sum(r.get(k, 0.0) for r in recorded) for k in STEP_NAMES}}


def _baseline_section(run: RunView, reference: dict | None, figures: bool = True) -> list:
    records = {b.task_key: b for b in run.baselines}
    group_of = {t["key"]: t["grp"] for t in run.tasks}
    groups = list(dict.fromkeys(t["grp"] for t in run.tasks))
    summary_rows = []
    for group in groups + ["overall"]:
        mine = [b for k, b in records.items() if group == "overall" or group_of.get(k) == group]
        timed = [b for b in mine if b.eager_ms and b.compile_ms]
        slower = sum(b.compile_ms > b.eager_ms for b in timed)
        row = [group, str(len(mine)), str(sum(b.status == "measured" for b in mine)),
               str(sum(b.status == "stored" for b in mine)), str(sum(b.status == "broken" for b in mine)),
               str(sum(b.status == "out_of_memory" for b in mine)), f"{slower} of {len(timed)}",
               ms(statistics.median([b.eager_ms for b in mine if b.eager_ms])) if any(b.eager_ms for b in mine)
               else None]
        if reference is not None:
            theirs = [reference[b.task_key] for b in timed if b.task_key in reference]
            row.append(f"{sum(c > e for e, c in theirs)} of {len(theirs)}")
            ratios = [b.eager_ms / reference[b.task_key][0] for b in timed if b.task_key in reference]
            row.append(times(geometric_mean(ratios)))
        summary_rows.append(row)
    headers = ["group", "tasks", "measured", "from store", "broken", "out of memory", "compile slower than eager",
               "median eager ms"]
    if reference is not None:
        headers += ["compile slower (KernelBench's timings)", "GM eager time, ours / KernelBench's"]
    measured_seconds = sum(b.seconds or 0 for b in run.baselines)
    blocks = [Heading(f"Baselines: {run.name}"),
              Paragraph(f"{len(records)} tasks recorded in {run.wall_seconds / 60:.1f} min of wall time over "
                        f"{len(run.sessions)} session(s) ({measured_seconds / 60:.1f} min of measurement summed over "
                        "tasks measured concurrently). Eager and torch.compile are timed paired, call by call, on "
                        "fresh inputs with the L2 flushed (medians)."
                        + (" KernelBench's timings are means of 100 trials on an H100 with PyTorch 2.5." if reference
                           else "")),
              Table(headers, summary_rows)]
    steps = _summed_steps(run.baselines)
    if steps:
        blocks.append(Paragraph(
            f"Where the measurement time went, summed over {steps.pop('tasks')} tasks: "
            + ", ".join(f"{STEP_NAMES[k]} {v / 60:.1f} min" for k, v in steps.items()) + "."))
    if figures and any(b.eager_ms and b.compile_ms for b in run.baselines):
        blocks.append(Figure(f"compile_over_eager_{run.name}", plots.compile_over_eager(run, reference),
                             "torch.compile time over eager time per task (above 1: torch.compile is slower)"))
    rows = []
    for key in (t["key"] for t in run.tasks):
        b = records.get(key)
        if b is None:
            rows.append([key, "pending"] + [None] * (4 + 3 * (reference is not None)))
            continue
        ratio = b.compile_ms / b.eager_ms if b.eager_ms and b.compile_ms else None
        note = b.error or b.compile_error
        row = [key, b.status, ms(b.eager_ms), ms(b.compile_ms), times(ratio),
               (note.strip().splitlines() or [""])[-1][:ERROR_CHARS] if note else None]
        if reference is not None:
            e, c = reference.get(key, (None, None))
            row += [ms(e), ms(c), times(c / e if e and c else None)]
        rows.append(row)
    headers = ["task", "status", "eager ms", "compile ms", "compile / eager", "error"]
    if reference is not None:
        headers += ["KernelBench eager ms", "KernelBench compile ms", "KernelBench compile / eager"]
    blocks += [Heading(f"Baselines per task: {run.name}", 3), Table(headers, rows)]
    return blocks
