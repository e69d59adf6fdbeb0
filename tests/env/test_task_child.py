"""A task's own code never runs in the harness's process (infra/task_child.py): its size and work are
measured on the meta device in a child, so a task that exits, crashes or hangs there fails its own
evaluation as the task's error, and the harness goes on to the next."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cuda_agent.env.measure.work import task_work
from cuda_agent.tasks import Task, TaskError
from cuda_agent.env.infra.task_child import estimate_footprint
from tests.env.helpers import EXAMPLES, example_task

REPO = Path(__file__).resolve().parents[2]


def broken(where: str, line: str) -> Task:
    """The example task with `line` run at its module level, or first thing in get_inputs or forward."""
    code = example_task().code
    if where == "module":
        code = code.replace("class Model", f"{line}\n\n\nclass Model")
    else:
        header = {"get_inputs": "def get_inputs():\n", "forward": "    def forward(self, x):\n"}[where]
        indent = header[:len(header) - len(header.lstrip())] + "    "
        code = code.replace(header, f"{header}{indent}{line}\n")
    assert code != example_task().code
    return Task(f"{where}: {line}", code)


# A harness of its own, which each of these tasks ended (or hung) while the harness measured tasks itself.
_HARNESS = """
import json, sys
from cuda_agent.env import evaluate
from cuda_agent.env.infra import task_child
from tests.env.helpers import cpu_config, cpu_workspace, example_task
from tests.env.test_task_child import broken

task_child.TIMEOUT_S = 0.5
config = cpu_config(sys.argv[1])
tasks = [broken("module", "import os; os._exit(3)"), broken("forward", "import os; os._exit(3)"),
         broken("get_inputs", "import ctypes; ctypes.string_at(0)"), broken("module", "import sys; sys.exit(3)"),
         broken("get_inputs", "raise SystemExit('no inputs today')"), broken("forward", "while True: pass")]
for task in tasks:
    result = evaluate(task, cpu_workspace(), config)
    print(json.dumps([result.error and result.error.phase, result.error and result.error.message, result.correct]),
          flush=True)
result = evaluate(example_task(), cpu_workspace(), config, stop_after="verify")
print(json.dumps([result.error and result.error.phase, result.correct]), flush=True)
"""

MEASURED = "while its size was measured"


def test_tasks_that_exit_crash_or_hang_fail_as_the_tasks_error_and_the_harness_evaluates_the_next(cache_dir):
    out = subprocess.run([sys.executable, "-c", _HARNESS, str(cache_dir)], capture_output=True, text=True,
                         timeout=300, cwd=REPO, env={**os.environ, "PYTHONPATH": f"{REPO / 'src'}:{REPO}"})
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert out.returncode == 0 and len(lines) == 7, (out.returncode, out.stdout, out.stderr[-3000:])
    *failed, last = lines
    assert all(phase == "task" and not correct for phase, _, correct in failed), failed
    messages = [message for _, message, _ in failed]
    assert messages[0] == messages[1] == messages[3] == f"the task's code exited with status 3 {MEASURED}"
    assert messages[2].startswith(f"the task's code crashed (SIGSEGV) {MEASURED} (in get_inputs, line 21)")
    assert messages[4] == f"the task's code exited with status 1 {MEASURED}; its last output: no inputs today"
    assert messages[5].startswith(f"the task's code did not finish within 0.5 s {MEASURED}")
    assert last == [None, True]


def test_no_task_code_runs_in_the_harness_and_each_measurement_runs_once_per_task_code(tmp_path):
    record = tmp_path / "pids"
    task = broken("module", f"import os; open({str(record)!r}, 'a').write(f'{{os.getpid()}}\\n')")
    for _ in range(2):
        assert estimate_footprint(task).input_bytes == 512 * 1024 * 4
        assert task_work(Task("another name, the same code", task.code)).bytes > 0
    pids = record.read_text().split()
    assert len(pids) == 2 and str(os.getpid()) not in pids   # the footprint's child and the work's


def test_eval_reports_a_task_that_exits_in_its_result_as_other_task_errors(cache_dir, tmp_path):
    """Exit status 0 (evaluated) with the task's error, as for a task whose reference fails."""
    from cuda_agent.cli import app

    path = tmp_path / "model.py"
    path.write_text(broken("get_inputs", "import sys; sys.exit(3)").code)
    result = CliRunner().invoke(app, ["eval", str(path), str(EXAMPLES / "solution_cpu"), "--backend", "cpu",
                                      "--cache-dir", str(cache_dir), "--json", "--no-compile-baseline"])
    assert result.exit_code == 0, result.output
    error = json.loads(result.output.strip().splitlines()[-1])["error"]
    assert error["phase"] == "task" and error["message"].startswith("the task's code exited with status 3")


def test_without_forked_judges_the_task_is_measured_in_a_fresh_interpreter(monkeypatch):
    monkeypatch.setenv("CUDA_AGENT_FORK_JUDGES", "0")
    with pytest.raises(TaskError, match="^the task's code exited with status 4 while its size was measured$"):
        estimate_footprint(broken("get_inputs", "import os; os._exit(4)"))


def test_every_kind_measures_the_fork_servers_warm_up_task():
    """The CPU server's warm-up runs each kind on a small trusted task and ignores what fails: each kind
    must measure it (a kind that failed there would pay its first forward on meta in every child)."""
    from cuda_agent.env.workers.measure import _WARM_UP, KINDS, _measure
    from cuda_agent.tasks.shapes import ShapeCheck

    measured = {kind: _measure(kind)(Task("warm-up", _WARM_UP)) for kind in KINDS}
    assert None not in measured.values(), measured
    assert measured["shape"] == ShapeCheck(error=None, returns_tensor=True)
