"""Agent mode: episodes against the scripted chat server, three tasks at once sharing one evaluator;
an endpoint that errors or is down ends its episode as `episode_failed`, never the run; such episodes
are not scored, and the command exits 3 as `solve` does. Nonsense numbers are refused at once."""

import json
import os
import socket
import subprocess
import sys

import pytest

from cuda_agent.llm.client import OpenAIClient
from cuda_agent.agent.loop import AgentConfig
from cuda_agent.agent.trajectory import read_jsonl
from cuda_agent.bench.runner import RunSpec, run_agent
from cuda_agent.bench.runview import load_run
from cuda_agent.bench.schedule import Deadline, FailureStreak
from cuda_agent.bench.selection import select_tasks
from cuda_agent.env.config import EvalConfig
from tests.agent.chat_server import Fail, ScriptedChatServer, call, say
from tests.bench.helpers import FakeEvaluator, fake_solution, make_kernelbench

PLAYS = {   # what the model does on each task, turn by turn
    "level1/2_ReLU": [say("A fast kernel.", call("write", path="model_new.py", content=fake_solution(0.5))),
                      say("", call("profile")), say("Done.", call("finish", summary="relu"))],
    "level1/3_Sigmoid": [say("", call("write", path="model_new.py", content=fake_solution(wrong=True))),
                         say("", call("verify")), say("Giving up.", call("finish", summary="wrong"))],
}


def respond(body: dict):
    """One reply, chosen by the task named in the conversation and the turn it is at."""
    task = next(name for name in [*PLAYS, "level2/1_Tanh"] if f"Task `{name}`" in body["messages"][1]["content"])
    if task not in PLAYS:
        return Fail(503, "model overloaded")
    turn = sum(m["role"] == "assistant" for m in body["messages"])
    return PLAYS[task][turn]


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/v1"


def test_three_episodes_at_once_with_a_failing_endpoint(tmp_path):
    kb = make_kernelbench(tmp_path / "kb")
    tasks = select_tasks(kernelbench=kb, tasks="level1/2-3,level2/1")
    evaluator = FakeEvaluator(delay=0.2)
    with ScriptedChatServer([respond] * 20) as server:
        spec = RunSpec(tmp_path / "run", tasks, EvalConfig(backend="cpu"), quiet=True)
        outcome = run_agent(spec, lambda: OpenAIClient("scripted", base_url=server.base_url, max_retries=1,
                                                       timeout=30, api_key="test"),
                            AgentConfig(max_turns=6), evaluator, model="scripted", concurrency=3)
    assert outcome.left == 0
    run = load_run(outcome.run_dir)
    best = {s.key: s.best for s in run.scores}
    assert {k: a.verdict for k, a in best.items()} == {"level1/2": "correct", "level1/3": "incorrect",
                                                       "level2/1": "episode_failed"}
    relu = best["level1/2"]
    assert relu.reward == 3 and relu.speedup_vs_eager == 4.0 and relu.turns == 3 and relu.stop_reason == "finish"
    assert "503" in best["level2/1"].error_message
    overall = run.metrics[-1]
    assert (overall.tasks, overall.failed, overall.pass_rate) == (2, 1, 1 / 2)   # the failed episode: not scored
    assert best["level2/1"].reward is None

    # trajectories for RFT, one file per task; the best solution beside them
    [traj] = list(read_jsonl(relu.trajectory_path))
    assert traj.id == relu.trajectory_id and traj.reward == 3 and traj.task["name"] == "level1/2_ReLU"
    assert (outcome.run_dir / "solutions" / "level1" / "2" / "model_new.py").read_text() == fake_solution(0.5)
    assert not (outcome.run_dir / "solutions" / "level1" / "3").exists()
    assert not (outcome.run_dir / "workspaces" / "level1" / "2").exists()
    [failed] = list(read_jsonl(best["level2/1"].trajectory_path))
    assert failed.stop_reason == "client_error" and failed.reward is None and failed.infra_error

    # --resume --retry-failed runs the failed episode again (the endpoint has recovered: it still fails
    # here, but only that episode is run)
    calls_before = len(evaluator.calls)
    with ScriptedChatServer([respond] * 5) as server:
        again = RunSpec(tmp_path / "run", tasks, EvalConfig(backend="cpu"), resume=True, retry_failed=True,
                        quiet=True, report=False)
        run_agent(again, lambda: OpenAIClient("scripted", base_url=server.base_url, max_retries=0, timeout=30,
                                              api_key="test"),
                  AgentConfig(max_turns=6), evaluator, model="scripted", concurrency=3)
        assert len(server.requests) == 1 and "level2/1_Tanh" in server.requests[0]["messages"][1]["content"]
    assert len(evaluator.calls) == calls_before + 1   # only its final re-evaluation


def test_a_dead_endpoint_stops_the_run_after_a_few_episodes(tmp_path):
    """Every episode would fail alike: after three in a row no new one starts; what ran is recorded, the
    rest wait for `--resume --retry-failed`. An episode that succeeds in between starts the count again."""
    tasks = select_tasks(kernelbench=make_kernelbench(tmp_path / "kb"))   # five tasks
    dead = closed_port_url()
    spec = RunSpec(tmp_path / "run", tasks, EvalConfig(backend="cpu"), quiet=True, report=False)
    outcome = run_agent(spec, lambda: OpenAIClient("nobody", base_url=dead, max_retries=0, timeout=5, api_key="x"),
                        AgentConfig(max_turns=6), FakeEvaluator(), model="nobody", concurrency=1)
    assert outcome.left == 2
    assert outcome.stopped.startswith("3 episodes in a row ended on an infrastructure failure (the last: client_error")
    run = load_run(outcome.run_dir)
    assert [s.state for s in run.scores] == ["failed"] * 3 + ["pending"] * 2
    assert run.sessions[-1]["status"] == "stopped"

    streak = FailureStreak(Deadline(None), "episodes")
    for failure in ("down", "down", None, "down", "down"):
        streak.note(failure)
    assert not streak.deadline.passed
    streak.note("down")
    assert streak.deadline.passed and streak.deadline.stopped.startswith("3 episodes in a row")


def test_cli_agent_mode_with_the_endpoint_down(tmp_path, cache_dir):
    """The whole command with the real environment: nothing answers at the URL; the episodes are recorded
    as failed and left out of the metrics, the run stops after three of them (the fourth task is not
    started), writes its report and exits 3 saying the endpoint failed (as `solve` does). Bad option
    combinations are refused."""
    kb = make_kernelbench(tmp_path / "kb")
    base = [sys.executable, "-m", "cuda_agent.cli", "bench", "--kernelbench", str(kb), "--backend", "cpu",
            "--cache-dir", str(cache_dir), "--quiet"]
    args = base + ["--model", "nobody", "--base-url", closed_port_url(), "--tasks", "level1/1-3,level2/1",
                   "--concurrency", "1", "--retries", "0", "--timeout", "5", "--iters", "3", "--trials", "1",
                   "--no-compile-baseline", "--no-sandbox", "--out", str(tmp_path / "run")]
    # a bad option combination, refused beside the real run
    both = subprocess.Popen(base + ["--model", "m", "--solutions", str(tmp_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600, env=dict(os.environ, OPENAI_API_KEY="x"))
    assert proc.returncode == 3, proc.stderr
    assert "endpoint" in proc.stderr and "--resume --retry-failed" in proc.stderr and "Traceback" not in proc.stderr
    assert "stopped early: 3 episodes in a row ended on an infrastructure failure" in proc.stderr
    assert "attempts not started: 1" in proc.stderr
    run = load_run(tmp_path / "run")
    assert [s.state for s in run.scores] == ["failed"] * 3 + ["pending"]
    for attempt in [s.best for s in run.scores[:3]]:
        assert attempt.verdict == "episode_failed" and "Connection" in attempt.error_message
    overall = run.metrics[-1]
    assert (overall.tasks, overall.failed, overall.pass_rate, overall.mean_reward) == (0, 3, None, None)
    assert "overall" in proc.stdout and (tmp_path / "run" / "report.html").is_file()
    traj = json.loads((tmp_path / "run" / "trajectories" / "level1" / "2.jsonl").read_text())
    assert traj["stop_reason"] == "client_error"

    _, stderr = both.communicate(timeout=600)
    assert both.returncode == 2 and "either --solutions" in stderr
    again = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert again.returncode == 2 and "--resume" in again.stderr


def test_episodes_evaluations_wait_for_gpu_memory(tmp_path):
    """Agent mode's evaluations go through the same admission as a solution folder's: with a budget
    for two of these tasks' reservations, no more than two evaluate at once, whatever the pool's size."""
    import asyncio

    from cuda_agent.bench.memory import AdmittedEvaluator, admitted
    from cuda_agent.tasks import Solution
    from tests.bench.helpers import TWO_EVALUATIONS_GPU_BYTES, fake_solution
    from tests.bench.helpers import CountingEvaluator as Counting

    tasks = select_tasks(kernelbench=make_kernelbench(tmp_path / "kb"), tasks="level1/1-3,level2/1")
    inner = Counting(delay=0.2)

    async def main():
        plain = await admitted(inner, tasks, None, 4)   # no GPU: the evaluator as it is
        assert plain is inner
        guarded = await admitted(inner, tasks, TWO_EVALUATIONS_GPU_BYTES, 4)
        assert isinstance(guarded, AdmittedEvaluator) and guarded.capacity == 4
        solution = Solution({"model_new.py": fake_solution(0.5)})
        return await asyncio.gather(*(guarded.evaluate(t.task, solution) for t in tasks))

    results = asyncio.run(main())
    assert len(results) == 4 and inner.most == 2


@pytest.mark.parametrize("option, value", [("--turns", "-1"), ("--concurrency", "0"), ("--retries", "-1"),
                                           ("--context-tokens", "0"), ("--per-device", "0"),
                                           ("--max-tokens", "0"), ("--timeout", "-5")])
def test_bench_refuses_nonsense_numbers(tmp_path, option, value):
    """Refused while the options are read, before anything else is looked at (here: not even the
    KernelBench folder, which does not exist)."""
    from typer.testing import CliRunner

    from cuda_agent.cli import app

    result = CliRunner().invoke(app, ["bench", "--model", "m", "--base-url", closed_port_url(), "--backend", "cpu",
                                      "--kernelbench", str(tmp_path / "nowhere"), "--tasks", "level1/2", "--out", str(tmp_path / "run"),
                                      option, value])
    assert result.exit_code == 2 and option in result.output, result.output
    assert not (tmp_path / "run").exists()


def test_each_episode_gets_a_client_from_the_shared_picker(monkeypatch):
    """`bench --model` makes its clients with `cuda_agent.llm.make_client`, as `solve` does: the key the
    options name, the sampling settings, a client of its own per episode."""
    from cuda_agent.bench.cli import _client_factory

    monkeypatch.setenv("BENCH_KEY", "sk-bench")
    with ScriptedChatServer([say("a"), say("b")]) as server:
        make = _client_factory("m", server.base_url, "BENCH_KEY", 30.0, 0, 0.4, 64)
        first, second = make(), make()
        assert first is not second
        hello = [{"role": "user", "content": "hi"}]
        assert [c.complete(hello, []).message["content"] for c in (first, second)] == ["a", "b"]
    assert {h["authorization"] for h in server.headers} == {"Bearer sk-bench"}
    assert [(r["model"], r["temperature"], r["max_tokens"]) for r in server.requests] == [("m", 0.4, 64)] * 2
