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
