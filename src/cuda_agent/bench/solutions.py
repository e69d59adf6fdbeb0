"""Finding the solutions of a folder for the selected tasks. Layouts recognised (they may be mixed):

    DIR/level1/19.py              single file (`load_inline`, KernelBench's form)
    DIR/level1/19/                workspace: model_new.py + kernels/
    DIR/level1/19_ReLU.py, DIR/level1/19_ReLU/     the same, named like the problem file
    DIR/level_1_problem_19_sample_0_kernel.py      KernelBench's layout (DIR = its `runs/NAME`): one
                                                    file per sample, every sample an attempt

Dataset tasks use their group: `DIR/val/3.py` or `DIR/val/3/`. A task with several solutions gets
one attempt per solution; the task is scored by its best correct attempt.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from cuda_agent.bench.selection import BenchTask
from cuda_agent.tasks import Solution, SolutionError, load_solution

_RUNS_FILE = re.compile(r"^level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py$")
_OWN_ENTRY = re.compile(r"^(\d+)(?:_.*?)?(\.py)?$")


@dataclass(frozen=True)
class SolutionRef:
    path: Path
    label: str          # how the attempt is named in reports: "19.py", "sample 2"

    def load(self) -> Solution:
        """The solution, or SolutionError when the entry is malformed (a folder without
        model_new.py, an unreadable file)."""
        try:
            return load_solution(self.path)
        except (OSError, UnicodeDecodeError) as exc:
            raise SolutionError(f"{self.path}: cannot be read ({exc})") from None


def find_solutions(root: Path, tasks: list[BenchTask]) -> dict[str, list[SolutionRef]]:
    """Solutions for each task key (tasks without one are absent). Raises FileNotFoundError when
    `root` is not a folder."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"solutions folder not found: {root}")
    wanted = {t.key for t in tasks}
    found: dict[str, list[SolutionRef]] = {}
    groups = {t.group for t in tasks}
    for group in sorted(groups):
        folder = root / group
        if not folder.is_dir():
            continue
        for entry in sorted(folder.iterdir(), key=lambda p: p.name):
            match = _OWN_ENTRY.match(entry.name)
            if not match or (entry.is_file() and not match[2]) or (entry.is_dir() and match[2]):
                continue
            key = f"{group}/{int(match[1])}"
            if key in wanted:
                found.setdefault(key, []).append(SolutionRef(entry, entry.name))
    for path in sorted(_runs_files(root)):
        match = _RUNS_FILE.match(path.name)
        key = f"level{int(match[1])}/{int(match[2])}"
        if key in wanted:
            found.setdefault(key, []).append(SolutionRef(path, f"sample {int(match[3])}"))
    for refs in found.values():
        refs.sort(key=lambda r: _sample_number(r))
    return found


def _runs_files(root: Path) -> list[Path]:
    """KernelBench's sample files (`--solutions KernelBench/runs/NAME`)."""
    return [p for p in root.glob("level_*_problem_*_sample_*_kernel.py") if p.is_file() and _RUNS_FILE.match(p.name)]


def _sample_number(ref: SolutionRef) -> tuple:
    match = _RUNS_FILE.match(ref.path.name)
    return (1, int(match[3]), str(ref.path)) if match else (0, 0, str(ref.path))
