"""The judge's heap between calls: nothing it drew or computed for a call outlives the call, so the
reference's timed runs see the same allocator state in the last batch as in the first (issue 34), and
a steady eager time lets the next evaluation reuse the stored torch.compile baseline."""

from __future__ import annotations

import gc
import os
import re
import shutil
import subprocess
import sys
import weakref

import pytest
import torch

from cuda_agent.env import evaluate
from cuda_agent.env.infra.isolation import STEADY_HEAP
from cuda_agent.env.workers.transfer import build_output, output_layout
from cuda_agent.tasks.layout import value_layout
from tests.env.helpers import cpu_config, cpu_workspace, example_task


@pytest.fixture
def no_collector():
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def test_layout_and_rebuild_hold_no_tensor_after_they_return(no_collector):
    """A value's layout and its rebuilt output keep no reference to its tensors once dropped, with the
    garbage collector off: only reference counting frees them (a reference cycle would hold them)."""
    value = [torch.ones(4), {"b": torch.zeros(2)}, 3]
    refs = [weakref.ref(t) for t in (value[0], value[1]["b"])]
    tree, tensors = value_layout(value)
    assert tensors[0] is value[0] and tree["list"][2] == {"value": 3}
    rebuilt = build_output(output_layout(value)[0], tensors)
    assert rebuilt[1]["b"] is value[1]["b"]
    del value, tensors, rebuilt
    assert [ref() for ref in refs] == [None, None]


def _heap_lines(log: str) -> list[tuple[int, int]]:
    return [(int(d), int(t)) for d, t in re.findall(r"judge heap drawn=(\d+) tensors=(\d+)", log)]


def test_judge_holds_no_more_after_many_timed_calls_and_the_next_evaluation_reuses_the_stored_baseline(
        tmp_path, cache_dir, monkeypatch):
    """With the judge's trace on (CUDA_AGENT_TRACE_CALLS, CUDA_AGENT_TRACE_HEAP), its state after each
    batch: the inputs it drew for calls it will not judge (empty calls) are dropped, and its live tensors
    do not grow with the number of timed calls. The second evaluation of the task takes the stored
    compile time."""
    monkeypatch.setenv("CUDA_AGENT_TRACE_CALLS", "1")
    monkeypatch.setenv("CUDA_AGENT_TRACE_HEAP", "1")
    own = tmp_path / "cache"
    shutil.copytree(cache_dir / "build", own / "build", symlinks=True)   # builds shared, baselines not
    config = cpu_config(own, compile_baseline=True, iters=60, timeout_profile=600.0)
    first = evaluate(example_task(), cpu_workspace(), config)
    assert first.correct and first.baseline_source == "paired"
    heap = _heap_lines(first.log)
    assert len(heap) >= 6, first.log[-2000:]
    assert max(drawn for drawn, _ in heap) <= 2   # only calls drawn ahead of the judge's batch
    tensors = [t for _, t in heap]
    settled = tensors[len(tensors) // 3]           # after verification and the first timed batches
    assert max(tensors[len(tensors) // 3:]) <= settled + 4, tensors
    # the reference's timed runs write into mapped pages: less than one output's pages faulted in over
    # the later half of the batches (each output of the example is 512 pages)
    faults = [int(f) for f in re.findall(r"judge batch trace n=\d+ .* minor faults=(\d+)", first.log)]
    assert len(faults) >= 4 and sum(faults[len(faults) // 2:]) < 512, faults
    second = evaluate(example_task(), cpu_workspace(), config)
    assert second.correct and second.baseline_source == "stored", (second.eager_ms, first.eager_ms)


HEAP_SCRIPT = """
import resource, sys, torch
from cuda_agent.env.infra.reserve import reserve_heap
faults = lambda: resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
if sys.argv[1] == "reserved":
    reserve_heap(8 << 20)
before = faults()
kept = [torch.ones(1 << 21, dtype=torch.uint8) for _ in range(12)]
print(faults() - before)
"""


@pytest.mark.parametrize("reserved", [True, False])
def test_a_reserved_heap_maps_the_pages_of_later_tensors(reserved):
    """Under the CPU workers' heap settings, tensors allocated after `reserve_heap` land in pages already
    mapped (a few faults for small allocations); without it each of their 4 KiB pages is faulted in."""
    env = {**os.environ, **STEADY_HEAP, "MALLOC_PERTURB_": "165", "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", HEAP_SCRIPT, "reserved" if reserved else "plain"], env=env,
                         capture_output=True, text=True, timeout=120, check=True)
    faults = int(out.stdout.split()[-1])
    pages = 12 * (2 << 20) // 4096
    assert (faults < pages // 20) if reserved else (faults >= pages // 2), faults


def test_the_reference_as_its_own_solution_is_not_faster_than_itself(cache_dir, kernelbench):
    """The same code on both sides measures about alike on the CPU. A memory-bound reference (softmax
    over 1.5 M floats) timed by a judge that had waited through a batch of the candidate's calls ran
    up to half again slower than the candidate, which runs moments after the judge wrote its inputs:
    the reference itself scored 1.2-1.5x and reward 3. The judge now times each call right after the
    candidate's (`schedule.judge_batch`)."""
    import re
    import statistics

    from cuda_agent.tasks import Solution, load_task
    from cuda_agent.tasks.scale import scale_task

    task = scale_task(load_task("level1/23", str(kernelbench)), 0.03125).task
    same = Solution.from_code(re.sub(r"\bModel\b", "ModelNew", task.code))
    speedups = []
    for _ in range(3):
        result = evaluate(task, same, cpu_config(cache_dir, guard=False, iters=20, warmup=5, other_scale=False))
        assert result.correct, result.error
        speedups.append(result.speedup_vs_eager)
    # the old cadence gave 1.43-1.55; a loaded 2-core machine moves the same code's ratio by up to ~0.2
    assert statistics.median(speedups) < 1.25, speedups
