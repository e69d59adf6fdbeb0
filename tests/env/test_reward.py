import pytest

from cuda_agent.env.reward import continuous_reward, is_faster, milestone_reward, reward_from_speedups


@pytest.mark.parametrize("correct,t,eager,compiled,expected", [
    (False, 1.0, 10.0, 10.0, -1),     # wrong: -1 whatever the speed
    (True, None, 10.0, 10.0, -1),     # never timed
    (True, 1.0, 10.0, 10.0, 3),       # faster than both
    (True, 1.0, 10.0, 0.5, 2),        # faster than eager only
    (True, 5.0, 4.0, 3.0, 1),         # correct but slower
    (True, 0.96, 1.0, 2.0, 1),        # 4 % faster is inside the 5 % margin
    (True, 0.94, 1.0, 0.99, 3),       # 6 % faster than both
    (True, 1.0, 2.0, None, 2),        # no compile baseline: cannot claim 3
])
def test_milestone_reward(correct, t, eager, compiled, expected):
    assert milestone_reward(correct, t, eager, compiled) == expected


def test_margin_is_relative_to_baseline():
    assert is_faster(0.949, 1.0) and not is_faster(0.951, 1.0)
    assert not is_faster(1.0, 0.0) and not is_faster(1.0, None)


def test_continuous_reward():
    assert continuous_reward(True, 2.0, 3.0) == pytest.approx(1.5)
    assert continuous_reward(False, 2.0, 3.0) == 0.0


@pytest.mark.parametrize("correct,t,eager,compiled", [
    (False, 1.0, 10.0, 10.0), (True, 1.0, 10.0, 10.0), (True, 1.0, 10.0, 0.5), (True, 5.0, 4.0, 3.0),
    (True, 0.96, 1.0, 2.0), (True, 0.94, 1.0, 0.99), (True, 1.0, 2.0, None), (True, 0.951, 1.0, 0.949),
])
def test_reward_from_speedups_keeps_the_milestones(correct, t, eager, compiled):
    """The reward read from speedups (paired per-call ratios) has the same thresholds as from times."""
    vs_eager = eager / t
    vs_compile = compiled / t if compiled else None
    assert reward_from_speedups(correct, vs_eager, vs_compile) == milestone_reward(correct, t, eager, compiled)


def test_paired_speedup_cancels_drift_that_a_ratio_of_medians_keeps():
    """Candidate and eager drift together over the calls (the GPU's clock state): the median of the
    per-call ratios is the true 2x, while the ratio of the two medians is thrown off by where the
    medians fall in the drift."""
    import statistics

    from cuda_agent.env.run.scoring import paired_speedup

    rounds = []
    for i in range(100):
        drift = 1.0 + (0.3 if i % 2 else 0.0) + i * 0.002      # a slow drift and a two-state clock
        kernel = 1.0 * drift * (1.5 if i % 10 == 0 else 1.0)   # the candidate's calls alone slow at times
        rounds.append({"kernel": kernel, "eager": 2.0 * drift})
    assert paired_speedup(rounds, "eager") == pytest.approx(2.0)
    by_medians = statistics.median(r["eager"] for r in rounds) / statistics.median(r["kernel"] for r in rounds)
    assert abs(by_medians - 2.0) > 0.01
    assert paired_speedup([{"kernel": 1.0, "eager": None}], "eager") is None


def test_a_calls_host_time_counts_through_its_sides_floor_not_its_own():
    """Held calls report device and host times apart (hold.call_times): a kernel the host keeps up with
    is timed by the device, however slow the host was in single calls (a loaded machine's cold host
    path); a forward bound by its launches is timed by its host's floor (a low quantile), in every call
    alike; an unheld call (host None) keeps its own time."""
    from cuda_agent.env.run.scoring import paired_speedup, round_times
    from cuda_agent.env.measure.hold import call_times, host_floor

    hosts = [0.05 + 0.01 * (i % 7) for i in range(30)]      # 0.05-0.11 ms: slow at times
    assert host_floor(hosts) == pytest.approx(0.05) and host_floor([None, None]) is None
    assert call_times([0.093] * 30, hosts) == [0.093] * 30  # the device decides: the host noise is gone
    launch_bound = call_times([0.02] * 30, [0.3 + 0.1 * (i % 3) for i in range(30)])
    assert launch_bound == [pytest.approx(0.3)] * 30         # neither the device's 0.02 nor the slow calls
    assert call_times([0.5, 0.01, None], [None, 0.2, None]) == [0.5, 0.2, None]
    rounds = [{"kernel": 0.093, "kernel_host": h, "eager": 0.2, "eager_host": 0.03} for h in hosts]
    assert round_times(rounds, "kernel") == [0.093] * 30
    assert paired_speedup(rounds, "eager") == pytest.approx(0.2 / 0.093)


# -- the margin is written once -------------------------------------------------------------------

import re
from pathlib import Path

import cuda_agent
from cuda_agent.env import reward as policy

# the margin's literal, its threshold speedup, or a percentage of 5, and words that say it is about speed
_LITERAL = re.compile(r"(?<![\d.])(0\.05|1\.05\d*|5 ?%)(?![\d])")
_SPEED = re.compile(r"faster|slower|margin|reward|speedup|less time|beat", re.I)


def margin_literals(text: str) -> list[int]:
    """Line numbers (1-based) where a margin-like literal sits beside words about speed or reward
    (the line itself or its neighbours, for wrapped text)."""
    lines = text.splitlines()
    found = []
    for i, line in enumerate(lines):
        if _LITERAL.search(line) and _SPEED.search(" ".join(lines[max(0, i - 1):i + 2])):
            found.append(i + 1)
    return found


def test_the_scan_finds_a_margin_written_by_hand():
    assert margin_literals("- Goal: correct and at least 5% faster than torch.compile.") == [1]
    assert margin_literals("        faster = sum(1 for x in ratio if x > 1.05)") == [1]
    assert margin_literals("reward 3 needs a speedup above\n1.053x") == [2]
    assert margin_literals("val_fraction: float = 0.05  # share of tasks held out") == []
    assert margin_literals("within 95 % of the time, 0.5 % apart, 15 % window") == []


def test_the_margin_is_written_once_in_src():
    """Every text and check reads reward.MARGIN (or PERCENT, NEEDED, FASTER): the literal stands only in
    its definition."""
    root = Path(cuda_agent.__file__).parent
    definition = Path(policy.__file__)
    hits = []
    for path in sorted(root.rglob("*")):
        if path.suffix not in {".py", ".md", ".txt", ".j2", ".json", ".toml"} or not path.is_file():
            continue
        text = path.read_text(errors="replace")
        for n in margin_literals(text):
            line = text.splitlines()[n - 1]
            if path == definition and line.startswith("MARGIN = "):
                continue
            hits.append(f"{path.relative_to(root)}:{n}: {line.strip()}")
    assert not hits, "the reward's margin written outside env/reward.py:\n" + "\n".join(hits)
    assert policy.MARGIN == 0.05 and policy.PERCENT == "5%" and policy.NEEDED > 1 / 0.95 - 1e-12


def test_every_text_states_the_policys_margin():
    """The prompts, SKILL.md's rule, the explanation and the hint say the policy's own words."""
    from cuda_agent.agent import prompts, skill
    from cuda_agent.env import explain
    from cuda_agent.env.result import EvalResult
    from cuda_agent.rl import single_turn

    for system in (prompts.SYSTEM_PROMPT, single_turn.SYSTEM):
        assert f"more than {policy.PERCENT} less time than torch.compile" in system
    assert policy.SCALE in skill.target_rule() and policy.FASTER in skill.target_rule()
    r = EvalResult(task="t", backend="cpu", compiled=True, correct=True, kernel_ms=1.0, eager_ms=1.03,
                   compile_ms=1.0, speedup_vs_eager=1.03, speedup_vs_compile=1.0, reward=1)
    assert f"not more than {policy.PERCENT} faster than eager" in explain.explain_reward(r)
    assert f"not >{policy.PERCENT} faster than eager PyTorch and torch.compile" in explain.reward_hint(r)


def test_scoring_reads_the_paired_speedups():
    """`score` decides from the paired speedups even where the medians' ratio says otherwise, and the
    continuous reward is the paired speedup over torch.compile."""
    from cuda_agent.env.result import EvalResult

    r = EvalResult(task="t", backend="cuda", compiled=True, correct=True, kernel_ms=1.0, eager_ms=1.30,
                   compile_ms=1.20, speedup_vs_eager=0.998, speedup_vs_compile=0.97)
    assert policy.score(r) == (1, 0.97)
    r.speedup_vs_eager, r.speedup_vs_compile = 1.12, 1.08
    r.eager_ms, r.compile_ms = 1.02, 1.01
    assert policy.score(r) == (3, 1.08)
    r.correct = False
    assert policy.score(r) == (-1, 0.0)
    untimed = EvalResult(task="t", backend="cpu", compiled=True, correct=True, kernel_ms=1.0)
    assert policy.score(untimed) == (1, 0.0)
