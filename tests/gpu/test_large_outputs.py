"""Outputs larger than a staging slot on a GPU (device_slot.py): the driver calls across two processes,
then whole evaluations of a task with 6 GiB inputs and outputs (KernelBench level1/19's shapes) that
must finish in well under a minute, an honest solution scored and a wrong one rejected. Each test
prints where its time went. Run with `-m gpu -s`."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from cuda_agent.env import evaluate
from tests.gpu.helpers import gpu_config
from tests.gpu.large import LARGE_RELU, MemoryWatch, describe, relu_solution

pytestmark = pytest.mark.gpu
LIMIT_S = 60.0


def test_a_device_slot_made_here_is_written_by_another_process(tmp_path):
    """The judge's half in this process, the candidate's in a child: the child's bytes arrive, and the
    judge's copy keeps them when the child writes the slot again."""
    import torch

    from cuda_agent.env.workers.device_slot import DeviceSlot

    device = torch.device("cuda", 0)
    stale = torch.full((3 << 20,), 0x5A, dtype=torch.uint8, device=device)   # memory the next slot may reuse
    del stale
    torch.cuda.empty_cache()
    slot = DeviceSlot.create(3 << 20, device, tmp_path)
    assert int(slot.memory.count_nonzero()) == 0   # blank before the candidate maps it
    child = textwrap.dedent(f"""
        import sys, torch
        from pathlib import Path
        from cuda_agent.env.workers.device_slot import DeviceSlot
        device = torch.device("cuda", 0)
        slot = DeviceSlot.connect(Path({str(tmp_path)!r}), device)
        slot.put([torch.arange(1000, dtype=torch.float32, device=device)])
        torch.cuda.synchronize()
        print("put", slot.nbytes, flush=True)
        sys.stdin.readline()
        slot.memory.fill_(7)
        torch.cuda.synchronize()
        print("overwritten", flush=True)
    """)
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen([sys.executable, "-c", child], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert _line(proc).startswith("put"), _failure(proc)
        taken = slot.take({"tensor": "float32", "shape": [1000]})
        torch.cuda.synchronize()   # the copy done before the child may write again (the judge's hold ends so)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert _line(proc).startswith("overwritten"), _failure(proc)
        torch.cuda.synchronize()
        assert torch.equal(taken.cpu(), torch.arange(1000, dtype=torch.float32))
        assert int(slot.memory[:4].sum()) == 4 * 7   # the slot itself is the child's to write
    finally:
        proc.kill()
        slot.close()


def _line(proc: subprocess.Popen, timeout: float = 120.0) -> str:
    """The child's next line, or "" when it has none within `timeout` (never a hung test)."""
    import select

    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    return proc.stdout.readline() if ready else ""


def _failure(proc: subprocess.Popen) -> str:
    proc.kill()
    return proc.stderr.read()[-3000:]


def _evaluate(solution, cache_dir, **overrides):
    start = time.perf_counter()
    with MemoryWatch() as watch:
        result = evaluate(LARGE_RELU, solution, gpu_config(cache_dir, **overrides))
    wall = time.perf_counter() - start
    print("\n" + describe(result, wall, watch), flush=True)
    return result, wall


def test_a_6_gib_task_is_scored_in_well_under_a_minute(cache_dir, monkeypatch):
    # once per machine, not per evaluation: nvcc, the torch headers, the guard's and the hold's
    # libraries (built here first and timed apart)
    start = time.perf_counter()
    built = evaluate(LARGE_RELU, relu_solution(), gpu_config(cache_dir), stop_after="compile")
    print(f"\nbuilds (stop_after=compile): {time.perf_counter() - start:.1f} s", flush=True)
    assert built.error is None, built.error
    monkeypatch.setenv("CUDA_AGENT_TRACE_CALLS", "1")   # the harness's steps in phase_seconds
    result, wall = _evaluate(relu_solution(), cache_dir)
    assert result.error is None, describe(result, wall) + "\n" + (result.log or "")[-3000:]
    assert result.correct and result.kernel_ms and result.eager_ms
    assert not any("through files" in w for w in result.warnings), result.warnings   # the device path
    assert wall < LIMIT_S, describe(result, wall)


def test_a_wrong_6_gib_output_is_rejected_by_its_values(cache_dir):
    evaluate(LARGE_RELU, relu_solution(negative="-x"), gpu_config(cache_dir), stop_after="compile")   # its build
    result, wall = _evaluate(relu_solution(negative="-x"), cache_dir, compile_baseline=False)
    assert result.error is not None and result.error.rule == "correctness", describe(result, wall)
    assert "wrong output on input set" in result.error.message and "elements outside" in result.error.message
    assert not any("through files" in w for w in result.warnings), result.warnings
    assert wall < LIMIT_S, describe(result, wall)
