"""A task with KernelBench level1/19's shapes (ReLU over 4096 x 393216 float32: 6 GiB in, 6 GiB out;
normal inputs, so that a kernel wrong for negative values is wrong on every draw) and its hand-written
solution, for the GPU tests and benchmarks/large_tasks.py; and a watch of the
GPU's memory in use while an evaluation runs (nvidia-smi, so this process makes no CUDA context)."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from pathlib import Path

from cuda_agent.tasks import Solution, Task

REPO = Path(__file__).resolve().parents[2]
RELU_SOLUTION = REPO / "benchmarks" / "kernelbench_solutions" / "level1" / "19"

LARGE_RELU = Task("large_relu", '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


batch_size = 4096
dim = 393216


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
''')


def relu_solution(negative: str = "0.f") -> Solution:
    """The hand-written ReLU (benchmarks/kernelbench_solutions/level1/19); `negative`: what its kernel
    returns for x <= 0 instead of 0 (a wrong solution)."""
    files = {f"kernels/{p.name}": p.read_text() for p in sorted((RELU_SOLUTION / "kernels").iterdir())}
    files["model_new.py"] = (RELU_SOLUTION / "model_new.py").read_text()
    files["kernels/relu.cu"] = files["kernels/relu.cu"].replace("x > 0.f ? x : 0.f", f"x > 0.f ? x : {negative}")
    return Solution(files)


class MemoryWatch:
    """The GPU's memory in use, polled every `period` seconds while the block runs (`peak_mib`)."""

    def __init__(self, gpu: int = 0, period: float = 0.1):
        self.gpu, self.period, self.peak_mib, self.samples = gpu, period, None, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        if shutil.which("nvidia-smi") is None:
            return
        while not self._stop.is_set():
            try:
                out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits",
                                      "-i", str(self.gpu)], capture_output=True, text=True, timeout=5).stdout
                used = int(out.strip().splitlines()[0])
                self.peak_mib = used if self.peak_mib is None else max(self.peak_mib, used)
                self.samples += 1
            except (OSError, ValueError, IndexError, subprocess.SubprocessError):
                pass
            time.sleep(self.period)

    def __enter__(self) -> "MemoryWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def describe(result, wall_s: float, watch: MemoryWatch | None = None) -> str:
    """Where an evaluation's time went, its verdict and warnings, and the GPU memory it peaked at."""
    phases = " ".join(f"{k}={v:.2f}" for k, v in sorted(result.phase_seconds.items()) if not k.startswith("trace."))
    traced = sorted(((v, k) for k, v in result.phase_seconds.items() if k.startswith("trace.")), reverse=True)[:12]
    message = result.error.message if result.error else ""
    if len(message) > 1200:   # a traceback: its first lines and its last (the exception itself)
        message = message[:400] + "\n  [...]\n" + message[-800:]
    error = f"{result.error.phase}/{result.error.rule}: {message}" if result.error else "none"
    peak = f"{watch.peak_mib} MiB ({watch.samples} samples)" if watch and watch.peak_mib is not None else "unknown"
    return (f"wall {wall_s:.1f} s | correct {result.correct} | error {error} | kernel {result.kernel_ms} ms | "
            f"eager {result.eager_ms} ms | reward {result.reward} | device {result.device}\n"
            f"  phases: {phases}\n  slowest traced steps: {' '.join(f'{k}={v:.2f}' for v, k in traced)}\n"
            f"  warnings: {result.warnings}\n  GPU memory peak: {peak}")
