"""Feedback on failure (CPU): a wrong candidate timed unscored, a crash named by its input set and the
solution's own frames, work left running after forward named as such, and the second size of a task."""

from __future__ import annotations

import re
import textwrap

import pytest

from cuda_agent.agent.workspace import format_result
from cuda_agent.env import evaluate
from cuda_agent.env.run.crash import crash_digest, without_crash_dump
from cuda_agent.env.run.other_scale import second_size
from cuda_agent.env.run.unscored import UNSCORED_HEADLINE
from cuda_agent.tasks import Task

from .helpers import EXAMPLES, HONEST_BODY, cpu_config, cpu_workspace, example_task, kernel

HONEST_MODEL_NEW = (EXAMPLES / "solution_cpu" / "model_new.py").read_text()
NO_RELU = HONEST_BODY.replace("v > 0.f ? v : 0.f", "v")
# a write into a string literal (read-only pages): faults in every container, unlike a null pointer;
# on one line of a function of its own, which the launcher calls for each row (code follows the call)
CRASH = kernel("""
for (int64_t r = 0; r < rows; ++r) {
    poke(r);
    for (int64_t c = 0; c < cols; ++c) {
        float v = x[r * cols + c] + bias[c];
        out[r * cols + c] = v > 0.f ? v : 0.f;
    }
}
""")
CRASH = CRASH.replace('extern "C"', "__attribute__((noinline, noclone)) static void poke(int64_t r) {\n"
                      '    if (r == 3) *(volatile char*)const_cast<char*>("read-only") = 0;\n}\nextern "C"')


def _line(text: str, part: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if part in line)
DETACHED = "#include <chrono>\n#include <thread>\n" + kernel("""
std::thread([=] {   // returns at once; the output is written 20 ms later
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
""" + HONEST_BODY + """
}).detach();
""")
SPIN = "{ volatile int spin = 1; while (spin) {} }\n"
# only the structured set "scale_up" has its largest value between 50 and 2000 (a draw's is about 5,
# "spikes" puts thousands in)
HANG_ON_SCALE_UP = kernel("""
float top = 0.f;
for (int64_t i = 0; i < rows * cols; ++i) top = std::max(top, std::abs(x[i]));
if (top > 50.f && top < 2000.f) """ + SPIN + HONEST_BODY).replace("#include <csignal>", "#include <algorithm>\n#include <cmath>")
# the first 8 calls verify, at most 5 more warm up: the 14th call of forward is timed (or a spot check)
HANG_ON_A_LATER_CALL = kernel("static int calls = 0;\nif (++calls == 14) " + SPIN + HONEST_BODY)
# the example task's sizes copied from model.py (a loop over 512 rows would overrun at 256: a crash
# where the pages beyond are unmapped, silent corruption where they are not)
FIXED_SIZES = HONEST_MODEL_NEW.replace("bias_relu(x, self.bias)", "bias_relu(x.view(512, 1024), self.bias)")


def test_unscored_profile_times_wrong_outputs_without_a_reward(cache_dir):
    result = evaluate(example_task(), cpu_workspace(kernel(NO_RELU)), cpu_config(cache_dir, unscored=True))
    assert not result.correct and result.reward == -1
    assert result.error.phase == "verify" and result.error.rule == "correctness"
    assert "outside atol" in result.error.message
    # the times are there, and in no field a scored result is read from
    assert result.unscored["kernel_ms"] > 0 and result.unscored["eager_ms"] > 0
    assert result.unscored["speedup_vs_eager"] > 0
    assert result.kernel_ms is None and result.speedup_vs_eager is None and result.timings == {}
    text = format_result("profile", result)
    assert text.startswith("profile: FAILED in verify") and UNSCORED_HEADLINE in text
    assert "you would be" in text and "reward 3" not in text


def test_a_crash_names_its_input_set_and_the_solutions_frames_once(cache_dir):
    # unscored asked for: a crash is never passed over
    assert "read-only" in CRASH
    result = evaluate(example_task(), cpu_workspace(CRASH), cpu_config(cache_dir, unscored=True))
    error = result.error
    assert error.phase == "verify" and error.rule == "crash" and result.unscored is None
    assert "SIGSEGV" in error.message and "on input set 1 (seed " in error.message
    native, python = error.message.split("Python frames of the solution")
    assert "native frames of the solution" in native and "cuda_extension.so+0x" in native
    # the kernel's line tables: the faulting line, and the line of the call (not the line after it);
    # the binding (torch's headers: no line tables) by its function
    frames = [f.strip() for f in native.split("native frames of the solution (most recent call first):\n")[1].splitlines()]
    assert frames[0].startswith(f"poke(long) at kernels/bias_relu.cpp:{_line(CRASH, 'read-only')} (")
    assert frames[1].startswith(f"bias_relu_launcher at kernels/bias_relu.cpp:{_line(CRASH, 'poke(r);')} (")
    assert frames[2].startswith("bias_relu(at::Tensor, at::Tensor) (cuda_extension.so+0x")
    assert len(frames) == 3   # pybind11's code inlined into the binding is not the solution's
    assert "model_new.py line" in python and "in forward" in python
    assert "guard.py" not in error.message and "candidate.py" not in error.message   # the harness's frames
    assert "cuda_agent_crash" not in error.message
    text = format_result("verify", result)
    assert text.count("bias_relu_launcher") == 1 and "Fatal Python error" not in text
    assert "libpython" not in text and "native frames (most recent" not in text.split("rule: crash")[1]
    assert "Fatal Python error" in result.log   # the whole dump stays in the log


def test_a_timeout_names_the_structured_set_it_hung_on(cache_dir):
    result = evaluate(example_task(), cpu_workspace(HANG_ON_SCALE_UP), cpu_config(cache_dir, timeout_verify=4.0),
                      stop_after="verify")
    error = result.error
    assert error.phase == "verify" and error.rule == "timeout", error
    assert result.max_abs_error == [0.0] * 6   # the three draws and the structured sets before it passed
    assert "timed out after 4 s on input set 7 (structured: scale_up), in the verify phase" in error.message


def test_a_timeout_in_timing_names_the_timed_call(cache_dir):
    result = evaluate(example_task(), cpu_workspace(HANG_ON_A_LATER_CALL), cpu_config(cache_dir, timeout_verify=4.0))
    error = result.error
    assert error.phase == "profile" and error.rule == "timeout", error
    assert result.max_abs_error == [0.0] * 8   # verification passed
    # on the CPU a warm-up call follows each empty call among the timed ones (schedule.empty_calls)
    assert re.search(r"timed out after 4 s on input set \d+( \(structured: spikes\))?, a (timed|spot|warmup) call, "
                     r"in the profile phase", error.message), error.message


def test_output_left_to_a_detached_thread_is_named_as_work_after_forward(cache_dir):
    result = evaluate(example_task(), cpu_workspace(DETACHED), cpu_config(cache_dir), stop_after="verify")
    assert result.error.phase == "verify" and result.error.rule == "background-thread"
    assert "work still running after forward returned (a detached thread?" in result.error.message
    assert "on input set 1" in result.error.message


def test_a_kernel_with_the_tasks_sizes_hard_coded_fails_at_the_second_size(cache_dir):
    solution = cpu_workspace(model_new=FIXED_SIZES)
    result = evaluate(example_task(), solution, cpu_config(cache_dir, other_scale=True), stop_after="verify")
    assert not result.correct and result.error.rule == "fixed-shape"
    assert "second size of the task (batch 512 -> 256)" in result.error.message
    assert "forward failed on input set 1 (seed " in result.error.message   # the second size's first set
    assert "shape '[512, 1024]' is invalid" in result.error.message
    assert result.phase_seconds["other_scale"] > 0
    # turned off, left to its default in a plain evaluation, or under the published protocol, the task's
    # own size alone is verified
    for off in (cpu_config(cache_dir, other_scale=False), cpu_config(cache_dir)):
        plain = evaluate(example_task(), solution, off, stop_after="verify")
        assert plain.correct and plain.error is None and "other_scale" not in plain.phase_seconds
    published = evaluate(example_task(), solution, cpu_config(cache_dir, protocol="published", other_scale=True),
                         stop_after="verify")
    assert published.correct and "other_scale" not in published.phase_seconds


def test_only_tasks_with_a_size_to_halve_have_a_second_size():
    scaled = second_size(example_task())
    assert scaled is not None and scaled.sizes == {"batch": (512, 256)}
    # every size also builds the weights: nothing --scale may change
    fixed = Task(name="fixed", origin="tests", code=textwrap.dedent("""
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def __init__(self, n):
                super().__init__()
                self.w = nn.Parameter(torch.randn(n))

            def forward(self, x):
                return x * self.w

        n = 64

        def get_inputs():
            return [torch.randn(n)]

        def get_init_inputs():
            return [n]
        """))
    assert second_size(fixed) is None
    smallest = Task(name="smallest", origin="tests", code=example_task().code.replace("batch = 512", "batch = 16"))
    assert second_size(smallest) is None   # already at the smallest size scaling keeps


def test_the_crash_digest_reads_the_solutions_frames_from_a_dump():
    log = textwrap.dedent("""\
        printed by the solution
        cuda-agent native frames (most recent call first):
        /job/libs/a1/cuda_agent_crash.so(+0x117d)[0x7f00]
        /lib/x86_64-linux-gnu/libc.so.6(+0x3c050)[0x7f01]
        /job/libs/b2/cuda_extension.so(my_kernel+0xa)[0x7f02]
        /job/libs/b2/cuda_extension.so(_ZN8pybind1112cpp_function10dispatcherEP7_objectPKS2_mS2_+0x20)[0x7f03]
        cuda-agent end of native frames
        Fatal Python error: Segmentation fault

        Current thread 0x00007f (most recent call first):
          File "/src/cuda_agent/env/rules/guard.py", line 186 in counted
          File "/job/box/solution/model_new.py", line 14 in forward
        """)
    digest = crash_digest(log, ("/job/box/solution", "/job/libs"))
    assert digest.splitlines()[0] == "native frames of the solution (most recent call first):"
    assert "my_kernel (cuda_extension.so+0xa)" in digest   # named by the dump (no file to ask addr2line)
    assert "libc" not in digest and "cuda_agent_crash" not in digest and "guard.py" not in digest
    assert digest.endswith("model_new.py line 14, in forward")
    assert without_crash_dump(log) == "printed by the solution"
    tail = log[log.index("/lib/x86_64"):]   # a log's tail that begins inside the native frames
    assert without_crash_dump(tail) == ""
    assert crash_digest("no dump here", ("/job",)) == "" and without_crash_dump("plain") == "plain"


@pytest.mark.parametrize("command", ["verify", "compile"])
def test_unscored_is_profiles_flag_only(command, tmp_path, capsys):
    from cuda_agent.agent.workspace_cli import main

    with pytest.raises(SystemExit) as exit_:
        main([command, "--unscored", "--workspace", str(tmp_path)])
    assert exit_.value.code == 2 and "--unscored is profile's only" in capsys.readouterr().err


def test_profile_unscored_through_the_workspace_script_is_never_a_scored_record(cache_dir, tmp_path, capsys):
    from cuda_agent.agent.workspace import RESULTS_FILE, Workspace
    from cuda_agent.agent.workspace_cli import main

    ws = Workspace.create(example_task(), tmp_path / "ws", backend="cpu", eval_config=cpu_config(cache_dir))
    for path, text in cpu_workspace(kernel(NO_RELU)).files.items():
        (ws.root / path).parent.mkdir(parents=True, exist_ok=True)
        (ws.root / path).write_text(text)
    assert main(["profile", "--unscored", "--workspace", str(ws.root)]) == 1
    shown = capsys.readouterr().out
    assert shown.startswith("profile: FAILED in verify") and UNSCORED_HEADLINE in shown
    # the plain profile of the same files is evaluated, not answered from the unscored one's record
    assert main(["profile", "--workspace", str(ws.root)]) == 1
    plain = capsys.readouterr().out
    assert "FAILED in verify" in plain and "unscored" not in plain and "answered from its record" not in plain
    records, _ = ws.read_records(0)
    assert [r["result"].reward for r in records] == [-1, -1]
    assert records[0]["result"].unscored["kernel_ms"] > 0 and records[1]["result"].unscored is None
    assert all(r["result"].kernel_ms is None for r in records) and (ws.root / RESULTS_FILE).is_file()


def test_eval_unscored_prints_the_times_under_their_headline(cache_dir, tmp_path):
    from typer.testing import CliRunner

    from cuda_agent.cli import app

    for path, text in cpu_workspace(kernel(NO_RELU)).files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    args = ["eval", str(EXAMPLES / "model.py"), str(tmp_path), "--backend", "cpu", "--trials", "2", "--iters", "3",
            "--no-compile-baseline", "--cache-dir", str(cache_dir), "--unscored"]
    shown = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert "verify failed [correctness]" in shown.output and "reward -1" in shown.output
    assert UNSCORED_HEADLINE in shown.output and "you would be" in shown.output
