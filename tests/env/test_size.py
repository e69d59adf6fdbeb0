"""Tasks too large for the machine: their memory is measured on the meta device (nothing is
allocated), refused with the sizes and the machine's memory named, and `--scale` shrinks their
inputs while the shapes keep their structure."""

from __future__ import annotations

import pytest
import torch

from cuda_agent.env.infra.capacity import needed_bytes, too_large
from cuda_agent.tasks import Task, TaskError, load_task
from cuda_agent.env.infra.task_child import estimate_footprint
from cuda_agent.tasks.scale import input_sizes, scale_task, scaled_size
from tests.env.helpers import EXAMPLES, example_task


def run_task(task: Task):
    """The task's forward for real (small tasks only): output of Model(*init)(*inputs)."""
    namespace: dict = {}
    exec(compile(task.code, task.name, "exec"), namespace)
    torch.manual_seed(0)
    return namespace["Model"](*namespace["get_init_inputs"]())(*namespace["get_inputs"]())


def test_footprint_of_the_example_matches_its_tensors():
    fp = estimate_footprint(example_task())
    assert (fp.input_bytes, fp.output_bytes, fp.param_bytes) == (512 * 1024 * 4, 512 * 1024 * 4, 1024 * 4)


def test_footprint_of_kernelbench_relu_costs_nothing(kernelbench):
    fp = estimate_footprint(load_task("level1/19", kernelbench))
    assert fp.input_bytes == fp.output_bytes == 4096 * 393216 * 4 and fp.param_bytes == 0   # 6.4 GB each


def test_footprint_falls_back_when_meta_cannot_run_the_forward():
    code = (EXAMPLES / "model.py").read_text().replace("return torch.relu(x + self.bias)",
                                                       "return x * float(x.sum().item())")
    fp = estimate_footprint(Task("item", code))
    assert fp.input_bytes == 512 * 1024 * 4 and fp.output_bytes is None and fp.param_bytes == 1024 * 4
    broken = Task("broken", code.replace("def get_inputs():", "def get_inputs():\n    raise ValueError\n"))
    assert estimate_footprint(broken) is None


def test_needed_memory_counts_both_processes_at_their_peaks():
    fp = estimate_footprint(example_task())
    two_mb = 512 * 1024 * 4
    # the judge's comparison (reference, copy, four outputs' temporaries) outweighs its timed draws here
    judge, candidate = 4096 + 2 * two_mb + 4 * two_mb, 4096 + 4 * two_mb
    cpu = needed_bytes(fp, "cpu", trials=5)
    assert cpu.host == judge + candidate + two_mb and cpu.device == 0
    gpu = needed_bytes(fp, "cuda", trials=5)
    assert gpu.device == judge + candidate and gpu.host == two_mb


def test_too_large_names_sizes_memory_and_a_scale_that_fits(kernelbench):
    relu = load_task("level1/19", kernelbench)
    message = too_large(relu, "cpu", 5, host=24 << 30)
    assert message.startswith("level1/19_ReLU is too large for this machine: one input set is 6.4 GB")
    assert "25.8 GB is available" in message and "--scale 0.5" in message
    assert too_large(relu, "cpu", 5, host=1 << 40) is None
    assert "GPU memory" in too_large(relu, "cuda", 5, host=1 << 40, device=16 << 30)
    assert too_large(example_task(), "cpu", 5, host=1 << 30) is None


def test_scale_relu_keeps_its_structure(kernelbench):
    relu = load_task("level1/19", kernelbench)
    scaled = scale_task(relu, 0.125)
    assert scaled.sizes == {"batch_size": (4096, 512), "dim": (393216, 49152)}
    assert "batch_size = 512\ndim = 49152\n" in scaled.task.code and scaled.task.name.endswith("(scale 0.125)")
    assert scaled.task.code.replace("512", "4096", 1).replace("49152", "393216") == relu.code


def test_scale_a_conv_task_leaves_channels_and_kernel_alone(kernelbench):
    conv = load_task("level2/1", kernelbench)     # Conv2d + ReLU + bias: batch 128, 64->128 channels, 128x128
    scaled = scale_task(conv, 0.125)
    assert scaled.sizes == {"batch_size": (128, 16), "height": (128, 16), "width": (128, 16)}
    assert "in_channels  = 64" in scaled.task.code and "kernel_size = 3" in scaled.task.code
    out = run_task(scaled.task)
    assert out.shape == (16, 128, 14, 14)          # same rank and channels; smaller batch and image


def test_scale_rewrites_sizes_inside_shape_tuples_that_must_agree(kernelbench):
    hinge = scale_task(load_task("level1/100", kernelbench), 0.125)   # (batch, *input_shape) * (batch,)
    assert hinge.sizes == {"batch_size": (32768, 4096), "input_shape[0]": (32768, 4096)}
    assert run_task(hinge.task).shape == ()


def test_scale_refuses_what_it_cannot_shrink_and_bad_factors():
    fixed = Task("fixed", (EXAMPLES / "model.py").read_text().replace("torch.randn(batch, features)",
                                                                      "torch.randn(512, features)"))
    with pytest.raises(TaskError, match="no module-level size constant"):
        scale_task(fixed, 0.5)
    for factor in (0, 1.5, -1):
        with pytest.raises(ValueError, match="--scale must be above 0 and at most 1"):
            scale_task(example_task(), factor)


def test_the_example_scales_only_its_batch():
    # `features` also builds the weights (get_init_inputs), so only `batch` may change
    assert set(input_sizes(example_task().code)) == {"batch"}
    assert scale_task(example_task(), 0.25).sizes == {"batch": (512, 128)}


def test_scaled_sizes_keep_alignment_and_a_floor():
    assert scaled_size(393216, 0.125) == 49152 and scaled_size(1000, 0.3) == 304   # multiple of 8 stays one
    assert scaled_size(128, 0.01) == 16 and scaled_size(10, 0.01) == 10            # not below 16 (or itself)
