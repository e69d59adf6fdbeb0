"""The feedback after timing: the profiler's tables of the reference and the candidate (CPU backend)."""

import os
import subprocess
import sys

import pytest
import torch

from cuda_agent.agent.workspace import format_result
from cuda_agent.env import EvalConfig, evaluate
from cuda_agent.env.infra.isolation import CPU_WORKER_ENV
from cuda_agent.env.measure.operators import extension_functions, profile_forward, table
from cuda_agent.env.workers.messages import OwnProfiled, read_answer
from tests.env.helpers import cpu_config, cpu_workspace, example_task

CPU = torch.device("cpu")


def test_the_reference_table_names_a_matmuls_top_operator_per_call():
    x, w = torch.randn(256, 256), torch.randn(256, 256)
    found = profile_forward(lambda: torch.relu(x @ w), CPU, calls=2, rows=8)
    assert found["clock"] == "cpu" and found["calls"] == 2
    names = [row["name"] for row in found["rows"]]
    assert "aten::mm" in names and all("::" in name for name in names)   # operators, no Python frames
    mm = next(row for row in found["rows"] if row["name"] == "aten::mm")
    assert mm["calls"] == 1.0 and 0 < mm["ms"] <= found["total_ms"]
    assert [row["ms"] for row in found["rows"]] == sorted((row["ms"] for row in found["rows"]), reverse=True)


def test_a_table_keeps_its_largest_rows_per_forward_and_totals_them_all():
    rows = [("aten::mm", "op", 9000.0, 3), ("aten::add", "op", 3000.0, 3), ("aten::relu", "op", 600.0, 6),
            ("aten::view", "op", 0.0, 3)]
    found = table(rows, "cpu", calls=3, rows=2)
    assert [row["name"] for row in found["rows"]] == ["aten::mm", "aten::add"]
    assert found["rows"][0]["ms"] == pytest.approx(3.0) and found["total_ms"] == pytest.approx(4.2)
    assert table([("k" * 500, "kernel", 1.0, 1)], "cuda", 1, 8)["rows"][0]["name"] == "k" * 160


# a forward writing a fresh 2 MiB tensor, profiled as a CPU worker would: the minor faults of each call
FAULTS_PER_CALL = """
import resource, torch
from cuda_agent.env.measure.operators import profile_forward
faults = []
def forward():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    out = torch.empty(1 << 19).fill_(1.0)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    return out
profile_forward(forward, torch.device("cpu"), calls=3)
print(max(faults[-3:]))
"""


def test_profiled_cpu_calls_reuse_mapped_pages():
    # The profiler's records split the blocks a call's tensors freed: without the heap mapped first, each
    # profiled call's 2 MiB faults on all 512 of its pages (the table then doubles a call's time).
    done = subprocess.run([sys.executable, "-c", FAULTS_PER_CALL], env={**os.environ, **CPU_WORKER_ENV},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[-1]) < 64, done.stdout


def test_extension_functions_are_named_by_module():
    class Proxy:   # an ExtensionProxy stands in front of the compiled module (its `_target`)
        _target = type("Module", (), {"bias_relu": staticmethod(lambda x: x), "_private": staticmethod(len),
                                      "VERSION": 3})
    assert extension_functions({"cuda_extension": Proxy()}) == {"bias_relu": "cuda_extension.bias_relu"}


def test_a_forged_candidate_table_is_refused_as_a_malformed_answer():
    good = {"ok": True, "table": {"clock": "cpu", "calls": 3, "total_ms": 1.0,
                                  "rows": [{"name": "cuda_extension.f", "kind": "extension", "ms": 1.0, "calls": 1.0}]}}
    assert read_answer(good, OwnProfiled)["table"]["rows"][0]["name"] == "cuda_extension.f"
    for bad_row in ({"name": "f", "kind": "op", "ms": -1.0, "calls": 1.0},
                    {"name": "f", "kind": "reward", "ms": 1.0, "calls": 1.0},
                    {"name": "f" * 1000, "kind": "op", "ms": 1.0, "calls": 1.0}):
        with pytest.raises(ValueError):
            read_answer({**good, "table": {**good["table"], "rows": [bad_row]}}, OwnProfiled)


def test_the_switch_is_validated():
    assert EvalConfig().profile_ops is None and EvalConfig(profile_ops=False).profile_ops is False
    with pytest.raises(ValueError, match="profile_ops"):
        EvalConfig(profile_ops="yes")


@pytest.fixture(scope="module")
def profiled(cache_dir):
    # precision None: exactly the schedule's timed calls (no calls added near the reward's margin)
    return evaluate(example_task(), cpu_workspace(), cpu_config(cache_dir, profile_ops=True, precision=None))


def test_the_profile_shows_the_references_operators_and_the_candidates_extension(profiled):
    r = profiled
    assert r.error is None and r.correct, r.error
    reference = [row.name for row in r.reference_ops.rows]
    assert reference[0] in ("aten::add", "aten::clamp_min")   # the task is x + bias, then relu
    assert "aten::add" in reference and r.reference_ops.clock == "cpu"
    own = {row.name: row for row in r.candidate_ops.rows}
    assert own["cuda_extension.bias_relu"].kind == "extension" and own["cuda_extension.bias_relu"].calls == 1.0
    assert "aten::add" not in own   # the candidate's table is its own forward's
    assert r.graph_ms is None and "graph" not in r.timings   # CPU: no CUDA-graph baseline, and no note
    assert not r.feedback_notes and "feedback" in r.phase_seconds
    text = format_result("profile", r)
    assert "where the time goes (torch.profiler, 3 untimed calls after timing):" in text
    assert "reference (eager PyTorch), CPU time per call" in text and "cuda_extension.bias_relu" in text
    assert "CUDA graph" not in text
    # the harness's own sampling of every call, shown under the tables (or why it could not run here)
    sampled = r.cpu_samples
    assert sampled.get("unavailable") or any(symbol == "bias_relu_launcher" for _, symbol, _ in sampled["symbols"])
    assert ("sampled from outside your process" in text) == bool(sampled.get("symbols"))
    assert type(r).from_dict(r.to_dict()) == r   # the tables serialise with the result


def test_the_pass_is_off_for_a_plain_evaluation_and_leaves_the_timing_alone(cache_dir, profiled):
    plain = evaluate(example_task(), cpu_workspace(), cpu_config(cache_dir, precision=None))
    assert plain.correct and plain.reference_ops is None and plain.candidate_ops is None
    assert "where the time goes" not in format_result("profile", plain)
    # the same timed schedule either way (5 calls and at most one at random: cpu_config), paired call by
    # call: the pass runs on calls of its own, after it
    for r in (plain, profiled):
        assert 5 <= r.timings["kernel"].iters <= 6 and r.timings["eager"].iters == r.timings["kernel"].iters


def test_a_candidate_failing_in_the_profiler_pass_keeps_its_result(cache_dir):
    # every call of the schedule has fresh inputs; the profiler pass calls forward again on the same ones
    fails_on_the_same_inputs_twice = (
        "import torch\nimport torch.nn as nn\nimport cuda_extension\n\n\n"
        "class ModelNew(nn.Module):\n"
        "    def __init__(self, features):\n"
        "        super().__init__()\n"
        "        self.bias = nn.Parameter(torch.randn(features))\n"
        "        self.last = None\n\n"
        "    def forward(self, x):\n"   # x held: a freed input's id() comes back for the next one
        "        if self.last is x:\n"
        "            raise RuntimeError('called twice on the same inputs')\n"
        "        self.last = x\n"
        "        return cuda_extension.bias_relu(x, self.bias)\n")
    r = evaluate(example_task(), cpu_workspace(model_new=fails_on_the_same_inputs_twice),
                 cpu_config(cache_dir, profile_ops=True))
    assert r.error is None and r.correct and r.reward in (1, 2) and r.kernel_ms > 0
    assert r.candidate_ops is None and r.reference_ops is not None
    assert r.feedback_notes == ["your kernels' profile: RuntimeError: called twice on the same inputs"]
    assert "note: your kernels' profile:" in format_result("profile", r)


def test_the_eval_command_prints_the_graph_baseline_and_the_passs_notes():
    import io

    from cuda_agent.env.cli.commands import print_result
    from cuda_agent.env.result import EvalResult

    out = io.StringIO()
    print_result(EvalResult(task="t", backend="cuda", correct=True, kernel_ms=1.0, eager_ms=2.0, graph_ms=1.25,
                            feedback_notes=["the reference's profile: no answer"]), file=out)
    assert "CUDA graph (eager, captured)  1.2500 ms  (not in the reward)" in out.getvalue()
    assert "note: the reference's profile: no answer" in out.getvalue()
    out = io.StringIO()
    print_result(EvalResult(task="t", backend="cpu", correct=True, kernel_ms=1.0, eager_ms=2.0), file=out)
    assert "CUDA graph" not in out.getvalue()


def test_no_table_or_graph_time_reaches_the_reward():
    from dataclasses import replace

    from cuda_agent.env.result import EvalResult, OpRow, OpTable
    from cuda_agent.env.run.scoring import score

    base = EvalResult(task="t", backend="cuda", compiled=True, correct=True, kernel_ms=1.0, eager_ms=1.02,
                      compile_ms=0.9, speedup_vs_eager=1.02, speedup_vs_compile=0.9)
    # a candidate's process claiming a kernel 1000x faster, and a graph baseline far slower than eager
    forged = replace(base, graph_ms=50.0, candidate_ops=OpTable("cuda", 3, 0.001, [OpRow("k", "kernel", 0.001, 1.0)]),
                     reference_ops=OpTable("cuda", 3, 9.0, [OpRow("aten::mm", "op", 9.0, 1.0)]))
    score(base), score(forged)
    assert (forged.reward, forged.reward_continuous) == (base.reward, base.reward_continuous) == (1, 0.9)


class _NoJudgeCalls:
    """A judge whose channel must not be used: the stored graph time is enough."""
    class channel:
        @staticmethod
        def send(message):
            raise AssertionError(f"the judge was asked to time the graph again: {message}")


def test_a_stored_graph_baseline_is_reused_scaled_even_when_eager_moved(tmp_path):
    """The graph baseline reaches no reward: an entry timed before is scaled to this evaluation's eager
    time, never timed again (that holds the device while a loaded host's eager times wander)."""
    from dataclasses import replace

    from cuda_agent.env.result import EvalResult, Timing
    from cuda_agent.env.run.baselines import BaselineEntry, BaselineStore
    from cuda_agent.env.run.feedback import Feedback

    BaselineStore(tmp_path).put("key", BaselineEntry(
        task="t", task_digest="d", device="gpu", torch="x", settings={}, eager={"median_ms": 0.01},
        graph=Timing.from_samples([0.008] * 5).__dict__, graph_eager_ms=0.01))
    feedback = Feedback.__new__(Feedback)
    feedback.backend, feedback.judge = "cuda", _NoJudgeCalls()
    feedback.config = replace(EvalConfig(), cache_dir=tmp_path, graph_baseline=True)
    feedback._store_key = lambda: "key"
    feedback.say = lambda text: None
    feedback.result = EvalResult(task="t", backend="cuda", protocol="strict")
    feedback.result.timings["eager"] = Timing.from_samples([0.2] * 5)   # 20x the stored eager: a loaded host
    feedback._graph_baseline()
    assert feedback.result.graph_ms == pytest.approx(0.008 * 0.2 / 0.01)
    assert feedback.result.timings["graph"].median_ms == feedback.result.graph_ms
