"""The file tools: read, write, edit, multi_edit, glob, grep. Paths are confined to the workspace,
protected files cannot be written, outputs are capped."""

from __future__ import annotations

import fnmatch
import os
import re
from pathlib import Path

from pydantic import Field

from cuda_agent.agent.tools.core import ToolContext, ToolError, cap
from cuda_agent.agent.tools.schema import Arguments, Tool
from cuda_agent.agent.workspace import META_DIR

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


def _walk(base: Path):
    for folder, dirs, files in os.walk(base):
        # skip noise: caches, VCS, and our metadata (results.jsonl would match every grep)
        dirs[:] = sorted(d for d in dirs if d not in ("__pycache__", ".git", META_DIR))
        for name in sorted(files):
            yield Path(folder) / name


# -- read, write ------------------------------------------------------------------------------------

class ReadArguments(Arguments):
    path: str = Field(description="file path, relative to the workspace")
    offset: int | None = Field(None, description="first line to show (1-based)")
    limit: int | None = Field(None, description="number of lines to show")


def run_read(ctx: ToolContext, args: ReadArguments) -> str:
    path = _resolve(ctx, args.path)
    if path.is_dir():
        entries = sorted(p.name + ("/" if p.is_dir() else "") for p in path.iterdir())
        return f"{_rel(ctx, path) or '.'}/ is a folder:\n" + "\n".join(entries)
    if not path.is_file():
        raise ToolError(f"{args.path} does not exist")
    lines = _read_text(path).splitlines()
    offset = max(1, int(args.offset or 1))
    limit = max(1, min(int(args.limit or ctx.limits.read_max_lines), ctx.limits.read_max_lines))
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


class WriteArguments(Arguments):
    path: str = Field(description="file path, relative to the workspace")
    content: str = Field(description="the full file content")


def run_write(ctx: ToolContext, args: WriteArguments) -> str:
    path = _resolve(ctx, args.path, for_write=True)
    if path.is_dir():
        raise ToolError(f"{args.path} is a folder")
    path.parent.mkdir(parents=True, exist_ok=True)
    existed = path.exists()
    path.write_text(args.content)
    return f"{'overwrote' if existed else 'created'} {_rel(ctx, path)} ({len(args.content.splitlines())} lines)"


# -- edit, multi_edit -------------------------------------------------------------------------------

class EditArguments(Arguments):
    path: str = Field(description="file path")
    old_string: str = Field(description="text to replace")
    new_string: str = Field(description="replacement text")
    replace_all: bool | None = Field(None, description="replace every occurrence")


class Edit(Arguments):
    """One edit of `multi_edit` (items are checked by the tool, which names the failing one)."""

    old_string: str = Field(description="text to replace")
    new_string: str = Field(description="replacement text")
    replace_all: bool | None = None


class MultiEditArguments(Arguments):
    path: str = Field(description="file path")
    edits: list[Edit] = Field(description="edits applied in order")


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


def run_edit(ctx: ToolContext, args: EditArguments) -> str:
    path = _existing_for_edit(ctx, args.path)
    text, n = _apply_edit(_read_text(path), args.old_string, args.new_string, bool(args.replace_all),
                          _rel(ctx, path))
    path.write_text(text)
    return f"edited {_rel(ctx, path)}: {n} replacement{'s' if n != 1 else ''}"


def run_multi_edit(ctx: ToolContext, args: MultiEditArguments) -> str:
    path = _existing_for_edit(ctx, args.path)
    edits = args.edits
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


# -- glob, grep -------------------------------------------------------------------------------------

class GlobArguments(Arguments):
    pattern: str = Field(description="glob pattern")
    path: str | None = Field(None, description="folder to search (default: workspace)")


def run_glob(ctx: ToolContext, args: GlobArguments) -> str:
    base = _resolve(ctx, args.path or ".")
    if not base.is_dir():
        raise ToolError(f"{args.path} is not a folder")
    matches = [p for p in _walk(base) if _glob_match(p.relative_to(base).as_posix(), args.pattern)]
    if not matches:
        return f"no files match {args.pattern}"
    lines = [_rel(ctx, p) for p in matches]
    return cap("\n".join(lines), ctx.limits.max_output_chars)


def _glob_match(rel: str, pattern: str) -> bool:
    # `**/` matches any depth including none; a pattern without a slash matches the file name.
    if "/" not in pattern:
        return fnmatch.fnmatch(rel.rsplit("/", 1)[-1], pattern)
    if pattern.startswith("**/") and fnmatch.fnmatch(rel, pattern[3:]):
        return True
    return fnmatch.fnmatch(rel, pattern)


class GrepArguments(Arguments):
    pattern: str = Field(description="Python regular expression")
    path: str | None = Field(None, description="file or folder to search (default: workspace)")
    glob: str | None = Field(None, description="only files whose name matches, e.g. *.cu")
    ignore_case: bool | None = None


def run_grep(ctx: ToolContext, args: GrepArguments) -> str:
    try:
        regex = re.compile(args.pattern, re.IGNORECASE if args.ignore_case else 0)
    except re.error as exc:
        raise ToolError(f"invalid regular expression: {exc}") from None
    base = _resolve(ctx, args.path or ".")
    files = [base] if base.is_file() else list(_walk(base)) if base.is_dir() else []
    if not files:
        raise ToolError(f"{args.path} does not exist")
    hits: list[str] = []
    limit = ctx.limits.grep_max_results
    for path in files:
        if args.glob and not fnmatch.fnmatch(path.name, args.glob):
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
        return f"no matches for {args.pattern!r}"
    more = f"\n[stopped after {limit} matches; narrow the pattern or path]" if len(hits) > limit else ""
    return cap("\n".join(hits[:limit]), ctx.limits.max_output_chars) + more


# -- declarations -----------------------------------------------------------------------------------

READ = Tool("read", "Read a text file (numbered lines) or list a folder.", ReadArguments, run_read)
WRITE = Tool("write", "Create or overwrite a file with the given content (parent folders are created).",
             WriteArguments, run_write)
EDIT = Tool("edit", (
    "Replace an exact string in a file. old_string must occur exactly once unless replace_all is true; "
    "copy it exactly, including indentation."), EditArguments, run_edit)
MULTI_EDIT = Tool("multi_edit", "Apply several exact-string edits to one file, in order; all or nothing.",
                  MultiEditArguments, run_multi_edit)
GLOB = Tool("glob", "List files whose path matches a glob pattern such as `**/*.cu` or `*.py`.",
            GlobArguments, run_glob)
GREP = Tool("grep", "Search file contents with a regular expression; prints path:line: text.",
            GrepArguments, run_grep)
