import pytest

from cuda_agent.env.reward import continuous_reward, is_faster, milestone_reward


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
