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
