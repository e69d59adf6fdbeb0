"""How well a set of timed calls pins down its median, or another quantile (when timing may stop early)."""

from __future__ import annotations

import math
import statistics


def _interval(ordered: list[float], q: float) -> tuple[float, float] | None:
    """The 95 % interval of the q-quantile of `ordered` (sorted): between the order statistics of
    1-based ranks floor(n q - r) and ceil(1 + n q + r), r = 1.96 sqrt(n q (1 - q)) (the binomial's
    normal approximation), clipped to the samples; None for too few (under 6)."""
    n = len(ordered)
    if n < 6:
        return None
    reach = 1.96 * (n * q * (1 - q)) ** 0.5
    return ordered[max(0, math.floor(n * q - reach) - 1)], ordered[min(n - 1, math.ceil(n * q + reach))]


def _half_width(ordered: list[float], q: float, value: float) -> float:
    """Half the width of `_interval`, relative to `value`; inf for too few samples or a value <= 0."""
    interval = _interval(ordered, q)
    if interval is None or value <= 0:
        return float("inf")
    return (interval[1] - interval[0]) / 2 / value


def median_interval(samples: list[float]) -> tuple[float, float] | None:
    """The median's distribution-free 95 % confidence interval, (low, high), the order statistics
    `median_precision` measures; None for too few samples."""
    return _interval(sorted(samples), 0.5)


def median_precision(samples: list[float]) -> float:
    """Half the width of the median's 95 % confidence interval, relative to the median (inf for too
    few samples). Distribution-free: the interval runs between the order statistics of 1-based ranks
    floor(n/2 - 0.98 sqrt(n)) and ceil(1 + n/2 + 0.98 sqrt(n)), so a few slow outliers widen it only
    as far as they reach into the middle of the sorted samples."""
    ordered = sorted(samples)
    n = len(ordered)
    middle = (ordered[(n - 1) // 2] + ordered[n // 2]) / 2 if n else 0.0
    return _half_width(ordered, 0.5, middle)


def order_quantile(ordered: list[float], q: float) -> float:
    """The q-quantile of `ordered` (sorted, not empty) as an order statistic: 0-based rank int(q (n - 1))."""
    return ordered[int(q * (len(ordered) - 1))]


def quantile_precision(samples: list[float], q: float) -> float:
    """The same for the q-quantile (`order_quantile`), relative to its value (inf for too few samples).
    A low quantile of few samples reaches the smallest one: its interval narrows as the calls add up."""
    if not 0 < q < 1:
        return float("inf")
    ordered = sorted(samples)
    return _half_width(ordered, q, order_quantile(ordered, q) if ordered else 0.0)


def spread(values: list[float]) -> float:
    """(max - min) / median of repeated measures of one thing (missing or zero ones left out): how far
    apart they lie; nan with none."""
    values = [v for v in values if v]
    return (max(values) - min(values)) / statistics.median(values) if values else float("nan")
