"""Load tasks from a file, a KernelBench folder (`level2/17`), or a JSONL/parquet dataset."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from cuda_agent.tasks.task import Task, TaskError

KERNELBENCH_ENV = "CUDA_AGENT_KERNELBENCH"
_KB_SPEC = re.compile(r"^level(\d+)/(\d+)$")
_ROW_SPEC = re.compile(r"^(.+\.(?:jsonl|parquet))(?:[#:](\d+))?$")


def load_task(spec: str | os.PathLike, kernelbench: str | os.PathLike | None = None) -> Task:
    """Resolve a task spec.

    - `path/to/task.py`: one file.
    - `level2/17`: problem 17 of level 2 in a KernelBench folder (`kernelbench` argument, or the
      `CUDA_AGENT_KERNELBENCH` environment variable).
    - `data.jsonl#12` / `data.parquet#12`: row 12 of a dataset with a `code` column (row 0 if omitted).
    """
    spec = str(spec)
    match = _KB_SPEC.match(spec)
    if match and not Path(spec).exists():
        return _load_kernelbench(int(match[1]), int(match[2]), kernelbench)
    match = _ROW_SPEC.match(spec)
    if match:
        tasks = load_dataset(match[1])
        index = int(match[2] or 0)
        if not 0 <= index < len(tasks):
            raise TaskError(f"{match[1]} has {len(tasks)} rows; row {index} does not exist")
        return tasks[index]
    path = Path(spec)
    if not path.is_file():
        hint = " (levelN/ID names a KernelBench problem)" if "level" in spec else ""
        raise FileNotFoundError(f"task file not found: {spec}{hint}")
    try:
        code = path.read_text()
    except UnicodeDecodeError:
        raise TaskError(f"{path} is not a Python source file (a task is a .py file defining Model, "
                        "get_inputs() and get_init_inputs())") from None
    return Task(name=path.stem, code=code, origin=str(path))


KERNELBENCH_GET = ("get it with `git clone https://github.com/ScalingIntelligence/KernelBench`; the problems "
                   "are in KernelBench/KernelBench")


def _load_kernelbench(level: int, problem: int, root: str | os.PathLike | None) -> Task:
    root = root or os.environ.get(KERNELBENCH_ENV)
    if not root:
        raise FileNotFoundError(
            f"level{level}/{problem}: say where KernelBench is with --kernelbench DIR "
            f"or the {KERNELBENCH_ENV} environment variable ({KERNELBENCH_GET})")
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"KernelBench folder {root} not found: pass --kernelbench DIR with the folder "
                                f"holding level1/, level2/, level3/ ({KERNELBENCH_GET})")
    folder = root / f"level{level}"
    if not folder.is_dir():
        nested = root / "KernelBench" / f"level{level}"
        hint = (f"did you mean --kernelbench {root / 'KernelBench'}?" if nested.is_dir() else
                "point --kernelbench at the folder holding level1/, level2/, level3/")
        raise FileNotFoundError(f"{root} has no level{level}/ folder: {hint}")
    matches = sorted(folder.glob(f"{problem}_*.py"))
    if not matches:
        ids = (p.name.split("_", 1)[0] for p in folder.glob("*_*.py"))
        numbers = sorted(int(i) for i in ids if i.isdigit())
        have = f" (it has problems {numbers[0]}-{numbers[-1]})" if numbers else ""
        raise FileNotFoundError(f"no problem {problem} in {folder}{have}")
    path = matches[0]
    return Task(name=f"level{level}/{path.stem}", code=path.read_text(), origin=str(path))


def load_dataset(path: str | os.PathLike) -> list[Task]:
    """All rows of a JSONL or parquet dataset whose rows carry the task source in `code`."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"dataset not found: {path}")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        rows = pq.read_table(path).to_pylist()
    else:
        rows = []
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise TaskError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
    tasks = []
    for index, row in enumerate(rows):
        if not isinstance(row, dict) or not isinstance(row.get("code"), str):
            raise TaskError(f"{path} row {index}: no `code` column with the task source")
        name = str(row.get("name") or row.get("problem_name") or f"{path.stem}#{index}")
        tasks.append(Task(name=name, code=row["code"], origin=f"{path}#{index}"))
    return tasks
