import copy
import json

import pyarrow.parquet as pq

from cuda_agent.llm.client import OpenAIClient
from cuda_agent.agent.loop import run_episode
from cuda_agent.agent.sft import SFTFilter, export_sft, longest_repeat, read_sft, rejection_reason
from cuda_agent.agent.trajectory import Trajectory, append_jsonl, read_jsonl
from cuda_agent.env.config import EvalConfig

from .chat_server import ScriptedChatServer, call, say
from .conftest import RELU_BINDING, RELU_MODEL_NEW


def make_trajectory(tmp_path, task, evaluator, extra=()) -> Trajectory:
    script = [say("", call("write", path="kernels/relu_binding.cpp", content=RELU_BINDING),
                  call("write", path="model_new.py", content=RELU_MODEL_NEW)),
              *extra,
              say("", call("profile")), say("done", call("finish"))]
    with ScriptedChatServer(script) as server:
        client = OpenAIClient("scripted", base_url=server.base_url, max_retries=0)
        return run_episode(task, client, workspace_dir=tmp_path, eval_config=EvalConfig(backend="cpu"),
                           evaluator=evaluator).trajectory


def test_jsonl_roundtrip(tmp_path, relu_task, fake_evaluator):
    traj = make_trajectory(tmp_path / "ws", relu_task, fake_evaluator)
    path = tmp_path / "t.jsonl"
    append_jsonl(path, traj)
    append_jsonl(path, traj)
    back = list(read_jsonl(path))
    assert len(back) == 2 and back[0].to_dict() == traj.to_dict()
    record = json.loads(path.read_text().splitlines()[0])
    assert {"messages", "tools", "turns", "reward", "usage", "timings", "final", "best"} <= set(record)
    profile_call = record["turns"][1]["tool_calls"][0]
    assert profile_call["name"] == "profile" and profile_call["env"][0]["reward"] == 3
    assert back[0].summary()["reward"] == 3 and back[0].tool_errors() == {}


def test_sft_export_filters_and_parquet_layout(tmp_path, relu_task, fake_evaluator):
    good = make_trajectory(tmp_path / "a", relu_task, fake_evaluator)
    invalid = make_trajectory(tmp_path / "b", relu_task, fake_evaluator, extra=[say("", call("nope"))])
    looping = make_trajectory(tmp_path / "c", relu_task, fake_evaluator,
                              extra=[say("", call("bash", command="ls"))] * 5)
    failed = copy.deepcopy(good)
    failed.reward = -1
    assert longest_repeat(looping) == 5 and longest_repeat(good) == 1
    assert rejection_reason(good, SFTFilter()) is None
    assert rejection_reason(invalid, SFTFilter()) == "invalid_tool_calls"
    assert rejection_reason(looping, SFTFilter()) == "redundant_loop"
    assert rejection_reason(failed, SFTFilter()) == "reward"

    out = tmp_path / "sft.parquet"
    stats = export_sft([good, invalid, looping, failed], out)
    assert stats == {"kept": 1, "rejected": {"invalid_tool_calls": 1, "redundant_loop": 1, "reward": 1}}
    table = pq.read_table(out)
    assert {"messages", "tools", "reward", "task"} <= set(table.column_names)
    row = table.to_pylist()[0]
    roles = [m["role"] for m in row["messages"]]
    assert roles[:3] == ["system", "user", "assistant"] and roles[-1] == "tool"
    first_call = row["messages"][2]["tool_calls"][0]
    assert first_call["function"]["name"] == "write" and json.loads(first_call["function"]["arguments"])["path"]
    assert [t["function"]["name"] for t in row["tools"]][:3] == ["bash", "read", "write"]
    exact = read_sft(out)[0]
    assert exact["tools"] == good.tools
    assert [m["content"] for m in exact["messages"]] == [m["content"] for m in good.messages]


def test_sft_export_skips_our_failures(tmp_path, relu_task, fake_evaluator):
    good = make_trajectory(tmp_path / "a", relu_task, fake_evaluator)
    ours = copy.deepcopy(good)   # say the final evaluation service had crashed: the reward is unknown
    ours.reward, ours.infra_error = None, "the final evaluation failed on our side: ConnectionError"
    assert rejection_reason(ours, SFTFilter(min_reward=-10)) == "infra_error"
    stats = export_sft([good, ours], tmp_path / "sft.parquet")
    assert stats == {"kept": 1, "rejected": {"infra_error": 1}}
    path = tmp_path / "t.jsonl"
    append_jsonl(path, ours)
    (back,) = read_jsonl(path)
    assert back.infra_error == ours.infra_error and back.summary()["infra_error"] == ours.infra_error


def test_a_call_answered_from_a_record_is_marked_in_the_trajectory_and_the_sft_rows(tmp_path, relu_task,
                                                                                     fake_evaluator):
    """A profile on unchanged files is answered from the last one's record: the trajectory marks that
    call (`answered_from_record`, one per result) and the SFT rows name it, so training data tells a
    replayed result from a fresh evaluation."""
    traj = make_trajectory(tmp_path / "ws", relu_task, fake_evaluator, extra=[say("", call("profile"))])
    assert len(fake_evaluator.calls) == 2   # the first profile and the final clean re-evaluation: not the second
    calls = [c for turn in traj.turns for c in turn.tool_calls if c.command == "profile"]
    assert [c.answered_from_record for c in calls] == [[False], [True]]
    replies = {m["tool_call_id"]: m["content"] for m in traj.messages if m["role"] == "tool"}
    assert "answered from its record" in replies[calls[1].id] and "answered" not in replies[calls[0].id]
    assert traj.answered_calls() == [calls[1].id]
    back = Trajectory.from_dict(json.loads(json.dumps(traj.to_dict())))
    assert back.answered_calls() == [calls[1].id]
    out = tmp_path / "sft.parquet"
    assert export_sft([traj], out)["kept"] == 1
    assert pq.read_table(out).to_pylist()[0]["answered_from_record"] == [calls[1].id]


def test_a_script_answered_from_its_record_is_marked_in_the_claims(tmp_path, relu_task, fake_evaluator):
    """The scripts run through bash write their results to the workspace's records file, each marked
    evaluated or answered; the session's claims carry the mark into the trajectory."""
    from cuda_agent.agent.session import KernelSession

    session = KernelSession(relu_task, tmp_path / "ws", evaluator=fake_evaluator,
                            eval_config=EvalConfig(backend="cpu", cache_dir=tmp_path / "c"))
    session.reset()
    session.step([{"name": "write", "arguments": {"path": "kernels/relu_binding.cpp", "content": RELU_BINDING}},
                  {"name": "write", "arguments": {"path": "model_new.py", "content": RELU_MODEL_NEW}}])
    ws = session.workspace
    for _ in range(2):   # what workspace_cli does for ./verify (records answer from the tools' memory too)
        ws.record(ws.verify())
    step = session.step([{"name": "bash", "arguments": {"command": "true"}}])
    assert step.info.calls[0].command == "verify"
    assert step.info.calls[0].answered_from_record == [False, True]
