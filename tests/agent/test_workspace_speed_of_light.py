"""The profile's speed-of-light lines: the task's work and the kernel's fraction of the device's peak,
as the scripts, tools and MCP show them (workspace.format_result)."""

from __future__ import annotations

from cuda_agent.agent.workspace import format_result
from cuda_agent.env.measure.peaks import gpu_peak
from cuda_agent.env.measure.speed_of_light import held_against
from cuda_agent.env.measure.work import Work, task_work
from cuda_agent.env.result import EvalResult
from cuda_agent.tasks import Task
from tests.env.test_speed_of_light import ELEMENTWISE, MATMUL

H100 = "NVIDIA H100 80GB HBM3"


def profiled(sol, device: str = H100) -> str:
    r = EvalResult(task="t", backend="cuda", device=device, compiled=True, correct=True, kernel_ms=sol.kernel_ms,
                   eager_ms=2 * sol.kernel_ms, compile_ms=2 * sol.kernel_ms, speedup_vs_eager=2.0,
                   speedup_vs_compile=2.0, reward=3, speed_of_light=sol)
    return format_result("profile", r)


def test_a_compute_bound_task_shows_its_flops_bytes_and_fraction_of_the_flop_peak():
    work = task_work(Task("matmul", MATMUL.format(m=1024, n=1024, k=1024)))   # 2.15 GFLOP, 12.6 MB
    text = profiled(held_against(work, 0.155, gpu_peak(H100)))
    assert "  work: 2.15 GFLOP, 12.6 MB moved at least (float32;" in text
    # 2.15 GFLOP at 67 TFLOP/s: 0.0321 ms, 21 % of 0.155 ms; 12.6 MB / 0.155 ms = 81.2 GB/s
    assert ("  speed of light: 21 % of the float32 FLOP peak of NVIDIA H100 SXM (NVIDIA datasheet): compute-bound, "
            "FLOPs / peak 0.0321 ms against your 0.155 ms; you reach 81.2 GB/s, 13.9 TFLOP/s") in text
    lines = text.splitlines()
    assert lines.index(next(l for l in lines if l.startswith("  work:"))) < lines.index(
        next(l for l in lines if l.startswith("reward") or l.startswith("  reward")))   # beside the times


def test_an_elementwise_task_is_memory_bound_and_says_no_flops_were_counted():
    work = task_work(Task("elementwise", ELEMENTWISE))   # 1.8 MB
    text = profiled(held_against(work, 0.006, gpu_peak(H100)))
    assert "work: no FLOPs counted (no matmul, convolution or attention), 1.8 MB moved at least" in text
    # 1.8 MB at 3350 GB/s: 0.000537 ms, 9.0 % of 0.006 ms
    assert ("speed of light: 9.0 % of the memory bandwidth of NVIDIA H100 SXM (NVIDIA datasheet): memory-bound, "
            "bytes / peak 0.000537 ms against your 0.006 ms; you reach 300 GB/s") in text


def test_an_unknown_gpu_gets_no_fraction_and_a_result_without_figures_no_lines():
    sol = held_against(Work(flops=None, bytes=1_800_000, dtype="float32"), 0.0054, None)
    text = profiled(sol, "NVIDIA A100-SXM4-80GB")
    assert "no peak is known for NVIDIA A100-SXM4-80GB" in text and "% of the" not in text
    bare = EvalResult(task="t", backend="cuda", compiled=True, correct=True, kernel_ms=1.0, eager_ms=2.0,
                      compile_ms=2.0, speedup_vs_eager=2.0, speedup_vs_compile=2.0, reward=3)
    assert "work:" not in format_result("profile", bare) and "speed of light" not in format_result("profile", bare)
