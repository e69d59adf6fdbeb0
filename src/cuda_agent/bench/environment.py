"""What a run ran on: GPUs, driver, torch, CUDA, compilers, cuda-agent; recorded with every session.

GPU names come from torch in a short child process, so they match what the evaluations record
(`EvalResult.device`) without this process creating a CUDA context of its own.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from functools import lru_cache

_PROBE = """
import json, torch
count = torch.cuda.device_count() if torch.cuda.is_available() else 0
gpus = [torch.cuda.get_device_name(i) for i in range(count)]
memory = [torch.cuda.get_device_properties(i).total_memory for i in range(count)]
print(json.dumps({"torch": torch.__version__, "torch_cuda": torch.version.cuda, "gpus": gpus, "gpu_memory": memory}))
"""


def _run(cmd: list[str], timeout: float = 60.0) -> str | None:
    if shutil.which(cmd[0]) is None:
        return None
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def torch_probe(backend: str = "cuda") -> dict:
    """torch's version and GPU names; on the CPU backend in this process (no GPU to name)."""
    if backend != "cuda":
        import torch

        return {"torch": torch.__version__, "torch_cuda": torch.version.cuda, "gpus": [], "gpu_memory": []}
    return dict(_cuda_probe())


@lru_cache(maxsize=None)
def _cuda_probe() -> dict:
    # once per process: a run asks for its GPUs' memory and records its environment
    text = _run([sys.executable, "-c", _PROBE], timeout=120.0)
    try:
        return json.loads(text.splitlines()[-1]) if text else {}
    except (ValueError, IndexError):
        return {}


def describe_environment(backend: str = "cuda") -> dict:
    """Plain data (JSON-ready) about this machine and its software."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        ours = version("cuda-agent")
    except PackageNotFoundError:
        ours = None
    probe = torch_probe(backend)
    smi = _run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"])
    nvcc = _run(["nvcc", "--version"])
    return {
        "host": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "torch": probe.get("torch"),
        "torch_cuda": probe.get("torch_cuda"),
        "gpus": probe.get("gpus", []),
        "gpu_memory": probe.get("gpu_memory", []),
        "nvidia_smi": smi.splitlines() if smi else [],
        "nvcc": nvcc.splitlines()[-1] if nvcc else None,
        "cuda_agent": ours,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
