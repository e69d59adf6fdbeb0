"""How well a set of timed calls pins down its median, or another quantile (when timing may stop early)."""

from __future__ import annotations

import math


def median_precision(samples: list[float]) -> float:
    """Half the width of the median's 95 % confidence interval, relative to the median (inf for too
    few samples). Distribution-free: the interval runs between the order statistics of 1-based ranks
    floor(n/2 - 0.98 sqrt(n)) and ceil(1 + n/2 + 0.98 sqrt(n)) (the binomial's normal approximation),
    so a few slow outliers widen it only as far as they reach into the middle of the sorted samples."""
    n = len(samples)
    if n < 6:
        return float("inf")
    ordered = sorted(samples)
    reach = 0.98 * n ** 0.5
    low, high = max(0, math.floor(n / 2 - reach) - 1), min(n - 1, math.ceil(n / 2 + reach))
    middle = (ordered[(n - 1) // 2] + ordered[n // 2]) / 2
    if middle <= 0:
        return float("inf")
    return (ordered[high] - ordered[low]) / 2 / middle


def quantile_precision(samples: list[float], q: float) -> float:
    """The same for the q-quantile (the order statistic of 0-based rank int(q (n - 1))): its interval
    runs between the ranks n q -+ 1.96 sqrt(n q (1 - q)), clipped to the samples, relative to its value
    (inf for too few samples). A low quantile of few samples reaches the smallest one: its interval
    narrows as the calls add up."""
    n = len(samples)
    if n < 6 or not 0 < q < 1:
        return float("inf")
    ordered = sorted(samples)
    reach = 1.96 * (n * q * (1 - q)) ** 0.5
    low, high = max(0, math.floor(n * q - reach) - 1), min(n - 1, math.ceil(n * q + reach))
    value = ordered[int(q * (n - 1))]
    if value <= 0:
        return float("inf")
    return (ordered[high] - ordered[low]) / 2 / value
