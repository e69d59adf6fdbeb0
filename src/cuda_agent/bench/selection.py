"""Which tasks a run covers: KernelBench levels, a `--tasks` list, or the rows of a dataset.

Every task gets a key `GROUP/ID`: `level1/19` for KernelBench problem 19 of level 1, `val/3` for
row 3 of a dataset file `val.jsonl`. Groups are what the report breaks metrics down by.

    --levels 1,2,3                    every problem of those levels
    --tasks level1/1-20,level2/5      ranges and single problems (a bare `level3` is the whole level)
    --dataset val.jsonl               every row of a dataset with a `code` column (`--tasks val/0-9`)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from cuda_agent.tasks import Task, TaskError, load_dataset

_PROBLEM_FILE = re.compile(r"^(\d+)_.*\.py$")
_SPEC = re.compile(r"^([A-Za-z0-9_.\-]+?)(?:/(\d+)(?:-(\d+))?)?$")


class SelectionError(ValueError):
    """The selection cannot be made (no such level, bad spec, nothing selected)."""


@dataclass(frozen=True)
class BenchTask:
    key: str            # "level1/19", "val/3"
    group: str          # "level1", "val"
    number: int         # the problem's id or the dataset row
    task: Task


def parse_levels(text: str | None) -> list[int]:
    if not text:
        return []
    try:
        levels = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise SelectionError(f"--levels takes numbers separated by commas, e.g. 1,2,3; got {text!r}") from None
    return levels


def parse_task_spec(text: str | None) -> dict[str, set[int] | None]:
    """`level1/1-20,level2/5,level3` -> {"level1": {1..20}, "level2": {5}, "level3": None (all)}."""
    wanted: dict[str, set[int] | None] = {}
    for part in (p.strip() for p in (text or "").split(",")):
        if not part:
            continue
        match = _SPEC.match(part)
        if not match:
            raise SelectionError(f"bad task spec {part!r}: use GROUP, GROUP/ID or GROUP/FIRST-LAST (e.g. level1/1-20)")
        group, first, last = match[1], match[2], match[3]
        if first is None:
            wanted[group] = None
            continue
        lo, hi = int(first), int(last or first)
        if hi < lo:
            raise SelectionError(f"bad range in {part!r}: {lo} > {hi}")
        if group in wanted and wanted[group] is None:
            continue
        wanted.setdefault(group, set()).update(range(lo, hi + 1))
    return wanted


def kernelbench_level(root: Path, level: int) -> list[BenchTask]:
    folder = Path(root) / f"level{level}"
    if not folder.is_dir():
        raise SelectionError(f"{folder} does not exist: --kernelbench must name a folder holding level1, level2, ...")
    found = []
    for path in folder.iterdir():
        match = _PROBLEM_FILE.match(path.name)
        if match and path.is_file():
            number = int(match[1])
            task = Task(name=f"level{level}/{path.stem}", code=path.read_text(), origin=str(path))
            found.append(BenchTask(f"level{level}/{number}", f"level{level}", number, task))
    return sorted(found, key=lambda t: t.number)


def dataset_tasks(path: Path) -> list[BenchTask]:
    path = Path(path)
    group = path.stem
    return [BenchTask(f"{group}/{i}", group, i, task) for i, task in enumerate(load_dataset(path))]


def select_tasks(*, kernelbench: Path | None = None, levels: list[int] | None = None, tasks: str | None = None,
                 dataset: Path | None = None) -> list[BenchTask]:
    """The tasks of a run, in a stable order (group, then number). Levels default to those of 1, 2, 3
    the folder holds when no dataset is given; a `--tasks` spec narrows what the levels and the dataset offer (or, alone,
    names the KernelBench levels it needs)."""
    wanted = parse_task_spec(tasks)
    pool: list[BenchTask] = []
    if dataset is not None:
        try:
            pool += dataset_tasks(dataset)
        except (OSError, TaskError) as exc:
            raise SelectionError(str(exc)) from None
    level_numbers = list(levels or [])
    if not level_numbers:
        level_numbers = sorted({int(g[5:]) for g in wanted if re.fullmatch(r"level\d+", g)})
        if not level_numbers and dataset is None:   # the levels 1-3 the folder has
            if kernelbench is None:
                raise SelectionError("KernelBench tasks need --kernelbench DIR (or CUDA_AGENT_KERNELBENCH)")
            level_numbers = [n for n in (1, 2, 3) if (Path(kernelbench) / f"level{n}").is_dir()] or [1, 2, 3]
    if level_numbers:
        if kernelbench is None:
            raise SelectionError("KernelBench tasks need --kernelbench DIR (or CUDA_AGENT_KERNELBENCH)")
        for level in level_numbers:
            pool += kernelbench_level(kernelbench, level)
    if wanted:
        unknown = set(wanted) - {t.group for t in pool}
        if unknown:
            raise SelectionError(f"--tasks names {', '.join(sorted(unknown))}, which the selection does not hold "
                                 f"(groups: {', '.join(sorted({t.group for t in pool})) or 'none'})")
        pool = [t for t in pool if t.group in wanted and (wanted[t.group] is None or t.number in wanted[t.group])]
    if not pool:
        raise SelectionError("no task selected")
    return sorted(pool, key=group_order)


def group_order(t: BenchTask) -> tuple:
    match = re.fullmatch(r"level(\d+)", t.group)
    return (0, int(match[1]), "", t.number) if match else (1, 0, t.group, t.number)
