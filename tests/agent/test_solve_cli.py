"""`cuda-agent solve` and its --out folder: an earlier run is never silently replaced, and an
episode that ended on the endpoint's or the evaluator's failure never reaches the training file."""

from __future__ import annotations

import json
import socket

import pytest
from typer.testing import CliRunner

from cuda_agent.agent.run_folder import earlier_run as run_files
from cuda_agent.agent.run_folder import infrastructure_failure, keep_earlier_run
from cuda_agent.agent.trajectory import Trajectory
from cuda_agent.cli import app

from .chat_server import ScriptedChatServer, call, say


def solve(task_file, out, base_url, cfg, *extra):
    args = ["solve", str(task_file), "--model", "m", "--base-url", base_url, "--out", str(out), "--backend", "cpu",
            "--iters", "2", "--trials", "1", "--no-compile-baseline", "--no-sandbox", "--cache-dir",
            str(cfg.cache_dir), "--retries", "0", "--timeout", "30", "--quiet", *extra]
    return CliRunner().invoke(app, args, env={"OPENAI_API_KEY": "test-key"})


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"     # nothing listens there any more


@pytest.fixture
def task_file(tmp_path, relu_task):
    path = tmp_path / "relu.py"
    path.write_text(relu_task.code)
    return path


def earlier_run(out, summary: str):
    (out / "solution").mkdir(parents=True)
    (out / "solution" / "model_new.py").write_text("# the earlier answer\n")
    (out / "summary.json").write_text(summary)
    return out


def test_out_holding_a_run_is_refused_without_force(tmp_path, task_file, real_eval_config):
    out = earlier_run(tmp_path / "run", "{}")
    result = solve(task_file, out, closed_port_url(), real_eval_config)
    assert result.exit_code == 2 and "already holds a run (summary.json, solution)" in result.output
    assert "--force" in result.output
    assert (out / "solution" / "model_new.py").read_text() == "# the earlier answer\n"


def test_force_keeps_the_earlier_run_beside_the_new_one(tmp_path, task_file, real_eval_config):
    out = earlier_run(tmp_path / "run", '{"reward": 2}')
    with ScriptedChatServer([say("Nothing to add.", call("finish", summary="gave up"))]) as server:
        result = solve(task_file, out, server.base_url, real_eval_config, "--force")
    assert result.exit_code == 0, result.output
    assert (out / "solution.1" / "model_new.py").read_text() == "# the earlier answer\n"
    assert json.loads((out / "summary.1.json").read_text()) == {"reward": 2}
    assert json.loads((out / "summary.json").read_text())["stop_reason"] == "finish"
    assert server.headers[0]["authorization"] == "Bearer test-key"   # the key --api-key-env names
    assert len((out / "trajectories.jsonl").read_text().splitlines()) == 1     # the policy's own failure: kept


def test_unreachable_endpoint_is_an_infrastructure_failure_not_a_reward(tmp_path, task_file, real_eval_config):
    """It used to exit 0 and append a reward -1 trajectory that RL would learn from."""
    out = tmp_path / "run"
    result = solve(task_file, out, closed_port_url(), real_eval_config)
    assert result.exit_code == 3, result.output
    assert "infrastructure failure (client_error" in result.output
    assert not (out / "trajectories.jsonl").exists() and not run_files(out)
    assert len((out / "infra_failures.jsonl").read_text().splitlines()) == 1


def test_infrastructure_failures_are_told_apart_from_the_policys():
    def traj(**fields):
        return Trajectory(task={"name": "t"}, model="m", **fields)

    assert infrastructure_failure(traj(stop_reason="client_error", error="502 Bad Gateway", reward=-1))
    assert infrastructure_failure(traj(stop_reason="error", error="Traceback ...", reward=-1))
    assert infrastructure_failure(traj(stop_reason="infra_error", reward=None))
    assert infrastructure_failure(traj(stop_reason="finish", reward=None))
    assert "evaluator failed" in infrastructure_failure(
        traj(stop_reason="finish", reward=-1, final={"error": {"phase": "internal", "message": "sandbox"}}))
    for fine in (traj(stop_reason="finish", reward=-1, final={"error": {"phase": "verify", "message": "x"}}),
                 traj(stop_reason="max_turns", reward=1), traj(stop_reason="context_exceeded", reward=-1)):
        assert infrastructure_failure(fine) is None


def test_keep_earlier_run_numbers_runs_in_order(tmp_path):
    assert keep_earlier_run(tmp_path) is None
    for n in (1, 2):
        (tmp_path / "solution").mkdir()
        (tmp_path / "summary.json").write_text(str(n))
        assert keep_earlier_run(tmp_path) == str(n)
    assert (tmp_path / "summary.1.json").read_text() == "1" and (tmp_path / "summary.2.json").read_text() == "2"
    assert run_files(tmp_path) == []
