"""Interval algebra over half-open [start, end) ns intervals, vectorized with numpy.

The one primitive is :class:`Coverage`: the union of a set of intervals, which answers
"how many ns of [a, b) are covered" for many windows at once. Intersections and
differences follow from inclusion-exclusion:
``|A ∩ B| = |A| + |B| - |A ∪ B|`` and ``|A - B| = |A ∪ B| - |B|``.
"""
from __future__ import annotations

import numpy as np
import pandas as pd


BLOCK = 1 << 20  # rows per block when walking large arrays: bounds the temporaries, not a loop per event
# Many groups (devices, threads, processes) are measured in one vectorized pass by laying them side by
# side on one time axis: lane j is shifted by j x stride, stride > the whole time span, so no interval
# or window reaches another lane's. Shifted times stay below this bound (int64 headroom).
STACK_LIMIT = 1 << 62


def lanes_per_batch(stride: int, top: int = 0) -> int:
    """How many lanes ``stride`` ns wide fit side by side (shifted times stay below STACK_LIMIT when the
    unshifted ones are at most ``top``); at least one."""
    return max(1, (STACK_LIMIT - max(top, 0)) // stride)


def is_sorted(x: np.ndarray) -> bool:
    """Whether ``x`` is non-decreasing (O(n), no copy of ``x``)."""
    return x.size < 2 or bool(np.all(x[1:] >= x[:-1]))


def unique_sorted(x: np.ndarray) -> np.ndarray:
    """Sorted distinct values of ``x``: a sort and a neighbour compare (numpy 2's hashing np.unique is
    several times slower on millions of int64 timestamps)."""
    s = np.sort(x, kind="stable")  # timsort: linear on the sorted runs timestamps usually come in
    return s[np.concatenate(([True], s[1:] != s[:-1]))] if s.size else s


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge intervals into sorted, disjoint [start, end) intervals (touching ones merge).

    Input already sorted by start (the usual order of an nsys table per device) skips the sort.
    """
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    keep = ends > starts
    if not keep.all():
        starts, ends = starts[keep], ends[keep]
    del keep
    if starts.size == 0:
        return starts, ends
    if not is_sorted(starts):
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], ends[order]
        del order
    running_end = np.maximum.accumulate(ends)
    # a new merged interval begins where the start lies beyond every earlier end
    new = np.empty(starts.size, dtype=bool)
    new[0] = True
    np.greater(starts[1:], running_end[:-1], out=new[1:])
    if new.all():  # already sorted and disjoint (one stream's kernels): the input is its own union, no copy
        return starts, ends
    last = np.empty(starts.size, dtype=bool)  # the last interval of each merged one (masks: 1 byte a row)
    last[:-1] = new[1:]
    last[-1] = True
    return starts[new], running_end[last]


def union_of(*parts: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Union of several sets of (starts, ends) intervals: each part's union, the smaller ones inserted
    into the largest in start order (np.insert), so the whole is never sorted or gathered again."""
    unions = sorted((union(s, e) for s, e in parts), key=lambda u: -u[0].size)
    if not unions:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    starts, ends = unions[0]
    for s, e in unions[1:]:
        if s.size:
            at = np.searchsorted(starts, s, side="right")
            starts, ends = np.insert(starts, at, s), np.insert(ends, at, e)
    return union(starts, ends) if len(unions) > 1 else (starts, ends)


class Coverage:
    """Union of intervals with O(log n) coverage queries for arrays of windows."""

    def __init__(self, starts: np.ndarray, ends: np.ndarray, disjoint: bool = False):
        """The union of [starts, ends); ``disjoint``: they already are one (sorted, disjoint: kept as is)."""
        self.starts, self.ends = (starts, ends) if disjoint else union(starts, ends)
        self._cum = np.zeros(self.starts.size + 1, dtype=np.int64)
        np.cumsum(self.ends - self.starts, out=self._cum[1:])

    @classmethod
    def of(cls, *parts: "Coverage") -> "Coverage":
        """Union of several coverages (an empty part is skipped; a single non-empty part is returned as is)."""
        nonempty = [p for p in parts if p.starts.size]
        if len(nonempty) <= 1:
            return nonempty[0] if nonempty else (parts[0] if parts else cls(np.empty(0), np.empty(0)))
        return cls(*union_of(*[(p.starts, p.ends) for p in nonempty]), disjoint=True)

    def __len__(self) -> int:
        """Number of disjoint intervals."""
        return int(self.starts.size)

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


def intersection_within(x: Coverage, y: Coverage, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|x ∩ y| inside each window [a, b), without building x ∪ y.

    Costs O((|x| + windows) log |y|) for x the side with fewer intervals: each disjoint interval
    of x looks up how much of it y covers; a prefix sum of those answers whole intervals and the
    interval cut by a window edge is looked up on its own.
    """
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    if len(x) > len(y):
        x, y = y, x
    if len(x) == 0:
        return np.zeros(np.broadcast(a, b).shape, dtype=np.int64)
    y_at_start = y.covered_before(x.starts)
    cum = np.concatenate(([0], np.cumsum(y.covered_before(x.ends) - y_at_start)))

    def before(t: np.ndarray) -> np.ndarray:  # |x ∩ y ∩ (-inf, t)|
        k = np.searchsorted(x.starts, t, side="right") - 1
        kk = np.maximum(k, 0)
        partial = y.covered_before(np.minimum(t, x.ends[kk])) - y_at_start[kk]
        return np.where(k >= 0, cum[kk] + partial, 0)

    return np.maximum(before(b) - before(a), 0)


def count_in_windows(times: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Number of ``times`` in each window [a, b)."""
    t = np.asarray(times)
    if not is_sorted(t):
        t = np.sort(t, kind="stable")
    return np.searchsorted(t, b, side="left") - np.searchsorted(t, a, side="left")


def sum_in_windows(times: np.ndarray, values: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Sum of ``values`` whose ``times`` fall in each window [a, b) (times need not be sorted)."""
    t, v = np.asarray(times), np.asarray(values)
    if not is_sorted(t):
        order = np.argsort(t, kind="stable")
        t, v = t[order], v[order]
    cum = np.zeros(v.size + 1, dtype=np.result_type(v.dtype, np.int64))
    np.cumsum(v, out=cum[1:])
    return cum[np.searchsorted(t, b, side="left")] - cum[np.searchsorted(t, a, side="left")]


def group_codes(*keys: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Group of each row of the key arrays as a dense code 0..g-1 (groups in sorted key order), and each
    key's value per group. A key with one value costs one compare pass, not a hash."""
    n = len(keys[0]) if keys else 0
    code = None  # made at the first key with more than one value
    uniques, varying = [], 0
    for k in keys:
        k = np.asarray(k)
        if n == 0 or bool((k == k[0]).all()):
            uniques.append(k[:1])
            continue
        c, u = pd.factorize(k, sort=True)
        code = c.astype(np.int64) if code is None else code * len(u) + c
        uniques.append(np.asarray(u))
        varying += 1
    size = int(np.prod([len(u) for u in uniques], dtype=np.int64)) if n else 0
    if code is None or size <= 1:
        return np.zeros(n, dtype=np.int64), uniques
    if varying == 1:  # one factorized key: its codes are dense already
        return code, [np.repeat(u, size) if len(u) == 1 else u for u in uniques]
    if size <= max(n, 1 << 16):  # dense enough for a count per possible code
        present = np.flatnonzero(np.bincount(code, minlength=size))
        code = np.searchsorted(present, code)
    else:
        code, present = pd.factorize(code, sort=True)
    values, rest = [], np.asarray(present, dtype=np.int64)
    for u in reversed(uniques):
        rest, r = np.divmod(rest, len(u))
        values.append(u[r])
    return code, values[::-1]


def stable_group_order(code: np.ndarray, groups: int) -> np.ndarray:
    """Row order that lists each group's rows together, groups in code order, rows in their order
    (``code``: 0..groups-1; a radix sort when the codes fit in 16 bits)."""
    return np.argsort(code.astype(np.uint16) if groups <= 1 << 16 else code, kind="stable")


def group_indices(*keys: np.ndarray) -> list[tuple[tuple, np.ndarray | None]]:
    """Rows per distinct combination of the key arrays, as (key tuple, row indices); indices are
    None when every row has the same key (no index array is built). Keys in sorted order."""
    if not keys or len(keys[0]) == 0:
        return []
    code, values = group_codes(*keys)
    groups = list(zip(*(np.asarray(v).tolist() for v in values)))  # key tuples of Python scalars
    if len(groups) == 1:
        return [(groups[0], None)]
    order = stable_group_order(code, len(groups))
    bounds = np.concatenate(([0], np.cumsum(np.bincount(code))))
    return [(key, order[bounds[i]:bounds[i + 1]]) for i, key in enumerate(groups)]
