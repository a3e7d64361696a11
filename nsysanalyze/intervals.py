"""Interval algebra over half-open [start, end) ns intervals, vectorized with numpy.

The one primitive is :class:`Coverage`: the union of a set of intervals, which answers
"how many ns of [a, b) are covered" for many windows at once. Intersections and
differences follow from inclusion-exclusion:
``|A ∩ B| = |A| + |B| - |A ∪ B|`` and ``|A - B| = |A ∪ B| - |B|``.
"""
from __future__ import annotations

import numpy as np


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge intervals into sorted, disjoint [start, end) intervals (touching ones merge)."""
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    if starts.size == 0:
        return starts, ends
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    running_end = np.maximum.accumulate(ends)
    # a new merged interval begins where the start lies beyond every earlier end
    new = np.empty(starts.size, dtype=bool)
    new[0] = True
    new[1:] = starts[1:] > running_end[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:], starts.size) - 1
    return starts[first], running_end[last]


class Coverage:
    """Union of intervals with O(log n) coverage queries for arrays of windows."""

    def __init__(self, starts: np.ndarray, ends: np.ndarray):
        self.starts, self.ends = union(starts, ends)
        self._cum = np.concatenate(([0], np.cumsum(self.ends - self.starts)))

    @classmethod
    def of(cls, *parts: "Coverage") -> "Coverage":
        """Union of several coverages."""
        return cls(np.concatenate([p.starts for p in parts]), np.concatenate([p.ends for p in parts]))

    @property
    def total(self) -> int:
        """Covered ns in all."""
        return int(self._cum[-1])

    def covered_before(self, t: np.ndarray) -> np.ndarray:
        """Covered ns in (-inf, t) for each t."""
        t = np.asarray(t, dtype=np.int64)
        k = np.searchsorted(self.starts, t, side="right")  # intervals starting at or before t
        prev = np.maximum(k - 1, 0)
        if self.starts.size == 0:
            return np.zeros(t.shape, dtype=np.int64)
        partial = np.clip(t - self.starts[prev], 0, self.ends[prev] - self.starts[prev])
        return np.where(k > 0, self._cum[prev] + partial, 0)

    def within(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Covered ns inside each window [a, b)."""
        return np.maximum(self.covered_before(b) - self.covered_before(a), 0)


def overlap_within(x: Coverage, y: Coverage, xy: Coverage, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|x ∩ y| inside each window [a, b), given ``xy`` = the union of x and y."""
    return x.within(a, b) + y.within(a, b) - xy.within(a, b)


def sum_in_windows(times: np.ndarray, values: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Sum of ``values`` whose ``times`` fall in each window [a, b) (times need not be sorted)."""
    order = np.argsort(times, kind="stable")
    t = np.asarray(times)[order]
    cum = np.concatenate(([0], np.cumsum(np.asarray(values)[order])))
    return cum[np.searchsorted(t, b, side="left")] - cum[np.searchsorted(t, a, side="left")]
