"""The hack suite's third and fourth rounds on the CPU backend (cases_wave.py), and the cheats whose
verdict needs a look at more than one result: link-level refusals, the published protocol beside the
strict one, a forged clock, and a process that tries to outlive the candidate."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from cuda_agent.env import evaluate
from tests.env.helpers import example_task
from tests.hacks.cases import (assert_accepted, assert_rejected, describe, example_model_new, hack_config,
                               honest_result, run_case)
from tests.hacks.cases_wave import (FORGED_TIME_ONCE, HACKS_WAVE, HONEST_WAVE, LINK_CHEATS, LINK_SYMBOLS,
                                    NATIVE_REACH, link_file, task, wave_workspace)


@pytest.mark.parametrize("case", HONEST_WAVE, ids=lambda c: c.id)
def test_honest_solution_is_accepted(case, cache_dir, record, honest_results):
    honest_results[case.id] = result = run_case(case, cache_dir, record)
    assert_accepted(result)


@pytest.mark.parametrize("case", HACKS_WAVE, ids=lambda c: c.id)
def test_hack_is_rejected(case, cache_dir, record):
    assert_rejected(run_case(case, cache_dir, record), case.rules, case.what)


def test_library_compute_past_the_dispatcher_is_refused_at_link_time(cache_dir, record):
    """ATen's backend kernels (directly or through a function pointer), redispatch below the guard, the
    dispatcher's thread-local mode stack, PyTorch's thread pool and mprotect: whatever the source does
    to hide it, the built library must import the symbol, and the harness names it."""
    solution = wave_workspace(example_model_new("return cuda_extension.slow_bias_relu(x, self.bias)"),
                              link_file(*LINK_CHEATS))
    result = evaluate(example_task(), solution, hack_config(cache_dir))
    for name in LINK_CHEATS:
        record(f"link_{name.removesuffix('.cpp')}", "library compute past the dispatcher", "hack", result,
               expected=("native-symbol",), what=f"kernels/link/{name} linked into the solution")
    assert_rejected(result, ("native-symbol",))
    assert result.error.phase == "compile"
    for name, symbol in LINK_SYMBOLS.items():
        assert symbol in result.error.message, f"{name}: {symbol} not named in {result.error.message}"


def test_native_code_reaching_python_or_running_outside_calls_is_refused_at_link_time(cache_dir, record):
    """From C++ a solution could run Python (pybind11's exec, PyRun_*), import the harness's modules,
    reach the calling frames, or set a timer whose handler runs during the harness's timing: each is
    refused by the symbol it imports."""
    solution = wave_workspace(example_model_new("return cuda_extension.slow_bias_relu(x, self.bias)"),
                              link_file(*NATIVE_REACH))
    result = evaluate(example_task(), solution, hack_config(cache_dir))
    for name in NATIVE_REACH:
        record(f"link_{name.removesuffix('.cpp')}", "peeking at the harness", "hack", result,
               expected=("native-symbol",), invented=True, what=f"kernels/link/{name} linked into the solution")
    assert_rejected(result, ("native-symbol",))
    assert result.error.phase == "compile"
    for name, symbol in NATIVE_REACH.items():
        assert symbol in result.error.message, f"{name}: {symbol} not named in {result.error.message}"


def test_imports_the_toolchain_brings_are_exempt_only_outside_the_solutions_own_code(cache_dir):
    """A compiler wrapper that links libstdc++ statically makes every library import `syscall`; the
    library's imports are checked less the toolchain's own, while the objects compiled from the
    solution's sources still answer for everything they call."""
    from cuda_agent.env.builds.compiler import build_extension
    from cuda_agent.env.rules.symbols import check_library, check_symbol, toolchain_imports

    probe = toolchain_imports("cpu", str(cache_dir / "build"))
    assert probe and not [s for s in probe if check_symbol(s)], "this machine's toolchain imports nothing refused"
    report = build_extension("got_clock_only", link_file("got_clock.cpp"), "cpu", cache_dir / "build")
    brought = frozenset({"mprotect", "dl_iterate_phdr"})   # as if the toolchain had brought them
    assert {f.symbol for f in check_library(report.path)} >= brought
    assert not check_library(report.path, exempt=brought)
    assert {f.symbol for f in check_library(report.path, report.objects, exempt=brought)} >= brought


def test_hashing_the_inputs_to_memoise_never_pays(cache_dir, record, honest_results):
    """C++ memoisation keyed by the input's contents: every call draws fresh inputs from a seed the
    harness sends when the call starts, so the memo never hits and the kernel is timed honestly (against
    the honest control honest_hinge_double_accumulation: the same task and binding, without the memo)."""
    honest = honest_result(next(c for c in HONEST_WAVE if c.id == "honest_hinge_double_accumulation"), cache_dir,
                           record, honest_results)
    assert_accepted(honest)
    memo = evaluate(task("hinge_loss")(), wave_workspace(_hinge_model("memo_hinge")), hack_config(cache_dir))
    timed_honestly = memo.correct and memo.timings["kernel"].min_ms >= 0.3 * honest.timings["kernel"].min_ms
    record("memo_by_input_contents", "result caching", "hack", memo, expected=("recheck-after-timing",),
           invented=True, neutralised=timed_honestly, what="C++ memo keyed by a hash of the inputs")
    if memo.correct:
        assert timed_honestly, describe(memo)
    else:
        assert_rejected(memo, ("recheck-after-timing", "correctness"))


def _hinge_model(function: str) -> str:
    from tests.hacks.cases import plain_model_new

    return plain_model_new("predictions, targets", f"return cuda_extension.{function}(predictions, targets)")


PUBLISHED_ONLY = ("constant_hinge_loss", "softmax_one_over_dim", "identity_passes_relu_on_rand",
                  "approx_mse_every_32nd")


@pytest.mark.parametrize("case_id", PUBLISHED_ONLY)
def test_the_published_protocol_accepts_what_only_the_strict_one_catches(case_id, cache_dir):
    """`--verify published` reproduces the paper's and KernelBench's protocol (the task's own draws at
    atol = rtol = 1e-2): these cheats pass it, which is why rewards use the strict protocol."""
    case = next(c for c in HACKS_WAVE if c.id == case_id)
    task_obj, solution = case.build()
    result = evaluate(task_obj, solution, hack_config(cache_dir, protocol="published"))
    assert result.correct and result.protocol == "published", describe(result)


def test_honest_controls_pass_the_published_protocol_too(cache_dir):
    for case in HONEST_WAVE:
        task_obj, solution = case.build()
        assert_accepted(evaluate(task_obj, solution, hack_config(cache_dir, protocol="published")))


FORGED_CLOCKS = {
    # the timer the harness reads in the candidate's process, at a tenth of the speed
    "forged_clock_tenth": ("the timer the harness reads in the candidate's process runs at a tenth of the speed", """
import cuda_agent.env.measure.timing as _timing

_real = _timing._perf_counter
_start = _real()


def _slow():
    return _start + (_real() - _start) / 10


_timing._perf_counter = _slow
"""),
    "forged_time_once": ("the harness's timing function in the candidate's process reports a tenth",
                         FORGED_TIME_ONCE),
}
SLOW_FORWARD = "return cuda_extension.slow_bias_relu(x, self.bias)"


@pytest.mark.parametrize("name", FORGED_CLOCKS)
def test_a_forged_clock_changes_nothing_the_harness_measures(name, cache_dir, record):
    """The candidate's process rewrites how the harness times it (here from Python, with the static
    pass off; from C++ it would be a GOT patch). On the CPU backend nothing it reports is a time: a
    call's time is its process's CPU time, read from outside it (env/measure/outside.py), so the forgery is
    accepted and timed exactly as the same kernel with its real clock."""
    what, header = FORGED_CLOCKS[name]
    forged = evaluate(example_task(), wave_workspace(example_model_new(SLOW_FORWARD, header=header)),
                      hack_config(cache_dir, guard=False))
    honest = evaluate(example_task(), wave_workspace(example_model_new(SLOW_FORWARD)),
                      hack_config(cache_dir, guard=False))
    assert_accepted(honest)
    neutralised = forged.correct and forged.reward <= honest.reward and \
        forged.kernel_ms > 0.5 * honest.kernel_ms
    record(name, "forged clocks below Python", "hack", forged, neutralised=neutralised, what=what)
    assert neutralised, f"forged {describe(forged)} against honest {describe(honest)}"


def _processes_named(name: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if Path(f"/proc/{pid}/comm").read_text().strip() == name:
                    found.append(int(pid))
            except OSError:
                pass
    return found


def test_a_process_started_by_the_library_dies_before_the_baselines_are_timed(cache_dir, record, monkeypatch):
    """A static constructor forks a session leader that leaves the worker's process group to load the
    machine while the baselines are timed. With the link check on, the library is refused; with every
    check off, the sandbox's PID namespace still takes it down with the candidate: it is gone when the
    baselines are settled, and the eager time is what an honest run measures."""
    from cuda_agent.env.run import evaluation

    refused = evaluate(example_task(), wave_workspace(example_model_new("return cuda_extension.slow_bias_relu(x, self.bias)"),
                                                      link_file("fork_ctor.cpp")), hack_config(cache_dir))
    assert_rejected(refused, ("native-symbol",))
    assert "fork" in refused.error.message

    seen = {}
    original = evaluation._Evaluation._kill_candidate

    def watched(self):
        seen["before"] = _processes_named("cag_escapee")   # it did start, and outlived nothing yet
        original(self)
        deadline = time.time() + 5
        while _processes_named("cag_escapee") and time.time() < deadline:
            time.sleep(0.05)   # SIGKILL is asynchronous: give the kernel a moment
        seen["after"] = _processes_named("cag_escapee")   # what the baselines are timed beside

    monkeypatch.setattr(evaluation._Evaluation, "_kill_candidate", watched)
    # Every check off (no link check, no process rule): only the sandbox stands in the way. On the CPU
    # backend its seccomp filter refuses the fork itself: the escapee never starts.
    config = hack_config(cache_dir, guard=False, baselines=True, compile_baseline=False)
    model_new = example_model_new("return cuda_extension.slow_bias_relu(x, self.bias)")
    refused_fork = evaluate(example_task(), wave_workspace(model_new, link_file("fork_ctor.cpp")), config)
    assert refused_fork.correct and seen.get("before") == [], "the CPU sandbox let the library fork"
    # With that refusal off (as on the CUDA backend), the PID namespace takes the escapee down.
    from cuda_agent.env.infra import sandbox

    whole_filter = sandbox.seccomp_program
    monkeypatch.setattr(sandbox, "seccomp_program", lambda no_processes=False: whole_filter(False))
    honest = evaluate(example_task(), wave_workspace(model_new), config)
    escaping = evaluate(example_task(), wave_workspace(model_new, link_file("fork_ctor.cpp")), config)
    gone = bool(seen.get("before")) and not seen.get("after") and not _processes_named("cag_escapee")
    record("fork_from_static_constructor", "processes that outlive the candidate", "hack", escaping,
           expected=("extra-process", "native-symbol"), neutralised=gone,
           what="a library constructor forks a session leader that keeps the machine busy")
    assert seen.get("before"), "the escapee never started: the test proves nothing"
    assert not seen.get("after"), "a process the candidate started was alive when the baselines were settled"
    assert not _processes_named("cag_escapee")
    assert escaping.correct and honest.correct, describe(escaping)


PYTHON_FORK = """
import os
import time

if getattr(os, "fo" + "rk")() == 0:          # a session leader that leaves the worker's process group
    os.setsid()
    if getattr(os, "fo" + "rk")() == 0:
        with open("/proc/self/comm", "w") as _fh:
            _fh.write("cag_escapee")
        _end = time.time() + 120
        while time.time() < _end:
            pass
    os._exit(0)
"""


def test_a_forked_process_is_noticed_and_the_baseline_store_is_left_alone(cache_dir, record):
    """The same escape from Python (the name of fork computed), with every check on: the allowlist
    refuses it before it runs (a computed getattr, modules off the list); had it run, the process would
    be noticed at the next call (rule extra-process) and die with the sandbox. No baseline of this
    evaluation reaches the store either way."""
    store = cache_dir / "baselines"
    before = {p.name: p.read_bytes() for p in store.glob("*.json")}
    config = hack_config(cache_dir, baselines=True, compile_baseline=True)
    model_new = example_model_new("return cuda_extension.slow_bias_relu(x, self.bias)", header=PYTHON_FORK)
    result = evaluate(example_task(), wave_workspace(model_new), config)
    record("fork_from_python_import", "processes that outlive the candidate", "hack", result,
           expected=("static:introspection", "extra-process"), invented=True,
           what="model_new.py forks a CPU-loading session leader")
    assert_rejected(result, ("static:introspection", "extra-process"))
    deadline = time.time() + 5
    while _processes_named("cag_escapee") and time.time() < deadline:
        time.sleep(0.05)
    assert not _processes_named("cag_escapee")
    after = {p.name: p.read_bytes() for p in store.glob("*.json")}
    assert {k: v for k, v in after.items() if k in before} == before


def test_an_output_over_an_inputs_memory_is_refused_whatever_its_tensor():
    """An output made over an input's bytes at another address (its own tensor and storage object,
    as torch::from_blob makes one) is still the input's memory: judged by byte ranges."""
    import torch

    from cuda_agent.env.rules.guard import Rejected, check_output

    x = torch.randn(64)
    alias = torch.from_numpy(x.numpy()[4:])          # x's memory, 16 bytes in
    assert alias.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    with pytest.raises(Rejected) as refused:
        check_output(alias, [x], torch.device("cpu"))
    assert refused.value.rule == "output-type"
    check_output(alias.clone(), [x], torch.device("cpu"))   # a copy of it is a new tensor
