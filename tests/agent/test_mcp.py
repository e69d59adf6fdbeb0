"""An MCP client launches `cuda-agent mcp` over stdio, lists the tools and calls them."""

import json
import os
import sys

import anyio
import pytest

from cuda_agent.agent.mcp_server import SKILL_URI, build_server, default_trajectories
from cuda_agent.agent.replay import replay
from cuda_agent.agent.sft import SFTFilter, rejection_reason
from cuda_agent.agent.trajectory import read_jsonl
from cuda_agent.agent.workspace import Workspace, skill_text
from cuda_agent.env.config import EvalConfig

from .conftest import RELU_BINDING, RELU_MODEL_NEW

mcp = pytest.importorskip("mcp")


def text_of(result) -> str:
    return "\n".join(block.text for block in result.content if getattr(block, "type", "") == "text")


def test_mcp_stdio_lists_and_calls_tools(tmp_path, relu_task, real_eval_config):
    ws = Workspace.create(relu_task, tmp_path / "ws", eval_config=real_eval_config)
    # env: the server imports the cuda_agent under test (the client passes only a few variables by default)
    params = mcp.StdioServerParameters(command=sys.executable, env=dict(os.environ),
                                       args=["-m", "cuda_agent.cli", "mcp", "--workspace", str(ws.root)])

    async def session():
        async with mcp.Client(params) as client:
            listed = await client.list_tools()
            names = {t.name for t in listed.tools}
            write = await client.call_tool("write", {"path": "kernels/relu_binding.cpp", "content": RELU_BINDING})
            read = await client.call_tool("read", {"path": "kernels/relu_binding.cpp", "limit": 3})
            bash = await client.call_tool("bash", {"command": "ls kernels && echo from-bash >&2"})
            denied = await client.call_tool("write", {"path": "model.py", "content": "x"})
            bad = await client.call_tool("edit", {"path": "kernels/relu_binding.cpp"})
            stub = await client.call_tool("verify", {})   # the real environment; the starting point fails
            await client.call_tool("write", {"path": "model_new.py", "content": RELU_MODEL_NEW})
            verify = await client.call_tool("verify", {})
            again = await client.call_tool("verify", {})   # nothing changed
            return listed, names, write, read, bash, denied, bad, stub, verify, again

    listed, names, write, read, bash, denied, bad, stub, verify, again = anyio.run(session)
    assert names == {"compile", "verify", "profile", "bash", "read", "write", "edit", "multi_edit", "glob", "grep",
                     "submit"}
    schema = next(t for t in listed.tools if t.name == "edit").input_schema
    assert schema["required"] == ["path", "old_string", "new_string"]
    assert not write.is_error and "created kernels/relu_binding.cpp" in text_of(write)
    assert "     1\t#include <torch/extension.h>" in text_of(read)
    assert "relu_binding.cpp" in text_of(bash) and "from-bash" in text_of(bash)
    assert denied.is_error and "protected" in text_of(denied)
    assert bad.is_error and "needs old_string, new_string" in text_of(bad)
    assert stub.is_error and text_of(stub).startswith("verify: FAILED")
    assert not verify.is_error and text_of(verify).startswith("verify: PASSED"), text_of(verify)
    assert not again.is_error and text_of(again) == text_of(verify) + (
        "\n(unchanged since the last verify: answered from its record, not evaluated again)")
    assert (ws.root / "kernels" / "relu_binding.cpp").read_text() == RELU_BINDING
    # the server stopped with the client, before submit: the episode was recorded, unscored
    (traj,) = read_jsonl(default_trajectories(ws))
    assert traj.stop_reason == "stopped" and traj.reward is None and traj.infra_error.startswith("not scored")
    assert [c.name for t in traj.turns for c in t.tool_calls] == ["write", "read", "bash", "write", "edit", "verify",
                                                                  "write", "verify", "verify"]
    assert traj.best["trusted"] and traj.best["files"]["model_new.py"] == RELU_MODEL_NEW


def test_mcp_streamable_http(tmp_path, relu_task, real_eval_config):
    import socket
    import subprocess
    import time

    ws = Workspace.create(relu_task, tmp_path / "ws", eval_config=real_eval_config)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "episodes.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "cuda_agent.cli", "mcp", "--workspace", str(ws.root),
                             "--http", str(port), "--trajectories", str(out), "--model", "some-agent"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    async def session():
        async with mcp.Client(f"http://127.0.0.1:{port}/mcp") as client:
            return await client.call_tool("grep", {"pattern": "torch.relu"})

    try:
        # Wait for the server to listen for as long as it is starting (importing torch and the MCP
        # stack takes well over 10 s on a loaded machine); the cap only stops a hung start.
        deadline = time.monotonic() + 600
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        assert proc.poll() is None, proc.stderr.read().decode(errors="replace")
        result = anyio.run(session)
    finally:
        proc.terminate()   # a graceful stop: the episode is recorded first
        proc.wait(30)
    assert "model.py:10:         return torch.relu(x)" in text_of(result)
    (traj,) = read_jsonl(out)
    assert traj.model == "some-agent" and traj.stop_reason == "stopped" and traj.reward is None
    assert traj.turns[0].tool_calls[0].name == "grep"



# -- in process, with the fake evaluator ----------------------------------------------------------

def serve_in_process(server, calls):
    async def run():
        async with mcp.Client(server) as client:
            return [await client.call_tool(name, args) for name, args in calls], client

    return anyio.run(run)


def test_mcp_submit_scores_and_ends_the_session(tmp_path, relu_task, fake_evaluator):
    ws = Workspace.create(relu_task, tmp_path / "ws", eval_config=EvalConfig(backend="cpu"))
    server = build_server(ws, evaluator=fake_evaluator, model="claude")
    kernel = RELU_BINDING + "// kernel_ms=0.5\n"
    (write, _, profile, submit, after), _ = serve_in_process(server, [
        ("write", {"path": "kernels/relu_binding.cpp", "content": kernel}),
        ("write", {"path": "model_new.py", "content": RELU_MODEL_NEW}),
        ("profile", {}), ("submit", {"summary": "a relu"}), ("read", {"path": "model.py"})])
    assert not profile.is_error and text_of(profile).startswith("profile: correct")
    text = text_of(submit)
    assert not submit.is_error and text.startswith("Submitted.")
    assert "Clean re-evaluation of your best solution: reward 3" in text and "your kernel    0.5 ms" in text
    assert after.is_error and "this session has ended (finish)" in text_of(after)
    final_solution, final_config = fake_evaluator.calls[-1]
    assert final_solution.files["kernels/relu_binding.cpp"] == kernel and final_config.backend == "cpu"
    (traj,) = read_jsonl(default_trajectories(ws))   # written when the server stopped, once
    assert traj.model == "claude" and traj.stop_reason == "finish" and traj.reward == 3
    assert [c.name for t in traj.turns for c in t.tool_calls] == ["write", "write", "profile", "submit"]
    assert [m["role"] for m in traj.messages[2:4]] == ["assistant", "tool"]
    call = traj.messages[2]["tool_calls"][0]
    assert call["function"]["name"] == "write" and json.loads(call["function"]["arguments"])["content"] == kernel
    assert {t["function"]["name"] for t in traj.tools} >= {"submit", "verify", "bash"}


def test_mcp_stop_without_submit_records_unscored_and_replay_scores(tmp_path, relu_task, fake_evaluator):
    ws = Workspace.create(relu_task, tmp_path / "ws", eval_config=EvalConfig(backend="cpu"))
    out = tmp_path / "t.jsonl"
    (write, tamper), _ = serve_in_process(build_server(ws, evaluator=fake_evaluator, trajectories=out), [
        ("write", {"path": "model_new.py", "content": RELU_MODEL_NEW}),
        ("bash", {"command": "chmod u+w model.py; echo broken > model.py"})])
    assert "restored: model.py" in text_of(tamper) and (ws.root / "model.py").read_text() == relu_task.code
    (traj,) = read_jsonl(out)
    assert traj.stop_reason == "stopped" and traj.best is None and traj.reward is None and traj.final is None
    assert "before submit" in traj.infra_error and not fake_evaluator.calls   # nothing was evaluated
    assert rejection_reason(traj, SFTFilter()) == "infra_error"
    # a replay scores it: never verified by the agent, its final state passes the clean re-evaluation
    outcome = replay(traj, tmp_path / "again", evaluator=fake_evaluator)
    assert outcome.reward == 3 and outcome.stop_reason == "stopped" and outcome.trajectory.infra_error is None
    assert outcome.solution.files["model_new.py"] == RELU_MODEL_NEW
    assert [m["content"] for m in outcome.trajectory.messages] == [m["content"] for m in traj.messages]


def test_mcp_serves_skill_md_as_a_resource(tmp_path, relu_task, fake_evaluator):
    ws = Workspace.create(relu_task, tmp_path / "ws", eval_config=EvalConfig(backend="cpu"))

    async def run():
        async with mcp.Client(build_server(ws, evaluator=fake_evaluator)) as client:
            listed = await client.list_resources()
            return listed, await client.read_resource(SKILL_URI)

    listed, read = anyio.run(run)
    (resource,) = listed.resources
    assert resource.name == "SKILL.md" and str(resource.uri) == SKILL_URI and resource.mime_type == "text/markdown"
    assert read.contents[0].text == skill_text("cpu") == (ws.root / "SKILL.md").read_text()
