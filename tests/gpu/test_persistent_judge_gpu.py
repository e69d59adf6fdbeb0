"""Persistent judges on a real GPU (CUDA_AGENT_PERSISTENT_JUDGE=1, infra/judges.py): one judge process
evaluates two different tasks and then the first again, each as a fresh judge would. Run with `-m gpu`."""

from __future__ import annotations

import pytest

from cuda_agent.env import evaluate
from cuda_agent.env.infra import judges
from cuda_agent.tasks import load_solution, load_task
from tests.env.helpers import EXAMPLES, example_task
from tests.gpu.helpers import SOLUTIONS, gpu_config, workspace

pytestmark = pytest.mark.gpu


def _judge_pids() -> list[int]:
    return [judge.proc.pid for judge in judges.idle("cuda", None)]


def test_one_judge_evaluates_two_tasks_and_the_first_again(cache_dir, monkeypatch):
    monkeypatch.setenv(judges.ENV, "1")
    judges.discard_all()
    runs = [(example_task(), load_solution(EXAMPLES / "solution_cuda"), {}),
            (load_task(SOLUTIONS / "row_sum" / "task.py"), workspace("row_sum"), {"compile_baseline": False}),
            (example_task(), load_solution(EXAMPLES / "solution_cuda"), {})]
    pids, results = [], []
    try:
        for task, solution, settings in runs:
            result = evaluate(task, solution, gpu_config(cache_dir, **settings))
            assert result.error is None, f"{result.error.phase}: {result.error.message}"
            assert result.correct and result.kernel_ms > 0 and result.eager_ms > 0
            results.append(result)
            pids.append(_judge_pids())
    finally:
        judges.discard_all()
    assert len(pids[0]) == 1 and pids[0] == pids[1] == pids[2]   # the same judge process all along
    assert results[0].compile_ms and results[2].compile_ms   # torch.compile again after the other task
    # the same task, the same reference: its eager time within a factor of the first evaluation's
    assert 0.5 < results[2].eager_ms / results[0].eager_ms < 2.0
