"""benchmarks/runs_scaling.py (the GPU session's `runs_scaling` step): the command of each run, its
GPUs, the ratios, and a synthesis state unpacked as each run's start, checked here so its first use on
a multi-GPU machine does not fail on the script's own logic."""

import importlib.util
import io
import json
import sqlite3
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def runs():
    spec = importlib.util.spec_from_file_location("runs_scaling", ROOT / "benchmarks" / "runs_scaling.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_run_takes_the_first_n_gpus(runs, tmp_path):
    args = SimpleNamespace(tasks="level2/1-3", kernelbench="/kb", seconds=30)
    cmd, env = runs.command("baseline", 2, tmp_path, args)
    assert cmd[cmd.index("--gpus") + 1] == "0,1" and "--force" in cmd and env == {}
    cmd, env = runs.command("bench", 4, tmp_path, args)
    tasks = cmd[cmd.index("--tasks") + 1].split(",")
    assert cmd[cmd.index("--gpus") + 1] == "0,1,2,3"
    assert "level1/1" in tasks and "level1/19" not in tasks and tasks == runs.solution_tasks()
    cmd, env = runs.command("synth", 2, tmp_path, args)
    assert env == {"CUDA_VISIBLE_DEVICES": "0,1"} and cmd[cmd.index("--workers") + 1] == str(2 * runs.WORKERS_PER_GPU)


def test_ratios_against_the_mean_of_one_gpu(runs):
    rows = runs.with_ratios([{"gpus": 1, "rate": 1.0}, {"gpus": 2, "rate": 1.8}, {"gpus": 1, "rate": 1.2},
                             {"gpus": 4, "rate": 2.2}])
    assert [r["x_vs_1"] for r in rows] == [0.91, 1.64, 1.09, 2.0]
    assert [r["x_per_gpu"] for r in rows] == [0.91, 0.82, 1.09, 0.5]


def _state(path: Path, files: dict[str, str]) -> Path:
    with tarfile.open(path, "w:xz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_a_synthesis_run_starts_from_the_saved_catalog_alone(runs, tmp_path):
    """Each measured run is a build of its own (another seed) from the saved build's operator catalog:
    none of the saved build's tasks or journals, so it has work to do even where Ops-6K is complete."""
    lines = "\n".join(json.dumps({"ok": ok}) for ok in (True, False, True)) + "\n"
    # members named as `tar -C DIR .` names them, with a leading ./
    state = _state(tmp_path / "build.tar.xz", {"./" + name: text for name, text in (
        ("work/results.jsonl", lines), ("work/config.json", "{}"), (runs.CATALOG, '{"ops": []}'))})
    out = tmp_path / "run"
    (out / "stale").mkdir(parents=True)
    assert runs.prepare("synth", out, state) == 0
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == ["work/catalog.json"]
    assert not (out / "stale").exists()
    assert runs.prepare("bench", out, state) == 0 and not (out / "work").exists()
    cmd, env = runs.command("synth", 1, out, SimpleNamespace(kernelbench="/kb", seconds=30, ray=True))
    assert cmd[cmd.index("--seed") + 1] != "0" and cmd[-2:] == ["--ray", "local"]


def test_a_synthesis_run_s_start_up_and_its_rate_after_it(runs):
    """The results journal's `at`: the start-up is the time to this run's first result (earlier runs'
    results, from the saved state, do not count), the steady rate the tasks kept after it."""
    results = [{"ok": True, "at": 50.0},                                   # an earlier part's
               {"ok": False, "at": 130.0}, {"ok": True, "at": 160.0}, {"ok": True, "at": 220.0},
               {"ok": False, "at": 225.0}]
    got = runs.steady(results, began=100.0, ended=490.0)
    assert got == {"startup_s": 30.0, "steady_rate": round(2 / 360 * 3600, 1)}
    assert runs.steady([{"ok": True, "at": 150.0}], began=100.0, ended=200.0) == {}
    rows = runs.with_ratios([{"gpus": 1, "rate": 10.0, "steady_rate": 20.0},
                             {"gpus": 2, "rate": 18.0, "steady_rate": 38.0}])
    assert [r["steady_x_per_gpu"] for r in rows] == [1.0, 0.95]


def test_a_synthesis_measurement_starts_after_an_untimed_short_run(runs, monkeypatch, tmp_path):
    """A machine's first torch.compile builds Triton's own helpers: a short untimed run on every GPU
    comes first, so the first count measured (one GPU) does not pay it alone."""
    import sys

    calls = []

    def run_once(kind, count, out, args):
        calls.append((out.name, count, args.seconds))
        return {"kind": kind, "gpus": count, "wall_s": 1.0, "exit": 0, "tasks": 1, "rate": float(count)}

    monkeypatch.setattr(runs, "run_once", run_once)
    monkeypatch.setattr(sys, "argv", ["runs_scaling.py", "synth", "--counts", "1,2,4", "--seconds", "100",
                                      "--prime-seconds", "30"])
    runs.main()
    assert calls == [("prime", 4, 30.0), ("run-1", 1, 100.0), ("run-2", 2, 100.0), ("run-4", 4, 100.0)]


def test_a_runs_longest_task_and_tasks_in_flight(runs, tmp_path):
    """Read from the run's own record: a run of few tasks cannot end before its longest one."""
    from cuda_agent.bench.attempts import failed_attempt
    from cuda_agent.bench.store import RunStore

    store = RunStore(tmp_path)
    for key, seconds in (("level1/1", 4.0), ("level3/5", 30.0), ("level2/2", 6.0)):
        store.record_attempt(failed_attempt(key, 0, "missing", "", seconds=seconds))
    store.close()
    assert runs.task_times("bench", tmp_path, wall=20.0) == {"longest_s": 30.0, "longest_task": "level3/5",
                                                            "in_flight": 2.0}
    # where an evaluated task's time went: its result's phases
    from cuda_agent.bench.attempts import attempt_from_result
    from cuda_agent.env.result import EvalResult

    result = EvalResult(task="t", backend="cuda", compiled=True, correct=True,
                        phase_seconds={"compile": 31.74, "verify": 25.0, "baselines": 0.01})
    store = RunStore(tmp_path)
    store.record_attempt(attempt_from_result("level3/2", 0, result, seconds=60.0))
    store.close()
    times = runs.task_times("bench", tmp_path, wall=20.0)
    assert times["longest_task"] == "level3/2" and times["longest_phases"] == {"compile": 31.7, "verify": 25.0}
    # the command's own start-up and end, from when its tasks started and finished
    with sqlite3.connect(tmp_path / "bench.sqlite") as con:
        con.execute("UPDATE attempts SET finished = 1000.0 + seconds")
    times = runs.task_times("bench", tmp_path, wall=80.0, began=990.0, ended=1075.0)
    assert times["first_task_s"] == 10.0 and times["after_last_s"] == 15.0
    assert runs.task_times("baseline", tmp_path, wall=20.0) == {}   # no baselines recorded
    # a baseline's steps: the judge's start, torch.compile, the timed calls (of which waiting for the device)
    from cuda_agent.bench.store import BaselineRecord

    store = RunStore(tmp_path)
    store.record_baseline(BaselineRecord("level2/17", "measured", seconds=35.4,
                                         steps=json.dumps({"start": 2.04, "compile": 30.1, "timing": 3.2, "wait": 0.01})))
    store.close()
    times = runs.task_times("baseline", tmp_path, wall=40.0)
    assert times["longest_task"] == "level2/17" and times["longest_phases"] == {"start": 2.0, "compile": 30.1,
                                                                                "timing": 3.2}
    assert runs.task_times("bench", tmp_path / "none", wall=20.0) == {}
