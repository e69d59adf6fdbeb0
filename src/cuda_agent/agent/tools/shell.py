"""The bash tool: a command in the workspace, with a time limit, no network, capped output."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from functools import lru_cache

from pydantic import Field

from cuda_agent.agent.tools.core import ToolContext, cap
from cuda_agent.agent.tools.schema import Arguments, Tool


@lru_cache(maxsize=None)
def network_isolation_prefix() -> tuple[str, ...]:
    """`unshare -rn` gives the command a network namespace with no interfaces (no network)."""
    for prefix in (("unshare", "-rn"), ("unshare", "-n")):
        try:
            ok = subprocess.run([*prefix, "true"], capture_output=True, timeout=10).returncode == 0
        except (OSError, subprocess.SubprocessError):
            ok = False
        if ok:
            return prefix
    return ()


class BashArguments(Arguments):
    command: str = Field(description="the command line")
    timeout: int | None = Field(None, description="seconds before the command is killed (capped)")


def run_bash(ctx: ToolContext, args: BashArguments) -> str:
    timeout = max(1.0, min(float(args.timeout or ctx.limits.bash_timeout_s), ctx.limits.bash_timeout_s))
    prefix = network_isolation_prefix() if ctx.limits.isolate_network else ()
    env = dict(os.environ, CUDA_AGENT_WORKSPACE=str(ctx.workspace.root), PYTHONUNBUFFERED="1")
    # Output goes to a file, not a pipe: a command that prints gigabytes cannot fill our memory.
    with tempfile.TemporaryFile() as out:
        start = time.perf_counter()
        proc = subprocess.Popen([*prefix, "bash", "-c", args.command], cwd=ctx.workspace.root, env=env,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        timed_out = False
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
            code = proc.wait()
        seconds = time.perf_counter() - start
        text = _head_tail(out, ctx.limits.max_output_chars)
    status = (f"[timed out after {timeout:g} s; the command was killed]" if timed_out
              else f"[exit code {code}; {seconds:.1f} s]")
    return f"{text.rstrip()}\n{status}" if text.strip() else status


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def _head_tail(fh, limit: int) -> str:
    size = fh.seek(0, os.SEEK_END)
    fh.seek(0)
    if size <= limit * 4:  # bytes, utf-8: cap() decides on characters
        return cap(fh.read().decode("utf-8", errors="replace"), limit)
    head = fh.read(limit).decode("utf-8", errors="replace")
    fh.seek(size - limit)
    tail = fh.read().decode("utf-8", errors="replace")
    return cap(head + tail, limit).replace("characters omitted", f"characters omitted (of {size} bytes)", 1)


BASH = Tool("bash", (
    "Run a bash command in the workspace folder (the current directory). No network access. "
    "Use it to run ./compile, ./verify, ./profile, scratch Python scripts, nvcc/ncu, ls, etc. "
    "Output is truncated in the middle when long; the exit code is reported."), BashArguments, run_bash)
