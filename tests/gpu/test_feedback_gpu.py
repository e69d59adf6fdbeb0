"""The feedback after timing on a GPU: the profiler's CUDA tables, the CUDA-graph baseline, and Nsight
Compute's digest (`profile --ncu`). Run with `-m gpu`; each test is self-contained and quick."""

from __future__ import annotations

import subprocess
import sys
import types
from contextlib import nullcontext
from pathlib import Path

import pytest
import torch

from cuda_agent.env import evaluate
from cuda_agent.env.run.baselines import BaselineStore, task_key
from cuda_agent.tasks import load_solution
from tests.env.helpers import EXAMPLES, example_task
from tests.gpu.helpers import gpu_config

pytestmark = pytest.mark.gpu


def test_the_profile_names_the_references_operators_and_the_candidates_kernels_with_a_graph_baseline(cache_dir):
    config = gpu_config(cache_dir, profile_ops=True, compile_baseline=False)
    r = evaluate(example_task(), load_solution(EXAMPLES / "solution_cuda"), config)
    assert r.error is None and r.correct, r.error
    from cuda_agent.agent.workspace import format_result

    print("\n" + format_result("profile", r), flush=True)   # what ./profile shows (the closing note quotes it)
    assert r.reference_ops.clock == "cuda" and r.candidate_ops.clock == "cuda"
    reference = [row.name for row in r.reference_ops.rows]
    assert reference[0] in ("aten::add", "aten::clamp_min") and all(row.kind == "op" for row in r.reference_ops.rows)
    kernels = [row for row in r.candidate_ops.rows if "bias_relu" in row.name]
    assert kernels and kernels[0].kind == "kernel" and kernels[0].calls == 1.0 and kernels[0].ms > 0
    # the graph baseline: timed beside eager, kept in the store for the next evaluation
    assert r.graph_ms > 0 and r.timings["graph"].median_ms == r.graph_ms, r.feedback_notes
    entry = BaselineStore(config.cache_dir).get(task_key(example_task(), r.device, config, "cuda"))
    assert entry.graph["median_ms"] > 0 and entry.graph_eager_ms > 0 and entry.graph_error is None
    again = evaluate(example_task(), load_solution(EXAMPLES / "solution_cuda"),
                     gpu_config(cache_dir, compile_baseline=False))
    assert again.graph_ms > 0 and again.reference_ops is None   # stored; the tables off by default


class _Task:
    def __init__(self, shape):
        self.shape = shape

    def get_inputs(self):
        return [torch.randn(*self.shape)]


def _judge(model, shape=(256, 256)):
    """What time_graph reads of a judge: its task, model, device, timers, lock and settings."""
    from cuda_agent.env.measure.hold import Timer

    return types.SimpleNamespace(device=torch.device("cuda"), cfg=types.SimpleNamespace(seed=5, settle_ms=0.0),
                                 module=_Task(shape), model=model.cuda().eval(), flush=None,
                                 timers={"eager": Timer(None)}, _device=lambda **kw: nullcontext())


class _Syncs(torch.nn.Module):
    def forward(self, x):
        return x * x.sum().item()   # a CPU sync: not allowed while a stream is captured


def syncing_capture_error() -> str:
    from cuda_agent.env.workers.graphs import time_graph

    return time_graph(_judge(_Syncs()), calls=5)["error"]


def test_a_graph_replays_beside_eager_and_a_syncing_forward_says_why_it_cannot_be_captured():
    from cuda_agent.env.workers.graphs import time_graph

    timed = time_graph(_judge(torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU())), calls=5)
    assert len(timed["graph_ms"]) == len(timed["eager_ms"]) == 5 and min(timed["graph_ms"]) > 0
    # in a process of its own: a failed capture leaves its process's CUDA RNG unusable (which is why the
    # judge captures last), and this test process draws on the GPU again
    code = "from tests.gpu.test_feedback_gpu import syncing_capture_error; print(syncing_capture_error())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180,
                          cwd=Path(__file__).resolve().parents[2])
    error = (done.stdout.strip().splitlines() or [done.stderr[-500:]])[-1]
    assert error.startswith("capture failed ("), error


def test_ncu_digests_the_candidates_kernels(cache_dir):
    from cuda_agent.env.run.ncu_run import ncu_digest, ncu_path

    if ncu_path() is None:
        pytest.skip("Nsight Compute (ncu) is not on PATH")
    lines = ncu_digest(example_task(), load_solution(EXAMPLES / "solution_cuda"), gpu_config(cache_dir), timeout=120)
    if any("ERR_NVGPUCTRPERM" in line for line in lines):
        pytest.skip(f"this machine does not let ncu read the GPU's counters: {lines[0]}")
    print("\n" + "\n".join(lines), flush=True)   # what ./profile --ncu adds
    assert lines[0].startswith("Nsight Compute: "), lines
    assert "bias_relu" in lines[1] and "limited by" in lines[2] and "registers/thread" in lines[3]
    assert len(lines) <= 40
