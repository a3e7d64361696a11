"""A table a block of rows at a time (issue 20 item 2: peak memory bounded by design).

The consumers of the kernels and of the CUDA runtime calls take their rows as *blocks*: a sequence of
frames with the same columns, each one run of consecutive rows of the table, that can be walked more than
once (each walk is one read of the table when the blocks are read from the export). A consumer holds one block at a time
plus state the size of its result (groups, streams, windows), never state the size of the table, and gives
the same result whatever the cut (tested against one block). The analysis passes each of those tables held
whole as one block, or, above the budget (analysis.tables_in_blocks), :class:`ReadBlocks` of the export.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np
import pandas as pd

from .intervals import is_sorted

ROWS = 1 << 21  # rows per block: 2M kernels (about 90 MB of the pass's kernel columns)

Blocks = Sequence[pd.DataFrame]


def as_blocks(rows: pd.DataFrame | Blocks) -> Blocks:
    """``rows`` as blocks: a frame is one block, blocks are taken as they are."""
    return [rows] if isinstance(rows, pd.DataFrame) else rows


def frame_blocks(frame: pd.DataFrame, rows: int | None = None) -> list[pd.DataFrame]:
    """``frame`` as consecutive blocks of ``rows`` rows (default ROWS): row slices (views, no copy of the
    columns); ``[frame]`` when it is not longer than one block."""
    rows = rows or ROWS
    if len(frame) <= rows:
        return [frame]
    return [frame.iloc[lo:lo + rows] for lo in range(0, len(frame), rows)]


def in_start_order(blocks: Blocks) -> bool:
    """Whether the rows of ``blocks`` are in start order, within each block and from one block to the next."""
    last = np.iinfo(np.int64).min
    for block in blocks:
        start = block["start"].to_numpy()
        if start.size == 0:
            continue
        if int(start[0]) < last or not is_sorted(start):
            return False
        last = int(start[-1])
    return True


SELECT_BUCKETS = 1024  # value buckets per order statistic in a counting walk: each walk narrows its range ~1024x


def order_statistics(pairs: Callable[[], Iterable[tuple[np.ndarray, np.ndarray]]], group: np.ndarray,
                     rank: np.ndarray, lo: np.ndarray, hi: np.ndarray, counts: np.ndarray,
                     budget: int | None = None) -> np.ndarray:
    """Per query q: the ``rank[q]``-th smallest (0-based) int64 value of group ``group[q]``, from values given a
    block at a time: each call of ``pairs()`` walks the blocks once, yielding (group code, value) arrays.
    ``lo``/``hi``: per query, the group's smallest and largest value; ``counts``: per group, its number of values.

    Exact, in memory bounded by ``budget`` values (default ROWS): while the values inside the queries' ranges
    exceed the budget, a counting walk cuts the widest-held ranges into up to SELECT_BUCKETS buckets and keeps
    the bucket holding each rank (its range ~1024x narrower, the values below it counted); then one walk
    gathers the values left in range and sorts them. A range of one value needs no walk."""
    budget = budget or ROWS
    group, rank = np.asarray(group, np.int64), np.asarray(rank, np.int64)
    lo, hi = np.array(lo, dtype=np.int64), np.array(hi, dtype=np.int64)
    below = np.zeros(group.size, dtype=np.int64)  # values of the query's group under lo
    held = np.asarray(counts, dtype=np.int64)[group].copy()  # values of the query's group in [lo, hi]
    while True:
        open_ = np.flatnonzero(lo < hi)
        if held[open_].sum() <= budget:
            break
        order = open_[np.argsort(-held[open_], kind="stable")]
        rest = held[order][::-1].cumsum()[::-1]  # values held by this query and the ones after it
        cut = order[: max(1, int(np.count_nonzero(rest > budget // 2)))]  # the fewest widest-held queries
        lo[cut], hi[cut], under, held[cut] = _narrowed(pairs, group, rank - below, lo, hi, cut, budget)
        below[cut] += under
    open_ = np.flatnonzero(lo < hi)
    values = lo.copy()
    if open_.size:
        query, value = _gathered(pairs, group, lo, hi, open_)
        ordered = value[np.lexsort((value, query))]
        first = np.searchsorted(np.sort(query), open_)
        values[open_] = ordered[first + rank[open_] - below[open_]]
    return values


def _query_slots(group: np.ndarray, queries: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """The queries as slots of (sorted groups, their query): slot k holds each group's k-th query, so a
    group is at most once in a slot (a median asks two ranks of one group: two slots)."""
    order = np.argsort(group[queries], kind="stable")
    g, q = group[queries][order], queries[order]
    run_start = np.flatnonzero(np.concatenate(([True], g[1:] != g[:-1])))
    nth = np.arange(g.size) - np.repeat(run_start, np.diff(np.append(run_start, g.size)))
    return [(g[nth == k], q[nth == k]) for k in range(int(nth.max()) + 1)] if g.size else []


def _in_range(code: np.ndarray, value: np.ndarray, slots, lo, hi):
    """Per slot of :func:`_query_slots`: the query of each (code, value) row whose value lies in its range,
    and those rows' values."""
    for groups, queries in slots:
        pos = np.minimum(np.searchsorted(groups, code), groups.size - 1)
        q = queries[pos]
        hit = (groups[pos] == code) & (value >= lo[q]) & (value <= hi[q])
        yield q[hit], value[hit]


def _narrowed(pairs, group, target, lo, hi, cut, budget):
    """One counting walk over the queries ``cut``: each range [lo, hi] cut into buckets of equal width, and
    the bucket holding the query's ``target``-th value (0-based, counted from lo) kept; returns, for ``cut``,
    the new lo and hi, the values between the old lo and the new one, and the values held in the new range."""
    width = hi[cut] - lo[cut] + 1
    buckets = max(2, min(SELECT_BUCKETS, budget // cut.size))
    step = -(-width // buckets)
    n = -(-width // step)
    offset = np.concatenate(([0], np.cumsum(n)[:-1]))
    at = np.full(group.size, -1, dtype=np.int64)
    at[cut] = np.arange(cut.size)
    histogram = np.zeros(int(n.sum()), dtype=np.int64)
    slots = _query_slots(group, cut)
    for code, value in pairs():
        for q, v in _in_range(code, value, slots, lo, hi):
            j = at[q]
            histogram += np.bincount(offset[j] + (v - lo[q]) // step[j], minlength=histogram.size)
    running = np.cumsum(histogram)
    base = np.where(offset > 0, running[offset - 1], 0)
    k = np.searchsorted(running, base + target[cut], side="right")  # the bucket of the target value
    new_lo = lo[cut] + (k - offset) * step
    return new_lo, np.minimum(hi[cut], new_lo + step - 1), running[k] - histogram[k] - base, histogram[k]


def _gathered(pairs, group, lo, hi, queries) -> tuple[np.ndarray, np.ndarray]:
    """One walk: (query, value) of every value inside the range of one of ``queries``."""
    slots = _query_slots(group, queries)
    parts = [hit for code, value in pairs() for hit in _in_range(code, value, slots, lo, hi)]
    return (np.concatenate([p[i] for p in parts]) if parts else np.empty(0, np.int64) for i in range(2))


class ReadBlocks(Sequence):
    """A table read a block at a time, again at each use: block i is ``read((lo + i * rows, lo + (i + 1) * rows))``,
    the rows of that rowid range (``rowids`` = (lo, hi) of the table); a block may be empty."""

    def __init__(self, read: Callable[[tuple[int, int]], pd.DataFrame], rowids: tuple[int, int], rows: int | None = None):
        self.read, self.rows = read, rows or ROWS
        self.lo, self.hi = rowids

    def __len__(self) -> int:
        return max(0, -(-(self.hi - self.lo) // self.rows))

    def __getitem__(self, i: int) -> pd.DataFrame:
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        a = self.lo + (i % len(self)) * self.rows
        return self.read((a, min(a + self.rows, self.hi)))


class Mapped(Sequence):
    """``blocks`` with ``change`` applied to each block as it is taken (e.g. the runtime calls classified), again at
    each walk: nothing is kept between walks."""

    def __init__(self, blocks: Blocks, change: Callable[[pd.DataFrame], pd.DataFrame]):
        self.blocks, self.change = blocks, change

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, i: int) -> pd.DataFrame:
        return self.change(self.blocks[i])


class Chained:
    """The frames of several block sequences one after the other (e.g. the kernels' blocks, then the memcpys and
    the memsets), walked again at each use and never concatenated."""

    def __init__(self, *parts: Blocks):
        self.parts = parts

    def __iter__(self):
        for part in self.parts:
            yield from part
