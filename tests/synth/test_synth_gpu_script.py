"""benchmarks/synth_gpu.py (the GPU session's `ops6k` step): the `cuda-agent synth` command it runs,
checked here so that an Ops-6K part through Ray does not fail on the script's own logic."""

import importlib.util
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("synth_gpu", ROOT / "benchmarks" / "synth_gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _args(**over):
    base = dict(num=6000, out=Path("/tmp/run"), seed=0, kernelbench=Path(".kb"), workers=None, window=None, ray=None,
                timeout=None)
    return SimpleNamespace(**{**base, **over})


def test_the_command_resumes_the_build_with_its_settings_and_goes_through_ray_only_when_asked():
    script = _script()
    local = script.pipeline_command(_args())
    assert local[local.index("synth") + 1:local.index("synth") + 3] == ["--num", "6000"]
    assert "--ray" not in local and local[local.index("--kernelbench") + 1] == ".kb"
    through_ray = script.pipeline_command(_args(ray="local", workers=48))
    assert through_ray[through_ray.index("--ray") + 1] == "local"
    assert through_ray[through_ray.index("--workers") + 1] == "48"
    assert "--timeout" not in local   # the pipeline's own unless asked
    shorter = script.pipeline_command(_args(timeout=300.0))
    assert shorter[shorter.index("--timeout") + 1] == "300.0"


def test_a_resumed_part_projects_from_its_own_tasks_only(tmp_path):
    """A part that resumes a build reports its own rate: the tasks the earlier parts kept are in the same
    journals but not in this part's wall time."""
    import json

    work = tmp_path / "work"
    work.mkdir()
    (work / "candidates.jsonl").write_text("".join(json.dumps({"id": f"c{i}"}) + "\n" for i in range(4)))
    records = [{"id": "c0", "ok": True, "seconds": 5.0, "eager_ms": 2.0, "at": 100.0},
               {"id": "c1", "ok": True, "seconds": 5.0, "eager_ms": 2.0, "at": 150.0},
               {"id": "c2", "ok": True, "seconds": 5.0, "eager_ms": 2.0, "at": 1000.0},
               {"id": "c3", "ok": False, "reason": "timeout", "seconds": 0.0, "at": 1010.0}]
    (work / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    projection = _script().report(tmp_path, wall_s=36.0, workers=4, gpus_here=1, since=900.0)
    assert projection["observed_tasks_per_hour"] == 100.0   # 1 task in 36 s, not 3
