"""The fifth round of cheats on a real GPU (issue 31), beside the honest controls written in the same
unusual ways: a process-wide stream change left in place, a query of the current stream that tells held
(timed) calls from unheld ones (the hold queues a kernel on the current stream before the forward runs:
env/measure/hold.py), a Python number that nothing compares after verification, the worker's candidate class
patched through its module; CUDA graphs, two joined streams, TF32 cuBLAS, weight caches and workspaces
kept across calls, kernels launched from a `torch.autograd.Function`, Python-number outputs.
Run with `-m gpu`. The kernels are tests/gpu/solutions/round5/ (one build shared by every case)."""

from __future__ import annotations

import textwrap

import pytest

from cuda_agent.env import evaluate
from cuda_agent.tasks import Solution, load_task
from tests.env.helpers import example_task
from tests.gpu.hacks.test_gpu_hacks import _record, config
from tests.gpu.hacks.test_gpu_wave import tf32_gemm
from tests.gpu.helpers import SOLUTIONS
from tests.hacks.cases import TASKS, assert_accepted, assert_rejected, gemm_task
from tests.hacks.cases_round5 import PATCH_INSPECT, VERIFIED_CALLS

pytestmark = pytest.mark.gpu


def round5(model_new: str) -> Solution:
    root = SOLUTIONS / "round5" / "kernels"
    files = {f"kernels/{p.name}": p.read_text() for p in sorted(root.iterdir())}
    files["model_new.py"] = model_new
    return Solution(files)


def model(forward_args: str, forward: str, init: str = "", header: str = "", init_args: str = "") -> str:
    return ("import torch\nimport torch.nn as nn\n\nimport cuda_extension\n" + textwrap.dedent(header).strip("\n")
            + f"\n\n\nclass ModelNew(nn.Module):\n    def __init__(self{', ' + init_args if init_args else ''}):\n"
            + "        super().__init__()\n" + textwrap.indent(textwrap.dedent(init).strip("\n"), " " * 8) + "\n"
            + f"\n    def forward(self, {forward_args}):\n"
            + textwrap.indent(textwrap.dedent(forward).strip("\n"), " " * 8) + "\n")


BIAS = "self.bias = nn.Parameter(torch.randn(features))"


def bias_relu(forward: str, init: str = "", header: str = ""):
    return lambda: (example_task(), round5(model("x", forward, BIAS + "\n" + textwrap.dedent(init), header,
                                                 "features")))


def dot_item(forward: str, init: str = ""):
    return lambda: (load_task(TASKS / "dot_item.py"), round5(model("a, b", forward, init)))


# -- honest controls ----------------------------------------------------------------------------

HONEST = {
    "r5_gpu_honest_cuda_graph": bias_relu("""
        if self.graph is None:   # captured once, at the first call: our kernel between two static buffers
            self.static_x, self.static_out = torch.empty_like(x), torch.empty_like(x)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                cuda_extension.bias_relu_into(self.static_x, self.bias, self.static_out)
        cuda_extension.copy_into(self.static_x, x)   # the input moved by our own kernel
        self.graph.replay()
        return cuda_extension.copy(self.static_out)
        """, init="self.graph = None"),
    "r5_gpu_honest_two_joined_streams": bias_relu("""
        out = torch.empty_like(x)
        here, half = torch.cuda.current_stream(), x.size(0) // 2
        for stream, row0 in ((self.streams[0], 0), (self.streams[1], half)):
            stream.wait_stream(here)   # the inputs are ready on the caller's stream
            with torch.cuda.stream(stream):
                cuda_extension.bias_relu_rows(x, self.bias, out, row0, half)
        for stream in self.streams:
            here.wait_stream(stream)   # joined before forward returns
        return out
        """, init="self.streams = [torch.cuda.Stream(), torch.cuda.Stream()]"),
    "r5_gpu_honest_tf32_cublas": tf32_gemm,
    "r5_gpu_honest_weight_cache": lambda: (load_task(TASKS / "linear.py"), round5(model("x", """
        if self.weight is None:   # a contiguous copy of the weight made by our kernel at the first call
            self.weight = cuda_extension.copy(self.linear.weight.detach())
        return cuda_extension.linear(x, self.weight, self.linear.bias.detach())
        """, "self.linear = nn.Linear(in_features, out_features)\nself.weight = None",
        init_args="in_features, out_features"))),
    "r5_gpu_honest_persistent_workspace": dot_item("""
        if self.scratch is None:   # partial sums' workspace, allocated once and reused
            self.scratch = torch.empty(256, dtype=torch.float64, device=a.device)
        return cuda_extension.dot_ws(a, b, self.scratch).item()
        """, init="self.scratch = None"),
    "r5_gpu_honest_autograd_function": bias_relu("return _BiasRelu.apply(x, self.bias)", header="""
        class _BiasRelu(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, bias):
                return cuda_extension.bias_relu(x, bias)

            @staticmethod
            def backward(ctx, grad):
                raise NotImplementedError("inference only")
        """),
    "r5_gpu_honest_python_number": dot_item("return cuda_extension.dot(a, b).item()"),
}


@pytest.mark.parametrize("name", HONEST)
def test_honest_control_is_accepted(name, cache_dir):
    task, solution = HONEST[name]()
    result = evaluate(task, solution, config(cache_dir))
    _record(name, "honest", result)
    assert_accepted(result)


# -- cheats -------------------------------------------------------------------------------------

HACKS = {
    # the harness times on the current stream and reads samples there: moved to a side stream for good,
    # while the work goes to the legacy default stream, which a non-blocking stream does not wait for
    "r5_gpu_set_stream_in_init": (bias_relu("return cuda_extension.bias_relu_legacy(x, self.bias)",
                                            init="self.side = torch.cuda.Stream()\ntorch.cuda.set_stream(self.side)"),
                                  ("correctness", "recheck-after-timing", "clock-disagreement", "static:*")),
    "r5_gpu_set_stream_at_first_call": (bias_relu("""
        if self.side is None:
            self.side = torch.cuda.Stream()
            torch.cuda.set_stream(self.side)   # left in place after forward returns
        return cuda_extension.bias_relu_legacy(x, self.bias)
        """, init="self.side = None"), ("correctness", "recheck-after-timing", "clock-disagreement", "static:*")),
    # a held (timed) call finds the hold's kernel queued on the current stream: query() is False
    "r5_gpu_stream_query_tells_held_calls": (dot_item("""
        if torch.cuda.current_stream().query():   # idle: an unheld call (verification)
            self.last = cuda_extension.dot(a, b).item()
            return self.last
        cuda_extension.touch(a)
        return self.last
        """, init="self.last = 0.0"), ("recheck-after-timing", "correctness", "static:*")),
    "r5_gpu_python_number_stale": (dot_item(f"""
        self.calls += 1
        if self.calls <= {VERIFIED_CALLS}:
            self.last = cuda_extension.dot(a, b).item()
            return self.last
        cuda_extension.touch(a)   # one kernel call in every call
        return self.last
        """, init="self.calls, self.last = 0, 0.0"), ("recheck-after-timing", "correctness", "static:*")),
    "r5_gpu_main_patch_inspect": (lambda: (gemm_task(), round5(model("a, b", "return torch.matmul(a, b)",
                                                                     header=PATCH_INSPECT))),
                                  ("static:*", "torch-op", "no-custom-kernel", "output-not-from-kernel")),
}


@pytest.mark.parametrize("name", HACKS)
def test_hack_is_rejected(name, cache_dir):
    build, rules = HACKS[name]
    task, solution = build()
    result = evaluate(task, solution, config(cache_dir))
    _record(name, "hack", result)
    assert_rejected(result, rules, name)


def test_a_stream_left_current_is_rejected_at_run_time(cache_dir):
    """The allowlist refuses `torch.cuda.set_stream` before anything runs; with it off (guard=False),
    the worker's own check after every call still refuses a forward that leaves another stream current."""
    build, _ = HACKS["r5_gpu_set_stream_at_first_call"]
    task, solution = build()
    result = evaluate(task, solution, config(cache_dir, guard=False))
    _record("r5_gpu_set_stream_runtime", "hack", result)
    assert_rejected(result, ("stream-changed",), "set_stream left in place, static pass off")


@pytest.mark.parametrize("name", HONEST)
def test_honest_control_passes_the_published_protocol_too(name, cache_dir):
    task, solution = HONEST[name]()
    result = evaluate(task, solution, config(cache_dir, protocol="published"))
    _record(name + "_published", "honest", result)
    assert result.protocol == "published"
    assert_accepted(result)
