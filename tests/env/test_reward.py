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
