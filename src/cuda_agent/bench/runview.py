"""A recorded run as the report sees it: its tasks' scores, metrics and baselines, read from SQLite."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from cuda_agent.bench.metrics import Metrics, TaskScore, summarize, task_scores
from cuda_agent.bench.store import BaselineRecord, RunStore


@dataclass
class RunView:
    run_dir: Path
    kind: str
    settings: dict
    sessions: list[dict]
    tasks: list[dict]
    scores: list[TaskScore]
    metrics: list[Metrics]
    baselines: list[BaselineRecord]

    @property
    def name(self) -> str:
        return self.run_dir.resolve().name

    @property
    def wall_seconds(self) -> float:
        return sum((s["finished"] or s["started"]) - s["started"] for s in self.sessions)

    @property
    def environment(self) -> dict:
        return self.sessions[-1]["environment"] if self.sessions else {}

    def overall(self) -> Metrics:
        return self.metrics[-1]


def load_run(run_dir: Path) -> RunView:
    store = RunStore.existing(run_dir)
    try:
        tasks = store.tasks()
        scores = task_scores(tasks, store.attempts())
        return RunView(Path(run_dir), store.meta("kind", "bench"), store.meta("settings", {}), store.sessions(),
                       tasks, scores, summarize(scores), store.baselines())
    finally:
        store.close()


def reference_times(folder: Path) -> dict[str, tuple[float, float]]:
    """KernelBench's own timings (`baseline_times_*` folder: baseline_time_torch.json and
    baseline_time_torch_compile_inductor_default.json, ms per call): task key -> (eager, compile)."""
    folder = Path(folder)
    eager_file = folder / "baseline_time_torch.json"
    compile_file = folder / "baseline_time_torch_compile_inductor_default.json"
    if not (eager_file.is_file() and compile_file.is_file()):
        raise FileNotFoundError(f"{folder} lacks baseline_time_torch.json or "
                                "baseline_time_torch_compile_inductor_default.json")
    eager, compiled = json.loads(eager_file.read_text()), json.loads(compile_file.read_text())
    times = {}
    for level, problems in eager.items():
        for filename, timing in problems.items():
            match = re.match(r"(\d+)_", filename)
            other = compiled.get(level, {}).get(filename)
            if match and other and timing.get("mean") and other.get("mean"):
                times[f"{level}/{int(match[1])}"] = (float(timing["mean"]), float(other["mean"]))
    return times
