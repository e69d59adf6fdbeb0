"""`cuda-agent baseline`: measurements recorded per task, out-of-memory tasks measured again alone,
broken tasks recorded, entries already in the store reused; for real on the CPU backend through the CLI."""

import asyncio
import json
import os
import subprocess
import sys
import threading

import torch

from cuda_agent.bench.schedule import slow_first
from cuda_agent.bench.runner import RunSpec, run_baseline
from cuda_agent.bench.runview import load_run
from cuda_agent.bench.selection import select_tasks
from cuda_agent.env.run.baselines import BaselineEntry, BaselineStore, entry_key, timing_settings
from cuda_agent.env.config import EvalConfig
from cuda_agent.env.run.baseline_run import BaselineRun
from tests.bench.helpers import make_kernelbench
from tests.gates import StartGate


class FakeMeasure:
    """Stands in for measure_baselines: `level1/3` runs out of memory unless measured alone,
    `level2/1` always does; `level2/2` is broken. Tracks how many run at once."""

    def __init__(self):
        self.calls, self.running, self.most = [], 0, 0
        self.lock = threading.Lock()
        self.gate = StartGate(2)   # the first two calls surely run at once (per_gpu=2)

    def __call__(self, task, config, *, gpu=None):
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
            alone = self.running == 1 and len(self.calls) >= 4
            self.calls.append(task.name)
        self.gate.wait()
        with self.lock:
            self.running -= 1
        if "3_Sigmoid" in task.name and not alone or "1_Tanh" in task.name:
            return BaselineRun(None, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB", 0.1)
        if "Broken" in task.name:
            return BaselineRun(None, "the task's reference failed: RuntimeError: reference is broken", 0.1)
        entry = BaselineEntry(task.name, task.digest, "cpu", torch.__version__, timing_settings(config, "cpu"),
                              eager={"median_ms": 2.0}, compile={"median_ms": 3.0})
        return BaselineRun(entry, None, 0.1)


def test_oom_broken_and_stored(tmp_path):
    kb = make_kernelbench(tmp_path / "kb")
    tasks = select_tasks(kernelbench=kb)
    assert [t.key for t in slow_first(tasks)][:2] == ["level2/1", "level2/2"]   # slow levels first
    config = EvalConfig(backend="cpu", cache_dir=tmp_path / "cache")
    bias_relu = tasks[0].task
    stored = BaselineEntry(bias_relu.name, bias_relu.digest, "cpu", torch.__version__, timing_settings(config, "cpu"),
                           eager={"median_ms": 5.0}, compile={"median_ms": 4.0})
    BaselineStore(config.cache_dir).put(entry_key(bias_relu.digest, "cpu", torch.__version__,
                                                  timing_settings(config, "cpu")), stored)
    measure = FakeMeasure()
    run_spec = RunSpec(tmp_path / "run", tasks, config, quiet=True)
    outcome = run_baseline(run_spec, per_gpu=2, measure=measure)
    assert outcome.left == 0 and measure.most == 2
    records = {b.task_key: b for b in load_run(outcome.run_dir).baselines}
    assert {k: (b.status, b.oom_retries) for k, b in records.items()} == {
        "level1/1": ("stored", 0), "level1/2": ("measured", 0), "level1/3": ("measured", 1),
        "level2/1": ("out_of_memory", 1), "level2/2": ("broken", 0)}
    assert records["level1/1"].eager_ms == 5.0 and records["level1/2"].compile_ms == 3.0
    assert "reference is broken" in records["level2/2"].error
    assert sorted(measure.calls).count("level1/3_Sigmoid") == 2 and "level1/1_BiasReLU" not in measure.calls

    md = outcome.report[0].read_text()
    assert "| overall | 5 | 2 | 1 | 1 | 1 | 2 of 3 | 2 |" in md   # the stored entry has compile faster than eager

    # resuming measures nothing again
    again = run_baseline(RunSpec(tmp_path / "run", tasks, config, resume=True, quiet=True, report=False),
                         per_gpu=2, measure=measure)
    assert again.left == 0 and len(measure.calls) == 6


def test_measurements_start_when_their_memory_fits(tmp_path):
    """Each tiny task reserves a few outputs' worth + 1 GiB (memory.measurement_memory): a 2.5 GiB budget runs two at a time, whatever
    the concurrency asked for; a task measured alone takes the whole budget."""
    from cuda_agent.bench.baseline_runs import measure_all
    from cuda_agent.bench.memory import USABLE, footprints
    from cuda_agent.bench.progress import RunProgress
    from cuda_agent.bench.schedule import Deadline
    from cuda_agent.bench.store import RunStore

    kb = make_kernelbench(tmp_path / "kb")
    tasks = select_tasks(kernelbench=kb)
    sizes = footprints(tasks, cache=tmp_path / "footprints")
    assert sizes["level1/2"].input_bytes == 16 * 32 * 4 and sizes["level2/2"] is None   # its get_inputs raises
    measure = FakeMeasure()
    store = RunStore(tmp_path / "run")
    store.add_tasks(tasks)
    left = asyncio.run(measure_all(store, 1, tasks, EvalConfig(backend="cuda", cache_dir=tmp_path / "cache"),
                                   gpus=[0], devices={0: "gpu"}, per_gpu=4, deadline=Deadline(None),
                                   progress=RunProgress("", 5, quiet=True), measure=measure,
                                   gpu_memory={0: int(2.5 * (1 << 30) / USABLE)}))
    assert left == 0 and measure.most == 2 and len(measure.calls) == 7   # level1/3 and level2/1 again, alone


def test_baseline_cli_for_real_on_cpu(tmp_path):
    """One task measured for real (eager only, few calls) into the store; a second run reuses it."""
    kb = make_kernelbench(tmp_path / "kb")
    cache = tmp_path / "cache"
    args = [sys.executable, "-m", "cuda_agent.cli", "baseline", "--kernelbench", str(kb), "--tasks", "level1/2",
            "--backend", "cpu", "--no-compile-baseline", "--iters", "3", "--cache-dir", str(cache), "--quiet"]
    first = subprocess.run(args + ["--out", str(tmp_path / "first")], capture_output=True, text=True, timeout=600,
                           env=dict(os.environ))
    assert first.returncode == 0, first.stderr
    [record] = load_run(tmp_path / "first").baselines
    assert record.status == "measured" and record.eager_ms > 0 and record.device == "cpu"
    steps = json.loads(record.steps)   # where the measurement's time went, and the report's sum of it
    assert set(steps) == {"start", "compile", "timing", "wait"} and 0 < steps["timing"] <= record.seconds
    assert steps["start"] + steps["compile"] + steps["timing"] <= record.seconds + 0.01
    assert "Where the measurement time went, summed over 1 tasks" in (tmp_path / "first" / "report.md").read_text()
    [(key, entry)] = BaselineStore(cache).entries()
    assert key == record.store_key and entry.eager_ms == record.eager_ms
    second = subprocess.run(args + ["--out", str(tmp_path / "second")], capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr
    assert [b.status for b in load_run(tmp_path / "second").baselines] == ["stored"]
    assert (tmp_path / "second" / "report.html").is_file()
    resume_without_out = subprocess.run(args + ["--resume"], capture_output=True, text=True, timeout=600)
    assert resume_without_out.returncode == 2 and "--out" in resume_without_out.stderr


def test_a_record_made_before_the_steps_column_still_opens_and_resumes(tmp_path):
    """Runs recorded by an earlier version (no `steps` column) open, gain the column, and keep their rows."""
    import sqlite3

    from cuda_agent.bench.store import RunStore

    run_dir = tmp_path / "old"
    run_dir.mkdir()
    db = sqlite3.connect(run_dir / "bench.sqlite")
    db.execute("CREATE TABLE baselines (task_key TEXT PRIMARY KEY, session_id INTEGER, status TEXT NOT NULL, "
               "device TEXT, torch TEXT, eager_ms REAL, compile_ms REAL, compile_error TEXT, error TEXT, "
               "store_key TEXT, oom_retries INTEGER, seconds REAL, finished REAL, entry TEXT)")
    db.execute("INSERT INTO baselines (task_key, status, eager_ms) VALUES ('level1/1', 'measured', 2.5)")
    db.commit()
    db.close()
    store = RunStore.existing(run_dir)
    try:
        [record] = store.baselines()
        assert record.task_key == "level1/1" and record.eager_ms == 2.5 and record.steps is None
    finally:
        store.close()


def test_footprints_are_read_once_per_task_code(tmp_path, monkeypatch):
    """A second run reads each task's footprint from the cache (no model runs again); a task whose
    code changed is measured again."""
    from cuda_agent.bench import memory
    from cuda_agent.bench.selection import BenchTask
    from cuda_agent.tasks.task import Task

    code = ("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"
            "def get_inputs():\n    return [torch.randn(8, 4)]\ndef get_init_inputs():\n    return []\n")
    first = memory.footprints([BenchTask("a/1", "a", 1, Task("one", code))], cache=tmp_path)
    assert first["a/1"].input_bytes == 8 * 4 * 4 and first["a/1"].output_bytes == 8 * 4 * 4

    measured = []
    real = memory._measured
    monkeypatch.setattr(memory, "_measured", lambda tasks, *a: measured.extend(t.key for t in tasks) or real(tasks, *a))
    changed = code.replace("randn(8, 4)", "randn(16, 4)")
    again = memory.footprints([BenchTask("a/1", "a", 1, Task("one", code)),
                               BenchTask("a/2", "a", 2, Task("two", changed))], cache=tmp_path)
    assert measured == ["a/2"]                      # only the changed code ran on meta
    assert again["a/1"] == first["a/1"] and again["a/2"].input_bytes == 16 * 4 * 4
