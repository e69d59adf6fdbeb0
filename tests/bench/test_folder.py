"""Scoring a solution folder: every verdict recorded (missing, malformed, broken task, several samples),
time-boxed runs that resume, and a run killed mid-way that resumes to the same results."""

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from cuda_agent.bench.runner import RunSpec, run_folder
from cuda_agent.bench.runview import load_run
from cuda_agent.bench.selection import select_tasks
from cuda_agent.bench.store import RunConflict, RunStore
from cuda_agent.env.config import EvalConfig
from cuda_agent.env.result import EvalError, EvalResult
from tests.bench.helpers import FakeEvaluator, example_cpu_solution, fake_solution, make_kernelbench, write_solution

REPO = Path(__file__).resolve().parents[2]
RESULT_FIELDS = ("task_key", "attempt", "source", "verdict", "compiled", "correct", "error_phase", "kernel_ms",
                 "eager_ms", "compile_ms", "speedup_vs_eager", "speedup_vs_compile", "reward", "solution_path")


def make_folder(root: Path) -> Path:
    write_solution(root, "level1/1", fake_solution(0.5))
    for sample, text in ((0, fake_solution(no_compile=True)), (1, fake_solution(0.8))):
        (root / f"level_1_problem_3_sample_{sample}_kernel.py").write_text(text)
    (root / "level2" / "1").mkdir(parents=True)                     # malformed: no model_new.py
    write_solution(root, "level2/2", fake_solution(1.0))            # the task itself is broken
    # level1/2: no solution at all
    return root


def spec(tmp_path, out="run", **overrides) -> RunSpec:
    kb = make_kernelbench(tmp_path / "kb")
    settings = dict(out=tmp_path / out, tasks=select_tasks(kernelbench=kb), config=EvalConfig(backend="cpu"),
                    quiet=True, report=False)
    settings.update(overrides)
    return RunSpec(**settings)


def results(run_dir: Path) -> list[tuple]:
    store = RunStore.existing(run_dir)
    try:
        return [tuple(getattr(a, f) for f in RESULT_FIELDS) for a in store.attempts()]
    finally:
        store.close()


def test_every_verdict_is_recorded_and_reported(tmp_path):
    folder = make_folder(tmp_path / "solutions")
    evaluator = FakeEvaluator()
    outcome = run_folder(spec(tmp_path, report=True), folder, evaluator)
    assert outcome.left == 0 and outcome.report[1].is_file()
    rows = {(r[0], r[1]): r for r in results(outcome.run_dir)}
    assert {k: r[3] for k, r in rows.items()} == {
        ("level1/1", 0): "correct", ("level1/2", 0): "missing", ("level1/3", 0): "compile_error",
        ("level1/3", 1): "correct", ("level2/1", 0): "malformed", ("level2/2", 0): "task_error"}
    assert rows[("level1/3", 1)][2] == "sample 1" and rows[("level1/1", 0)][-1] == str(folder / "level1" / "1.py")
    assert len(evaluator.calls) == 4   # missing and malformed never reach the evaluator

    run = load_run(outcome.run_dir)
    level1, level2, overall = run.metrics
    assert (level1.tasks, level1.correct, level1.pass_rate) == (3, 2, 2 / 3)
    assert (level2.tasks, level2.broken, level2.pass_rate) == (1, 1, 0.0)
    assert overall.tasks == 4 and overall.broken == 1
    [session] = run.sessions
    assert session["status"] == "finished" and session["environment"]["torch"]
    assert session["config"]["backend"] == "cpu"


def test_out_of_memory_beside_others_is_evaluated_again_alone(tmp_path):
    folder = tmp_path / "solutions"
    write_solution(folder, "level1/2", fake_solution(0.5, big=True))
    write_solution(folder, "level1/3", fake_solution(0.5))
    evaluator = FakeEvaluator(overlap=2)
    kb = make_kernelbench(tmp_path / "kb")
    outcome = run_folder(spec(tmp_path, tasks=select_tasks(kernelbench=kb, tasks="level1/2-3")), folder, evaluator)
    assert [r[3] for r in results(outcome.run_dir)] == ["correct", "correct"]
    assert [name for name, _ in evaluator.calls] == ["level1/2_ReLU", "level1/3_Sigmoid", "level1/2_ReLU"]


def test_reference_out_of_memory_is_not_a_broken_task_and_runs_again_on_resume(tmp_path):
    """Seen on an H100: a bench beside a baseline run, whose measurements held GPU memory, recorded a
    task whose reference then ran out of memory as broken (out of every denominator). It is the
    machine's state: recorded as out_of_memory, counted as not yet scored, evaluated again on resume."""
    folder = tmp_path / "solutions"
    write_solution(folder, "level1/2", fake_solution(0.5) + "# crowded machine\n")
    write_solution(folder, "level1/3", fake_solution(0.5))
    kb = make_kernelbench(tmp_path / "kb")
    crowded = FakeEvaluator(crowded_machine=True)
    first = run_folder(spec(tmp_path, tasks=select_tasks(kernelbench=kb, tasks="level1/2-3")), folder, crowded)
    assert [(r[0], r[3]) for r in results(first.run_dir)] == [("level1/2", "out_of_memory"), ("level1/3", "correct")]
    [level1, overall] = load_run(first.run_dir).metrics
    assert (level1.broken, level1.pending, level1.tasks, level1.pass_rate) == (0, 1, 1, 1.0)
    quiet = FakeEvaluator()
    run_folder(spec(tmp_path, resume=True, tasks=select_tasks(kernelbench=kb, tasks="level1/2-3")), folder, quiet)
    assert [name for name, _ in quiet.calls] == ["level1/2_ReLU"]   # only the one the machine cut short
    assert [r[3] for r in results(first.run_dir)] == ["correct", "correct"]


def test_time_boxed_run_resumes_and_refuses_other_settings(tmp_path):
    folder = make_folder(tmp_path / "solutions")
    evaluator = FakeEvaluator()
    stopped = run_folder(spec(tmp_path, max_minutes=1e-9), folder, evaluator)   # time is up at once
    assert stopped.left == 6 and not results(stopped.run_dir) and not evaluator.calls
    with pytest.raises(RunConflict, match="--resume"):
        run_folder(spec(tmp_path), folder, evaluator)
    with pytest.raises(RunConflict, match="protocol"):
        run_folder(spec(tmp_path, resume=True, config=EvalConfig(backend="cpu", protocol="published")), folder,
                   evaluator)
    with pytest.raises(RunConflict, match="precision"):   # every call timed: other numbers
        run_folder(spec(tmp_path, resume=True, config=EvalConfig(backend="cpu", precision=None)), folder, evaluator)
    resumed = run_folder(spec(tmp_path, resume=True), folder, evaluator)
    assert resumed.left == 0 and len(results(resumed.run_dir)) == 6 and len(evaluator.calls) == 4
    again = run_folder(spec(tmp_path, resume=True), folder, evaluator)           # nothing left to do
    assert again.left == 0 and len(evaluator.calls) == 4
    assert [s["status"] for s in load_run(again.run_dir).sessions] == ["stopped", "finished", "finished"]

    # a solution changed since: only that entry is scored again
    write_solution(folder, "level1/1", fake_solution(0.25))
    (folder / "level_1_problem_3_sample_1_kernel.py").unlink()
    run_folder(spec(tmp_path, resume=True), folder, evaluator)
    assert len(evaluator.calls) == 4     # same label (1.py): recorded, not re-run
    assert [(r[0], r[1]) for r in results(again.run_dir)].count(("level1/3", 1)) == 0   # a removed sample goes


KILLABLE = textwrap.dedent("""
    import sys
    from pathlib import Path
    from cuda_agent.bench.runner import RunSpec, run_folder
    from cuda_agent.bench.selection import select_tasks
    from cuda_agent.env.config import EvalConfig
    from tests.bench.helpers import FakeEvaluator

    kb, folder, out, resume = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4] == "1"
    evaluator = FakeEvaluator(stall_after=int(sys.argv[5]) if sys.argv[5] != "-" else None)
    evaluator.capacity = 1
    run_folder(RunSpec(out, select_tasks(kernelbench=kb), EvalConfig(backend="cpu"), resume, quiet=True,
                       report=False), folder, evaluator)
    print("evaluations", len(evaluator.calls))
""")


def test_killed_run_resumes_to_identical_results(tmp_path):
    folder = make_folder(tmp_path / "solutions")
    kb = make_kernelbench(tmp_path / "kb")
    script = tmp_path / "killable.py"
    script.write_text(KILLABLE)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "src"), os.environ.get("PYTHONPATH", "")]))

    def run(out, resume, stall_after="-", **kwargs):
        return subprocess.Popen([sys.executable, str(script), str(kb), str(folder), str(out), "1" if resume else "0",
                                 stall_after], cwd=REPO, env=env, stdout=subprocess.PIPE, text=True, **kwargs)

    straight = run(tmp_path / "straight", False)   # the uninterrupted run, beside the victim's
    victim = run(tmp_path / "killed", False, stall_after="1")   # hangs in its second evaluation: killed there
    db = tmp_path / "killed" / "bench.sqlite"
    deadline, done = time.monotonic() + 240, 0
    while time.monotonic() < deadline:          # wait until the evaluation before the stall is recorded
        if db.is_file():
            with sqlite3.connect(db) as conn:
                try:   # an evaluator's verdict (the broken task's, first of the longest-first order), not a folder's
                    done = conn.execute("SELECT COUNT(*) FROM attempts WHERE verdict NOT IN "
                                        "('missing', 'malformed')").fetchone()[0]
                except sqlite3.OperationalError:
                    done = 0
            if done >= 1:
                break
        time.sleep(0.1)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    assert done >= 1, "the victim recorded no evaluation before its stall"
    assert "evaluations 4" in straight.communicate(timeout=300)[0]
    partial = results(tmp_path / "killed")
    assert 0 < len(partial) < 6

    resumed = run(tmp_path / "killed", True)
    output = resumed.communicate(timeout=300)[0]
    evaluated = int(output.split("evaluations")[1])
    assert evaluated < 4                        # what was recorded before the kill is not evaluated again
    assert results(tmp_path / "killed") == results(tmp_path / "straight")
    sessions = load_run(tmp_path / "killed").sessions
    assert [s["status"] for s in sessions] == ["running", "finished"]   # the killed session never closed


def test_cli_scores_a_folder_for_real_on_cpu(tmp_path, cache_dir):
    """The command with the real environment: one honest workspace solution (the example's C++ kernel),
    one task without a solution, one malformed solution folder."""
    from cuda_agent.env.infra.sandbox import sandbox_available

    kb = make_kernelbench(tmp_path / "kb")
    folder = tmp_path / "solutions"
    example_cpu_solution(folder, "level1/1")
    (folder / "level2" / "1" / "kernels").mkdir(parents=True)
    args = [sys.executable, "-m", "cuda_agent.cli", "bench", "--solutions", str(folder), "--kernelbench", str(kb),
            "--tasks", "level1/1-2,level2/1", "--backend", "cpu", "--iters", "3", "--trials", "2",
            "--no-compile-baseline", "--cache-dir", str(cache_dir), "--out", str(tmp_path / "run"), "--quiet",
            "--verify", "published"]
    args += [] if sandbox_available()[0] else ["--no-sandbox"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    assert "| published |" in (tmp_path / "run" / "report.md").read_text()   # the protocol, recorded
    verdicts = {s.key: (s.verdict, s.best.speedup_vs_eager) for s in load_run(tmp_path / "run").scores}
    assert verdicts["level1/2"] == ("missing", None) and verdicts["level2/1"][0] == "malformed"
    assert verdicts["level1/1"][0] == "correct" and verdicts["level1/1"][1] > 0
    assert "wrote" in proc.stdout and (tmp_path / "run" / "report.html").is_file()


def test_attempts_start_when_their_memory_fits(tmp_path):
    """On a GPU each attempt reserves six times its inputs plus 3 GiB: a 6.5 GiB budget runs two of
    these small tasks at a time, whatever the evaluator's capacity (KernelBench's 6 GiB-input tasks
    ran a GPU out of memory four at a time)."""
    import asyncio

    from cuda_agent.bench.progress import RunProgress
    from cuda_agent.bench.schedule import Deadline
    from cuda_agent.bench.score_folder import score_folder
    from tests.bench.helpers import TWO_EVALUATIONS_GPU_BYTES
    from tests.bench.helpers import CountingEvaluator as Counting

    folder = tmp_path / "solutions"
    for key in ("level1/1", "level1/2", "level1/3", "level2/1"):
        write_solution(folder, key, fake_solution(0.5))
    kb = make_kernelbench(tmp_path / "kb")
    tasks = select_tasks(kernelbench=kb, tasks="level1/1-3,level2/1")
    store = RunStore(tmp_path / "run")
    store.add_tasks(tasks)
    evaluator = Counting(overlap=2)
    left = asyncio.run(score_folder(store, 1, tasks, folder, evaluator, EvalConfig(backend="cpu"), workers=4,
                                    deadline=Deadline(None), progress=RunProgress("", 4, quiet=True),
                                    gpu_memory=TWO_EVALUATIONS_GPU_BYTES))
    assert left == 0 and evaluator.most == 2
    assert sorted(a.verdict for a in store.attempts()) == ["correct"] * 4
    store.close()


class InternalErrors(FakeEvaluator):
    """A FakeEvaluator whose evaluations of solutions marked `# internal` fail on our side, as the
    environment reports a bug of its own: phase "internal", and the reward -1 every failure gets."""

    async def evaluate(self, task, solution, config=None):
        result = await super().evaluate(task, solution, config)
        if "# internal" in solution.entry_code:
            result = EvalResult(task=task.name, backend="cpu", error=EvalError("internal", "Traceback: the judge died"))
            result.reward = -1
        return result


def test_cli_internal_evaluator_errors_are_not_scored_and_exit_3(tmp_path, monkeypatch):
    """An evaluation our evaluator failed says nothing about the solution: recorded without a reward,
    left out of the metrics, and the command exits 3 as the agent mode does, also when another
    solution of the same task was scored."""
    from typer.testing import CliRunner

    import cuda_agent.bench.cli as bench_cli
    from cuda_agent.cli import app

    kb = make_kernelbench(tmp_path / "kb")
    folder = tmp_path / "solutions"
    write_solution(folder, "level1/2", "# internal\n" + fake_solution(0.5))
    for sample, text in ((0, fake_solution(0.8)), (1, "# internal\n" + fake_solution(0.5))):
        (folder / f"level_1_problem_3_sample_{sample}_kernel.py").write_text(text)
    monkeypatch.setattr(bench_cli, "_evaluator", lambda *args: InternalErrors())
    result = CliRunner().invoke(app, ["bench", "--solutions", str(folder), "--kernelbench", str(kb), "--tasks",
                                      "level1/2-3", "--backend", "cpu", "--no-sandbox", "--out", str(tmp_path / "run"),
                                      "--quiet"])
    assert result.exit_code == 3, result.output
    assert "2 of 2 tasks have solutions that were not scored: our evaluator failed" in result.output
    assert "the judge died" in result.output and "--resume --retry-failed" in result.output
    rows = {(r[0], r[1]): r for r in results(tmp_path / "run")}
    assert {k: (r[3], r[-2]) for k, r in rows.items()} == {
        ("level1/2", 0): ("internal_error", None), ("level1/3", 0): ("correct", 3.0),
        ("level1/3", 1): ("internal_error", None)}
    level1, overall = load_run(tmp_path / "run").metrics
    assert (overall.tasks, overall.failed, overall.pass_rate, overall.mean_reward) == (1, 1, 1.0, 3.0)


def test_internal_errors_in_a_row_stop_the_run(tmp_path):
    """A dead evaluator fails every evaluation alike: after three in a row no new one starts (those in
    flight finish), and the rest wait for `--resume --retry-failed`."""
    folder = tmp_path / "solutions"
    for key in ("level1/1", "level1/2", "level1/3", "level2/1", "level2/2"):
        write_solution(folder, key, "# internal\n" + fake_solution(0.5))
    evaluator = InternalErrors(delay=0.05)   # two evaluations in flight at a time
    outcome = run_folder(spec(tmp_path), folder, evaluator)
    assert outcome.left == 1 and len(evaluator.calls) == 4
    assert outcome.stopped.startswith("3 evaluations in a row ended on an infrastructure failure (the last:")
    assert "the judge died" in outcome.stopped
    states = {s.key: s.state for s in load_run(outcome.run_dir).scores}
    assert states == {**dict.fromkeys(("level2/1", "level2/2", "level1/1", "level1/2"), "failed"), "level1/3": "pending"}
    assert load_run(outcome.run_dir).sessions[-1]["status"] == "stopped"


def test_the_slowest_levels_are_scored_first(tmp_path):
    """A run on several GPUs ends when its last evaluation does: level 2's (longer torch.compile, larger
    models) start before level 1's, whatever order the folder lists them in."""
    folder = make_folder(tmp_path / "solutions")
    evaluator = FakeEvaluator()
    run_folder(spec(tmp_path), folder, evaluator)
    names = [name for name, _ in evaluator.calls]
    assert [n.split("/")[0] for n in names] == ["level2", "level1", "level1", "level1"], names
