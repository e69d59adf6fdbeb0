"""The agent's workspace: a folder holding the task, the candidate, our SKILL.md and protected commands.

    DIR/
      model.py           the task (read-only)
      model_new.py       the candidate (a starting point generated from the task)
      kernels/           the candidate's C++/CUDA sources, built into the module `cuda_extension`
      SKILL.md           rules, workflow and optimisation playbook (read-only)
      compile, verify, profile
                         protected commands: thin scripts that run `python -m
                         cuda_agent.agent.workspace_cli`, so their code lives in the installed
                         package, out of the agent's reach
      .cuda_agent/       metadata, pristine copies of the protected files, results of the commands,
                         the records that answer a command on unchanged files (run_records.py)

Protected files are restored from pristine copies before each command and, in a session, after every
tool call. The score does not rest on them: the best solution is re-evaluated from a clean copy
against the task held in memory.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import stat
import sys
import textwrap
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from cuda_agent.agent.run_records import RunRecords, record_key
from cuda_agent.agent.skill import skill_text
from cuda_agent.env.config import EvalConfig
from cuda_agent.env.result import EvalError, EvalResult
from cuda_agent.env.rules.static_check import check_source
from cuda_agent.tasks import Solution, Task, load_solution
from cuda_agent.tasks.parsing import parse

META_DIR = ".cuda_agent"
META_FILE = f"{META_DIR}/workspace.json"
RESULTS_FILE = f"{META_DIR}/results.jsonl"
RECORDS_FILE = f"{META_DIR}/records.json"   # the scripts' records (run_records.py); the tools keep theirs in memory
COMMANDS = ("compile", "verify", "profile")
PROTECTED = ("model.py", "SKILL.md", *COMMANDS)

# evaluate(task, solution, config) -> EvalResult; injectable so tests can use a fake.
Evaluator = Callable[[Task, Solution, EvalConfig], EvalResult]


def default_evaluator(task: Task, solution: Solution, config: EvalConfig) -> EvalResult:
    from cuda_agent.env import evaluate

    return evaluate(task, solution, config)


class WorkspaceError(RuntimeError):
    pass


@dataclass
class CommandResult:
    """What one protected command produced: a short text for the model, plus the plain data."""

    command: str
    ok: bool
    text: str
    result: EvalResult | None = None
    solution: Solution | None = None   # the snapshot that was evaluated
    seconds: float = 0.0
    answered_by: str | None = None     # the command whose record answered (nothing was evaluated)


@dataclass
class Workspace:
    root: Path
    task: Task
    backend: str
    eval_config: EvalConfig
    evaluator: Evaluator = default_evaluator
    originals: dict[str, str] = field(default_factory=dict)   # protected file -> pristine text
    records: RunRecords = field(default_factory=RunRecords)   # answers for unchanged files (in memory)

    # -- creation and loading ---------------------------------------------------------------

    @classmethod
    def create(cls, task: Task, root: str | os.PathLike, *, backend: str | None = None,
               eval_config: EvalConfig | None = None, evaluator: Evaluator | None = None,
               overwrite: bool = False) -> "Workspace":
        task.check_syntax()
        root = Path(root).resolve()
        if root.exists() and any(root.iterdir()):
            if not (root / META_FILE).is_file():
                raise WorkspaceError(f"{root} is not empty and not a cuda-agent workspace; choose another folder")
            if not overwrite:
                raise WorkspaceError(f"{root} already holds a workspace (pass overwrite/--force to start it afresh)")
            _clear(root)   # ours: a fresh episode must not inherit the last one's kernels
        config = eval_config or EvalConfig()
        backend = backend or config.backend or config.resolved_backend()
        config = replace(config, backend=backend)
        root.mkdir(parents=True, exist_ok=True)
        (root / "kernels").mkdir(exist_ok=True)
        (root / META_DIR).mkdir(exist_ok=True)

        originals = {"model.py": task.code, "SKILL.md": skill_text(backend, config)}
        originals.update({name: _command_script(name) for name in COMMANDS})
        ws = cls(root, task, backend, config, evaluator or default_evaluator, originals)
        for name, text in originals.items():
            _write_protected(root / name, text, executable=name in COMMANDS)
        pristine = root / META_DIR / "protected"
        pristine.mkdir(exist_ok=True)
        for name, text in originals.items():
            (pristine / name).write_text(text)
        (root / "model_new.py").write_text(starter_model_new(task.code))
        (root / META_FILE).write_text(json.dumps({
            "task": {"name": task.name, "origin": task.origin, "digest": task.digest},
            "backend": backend,
            "eval_config": config.to_dict(),
        }, indent=2))
        return ws

    @classmethod
    def open(cls, root: str | os.PathLike, *, evaluator: Evaluator | None = None) -> "Workspace":
        """Load a workspace from disk (the protected commands and the MCP server do this)."""
        root = Path(root).resolve()
        meta_path = root / META_FILE
        if not meta_path.is_file():
            raise WorkspaceError(f"{root} is not a cuda-agent workspace (no {META_FILE}); "
                                 "create one with `cuda-agent workspace TASK DIR`")
        meta = json.loads(meta_path.read_text())
        pristine = root / META_DIR / "protected"
        originals = {name: (pristine / name).read_text() for name in PROTECTED if (pristine / name).is_file()}
        code = originals.get("model.py") or (root / "model.py").read_text()
        info = meta["task"]
        task = Task(name=info["name"], code=code, origin=info.get("origin", ""))
        if task.digest != info.get("digest", task.digest):
            raise WorkspaceError(f"{root}: the task no longer matches the one the workspace was created for")
        config = EvalConfig.from_dict(meta["eval_config"])
        return cls(root, task, meta["backend"], config, evaluator or default_evaluator, originals)

    # -- files ------------------------------------------------------------------------------

    def is_protected(self, rel: str) -> bool:
        rel = rel.strip("/")
        return rel in PROTECTED or rel == META_DIR or rel.startswith(META_DIR + "/")

    def restore_protected(self) -> list[str]:
        """Put back any protected file that was changed or removed; returns their names."""
        restored = []
        for name, text in self.originals.items():
            path = self.root / name
            try:
                intact = path.is_file() and not path.is_symlink() and path.read_text() == text
            except (OSError, UnicodeDecodeError):
                intact = False
            if not intact:
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                elif path.exists() or path.is_symlink():
                    path.unlink()
                _write_protected(path, text, executable=name in COMMANDS)
                restored.append(name)
        return restored

    def snapshot(self) -> Solution:
        """The candidate as it is on disk now (model_new.py + kernels/)."""
        return load_solution(self.root)

    # -- protected commands -------------------------------------------------------------------

    def compile(self) -> CommandResult:
        return self.run("compile")

    def verify(self) -> CommandResult:
        return self.run("verify")

    def profile(self, unscored: bool = False) -> CommandResult:
        return self.run("profile", unscored=unscored)

    def run(self, command: str, unscored: bool = False) -> CommandResult:
        """`unscored` (profile only): time the candidate even when its outputs are wrong
        (EvalConfig.unscored; its settings, so its records are its own)."""
        if command not in COMMANDS:
            raise WorkspaceError(f"unknown command {command!r}")
        if unscored and command != "profile":
            raise WorkspaceError(f"--unscored is profile's, not {command}'s")
        config = replace(self.eval_config, unscored=True) if unscored else self.eval_config
        start = time.perf_counter()
        restored = self.restore_protected()
        try:
            solution = self.snapshot()
        except (OSError, ValueError) as exc:
            return CommandResult(command, False, f"{command}: FAILED\n{exc}", seconds=time.perf_counter() - start)
        key = record_key(self.task, solution, self.backend, config) + _evaluator_tag(self.evaluator)
        found = self.records.find(command, key)
        if found is not None:
            source, result = found[0], _as_command(command, *found)
        else:
            result = _run_command(command, self.task, solution, config, self.evaluator)
            self.records.keep(command, key, result)
        ok = _command_ok(command, result)
        text = format_result(command, result)
        if found is not None:
            text += "\n" + answered_note(command, source)
        if restored:
            text += f"\nnote: protected files were modified and have been restored: {', '.join(restored)}"
        return CommandResult(command, ok, text, result, solution, time.perf_counter() - start,
                             answered_by=found[0] if found else None)

    def read_records(self, offset: int = 0) -> tuple[list[dict], int]:
        """Records appended to .cuda_agent/results.jsonl since byte `offset`; returns the new offset.
        They were written by commands run through bash, so they are claims, not trusted results."""
        path = self.root / RESULTS_FILE
        try:
            size = path.stat().st_size
        except OSError:
            return [], 0
        if size < offset:       # truncated or replaced: start over
            offset = 0
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read()
        end = data.rfind(b"\n") + 1   # complete lines only
        records = []
        for line in data[:end].decode("utf-8", errors="replace").splitlines():
            try:
                record = json.loads(line)
                record["solution"] = Solution(dict(record["files"]))
                record["result"] = EvalResult.from_dict(record["result"])
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                continue
            records.append(record)
        return records, offset + end

    def record(self, outcome: CommandResult) -> None:
        """Append a command's result to .cuda_agent/results.jsonl (read by the agent loop)."""
        if outcome.result is None or outcome.solution is None:
            return
        line = json.dumps({"command": outcome.command, "time": time.time(), "ok": outcome.ok,
                           "answered_from_record": outcome.answered_by is not None,
                           "files": outcome.solution.files, "result": outcome.result.to_dict()})
        with open(self.root / RESULTS_FILE, "a") as fh:
            fh.write(line + "\n")


def answered_note(command: str, source: str) -> str:
    """The line that says a command was answered from a record, not evaluated."""
    how = (f"the last {command}" if source == command else
           f"the last {source}, which built these files too" if command == "compile" else
           f"the last {source}, which verified these files before timing them")
    return f"(unchanged since {how}: answered from its record, not evaluated again)"


def _as_command(command: str, source: str, result: EvalResult) -> EvalResult:
    """A record made by `source` as `command`'s answer: compile's is the build and import only."""
    if command == "compile" and source != "compile" and result.compiled and result.error is not None:
        return replace(result, error=None)   # what failed after the build is not compile's to say
    return result


def _evaluator_tag(evaluator: Evaluator) -> str:
    # another evaluator (a pool, a fake) may answer otherwise: its records are its own
    return "" if evaluator is default_evaluator else f":{type(evaluator).__qualname__}@{id(evaluator)}"


def _run_command(command: str, task: Task, solution: Solution, base: EvalConfig,
                 evaluator: Evaluator) -> EvalResult:
    """compile = build and import only; verify = no timing; profile = the full evaluation."""
    try:
        if command == "compile":
            return _compile(task, solution, base, evaluator)
        if base.other_scale is None:   # what the policy is told: verified at the task's second size too
            base = replace(base, other_scale=True)
        if command == "verify":
            if evaluator is default_evaluator:
                from cuda_agent.env import evaluate

                return evaluate(task, solution, base, stop_after="verify")
            return evaluator(task, solution, replace(base, baselines=False))
        return evaluator(task, solution, replace(base, profile_ops=True) if base.profile_ops is None else base)
    except Exception as exc:  # the environment itself failed; tell the model, do not crash the loop
        return EvalResult(task=task.name, backend=base.backend or "",
                          error=EvalError("internal", f"{type(exc).__name__}: {exc}"))


def _compile(task: Task, solution: Solution, base: EvalConfig, evaluator: Evaluator) -> EvalResult:
    # The real environment builds and imports only (no reference, no verification); a fake
    # evaluator (tests) keeps the plain evaluate path.
    if evaluator is default_evaluator:
        from cuda_agent.env import evaluate

        return evaluate(task, solution, base, stop_after="compile")
    return evaluator(task, solution, replace(base, baselines=False, num_correct_trials=1))


def _command_ok(command: str, result: EvalResult) -> bool:
    if command == "compile":
        return result.compiled
    return result.correct


# -- LLM-readable summaries ---------------------------------------------------------------------

def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g} ms"


def format_result(command: str, r: EvalResult, max_chars: int = 4000) -> str:
    lines: list[str] = []
    err = r.error
    if command == "compile":
        if r.compiled:
            lines.append("compile: OK")
            if err is not None and err.phase != "compile":
                lines.append(f"note: a quick run on one input set failed in {err.phase}: "
                             f"{_first_lines(err.message, 8)}")
        else:
            lines.append(f"compile: FAILED ({err.phase if err else 'unknown'})")
            lines.append(err.message if err else "no error message")
    elif not r.correct:
        phase = err.phase if err else "unknown"
        lines.append(f"{command}: FAILED in {phase}")
        if err is not None:
            lines.append(err.message)
            if err.rule:
                lines.append(f"rule: {err.rule}")
        from cuda_agent.env.run.crash import without_crash_dump
        from cuda_agent.env.run.unscored import unscored_lines

        lines.extend(unscored_lines(r))
        own_output = without_crash_dump(r.log).strip()   # a crash's frames are in its message already
        if own_output:
            lines.append("candidate output (tail):\n" + own_output[-1500:])
    elif command == "verify":
        worst = f"; max abs error {max(r.max_abs_error):.3g}" if r.max_abs_error else ""
        lines.append(f"verify: PASSED ({len(r.max_abs_error) or 'all'} input sets{worst})")
    else:
        lines.extend(_profile_lines(r))
    for w in r.warnings:
        lines.append(f"warning: {w}")
    text = "\n".join(lines)
    if len(text) > max_chars:
        text = text[: max_chars - 40] + "\n[... summary truncated ...]"
    return text


def _profile_lines(r: EvalResult) -> list[str]:
    """The profile's summary; the reward line and the hint are `env/explain.py`'s, from the paired
    speedups and the reward's policy, as the reward does."""
    from cuda_agent.env.explain import PAIRED_NOTE, medians_disagree, reward_hint, reward_line

    lines = ["profile: correct",
             f"  your kernel    {_ms(r.kernel_ms)}",
             f"  eager PyTorch  {_ms(r.eager_ms)}" + _speedup(r, "eager"),
             f"  torch.compile  {_ms(r.compile_ms)}" + _speedup(r, "compile")]
    if r.graph_ms is not None:
        lines.append(f"  CUDA graph     {_ms(r.graph_ms)}   (eager, captured; not in the reward)")
    lines.extend(_speed_of_light_lines(r))
    if medians_disagree(r):
        lines.append(f"  ({PAIRED_NOTE})")
    lines.append(reward_line(r))
    hint = reward_hint(r)
    if hint:
        lines.append(hint)
    lines.extend(_where_time_goes_lines(r))
    return lines


def _speed_of_light_lines(r: EvalResult) -> list[str]:
    """The task's work and the kernel's fraction of the device's peak (env/measure/speed_of_light.py)."""
    if r.speed_of_light is None:
        return []
    from cuda_agent.env.measure.speed_of_light import describe

    return describe(r.speed_of_light, r.device)


def _where_time_goes_lines(r: EvalResult) -> list[str]:
    """The profiler's tables (env/run/feedback.py): the reference's operators and your kernels, by self
    time per call, from a few untimed calls after timing; and why one is missing."""
    tables = [("reference (eager PyTorch), {clock} time per call {total}", r.reference_ops),
              ("yours (as your process reported it), {clock} time per call {total}", r.candidate_ops)]
    lines = []
    for title, table in tables:
        if table is None:
            continue
        clock = "GPU" if table.clock == "cuda" else "CPU"
        lines.append("  " + title.format(clock=clock, total=_ms(table.total_ms)) + ":")
        width = max(len(_row_name(row.name)) for row in table.rows) if table.rows else 0
        if not table.rows:
            lines.append("    (no rows: the profiler recorded no time here)")
        for row in table.rows:
            share = f"{100 * row.ms / table.total_ms:3.0f}%" if table.total_ms else ""
            times = f"   x{row.calls:.3g} per call" if abs(row.calls - 1) > 1e-9 else ""
            lines.append(f"    {_row_name(row.name):<{width}}  {_ms(row.ms):>11} {share}{times}")
    if lines:
        calls = (r.reference_ops or r.candidate_ops).calls
        lines.insert(0, f"where the time goes (torch.profiler, {calls} untimed calls after timing):")
        sampled = r.cpu_samples or {}
        if sampled.get("symbols"):   # the harness's own sampling of every call (docs/verification.md)
            lines.append(f"  yours, sampled from outside your process over all calls "
                         f"({1e3 * sampled['seconds']:.0f} ms of CPU time):")
            lines.extend(f"    {share:4.0%}  {library}: {_row_name(symbol)}" for library, symbol, share in
                         sampled["symbols"][:6])
    lines.extend(f"  note: {note}" for note in r.feedback_notes)
    return lines


def _row_name(name: str, width: int = 60) -> str:
    """A kernel's name at most `width` characters: C++ signatures are cut at their argument list."""
    short = name.split("(")[0] if len(name) > width and "(" in name else name
    return short if len(short) <= width else short[: width - 3] + "..."


def _speedup(r: EvalResult, baseline: str) -> str:
    """The paired speedup over one baseline ("eager" or "compile") in words, with its 95 % interval."""
    from cuda_agent.env.explain import interval_text, totals_text
    from cuda_agent.env.reward import speedup_words, totals_decide

    value = r.speedup_vs_eager if baseline == "eager" else r.speedup_vs_compile
    if value is None:
        return ""
    interval = interval_text(r, baseline)
    totals = r.speedup_totals.get(baseline)
    return (f"   (you are {speedup_words(value)}" + (f"; speedup 95 % CI {interval}" if interval else "")
            + (f"; {totals_text(totals)}" if totals_decide(value, totals) else "") + ")")


def _first_lines(text: str, n: int) -> str:
    return "\n".join(text.strip().splitlines()[:n])


# -- generated files ----------------------------------------------------------------------------

def _command_script(command: str) -> str:
    # The interpreter that created the workspace runs the command: that is where cuda_agent lives.
    python = shlex.quote(sys.executable)
    return textwrap.dedent(f"""\
        #!/bin/sh
        # Protected command of a cuda-agent workspace: {command} the candidate in this folder.
        # The code is in the installed cuda_agent package; editing this file changes nothing.
        exec {python} -m cuda_agent.agent.workspace_cli {command} --workspace "$(dirname "$0")" "$@"
        """)


def _clear(root: Path) -> None:
    for child in root.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def _write_protected(path: Path, text: str, executable: bool = False) -> None:
    if path.exists():
        path.chmod(stat.S_IWUSR | stat.S_IRUSR)
    path.write_text(text)
    mode = stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH
    if executable:
        mode |= stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH
    path.chmod(mode)


def starter_model_new(task_code: str) -> str:
    """A starting `model_new.py`: the task's imports, `ModelNew` with `Model`'s exact `__init__`
    (so parameter names match for `load_state_dict`), and a `forward` stub showing the reference."""
    tree = parse(task_code)
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    imports = ["import torch", "import torch.nn as nn"]
    for node in tree.body:
        segment = ast.get_source_segment(task_code, node)
        if isinstance(node, (ast.Import, ast.ImportFrom)) and segment not in imports:
            # a module off model_new.py's allowlist (numpy, einops) would only be refused there
            refused = any(f.reject for f in check_source(segment))
            imports.append(f"# {segment}  (not allowed in model_new.py, see SKILL.md)" if refused else segment)
    init_src, fwd_args, reference = "    def __init__(self):\n        super().__init__()\n", "self, *inputs", ""
    if model is not None:
        for node in model.body:
            if isinstance(node, ast.FunctionDef) and node.name == "__init__":
                init_src = _method_source(task_code, node)
                init_src = re.sub(r"super\(\s*Model\s*,\s*self\s*\)", "super()", init_src)
            elif isinstance(node, ast.FunctionDef) and node.name == "forward":
                fwd_args = ast.unparse(node.args)
                body = node.body[1:] if ast.get_docstring(node) else node.body
                reference = "\n".join(ast.unparse(stmt) for stmt in body)
    ref_comment = textwrap.indent(reference, "        #     ") if reference else "        #     (see model.py)"
    return (
        "\n".join(imports) + "\n\n"
        "import cuda_extension  # built from kernels/ by ./compile (see SKILL.md)\n\n\n"
        "class ModelNew(nn.Module):\n"
        + init_src.rstrip() + "\n\n"
        f"    def forward({fwd_args}):\n"
        "        # Reference computation from model.py, to be replaced by calls into cuda_extension\n"
        "        # (no torch compute here: only tensor allocation and your own kernels):\n"
        f"{ref_comment}\n"
        "        raise NotImplementedError('write kernels in kernels/, build them with ./compile, call them here')\n"
    )


def _method_source(code: str, node: ast.FunctionDef) -> str:
    lines = code.splitlines()
    start = (node.decorator_list[0].lineno if node.decorator_list else node.lineno) - 1
    text = textwrap.dedent("\n".join(lines[start:node.end_lineno]))
    return textwrap.indent(text, "    ") + "\n"
