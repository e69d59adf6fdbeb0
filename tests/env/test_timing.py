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
