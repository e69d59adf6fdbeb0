"""Each filter drops what it should, with its reason, and keeps a sound task with its timings."""

from __future__ import annotations

import pytest

from cuda_agent.synth import filters
from cuda_agent.synth.filters import FilterConfig, run_filters

TEMPLATE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(32, 16)

    def forward(self, x):
        return {body}


batch_size = {batch}


def get_inputs():
    return [torch.randn(batch_size, 32)]


def get_init_inputs():
    return []
'''


def job(body: str, batch: int = 8, **cfg) -> dict:
    config = FilterConfig(window_ms=cfg.pop("window_ms", (0.0, 1e9)), compile=cfg.pop("compile", False),
                          iters=5, warmup=1, **cfg).to_dict()
    code = TEMPLATE.format(body=body, batch=batch)
    return run_filters({"config": config, "candidate": {"id": "t-1", "kind": "code", "code": code}})


def test_a_sound_task_passes_with_eager_time():
    r = job("torch.tanh(self.linear(x))")
    assert r["ok"], r
    assert r["eager_ms"] > 0 and r["compile_ms"] is None and r["output_shape"] == [8, 16]
    # where its times were taken: a build's parts may run on other machines than the one writing the datasheet
    import platform

    import torch
    assert r["device"] == f"CPU ({platform.machine()})" and r["torch"] == torch.__version__ and r["sharing"] == 1


@pytest.mark.parametrize("body, reason", [
    ("self.linear(x) + torch.rand_like(x[:, :16])", "nondeterministic"),
    ("torch.log(self.linear(x))", "nonfinite_output"),
    ("torch.zeros_like(self.linear(x))", "constant_output"),
    ("self.linear(x).mean() * 1e-4", "constant_output"),                    # varies, but below tolerance
    ("torch.cat([self.linear(x)[:1], torch.ones(999, 16)])", "low_variation"),
    ("self.linear(x.t())", "eager_error"),
])
def test_drops_with_reason(body, reason):
    r = job(body)
    assert not r["ok"] and r["reason"] == reason, r


def linear_clock(ms_per_row: float):
    """A stand-in for the eager timer: time proportional to the batch. The rescaling logic is what
    these tests check, and wall-clock time on a loaded CI machine would make them flaky."""
    return lambda model, inputs, device, cfg: ms_per_row * inputs[0].shape[0]


def test_runtime_window_rescales_the_batch_into_the_window(monkeypatch):
    # 0.01 ms at batch 1 is far below a 0.2-5 ms window: the filter grows the batch (aiming at 2 * lo).
    monkeypatch.setattr(filters, "_time", linear_clock(0.01))
    r = job("torch.tanh(self.linear(x)).cumsum(1)", batch=1, window_ms=(0.2, 5.0), max_batch=1 << 18)
    assert r["ok"], r
    assert r["batch"] == 40 and r["rescales"] == 1 and r["eager_ms"] == pytest.approx(0.4)
    assert f"batch_size = {r['batch']}" in r["code"]


def test_runtime_window_drops_what_cannot_be_moved_into_it(monkeypatch):
    monkeypatch.setattr(filters, "_time", linear_clock(0.01))
    r = job("torch.tanh(self.linear(x))", window_ms=(500.0, 1000.0), max_batch=64)
    assert not r["ok"] and r["reason"] == "runtime_below_window", r
    assert r["detail"].startswith("0.64 ms"), r              # stopped at max_batch (64 rows)
    r = job("torch.tanh(self.linear(x))", window_ms=(0.0, 1e-6))
    assert not r["ok"] and r["reason"] == "runtime_above_window", r


def test_the_real_timer_measures_something():
    r = job("torch.tanh(self.linear(x))")
    assert r["ok"] and r["eager_ms"] > 0


def test_torch_compile_filter_times_the_compiled_model():
    r = job("torch.nn.functional.gelu(self.linear(x)) * 2.0", compile=True)
    assert r["ok"], r
    assert r["compile_ms"] > 0


def test_a_task_larger_than_the_memory_it_would_be_built_in_is_dropped_without_building_it(monkeypatch):
    """Its weights and inputs are measured on meta first: built, a task larger than the host (an
    `nn.Bilinear` of 16384 features holds 512 GiB of weights) fills it until the kernel kills the
    worker. At its base size it is `oom`; grown past it by the runtime window, above the window."""
    from cuda_agent.synth import memory

    def no_build(*_args):
        raise AssertionError("the model was built")

    monkeypatch.setattr(memory, "memory_limit_mb", lambda: 0.1)   # a host of 100 KiB
    real_build = filters._build
    monkeypatch.setattr(filters, "_build", no_build)
    r = job("self.linear(x)", batch=4096)            # 512 KiB of inputs
    assert not r["ok"] and r["reason"] == "oom", r
    assert r["detail"] == "weights and inputs need 0.00049 GiB, more than the host's memory (9.77e-05 GiB)"

    monkeypatch.setattr(filters, "_build", real_build)
    monkeypatch.setattr(filters, "_time", linear_clock(1e-5))   # far below the window: the batch grows
    r = job("self.linear(x)", batch=8, window_ms=(0.2, 5.0), max_batch=1 << 18)
    assert not r["ok"] and r["reason"] == "runtime_above_window", r
    assert r["detail"].endswith("more than the host's memory (9.77e-05 GiB) at batch 40000"), r
