"""Interval algebra over half-open [start, end) ns intervals, vectorized with numpy.

The one primitive is :class:`Coverage`: the union of a set of intervals, which answers
"how many ns of [a, b) are covered" for many windows at once. Intersections and
differences follow from inclusion-exclusion:
``|A ∩ B| = |A| + |B| - |A ∪ B|`` and ``|A - B| = |A ∪ B| - |B|``.
"""
from __future__ import annotations

from functools import cached_property

import numpy as np
import pandas as pd

from .threads import for_blocks, in_blocks


BLOCK = 1 << 19  # rows per block when walking large arrays: bounds the temporaries, not a loop per event;
# a 1M-row table is two blocks, which threads.in_blocks runs side by side
QUERY_BLOCK = 1 << 18  # query times per block of Coverage.covered_before and of the prefix sums taken at windows' edges
# Many groups (devices, threads, processes) are measured in one vectorized pass by laying them side by
# side on one time axis: lane j is shifted by j x stride, stride > the whole time span, so no interval
# or window reaches another lane's. Shifted times stay below this bound (int64 headroom).
STACK_LIMIT = 1 << 62


def row_blocks(n: int, rows: np.ndarray | None = None, size: int | None = None):
    """Row selectors ``size`` (default BLOCK) rows at a time: slices of the ``n`` rows when ``rows`` is None (no
    index array), else pieces of ``rows`` (bounds the temporaries of a per-row computation)."""
    size = size or BLOCK
    if rows is None:
        return (slice(lo, min(lo + size, n)) for lo in range(0, n, size))
    return (rows[lo:lo + size] for lo in range(0, rows.size, size))


def isin_blocks(values: np.ndarray, candidates) -> np.ndarray:
    """``np.isin(values, candidates)`` a BLOCK of rows at a time: np.isin's temporaries are several int64
    arrays of its input's size (hundreds of MB on 10M OS calls), these are one block's."""
    out = np.empty(values.size, dtype=bool)
    candidates = np.asarray(list(candidates) if isinstance(candidates, (set, dict)) else candidates)
    for r in row_blocks(values.size):
        out[r] = np.isin(values[r], candidates)
    return out


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


def overlapping(starts: np.ndarray, ends: np.ndarray, iv_starts: np.ndarray, iv_ends: np.ndarray) -> np.ndarray:
    """Mask of the intervals [starts, ends) (ns) that are not empty and overlap one of the sorted, disjoint
    intervals [iv_starts, iv_ends): the first of those to end after a start begins before its end. The binary
    searches run only in the slice of them that can meet these rows (from the first to end after the earliest
    start to the last to begin before the latest end): for a block of nearby rows, a slice that stays in cache;
    rows in start order (OS calls by rowid, nearly always) are merged with it (:func:`search_sorted`)."""
    if not starts.size or not iv_starts.size:
        return np.zeros(starts.size, dtype=bool)
    lo = int(np.searchsorted(iv_ends, starts.min(), side="right"))
    hi = int(np.searchsorted(iv_starts, ends.max(), side="left"))
    if hi <= lo:
        return np.zeros(starts.size, dtype=bool)
    iv_starts, iv_ends = iv_starts[lo:hi], iv_ends[lo:hi]
    j = search_sorted(iv_ends, starts, side="right")
    np.minimum(j, iv_ends.size - 1, out=j)
    return (ends > starts) & (iv_ends[j] > starts) & (iv_starts[j] < ends)


def searchsorted_sorted(a: np.ndarray, v: np.ndarray, side: str = "left") -> np.ndarray:
    """``np.searchsorted(a, v, side)`` for a sorted ``v`` as well as a sorted ``a``. When ``a`` is the shorter, a
    merge: each of a's positions in v (a.size binary searches, not v.size), counted up to every v."""
    if a.size >= v.size:
        return np.searchsorted(a, v, side=side)
    pos = np.searchsorted(v, a, side="left" if side == "right" else "right")
    return np.cumsum(np.bincount(pos, minlength=v.size + 1)[:v.size])


def search_sorted(a: np.ndarray, v: np.ndarray, side: str = "left") -> np.ndarray:
    """``np.searchsorted(a, v, side)``; when ``v`` is in sorted order too (checked: one pass), as
    :func:`searchsorted_sorted` (where ``a`` is the shorter, its a.size searches in ``v`` replace v.size in ``a``:
    2M sorted queries against 100k sorted values, 14 ms against 30 ms)."""
    return (searchsorted_sorted if is_sorted(v) else np.searchsorted)(a, v, side=side)


def union(starts: np.ndarray, ends: np.ndarray, owned: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Merge intervals into sorted, disjoint [start, end) intervals (touching ones merge).

    Input already sorted by start (the usual order of an nsys table per device) skips the sort.
    ``owned``: ``starts`` and ``ends`` are the caller's scratch arrays, overwritten by the result (no
    second pair of arrays of their size is allocated).
    """
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    keep = ends > starts
    if not keep.all():
        starts, ends, owned = starts[keep], ends[keep], True
    del keep
    if starts.size == 0:
        return starts, ends
    if not is_sorted(starts):
        order = np.argsort(starts, kind="stable")
        starts, ends, owned = starts[order], ends[order], True
        del order
    running_end = np.maximum.accumulate(ends, out=ends if owned else None)  # equals ends where none overlap
    # a new merged interval begins where the start lies beyond every earlier end
    new = np.empty(starts.size, dtype=bool)
    new[0] = True
    np.greater(starts[1:], running_end[:-1], out=new[1:])
    if new.all():  # already sorted and disjoint (one stream's kernels): the input is its own union, no copy
        return starts, ends
    last = np.empty(starts.size, dtype=bool)  # the last interval of each merged one (masks: 1 byte a row)
    last[:-1] = new[1:]
    last[-1] = True
    return (_compact(starts, new) if owned else starts[new]), _compact(running_end, last)  # running_end: scratch


def _compact(values: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """``values[keep]`` written over the front of ``values`` (a scratch array), a block at a time: a block is
    read before anything is written past its start, so nothing unread is overwritten. A view when most
    rows are kept, else a copy (so the rest of the array is freed)."""
    k = 0
    for r in row_blocks(values.size):
        part = values[r][keep[r]]
        values[k:k + part.size] = part
        k += part.size
    return values[:k] if 4 * k >= 3 * values.size else values[:k].copy()


def union_of(*parts: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Union of several sets of (starts, ends) intervals: the union of the smaller parts is inserted in
    start order (one np.insert) into the largest part as it is (when sorted by start: the usual order of
    kernels), then one union merges the whole in place — the whole is never sorted or gathered, and
    the largest part's union is not made on its own."""
    if not parts:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    parts = sorted(parts, key=lambda p: -len(p[0]))
    starts, ends = (np.asarray(x, dtype=np.int64) for x in parts[0])
    if not is_sorted(starts):
        starts, ends = union(starts, ends)
    s, e = union_of(*parts[1:]) if len(parts) > 1 else (starts[:0], ends[:0])
    if s.size == 0:
        return union(starts, ends)
    at = np.searchsorted(starts, s, side="right")
    return union(np.insert(starts, at, s), np.insert(ends, at, e), owned=True)


class Coverage:
    """Union of intervals with O(log n) coverage queries for arrays of windows."""

    def __init__(self, starts: np.ndarray, ends: np.ndarray, disjoint: bool = False, owned: bool = False):
        """The union of [starts, ends); ``disjoint``: they already are one (sorted, disjoint: kept as is);
        ``owned``: the arrays are the caller's copies, which the union may overwrite (see :func:`union`)."""
        self.starts, self.ends = (starts, ends) if disjoint else union(starts, ends, owned=owned)

    @cached_property
    def _cum(self) -> np.ndarray:
        """Covered ns before each interval (and in all, last): made at the first query, not for a
        coverage only used for its intervals (8 bytes an interval), a block of lengths at a time."""
        n = self.starts.size
        cum = np.zeros(n + 1, dtype=np.int64)
        for r in row_blocks(n):
            np.cumsum(self.ends[r] - self.starts[r], out=cum[r.start + 1:r.stop + 1])
            cum[r.start + 1:r.stop + 1] += cum[r.start]
        return cum

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
        """Covered ns in (-inf, t) for each t (a block of t at a time: bounded temporaries; blocks side by side,
        threads.in_blocks)."""
        t = np.asarray(t, dtype=np.int64)
        out = np.zeros(t.shape, dtype=np.int64)
        if self.starts.size == 0:
            return out
        times, result, cum = t.reshape(-1), out.reshape(-1), self._cum

        def block(at: slice) -> None:
            part = times[at]
            # the last interval starting at or before t (interval 0 for t before every start: 0 ns of it lie before t)
            prev = np.searchsorted(self.starts, part, side="right") - 1
            np.maximum(prev, 0, out=prev)
            start = self.starts[prev]
            length = self.ends[prev] - start
            partial = np.subtract(part, start, out=start)  # ns of that interval before t, up to its length
            np.clip(partial, 0, length, out=partial)
            np.add(cum[prev], partial, out=result[at])
        for_blocks(block, row_blocks(times.size, size=QUERY_BLOCK))
        return out

    def within(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Covered ns inside each window [a, b)."""
        return np.maximum(self.covered_before(b) - self.covered_before(a), 0)


def intersection_within(x: Coverage, y: Coverage, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|x ∩ y| inside each window [a, b), without building x ∪ y.

    Costs O((|x| + windows) log |y|) for x the side with fewer intervals: each disjoint interval
    of x looks up how much of it y covers; prefix sums of those (taken at the windows' edges only,
    a block of x at a time) answer whole intervals, and the interval cut by a window edge is looked up on its own.
    """
    a, b = np.broadcast_arrays(np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64))
    if len(x) > len(y):
        x, y = y, x
    if len(x) == 0:
        return np.zeros(a.shape, dtype=np.int64)
    t = np.concatenate([a.ravel(), b.ravel()])  # every window edge
    k = np.searchsorted(x.starts, t, side="right") - 1  # x's interval starting at or before the edge
    kk = np.maximum(k, 0)
    y.total  # noqa: B018 (y's prefix sums, made here once: the blocks below query y on two threads)
    whole = _prefix_sums_at(lambda rows: y.covered_before(x.ends[rows]) - y.covered_before(x.starts[rows]),
                            len(x), kk)  # |x ∩ y| over x's intervals before kk
    partial = y.covered_before(np.minimum(t, x.ends[kk])) - y.covered_before(x.starts[kk])
    before = np.where(k >= 0, whole + partial, 0)  # |x ∩ y ∩ (-inf, t)|
    return np.maximum(before[a.size:] - before[:a.size], 0).reshape(a.shape)


def _prefix_sums_at(values_of, n: int, at: np.ndarray) -> np.ndarray:
    """Exclusive prefix sums values[0] + … + values[k - 1] of ``n`` values at the positions k (0 ≤ k ≤ n) in
    ``at``; ``values_of(rows)`` gives the values of a slice of them, a block at a time (nothing of size n is
    kept), two blocks side by side (threads.in_blocks: it is called from two threads at once)."""
    out = np.zeros(at.shape, dtype=np.int64)
    carry = 0
    blocks = list(row_blocks(n, size=QUERY_BLOCK))
    for block, values in zip(blocks, in_blocks(values_of, blocks)):
        lo = block.start
        inclusive = np.cumsum(values)
        here = (at >= lo) & (at < lo + values.size)
        j = at[here] - lo
        out[here] = carry + inclusive[j] - values[j]
        carry += int(inclusive[-1])
    out[at >= n] = carry
    return out


def count_in_windows(times: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Number of ``times`` in each window [a, b)."""
    t = np.asarray(times)
    if not is_sorted(t):
        t = np.sort(t)  # plain values: a stable sort gives the same array, slower
    return np.searchsorted(t, b, side="left") - np.searchsorted(t, a, side="left")


def durations_in_windows(starts: np.ndarray, ends: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Sum of end - start (ns) of the intervals starting in each window [a, b): with ``starts`` sorted, from
    prefix sums taken at the windows' edges only, a block of durations at a time (no array of every duration)."""
    if not is_sorted(starts):
        return sum_in_windows(starts, ends - starts, a, b)
    edges = np.searchsorted(starts, np.concatenate([np.ravel(a), np.ravel(b)]), side="left")
    before = _prefix_sums_at(lambda rows: ends[rows] - starts[rows], starts.size, edges)
    return (before[np.size(a):] - before[:np.size(a)]).reshape(np.shape(a))


def sum_in_windows(times: np.ndarray, values: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Sum of ``values`` whose ``times`` fall in each window [a, b) (times need not be sorted)."""
    t, v = np.asarray(times), np.asarray(values)
    if not is_sorted(t):
        order = np.argsort(t, kind="stable")
        t, v = t[order], v[order]
    cum = np.zeros(v.size + 1, dtype=np.result_type(v.dtype, np.int64))
    np.cumsum(v, out=cum[1:])
    return cum[np.searchsorted(t, b, side="left")] - cum[np.searchsorted(t, a, side="left")]


def dense_codes(codes: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Small integer codes (0 <= code < ``size``; -1: none) renumbered densely: the values present, sorted, and
    each code's index among them (-1 stays -1), through a table of ``size`` entries (no sort of the rows)."""
    present = np.zeros(size, dtype=bool)
    present[codes[codes >= 0]] = True
    index = (np.cumsum(present) - 1).astype(codes.dtype)
    return np.flatnonzero(present), np.where(codes >= 0, index[np.maximum(codes, 0)], codes)


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
        code = c.astype(np.int64, copy=False) if code is None else code * len(u) + c
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


def key_groups(frame: pd.DataFrame, keys: list[str]) -> tuple[np.ndarray, pd.DataFrame]:
    """Per row of ``frame``, the dense code of its ``keys`` columns' values (groups in sorted key order:
    :func:`group_codes`), and each group's key values from its first row (the columns keep their dtypes)."""
    group, _ = group_codes(*(frame[k].to_numpy() for k in keys))
    _, first_rows = np.unique(group, return_index=True)
    return group, frame.iloc[first_rows][keys].reset_index(drop=True)


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


def median_per_group(group: np.ndarray, values: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Per group 0..G-1: the median of its ``values`` (>= 0) padded with zeros to n[g] values (n[g] at least
    its count): the zeros sort first, so the k-th smallest is 0 below the padding, else the group's own."""
    order = np.lexsort((values, group))
    ordered = values[order]
    count = np.bincount(group, minlength=n.size)
    first = np.concatenate(([0], np.cumsum(count)[:-1]))
    zeros = n - count

    def smallest(k: np.ndarray) -> np.ndarray:
        j = k - zeros
        return np.where(j >= 0, ordered[first + np.maximum(j, 0)], 0)
    return (smallest((n - 1) // 2) + smallest(n // 2)) / 2
