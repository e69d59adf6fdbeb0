"""The result table explains the reward: which baselines the solution beat by the margin, and why
the reward is what it is."""

from __future__ import annotations

import io

import pytest

from cuda_agent.env.cli.commands import print_result
from cuda_agent.env.explain import explain_reward, timing_rows
from cuda_agent.env.result import EvalError, EvalResult
from cuda_agent.env.reward import is_faster_speedup, milestone_reward, reward_from_speedups, speedup_words


def result(kernel=1.0, eager=2.0, compiled=1.5, correct=True, **extra) -> EvalResult:
    r = EvalResult(task="t", backend="cpu", compiled=True, correct=correct, kernel_ms=kernel, eager_ms=eager,
                   compile_ms=compiled, speedup_vs_eager=eager and eager / kernel,
                   speedup_vs_compile=compiled and compiled / kernel, **extra)
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


def paired(kernel, eager, compiled, vs_eager, vs_compile) -> EvalResult:
    """A result whose medians disagree with its paired speedups, scored as evaluate scores it."""
    r = EvalResult(task="t", backend="cuda", compiled=True, correct=True, kernel_ms=kernel, eager_ms=eager,
                   compile_ms=compiled, speedup_vs_eager=vs_eager, speedup_vs_compile=vs_compile)
    r.reward = reward_from_speedups(True, vs_eager, vs_compile)
    return r


# (medians, paired speedups, reward): the medians alone would tell another story each time
DISAGREEING = [
    (paired(1.0, 1.03, 0.98, 1.10, 1.02), 2),    # medians: 1.03x, not faster than eager
    (paired(1.0, 1.30, 1.20, 0.998, 0.97), 1),   # medians: 1.3x; pairs: as fast as eager
    (paired(1.0, 1.02, 1.01, 1.12, 1.08), 3),    # medians: neither beaten
]


@pytest.mark.parametrize("r,reward", DISAGREEING)
def test_every_text_reads_the_paired_speedups(r, reward):
    """The table, the sentence, the workspace's profile text and MCP's submit all judge "faster" as the
    reward does: from the paired speedups against reward.MARGIN, never from a ratio of medians."""
    from cuda_agent.agent.mcp_server import score_text
    from cuda_agent.agent.session import Outcome
    from cuda_agent.agent.workspace import format_result

    assert r.reward == reward
    rows = {row.label: row for row in timing_rows(r)}
    assert rows["eager"].speedup == f"{r.speedup_vs_eager:.2f}x"
    assert rows["eager"].verdict.startswith("yes") == (reward >= 2)
    assert rows["torch.compile"].verdict.startswith("yes") == (reward == 3)
    sentence = explain_reward(r)
    assert sentence.startswith(f"reward {reward}") and f"({r.speedup_vs_eager:.2f}x" in sentence
    for text in (format_result("profile", r), score_text(Outcome(reward, None, r, "submit", None))):
        assert ("target not met" in text) == (reward < 3)
        for ms, s in ((r.eager_ms, r.speedup_vs_eager), (r.compile_ms, r.speedup_vs_compile)):
            assert f"you are {speedup_words(s)}" in text and f"{ms / r.kernel_ms:.2f}x faster" not in text
        faster = is_faster_speedup(r.speedup_vs_eager)
        assert ("not >5% faster than eager" in text) == (not faster)
        if reward < 3:   # time saved, as the reward counts it: 1 - 1 / paired speedup
            assert f"eager PyTorch {1 - 1 / r.speedup_vs_eager:+.1%}" in text


def test_as_fast_is_not_called_slower():
    from cuda_agent.agent.workspace import format_result

    text = format_result("profile", paired(299.2, 390.9, 400.0, 0.998, 1.001))
    assert "1.00x slower" not in text and "1.00x faster" not in text and "you are as fast (0.998x)" in text
    assert "medians of per-call ratios" in text   # why 299 vs 391 ms is not a 1.31x speedup
    out = io.StringIO()
    print_result(paired(299.2, 390.9, 400.0, 0.998, 1.001), file=out)
    table = out.getvalue()
    assert "1.00x" in table and "1.31x" not in table and "no (needs above 1.05x)" in table
    assert "medians of per-call ratios" in " ".join(table.split())
