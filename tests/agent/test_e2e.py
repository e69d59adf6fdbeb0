"""The whole loop, for real: `cuda-agent solve` against a local chat-completions server replaying a
scripted conversation, with the real environment on the CPU backend. The agent reads the rules,
writes a C++ kernel with a planted error, compiles through the protected ./compile command, fixes
the error, compiles, verifies and profiles through the tools, and finishes."""

import json
import os
import subprocess
import sys

from .chat_server import ScriptedChatServer, call, say
from .conftest import RELU_BINDING, RELU_MODEL_NEW

PLANTED = RELU_BINDING.replace("in[i] : 0.f;", "in[i] : 0.f")   # a missing semicolon


def test_solve_end_to_end(tmp_path, relu_task, real_eval_config):
    assert PLANTED != RELU_BINDING
    task_file = tmp_path / "relu.py"
    task_file.write_text(relu_task.code)
    script = [
        say("I will read the rules first.", call("read", path="SKILL.md")),
        say("Writing a C++ kernel and the model.",
            call("write", path="kernels/relu_binding.cpp", content=PLANTED),
            call("write", path="model_new.py", content=RELU_MODEL_NEW)),
        say("", call("bash", command="./compile")),
        say("A semicolon is missing.", call("edit", path="kernels/relu_binding.cpp",
                                            old_string="in[i] : 0.f\n", new_string="in[i] : 0.f;\n")),
        say("", call("compile")),
        say("", call("verify")),
        say("", call("profile")),
        say("Correct and profiled.", call("finish", summary="C++ relu")),
    ]
    out = tmp_path / "run"
    cfg = real_eval_config
    cmd = [sys.executable, "-m", "cuda_agent.cli", "solve", str(task_file), "--model", "scripted-model",
           "--base-url", "SERVER", "--out", str(out), "--backend", "cpu", "--iters", str(cfg.iters),
           "--trials", str(cfg.num_correct_trials), "--no-compile-baseline", "--cache-dir", str(cfg.cache_dir),
           "--retries", "0"] + (["--no-sandbox"] if cfg.sandbox == "none" else [])
    with ScriptedChatServer(script) as server:
        cmd[cmd.index("SERVER")] = server.base_url
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                              env=dict(os.environ, OPENAI_API_KEY="test-key"))
    print(proc.stderr)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert server.remaining == 0, proc.stderr

    # what the model saw: the compiler error after ./compile, then passing commands
    def last_tool_output(i):
        return [m["content"] for m in server.requests[i]["messages"] if m["role"] == "tool"][-1]

    compiled = last_tool_output(3)
    assert compiled.startswith("compile: FAILED") and "relu_binding.cpp" in compiled and "error" in compiled
    assert "[exit code 1" in compiled
    assert last_tool_output(5) == "compile: OK"
    assert last_tool_output(6).startswith("verify: PASSED")
    assert last_tool_output(7).startswith("profile: correct")

    # progress was visible while it ran
    assert "turn   3" in proc.stderr and "bash(./compile)" in proc.stderr and "final reward" in proc.stderr

    # outputs: best solution, trajectory, summary
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stop_reason"] == "finish" and summary["turns"] == 8 and summary["reward"] >= 1
    assert (out / "solution" / "kernels" / "relu_binding.cpp").read_text() == RELU_BINDING
    assert (out / "solution" / "model_new.py").read_text() == RELU_MODEL_NEW
    records = (out / "trajectories.jsonl").read_text().splitlines()
    assert len(records) == 1
    traj = json.loads(records[0])
    env = [(c["name"], c["command"], c["env"][0]["compiled"]) for t in traj["turns"] for c in t["tool_calls"]
           if c["env"]]
    assert env == [("bash", "compile", False), ("compile", "compile", True), ("verify", "verify", True),
                   ("profile", "profile", True)]
    assert [c["env"][0]["correct"] for c in traj["turns"][5]["tool_calls"] + traj["turns"][6]["tool_calls"]] == \
        [True, True]
    assert traj["best"]["turn"] == 7 and traj["best"]["trusted"]
    assert traj["final"]["correct"] and traj["final"]["kernel_ms"] > 0 and traj["reward"] == summary["reward"]
    assert traj["usage"]["calls"] == 8 and traj["timings"]["final_eval_s"] > 0
