"""Solutions for GPU tests: kernel folders beside this file, combined with a model_new.py."""

from __future__ import annotations

from pathlib import Path

from cuda_agent.env import EvalConfig
from cuda_agent.tasks import Solution, load_solution

SOLUTIONS = Path(__file__).resolve().parent / "solutions"


def workspace(folder: str, model_new: str = "model_new.py") -> Solution:
    root = SOLUTIONS / folder
    files = {f"kernels/{p.name}": p.read_text() for p in sorted((root / "kernels").iterdir())}
    files["model_new.py"] = (root / model_new).read_text()
    return Solution(files)


def example_with_kernel(cu_file: str) -> Solution:
    """The example's CUDA workspace with its kernel file replaced (binding and model_new.py kept)."""
    from tests.env.helpers import example_solution

    return example_solution("cuda", (SOLUTIONS / cu_file).read_text())


def gpu_config(cache_dir: Path, **overrides) -> EvalConfig:
    settings = dict(backend="cuda", cache_dir=cache_dir, timeout_verify=120.0)
    settings.update(overrides)
    return EvalConfig(**settings)


__all__ = ["workspace", "example_with_kernel", "gpu_config", "load_solution", "SOLUTIONS"]
