"""The agent's tools, with OpenAI function-calling schemas.

Every tool takes a `ToolContext` and its JSON arguments and returns a `ToolOutput`. Nothing here
raises at the model: bad arguments, unknown tools, missing files and timeouts all come back as
text the model can act on, and every output is capped so one call cannot flood the context.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from cuda_agent.agent.workspace import META_DIR, CommandResult, Workspace


@dataclass
class ToolLimits:
    bash_timeout_s: float = 600.0      # a CUDA build plus a profile run fits
    max_output_chars: int = 16_000     # head and tail of longer outputs are kept
    read_max_lines: int = 2000
    max_line_chars: int = 2000
    grep_max_results: int = 200
    isolate_network: bool = True       # bash runs without network where the OS allows it


@dataclass
class ToolContext:
    workspace: Workspace
    limits: ToolLimits = field(default_factory=ToolLimits)
    todos: list[dict] = field(default_factory=list)


@dataclass
class ToolOutput:
    text: str
    ok: bool = True
    error: str | None = None             # "unknown_tool" | "invalid_arguments" | "tool_error" | "internal"
    command: CommandResult | None = None  # set by compile/verify/profile
    finish: bool = False


class ToolError(Exception):
    """A failure the model caused and can fix; the message is shown to it."""


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict
    run: Callable[[ToolContext, dict], str | ToolOutput]

    def schema(self) -> dict:
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}


def _params(properties: dict, required: tuple[str, ...] = ()) -> dict:
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


def _str(description: str) -> dict:
    return {"type": "string", "description": description}


# -- output capping -------------------------------------------------------------------------------

def cap(text: str, limit: int) -> str:
    """Keep the head and the tail (errors are usually at one end) and say what was dropped."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    dropped = len(text) - head - tail
    return (f"{text[:head]}\n[... {dropped} characters omitted; narrow the command "
            f"(grep, head, tail) to see them ...]\n{text[-tail:]}")


# -- paths ----------------------------------------------------------------------------------------

def _resolve(ctx: ToolContext, path: str, *, for_write: bool = False) -> Path:
    if not isinstance(path, str) or not path.strip():
        raise ToolError("path must be a non-empty string")
    root = ctx.workspace.root
    target = Path(path) if os.path.isabs(path) else root / path
    target = Path(os.path.normpath(target))
    try:
        rel = target.relative_to(root)
    except ValueError:
        raise ToolError(f"{path} is outside the workspace ({root}); use paths relative to it") from None
    if for_write and ctx.workspace.is_protected(rel.as_posix()):
        raise ToolError(f"{rel.as_posix()} is protected (read-only); write your solution in "
                        "model_new.py and kernels/")
    # Refuse symlinks that lead out of the workspace.
    real = Path(os.path.realpath(target))
    if real != target and not str(real).startswith(str(Path(os.path.realpath(root))) + os.sep):
        raise ToolError(f"{path} points outside the workspace")
    return target


def _rel(ctx: ToolContext, path: Path) -> str:
    try:
        return path.relative_to(ctx.workspace.root).as_posix()
    except ValueError:
        return str(path)


def _read_text(path: Path) -> str:
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        raise ToolError(f"{path.name} is a binary file")
    return data.decode("utf-8", errors="replace")


# -- bash -----------------------------------------------------------------------------------------

@lru_cache(maxsize=None)
def _network_isolation_prefix() -> tuple[str, ...]:
    """`unshare -rn` gives the command a network namespace with no interfaces (no network)."""
    for prefix in (("unshare", "-rn"), ("unshare", "-n")):
        try:
            ok = subprocess.run([*prefix, "true"], capture_output=True, timeout=10).returncode == 0
        except (OSError, subprocess.SubprocessError):
            ok = False
        if ok:
            return prefix
    return ()


def run_bash(ctx: ToolContext, args: dict) -> str:
    command = args["command"]
    timeout = max(1.0, min(float(args.get("timeout") or ctx.limits.bash_timeout_s), ctx.limits.bash_timeout_s))
    prefix = _network_isolation_prefix() if ctx.limits.isolate_network else ()
    env = dict(os.environ, CUDA_AGENT_WORKSPACE=str(ctx.workspace.root), PYTHONUNBUFFERED="1")
    # Output goes to a file, not a pipe: a command that prints gigabytes cannot fill our memory.
    with tempfile.TemporaryFile() as out:
        start = time.perf_counter()
        proc = subprocess.Popen([*prefix, "bash", "-c", command], cwd=ctx.workspace.root, env=env,
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


# -- files ----------------------------------------------------------------------------------------

def run_read(ctx: ToolContext, args: dict) -> str:
    path = _resolve(ctx, args["path"])
    if path.is_dir():
        entries = sorted(p.name + ("/" if p.is_dir() else "") for p in path.iterdir())
        return f"{_rel(ctx, path) or '.'}/ is a folder:\n" + "\n".join(entries)
    if not path.is_file():
        raise ToolError(f"{args['path']} does not exist")
    lines = _read_text(path).splitlines()
    offset = max(1, int(args.get("offset") or 1))
    limit = max(1, min(int(args.get("limit") or ctx.limits.read_max_lines), ctx.limits.read_max_lines))
    chunk = lines[offset - 1: offset - 1 + limit]
    if not chunk:
        return f"{_rel(ctx, path)} has {len(lines)} lines; nothing at line {offset}" if lines \
            else f"{_rel(ctx, path)} is empty"
    width = ctx.limits.max_line_chars
    body = "\n".join(f"{n:>6}\t{line if len(line) <= width else line[:width] + ' [...]'}"
                     for n, line in enumerate(chunk, offset))
    end = offset + len(chunk) - 1
    if end < len(lines):
        body += f"\n[lines {offset}-{end} of {len(lines)}; pass offset={end + 1} to read on]"
    return body


def run_write(ctx: ToolContext, args: dict) -> str:
    path = _resolve(ctx, args["path"], for_write=True)
    if path.is_dir():
        raise ToolError(f"{args['path']} is a folder")
    path.parent.mkdir(parents=True, exist_ok=True)
    content = args["content"]
    existed = path.exists()
    path.write_text(content)
    return f"{'overwrote' if existed else 'created'} {_rel(ctx, path)} ({len(content.splitlines())} lines)"


def _apply_edit(text: str, old: str, new: str, replace_all: bool, where: str) -> tuple[str, int]:
    if old == "":
        raise ToolError(f"{where}: old_string is empty; use write to create a file")
    if old == new:
        raise ToolError(f"{where}: old_string and new_string are identical")
    count = text.count(old)
    if count == 0:
        hint = ""
        first = old.strip().splitlines()[0].strip() if old.strip() else ""
        if first and first in text:
            hint = " (its first line does occur: check whitespace and the following lines)"
        raise ToolError(f"{where}: old_string not found{hint}; read the file and copy the text exactly")
    if count > 1 and not replace_all:
        raise ToolError(f"{where}: old_string occurs {count} times; add surrounding lines to make it "
                        "unique, or set replace_all")
    return text.replace(old, new) if replace_all else text.replace(old, new, 1), count if replace_all else 1


def run_edit(ctx: ToolContext, args: dict) -> str:
    path = _existing_for_edit(ctx, args["path"])
    text, n = _apply_edit(_read_text(path), args["old_string"], args["new_string"],
                          bool(args.get("replace_all")), _rel(ctx, path))
    path.write_text(text)
    return f"edited {_rel(ctx, path)}: {n} replacement{'s' if n != 1 else ''}"


def run_multi_edit(ctx: ToolContext, args: dict) -> str:
    path = _existing_for_edit(ctx, args["path"])
    edits = args["edits"]
    if not edits:
        raise ToolError("edits is empty")
    text = _read_text(path)
    total = 0
    for i, edit in enumerate(edits, 1):  # all or nothing: the file is written only if every edit applies
        if not isinstance(edit, dict) or not isinstance(edit.get("old_string"), str) \
                or not isinstance(edit.get("new_string"), str):
            raise ToolError(f"edit {i}: needs string old_string and new_string")
        text, n = _apply_edit(text, edit["old_string"], edit["new_string"], bool(edit.get("replace_all")),
                              f"{_rel(ctx, path)}, edit {i} (no edit was applied)")
        total += n
    path.write_text(text)
    return f"edited {_rel(ctx, path)}: {len(edits)} edits, {total} replacements"


def _existing_for_edit(ctx: ToolContext, raw: str) -> Path:
    path = _resolve(ctx, raw, for_write=True)
    if not path.is_file():
        raise ToolError(f"{raw} does not exist; use write to create it")
    return path


def _walk(base: Path):
    for folder, dirs, files in os.walk(base):
        # skip noise: caches, VCS, and our metadata (results.jsonl would match every grep)
        dirs[:] = sorted(d for d in dirs if d not in ("__pycache__", ".git", META_DIR))
        for name in sorted(files):
            yield Path(folder) / name


def run_glob(ctx: ToolContext, args: dict) -> str:
    base = _resolve(ctx, args.get("path") or ".")
    if not base.is_dir():
        raise ToolError(f"{args.get('path')} is not a folder")
    pattern = args["pattern"]
    matches = [p for p in _walk(base) if _glob_match(p.relative_to(base).as_posix(), pattern)]
    if not matches:
        return f"no files match {pattern}"
    lines = [_rel(ctx, p) for p in matches]
    return cap("\n".join(lines), ctx.limits.max_output_chars)


def _glob_match(rel: str, pattern: str) -> bool:
    # `**/` matches any depth including none; a pattern without a slash matches the file name.
    if "/" not in pattern:
        return fnmatch.fnmatch(rel.rsplit("/", 1)[-1], pattern)
    if pattern.startswith("**/") and fnmatch.fnmatch(rel, pattern[3:]):
        return True
    return fnmatch.fnmatch(rel, pattern)


def run_grep(ctx: ToolContext, args: dict) -> str:
    try:
        regex = re.compile(args["pattern"], re.IGNORECASE if args.get("ignore_case") else 0)
    except re.error as exc:
        raise ToolError(f"invalid regular expression: {exc}") from None
    base = _resolve(ctx, args.get("path") or ".")
    files = [base] if base.is_file() else list(_walk(base)) if base.is_dir() else []
    if not files:
        raise ToolError(f"{args.get('path')} does not exist")
    include = args.get("glob")
    hits: list[str] = []
    limit = ctx.limits.grep_max_results
    for path in files:
        if include and not fnmatch.fnmatch(path.name, include):
            continue
        try:
            if path.stat().st_size > 2_000_000:
                continue
            text = _read_text(path)
        except (ToolError, OSError):
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if regex.search(line):
                hits.append(f"{_rel(ctx, path)}:{n}: {line[:ctx.limits.max_line_chars]}")
                if len(hits) > limit:
                    break
        if len(hits) > limit:
            break
    if not hits:
        return f"no matches for {args['pattern']!r}"
    more = f"\n[stopped after {limit} matches; narrow the pattern or path]" if len(hits) > limit else ""
    return cap("\n".join(hits[:limit]), ctx.limits.max_output_chars) + more


# -- planning, environment, finishing ---------------------------------------------------------------

_TODO_MARK = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}


def run_todo(ctx: ToolContext, args: dict) -> str:
    todos = []
    for i, item in enumerate(args["todos"], 1):
        if not isinstance(item, dict) or not isinstance(item.get("content"), str):
            raise ToolError(f"todo {i}: needs a string `content`")
        status = item.get("status", "pending")
        if status not in _TODO_MARK:
            raise ToolError(f"todo {i}: status must be one of {', '.join(_TODO_MARK)}")
        todos.append({"content": item["content"], "status": status})
    ctx.todos = todos
    if not todos:
        return "todo list cleared"
    return "todo list:\n" + "\n".join(f"{_TODO_MARK[t['status']]} {t['content']}" for t in todos)


def _command_tool(command: str) -> Callable[[ToolContext, dict], ToolOutput]:
    def run(ctx: ToolContext, args: dict) -> ToolOutput:
        outcome = ctx.workspace.run(command)
        return ToolOutput(outcome.text, ok=outcome.ok, command=outcome)
    return run


def run_finish(ctx: ToolContext, args: dict) -> ToolOutput:
    return ToolOutput("Finished. The environment re-evaluates your best verified solution.", finish=True)


# -- the registry ---------------------------------------------------------------------------------

BASH = Tool("bash", (
    "Run a bash command in the workspace folder (the current directory). No network access. "
    "Use it to run ./compile, ./verify, ./profile, scratch Python scripts, nvcc/ncu, ls, etc. "
    "Output is truncated in the middle when long; the exit code is reported."),
    _params({"command": _str("the command line"),
             "timeout": {"type": "integer", "description": "seconds before the command is killed (capped)"}},
            ("command",)), run_bash)
READ = Tool("read", "Read a text file (numbered lines) or list a folder.",
            _params({"path": _str("file path, relative to the workspace"),
                     "offset": {"type": "integer", "description": "first line to show (1-based)"},
                     "limit": {"type": "integer", "description": "number of lines to show"}}, ("path",)),
            run_read)
WRITE = Tool("write", "Create or overwrite a file with the given content (parent folders are created).",
             _params({"path": _str("file path, relative to the workspace"), "content": _str("the full file content")},
                     ("path", "content")), run_write)
EDIT = Tool("edit", (
    "Replace an exact string in a file. old_string must occur exactly once unless replace_all is true; "
    "copy it exactly, including indentation."),
    _params({"path": _str("file path"), "old_string": _str("text to replace"),
             "new_string": _str("replacement text"),
             "replace_all": {"type": "boolean", "description": "replace every occurrence"}},
            ("path", "old_string", "new_string")), run_edit)
MULTI_EDIT = Tool("multi_edit", "Apply several exact-string edits to one file, in order; all or nothing.",
                  _params({"path": _str("file path"),
                           "edits": {"type": "array", "description": "edits applied in order",
                                     "items": _params({"old_string": _str("text to replace"),
                                                       "new_string": _str("replacement text"),
                                                       "replace_all": {"type": "boolean"}},
                                                      ("old_string", "new_string"))}},
                          ("path", "edits")), run_multi_edit)
GLOB = Tool("glob", "List files whose path matches a glob pattern such as `**/*.cu` or `*.py`.",
            _params({"pattern": _str("glob pattern"), "path": _str("folder to search (default: workspace)")},
                    ("pattern",)), run_glob)
GREP = Tool("grep", "Search file contents with a regular expression; prints path:line: text.",
            _params({"pattern": _str("Python regular expression"),
                     "path": _str("file or folder to search (default: workspace)"),
                     "glob": _str("only files whose name matches, e.g. *.cu"),
                     "ignore_case": {"type": "boolean"}}, ("pattern",)), run_grep)
TODO = Tool("todo", "Replace your todo list (to plan and track multi-step work); returns the list.",
            _params({"todos": {"type": "array", "items": _params(
                {"content": _str("the task"),
                 "status": {"type": "string", "enum": list(_TODO_MARK)}}, ("content",))}}, ("todos",)),
            run_todo)
COMPILE = Tool("compile", "Build kernels/ into the cuda_extension module (same as ./compile). Reports errors.",
               _params({}), _command_tool("compile"))
VERIFY = Tool("verify", "Check model_new.py against model.py on fresh random inputs (same as ./verify).",
              _params({}), _command_tool("verify"))
PROFILE = Tool("profile", (
    "Verify, then time your ModelNew against eager PyTorch and torch.compile (same as ./profile); "
    "reports times, speedups and the reward."), _params({}), _command_tool("profile"))
FINISH = Tool("finish", "End the episode. Call it when your solution is verified and as fast as you can make it.",
              _params({"summary": _str("one paragraph on what you built")}), run_finish)

AGENT_TOOLS = (BASH, READ, WRITE, EDIT, MULTI_EDIT, GLOB, GREP, TODO, COMPILE, VERIFY, PROFILE, FINISH)
MCP_TOOLS = (COMPILE, VERIFY, PROFILE, BASH, READ, WRITE, EDIT, MULTI_EDIT, GLOB, GREP)


def registry(tools=AGENT_TOOLS) -> dict[str, Tool]:
    return {t.name: t for t in tools}


# -- calling --------------------------------------------------------------------------------------

_JSON_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool,
               "array": list, "object": dict}


def _check_arguments(tool: Tool, args: Any) -> dict:
    """Light JSON-schema check (required, unknown and top-level types), with obvious coercions."""
    if not isinstance(args, dict):
        raise ToolError(f"arguments for `{tool.name}` must be a JSON object, got {type(args).__name__}")
    props = tool.parameters.get("properties", {})
    unknown = sorted(set(args) - set(props))
    if unknown:
        raise ToolError(f"`{tool.name}` has no parameter {', '.join(unknown)}; "
                        f"its parameters are: {', '.join(props) or 'none'}")
    missing = [k for k in tool.parameters.get("required", []) if k not in args]
    if missing:
        raise ToolError(f"`{tool.name}` needs {', '.join(missing)}")
    out = {}
    for key, value in args.items():
        kind = props[key].get("type")
        if kind == "integer" and isinstance(value, str) and value.strip().lstrip("-").isdigit():
            value = int(value)
        elif kind == "boolean" and isinstance(value, str) and value.lower() in ("true", "false"):
            value = value.lower() == "true"
        elif kind in ("array", "object") and isinstance(value, str):
            try:  # some models double-encode nested arguments
                value = json.loads(value)
            except json.JSONDecodeError:
                pass
        expected = _JSON_TYPES.get(kind)
        if value is None and key not in tool.parameters.get("required", []):
            continue
        if expected and (not isinstance(value, expected) or (kind in ("integer", "number")
                                                             and isinstance(value, bool))):
            raise ToolError(f"`{tool.name}`: {key} must be a {kind}, got {type(value).__name__}")
        out[key] = value
    return out


def call_tool(tools: dict[str, Tool], ctx: ToolContext, name: str, arguments: str | dict | None) -> ToolOutput:
    """Run one tool call from the model; never raises for anything the model did."""
    tool = tools.get(name)
    if tool is None:
        return ToolOutput(f"Error: unknown tool `{name}`. Available tools: {', '.join(tools)}.",
                          ok=False, error="unknown_tool")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            snippet = arguments if len(arguments) < 300 else arguments[:300] + "..."
            return ToolOutput(f"Error: the arguments for `{name}` are not valid JSON ({exc.msg} at "
                              f"position {exc.pos}): {snippet}\nCall the tool again with a JSON object.",
                              ok=False, error="invalid_arguments")
    try:
        args = _check_arguments(tool, arguments if arguments is not None else {})
    except ToolError as exc:
        return ToolOutput(f"Error: {exc}", ok=False, error="invalid_arguments")
    try:
        result = tool.run(ctx, args)
    except ToolError as exc:
        return ToolOutput(f"Error: {exc}", ok=False, error="tool_error")
    except (OSError, UnicodeError, ValueError) as exc:
        return ToolOutput(f"Error: {type(exc).__name__}: {exc}", ok=False, error="tool_error")
    except Exception as exc:  # a bug on our side: report it, keep the episode alive
        return ToolOutput(f"Error: internal error in `{name}`: {type(exc).__name__}: {exc}",
                          ok=False, error="internal")
    out = result if isinstance(result, ToolOutput) else ToolOutput(result)
    out.text = cap(out.text, ctx.limits.max_output_chars)
    return out
