"""The timing primitives (settle, the device hold's timer and library), and the baseline store's key for them."""

import time

import torch

from cuda_agent.env.measure import timing
from cuda_agent.env.run.baselines import entry_key, timing_settings
from cuda_agent.env.config import EvalConfig


def test_settle_idles_at_least_the_time_asked_for():
    start = time.perf_counter()
    timing.settle(0.003)
    assert time.perf_counter() - start >= 0.003
    timing.settle(0.0)   # off (and nonsense) returns at once, without raising
    timing.settle(-1.0)


def test_time_once_on_the_cpu_times_the_call_and_returns_its_output():
    ms, host_ms, out, extra = timing.time_once(lambda x: x * 2, [torch.ones(4)], torch.device("cpu"),
                                               after=lambda o: o.sum().item(), settle_s=0.001)
    assert ms >= 0 and host_ms is None and torch.equal(out, torch.full((4,), 2.0)) and extra == 8.0


def test_baselines_timed_with_a_settle_are_stored_apart_from_those_without():
    plain, settled = EvalConfig(), EvalConfig(settle_ms=2.0)
    assert timing_settings(plain, "cuda") == {"backend": "cuda", "flush_l2": True, "timer": "held-floor"}
    assert timing_settings(settled, "cuda")["settle_ms"] == 2.0
    assert entry_key("t", "H100", "2.11", timing_settings(plain, "cuda")) != \
        entry_key("t", "H100", "2.11", timing_settings(settled, "cuda"))


def test_baseline_call_counts_shrink_only_for_slow_calls():
    from cuda_agent.env.run.schedule import BASELINE_BUDGET_S, BASELINE_MIN_CALLS, baseline_calls

    assert baseline_calls(0.001, 10, 100) == (10, 100)                     # 100 fast calls fit the budget
    assert baseline_calls(BASELINE_BUDGET_S / 100, 10, 100) == (10, 100)   # exactly fits
    slow = baseline_calls(BASELINE_BUDGET_S / 50, 10, 100)
    assert slow == (5, 50)                                                  # as many as fit
    assert baseline_calls(1.0, 10, 100) == (3, BASELINE_MIN_CALLS)          # never fewer than the floor
    assert baseline_calls(1.0, 10, 20) == (3, 20)                           # nor more than asked


SLOW_TASK = '''
import time
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        start = time.thread_time()
        while time.thread_time() - start < 0.06:   # 60 ms of CPU: a CPU baseline is its thread's CPU time
            pass
        return x + 1

def get_inputs():
    return [torch.randn(8)]

def get_init_inputs():
    return []
'''


def test_a_slow_baseline_takes_fewer_calls_within_the_budget(tmp_path, monkeypatch):
    """Measured for real on the CPU: a 60 ms reference with a 0.3 s budget gets 3-5 timed calls, not 20."""
    from cuda_agent.env.run import schedule
    from cuda_agent.env.run.baseline_run import measure_baselines
    from cuda_agent.tasks import Task

    monkeypatch.setattr(schedule, "BASELINE_BUDGET_S", 0.3)
    monkeypatch.setattr(schedule, "BASELINE_MIN_CALLS", 3)
    config = EvalConfig(backend="cpu", cache_dir=tmp_path, compile_baseline=False, warmup=10, iters=20,
                        sandbox="none")
    run = measure_baselines(Task(name="slow", code=SLOW_TASK), config, store=False)
    assert run.error is None, run.error
    assert 3 <= run.entry.eager["iters"] <= 5 and run.entry.eager_ms >= 60.0


def test_held_unheld_and_cpu_time_baselines_are_stored_apart():
    held, unheld = EvalConfig(), EvalConfig(hold=False)
    assert timing_settings(held, "cuda")["timer"] == "held-floor"   # "held": per-call host times, before
    assert "timer" not in timing_settings(unheld, "cuda")
    # one thread's CPU time, not the wall clock of the baselines stored before
    assert timing_settings(held, "cpu")["timer"] == "cpu-time-1-thread"
    assert entry_key("t", "H100", "2.11", timing_settings(held, "cuda")) != \
        entry_key("t", "H100", "2.11", timing_settings(unheld, "cuda"))


class _FakeHold:
    """Stands in for hold.DeviceHold: says whether its last hold had to be let go by the timeout."""

    def __init__(self):
        self.expired = False

    def timed_out(self):
        return self.expired


def test_a_timer_goes_unheld_for_good_after_patience_timed_out_holds_in_a_row():
    from cuda_agent.env.measure.hold import Timer
    from cuda_agent.env.run.schedule import JUDGE_BATCH

    assert Timer.PATIENCE > JUDGE_BATCH   # a judge batch's outputs on a cold allocator is not a syncing forward
    hold = _FakeHold()
    timer = Timer(hold)
    assert timer.mode == "held" and timer.active_hold() is hold
    timer.note(hold)                      # released by the host in time: stays held
    assert timer.mode == "held"
    hold.expired = True                   # let go by the timeout (a kernel loaded lazily, a cudaMalloc): forgiven
    for _ in range(Timer.PATIENCE - 1):
        timer.note(hold)
    assert timer.mode == "held"
    hold.expired = False
    timer.note(hold)
    hold.expired = True
    for _ in range(Timer.PATIENCE - 1):
        timer.note(hold)
    assert timer.mode == "held"           # not in a row
    timer.note(hold)                      # a forward that waits for the device inside, every call
    assert timer.mode == "unheld" and timer.active_hold() is None
    hold.expired = False
    timer.note(None)                      # an unheld call says nothing about the hold
    assert timer.mode == "unheld"
    assert Timer(None).mode == "unheld" and Timer(None).active_hold() is None


def test_no_hold_library_means_unheld_timing():
    from cuda_agent.env.measure.hold import load_hold

    assert load_hold(None) is None and load_hold("") is None
    assert load_hold("/nonexistent/cuda_agent_hold.so") is None   # could not be loaded: times unheld


def test_the_hold_builds_with_nvcc_and_exports_its_entry_points(tmp_path, monkeypatch):
    """nvcc is on CI's machines though nothing built there runs there: the kernel's source must compile
    for a Hopper GPU and export what hold.DeviceHold binds."""
    import shutil
    import subprocess

    import pytest

    from cuda_agent.env.builds.compiler import find_cuda_home
    from cuda_agent.env.measure.hold import build_hold

    home = find_cuda_home()
    if home is None or not (home / "bin" / "nvcc").exists() or not shutil.which("nm"):
        pytest.skip(f"no nvcc (looked in CUDA_HOME, PATH and /usr/local/cuda: {home}) or no nm")
    monkeypatch.setenv("CUDA_AGENT_CUDA_ARCH", "90a")
    library = build_hold(tmp_path)
    assert build_hold(tmp_path) == library            # cached: built once per toolchain
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True).stdout
    for name in ("cah_init", "cah_hold", "cah_wait_resident", "cah_release", "cah_timed_out", "cah_blocks",
                 "cah_threads"):
        assert f" T {name}" in symbols, name
