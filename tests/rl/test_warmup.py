"""The warm-up stage's single reply, scored in its agent loop (`cuda_agent_single_turn`) and by the
same score as verl's reward function: an evaluation that failed on our side is never a reward."""

import asyncio

import pytest

pytest.importorskip("verl")

from cuda_agent.env.result import EvalError, EvalResult  # noqa: E402
from cuda_agent.rl.episode import EpisodeSettings, episode_stats  # noqa: E402
from cuda_agent.rl.single_turn import compute_score  # noqa: E402

from .test_data import CODE  # noqa: E402
from .test_worker_scale import settings  # noqa: E402
from .verl_worker import ScriptServer, fresh_worker_process, run_v1, setup  # noqa: E402

FAST = "Here it is.\n```python\nclass ModelNew:  # FAST\n    pass\n```"
SLOW = "```python\nclass ModelNew:\n    pass\n```"
INFO = {"task_name": "t", "task_code": CODE.format(k=2)}


def internal(task, solution, config):
    return EvalResult(task=task.name, backend="cpu", error=EvalError("internal", "worker pool died"))


def internal_factory():
    return internal


def judge(task, solution, config):
    """Reward 3 for a ModelNew marked FAST, a wrong answer otherwise."""
    if "FAST" in solution.files["model_new.py"]:
        return EvalResult(task=task.name, backend="cpu", compiled=True, correct=True, reward=3)
    return EvalResult(task=task.name, backend="cpu", error=EvalError("verify", "wrong"))


def judge_factory():
    return judge


class AsyncJudge:
    """An evaluator shaped like `EvalPool`: an async `evaluate`, run to completion from the scoring thread."""

    async def evaluate(self, task, solution, config=None):
        await asyncio.sleep(0)
        return judge(task, solution, config)


def async_judge_factory():
    return AsyncJudge()


def not_an_evaluator_factory():
    return object()


def scored(tmp_path, evaluator, text):
    path = EpisodeSettings(eval={"backend": "cpu"}, evaluator=evaluator).dump(tmp_path / "episode.json")
    return compute_score("d", text, None, INFO, settings=str(path))


def test_reward_function_scores_replies_and_never_an_infrastructure_failure(tmp_path):
    assert scored(tmp_path, "tests.rl.test_warmup:judge_factory", FAST) == {"score": 3.0, "dropped": 0.0}
    assert scored(tmp_path, "tests.rl.test_warmup:judge_factory", SLOW) == {"score": -1.0, "dropped": 0.0}
    assert scored(tmp_path, "tests.rl.test_warmup:judge_factory", "no code") == {"score": -1.0, "dropped": 0.0}
    # the evaluator raised (service down) or reported its own internal error: no verdict
    assert scored(tmp_path, "tests.rl.test_agent_loop:broken_factory", FAST) == {"score": 0.0, "dropped": 1.0}
    assert scored(tmp_path, "tests.rl.test_warmup:internal_factory", FAST) == {"score": 0.0, "dropped": 1.0}


def test_reward_function_takes_every_evaluator_the_agent_takes(tmp_path):
    """The same evaluators as a `KernelSession` (`blocking_evaluator`): a pool-like async one scores,
    an object that is no evaluator is our failure (dropped), never a reward."""
    assert scored(tmp_path, "tests.rl.test_warmup:async_judge_factory", FAST) == {"score": 3.0, "dropped": 0.0}
    assert scored(tmp_path, "tests.rl.test_warmup:async_judge_factory", SLOW) == {"score": -1.0, "dropped": 0.0}
    assert scored(tmp_path, "tests.rl.test_warmup:not_an_evaluator_factory", FAST) == {"score": 0.0, "dropped": 1.0}


def test_warmup_loop_scores_in_the_loop_and_drops_our_failures(tmp_path, tiny_model, monkeypatch):
    fresh_worker_process(monkeypatch)
    s = setup(tmp_path, tiny_model, settings(tmp_path, evaluator="tests.rl.test_warmup:judge_factory",
                                             episodes=str(tmp_path / "episodes.jsonl")), n=4,
              overrides=["actor_rollout_ref.rollout.agent.default_agent_loop=cuda_agent_single_turn"])
    store, uids, _ = run_v1(s, ScriptServer(s.tokenizer, scripts=[[FAST], [SLOW]], fail={3}), monkeypatch)
    assert store.status == {uids[0]: "finished"}   # the failed reply did not fail its group
    fields = sorted((v["fields"] for v in store.samples.values()), key=lambda f: -float(f["rm_scores"].sum()))
    assert [float(f["rm_scores"].sum()) for f in fields] == [3.0, 3.0, 0.0, -1.0]
    dropped = [f for f in fields if f["extra_fields"]["skipped"]]
    assert len(dropped) == 1 and int(dropped[0]["response_mask"].sum()) == 0
    stats = episode_stats(tmp_path / "episodes.jsonl")
    assert stats["episodes"] == 4 and stats["dropped"] == 1 and stats["stop_reasons"] == {"finish": 3, "error": 1}


def test_warmup_loop_drops_every_reply_when_the_evaluator_is_down(tmp_path, tiny_model, monkeypatch):
    fresh_worker_process(monkeypatch)
    s = setup(tmp_path, tiny_model, settings(tmp_path, evaluator="tests.rl.test_agent_loop:broken_factory"), n=2,
              overrides=["actor_rollout_ref.rollout.agent.default_agent_loop=cuda_agent_single_turn"])
    store, uids, _ = run_v1(s, ScriptServer(s.tokenizer, [FAST]), monkeypatch)
    fields = [v["fields"] for v in store.samples.values()]
    assert store.status == {uids[0]: "finished"} and len(fields) == 2
    assert all(f["extra_fields"]["skipped"] and int(f["response_mask"].sum()) == 0
               and float(f["rm_scores"].abs().sum()) == 0.0 for f in fields)
