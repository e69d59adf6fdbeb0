"""The median's confidence interval that lets timing stop early."""

import random

import pytest

from cuda_agent.env.config import EvalConfig
from cuda_agent.env.measure.stats import median_precision


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


def test_a_quantiles_interval_uses_the_ranks_around_it_and_narrows_with_more_calls():
    from cuda_agent.env.measure.stats import quantile_precision

    rng = random.Random(3)
    odd = [1.0 + rng.random() for _ in range(31)]
    assert quantile_precision(odd, 0.5) == pytest.approx(median_precision(odd))   # the same ranks
    assert quantile_precision(odd[:5], 0.1) == float("inf") and quantile_precision(odd, 0.0) == float("inf")
    ranks = [float(i) for i in range(1, 31)]   # n = 30, q = 0.1: ranks 0..7 around the third smallest
    assert quantile_precision(ranks, 0.1) == pytest.approx((8.0 - 1.0) / 2 / 3.0)
    few, many = ([1.0 + rng.expovariate(5) for _ in range(n)] for n in (30, 3000))
    assert quantile_precision(many, 0.1) < quantile_precision(few, 0.1)


def test_the_host_floor_must_be_precise_only_where_it_decides():
    from cuda_agent.env.measure.hold import floor_precise

    noisy_host = [0.05 + 0.01 * (i % 7) for i in range(30)]        # a floor known to about +-30 %
    assert floor_precise([0.093] * 30, noisy_host, 0.0075)         # the device decides: the floor's error is moot
    assert not floor_precise([0.002] * 30, noisy_host, 0.0075)     # launch-bound: time until the floor is known
    assert floor_precise([0.002] * 30, [0.05] * 30, 0.0075)
    assert floor_precise([0.5, None], [None, None], 0.0075)        # unheld: no floor
