"""The speed of light: a task's work (FLOPs and the fewest bytes) from its reference, the device's peak
(a datasheet table for GPUs, measured once per machine for the CPU), and the fraction a kernel reaches."""

from __future__ import annotations

import functools
import json

import pytest

from cuda_agent.env.measure import peaks
from cuda_agent.env.measure.peaks import Peak, cpu_peak, gpu_peak, measure_cpu_peak
from cuda_agent.env.measure.speed_of_light import describe, held_against, speed_of_light
from cuda_agent.env.measure.work import Work, task_work
from cuda_agent.env.result import EvalResult
from cuda_agent.tasks import Task

MATMUL = '''\
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn({m}, {k}), torch.randn({k}, {n})]


def get_init_inputs():
    return []
'''

LINEAR = '''\
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features_in, features_out):
        super().__init__()
        self.linear = nn.Linear(features_in, features_out)
        self.register_buffer("scale", torch.ones(features_out, dtype=torch.bfloat16))

    def forward(self, x):
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(64, 256)]


def get_init_inputs():
    return [256, 512]
'''

ELEMENTWISE = '''\
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.sigmoid(x).to(torch.float16)


def get_inputs():
    return [torch.randn(300, 1000)]


def get_init_inputs():
    return []
'''

DATA_DEPENDENT = ELEMENTWISE.replace("return torch.sigmoid(x).to(torch.float16)",
                                     "return x[: int(x.sum().item()) % 7 + 1]")


def test_flops_of_a_matmul_task_are_2mnk_and_its_bytes_both_operands_and_the_result():
    m, n, k = 96, 80, 112
    work = task_work(Task("matmul", MATMUL.format(m=m, n=n, k=k)))
    assert work.flops == 2 * m * n * k
    assert work.bytes == 4 * (m * k + k * n + m * n)
    assert work.dtype == "float32"


def test_weights_and_buffers_are_read_as_inputs():
    work = task_work(Task("linear", LINEAR))
    assert work.flops == 2 * 64 * 256 * 512          # relu and the bias count no FLOPs
    weights = 4 * (256 * 512 + 512) + 2 * 512          # float32 weight and bias, the bfloat16 buffer
    assert work.bytes == 4 * 64 * 256 + weights + 4 * 64 * 512


def test_an_elementwise_task_counts_no_flops_and_moves_its_input_and_output_once():
    work = task_work(Task("elementwise", ELEMENTWISE))
    assert work.flops is None
    assert work.bytes == 300 * 1000 * 4 + 300 * 1000 * 2   # float32 in, float16 out
    assert work.dtype == "float32"                          # the dtype holding most of the bytes


def test_a_task_meta_cannot_run_has_no_work_and_no_speed_of_light(tmp_path):
    task = Task("data_dependent", DATA_DEPENDENT)
    assert task_work(task) is None
    assert speed_of_light(task, "NVIDIA H100 80GB HBM3", "cuda", 1.0, tmp_path) is None


@pytest.mark.parametrize("name, table, gbps", [
    ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM", 3350.0),
    ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe", 2000.0),
    ("NVIDIA H100 NVL", "NVIDIA H100 NVL", 3900.0),
    ("NVIDIA H200", "NVIDIA H200 SXM", 4800.0),
    ("NVIDIA H200 NVL", "NVIDIA H200 NVL", 4800.0),
])
def test_the_gpu_table_is_looked_up_by_the_device_name(name, table, gbps):
    peak = gpu_peak(name)
    assert peak.name.startswith(table) and peak.bandwidth_gbps == gbps
    assert peak.gflops["bfloat16"] == peak.gflops["float16"] > peak.gflops["tfloat32"] > peak.gflops["float32"]


def test_an_unknown_gpu_gets_rates_but_no_fraction(tmp_path):
    assert gpu_peak("NVIDIA A100-SXM4-80GB") is None
    sol = speed_of_light(Task("elementwise", ELEMENTWISE), "NVIDIA A100-SXM4-80GB", "cuda", 0.5, tmp_path)
    assert sol.achieved_gbps == pytest.approx(1.8e6 / 0.5e-3 / 1e9)
    assert sol.fraction is None and sol.bound is None and sol.peak is None
    assert "no peak is known for NVIDIA A100-SXM4-80GB" in describe(sol, "NVIDIA A100-SXM4-80GB")[1]


def test_the_fraction_from_a_known_time_is_the_roofline_floor_over_it():
    h100 = gpu_peak("NVIDIA H100 80GB HBM3")
    # 6.7 MB at 3350 GB/s: a 2 us floor; 1.34 GFLOP at 67 TFLOP/s (float32): a 20 us floor
    sol = held_against(Work(flops=1_340_000_000, bytes=6_700_000, dtype="float32"), 0.080, h100)
    assert sol.bound == "compute" and sol.floor_ms == pytest.approx(0.020)
    assert sol.fraction == pytest.approx(0.25)
    assert sol.achieved_gflops == pytest.approx(1.34e9 / 80e-6 / 1e9)
    # the same bytes with a tenth of the FLOPs in bfloat16 (989.5 TFLOP/s): the memory floor decides
    sol = held_against(Work(flops=134_000_000, bytes=6_700_000, dtype="bfloat16"), 0.004, h100)
    assert sol.bound == "memory" and sol.fraction == pytest.approx(0.5)
    # no FLOPs counted: the memory bound alone
    sol = held_against(Work(flops=None, bytes=33_500_000, dtype="float32"), 0.1, h100)
    assert sol.bound == "memory" and sol.fraction == pytest.approx(0.1) and sol.achieved_gflops is None


def test_the_figures_serialise_with_the_result():
    sol = held_against(Work(flops=10**9, bytes=10**7, dtype="float32"), 1.0, gpu_peak("NVIDIA H200"))
    result = EvalResult(task="t", backend="cuda", speed_of_light=sol)
    again = EvalResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again.speed_of_light == sol


def test_the_cpu_peak_is_measured_once_per_machine_and_reused(tmp_path, monkeypatch):
    measured = []

    def small_measure():   # the real measurement, at sizes a test can afford
        measured.append(1)
        return measure_cpu_peak(copy_bytes=8 << 20, matmul_size=192, repeats=2)

    first = cpu_peak(tmp_path, measure=small_measure)
    assert first.bandwidth_gbps > 0 and first.gflops["float32"] > 0 and "measured" in first.name
    assert cpu_peak(tmp_path, measure=small_measure) == first and len(measured) == 1
    [stored] = (tmp_path / "peaks").glob("cpu-*.json")
    assert Peak(**json.loads(stored.read_text())) == first
    cpu_peak(tmp_path, measure=small_measure, remeasure=True)       # `cuda-agent cache peak`
    assert len(measured) == 2
    monkeypatch.setattr(peaks, "cpu_model", lambda: "another CPU")  # another machine: its own entry
    cpu_peak(tmp_path, measure=small_measure)
    assert len(measured) == 3 and len(list((tmp_path / "peaks").glob("cpu-*.json"))) == 2


def test_the_cpu_backend_is_held_against_the_cached_cpu_peak(tmp_path):
    stored = Peak("this CPU, one thread (test; measured)", 10.0, {"float32": 100.0})
    cpu_peak(tmp_path, measure=lambda: stored)
    m, n, k = 96, 80, 112
    sol = speed_of_light(Task("matmul", MATMUL.format(m=m, n=n, k=k)), "cpu", "cpu", 0.01, tmp_path)
    assert sol.peak == stored.name and sol.peak_gflops == 100.0
    assert sol.bound == "compute" and sol.fraction == pytest.approx(2 * m * n * k / 100e9 / 1e-5)
    assert cpu_peak(tmp_path, measure=functools.partial(pytest.fail, "measured again")) == stored


TAMPERING = '''\
import json
import torch
import torch.nn as nn
import torch.utils.flop_counter

import cuda_extension

# the candidate's own process: a FLOP counter that counts a thousand times more, a forged CPU peak
torch.utils.flop_counter.FlopCounterMode.get_total_flops = lambda self: 10 ** 15
try:
    with open({peak_file!r}, "w") as forged:
        json.dump({{"name": "forged", "bandwidth_gbps": 1e-6, "gflops": {{"float32": 1e-6}}}}, forged)
    print("forged the peak")
except OSError as exc:
    print("could not forge the peak:", type(exc).__name__)


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return cuda_extension.bias_relu(x, self.bias)
'''


def test_a_candidate_cannot_change_its_work_or_the_peak(cache_dir):
    """The work comes from the task's source in the harness's process and the peak from the harness's
    cache: a candidate patching torch's FLOP counter in its process or writing the cached peak changes
    neither (the sandbox does not see the cache folder). The guard is off so that the static check lets the
    candidate try."""
    from cuda_agent.env import evaluate
    from cuda_agent.env.measure.peaks import machine_key
    from tests.env.helpers import cpu_config, cpu_workspace, example_task

    peak = cpu_peak(cache_dir)
    peak_file = cache_dir / "peaks" / f"cpu-{machine_key()}.json"
    result = evaluate(example_task(), cpu_workspace(model_new=TAMPERING.format(peak_file=str(peak_file))),
                      cpu_config(cache_dir, baselines=False, guard=False))
    assert result.correct, result.error
    assert "could not forge the peak" in result.log   # it ran, and the cache was out of its reach
    sol = result.speed_of_light
    assert sol.peak == peak.name and sol.peak_gbps == peak.bandwidth_gbps
    assert Peak(**json.loads(peak_file.read_text())) == peak
    assert sol.flops is None and sol.bytes == 4 * (512 * 1024 * 2 + 1024)   # x, bias read; out written
    assert sol.kernel_ms == result.kernel_ms and sol.fraction == pytest.approx(sol.floor_ms / result.kernel_ms)


def test_a_cache_that_cannot_be_written_still_gives_the_measured_peak(tmp_path):
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    peak = Peak("measured here", 5.0, {"float32": 50.0})
    assert cpu_peak(not_a_folder, measure=lambda: peak) == peak
