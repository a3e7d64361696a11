"""The idle-gap attribution in time segments, the analysis's path for every export (no SQL here: the OS
calls come from a reader the caller passes). An export of up to OS_BLOCK_ROWS OS calls is one block and one
segment; only the timeline export, which keeps every host interval, attributes in one pass
(:func:`attribute_in_one_pass`).

A torch.compile capture with OSRT holds ~95 OS calls per GPU activity, nearly all on the step's threads under
one long GPU idle: held at once, every kept call is a host interval (~55 B each at the peak). Here the calls
are read a block of rowids at a time (OS_BLOCK_ROWS); once OS_SEGMENT_ROWS of their host intervals are held,
each process's idle up to a cut is attributed, and only what the later cause timelines still need is kept.
The result equals :func:`attribution.attribute` over :func:`attribution.host_intervals` of every call
(tests/test_segmented.py), because:

* a process's cut is the start of one of its kept OS calls, a bound of its cause timeline: an idle interval
  cut there gets the same ns per cause and tags as uncut (each part keeps the whole interval's length and
  first sync return: ``attribution.attributed``'s ``clip``);
* a host interval that starts before the cut matters after it only when it is still open at the cut (its end
  is a timeline bound) or, per process and level, the last one started (``attribution._active_label``): those
  are carried into the next segment (:func:`carried`), in order;
* OS calls are in start order by rowid in nearly every export (45 of the 47 checked); a kept call that starts
  before its process's cut shows they are not, and the attribution is made again in one pass;
* launch gaps of other threads count only for processes whose primary thread waits in the OS during GPU idle,
  which a later block may first show: when such gaps lie before that process's cut, again one pass.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from . import attribution as A
from . import metrics as M
from . import threads as T
from .intervals import group_indices

OS_BLOCK_ROWS = 1 << 21    # OS runtime rows (by rowid) read at a time
OS_SEGMENT_ROWS = 1 << 20  # OS host intervals held before each process's idle up to a cut is attributed
BEFORE_ALL = np.iinfo(np.int64).min  # a process's cut before its first segment


class _OnePass(Exception):
    """The segments cannot give the one-pass result (calls out of start order, or a process found waiting
    after its launch gaps were left out): attribute in one pass."""


def attribute_in_segments(capture: pd.DataFrame, steps: pd.DataFrame, idle: dict[tuple[int, int], tuple],
                          sources: A.HostSources, syncs: pd.DataFrame,
                          read: Callable[[tuple[int, int] | None], tuple[pd.DataFrame, pd.DataFrame]],
                          rowids: tuple[int, int] | None, windows: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(:func:`attribution.attribute`'s rows, :func:`metrics.munmap_metrics` of ``windows``) with the OS calls
    read a block at a time. Arguments as there, plus ``sources`` (:func:`attribution.host_sources`),
    ``read(rowids)``: the munmap calls and the kept OS calls (:func:`attribution.host_intervals`' ``os_calls``)
    of the rows lo <= rowid < hi (None: every row), and ``rowids``: the OS table's [lo, hi) (None: no OS call)."""
    try:
        return _Segments(capture, steps, idle, sources, syncs).run(read, rowids, windows)
    except (_OnePass, M.CallsOutOfOrder):
        return attribute_in_one_pass(capture, steps, idle, sources, syncs, read, windows)[:2]


def attribute_in_one_pass(capture: pd.DataFrame, steps: pd.DataFrame, idle: dict[tuple[int, int], tuple],
                          sources: A.HostSources, syncs: pd.DataFrame, read, windows: pd.DataFrame
                          ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(gaps, munmap metrics, host intervals) as :func:`attribute_in_segments`, with every OS call read at once
    (``read(None)``); the host intervals (:func:`attribution.host_frame`) are what the timeline export keeps."""
    munmap, calls = read(None)
    host = A.host_frame(sources, calls)  # it takes the calls' columns out as it uses them
    del calls
    return A.attribute(capture, steps, idle, host, syncs), M.munmap_metrics(windows, munmap, idle), host


class _Segments:
    """The state between segments: per process its cut (ns), the OS host intervals held (those still needed
    before the cut, then those read after it), the carried rows of the other host intervals, and the sums."""

    def __init__(self, capture, steps, idle, sources: A.HostSources, syncs):
        self.capture, self.steps, self.idle, self.sources, self.syncs = capture, steps, idle, sources, syncs
        self.other = _Carrying(A.concat_host_parts(list(sources.parts)))  # by (process, start), ties in part order
        self.helper = _Carrying(A.concat_host_parts([sources.helper]))
        self.helper_from = sources.helper.groupby("globalPid")["start"].min().to_dict() if len(sources.helper) else {}
        self.cut: dict[int, int] = {}
        self.held = _empty_rows()
        self.waiting: set[int] = set()
        self.os_names: set[str] = set()
        self.sums: list[tuple] = []

    def run(self, read, rowids: tuple[int, int] | None, windows: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Read every block, attributing whenever OS_SEGMENT_ROWS host intervals are held and after the last;
        (gaps, munmap metrics of ``windows``) as :func:`attribute_in_segments`."""
        blocks = [None] if rowids is None else [(first, min(first + OS_BLOCK_ROWS, rowids[1]))
                                                for first in range(*rowids, OS_BLOCK_ROWS)]
        munmap_sums, reach = None, {}
        # with a spare thread (threads.THREADS), the next block (one at most) is read while this one is attributed
        for i, (munmap, calls) in enumerate(T.ordered_map(read, blocks, min(2, T.THREADS))):
            final = i == len(blocks) - 1
            sums = M.munmap_metrics(windows, munmap, self.idle, reach)
            munmap_sums = sums if munmap_sums is None else munmap_sums + sums
            del munmap
            self.add(A.os_host_part(calls, self.sources))
            del calls
            if final or self.held["start"].size >= OS_SEGMENT_ROWS:
                self.attribute(final)
        return self.gaps(), munmap_sums

    def add(self, part: dict) -> None:
        """Hold one block's OS host intervals (read after every cut of their process, else _OnePass)."""
        found = set(self.sources.waiting_processes(part.pop("waiting")).tolist()) - self.waiting
        if any(pid in self.cut and self.helper_from.get(pid, A.NEVER) < self.cut[pid] for pid in found):
            raise _OnePass  # its launch gaps before the cut were left out of attributed segments
        self.waiting |= found
        if (part["start"] < self._per_row(self.cut, part["globalPid"], BEFORE_ALL)).any():
            raise _OnePass  # a call before its process's cut: not in start order by rowid
        self.os_names.update(part["cause"].categories)
        self.held = _joined(self.held, part)

    def attribute(self, final: bool) -> None:
        """Attribute each process's idle from its cut to its next one: the start of its last held call, or
        the end of time once every call is read; carry what later timelines need."""
        held = self.held
        if final:
            upto = {int(p): A.NEVER for p in np.unique(self.capture["globalPid"].to_numpy(np.int64))}
        else:
            last = pd.Series(held["start"]).groupby(held["globalPid"]).max()
            upto = {int(p): int(t) for p, t in last.items() if t > self.cut.get(int(p), BEFORE_ALL)}
        if not upto:
            return
        cut = self._per_row(upto, held["globalPid"], BEFORE_ALL)
        inside = held["start"] < cut
        os_rows, self.held = (held, _empty_rows()) if inside.all() else (_taken(held, inside), _taken(held, ~inside))
        del held
        helper_upto = {p: t for p, t in upto.items() if p in self.waiting}  # launch gaps: of waiting processes
        other_rows, helper_rows = self.other.rows(self.cut, upto), self.helper.rows(self.cut, helper_upto)
        if not final:
            keep = carried(os_rows["start"], os_rows["end"], os_rows["globalPid"], os_rows["level"], cut[inside])
            self.held = _joined(_taken(os_rows, keep), self.held)
            rows = [(self.other, other_rows, upto), (self.helper, helper_rows, helper_upto)]
            start, end, pid, level = (np.concatenate([part.frame[c].to_numpy()[r] for part, r, _ in rows])
                                      for c in ("start", "end", "globalPid", "level"))
            keep = carried(start, end, pid, level, self._per_row(upto, pid, BEFORE_ALL))  # ties: part order
            for (part, r, processes), kept in zip(rows, np.split(keep, [other_rows.size])):
                part.carry(r[kept], processes)
        del cut, inside
        host = A.concat_host_parts([self.other.taken(other_rows), self.helper.taken(helper_rows),
                                    *([os_rows] if os_rows["start"].size else [])])
        del os_rows  # its columns were released into ``host``
        clip = {p: (self.cut.get(p, BEFORE_ALL), t) for p, t in upto.items()}
        device, group, ns = A.attributed(self.capture, self.steps, self.idle, host, self.syncs, clip=clip)
        self.sums.append((device, group, ns, A.host_causes(host)))
        self.cut.update(upto)

    def gaps(self) -> pd.DataFrame:
        """The segments' sums, their causes coded as the one-pass host intervals' categories (the parts' in
        part order, then the OS calls' names in sorted order), summed per (device, group)."""
        helper = self.sources.helper
        helper = helper[np.isin(helper["globalPid"].to_numpy(), list(self.waiting))]
        parts = [*self.sources.parts, *([helper] if len(helper) else [])]
        cats = [pd.Categorical(p["cause"]) for p in parts]
        if self.os_names:
            cats.append(pd.Categorical([], categories=sorted(self.os_names)))
        causes = pd.api.types.union_categoricals(cats).categories if cats else pd.Index([])
        if not self.sums:
            return A.gap_frame(self.capture, *(np.empty(0, np.int64),) * 3, causes)
        device, group, ns = (np.concatenate(c) for c in zip(*[
            (d, A.recoded(g, causes.get_indexer(c), len(causes)), n) for d, g, n, c in self.sums]))
        return A.gap_frame(self.capture, *A.sum_by_group(device, group, ns), causes)

    @staticmethod
    def _per_row(values: dict[int, int], pid: np.ndarray, missing: int) -> np.ndarray:
        """``values[pid]`` per row (``missing`` for processes not in ``values``)."""
        keys = np.array(sorted(values), dtype=np.int64)
        if not keys.size:
            return np.full(pid.size, missing, dtype=np.int64)
        at = np.minimum(np.searchsorted(keys, pid), keys.size - 1)
        return np.where(keys[at] == pid, np.array([values[int(k)] for k in keys], dtype=np.int64)[at], missing)


class _Carrying:
    """Host intervals that are not OS calls (a frame sorted by process, then start), and the positions of those
    carried past their process's cut (:func:`carried`)."""

    def __init__(self, frame: pd.DataFrame):
        self.frame = frame
        self.pid, self.start = frame["globalPid"].to_numpy(), frame["start"].to_numpy()
        self.carried = np.empty(0, np.int64)

    def rows(self, cut: dict[int, int], upto: dict[int, int]) -> np.ndarray:
        """Positions (sorted) of the rows of the processes in ``upto``: per process, those carried past its cut
        (they start before it), then those starting from the cut (``cut``; a process without one: from the
        first) to ``upto`` (ns)."""
        carried_pid, parts = self.pid[self.carried], [np.empty(0, np.int64)]
        for p in sorted(upto):
            a, b = int(np.searchsorted(self.pid, p, side="left")), int(np.searchsorted(self.pid, p, side="right"))
            first, last = np.searchsorted(self.start[a:b], [cut.get(p, BEFORE_ALL), upto[p]], side="left")
            parts += [self.carried[carried_pid == p], np.arange(a + first, a + last, dtype=np.int64)]
        return np.concatenate(parts)

    def taken(self, rows: np.ndarray) -> pd.DataFrame:
        """The frame's rows at these positions (sorted, distinct: all of them is the frame itself)."""
        return self.frame if rows.size == len(self.frame) else self.frame.iloc[rows]

    def carry(self, rows: np.ndarray, processes: dict[int, int]) -> None:
        """Carry ``rows`` (positions) instead of what was carried for these processes."""
        mine = np.isin(self.pid[self.carried], list(processes))
        self.carried = np.union1d(self.carried[~mine], rows)


def carried(start: np.ndarray, end: np.ndarray, pid: np.ndarray, level: np.ndarray, cut: np.ndarray) -> np.ndarray:
    """Mask of the host intervals that the cause timelines after ``cut`` (per row: its process's cut, ns) still
    need, of those starting before it: every one still open at the cut (end >= cut: it may hold an instant
    after it, its end is a timeline bound) and, per (process, level), the last one started (rows in read order:
    the host order is by start, ties in row order). With only these before the cut,
    :func:`attribution._active_label` and the timeline bounds at and after the cut are as with every interval:
    the latest-starting interval before an instant is that last one or a later one, and the furthest-reaching
    one holding it is open at the cut."""
    before = start < cut
    keep = before & (end >= cut)
    rows = np.flatnonzero(before)
    one_process = rows.size == 0 or bool((pid[rows] == pid[rows[0]]).all())
    keys = ([((lv,), np.flatnonzero(level[rows] == lv)) for lv in np.flatnonzero(np.bincount(level[rows]))]
            if one_process else group_indices(pid[rows], level[rows]))  # a few keys per trace, not one per call
    for _, mine in keys:
        key_rows = rows if mine is None else rows[mine]  # in row order
        s = start[key_rows]
        keep[key_rows[np.flatnonzero(s == s.max())[-1]]] = True
    return keep


def _empty_rows() -> dict:
    """No host intervals, as a dict of arrays (start, end, globalPid, level, cause)."""
    return {**{c: np.empty(0, t) for c, t in A.HOST_COLUMNS.items()}, "cause": A.no_causes()}


def _taken(rows: dict, which: np.ndarray) -> dict:
    """Rows of a dict of host-interval arrays (a mask or positions)."""
    return {c: v[which] for c, v in rows.items()}


def _joined(first: dict, then: dict) -> dict:
    """Two dicts of host-interval arrays, one after the other."""
    out = {c: np.concatenate([first[c], then[c]]).astype(t, copy=False) for c, t in A.HOST_COLUMNS.items()}
    causes = [c for c in (first["cause"], then["cause"]) if len(c)] or [then["cause"]]
    out["cause"] = pd.api.types.union_categoricals(causes)
    return out
