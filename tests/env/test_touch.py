"""An empty call measured from outside reads its inputs and writes the reference's output's bytes
(workers/touch.py); the twin's own time for that is taken off its measure and off the candidate's empty call
of the same draw (run/twin.py `touched_ms`)."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from cuda_agent.env.run.twin import touched_ms
from cuda_agent.env.workers.touch import LIMIT, READ_CHUNK, MemoryTouch, _span_bytes


class _Ops(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


def test_the_span_of_a_view_is_its_own_bytes_not_its_storages():
    base = torch.zeros(64, 32)
    assert _span_bytes(base) == 64 * 32 * 4
    assert _span_bytes(base[8:16]) == 8 * 32 * 4                    # rows of a larger storage
    assert _span_bytes(base.t()) == 64 * 32 * 4                     # transposed: the same bytes
    assert _span_bytes(base[:, :4]) == (63 * 32 + 4) * 4            # first to last element
    assert _span_bytes(torch.zeros(32).expand(64, 32)) == 32 * 4    # broadcast rows: one row's bytes


def test_the_output_bytes_are_written_in_one_kept_buffer():
    touch = MemoryTouch()
    inputs = [torch.randn(3 * READ_CHUNK // 4 + 5), {"scale": torch.randn(7)}, 2.0]
    touch.touch(inputs, 5000)
    buffer = touch.output
    buffer.fill_(7)
    touch.touch(inputs, 5000)
    assert touch.output is buffer and buffer.numel() == 5000 and int(buffer.max()) == 0
    touch.touch(inputs, 0)   # nothing to write: the buffer is left alone
    assert touch.output is buffer


def test_a_large_tasks_reads_and_writes_are_capped():
    """At most LIMIT bytes written, and read: past them, an input's bytes are not reached (here a page
    that faults on any access)."""
    touch = MemoryTouch()
    touch.touch([torch.empty(0)], 3 * LIMIT)
    assert touch.output.numel() == LIMIT
    _touch_in_child(f"""
        region = mmap.mmap(-1, {LIMIT} + mmap.PAGESIZE)
        whole = torch.frombuffer(region, dtype=torch.uint8)
        protect(whole.data_ptr() + {LIMIT}, mmap.PAGESIZE)
        MemoryTouch().touch([whole[: {LIMIT} // 2], whole[{LIMIT} // 2:]], 64)
    """)


def test_touching_runs_no_aten_operator_once_its_buffers_exist():
    """The guard records every ATen operator of an empty call too: the reads and the writes go through the
    C library instead."""
    touch = MemoryTouch()
    inputs = [torch.randn(1 << 18), torch.randn(64, 64).t()]
    touch.touch(inputs, 1 << 20)
    with _Ops() as ops:
        touch.touch(inputs, 1 << 20)
    assert ops.seen == []


def test_an_inputs_view_is_read_without_reaching_past_it():
    """A view of a larger storage is read to its last byte, no further: the rest of the storage may not be
    readable (here a page that faults on any access, which kills the process that reads it)."""
    _touch_in_child("""
        region = mmap.mmap(-1, 2 * mmap.PAGESIZE)
        whole = torch.frombuffer(region, dtype=torch.uint8)   # a storage of both pages
        protect(whole.data_ptr() + mmap.PAGESIZE, mmap.PAGESIZE)
        MemoryTouch().touch([whole[: mmap.PAGESIZE // 2].view(torch.int16)], 64)
    """)


def _touch_in_child(body: str) -> None:
    """`body` run in a child process (`protect(address, size)` makes pages fault on any access); it must
    return, not crash."""
    code = textwrap.dedent("""
        import ctypes, mmap, torch
        from cuda_agent.env.workers.touch import MemoryTouch

        def protect(address, size):
            assert ctypes.CDLL(None).mprotect(ctypes.c_void_p(address), ctypes.c_size_t(size), 0) == 0
    """) + textwrap.dedent(body) + "\nprint('read')\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "read", done.stderr[-2000:]


@pytest.mark.parametrize("answer, wall, taken", [
    ({"ms": 0.4}, 1.0, 0.4),
    ({"ms": 3.0}, 1.0, 1.0),          # more than the whole call: at most the call
    ({"ms": -2.0}, 1.0, 0.0),         # below zero: nothing
    ({"ms": math.nan}, 1.0, 0.0),
    ({"ms": None}, 1.0, 0.0),
    ({}, 1.0, 0.0),
    ({"ms": "0.4"}, 1.0, 0.0),        # not a number
])
def test_an_empty_calls_own_time_is_taken_within_its_measure(answer, wall, taken):
    assert touched_ms(answer, wall) == pytest.approx(taken)


def test_each_empty_call_of_the_schedule_reads_and_writes_and_calibration_touches_nothing(cache_dir, monkeypatch):
    """In an evaluation, the twin's and the candidate's empty calls are told to write the reference's output's
    bytes, and the twin times its reads and writes (above zero, inside the call's measure); the calibrating
    calls before the solution loads (the cheapest call) are sent nothing to write."""
    from cuda_agent.env import evaluate
    from cuda_agent.env.run import rounds, twin
    from tests.env.helpers import cpu_config, cpu_workspace, example_task

    taken, sent = [], []
    monkeypatch.setattr(twin, "touched_ms", lambda answer, wall: taken.append((answer.get("ms"), wall))
                        or touched_ms(answer, wall))
    bytes_for = rounds.CallRounds._touch_bytes
    monkeypatch.setattr(rounds.CallRounds, "_touch_bytes",
                        lambda self, call: sent.append((call.index, bytes_for(self, call))) or sent[-1][1])
    result = evaluate(example_task(), cpu_workspace(), cpu_config(cache_dir))
    assert result.correct, result.error
    nulls = {index for index, size in sent if size}
    assert nulls and {size for _, size in sent} == {0, 512 * 1024 * 4}   # the reference's output, or nothing
    assert all(size == 0 for index, size in sent if index < 0)          # the calibrating calls
    assert all(size == 0 for index, size in sent if index not in nulls)  # the real calls
    # the twin's own time for it, in each of the schedule's empty calls (taken off the candidate's too)
    assert len(taken) == len(nulls) and all(0 < ms < wall for ms, wall in taken), taken
