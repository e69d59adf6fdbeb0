"""Answers for an unchanged workspace: the last result of each protected command, keyed by what it
evaluated (the solution's files) and the settings that decide the answer.

A command whose key has a record answers from it instead of evaluating again. The key is a digest
of the solution's files (`model_new.py` and `kernels/`, byte for byte) and of the settings: the task,
the backend, the whole `EvalConfig`, the `CUDA_AGENT_*` environment, the interpreter, the host, and
stamps (sizes and times) of torch's version file and of the cuda_agent package's sources, so a record
is never used under other settings or by other code of ours.

What answers what: `compile` from a record of compile, verify or profile (each built and imported
the same files); `verify` from a verify record, or from a profile record whose verification decided
(profile runs the same verification before it times); `profile` from a profile record only. A result
that says nothing lasting about the solution (our failure, a timeout, a crash, a disagreeing clock,
the sandbox) is not kept.

Two stores: in memory (a session's and the MCP server's tools: what they answer is trusted, so it
never comes from a file the agent could write) and a JSON file in the workspace's `.cuda_agent/`
(the `./compile`, `./verify`, `./profile` scripts, each a process of its own; their results are
claims in any case, as `results.jsonl` is).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
from functools import lru_cache
from pathlib import Path

from cuda_agent.env.config import EvalConfig
from cuda_agent.env.result import EvalResult
from cuda_agent.tasks import Solution, Task

# Which commands' records may answer a command, in the order they are tried.
ANSWERED_BY = {"compile": ("compile", "verify", "profile"), "verify": ("verify", "profile"), "profile": ("profile",)}
# Failures that may not happen again on the same files (load, a flaky machine, our side).
_TRANSIENT_RULES = {"timeout", "crash", "clock-disagreement", "sandbox"}
MAX_KEYS = 32   # files-and-settings keys kept; the oldest go first


def record_key(task: Task, solution: Solution, backend: str, config: EvalConfig) -> str:
    """The digest a record is kept under: the solution's files and every setting that matters."""
    h = hashlib.sha256()
    for path in sorted(solution.files):
        text = solution.files[path].encode()
        h.update(f"{len(path)}:{path}{len(text)}:".encode() + text)
    h.update(json.dumps({"task": task.digest, "task_code": hashlib.sha256(task.code.encode()).hexdigest(),
                         "backend": backend, "config": config.to_dict(), "machine": _machine()},
                        sort_keys=True, default=str).encode())
    return h.hexdigest()


def _machine() -> dict:
    env = {k: v for k, v in os.environ.items() if k.startswith("CUDA_AGENT_") or k == "CUDA_VISIBLE_DEVICES"}
    return {"env": env, "python": sys.executable, "host": platform.node(), **_installed()}


@lru_cache(maxsize=1)
def _installed() -> dict:
    """Stamps (sizes and times) of torch's version file and of our own package's sources: another torch
    or edited code of ours is other settings. Read from the files, not imported (a script answering
    from a record never imports torch)."""
    from importlib.util import find_spec

    spec = find_spec("torch")
    torch = _stamp([Path(spec.origin).with_name("version.py")]) if spec and spec.origin else None
    package = Path(__file__).resolve().parents[1]
    sources = []
    for folder, dirs, files in os.walk(package):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        sources += [Path(folder, f) for f in sorted(files) if f.endswith((".py", ".cpp", ".cu", ".h"))]
    return {"torch": torch, "package": _stamp(sources, relative_to=package)}


def _stamp(paths: list[Path], relative_to: Path | None = None) -> str:
    h = hashlib.sha256()
    for path in paths:
        try:
            st = path.stat()
        except OSError:
            continue
        name = path.relative_to(relative_to) if relative_to else path
        h.update(f"{name}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()


def reusable(result: EvalResult) -> bool:
    """Whether the same files under the same settings would be answered the same again."""
    err = result.error
    return err is None or (err.phase != "internal" and err.rule not in _TRANSIENT_RULES)


def answers(command: str, source: str, result: EvalResult) -> bool:
    """Whether `source`'s record answers `command` (profile's: only where its verification decided)."""
    if source == command or command == "compile":
        return True
    err = result.error
    return result.correct or (err is not None and err.phase in ("compile", "verify"))


class RunRecords:
    """The records of one workspace: in memory, or in a JSON file when `path` is given."""

    def __init__(self, path: Path | None = None):
        self.path = path
        self._memory: dict[str, dict[str, dict]] = {}   # key -> command -> result dict

    def find(self, command: str, key: str) -> tuple[str, EvalResult] | None:
        """The record that answers `command` for `key`: (the command that made it, its result)."""
        entry = self._load().get(key, {})
        for source in ANSWERED_BY[command]:
            if source in entry:
                try:
                    result = EvalResult.from_dict(entry[source])
                except (KeyError, TypeError, ValueError):
                    continue
                if answers(command, source, result):
                    return source, result
        return None

    def keep(self, command: str, key: str, result: EvalResult) -> None:
        if not reusable(result):
            return
        records = self._load()
        entry = records.pop(key, {})
        entry[command] = result.to_dict()
        records[key] = entry   # the newest last
        while len(records) > MAX_KEYS:
            records.pop(next(iter(records)))
        self._save(records)

    def _load(self) -> dict[str, dict[str, dict]]:
        if self.path is None:
            return self._memory
        try:
            records = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return records if isinstance(records, dict) else {}

    def _save(self, records: dict) -> None:
        if self.path is None:
            self._memory = records
            return
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps(records))
            os.replace(tmp, self.path)   # whole or not at all: two scripts may run at once
        except OSError:
            tmp.unlink(missing_ok=True)
