"""The device hold on a real GPU (env/measure/hold.py): what a held call measures, and what it must not let
through. Each test times in this process with `timing.time_once`, as the workers do. Run with `-m gpu`."""

from __future__ import annotations

import statistics
import time

import pytest
import torch

from cuda_agent.env.measure import timing
from cuda_agent.env.measure.hold import DeviceHold, Timer, build_hold, call_times

pytestmark = pytest.mark.gpu
DEVICE = torch.device("cuda", 0)


@pytest.fixture(scope="module")
def hold(cache_dir):
    torch.empty(1, device=DEVICE)
    return DeviceHold(build_hold(cache_dir / "build"))


@pytest.fixture(scope="module")
def cycles_per_ms():
    """torch.cuda._sleep's cycles per millisecond on this GPU now (a one-thread spinning kernel)."""
    torch.cuda._sleep(1_000_000)   # the clock up first
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(20_000_000)
    end.record()
    end.synchronize()
    return 20_000_000 / start.elapsed_time(end)


def host_spin(ms: float) -> None:
    until = time.perf_counter() + ms / 1e3
    while time.perf_counter() < until:
        pass


def median_ms(fn, hold=None, calls: int = 9) -> float:
    """The median call time as the harness counts it (hold.call_times: device time, host floor)."""
    measured = [timing.time_once(fn, [], DEVICE, hold=hold)[:2] for _ in range(calls)]
    return statistics.median(call_times(*zip(*measured)))


def test_the_hold_fills_every_sm(hold):
    props = torch.cuda.get_device_properties(DEVICE)
    assert hold.blocks * hold.threads == props.multi_processor_count * props.max_threads_per_multi_processor


def test_a_held_call_leaves_the_hosts_path_to_the_launch_out(hold, cycles_per_ms):
    """0.5 ms of host work before a 2 ms kernel: unheld the events see both, held only the kernel."""
    def forward():
        host_spin(0.5)
        torch.cuda._sleep(int(2.0 * cycles_per_ms))

    unheld, held = median_ms(forward), median_ms(forward, hold)
    assert unheld > 2.35 and 1.8 < held < 2.25, (unheld, held)
    assert not hold.timed_out() and hold.resident


def test_a_launch_bound_forward_is_timed_by_its_host(hold, cycles_per_ms):
    """Held, the device's part would be short; the host's 2 ms of launching is what the call costs."""
    def forward():
        for _ in range(4):
            host_spin(0.5)
            torch.cuda._sleep(int(0.05 * cycles_per_ms))

    assert median_ms(forward, hold) >= 1.95


@pytest.mark.xfail(reason="open (docs/verification.md): on an H100 about an eighth of the side stream's work ran "
                          "before the clock (1.27 ms held against 1.45 ms in turn); it passed in two of four "
                          "runs on 2026-11-24 (eighth session)", strict=False)
def test_work_on_another_stream_cannot_start_before_the_clock(hold):
    """Memory-bound work on a side stream launched first, 1 ms of host work while it would run, then as
    much work on the current stream after it: as much device work as the two halves one after the
    other. Were the side stream free to run under the hold, the held call would see about half of it.
    (Memory-bound adds, not cycle-counted sleeps: the SM clock differs after a long hold.)"""
    side = torch.cuda.Stream(DEVICE)
    src = torch.randn(64 << 20, device=DEVICE)
    dst = torch.empty_like(src)

    def half():
        for _ in range(4):
            torch.add(src, 1.0, out=dst)

    def in_turn():
        half()
        half()

    def forward():   # (the side stream does not wait for the current one: it would wait for the hold)
        with torch.cuda.stream(side):
            half()
        host_spin(1.0)
        torch.cuda.current_stream(DEVICE).wait_stream(side)
        half()

    both = median_ms(in_turn, hold)
    held = median_ms(forward, hold)
    assert held >= 0.9 * both, (held, both)
    assert hold.resident


def test_a_forward_that_waits_for_the_device_is_let_go_and_timed_unheld_after(hold):
    x = torch.randn(1 << 20, device=DEVICE)
    timer = Timer(hold)
    started = time.perf_counter()
    for _ in range(Timer.PATIENCE):
        ms, _, out, _ = timing.time_once(lambda: x.sum().item(), [], DEVICE, hold=timer.active_hold())
        timer.note(hold)
    assert time.perf_counter() - started < 5 * Timer.PATIENCE * hold.timeout_ns / 1e9   # let go, not hung
    assert timer.mode == "unheld" and out == pytest.approx(x.sum().item(), rel=1e-4)
    ms, host_ms, out, _ = timing.time_once(lambda: x.sum().item(), [], DEVICE, hold=timer.active_hold())
    assert host_ms is None and ms < hold.timeout_ns / 1e6   # unheld: no wait for the timeout any more
