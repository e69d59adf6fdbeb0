"""benchmarks/pool_scaling.py, the GPU session's `scaling` step: its plan (device counts, alternated
rounds, the same job mix at every count), its ratios, and one real run on two CPU slots, so its first
use on a GPU machine does not fail on the script's own logic."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "pool_scaling.py"


@pytest.fixture(scope="module")
def scaling():
    spec = importlib.util.spec_from_file_location("pool_scaling", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_counts_rounds_and_jobs(scaling):
    assert scaling.default_counts(1) == [1]
    assert scaling.default_counts(4) == [1, 2, 4]
    assert scaling.default_counts(3) == [1, 2, 3]
    assert scaling.default_counts(8) == [1, 2, 4, 8]
    assert scaling.round_orders([4, 1, 2], 3) == [[1, 2, 4], [4, 2, 1], [1, 2, 4]]
    kernels = [("a", "task a", "sol a"), ("b", "task b", "sol b"), ("c", "task c", "sol c"), ("d", "task d", "sol d")]
    two = scaling.jobs_for(kernels, 2, 6)
    assert len(two) == 12 and two[:4] == [("task a", "sol a"), ("task b", "sol b"), ("task c", "sol c"),
                                          ("task d", "sol d")]
    assert {job: two.count(job) for job in two} == {job: 3 for job in set(two)}   # the same mix per device


def test_ratios_are_against_the_mean_of_the_one_device_rows_of_the_same_mode(scaling):
    rates = [("pool", 1, 1.0), ("pool", 2, 1.9), ("pool", 1, 1.2), ("pool", 2, 1.5), ("service", 1, 0.5),
             ("service", 2, 1.0)]
    rows = [{"mode": mode, "devices": devices, "evals_per_s": rate} for mode, devices, rate in rates]
    summary = scaling.summarise(rows)
    assert summary["pool"][1]["mean"] == 1.1 and summary["pool"][2]["mean"] == 1.7
    assert summary["pool"][2]["ratio_vs_1"] == round(1.7 / 1.1, 2)
    assert summary["pool"][2]["efficiency"] == round(1.7 / 1.1 / 2, 2)
    assert summary["service"][2]["efficiency"] == 1.0
    assert rows[1]["ratio_vs_1"] == round(1.9 / 1.1, 2)   # each row too, against its mode's one-device mean


def test_the_slowest_evaluations_are_named_with_their_largest_phases_and_warnings(scaling):
    from types import SimpleNamespace

    def result(task, phases, warnings=()):
        return SimpleNamespace(task=task, phase_seconds=phases, warnings=list(warnings))

    results = [result("a", {"compile": 0.5, "verify": 1.0}), result("b", {"compile": 20.0, "trace.startup.judge": 18.5},
                                                                   ["the judge did not start: started anew"]),
               result("c", {"compile": 0.4, "profile": 5.0}), result("d", {"compile": 0.3})]
    own = [1.5, 20.0, 5.4, 0.3]
    tail = scaling.slowest(results, own, n=2)
    assert [t["task"] for t in tail] == ["b", "c"] and tail[0]["own_s"] == 20.0
    assert list(tail[0]["phases"]) == ["compile", "trace.startup.judge"]   # largest first
    assert tail[0]["warnings"] == ["the judge did not start: started anew"] and tail[1]["warnings"] == []


def test_the_gpu_jobs_are_the_four_fidelity_kernels(scaling):
    kernels = scaling.load_kernels("cuda")   # files only: no GPU needed to load them
    assert len(kernels) == 4
    assert all(solution.kernel_files for _, _, solution in kernels)
    assert len({task.name for _, task, _ in kernels}) == 4


def _run_on_cpu_slots(tmp_path, cache_dir, counts: str, service: str):
    """The script on CPU slots, one short evaluation per slot: (its run, the JSON it wrote)."""
    out = tmp_path / "scaling.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, str(SCRIPT), "--backend", "cpu", "--counts", counts, "--evals", "1",
                          "--rounds", "1", "--quick", "--service", service, "--cache-dir", str(cache_dir),
                          "--json", str(out)], capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    return run, json.loads(out.read_text())


def test_a_run_on_one_and_two_cpu_slots_writes_its_rows_and_ratios(tmp_path, cache_dir):
    run, data = _run_on_cpu_slots(tmp_path, cache_dir, "1,2", "off")
    assert [(r["mode"], r["devices"], r["evals"], r["correct"]) for r in data["rows"]] == [("pool", 1, 1, 1),
                                                                                         ("pool", 2, 2, 2)]
    assert data["service"] == "off" and data["skipped"] == []
    assert data["summary"]["pool"]["1"]["ratio_vs_1"] == 1.0
    assert data["summary"]["pool"]["2"]["efficiency"] > 0
    assert "x / devices" in run.stdout


@pytest.mark.slow
def test_the_service_alone_on_a_local_ray_cluster(tmp_path, cache_dir):
    """`--service only`: the Ray service's rows without the pool's (the GPU session's budget ran out
    before the service at four GPUs twice, the pool's rows measured first)."""
    pytest.importorskip("ray")
    _, data = _run_on_cpu_slots(tmp_path, cache_dir, "1", "only")
    assert [(r["mode"], r["devices"], r["correct"]) for r in data["rows"]] == [("service", 1, 1)]
    assert data["service"] == "measured"
