"""The harness's view of a process from outside it (env/measure/outside.py): stopping it, its CPU time over
all of its threads, and its memory read where it says its output is."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import numpy
import pytest
import torch

from cuda_agent.env.measure import outside
from cuda_agent.env.rules.samples import compare_sampled, random_positions, sample_reference, take_samples
from cuda_agent.env.rules.verify import Tolerance, scalars_in

# A child that reports where its arrays are, then (on a line of input) starts a thread that spins
# and counts into one of them; a second line changes an array; a third exits.
CHILD = textwrap.dedent("""
    import json, sys, threading, numpy
    counter = numpy.zeros(1, dtype=numpy.int64)
    small = numpy.arange(12, dtype=numpy.float32).reshape(3, 4)
    big = numpy.arange(1 << 20, dtype=numpy.float64)
    where = lambda a: {"address": a.__array_interface__["data"][0], "dtype": str(a.dtype),
                       "shape": list(a.shape), "strides": [s // a.itemsize for s in a.strides]}
    print(json.dumps({"counter": where(counter), "small": where(small), "big": where(big),
                      "transposed": where(small.T)}), flush=True)
    def spin():
        while True:
            counter[0] += 1
    sys.stdin.readline()
    threading.Thread(target=spin, daemon=True).start()
    print("spinning", flush=True)
    sys.stdin.readline()
    small[1, 2] = -7.0
    print("changed", flush=True)
    sys.stdin.readline()
""")


@pytest.fixture
def child():
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    where = json.loads(proc.stdout.readline())
    yield proc, where
    outside.resume(proc.pid)
    proc.kill()
    proc.wait()


def _say(proc, expect: str) -> None:
    proc.stdin.write("\n")
    proc.stdin.flush()
    assert proc.stdout.readline().strip() == expect


def test_a_stopped_process_runs_nothing_and_resumes(child):
    proc, where = child
    _say(proc, "spinning")
    memory = outside.Memory(proc.pid)
    counter = outside.Located.parse(where["counter"])
    time.sleep(0.05)
    assert outside.stop(proc.pid)
    first = int(memory.read_tensor(counter)[0])
    time.sleep(0.1)
    assert int(memory.read_tensor(counter)[0]) == first   # no thread of it ran while stopped
    outside.resume(proc.pid)
    time.sleep(0.1)
    assert int(memory.read_tensor(counter)[0]) > first
    memory.close()


def _main_thread_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/schedstat") as fh:
        return int(fh.read().split()[0]) / 1e9


def test_cpu_time_counts_every_thread(child):
    proc, _ = child
    assert outside.stop(proc.pid)
    before, main_before = outside.cpu_seconds(proc.pid), _main_thread_seconds(proc.pid)
    outside.resume(proc.pid)
    _say(proc, "spinning")   # the spinning thread, not the main one (which sleeps on its input)
    deadline = time.monotonic() + 10   # a loaded machine gives it less than its share
    while outside.cpu_seconds(proc.pid) - before < 0.3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert outside.stop(proc.pid)
    used = outside.cpu_seconds(proc.pid) - before
    main_only = _main_thread_seconds(proc.pid) - main_before   # the main thread's own share: next to nothing
    assert used >= 0.3
    assert main_only < used / 2
    time.sleep(0.2)
    assert outside.cpu_seconds(proc.pid) - before == pytest.approx(used, abs=1e-6)   # stopped: nothing more


def test_outputs_are_read_from_the_process_memory(child):
    proc, where = child
    memory = outside.Memory(proc.pid)
    assert outside.stop(proc.pid)
    small = outside.Located.parse(where["small"])
    assert numpy.array_equal(memory.read_tensor(small), numpy.arange(12, dtype=numpy.float32).reshape(3, 4))
    transposed = outside.Located.parse(where["transposed"])   # strided: read as the strides say
    assert numpy.array_equal(memory.read_tensor(transposed), numpy.arange(12, dtype=numpy.float32).reshape(3, 4).T)
    big = outside.Located.parse(where["big"])
    positions = random_positions(big.numel, 2048, torch.device("cpu")).numpy()
    assert len(set(positions.tolist())) > 1900   # drawn here, spread over the whole tensor
    assert numpy.array_equal(memory.read_at(big, positions), positions.astype(numpy.float64))
    sparse = positions[:16]   # few positions in a large tensor: one read each
    assert memory.read_at(big, sparse).flags.writeable   # torch.from_numpy warns on a read-only array
    assert numpy.array_equal(memory.read_at(big, sparse), sparse.astype(numpy.float64))
    outside.resume(proc.pid)
    _say(proc, "spinning")
    _say(proc, "changed")
    assert outside.stop(proc.pid)
    assert memory.read_tensor(small)[1, 2] == -7.0   # what is there now, not what was said before
    memory.close()


def test_unreadable_locations_are_the_candidates_failure(child):
    proc, where = child
    memory = outside.Memory(proc.pid)
    with pytest.raises(outside.UnreadableOutput):
        memory.read_tensor(outside.Located(16, "float32", [4], [1]))   # not mapped
    for bad in ({"address": -1, "dtype": "float32", "shape": [1], "strides": [1]},
                {"address": 4096, "dtype": "object", "shape": [1], "strides": [1]},
                {"address": 4096, "dtype": "float32", "shape": [2, 2], "strides": [1]},
                {"address": 4096, "dtype": "float32", "shape": [-1], "strides": [1]}, "x"):
        with pytest.raises(outside.UnreadableOutput):
            outside.Located.parse(bad)
    huge = dict(where["small"], strides=[1 << 40, 1])   # a span far beyond its elements
    with pytest.raises(outside.UnreadableOutput):
        memory.read_tensor(outside.Located.parse(huge))
    memory.close()


def test_samples_read_from_outside_are_judged_like_the_harness_own():
    out = torch.randn(3000)
    memory = _SelfMemory()
    located = {"tree": {"tensor": "float32", "shape": [3000]}, "structure": "T", "scalars": [],
               "tensors": [{"address": out.data_ptr(), "dtype": "float32", "shape": [3000], "strides": [1]}]}
    samples = outside.read_samples(memory, located, 2048)
    reference = sample_reference(out, samples, Tolerance())
    assert compare_sampled(reference, samples).ok
    wrong = out.clone()
    wrong[::2] += 1.0   # half of the elements wrong: 2048 random positions find them
    assert not compare_sampled(sample_reference(wrong, samples, Tolerance()), samples).ok


def test_a_python_number_is_compared_on_every_call():
    reference = sample_reference(2.5, take_samples(2.5), Tolerance())
    assert compare_sampled(reference, take_samples(2.5)).ok
    assert not compare_sampled(reference, take_samples(4.0)).ok       # a stale constant
    assert not compare_sampled(reference, {"structure": "float", "tensors": []}).ok   # nothing to compare
    assert scalars_in([1, (2.0, {"a": True}), torch.ones(1)]) == [1, 2.0, True]


def test_layouts_must_match_the_located_tensors():
    located = [outside.Located(0, "float32", [2], [1])]
    assert outside.layout_of({"list": [{"tensor": "float32", "shape": [2]}, {"value": 3}]}, located) == \
        {"list": [{"tensor": "float32", "shape": [2]}, {"value": 3}]}
    with pytest.raises(outside.UnreadableOutput):
        outside.layout_of({"list": []}, located)
    with pytest.raises(outside.UnreadableOutput):
        outside.layout_of({"list": [{"tensor": "float32", "shape": [2]}] * 2}, located)


class _SelfMemory(outside.Memory):
    """This process's own memory (the reading is the same for another process's)."""

    def __init__(self):
        import os

        self.fd = os.open("/proc/self/mem", os.O_RDONLY)


def test_a_process_whose_thread_names_are_not_utf8_is_stopped_and_timed():
    """A thread's name in /proc is whatever bytes its process chose (`)` and bytes that are not UTF-8
    among them): stopping the process (each thread's state) and its threads' CPU time read past it."""
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import os, sys, threading
        threading.Thread(target=lambda: threading.Event().wait(), daemon=True).start()
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/comm", "wb") as fh:
                fh.write(b"a) R \\xff\\xfe")
        print("named", flush=True)
        sys.stdin.readline()
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "named"
        tids = outside.thread_ids(child.pid)
        assert len(tids) >= 2
        assert outside.stop(child.pid)
        assert {outside._state(child.pid, tid) for tid in tids} == {"T"}
        assert all(outside._stat_ticks(f"/proc/{child.pid}/task/{tid}/stat") is not None for tid in tids)
        outside.resume(child.pid)
    finally:
        child.kill()
        child.wait()
