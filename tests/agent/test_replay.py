"""Replay: a recorded trajectory's tool calls re-run in a fresh workspace give the same episode."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from cuda_agent.agent.loop import run_episode
from cuda_agent.agent.replay import differing_outputs, replay
from cuda_agent.agent.trajectory import append_jsonl, read_jsonl

from .chat_server import call, say
from .conftest import RELU_BINDING, RELU_MODEL_NEW, ScriptedClient
from .test_scripted_episode import _normalized

SAME = ("messages", "turns", "best", "final", "reward", "speedup_vs_compile", "usage", "stop_reason", "error",
        "infra_error", "tools", "task", "model")


def test_replay_reproduces_the_scripted_episode(tmp_path, scripted_run, fake_evaluator, real_eval_config,
                                                steady_bash_clock):
    episode = scripted_run.episode   # the scripted episode (played once, shared with its recording test)
    recorded = episode.trajectory
    calls = len(scripted_run.evaluator.calls)
    outcome = replay(recorded, tmp_path / "again", evaluator=fake_evaluator)
    replayed = outcome.trajectory
    assert len(fake_evaluator.calls) == calls   # every evaluation ran again
    assert differing_outputs(recorded, replayed) == []

    def comparable(traj, root):
        record = _normalized(json.loads(json.dumps(traj.to_dict())), str(root), str(real_eval_config.cache_dir))
        return {k: record[k] for k in SAME}

    assert comparable(replayed, (tmp_path / "again").resolve()) == comparable(recorded, episode.workspace.root)
    assert outcome.reward == 3 == episode.reward and outcome.stop_reason == "finish"
    assert replayed.config["replay_of"] == recorded.id and replayed.config["eval"] == recorded.config["eval"]


def test_replay_command_rescoring_with_the_real_environment(tmp_path, relu_task, fake_evaluator, real_eval_config):
    script_ = [say("", call("write", path="kernels/relu_binding.cpp", content=RELU_BINDING),
                   call("write", path="model_new.py", content=RELU_MODEL_NEW)),
               say("", call("compile")), say("", call("verify")), say("Done.", call("finish"))]
    recorded = run_episode(relu_task, ScriptedClient(script_), workspace_dir=tmp_path / "ws",
                           eval_config=real_eval_config, evaluator=fake_evaluator).trajectory
    source = tmp_path / "recorded.jsonl"
    append_jsonl(source, recorded)
    out = tmp_path / "replayed.jsonl"
    cmd = [sys.executable, "-m", "cuda_agent.cli", "agent", "replay", str(source), "--out", str(out),
           "--workspace", str(tmp_path / "replay-ws")]
    # a record the file does not have, asked for beside the real replay (its own --out and --workspace)
    bad = subprocess.Popen(cmd[:6] + ["--out", str(tmp_path / "bad.jsonl"), "--workspace", str(tmp_path / "bad-ws"),
                                      "--index", "3"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (replayed,) = read_jsonl(out)
    # the same moves meet the same answers from the real environment ...
    assert differing_outputs(recorded, replayed) == []
    assert [c.env[0]["correct"] for t in replayed.turns for c in t.tool_calls if c.env] == [False, True]
    # ... and the real clean re-evaluation scores it
    assert replayed.final["correct"] and replayed.final["kernel_ms"] > 0 and replayed.reward >= 1
    assert proc.stdout.startswith(f"{recorded.id} relu: recorded reward {recorded.reward}, replayed {replayed.reward}")
    assert "5 tool calls, 0 messages differ" in proc.stdout

    _, stderr = bad.communicate(timeout=60)
    assert bad.returncode == 2 and "has 1 records; no record 3" in stderr
