"""An MCP client launches `cuda-agent mcp` over stdio, lists the tools and calls them."""

import sys

import anyio
import pytest

from cuda_agent.agent.workspace import Workspace

from .conftest import RELU_BINDING, RELU_MODEL_NEW

mcp = pytest.importorskip("mcp")


def text_of(result) -> str:
    return "\n".join(block.text for block in result.content if getattr(block, "type", "") == "text")


def test_mcp_stdio_lists_and_calls_tools(tmp_path, relu_task, real_eval_config):
    ws = Workspace.create(relu_task, tmp_path / "ws", eval_config=real_eval_config)
    params = mcp.StdioServerParameters(command=sys.executable,
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
            return listed, names, write, read, bash, denied, bad, stub, verify

    listed, names, write, read, bash, denied, bad, stub, verify = anyio.run(session)
    assert names == {"compile", "verify", "profile", "bash", "read", "write", "edit", "multi_edit", "glob", "grep"}
    schema = next(t for t in listed.tools if t.name == "edit").input_schema
    assert schema["required"] == ["path", "old_string", "new_string"]
    assert not write.is_error and "created kernels/relu_binding.cpp" in text_of(write)
    assert "     1\t#include <torch/extension.h>" in text_of(read)
    assert "relu_binding.cpp" in text_of(bash) and "from-bash" in text_of(bash)
    assert denied.is_error and "protected" in text_of(denied)
    assert bad.is_error and "needs old_string, new_string" in text_of(bad)
    assert stub.is_error and text_of(stub).startswith("verify: FAILED")
    assert not verify.is_error and text_of(verify).startswith("verify: PASSED"), text_of(verify)
    assert (ws.root / "kernels" / "relu_binding.cpp").read_text() == RELU_BINDING


def test_mcp_streamable_http(tmp_path, relu_task, real_eval_config):
    import socket
    import subprocess
    import time

    ws = Workspace.create(relu_task, tmp_path / "ws", eval_config=real_eval_config)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "cuda_agent.cli", "mcp", "--workspace", str(ws.root),
                             "--http", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

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
        proc.terminate()
        proc.wait(10)
    assert "model.py:10:         return torch.relu(x)" in text_of(result)
