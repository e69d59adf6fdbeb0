"""End-to-end evaluations on the CPU backend: verdicts, failures by phase, isolation."""

import asyncio
import io
import json
import statistics
import subprocess
import sys

import pytest

from cuda_agent.env import EvalPool, evaluate
from cuda_agent.env.cli.commands import print_result
from cuda_agent.env.reward import reward_from_speedups
from cuda_agent.env.run.measures import DECISION_CAP
from cuda_agent.tasks import Solution, Task, load_solution
from tests.env.helpers import EXAMPLES, HONEST_BODY, cpu_config, cpu_workspace, example_task, kernel


def test_honest_workspace_solution_is_correct_and_timed(cache_dir):
    result = evaluate(example_task(), cpu_workspace(), cpu_config(cache_dir))
    assert result.error is None, result.error
    assert result.compiled and result.correct and result.weights == "state_dict"
    # the task's 3 draws and the 4 structured sets of the strict protocol
    assert len(set(result.seeds)) == 3 and result.max_abs_error == [0.0] * 8 and not result.skipped_sets
    # 5 timed calls (6 where a round is repeated); up to 3x that where the reward's margin lay inside the
    # speedup's interval (a loaded machine), timing going on until it decides
    assert result.kernel_ms > 0 and result.eager_ms > 0 and 5 <= result.timings["kernel"].iters <= DECISION_CAP * 6
    assert result.timings["eager"].iters == result.timings["kernel"].iters   # paired, call by call
    # the median of per-call ratios lies within what the two sides' extremes allow
    eager, kernel_t = result.timings["eager"], result.timings["kernel"]
    assert eager.min_ms / kernel_t.max_ms <= result.speedup_vs_eager <= eager.max_ms / kernel_t.min_ms
    assert result.reward == reward_from_speedups(True, result.speedup_vs_eager, result.speedup_vs_compile)
    assert result.reward in (1, 2)  # faster than eager or not: CPU timing is noisy
    assert set(result.phase_seconds) >= {"compile", "verify", "profile", "baselines"}
    # the tolerance margin of the pass: the verified element nearest its limit (exact here: 0 of atol)
    error, allowed = result.tolerance_used
    assert error == 0.0 and 0 < allowed <= cpu_config(cache_dir).atol + cpu_config(cache_dir).rtol * 10
    out = io.StringIO()
    print_result(result, file=out)
    assert f"worst error 0 of {allowed:.3g} allowed" in out.getvalue()


def test_a_relative_cache_folder_works(cache_dir, monkeypatch):
    """Compilers run in the build's own folder: a cache given relative to the caller's folder (as
    `--cache-dir .cache` is) must still be found there."""
    monkeypatch.chdir(cache_dir.parent)
    config = cpu_config(cache_dir.name, baselines=False)
    assert config.cache_dir == cache_dir.absolute()
    result = evaluate(example_task(), cpu_workspace(), config)
    assert result.error is None, result.error
    assert result.correct


@pytest.fixture(scope="module")
def inline_result(cache_dir):
    """The example's single-file load_inline solution, evaluated once for the two tests below."""
    solution = load_solution(EXAMPLES / "solution_cpu_inline.py")
    return evaluate(example_task(), solution, cpu_config(cache_dir, baselines=False))


def test_honest_single_file_load_inline_solution(inline_result):
    result = inline_result
    assert result.error is None, result.error
    assert result.correct and result.reward == 1 and result.eager_ms is None


def test_load_inline_builds_in_the_harness_and_refuses_unsafe_flags(cache_dir, inline_result):
    """load_inline in the candidate is served by the harness, which compiles into the shared cache;
    a flag that could make the compiler run code of the solution's choosing is refused."""
    code = (EXAMPLES / "solution_cpu_inline.py").read_text()
    honest = inline_result   # the same solution, as Solution.from_code(code)
    assert honest.correct, honest.error
    built = list((cache_dir / "build" / "lib").glob("*/bias_relu_cpu.so"))
    assert built, "the harness did not build into the shared cache"
    evil = code.replace('functions=["bias_relu"])', 'functions=["bias_relu"], extra_cflags=["-O3", "-fplugin=./p.so"])')
    assert evil != code
    result = evaluate(example_task(), Solution.from_code(evil), cpu_config(cache_dir, baselines=False))
    assert result.error.phase == "compile" and "-fplugin=./p.so" in result.error.message and "not allowed" in result.error.message


def test_builds_are_served_until_the_model_is_made_and_refused_during_calls(cache_dir, inline_result):
    """load_inline in ModelNew.__init__ is built; one first asked for inside forward is refused with a
    clear error (the harness's compile would be work done during the call, outside its measure)."""
    code = (EXAMPLES / "solution_cpu_inline.py").read_text()
    call = 'ext = load_inline(name="bias_relu_cpu", cpp_sources=source, functions=["bias_relu"])'
    assert inline_result.correct and call in code   # built once already: the same build is a cache hit
    in_init = code.replace(call, "").replace("super().__init__()", "super().__init__()\n        self.ext = " +
                                               call.removeprefix("ext = ")).replace("ext.bias_relu", "self.ext.bias_relu")
    made = evaluate(example_task(), Solution.from_code(in_init), cpu_config(cache_dir, baselines=False))
    assert made.correct, made.error
    in_forward = code.replace(call, "").replace("return ext.bias_relu", call + "\n        return ext.bias_relu")
    late = evaluate(example_task(), Solution.from_code(in_forward), cpu_config(cache_dir, baselines=False))
    assert not late.correct and late.error.phase == "verify", late.error
    assert "never once calls have begun" in late.error.message and "forward failed" in late.error.message


def test_compile_error_names_file_and_line(cache_dir):
    result = evaluate(example_task(), cpu_workspace(kernel("int oops = ;\n" + HONEST_BODY)), cpu_config(cache_dir))
    assert not result.compiled and result.reward == -1
    assert result.error.phase == "compile" and "kernels/bias_relu.cpp:6" in result.error.message


def test_python_syntax_error_is_a_compile_failure(cache_dir):
    result = evaluate(example_task(), cpu_workspace(model_new="class ModelNew(:\n"), cpu_config(cache_dir))
    assert result.error.phase == "compile" and "SyntaxError" in result.error.message and "line 1" in result.error.message


def test_missing_model_new_class(cache_dir):
    result = evaluate(example_task(), Solution.from_code("import torch\n"), cpu_config(cache_dir))
    assert result.error.phase == "compile" and "ModelNew" in result.error.message


def test_wrong_output_fails_verification(cache_dir):
    no_relu = HONEST_BODY.replace("v > 0.f ? v : 0.f", "v")
    result = evaluate(example_task(), cpu_workspace(kernel(no_relu)), cpu_config(cache_dir))
    assert result.compiled and not result.correct and result.reward == -1
    assert result.error.phase == "verify" and result.error.rule == "correctness"
    assert "input set 1" in result.error.message and "outside atol" in result.error.message


def test_segfault_is_a_structured_failure(cache_dir):
    # (a write through a null pointer does not fault in every container, and `raise` is refused at link
    # level: a write into a string literal, which lives in read-only pages)
    crash = '*(volatile char*)const_cast<char*>("read-only") = 0;\n' + HONEST_BODY
    result = evaluate(example_task(), cpu_workspace(kernel(crash)), cpu_config(cache_dir))
    assert result.error.phase == "verify" and result.error.rule == "crash"
    assert "SIGSEGV" in result.error.message and result.reward == -1


def test_infinite_loop_in_kernel_times_out(cache_dir):
    hang = "volatile int spin = 1; while (spin) {}\n" + HONEST_BODY
    result = evaluate(example_task(), cpu_workspace(kernel(hang)), cpu_config(cache_dir, timeout_verify=4.0))
    assert result.error.phase == "verify" and result.error.rule == "timeout"
    assert "timed out after 4 s" in result.error.message


def test_infinite_loop_in_python_times_out(cache_dir):
    model_new = ("import torch.nn as nn\nimport cuda_extension\n"
                 "class ModelNew(nn.Module):\n    def __init__(self, f):\n        super().__init__()\n"
                 "    def forward(self, x):\n        while True:\n            pass\n")
    result = evaluate(example_task(), cpu_workspace(model_new=model_new), cpu_config(cache_dir, timeout_verify=4.0))
    assert result.error.phase == "verify" and result.error.rule == "timeout"


def test_weights_matched_by_seed_when_names_differ(cache_dir):
    model_new = cpu_workspace().entry_code.replace("self.bias", "self.offset")
    result = evaluate(example_task(), cpu_workspace(model_new=model_new), cpu_config(cache_dir, baselines=False))
    assert result.correct and result.weights == "seed"


def test_broken_tasks_are_task_errors_not_solution_errors(cache_dir):
    code = (EXAMPLES / "model.py").read_text()
    no_model = Task("no_model", code.replace("class Model(", "class Other("))
    result = evaluate(no_model, cpu_workspace(), cpu_config(cache_dir))
    assert result.task_error and result.reward is None and "Model" in result.error.message
    raising = Task("raising", code.replace("return [torch.randn(batch, features)]", "raise RuntimeError('boom')"))
    result = evaluate(raising, cpu_workspace(), cpu_config(cache_dir))
    assert result.task_error and "boom" in result.error.message and result.reward is None
    # the judge sets up while the candidate's kernels build: a broken task still comes first
    result = evaluate(raising, cpu_workspace(kernel("int oops = ;\n" + HONEST_BODY)), cpu_config(cache_dir))
    assert result.task_error and "boom" in result.error.message and result.reward is None


def test_torch_compile_baseline_is_stored_and_reused_only_while_eager_agrees(tmp_path, cache_dir):
    """The first evaluation times torch.compile paired with the candidate and stores it; the next one
    reuses it (scaled by the eager time it measured itself). A stored entry whose eager time no longer
    agrees with what is measured now (tampered with, or another machine state) is re-timed."""
    import json
    import shutil

    from cuda_agent.env.run.baselines import BaselineStore

    own = tmp_path / "cache"
    shutil.copytree(cache_dir / "build", own / "build", symlinks=True)   # builds shared, baselines not
    config = cpu_config(own, compile_baseline=True, timeout_profile=600.0)
    first = evaluate(example_task(), cpu_workspace(), config)
    assert first.correct and first.baseline_source == "paired" and first.speedup_vs_compile is not None
    [(key, entry)] = BaselineStore(own).entries()
    assert entry.compile_ms == first.compile_ms and entry.code == example_task().code
    second = evaluate(example_task(), cpu_workspace(), config)
    assert second.correct and second.baseline_source in ("stored", "re-timed")
    path = own / "baselines" / f"{key}.json"
    forged = json.loads(path.read_text())
    forged["eager"]["median_ms"] *= 1000       # a stored lie: eager (and compile) 1000x slower
    forged["compile"]["median_ms"] *= 1000
    path.write_text(json.dumps(forged))
    third = evaluate(example_task(), cpu_workspace(), config)
    assert third.correct and third.baseline_source == "re-timed"
    assert third.compile_ms < 100 * first.compile_ms   # timed afresh, not the stored lie
    assert BaselineStore(own).get(key).eager_ms < forged["eager"]["median_ms"] / 10   # the lie is replaced


def test_pool_runs_concurrent_jobs(cache_dir):
    pool = EvalPool(cpu_config(cache_dir, baselines=False), cpu_slots=2)
    wrong = cpu_workspace(kernel(HONEST_BODY.replace("v > 0.f ? v : 0.f", "-v")))
    results = asyncio.run(pool.evaluate_many([(example_task(), cpu_workspace()), (example_task(), wrong)]))
    assert [r.correct for r in results] == [True, False]


def test_cli_json_and_exit_codes(cache_dir, tmp_path):
    env_args = ["--backend", "cpu", "--trials", "2", "--iters", "3", "--no-compile-baseline",
                "--cache-dir", str(cache_dir)]
    cmd = [sys.executable, "-m", "cuda_agent.cli", "eval", str(EXAMPLES / "model.py"),
           str(EXAMPLES / "solution_cpu"), "--json", *env_args]
    bad = tmp_path / "bad.py"
    bad.write_text("class ModelNew:\n    pass\n\nraise RuntimeError('fails on import')\n")   # evaluated, rejected

    def start(args):
        return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    # three independent commands, run side by side
    good = start(cmd)
    broken = start(cmd[:4] + [str(EXAMPLES / "model.py"), str(bad), "--json", *env_args])
    missing = start(cmd[:4] + ["no/such/task.py", str(bad), *env_args])

    stdout, stderr = good.communicate(timeout=600)
    assert good.returncode == 0, stderr
    payload = json.loads(stdout)
    for key in ("compiled", "correct", "error", "kernel_ms", "eager_ms", "compile_ms", "speedup_vs_eager",
                "speedup_vs_compile", "reward"):
        assert key in payload
    assert payload["correct"] is True and payload["error"] is None

    stdout, _ = broken.communicate(timeout=600)
    assert broken.returncode == 0 and json.loads(stdout)["error"]["phase"] == "compile"

    _, stderr = missing.communicate(timeout=600)
    assert missing.returncode == 2 and "not found" in stderr


def test_cache_warm_precompiles_the_torch_header(cache_dir):
    cmd = [sys.executable, "-m", "cuda_agent.cli", "cache"]
    proc = subprocess.run([*cmd, "warm", "--backend", "cpu", "--cache-dir", str(cache_dir)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0 and "cpu toolchain ready" in proc.stdout, proc.stderr
    assert list((cache_dir / "build" / "pch").glob("*/torch_extension_pch.h.gch"))
    proc = subprocess.run([*cmd, "defrost", "--cache-dir", str(cache_dir)], capture_output=True, text=True)
    assert proc.returncode == 2 and "'info', 'clear', 'warm', 'verify' or 'peak'" in proc.stderr


def test_compile_only_and_verify_only_runs(cache_dir):
    compiled = evaluate(example_task(), cpu_workspace(), cpu_config(cache_dir), stop_after="compile")
    assert compiled.compiled and not compiled.correct and compiled.reward is None and compiled.seeds
    assert set(compiled.phase_seconds) == {"compile"}
    verified = evaluate(example_task(), cpu_workspace(), cpu_config(cache_dir), stop_after="verify")
    assert verified.correct and verified.kernel_ms is None and verified.reward is None
    broken = evaluate(example_task(), cpu_workspace(kernel("int oops = ;\n")), cpu_config(cache_dir),
                      stop_after="compile")
    assert broken.error.phase == "compile" and broken.reward == -1


def test_an_earlier_calls_verdict_comes_before_a_later_calls_failure(cache_dir):
    """The judge takes calls in batches while the candidate goes on: when call N + 1 fails in the
    candidate's process, the judge's verdict on call N (a wrong output) is still the one reported."""
    model_new = ("import torch\nimport torch.nn as nn\nimport cuda_extension\n"
                 "class ModelNew(nn.Module):\n    def __init__(self, features):\n        super().__init__()\n"
                 "        self.bias = nn.Parameter(torch.randn(features))\n        self.n = 0\n"
                 "        self.register_buffer('other', torch.randn(features) + 3, persistent=False)\n"
                 "    def forward(self, x):\n        self.n += 1\n"
                 "        if self.n == 16:\n            raise RuntimeError('call after the wrong one')\n"
                 "        return cuda_extension.bias_relu(x, self.other if self.n == 15 else self.bias)\n")
    result = evaluate(example_task(), cpu_workspace(model_new=model_new), cpu_config(cache_dir, iters=20))
    assert result.error.phase == "profile" and result.error.rule == "recheck-after-timing", result.error


def test_slow_calls_shorten_the_timed_schedule_to_the_profile_budget(cache_dir):
    result = evaluate(example_task(), cpu_workspace(), cpu_config(cache_dir, iters=40, profile_budget_s=0.001))
    assert result.error is None, result.error
    assert result.timings["kernel"].iters == 5 == result.timings["eager"].iters   # the floor, not 40


def test_a_reference_failing_inside_a_batch_of_timed_calls_is_a_task_error(cache_dir):
    """The judge times its calls in batches: the task's own failure on one of them ends the evaluation
    as the task's, not the solution's, and the calls after it are not answered."""
    code = (EXAMPLES / "model.py").read_text()
    assert "    def forward(self, x):\n" in code
    flaky = Task("flaky", code.replace("    def forward(self, x):\n",
                                       "    calls = 0\n\n    def forward(self, x):\n        Model.calls += 1\n"
                                       "        if Model.calls == 14:\n            raise RuntimeError('draw 14')\n"))
    result = evaluate(flaky, cpu_workspace(), cpu_config(cache_dir, iters=20))
    assert result.task_error and "draw 14" in result.error.message and result.reward is None


@pytest.mark.parametrize("batch", [None, 8])
def test_the_judge_holds_the_device_only_for_draws_timing_and_whole_outputs(cache_dir, tmp_path, monkeypatch, batch):
    """Who holds the device's lock, from its log: the judge compares a timed call's samples on the CPU
    (the reference is read where the candidate was sampled inside the timed hold), so only whole
    outputs (verification) take a compare hold; the candidate's checks after a timed call's timing hold
    the lock shared, and so do the judge's reads of its references at the samples after its timed runs.
    On the CPU the judge takes timed calls one at a time (`schedule.judge_batch`); in batches, as on the
    GPU (`batch=8`), a batch's inputs are drawn under one hold and its runs timed under another."""
    from cuda_agent.env.infra.lock_log import read_log
    from cuda_agent.env.run import evaluation

    if batch is not None:
        monkeypatch.setattr(evaluation, "judge_batch", lambda backend: batch)
    log = tmp_path / "lock.log"
    monkeypatch.setenv("CUDA_AGENT_LOCK_LOG", str(log))
    monkeypatch.setenv("CUDA_AGENT_LOCK_DIR", str(tmp_path))
    # one evaluation's holds: the second size of the task is an evaluation of its own (other_scale.py)
    result = evaluate(example_task(), cpu_workspace(), cpu_config(cache_dir, other_scale=False))
    assert result.correct, result.error
    holds = read_log(log)
    count = {}
    for h in holds:
        count[h["label"]] = count.get(h["label"], 0) + 1
    verification = len(result.max_abs_error)   # whole outputs compared: the task's draws and structured sets
    judged = sum(count.get(f"harness.profile.{kind}", 0) for kind in ("warmup", "timed", "spot"))
    assert count["harness.verify.verify"] == verification and judged > 8
    assert count["judge.compare"] == verification
    if batch is None:   # call by call: a timed hold for each call the judge times (every timed call, and more)
        assert count["harness.profile.timed"] <= count["judge.timed"] <= judged
    else:
        assert count["judge.draw"] < verification + judged   # timed calls drawn a batch at a time
        assert count["judge.timed"] < judged
    assert all(not h["shared"] for h in holds if h["label"] in ("judge.timed", "harness.profile.timed"))
    # a timed call's checks after its timing run shared (locks.Hold.share); verification calls are shared throughout
    assert count["harness.profile.timed.shared"] == count["harness.profile.timed"]
    assert count["harness.profile.null.shared"] == count["harness.profile.null"] > 0
    assert "harness.verify.verify.shared" not in count
    # and the judge's timed batches: reading the references at the samples comes after the timed runs, shared
    assert count["judge.timed.shared"] == count["judge.timed"]
    # beside the holds (diagnosis): each worker's device set-up, done without the lock, and when
    started = read_log(log, outside=True)
    assert sorted(h["label"] for h in started) == ["startup.candidate", "startup.judge", "startup.twin"]
    assert all(h["got"] <= h["released"] for h in started)   # on the CPU next to nothing happens there


def test_cpu_outputs_are_read_from_outside_or_in_process_when_the_inputs_do_not_fit(cache_dir, monkeypatch):
    """On the CPU the inputs go through the pair's sealed staging file and the outputs are read from
    the candidate's memory (no file written by it, no `write` step); inputs larger than a slot fall
    back to the in-process path (the candidate draws them, and its outputs go through the box's
    file), with the same verdicts and a warning. (The trace of the first also says how its workers
    started and where the candidate's load went.)"""
    from cuda_agent.env.run import evaluation
    from cuda_agent.env.workers import transfer

    monkeypatch.setenv("CUDA_AGENT_TRACE_CALLS", "1")   # the harness's steps in phase_seconds
    config = cpu_config(cache_dir, baselines=False)
    outside = evaluate(example_task(), cpu_workspace(), config)
    assert outside.correct and "trace.verify.call" in outside.phase_seconds
    assert not any("inside the solution's process" in w for w in outside.warnings)
    # the trace also says how each worker started: its imports and device set-up, then ready
    phases = outside.phase_seconds
    for role in ("judge", "candidate"):
        imports, setup = phases[f"trace.startup.{role}.imports"], phases[f"trace.startup.{role}.device_setup"]
        assert imports > 0 and setup >= 0
        assert phases[f"trace.startup.{role}.ready"] == pytest.approx(imports + setup, abs=0.003)
    # and where the candidate's load went, step by step, in its log
    load = next(line for line in outside.log.splitlines() if line.startswith("load trace "))
    assert all(f" {step}=" in f" {load[len('load trace '):]}" for step in
               ("setup", "calibration", "solution", "early_model")), load
    assert "trace.verify.write" not in outside.phase_seconds
    monkeypatch.setattr(transfer, "STAGING_SLOT_BYTES", 64)
    filed = evaluate(example_task(), cpu_workspace(), config)
    assert filed.correct and "trace.verify.write" in filed.phase_seconds
    assert any("inside the solution's process" in w for w in filed.warnings)
    # the outside sampling judges only calls decided from outside (rules/op_samples.py)
    assert "symbols" in outside.cpu_samples or "unavailable" in outside.cpu_samples
    assert "decided inside the solution's process" in filed.cpu_samples["unavailable"]
    # in-process with outputs that fit a slot (the GPU's path): the verification outputs are staged
    # there, never written to the box's file, and the judge is sent to the slot
    monkeypatch.setattr(transfer, "STAGING_SLOT_BYTES", 1 << 30)
    monkeypatch.setattr(evaluation._Evaluation, "_memory_held", lambda self: False)
    staged = evaluate(example_task(), cpu_workspace(), config)
    assert staged.correct, staged.error
    assert "trace.verify.write" not in staged.phase_seconds
    assert any("inside the solution's process" in w for w in staged.warnings)
    monkeypatch.undo()
    no_relu = kernel(HONEST_BODY.replace("v > 0.f ? v : 0.f", "v"))
    monkeypatch.setattr(transfer, "STAGING_SLOT_BYTES", 1 << 30)
    wrong = evaluate(example_task(), cpu_workspace(no_relu), config)
    assert wrong.error.rule == "correctness" and "input set 1" in wrong.error.message


def test_timing_stops_once_the_medians_are_precise_and_keeps_its_spot_and_empty_calls(cache_dir, tmp_path,
                                                                                      monkeypatch):
    """`precision`: the timed calls stop once the kernel's median and the paired speedup are pinned
    down (here a bound met as soon as enough calls are judged, whatever a loaded machine does to single
    calls); the spot checks and empty calls of the schedule still run. A bound no timing meets times
    every call."""
    from cuda_agent.env.infra.lock_log import read_log

    log = tmp_path / "lock.log"
    monkeypatch.setenv("CUDA_AGENT_LOCK_LOG", str(log))
    monkeypatch.setenv("CUDA_AGENT_LOCK_DIR", str(tmp_path))
    # the precision rule alone: a loaded machine can leave the reward's decision open for a while, and
    # timing then goes on by design (tests/env/test_decision.py)
    monkeypatch.setattr("cuda_agent.env.run.measures.decision_open", lambda *args: False)
    loose = evaluate(example_task(), cpu_workspace(), cpu_config(cache_dir, iters=60, min_iters=6, precision=1000.0))
    assert loose.correct, loose.error
    # calls still with the judge are judged once the kernel is known: at most a batch (8) past the minimum
    assert 6 <= loose.timings["kernel"].iters <= 6 + 8
    assert loose.timings["eager"].iters == loose.timings["kernel"].iters
    labels = [h["label"] for h in read_log(log)]
    assert labels.count("harness.profile.spot") == 3 and labels.count("harness.profile.null") == 12
    tight = evaluate(example_task(), cpu_workspace(), cpu_config(cache_dir, iters=60, min_iters=6, precision=1e-9))
    assert tight.correct and tight.timings["kernel"].iters >= 60


def test_every_timed_calls_measures_can_go_to_the_log_for_diagnosis(cache_dir, monkeypatch):
    """CUDA_AGENT_LOG_ROUNDS=1: the timed calls' kernel and eager times, in order, and the empty calls'
    walls, as one JSON line of the result's log (pool_throughput --logs collects them)."""
    monkeypatch.setenv("CUDA_AGENT_LOG_ROUNDS", "1")
    result = evaluate(example_task(), cpu_workspace(), cpu_config(cache_dir))
    line = next(line for line in result.log.splitlines() if line.startswith("rounds "))
    logged = json.loads(line[len("rounds "):])
    # the schedule's 12 empty calls, and on the CPU more with any timed calls added while the decision was open
    assert len(logged["rounds"]) == result.timings["kernel"].iters and len(logged["null_walls"]) >= 12
    assert all(wall > 0 for wall in logged["null_walls"])
    # the candidate's twin made each empty call too (run/twin.py)
    assert len(logged["twin_walls"]) == len(logged["null_walls"]) and all(wall > 0 for wall in logged["twin_walls"])
    assert statistics.median(r["kernel"] for r in logged["rounds"]) == pytest.approx(result.kernel_ms)
    # when each was sent (the lock log's clock), and its sides' host times (none unheld, as on the CPU)
    sent = [r["sent"] for r in logged["rounds"]]
    assert sent == sorted(sent) and all(r["kernel_host"] is r["eager_host"] is None for r in logged["rounds"])
