"""Candidate solutions in the two forms users meet.

- single file: a Python file defining `ModelNew`, building its kernels with
  `torch.utils.cpp_extension.load_inline` (KernelBench's form);
- workspace: `model_new.py` plus `kernels/*.cu` (pure CUDA with `extern "C"` launchers) and
  `kernels/*.cpp` (bindings / C++ kernels). Everything in `kernels/` is linked into one module
  that `model_new.py` imports as `cuda_extension`.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from cuda_agent.tasks.parsing import parse

KERNEL_SUFFIXES = (".cu", ".cpp", ".cc", ".cuh", ".h", ".hpp")
ENTRY = "model_new.py"


class SolutionError(ValueError):
    pass


@dataclass(frozen=True)
class Solution:
    """Source files by relative path; `model_new.py` is always present."""

    files: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_code(cls, code: str) -> "Solution":
        return cls({ENTRY: code})

    @property
    def entry_code(self) -> str:
        return self.files[ENTRY]

    @property
    def kernel_files(self) -> dict[str, str]:
        return {p: s for p, s in self.files.items() if p.startswith("kernels/")}

    @property
    def is_workspace(self) -> bool:
        return bool(self.kernel_files)

    @property
    def digest(self) -> str:
        h = hashlib.sha256()
        for path in sorted(self.files):
            h.update(path.encode() + b"\0" + self.files[path].encode() + b"\0")
        return h.hexdigest()[:16]

    def write(self, folder: str | os.PathLike) -> Path:
        folder = Path(folder)
        for rel, text in self.files.items():
            target = folder / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        return folder


def load_solution(path: str | os.PathLike) -> Solution:
    """A `.py` file (single-file form) or a folder holding `model_new.py` (workspace form)."""
    path = Path(path)
    if path.is_file():
        return Solution.from_code(path.read_text())
    if path.is_dir():
        entry = path / ENTRY
        if not entry.is_file():
            raise SolutionError(f"{path} is a folder without {ENTRY} (a workspace holds {ENTRY} and kernels/; "
                                "`cuda-agent workspace TASK DIR` makes one)")
        files = {ENTRY: entry.read_text()}
        kernels = path / "kernels"
        if kernels.is_dir():
            for f in sorted(kernels.rglob("*")):
                if f.is_file() and f.suffix in KERNEL_SUFFIXES:
                    files[f.relative_to(path).as_posix()] = f.read_text()
        return Solution(files)
    raise FileNotFoundError(f"solution not found: {path} (give a model_new.py file or a workspace folder)")


def missing_model_new(solution: Solution) -> str | None:
    """Why the solution cannot be a candidate at all (an empty file, a syntax error in it, no
    `ModelNew`), else None: found before anything is built, in the words the candidate's import uses."""
    code = solution.entry_code
    if not code.strip():
        return f"{ENTRY} is empty: define `class ModelNew(nn.Module)` taking the same arguments as the task's Model"
    try:
        parse(code, filename=ENTRY)
    except SyntaxError as exc:
        return f"SyntaxError in {ENTRY} line {exc.lineno}: {exc.msg}\n    {(exc.text or '').strip()}"
    except ValueError as exc:   # null bytes (a SyntaxError from Python 3.12 on)
        return f"{ENTRY} cannot be parsed: {exc}"
    if "ModelNew" not in code:
        return f"{ENTRY} defines no ModelNew: the class the evaluation builds must be called ModelNew"
    return None
