"""The Ray evaluation service on a local CPU cluster: real evaluations through an actor's pool, and a
benchmark run scored through the service (what `cuda-agent bench --ray ADDRESS` does). Skipped where
Ray is not installed (it is an optional extra: `pip install -e ".[ray]"`)."""

import asyncio

import pytest

from cuda_agent.bench.runner import RunSpec, run_folder
from cuda_agent.bench.runview import load_run
from cuda_agent.bench.selection import select_tasks
from tests.bench.helpers import example_cpu_solution, make_kernelbench
from tests.env.helpers import cpu_config, cpu_workspace, example_task

ray = pytest.importorskip("ray")


@pytest.fixture
def service(cache_dir):
    from cuda_agent.env.infra.sandbox import sandbox_available
    from cuda_agent.env.infra.service import EvalService

    config = cpu_config(cache_dir, sandbox="auto" if sandbox_available()[0] else "none")
    started = EvalService("local", config, actors=1, cache_dir=str(cache_dir),
                          init_options={"num_cpus": 2, "include_dashboard": False, "log_to_driver": False})
    yield started
    started.shutdown()


def test_service_evaluates_and_scores_a_run(service, tmp_path):
    [actor] = service.describe()
    assert actor["slots"] == 1 and service.capacity == 1
    result = asyncio.run(service.evaluate(example_task(), cpu_workspace()))
    assert result.correct and result.kernel_ms > 0 and result.eager_ms > 0

    kb = make_kernelbench(tmp_path / "kb")
    folder = tmp_path / "solutions"
    example_cpu_solution(folder, "level1/1")
    spec = RunSpec(tmp_path / "run", select_tasks(kernelbench=kb, tasks="level1/1-2"), service.config, quiet=True,
                   report=False)
    outcome = run_folder(spec, folder, service)
    assert outcome.left == 0
    assert {s.key: s.verdict for s in load_run(outcome.run_dir).scores} == {"level1/1": "correct",
                                                                             "level1/2": "missing"}
