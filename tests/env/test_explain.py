"""The result table explains the reward: which baselines the solution beat by the margin, and why
the reward is what it is."""

from __future__ import annotations

import io

from cuda_agent.env.cli import print_result
from cuda_agent.env.explain import explain_reward, timing_rows
from cuda_agent.env.result import EvalError, EvalResult
from cuda_agent.env.reward import milestone_reward


def result(kernel=1.0, eager=2.0, compiled=1.5, correct=True, **extra) -> EvalResult:
    r = EvalResult(task="t", backend="cpu", compiled=True, correct=correct, kernel_ms=kernel, eager_ms=eager,
                   compile_ms=compiled, **extra)
    r.reward = milestone_reward(correct, kernel, eager, compiled)
    return r


def test_each_reward_says_why():
    assert explain_reward(result(1.0, 2.0, 1.5)).startswith("reward 3 (the most): correct, and more than 5% "
                                                             "faster than eager (2.00x) and than torch.compile (1.50x)")
    two = explain_reward(result(1.0, 2.0, 1.02))
    assert two.startswith("reward 2: correct and faster than eager (2.00x), but not more than 5% faster than "
                          "torch.compile (1.02x; reward 3 needs above 1.05x)")
    assert "was skipped, so 2 is the most" in explain_reward(result(1.0, 2.0, None), compile_skipped=True)
    assert explain_reward(result(1.0, 1.03, 0.9)).startswith("reward 1: correct, but not more than 5% faster than "
                                                             "eager (1.03x; reward 2 needs above 1.05x)")
    wrong = result(correct=False, error=EvalError("verify", "wrong output", "correctness"))
    assert explain_reward(wrong) == "reward -1 (of -1, 1, 2, 3): it built, but the verify phase rejected it"
    broken = EvalResult(task="t", backend="cpu", error=EvalError("compile", "error: x"), reward=-1)
    assert "did not build" in explain_reward(broken)
    task_error = EvalResult(task="t", backend="cpu", error=EvalError("task", "boom"))
    assert explain_reward(task_error).startswith("no reward: the task itself failed")


def test_rows_mark_each_baseline():
    rows = {row.label: row for row in timing_rows(result(1.0, 2.0, 1.02))}
    assert rows["eager"].speedup == "2.00x" and rows["eager"].verdict == "yes (reward 2)"
    assert rows["torch.compile"].verdict == "no (needs above 1.05x)"
    skipped = {row.label: row for row in timing_rows(result(1.0, 2.0, None), compile_skipped=True)}
    assert skipped["torch.compile"].verdict == "skipped (reward 3 out of reach)"


def test_printed_table_has_the_verdicts_and_the_reason():
    out = io.StringIO()
    print_result(result(1.0, 2.0, 1.5), file=out)
    text = out.getvalue()
    assert "t on cpu: correct, reward 3" in text and "beaten by > 5%?" in text and "yes (reward 3)" in text
    assert "reward 3 (the most)" in text
