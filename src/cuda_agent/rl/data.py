"""Tasks -> verl's RL parquet, split into train and validation with no task in both.

One row per task: `prompt` (the single-turn messages of the warm-up stage; the agentic loop builds
its own opening from the task), `data_source`, `ability`, `reward_model.ground_truth` (the task
digest: verl's reward manager reads the field), and `extra_info` with `index`, `split` and the task
itself (`task_name`, `task_code`, `task_origin`). No empty structs (parquet cannot store them).
Duplicates (same code) are kept once, so a task cannot land in both splits.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

from cuda_agent.rl import single_turn
from cuda_agent.tasks import Task


def unique(tasks: list[Task]) -> list[Task]:
    seen, out = set(), []
    for task in tasks:
        if task.digest not in seen:
            seen.add(task.digest)
            out.append(task)
    return out


def split(tasks: list[Task], val_fraction: float, seed: int = 0) -> tuple[list[Task], list[Task]]:
    tasks = unique(tasks)
    order = sorted(tasks, key=lambda t: t.digest)   # independent of input order
    random.Random(seed).shuffle(order)
    n_val = round(len(order) * val_fraction)
    if val_fraction > 0 and len(order) > 1:
        n_val = min(max(n_val, 1), len(order) - 1)
    return order[n_val:], order[:n_val]


def row(task: Task, index: int, split_name: str, data_source: str) -> dict:
    return {"data_source": data_source, "prompt": single_turn.messages(task), "ability": "cuda",
            "reward_model": {"style": "rule", "ground_truth": task.digest},
            "extra_info": {"index": index, "split": split_name, "task_name": task.name, "task_code": task.code,
                           "task_origin": task.origin or task.name}}


def write(rows: list[dict], path: str | os.PathLike) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def build(tasks: list[Task], out: str | os.PathLike, *, val_fraction: float = 0.05, seed: int = 0,
          data_source=None) -> dict:
    """Write OUT/train.parquet and OUT/val.parquet; returns counts. `data_source(task)` names each row's
    source (default: the task's origin folder)."""
    out = Path(out)
    train, val = split(tasks, val_fraction, seed)
    source = data_source or default_source
    for name, part in (("train", train), ("val", val)):
        write([row(t, i, name, source(t)) for i, t in enumerate(part)], out / f"{name}.parquet")
    stats = {"tasks": len(tasks), "unique": len(train) + len(val), "train": len(train), "val": len(val)}
    (out / "stats.json").write_text(json.dumps(stats, indent=2) + "\n")
    return stats


def default_source(task: Task) -> str:
    """`kernelbench/level2` for a KernelBench problem, else the dataset's file stem."""
    if task.name.startswith("level") and "/" in task.name:
        return "kernelbench/" + task.name.split("/")[0]
    origin = task.origin.split("#")[0]
    return Path(origin).stem if origin else "tasks"
