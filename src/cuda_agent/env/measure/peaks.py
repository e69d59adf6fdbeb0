"""A device's peak memory bandwidth and FLOP rates: the speed of light a kernel is held against.

GPUs: NVIDIA's datasheet figures, looked up by `torch.cuda.get_device_name`; a GPU not in the table has
no peak (nothing is guessed). The CPU: measured once per machine (one thread, as the candidate and the
eager reference run on the CPU backend: a large copy for bandwidth, a large float32 matmul through
torch for FLOP/s), cached under the cache folder keyed by the CPU's model, its core count and torch's
version; `cpu_peak(..., remeasure=True)` (`cuda-agent cache peak`) measures it again.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class Peak:
    name: str                   # what the figures are of, and where they come from
    bandwidth_gbps: float       # memory bandwidth, 1e9 bytes per second
    gflops: dict                # dtype name ("float32", "bfloat16", ...) -> 1e9 FLOP per second


# NVIDIA's specifications (dense rates: the tensor-core figures are given "with sparsity", twice the dense):
#   H100: "NVIDIA H100 Tensor Core GPU" datasheet and https://www.nvidia.com/en-us/data-center/h100/
#         SXM: FP32 67 TFLOPS, TF32 989 / 2, BF16 and FP16 1,979 / 2, FP64 34, 3.35 TB/s (HBM3)
#         NVL: FP32 60, TF32 835 / 2, BF16 and FP16 1,671 / 2, FP64 30, 3.9 TB/s
#         PCIe: FP32 51, TF32 756 / 2, BF16 and FP16 1,513 / 2, FP64 26, 2 TB/s
#   H200: "NVIDIA H200 Tensor Core GPU" datasheet and https://www.nvidia.com/en-us/data-center/h200/
#         SXM: FP32 67, TF32 989 / 2, BF16 and FP16 1,979 / 2, FP64 34, 4.8 TB/s (HBM3e)
#         NVL: FP32 60, TF32 835 / 2, BF16 and FP16 1,671 / 2, FP64 30, 4.8 TB/s
# float32 is held against the FP32 (non-tensor) rate: tasks are verified at float32 accuracy, which TF32
# does not keep; "tfloat32" is listed for reference.
def _gpu(name: str, tbps: float, fp64: float, fp32: float, tf32_sparse: float, half_sparse: float) -> Peak:
    tera = 1000.0
    return Peak(f"{name} (NVIDIA datasheet)", tbps * 1000.0,
                {"float64": fp64 * tera, "float32": fp32 * tera, "tfloat32": tf32_sparse / 2 * tera,
                 "bfloat16": half_sparse / 2 * tera, "float16": half_sparse / 2 * tera})


# (words in torch.cuda.get_device_name, peak), the first whose words all appear wins: the variants first
GPU_PEAKS = (
    (("H100", "NVL"), _gpu("NVIDIA H100 NVL", 3.9, 30, 60, 835, 1671)),
    (("H100", "PCIe"), _gpu("NVIDIA H100 PCIe", 2.0, 26, 51, 756, 1513)),
    (("H100",), _gpu("NVIDIA H100 SXM", 3.35, 34, 67, 989, 1979)),       # "NVIDIA H100 80GB HBM3"
    (("H200", "NVL"), _gpu("NVIDIA H200 NVL", 4.8, 30, 60, 835, 1671)),
    (("H200",), _gpu("NVIDIA H200 SXM", 4.8, 34, 67, 989, 1979)),         # "NVIDIA H200"
)


def gpu_peak(device_name: str) -> Peak | None:
    """The datasheet peak of the GPU `torch.cuda.get_device_name` calls `device_name`, None when not tabled."""
    for words, peak in GPU_PEAKS:
        if all(w.lower() in device_name.lower() for w in words):
            return peak
    return None


def device_peak(device_name: str, backend: str, cache_dir: Path) -> Peak | None:
    """The peak of the device an evaluation ran on: the GPU's datasheet, or this machine's measured CPU."""
    if backend == "cpu":
        return cpu_peak(cache_dir)
    return gpu_peak(device_name)


# -- the CPU, measured ------------------------------------------------------------------------------------

COPY_BYTES = 128 * 1024 * 1024   # far beyond the caches: memory's bandwidth, not L3's
MATMUL_SIZE = 1024               # a 2.1 GFLOP float32 matmul
REPEATS = 5                      # the best of these: the peak, not the noise


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_key() -> str:
    """This machine as the CPU peak depends on it: the CPU's model, the cores usable, torch's version."""
    import torch

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    key = {"cpu": cpu_model(), "cores": cores, "torch": torch.__version__}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def _best_seconds(run, repeats: int) -> float:
    run()   # the first touches the memory and warms the library
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def measure_cpu_peak(copy_bytes: int = COPY_BYTES, matmul_size: int = MATMUL_SIZE, repeats: int = REPEATS) -> Peak:
    """One thread's copy bandwidth (bytes read plus bytes written) and float32 matmul rate, measured now."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        source = torch.ones(copy_bytes // 4, dtype=torch.float32)
        target = torch.empty_like(source)
        copy_s = _best_seconds(lambda: target.copy_(source), repeats)
        del source, target
        a = torch.randn(matmul_size, matmul_size)
        b = torch.randn(matmul_size, matmul_size)
        matmul_s = _best_seconds(lambda: torch.mm(a, b), repeats)
    finally:
        torch.set_num_threads(threads)
    return Peak(f"this CPU, one thread ({cpu_model()}; measured)", 2 * copy_bytes / copy_s / 1e9,
                {"float32": 2 * matmul_size ** 3 / matmul_s / 1e9})


def cpu_peak(cache_dir: Path, *, remeasure: bool = False, measure=measure_cpu_peak) -> Peak:
    """This machine's CPU peak: measured once (`measure`) and kept under `cache_dir`/peaks."""
    path = Path(cache_dir) / "peaks" / f"cpu-{machine_key()}.json"
    if not remeasure:
        try:
            return Peak(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            pass   # missing or unreadable: measured now
    peak = measure()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
        tmp.write_text(json.dumps(asdict(peak)))
        os.replace(tmp, path)
    except OSError:
        pass   # a read-only cache: measured again next time, never a failed evaluation
    return peak
