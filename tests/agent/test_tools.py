import json
import shutil

import pytest

from cuda_agent.agent.tools import AGENT_TOOLS, MCP_TOOLS, ToolContext, ToolLimits, call_tool, cap, registry
from cuda_agent.agent.tools.shell import network_isolation_prefix
from cuda_agent.agent.workspace import Workspace
from cuda_agent.env.config import EvalConfig


@pytest.fixture
def ctx(tmp_path, relu_task, fake_evaluator):
    ws = Workspace.create(relu_task, tmp_path / "ws", eval_config=EvalConfig(backend="cpu"), evaluator=fake_evaluator)
    return ToolContext(ws, ToolLimits(bash_timeout_s=5, max_output_chars=2000))


TOOLS = registry(AGENT_TOOLS)


def run(ctx, name, **args):
    return call_tool(TOOLS, ctx, name, json.dumps(args))


def test_schemas_are_openai_function_tools():
    names = [t.name for t in AGENT_TOOLS]
    assert names == ["bash", "read", "write", "edit", "multi_edit", "glob", "grep", "todo",
                     "compile", "verify", "profile", "finish"]
    assert {t.name for t in MCP_TOOLS} >= {"compile", "verify", "profile", "bash", "read", "write", "edit"}
    for tool in AGENT_TOOLS:
        schema = tool.schema()
        assert schema["type"] == "function"
        params = schema["function"]["parameters"]
        assert params["type"] == "object" and set(params["required"]) <= set(params["properties"])
        json.dumps(schema)


def test_write_read_edit_multi_edit(ctx):
    out = run(ctx, "write", path="kernels/a.cpp", content="int a = 1;\nint b = 2;\nint c = 3;\n")
    assert out.ok and "created kernels/a.cpp (3 lines)" in out.text
    out = run(ctx, "read", path="kernels/a.cpp", offset=2, limit=1)
    assert out.text.startswith("     2\tint b = 2;") and "offset=3" in out.text
    assert run(ctx, "edit", path="kernels/a.cpp", old_string="int b = 2;", new_string="int b = 20;").ok
    out = run(ctx, "edit", path="kernels/a.cpp", old_string="int", new_string="long")
    assert not out.ok and "occurs 3 times" in out.text
    out = run(ctx, "edit", path="kernels/a.cpp", old_string="int x", new_string="y")
    assert not out.ok and "not found" in out.text
    # multi_edit is all or nothing
    out = run(ctx, "multi_edit", path="kernels/a.cpp", edits=[
        {"old_string": "int a = 1;", "new_string": "int a = 10;"},
        {"old_string": "missing", "new_string": "x"}])
    assert not out.ok and "edit 2" in out.text
    assert "int a = 1;" in (ctx.workspace.root / "kernels/a.cpp").read_text()
    out = run(ctx, "multi_edit", path="kernels/a.cpp", edits=[
        {"old_string": "int a = 1;", "new_string": "int a = 10;"},
        {"old_string": "int", "new_string": "long", "replace_all": True}])
    assert out.ok
    assert (ctx.workspace.root / "kernels/a.cpp").read_text() == "long a = 10;\nlong b = 20;\nlong c = 3;\n"
    out = run(ctx, "read", path="kernels")
    assert "a.cpp" in out.text


def test_paths_stay_inside_and_protected_files_stay_read_only(ctx):
    for path in ("../escape.txt", "/etc/passwd"):
        out = run(ctx, "write", path=path, content="x")
        assert not out.ok and "outside the workspace" in out.text
    assert not run(ctx, "read", path="/etc/hostname").ok
    for path in ("model.py", "verify", "SKILL.md", ".cuda_agent/workspace.json"):
        out = run(ctx, "write", path=path, content="x")
        assert not out.ok and "protected" in out.text
    out = run(ctx, "edit", path="model.py", old_string="torch.relu", new_string="torch.tanh")
    assert not out.ok and "protected" in out.text
    (ctx.workspace.root / "link").symlink_to("/etc")
    assert "outside" in run(ctx, "read", path="link/hostname").text


def test_glob_and_grep(ctx):
    run(ctx, "write", path="kernels/x.cpp", content="// relu kernel\nfloat relu(float v);\n")
    run(ctx, "write", path="kernels/sub/y.cu", content="__global__ void relu_kernel() {}\n")
    assert run(ctx, "glob", pattern="**/*.cu").text == "kernels/sub/y.cu"
    assert set(run(ctx, "glob", pattern="*.cpp").text.split()) == {"kernels/x.cpp"}
    out = run(ctx, "grep", pattern=r"relu\w*\(", path="kernels")
    assert "kernels/x.cpp:2: float relu(float v);" in out.text and "kernels/sub/y.cu:1:" in out.text
    assert "kernels/sub/y.cu" not in run(ctx, "grep", pattern="relu", glob="*.cpp").text
    assert "invalid regular expression" in run(ctx, "grep", pattern="(").text


def test_bash_exit_code_timeout_and_cap(ctx):
    out = run(ctx, "bash", command="echo hi; ls model.py; exit 3")
    assert "hi\nmodel.py" in out.text and "[exit code 3;" in out.text
    out = run(ctx, "bash", command="sleep 30", timeout=1)
    assert "timed out after 1 s" in out.text
    out = run(ctx, "bash", command="python3 -c \"print('x' * 100000)\"; echo END")
    assert len(out.text) < 2600 and "characters omitted" in out.text and "END" in out.text


def test_bash_kills_the_whole_process_group(ctx, tmp_path):
    marker = tmp_path / "survivor"
    run(ctx, "bash", command=f"(sleep 2; touch {marker}) & sleep 30", timeout=1)
    import time

    time.sleep(1.5)   # the background child would have touched the marker by now
    assert not marker.exists()


@pytest.mark.skipif(not network_isolation_prefix(), reason="no network namespaces here")
def test_bash_has_no_network(ctx):
    # a fresh network namespace: only a loopback interface, and it is down
    out = run(ctx, "bash", command="tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
    assert out.text.splitlines()[0] == "lo" and out.text.splitlines()[1].startswith("[exit code 0")


def test_bad_calls_come_back_as_text(ctx):
    out = call_tool(TOOLS, ctx, "rm_rf", "{}")
    assert out.error == "unknown_tool" and "Available tools: bash, read" in out.text
    out = call_tool(TOOLS, ctx, "write", '{"path": "a.txt", "content": "x"')
    assert out.error == "invalid_arguments" and "not valid JSON" in out.text
    out = call_tool(TOOLS, ctx, "write", '{"path": "a.txt"}')
    assert out.error == "invalid_arguments" and "needs content" in out.text
    out = call_tool(TOOLS, ctx, "read", '{"path": "model.py", "lines": 3}')
    assert out.error == "invalid_arguments" and "no parameter lines" in out.text
    out = call_tool(TOOLS, ctx, "read", '{"path": 7}')
    assert out.error == "invalid_arguments" and "path must be a string" in out.text
    out = call_tool(TOOLS, ctx, "read", '["model.py"]')
    assert out.error == "invalid_arguments"
    # lenient where the intent is clear: numbers as strings, nested JSON as a string
    assert call_tool(TOOLS, ctx, "read", '{"path": "model.py", "limit": "2"}').ok
    edits = json.dumps([{"old_string": "a", "new_string": "b"}])
    run(ctx, "write", path="f.txt", content="a")
    assert call_tool(TOOLS, ctx, "multi_edit", json.dumps({"path": "f.txt", "edits": edits})).ok


def test_todo_and_finish(ctx):
    out = run(ctx, "todo", todos=[{"content": "write kernel", "status": "completed"},
                                  {"content": "profile", "status": "in_progress"}, {"content": "tune"}])
    assert out.text.splitlines()[1:] == ["[x] write kernel", "[~] profile", "[ ] tune"]
    assert ctx.todos[2]["status"] == "pending"
    assert not run(ctx, "todo", todos=[{"content": "x", "status": "done"}]).ok
    out = run(ctx, "finish", summary="done")
    assert out.finish and out.ok


def test_command_tools_return_env_results(ctx):
    out = run(ctx, "verify")
    assert not out.ok and out.command.command == "verify" and out.command.result.error.phase == "verify"


def test_cap_keeps_head_and_tail():
    text = "HEAD" + "x" * 10_000 + "TAIL"
    capped = cap(text, 1000)
    assert capped.startswith("HEAD") and capped.endswith("TAIL") and len(capped) < 1200
    assert cap("short", 1000) == "short"


def test_no_tool_writes_outside(ctx, tmp_path):
    # a failed internal error still comes back as text, not an exception
    shutil.rmtree(ctx.workspace.root / "kernels")
    out = run(ctx, "glob", pattern="*", path="kernels")
    assert not out.ok and "not a folder" in out.text
