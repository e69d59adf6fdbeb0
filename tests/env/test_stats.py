"""The median's confidence interval that lets timing stop early."""

import random

import pytest

from cuda_agent.env.config import EvalConfig
from cuda_agent.env.stats import median_precision


def test_the_interval_is_unknown_for_a_handful_of_calls_and_zero_for_identical_ones():
    assert median_precision([1.0] * 5) == float("inf")
    assert median_precision([]) == float("inf")
    assert median_precision([2.0] * 6) == 0.0


def test_the_interval_spans_the_order_statistics_around_the_median():
    # 100 calls: ranks 40 and 61 (1-based) bound the 95 % interval of the median
    samples = [float(v) for v in range(1, 101)]
    assert median_precision(samples) == pytest.approx((61 - 40) / 2 / 50.5)
    assert median_precision(list(reversed(samples))) == median_precision(samples)   # order does not matter


def test_the_interval_narrows_with_more_calls_and_ignores_far_outliers():
    draw = random.Random(1)
    few = [1 + draw.gauss(0, 0.02) for _ in range(30)]
    many = few + [1 + draw.gauss(0, 0.02) for _ in range(270)]
    assert median_precision(many) < median_precision(few) < 0.02
    spiked = many[:-10] + [50.0] * 10   # 10 calls of 300 stalled: the middle barely moves
    assert median_precision(spiked) < 1.2 * median_precision(many)


def test_config_refuses_a_precision_or_minimum_that_cannot_work():
    assert EvalConfig(precision=None).precision is None
    for bad in (dict(precision=0), dict(precision=-0.1), dict(precision="0.5"), dict(min_iters=0)):
        with pytest.raises(ValueError):
            EvalConfig(**bad)
