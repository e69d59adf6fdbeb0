"""The timing primitives' settle step, and the baseline store's key for it."""

import time

import torch

from cuda_agent.env import timing
from cuda_agent.env.baselines import entry_key, timing_settings
from cuda_agent.env.config import EvalConfig


def test_settle_idles_at_least_the_time_asked_for():
    start = time.perf_counter()
    timing.settle(0.003)
    assert time.perf_counter() - start >= 0.003
    timing.settle(0.0)   # off (and nonsense) returns at once, without raising
    timing.settle(-1.0)


def test_time_once_on_the_cpu_times_the_call_and_returns_its_output():
    ms, out, extra = timing.time_once(lambda x: x * 2, [torch.ones(4)], torch.device("cpu"),
                                      after=lambda o: o.sum().item(), settle_s=0.001)
    assert ms >= 0 and torch.equal(out, torch.full((4,), 2.0)) and extra == 8.0


def test_baselines_timed_with_a_settle_are_stored_apart_from_those_without():
    plain, settled = EvalConfig(), EvalConfig(settle_ms=2.0)
    assert timing_settings(plain, "cuda") == {"backend": "cuda", "flush_l2": True}   # keys stored before stay
    assert timing_settings(settled, "cuda")["settle_ms"] == 2.0
    assert entry_key("t", "H100", "2.11", timing_settings(plain, "cuda")) != \
        entry_key("t", "H100", "2.11", timing_settings(settled, "cuda"))


def test_baseline_call_counts_shrink_only_for_slow_calls():
    from cuda_agent.env.evaluation import BASELINE_BUDGET_S, BASELINE_MIN_CALLS, baseline_calls

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
        time.sleep(0.06)
        return x + 1

def get_inputs():
    return [torch.randn(8)]

def get_init_inputs():
    return []
'''


def test_a_slow_baseline_takes_fewer_calls_within_the_budget(tmp_path, monkeypatch):
    """Measured for real on the CPU: a 60 ms reference with a 0.3 s budget gets 3-5 timed calls, not 20."""
    from cuda_agent.env import evaluation
    from cuda_agent.tasks import Task

    monkeypatch.setattr(evaluation, "BASELINE_BUDGET_S", 0.3)
    monkeypatch.setattr(evaluation, "BASELINE_MIN_CALLS", 3)
    config = EvalConfig(backend="cpu", cache_dir=tmp_path, compile_baseline=False, warmup=10, iters=20,
                        sandbox="none")
    run = evaluation.measure_baselines(Task(name="slow", code=SLOW_TASK), config, store=False)
    assert run.error is None, run.error
    assert 3 <= run.entry.eager["iters"] <= 5 and run.entry.eager_ms >= 60.0
