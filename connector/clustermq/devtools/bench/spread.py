"""The median and range of repeated runs: how every bench step quotes a figure.

These machines are noisy, so a figure is never one run: it is the median of the runs with their
min and max, and the run reported in full is the median one (the lower middle for an even
count, so it is a run that happened, not an average of two).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def median_item(items: Sequence[T], key: Callable[[T], float]) -> T:
    """The item whose ``key`` is the median (the lower middle for an even count)."""
    ordered = sorted(items, key=key)
    return ordered[(len(ordered) - 1) // 2]


def median_range(values: Sequence[float], digits: int = 3) -> tuple[float, float, float]:
    """``(median, min, max)`` of ``values``, rounded."""
    return (round(statistics.median(values), digits), round(min(values), digits),
            round(max(values), digits))


def named_range(key: str, values: Sequence[float]) -> dict[str, float]:
    """``{key: median, key_min: min, key_max: max}``; empty when there are no values."""
    if not values:
        return {}
    median, low, high = median_range(values)
    return {key: median, f"{key}_min": low, f"{key}_max": high}
