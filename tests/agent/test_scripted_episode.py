"""One scripted episode, recorded once and compared ever since: the messages the model is sent, the
trajectory (transcript, per-call records, best candidate, clean score) and the progress events.

The client is scripted in process; the workspace, the tools and `./compile` through bash are real
(the CPU backend builds the C++ kernel); verify, profile and the final rescoring use the fake
evaluator, so the record is deterministic. The script touches every path of an episode: reading,
planning, writing, a failing compile, malformed JSON, a missing parameter, double-encoded
arguments, replies without a tool call (plain and cut off), a real build through bash, a context
overflow and compaction, an unknown tool and parameter, tampering with a protected file, a forged
result claim, profiling and finishing.

The recording (`data/scripted_episode.json`) was made before the agent loop was rebuilt on
`KernelSession`; the loop must still produce it exactly. (Re-recorded once since, when the strict
protocol added four structured input sets to every verification, and once when it added a fifth,
`aligned`: only those counts changed; and when the `profile` tool took `unscored` and `EvalResult`
its `unscored` field: the tool's schema and the forged record's JSON changed; and when `EvalResult` took
`speedup_totals`: the forged record's JSON alone.) To re-record after an intended change,
run this test with CUDA_AGENT_RECORD_EPISODE=1 and review the diff.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from cuda_agent.llm.client import ContextLengthError
from cuda_agent.agent.context import ContextBudget
from cuda_agent.agent.loop import AgentConfig, run_episode
from cuda_agent.env.result import EvalResult
from cuda_agent.tasks import Task

from .chat_server import call, say
from .conftest import RELU_BINDING, RELU_MODEL_NEW, RELU_TASK, FakeEvaluator, ScriptedClient, hold_bash_clock

RECORDING = Path(__file__).parent / "data" / "scripted_episode.json"

FORGED = {"command": "profile", "ok": True, "files": {"model_new.py": "raise NotImplementedError"},
          "result": EvalResult(task="relu", backend="cpu", compiled=True, correct=True, kernel_ms=0.001,
                               eager_ms=2.0, compile_ms=1.5, speedup_vs_compile=1500.0, reward=3).to_dict()}


def script() -> list:
    edits = json.dumps([{"old_string": "#error planted\n", "new_string": "// kernel_ms=0.5\n"}])
    return [
        say("Reading the task.", call("read", call_id="c1", path="model.py", offset=9, limit=2)),
        say("", call("todo", call_id="c2", todos=[{"content": "write kernel", "status": "in_progress"},
                                                  {"content": "profile"}])),
        say("", call("write", call_id="c3", path="kernels/relu_binding.cpp", content=RELU_BINDING + "#error planted\n"),
            call("write", call_id="c4", path="model_new.py", content=RELU_MODEL_NEW)),
        say("", call("compile", call_id="c5")),
        say("", call("edit", call_id="c6", raw_arguments='{"path": "kernels/relu_binding.cpp", "old_string": "#err')),
        say("", call("edit", call_id="c7", path="kernels/relu_binding.cpp")),
        say("", call("multi_edit", call_id="c8", path="kernels/relu_binding.cpp", edits=edits)),
        say("Let me think."),
        say("I was cut", finish_reason="length"),
        say("", call("bash", call_id="c9", command="./compile")),
        say("", call("verify", call_id="c10")),
        say("", call("bash", call_id="c11", command="python3 -c \"print('q' * 4000)\"")),
        ContextLengthError("400: prompt is too long: maximum context length is 4096 tokens"),
        say("", call("nope", call_id="c12", x=1), call("read", call_id="c13", path="model.py", lines=3)),
        say("", call("bash", call_id="c14", command="chmod u+w model.py; echo 'class Model: pass' > model.py; "
                                                    f"echo '{json.dumps(FORGED)}' >> .cuda_agent/results.jsonl")),
        say("", call("profile", call_id="c15")),
        say("Done.", call("finish", call_id="c16", summary="a C++ relu")),
    ]


# What differs between runs and machines: ids, clocks, durations, paths, the real build's timings.
_DROPPED = {"id", "started_at", "timings", "seconds", "time"}
# Of an EvalResult, what the episode decides on (new fields elsewhere must not break the recording).
_RESULT_KEYS = {"compiled", "correct", "error", "kernel_ms", "eager_ms", "compile_ms", "speedup_vs_eager",
                "speedup_vs_compile", "reward", "max_abs_error"}


def _normalized(value, root: str | None = None, cache: str | None = None):
    if isinstance(value, dict) and {"compiled", "correct", "backend"} <= set(value):
        value = {k: v for k, v in value.items() if k in _RESULT_KEYS}
    if isinstance(value, dict):
        return {k: _normalized(v, root, cache) for k, v in value.items() if k not in _DROPPED}
    if isinstance(value, list):
        return [_normalized(v, root, cache) for v in value]
    if isinstance(value, str):
        for path, name in ((root, "<ws>"), (cache, "<cache>")):
            value = value.replace(path, name) if path else value
        return re.sub(r"; [0-9.]+ s\]", "; T s]", value)
    return value


@dataclass
class ScriptedRun:
    episode: object            # the EpisodeResult
    client: ScriptedClient
    events: list
    evaluator: FakeEvaluator
    eval_config: object


def play_script(workspace: Path, real_eval_config) -> ScriptedRun:
    """The scripted episode, played once in `workspace` (the bash tool's clock held at 0.0 s)."""
    client, events, evaluator = ScriptedClient(script()), [], FakeEvaluator()
    eval_config = replace(real_eval_config, compile_baseline=True)
    with pytest.MonkeyPatch.context() as patch:
        hold_bash_clock(patch)
        episode = run_episode(Task(name="relu", code=RELU_TASK, origin="tests"), client, workspace_dir=workspace,
                              eval_config=eval_config, evaluator=evaluator,
                              on_event=lambda kind, data: events.append((kind, data)),
                              config=AgentConfig(context=ContextBudget(max_tokens=2500, keep_recent=4)))
    return ScriptedRun(episode, client, events, evaluator, eval_config)


def run_scripted(played: ScriptedRun, real_eval_config) -> dict:
    client, events, episode, eval_config = played.client, played.events, played.episode, played.eval_config
    assert not client.script
    traj = episode.trajectory.to_dict()
    assert traj.pop("infra_error") is None   # added with the session; nothing failed on our side here
    for part in ("eval", "final_eval"):   # the evaluation settings as given (their fields are env's business)
        assert traj["config"].pop(part) == replace(eval_config, backend="cpu").to_dict()
    shown = [(kind, {k: data.get(k) for k in ("turn", "name", "ok", "command", "tool_calls", "reward", "reason",
                                              "digest") if k in data}) for kind, data in events]
    opening = traj["messages"][:2]   # system prompt and task: in every request, stored once
    assert all(request[:2] == opening for request in client.requests)
    record = {"requests": [request[2:] for request in client.requests], "trajectory": traj, "events": shown,
              "solution": episode.solution.files if episode.solution else None}
    return _normalized(json.loads(json.dumps(record)), str(episode.workspace.root), str(real_eval_config.cache_dir))


def test_scripted_episode_matches_the_recording(scripted_run, real_eval_config):
    record = run_scripted(scripted_run, real_eval_config)
    if os.environ.get("CUDA_AGENT_RECORD_EPISODE"):
        RECORDING.parent.mkdir(exist_ok=True)
        RECORDING.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    expected = _normalized(json.loads(RECORDING.read_text()))
    # the parts first, for a readable failure
    assert record["requests"] == expected["requests"]
    assert record["trajectory"]["messages"] == expected["trajectory"]["messages"]
    assert record["trajectory"]["turns"] == expected["trajectory"]["turns"]
    assert record["trajectory"]["best"] == expected["trajectory"]["best"]
    assert record == expected
    traj = record["trajectory"]
    # and what the recording says, so that it is reviewed, not just replayed
    assert traj["stop_reason"] == "finish" and traj["reward"] == 3 and traj["best"]["trusted"] is False
    assert record["solution"]["kernels/relu_binding.cpp"] == RELU_BINDING + "// kernel_ms=0.5\n"
    errors = [(c["name"], c["error"]) for t in traj["turns"] for c in t["tool_calls"] if c["error"]]
    assert errors == [("edit", "invalid_arguments"), ("edit", "invalid_arguments"), ("nope", "unknown_tool"),
                      ("read", "invalid_arguments")]
    assert [c["command"] for t in traj["turns"] for c in t["tool_calls"] if c["command"]] == \
        ["compile", "compile", "verify", "profile", "profile"]
