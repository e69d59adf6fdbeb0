"""How well a set of timed calls pins down its median (when timing may stop early)."""

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
