"""The `cuda_agent` loop at the scale verl runs it: many trajectories per worker (v0 and the v1
default), every one built with the stage's settings file, each writing its record; failures of the
rollout server or the evaluator drop the one trajectory, never the group."""

import pytest

pytest.importorskip("verl")

from cuda_agent.env.result import EvalResult  # noqa: E402
from cuda_agent.rl.episode import EpisodeSettings  # noqa: E402

from .conftest import SESSION  # noqa: E402
from .verl_worker import (ScriptServer, call, fresh_worker_process, records, run_v0, run_v1,  # noqa: E402
                          setup)

JUDGE = "tests.rl.test_agent_loop:judge_factory"
SCRIPT = [call("write", path="model_new.py", content="FAST"), call("finish", summary="done")]
LIMITS = {"max_turns": 9, "max_idle_turns": 2, "max_seconds": 120}


def settings(tmp_path, **kw) -> EpisodeSettings:
    base = dict(eval={"backend": "cpu"}, evaluator=JUDGE, session=SESSION, workspace_root=str(tmp_path / "ws"),
                keep_workspaces=True, trajectories=str(tmp_path / "traj.jsonl"), limits=dict(LIMITS))
    return EpisodeSettings(**{**base, **kw})


def assert_stage_settings(s, count):
    """Every trajectory: its record written, the stage's limits, evaluator and workspace root."""
    recs = records(s)
    assert len(recs) == count
    assert all(r["config"]["limits"]["max_turns"] == 9 and r["config"]["limits"]["max_idle_turns"] == 2
               for r in recs)
    assert all(r["reward"] == 3 for r in recs)   # scored by the stage's evaluator (the judge)
    assert len(list((s.folder / "ws").iterdir())) == count


def test_v0_worker_runs_eight_trajectories_with_the_stage_settings(tmp_path, tiny_model, monkeypatch):
    fresh_worker_process(monkeypatch)
    s = setup(tmp_path, tiny_model, settings(tmp_path))
    out, _ = run_v0(s, ScriptServer(s.tokenizer, SCRIPT), n=8)
    assert len(out) == 8
    assert [float(x) for x in out.batch["rm_scores"].sum(dim=1)] == [3.0] * 8
    assert list(out.non_tensor_batch["stop_reason"]) == ["finish"] * 8
    assert_stage_settings(s, 8)


def test_v1_worker_runs_a_group_of_eight_with_the_stage_settings(tmp_path, tiny_model, monkeypatch):
    fresh_worker_process(monkeypatch)
    s = setup(tmp_path, tiny_model, settings(tmp_path), n=8)
    store, uids, _ = run_v1(s, ScriptServer(s.tokenizer, SCRIPT), monkeypatch)
    assert store.status == {uids[0]: "finished"}
    assert len(store.samples) == 8
    assert all(float(v["fields"]["rm_scores"].sum()) == 3.0 for v in store.samples.values())
    assert_stage_settings(s, 8)


@pytest.mark.parametrize("worker", ["v0", "v1"])
def test_64_concurrent_trajectories_in_one_worker(tmp_path, tiny_model, monkeypatch, worker):
    fresh_worker_process(monkeypatch)
    script = [call("write", path="model_new.py", content="FAST"), call("bash", command="ls"),
              call("finish", summary="done")]
    s = setup(tmp_path, tiny_model, settings(tmp_path, keep_workspaces=False), tasks=8, n=8)
    server = ScriptServer(s.tokenizer, script, delay=0.01)
    if worker == "v0":
        out, _ = run_v0(s, server, n=8)
        scores = [float(x) for x in out.batch["rm_scores"].sum(dim=1)]
    else:
        store, uids, _ = run_v1(s, server, monkeypatch)
        assert sorted(store.status.values()) == ["finished"] * 8
        scores = [float(v["fields"]["rm_scores"].sum()) for v in store.samples.values()]
    recs = records(s)
    assert scores == [3.0] * 64 and len(recs) == 64 and server.calls == 64 * 3
    assert len({r["id"] for r in recs}) == 64
    assert sorted(r["task"]["name"] for r in recs) == sorted(f"t{k}" for k in range(8) for _ in range(8))
    assert all(r["reward"] == 3 and r["stop_reason"] == "finish" for r in recs)
    assert not any((tmp_path / "ws").iterdir())   # every workspace removed


def test_a_trajectory_whose_server_failed_does_not_fail_its_group(tmp_path, tiny_model, monkeypatch):
    """Empty response (the server failed on turn 1): v1 used to raise IndexError for the group."""
    fresh_worker_process(monkeypatch)
    s = setup(tmp_path, tiny_model, settings(tmp_path), n=4)
    store, uids, _ = run_v1(s, ScriptServer(s.tokenizer, SCRIPT, fail={1}), monkeypatch)
    assert store.status == {uids[0]: "finished"}
    fields = [v["fields"] for v in store.samples.values()]
    dropped = [f for f in fields if f["extra_fields"]["skipped"]]
    assert len(fields) == 4 and len(dropped) == 1
    assert int(dropped[0]["response_mask"].sum()) == 0 and float(dropped[0]["rm_scores"].abs().sum()) == 0.0
    assert dropped[0]["extra_fields"]["stop_reason"] == "error"
    # the same on the v0 worker
    s0 = setup(tmp_path / "v0", tiny_model, settings(tmp_path / "v0"), n=4)
    out, _ = run_v0(s0, ScriptServer(s0.tokenizer, SCRIPT, fail={2}), n=4)
    assert list(out.non_tensor_batch["skipped"]).count(True) == 1
    assert sorted(out.non_tensor_batch["dropped"]) == [0.0, 0.0, 0.0, 1.0]   # verl's reward extra info
    assert "dropped" in out.meta_info["reward_extra_keys"]


def test_idle_episode_is_recorded_as_idle_not_finished(tmp_path, tiny_model, monkeypatch):
    fresh_worker_process(monkeypatch)
    s = setup(tmp_path, tiny_model, settings(tmp_path), n=1)
    out, _ = run_v0(s, ScriptServer(s.tokenizer, ["Thinking about it."]), n=1)
    [rec] = records(s)
    assert rec["stop_reason"] == "no_tool_calls" and len(rec["turns"]) == 2
    assert out.non_tensor_batch["stop_reason"][0] == "no_tool_calls"


def slow(task, solution, config):
    import time

    time.sleep(3.0)
    return EvalResult(task=task.name, backend="cpu", compiled=True, correct=True, reward=3)


def slow_factory():
    return slow


def test_an_episode_past_its_wall_clock_is_dropped_not_scored(tmp_path, tiny_model, monkeypatch):
    """A slow evaluator inside `verify`: the episode stops at limits.max_seconds, reward None, zero
    mask, counted as dropped in the stage's episode lines."""
    import time

    from cuda_agent.rl.episode import episode_stats

    fresh_worker_process(monkeypatch)
    script = [call("write", path="model_new.py", content="FAST"), call("verify"), call("finish")]
    s = setup(tmp_path, tiny_model, settings(tmp_path, evaluator="tests.rl.test_worker_scale:slow_factory",
                                             limits={"max_seconds": 1.0}, episodes=str(tmp_path / "ep.jsonl")), n=2)
    start = time.monotonic()
    out, _ = run_v0(s, ScriptServer(s.tokenizer, script), n=2)
    assert time.monotonic() - start < 2.9   # did not wait for the evaluator
    assert list(out.non_tensor_batch["skipped"]) == [True, True]
    assert list(out.non_tensor_batch["stop_reason"]) == ["time_limit", "time_limit"]
    assert int(out.batch["response_mask"].sum()) == 0 and float(out.batch["rm_scores"].abs().sum()) == 0.0
    assert episode_stats(tmp_path / "ep.jsonl") == {"episodes": 2, "dropped": 2, "stop_reasons": {"time_limit": 2},
                                                   "mean_reward": None}
