"""Reports: Markdown with its figures, a self-contained HTML page that parses, links that resolve,
the published figures labelled as such, and runs compared side by side."""

import base64
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from cuda_agent.bench.published import PUBLISHED
from cuda_agent.bench.report import write_report
from cuda_agent.bench.runner import run_folder
from tests.bench.helpers import FakeEvaluator, fake_solution, write_solution
from tests.bench.test_folder import make_folder, spec

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class Page(HTMLParser):
    """Collects what a browser would need: images, links, tables; fails on unbalanced tags."""

    VOID = {"meta", "img", "br", "hr", "link", "input"}

    def __init__(self):
        super().__init__()
        self.images, self.links, self.tables, self.stack, self.text = [], [], 0, [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            self.images.append(attrs["src"])
        if tag == "a":
            self.links.append(attrs["href"])
        if tag == "table":
            self.tables += 1
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        assert self.stack and self.stack.pop() == tag, f"unbalanced </{tag}>"

    def handle_data(self, data):
        self.text.append(data)


def test_report_html_markdown_and_comparison(tmp_path):
    folder = make_folder(tmp_path / "solutions")
    mine = run_folder(spec(tmp_path, out="mine"), folder, FakeEvaluator()).run_dir
    other_folder = tmp_path / "other"
    write_solution(other_folder, "level1/1", fake_solution(2.0))   # slower than eager
    write_solution(other_folder, "level1/2", fake_solution(0.4))
    theirs = run_folder(spec(tmp_path, out="theirs"), other_folder, FakeEvaluator()).run_dir

    out = tmp_path / "report"
    md, page = write_report(mine, [theirs], out)
    html = Page()
    html.feed(page.read_text())
    html.close()
    assert not html.stack                                        # every tag closed
    assert html.tables >= 5
    figures = [src for src in html.images if src.startswith("data:image/png;base64,")]
    assert len(figures) == len(html.images) == 2                 # speedup distribution and fast_p, embedded
    assert all(base64.b64decode(src.split(",", 1)[1]).startswith(PNG_MAGIC) for src in figures)
    text = " ".join(html.text)
    assert "mine" in text and "theirs" in text and "fast_1.5" in text
    assert all(p.label in text for p in PUBLISHED) and "not measured here" in text
    solution_links = [href for href in html.links if href.endswith(".py") or "solutions" in href]
    assert solution_links and all((out / href).resolve().exists() for href in solution_links)

    markdown = md.read_text()
    pngs = [line.split("](", 1)[1].rstrip(")") for line in markdown.splitlines() if line.startswith("![")]
    assert len(pngs) == 2 and all((out / p).read_bytes().startswith(PNG_MAGIC) for p in pngs)
    assert "| level1 |" not in markdown or "| mine | level1 |" in markdown   # one row per run and group
    assert "| theirs | overall |" in markdown
    # the per-task table puts the other run's speedups beside ours: level1/2 is missing in mine, 5.00x in theirs
    row = next(line for line in markdown.splitlines() if line.startswith("| level1/2 |"))
    assert "missing" in row and "5.00x / 3.75x" in row


def test_report_of_a_run_in_progress(tmp_path):
    """A report can be written while nothing is scored yet (pending tasks, no figures of speedups)."""
    folder = make_folder(tmp_path / "solutions")
    stopped = run_folder(spec(tmp_path, max_minutes=1e-9), folder, FakeEvaluator()).run_dir
    md, page = write_report(stopped)
    assert "pending" in md.read_text() and Path(page).stat().st_size > 0


def test_report_without_matplotlib_is_written_and_says_so(tmp_path, monkeypatch):
    """The README's install has no matplotlib: the report is still written, without figures, and says why."""
    import sys

    folder = make_folder(tmp_path / "solutions")
    run_dir = run_folder(spec(tmp_path), folder, FakeEvaluator()).run_dir
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)   # `import matplotlib` now fails as if not installed
    md, page = write_report(run_dir)
    markdown = md.read_text()
    assert "![" not in markdown and "<img" not in page.read_text()
    assert "matplotlib" in markdown and "without figures" in markdown and "| overall |" in markdown
    assert "matplotlib" in page.read_text()


def figures_drawn(monkeypatch) -> list:
    """The figures the plots module makes from now on, drawn (tick labels resolved), instead of PNG bytes."""
    from cuda_agent.bench import plots

    drawn = []

    def keep(plt, fig):
        fig.canvas.draw()
        drawn.append(fig)
        return b""

    monkeypatch.setattr(plots, "_png", keep)
    return drawn


def tick_texts(ax) -> list[str]:
    return [t.get_text() for t in ax.get_yticklabels(minor=False) + ax.get_yticklabels(minor=True) if t.get_text()]


def test_speedup_ticks_read_as_plain_multiples(tmp_path, monkeypatch):
    """Speedups from 0.99x to 1.06x: the log axis reads 1.06x, 0.99x, never 1.06x10^0 or 9.9x10^-1."""
    from cuda_agent.bench import plots
    from cuda_agent.bench.runview import load_run

    folder = tmp_path / "solutions"
    for key, kernel_ms in (("level1/1", 2.0 / 1.06), ("level1/2", 2.0 / 0.99), ("level1/3", 2.0 / 1.02)):
        write_solution(folder, key, fake_solution(kernel_ms))
    run = load_run(run_folder(spec(tmp_path), folder, FakeEvaluator()).run_dir)
    drawn = figures_drawn(monkeypatch)
    plots.speedup_distribution([run])
    [fig] = drawn
    for ax in fig.axes:
        labels = tick_texts(ax)
        assert labels, "the speedup axis has no tick labels"
        assert all(re.fullmatch(r"\d+(\.\d+)?x", label) for label in labels), labels   # no 10^k, no TeX
        assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
    assert {"0.99x", "1.06x"} <= set(tick_texts(fig.axes[0])), tick_texts(fig.axes[0])   # vs eager


def test_baseline_figure_has_axis_labels_and_a_title(tmp_path, monkeypatch):
    from cuda_agent.bench import plots
    from cuda_agent.bench.runview import RunView
    from cuda_agent.bench.store import BaselineRecord

    tasks = [{"key": "level1/1", "grp": "level1"}, {"key": "level1/2", "grp": "level1"},
             {"key": "level2/1", "grp": "level2"}]
    records = [BaselineRecord("level1/1", "measured", eager_ms=2.0, compile_ms=2.12),
               BaselineRecord("level1/2", "measured", eager_ms=2.0, compile_ms=1.98),
               BaselineRecord("level2/1", "measured", eager_ms=2.0, compile_ms=1.5)]
    run = RunView(tmp_path / "base", "baseline", {}, [], tasks, [], [], records)
    drawn = figures_drawn(monkeypatch)
    plots.compile_over_eager(run, {"level1/1": (1.0, 1.1)})
    [fig] = drawn
    [ax] = fig.axes
    assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
    labels = tick_texts(ax)
    assert labels and all(re.fullmatch(r"\d+(\.\d+)?x", label) for label in labels), labels


class MeasuringEvaluator(FakeEvaluator):
    """FakeEvaluator whose correct results carry the speed of light the harness computes: the task's real
    work held against a CPU peak of 10 GB/s and 100 GFLOP/s."""

    async def evaluate(self, task, solution, config=None):
        from cuda_agent.env.measure.peaks import Peak
        from cuda_agent.env.measure.speed_of_light import held_against
        from cuda_agent.env.measure.work import task_work

        result = await super().evaluate(task, solution, config)
        if result.correct:
            result.speed_of_light = held_against(task_work(task), result.kernel_ms,
                                                 Peak("test CPU (measured)", 10.0, {"float32": 100.0}))
        return result


def test_report_has_a_speed_of_light_column_and_figure(tmp_path, monkeypatch):
    folder = make_folder(tmp_path / "solutions")
    run_dir = run_folder(spec(tmp_path), folder, MeasuringEvaluator()).run_dir
    md, page = write_report(run_dir)
    markdown = md.read_text()
    header = next(line for line in markdown.splitlines() if line.startswith("| task | verdict |"))
    assert "| speed of light |" in header
    # level1/1 (bias + ReLU, 4.2 MB) in 0.5 ms: 0.42 ms at 10 GB/s, 84 %; level1/3 (sigmoid, 4 KB) in 0.8 ms: 0.051 %
    assert "| 84 % (memory) |" in next(line for line in markdown.splitlines() if line.startswith("| level1/1 |"))
    assert "| 0.051 % (memory) |" in next(line for line in markdown.splitlines() if line.startswith("| level1/3 |"))
    assert "speed_of_light" in markdown and "Speed of light" in markdown          # the figure and its caption
    html = Page()
    html.feed(page.read_text())
    assert len(html.images) == 3

    from cuda_agent.bench import plots
    from cuda_agent.bench.runview import load_run

    drawn = figures_drawn(monkeypatch)
    plots.speed_of_light([load_run(run_dir)])
    [fig] = drawn
    [ax] = fig.axes
    assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
    assert [list(c.get_offsets()[:, 1]) for c in ax.collections if len(c.get_offsets())] == [
        pytest.approx([4198400 / 10e9 * 1e3 / 0.5, 4096 / 10e9 * 1e3 / 0.8])]    # sorted, highest first
    labels = tick_texts(ax)
    assert labels and all(re.fullmatch(r"[\d.]+ %", label) for label in labels), labels
