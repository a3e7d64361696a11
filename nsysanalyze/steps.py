"""Training steps: detect the repeating NVTX step range and project each step onto the GPU.

A step is an NVTX range that repeats with a counter (``Batch 12``, ``ProfilerStep#3``,
``step 5``, ``iteration 7``, ``Step 10 to 20``) or a repeated ``train_step``-like name.
Steps you can trust — a family is taken only when it looks like an iteration of the program's loop:

1. by its names: not an op/function/layer annotation (``aten::add, op_id = 3``, DLProf payloads,
   ``ExecutorDispatch::compile``, TensorRT/ONNX layer paths; OP_OR_LAYER_NAME), not an epoch, and
   not mostly nested inside another candidate (``step_family_candidates``);
2. by the GPU work (``is_loop_iteration``): when the device's kernel sequence repeats with a period
   of P kernels (``kernel_period``), the median step holds at least half of P (op- and layer-level
   ranges hold a few kernels of a much longer period); otherwise the steps' GPU spans hold at least
   half of the device's kernel time.

Without such a family, steps are inferred from the GPU work itself: one window per period of the
repeating kernel sequence, anchored at the kernel that follows the longest GPU idle (``inferred_steps``;
labelled "kernel sequence (period N kernels)"). ``pattern`` (a regex, ``--step-range``) overrides
everything; one that is invalid or matches nothing is an error (StepRangeError).

GPU projection (as NVIDIA's ``nvtx_gpu_proj_trace``, widened to the step's process): CUDA
calls made inside the step's CPU range by any thread of its process (PyTorch launches the
backward pass from autograd threads, not the thread holding the NVTX range) → GPU work with
the same correlationId in the same process → ``gpu_start``/``gpu_end`` per device.

A step's GPU *window* on a device runs from the previous step's ``gpu_end`` to its own
(completion to completion, the steady-state step time even when the CPU runs ahead): the
GPU idle spent waiting for a step is charged to that step, and the windows partition time.
The first step's window starts at its own ``gpu_start`` and is ``closed=False``: what came
before it is not in the capture (capture start also perturbs it), so step medians skip it.
"""
from __future__ import annotations

import functools
import re
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pandas as pd

from .blocks import Blocks
from .errors import InputError
from .intervals import (Coverage, count_in_windows, group_indices, is_sorted, lanes_per_batch, row_blocks,
                        searchsorted_sorted, union)
from .threads import for_blocks, in_blocks
from .trace.tables import pid_of

STALL_FACTOR = 2.0  # a steady step this many times the median one is a stall (epoch boundary, checkpoint)

DIGITS = re.compile(r"\d+")
COUNTER = "{n}"
UNCOUNTED_STEP_NAME = re.compile(r"^(train(ing)?[ _]?)?(step|iter|iteration)$", re.IGNORECASE)
STEP_WORD = re.compile(r"step|batch|iter|train", re.IGNORECASE)
NOT_A_STEP = re.compile(r"epoch", re.IGNORECASE)
# Framework annotations of ops, functions and layers (never loop iterations): C++ scoped names
# (aten::add, ExecutorDispatch::compile), autograd's emit_nvtx payloads (op_id, seq =, sizes =),
# dict/JSON payloads (DLProf's {'traceMarker': ...}), ONNX/TensorRT layer paths (starting with '/') and
# fused layers (/up/up.1/Conv, Conv_3 + Relu_4).
OP_OR_LAYER_NAME = re.compile(r"::|\bop_id\b|\bseq\s*=|\bsizes\s*=|^\s*[{\[/]|\s\+\s")
MIN_COVERAGE = 0.5  # a family without a step-like word must cover this share of its time span
MAX_CANDIDATES = 3  # step families tried against the GPU work, best first

STEP_COLUMNS = ["globalPid", "globalTid", "step", "name", "cpu_start", "cpu_end"]


class StepRangeError(InputError):
    """``--step-range`` is not a valid regex, or matches no NVTX range."""


def per_distinct(fn):
    """``fn`` (Series of names -> Series) applied once per distinct name and spread back to every row."""
    @functools.wraps(fn)
    def apply(names: pd.Series) -> pd.Series:
        codes, uniques = pd.factorize(names, use_na_sentinel=False)
        values = fn(pd.Series(uniques, dtype=names.dtype)).to_numpy()
        return pd.Series(values[codes], index=names.index)
    return apply


@per_distinct
def family_of(names: pd.Series) -> pd.Series:
    """Step-family key per range name: the name with digit runs as '{n}' ('Batch {n}', 'Step {n} to {n}'),
    a repeated step-like name as itself ('train_step'), or '' when the name cannot be a step
    (no counter, an epoch, or an op/layer annotation: see OP_OR_LAYER_NAME)."""
    stripped = names.str.strip()
    key = stripped.str.replace(DIGITS, COUNTER, regex=True)
    counted = stripped.str.contains(DIGITS) & key.str.replace(COUNTER, "").str.strip().ne("")
    uncounted = stripped.str.fullmatch(UNCOUNTED_STEP_NAME).fillna(False)
    family = pd.Series(np.where(counted | uncounted, key, ""), index=names.index)
    return family.where(~family.str.contains(NOT_A_STEP) & ~stripped.str.contains(OP_OR_LAYER_NAME), "")


@per_distinct
def group_name(names: pd.Series) -> pd.Series:
    """Display/grouping name of NVTX sub-ranges: numbered ranges by their family ('IO 12' -> 'IO {n}')."""
    key = names.str.strip().str.replace(DIGITS, COUNTER, regex=True)
    return key.where(names.str.contains(DIGITS), names)


def _contained(ranges: pd.DataFrame) -> np.ndarray:
    """Per range: whether a longer-or-earlier range on the same thread contains it (start order,
    longer first on ties; one sort, a running max of ends per thread)."""
    order = np.lexsort((-(ranges["end"].to_numpy() - ranges["start"].to_numpy()), ranges["start"].to_numpy(),
                        ranges["globalTid"].to_numpy()))
    tid, end = ranges["globalTid"].to_numpy()[order], ranges["end"].to_numpy()[order]
    prev_end = pd.Series(end).groupby(tid).cummax().groupby(tid).shift(1).to_numpy()
    out = np.zeros(len(ranges), dtype=bool)
    out[order] = ~np.isnan(prev_end) & (prev_end >= end)
    return out


def step_family_candidates(nvtx: pd.DataFrame) -> list[str]:
    """Family keys that can be the step range, best first (at most MAX_CANDIDATES).

    Candidates are families with at least two ranges; a family mostly (>50%) nested inside
    other candidates' ranges is not outermost. Outermost families named like a step (step, batch,
    iter, train) come first, the longest in total first; then those that cover at least half of
    their time span (so sparse ranges are not steps). Whether a candidate really is a loop
    iteration is decided against the GPU work (:func:`is_loop_iteration`).
    """
    if nvtx.empty:
        return []
    fam = family_of(nvtx["name"])
    ranges = nvtx.assign(family=fam)[fam != ""]
    counts = ranges["family"].value_counts()
    ranges = ranges[ranges["family"].isin(counts[counts >= 2].index)]
    if ranges.empty:
        return []
    per = ranges.assign(contained=_contained(ranges), dur=ranges["end"] - ranges["start"]).groupby("family").agg(
        contained=("contained", "mean"), total=("dur", "sum"), first=("start", "min"), last=("end", "max"))
    per = per[per["contained"] <= 0.5].sort_values("total", ascending=False)
    span = (per["last"] - per["first"]).where(lambda x: x > 0)
    named = [f for f in per.index if STEP_WORD.search(f)]
    dense = [f for f in per.index[(per["total"] / span).fillna(0) >= MIN_COVERAGE] if f not in named]
    return (named + dense)[:MAX_CANDIDATES]


def detect_step_family(nvtx: pd.DataFrame) -> str | None:
    """The best step-family candidate by names and nesting alone, or None (see step_family_candidates)."""
    candidates = step_family_candidates(nvtx)
    return candidates[0] if candidates else None


def _numbered(chosen: pd.DataFrame) -> pd.DataFrame:
    steps = chosen.assign(globalPid=pid_of(chosen["globalTid"])).sort_values(["globalPid", "start"])
    steps = steps.rename(columns={"start": "cpu_start", "end": "cpu_end"})
    steps["step"] = steps.groupby("globalPid").cumcount()
    return steps[STEP_COLUMNS].reset_index(drop=True)


def family_ranges(nvtx: pd.DataFrame, family: str) -> pd.DataFrame:
    """Step rows (globalPid, globalTid, step, name, cpu_start, cpu_end) of one family, numbered 0.. in
    time order within each process."""
    return _numbered(nvtx[family_of(nvtx["name"]) == family])


def find_steps(nvtx: pd.DataFrame, pattern: str | None = None) -> tuple[pd.DataFrame, str | None]:
    """Step ranges (one row per step: globalPid, globalTid, step, name, cpu_start, cpu_end) and a label.

    ``pattern`` selects ranges whose name matches the regex (re.search; StepRangeError when it is
    invalid or matches nothing); otherwise the best candidate family by names is taken.
    """
    if pattern is not None:
        try:
            regex = re.compile(pattern)
        except re.error as e:
            raise StepRangeError(f"--step-range {pattern!r} is not a valid regular expression ({e})") from None
        chosen = nvtx[nvtx["name"].str.contains(regex)] if not nvtx.empty else nvtx
        if chosen.empty:
            raise StepRangeError(f"--step-range {pattern!r} matches no NVTX range in this export")
        return _numbered(chosen), f"/{pattern}/"
    family = detect_step_family(nvtx)
    if family is None:
        return pd.DataFrame(columns=STEP_COLUMNS), None
    return family_ranges(nvtx, family), family


@dataclass
class StepChoice:
    """How the steps were found: NVTX step rows (empty when inferred), their GPU windows, a label,
    the source ('nvtx', 'inferred' or None) and the NVTX families rejected as not loop iterations."""

    ranges: pd.DataFrame
    windows: pd.DataFrame
    label: str | None
    source: str | None
    rejected: list[str]


def choose_steps(nvtx: pd.DataFrame, pattern: str | None, candidates: list[str],
                 project: Callable[[pd.DataFrame], pd.DataFrame], kernels: Callable[[], Blocks]) -> StepChoice:
    """The steps: ``pattern``'s ranges (find_steps); else the first candidate family whose projected steps
    look like loop iterations (is_loop_iteration); else steps inferred from the repeating kernel sequence
    (inferred_steps); else none. ``project`` maps step rows to GPU windows; ``kernels()`` gives the kernels
    (start, end, deviceId, globalPid, nameId) as blocks, asked for only when a family is tried or steps are
    inferred (so a caller reads them only then). Passes over the blocks: one or two per family tried (at most
    MAX_CANDIDATES), then at most 3 when steps are inferred."""
    rejected: list[str] = []
    if pattern is not None:
        ranges, label = find_steps(nvtx, pattern)
        return StepChoice(ranges, project(ranges), label, "nvtx", rejected)
    for family in candidates:
        ranges = family_ranges(nvtx, family)
        windows = project(ranges)
        if is_loop_iteration(windows, kernels()):
            return StepChoice(ranges, windows, family, "nvtx", rejected)
        rejected.append(family)
    inferred = inferred_steps(kernels())
    empty = pd.DataFrame(columns=STEP_COLUMNS)
    if inferred.empty:
        return StepChoice(empty, project(empty), None, None, rejected)
    period, joined = int(inferred["period_kernels"].iloc[0]), int(inferred["periods_per_step"].max())
    label = f"kernel sequence (period {period} kernels)" + (
        f", {joined} periods per step (at most {MAX_INFERRED_STEPS:,} inferred steps per GPU)" if joined > 1 else "")
    return StepChoice(empty, inferred.drop(columns=["period_kernels", "periods_per_step"]), label, "inferred", rejected)


# ---- steps from the GPU work itself ---------------------------------------------------
PERIOD_TOLERANCE = 0.1   # spread (max - min) of an anchor kernel's spacing, as a share of its median
MIN_REPEATS = 3          # occurrences of an anchor kernel (two full periods)
MIN_SPAN = 0.5           # share of the device's kernels the repetition must span
ITERATION_SHARE = 0.5    # a step range holds at least this share of one period's kernels
BUSY_SHARE = 0.5         # without a period: step ranges' GPU spans hold this share of GPU-busy time
PERIOD_PREFIX = 1 << 19  # kernels the period is looked for in (memory stays bounded on 10M-kernel traces)
PHASE_ITERATIONS = 16    # iterations the boundary's offset is chosen on
# Bounds on inferred steps, by design: a loop of one or two kernels is not a training step (two kernel
# names alternating would give a step per two kernels), and a device gets at most MAX_INFERRED_STEPS
# windows (consecutive periods are joined into one step, said in the steps' label and the notes).
MIN_PERIOD_KERNELS = 3
MAX_INFERRED_STEPS = 10_000


class KernelPeriod(NamedTuple):
    """One device's repeating kernel sequence (see :func:`kernel_period`)."""

    period: int               # kernels per iteration
    boundaries: np.ndarray    # iteration boundaries (ns), every ``joined``-th: at most MAX_INFERRED_STEPS windows
    joined: int               # periods per window between two boundaries (1, or more within the cap)
    first_start: int          # the device's first kernel start (ns)


def kernel_period(kernels: Blocks) -> dict[tuple[int, int], KernelPeriod]:
    """Period of each (globalPid, deviceId)'s repeating kernel sequence (its kernels in start order), for the devices
    whose sequence repeats: kernels per iteration and the iteration boundaries (ns) — the end of the GPU work before
    the iteration's first kernel, i.e. where the GPU finished the previous iteration.

    A name is an anchor when it occurs at least MIN_REPEATS times at a regular spacing (in kernels:
    max - min within PERIOD_TOLERANCE of the median, at least MIN_PERIOD_KERNELS) spanning at least
    MIN_SPAN of the sequence.
    The period is the longest such spacing (the outermost loop). Iterations start at the kernel, at a fixed
    offset from the anchor's occurrences, preceded by the longest median GPU idle (the loop's natural
    boundary, e.g. waiting for the batch load).
    The period and anchor are found on the first PERIOD_PREFIX kernels (periods up to a third of
    it: ~175k kernels per iteration), the offset on the first PHASE_ITERATIONS iterations; the anchor's occurrences are
    then taken over the whole sequence, and consecutive periods joined so that a device has at most MAX_INFERRED_STEPS
    windows.

    At most 3 passes over the blocks: (1) each device's first PERIOD_PREFIX kernels; (2) the GPU idle before the
    kernels of the first PHASE_ITERATIONS iterations, and the anchor's occurrences counted; (3) the boundaries. The
    completion before a kernel (the latest end of the device's earlier kernels) is a running maximum carried across
    blocks. A device whose kernels fit in the prefix needs pass 1 only; one whose rows are not in start order is
    gathered whole in pass 2 (its nameId, start, end, as the whole-table version held them) and done in memory.
    Held across blocks per device: the prefix, PHASE_ITERATIONS x period idle values, the anchor's positions in the
    last period of the sequence and the boundaries waiting for the next block (fewer than a period each), and the
    boundaries kept (at most MAX_INFERRED_STEPS + 1).
    """
    heads: dict[tuple[int, int], _Head] = {}
    _walk(kernels, heads, new=lambda: _Head(PERIOD_PREFIX))
    found = _passes(kernels, {device: _device_period(head) for device, head in heads.items()})
    return {device: found[device] for device in sorted(found) if found[device] is not None}


def _device_period(head: _Head) -> Generator:
    """:func:`kernel_period` on one device after pass 1 (``head``): yields the walker each further pass must feed
    (see _passes), returns its KernelPeriod, or None when its sequence does not repeat."""
    head = yield from _in_start_order(head)
    found = _period_and_anchor(head.kernels[0], head.rows)
    if found is None:
        return None
    period, anchor = found
    idle = _PhaseIdle(period, anchor, head.rows)
    yield from _fed(idle, head)
    phase, count = idle.phase_and_boundaries()
    joined = -(-max(count - 1, 1) // MAX_INFERRED_STEPS)  # periods per window, within the cap
    marks = _Boundaries(anchor, phase, int(idle.at[0]) + phase - period, joined)
    yield from _fed(marks, head)
    return KernelPeriod(period, np.concatenate(marks.kept), joined, head.first_start)


def _period_and_anchor(names: np.ndarray, rows: int) -> tuple[int, int] | None:
    """(kernels per iteration, anchor nameId) of a device's sequence of ``rows`` kernels from the names of its first
    kernels (start order; at least the first PERIOD_PREFIX), or None when it does not repeat (see kernel_period)."""
    if rows < 2 * MIN_REPEATS:
        return None
    m = min(rows, PERIOD_PREFIX)
    head = names[:m]
    by_name = np.argsort(head, kind="stable")
    names_sorted = head[by_name]
    same = names_sorted[1:] == names_sorted[:-1]
    name, low, high, median, size = _spacing_stats(names_sorted[1:][same], np.diff(by_name)[same])
    regular = ((size >= MIN_REPEATS - 1) & (median >= MIN_PERIOD_KERNELS) & (high - low <= PERIOD_TOLERANCE * median)
               & (median * (size + 1) >= MIN_SPAN * m))
    if not regular.any():
        return None
    period = int(round(median[regular].max()))
    return period, name[regular][median[regular] >= period * (1 - PERIOD_TOLERANCE)][0]


def _walk(kernels: Blocks, walkers: dict, new: Callable[[], object] | None = None) -> None:
    """One pass over the blocks: each device's rows of each block — nameId, start, end arrays (ns) — block by block,
    fed to its walker (``walkers[(globalPid, deviceId)].feed``); devices without one are skipped, or given ``new()``."""
    for block in kernels:
        if not len(block):
            continue
        columns = [block[c].to_numpy() for c in ("nameId", "start", "end")]
        for device, rows in group_indices(block["globalPid"].to_numpy(), block["deviceId"].to_numpy()):
            walker = walkers.get(device)
            if walker is None and new is not None:
                walker = walkers[device] = new()
            if walker is not None:
                walker.feed(*(c if rows is None else c[rows] for c in columns))


def _passes(kernels: Blocks, tasks: dict) -> dict:
    """Results of per-device computations that read the blocks in passes: each task (a generator) yields the walker the
    next pass must feed and returns its result. One pass feeds every waiting task's walker, so there are as many
    passes as one task needs, not their sum."""
    results, waiting = {}, dict.fromkeys(tasks)
    while waiting:
        walkers = {}
        for device in waiting:
            try:
                walkers[device] = next(tasks[device])
            except StopIteration as stop:
                results[device] = stop.value
        if walkers:
            _walk(kernels, walkers)
        waiting = walkers
    return results


class _Head:
    """One device's kernels as a pass reads them (its rows of each block, in order): nameId, start, end (ns) of the
    first ``limit`` (all: None), their number, the first start (ns), whether each start is at least the one before
    (``in_order``: the sequence streams) and, given ``windows`` (a, b arrays, ns), the kernels starting in each
    [a, b)."""

    def __init__(self, limit: int | None, windows: tuple[np.ndarray, np.ndarray] | None = None):
        self.limit, self.windows = limit, windows
        self.parts: list[list[np.ndarray]] = []
        self.rows, self.first_start, self.last_start, self.in_order = 0, None, None, True
        self.counts = None if windows is None else np.zeros(windows[0].size, dtype=np.int64)

    def feed(self, names: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
        keep = starts.size if self.limit is None else min(max(self.limit - self.rows, 0), starts.size)
        if keep:
            self.parts.append([np.array(c[:keep]) for c in (names, starts, ends)])  # copies: the block is not held
        self.in_order = (self.in_order and (self.last_start is None or starts[0] >= self.last_start)
                         and is_sorted(starts))
        self.last_start = int(starts[-1])
        low = int(starts.min())
        self.first_start = low if self.first_start is None else min(self.first_start, low)
        self.rows += starts.size
        if self.counts is not None:
            self.counts += count_in_windows(starts, *self.windows)

    @property
    def whole(self) -> bool:
        """Whether every kernel is kept."""
        return self.limit is None or self.rows <= self.limit

    @functools.cached_property
    def kernels(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The kept kernels' nameId, start, end (ns) in start order (sorted by start, stable, when not ``in_order``)."""
        columns = [np.concatenate(c) for c in zip(*self.parts)] if self.parts else [np.empty(0, np.int64)] * 3
        self.parts = []
        if not self.in_order:
            order = np.argsort(columns[1], kind="stable")
            columns = [c[order] for c in columns]
        return tuple(columns)


def _in_start_order(head: _Head) -> Generator:
    """``head`` when the device's rows came in start order, else the device's kernels gathered whole by the next pass
    (yielded) and sorted by start, stable (then held in memory)."""
    if head.in_order:
        return head
    whole = _Head(None)
    yield whole
    return whole


def _fed(walker, head: _Head) -> Generator:
    """Feeds ``walker`` the device's kernels in start order: from memory when ``head`` holds them all, else by the next
    pass (yielded)."""
    if head.whole:
        walker.feed(*head.kernels)
    else:
        yield walker


class _Carry:
    """A walker that keeps its place in one device's kernel sequence (start order) fed a run of consecutive kernels at
    a time: the position of the next run's first kernel (``offset``) and the GPU completion before it (``done``: the
    latest end of the earlier kernels, ns; None before the first run). Subclasses take each run in ``take``."""

    offset = 0
    done: int | None = None

    def feed(self, names: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
        self.take(names, starts, ends)
        self.offset += starts.size
        top = int(ends.max())
        self.done = top if self.done is None else max(self.done, top)

    def completion_before(self, starts: np.ndarray, ends: np.ndarray, local: np.ndarray) -> np.ndarray:
        """GPU completion (ns) before the run's kernels at positions ``local`` (see _completion_before)."""
        return _completion_before(starts, ends, local, self.done)


class _PhaseIdle(_Carry):
    """Pass 2 of kernel_period on one device: the GPU idle (ns) before the kernels of the first PHASE_ITERATIONS
    iterations — ``lead[i, j]``: start minus completion before of the kernel j after the anchor's occurrence i (the
    last kernel for those past the end) — and the anchor's occurrences: the first PHASE_ITERATIONS (``at``), the
    others counted (``early``), their positions kept only in the sequence's last period (``late``)."""

    def __init__(self, period: int, anchor, rows: int):
        self.period, self.anchor, self.rows = period, anchor, rows
        self.at = np.empty(0, dtype=np.int64)
        self.lead = np.zeros((PHASE_ITERATIONS, period), dtype=np.int64)
        self.early, self.late = 0, []

    def take(self, names: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
        found = self.offset + np.flatnonzero(names == self.anchor)
        last = self.rows - self.period
        self.early += int(np.count_nonzero(found < last))
        self.late.append(found[found >= last])
        self.at = np.concatenate((self.at, found[:PHASE_ITERATIONS - self.at.size]))
        reading = np.flatnonzero(self.at + self.period > self.offset)  # iterations not read to their end yet
        if reading.size == 0:
            return
        pos = np.minimum(self.at[reading, None] + np.arange(self.period), self.rows - 1)
        i, j = np.nonzero((pos >= self.offset) & (pos < self.offset + starts.size))
        local = pos[i, j] - self.offset
        self.lead[reading[i], j] = starts[local] - self.completion_before(starts, ends, local)

    def phase_and_boundaries(self) -> tuple[int, int]:
        """The offset of the iterations' first kernel from the anchor (the longest median idle before it, over the
        iterations that end in the sequence) and the number of boundaries (see _Boundaries)."""
        lead, full = self.lead[:self.at.size], self.at + self.period <= self.rows
        phase = int(np.argmax(np.median(lead[full], axis=0) if full.any() else lead[0]))
        before_first = int(self.at[0] + phase - self.period >= 0)
        return phase, before_first + self.early + int(np.count_nonzero(np.concatenate(self.late) + phase < self.rows))


class _Boundaries(_Carry):
    """Pass 3 of kernel_period on one device: every ``joined``-th iteration boundary (ns). Boundaries are at the kernels
    ``phase`` after each occurrence of the anchor and at ``first`` (one period before the first; when >= 0): the
    completion before that kernel, or its start when that is earlier. Positions past a run's end wait for the next
    (fewer than a period); those past the sequence's end are dropped."""

    def __init__(self, anchor, phase: int, first: int, joined: int):
        self.anchor, self.phase, self.joined = anchor, phase, joined
        self.waiting = np.array([first] if first >= 0 else [], dtype=np.int64)
        self.passed, self.kept = 0, []

    def take(self, names: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
        end = self.offset + starts.size
        pos = np.concatenate((self.waiting, self.offset + self.phase + np.flatnonzero(names == self.anchor)))
        now, self.waiting = pos[pos < end], pos[pos >= end]
        local = now[(self.passed + np.arange(now.size)) % self.joined == 0] - self.offset
        self.passed += now.size
        if local.size:
            self.kept.append(np.minimum(self.completion_before(starts, ends, local), starts[local]))


def _spacing_stats(name: np.ndarray, gap: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per distinct ``name`` (rows grouped by name, names ascending): the name, min, max and median (float)
    of its ``gap`` values and their number — numpy, not a pandas groupby (this runs once per device)."""
    if name.size == 0:
        return name, gap, gap, gap.astype(np.float64), gap
    first = np.flatnonzero(np.concatenate(([True], name[1:] != name[:-1])))
    size = np.diff(np.append(first, name.size))
    ordered = gap[np.lexsort((gap, name))]
    median = (ordered[first + (size - 1) // 2] + ordered[first + size // 2]) / 2
    return name[first], ordered[first], ordered[first + size - 1], median, size


def _completion_before(t0: np.ndarray, t1: np.ndarray, idx: np.ndarray, done: int | None = None) -> np.ndarray:
    """GPU completion (ns) before each kernel ``idx`` (of kernels in start order, [t0, t1)): the latest end of
    the kernels before it, those before t0[0] included (their latest end ``done``), t0[0] for the very first
    kernel (``done`` None). From the maxima of the segments between the asked kernels (np.maximum.reduceat),
    not a running maximum of every kernel (8 bytes a kernel)."""
    bounds, where = np.unique(np.concatenate(([0], idx.ravel())), return_inverse=True)
    running = np.maximum.accumulate(np.maximum.reduceat(t1, bounds))  # latest end before bounds[j + 1]
    if done is not None:
        np.maximum(running, done, out=running)
    before = np.concatenate(([t0[0] if done is None else done], running[:-1]))
    return before[where[1:]].reshape(idx.shape)


INFERRED_NAME = "step "  # inferred steps are named 'step 1' … 'step N' on each device


def inferred_steps(kernels: Blocks) -> pd.DataFrame:
    """Steps inferred from each device's repeating kernel sequence (see :func:`kernel_period`): one window
    per period, from one iteration boundary to the next (completion to completion, as NVTX steps; the
    GPU idle before an iteration's first kernel is that iteration's); columns as :func:`project_steps`
    plus ``period_kernels`` and ``periods_per_step`` (1, or more where a device would exceed
    MAX_INFERRED_STEPS); named 'step 1' … 'step N' per device. CPU range = the window (every thread of the process).
    ``kernels``: blocks of the kernels (nameId, start, end, globalPid, deviceId), read in kernel_period's passes (at
    most 3)."""
    cols = STEP_COLUMNS + ["deviceId", "gpu_start", "gpu_end", "window_start", "window_end", "closed", "period_kernels",
                           "periods_per_step"]
    parts = [(pid, dev, p.period, p.boundaries, p.first_start, p.joined)  # per device with a period
             for (pid, dev), p in kernel_period(kernels).items()]
    if not parts:
        return pd.DataFrame(columns=cols)
    pids, devs, periods, marks, firsts, joined = zip(*parts)
    steps = np.array([max(m.size - 1, 0) for m in marks])  # windows between boundaries, per device
    a, b = np.concatenate([m[:-1] for m in marks]), np.concatenate([m[1:] for m in marks])
    number = np.arange(a.size) - np.repeat(np.cumsum(steps) - steps, steps)  # 0, 1, … per device
    out = pd.DataFrame({"globalPid": np.repeat(pids, steps), "globalTid": -1, "step": number,
                        "name": INFERRED_NAME + pd.Series(number + 1).astype(str),
                        "cpu_start": a, "cpu_end": b, "deviceId": np.repeat(devs, steps),
                        "gpu_start": a, "gpu_end": b, "window_start": a, "window_end": b,
                        # a window opening at the capture's first kernel misses its wait: open
                        "closed": a > np.repeat(firsts, steps), "period_kernels": np.repeat(periods, steps),
                        "periods_per_step": np.repeat(joined, steps)})
    return out[cols]


def is_loop_iteration(windows: pd.DataFrame, kernels: Blocks) -> bool:
    """Whether projected NVTX steps look like iterations of the program's loop, judged on the
    (process, device) where the steps launched the most GPU time:

    - when the device's kernel sequence repeats (period as :func:`kernel_period`'s), the median step must hold
      at least ITERATION_SHARE of one period's kernels (op- and layer-level ranges hold a few kernels of a
      much longer period);
    - otherwise the steps' GPU spans [gpu_start, gpu_end] must hold at least BUSY_SHARE of the
      device's kernel time.

    One pass over the blocks of ``kernels`` (that device's first PERIOD_PREFIX kernels, and its kernels counted in
    each span); two when they do not repeat and outnumber the prefix (their busy union, its last interval carried
    across blocks) or their rows are not in start order (gathered whole by the second pass, as the whole-table
    version held them).
    """
    if windows.empty:
        return True  # nothing on the GPU to judge by
    spans = windows.assign(ns=windows["gpu_end"] - windows["gpu_start"])
    pid, dev = spans.groupby(["globalPid", "deviceId"])["ns"].sum().idxmax()
    mine = spans[(spans["globalPid"] == pid) & (spans["deviceId"] == dev)]
    a, b = mine["gpu_start"].to_numpy(np.int64), mine["gpu_end"].to_numpy(np.int64)
    device, head = (int(pid), int(dev)), _Head(PERIOD_PREFIX, windows=(a, b + 1))
    _walk(kernels, {device: head})
    return _passes(kernels, {device: _judged(head, Coverage(a, b))})[device]


def _judged(head: _Head, spans: Coverage) -> Generator:
    """:func:`is_loop_iteration` on its device after pass 1 (``head``, with the kernels counted in each span;
    ``spans``: the steps' GPU spans): yields the walker a further pass must feed (see _passes), returns the verdict."""
    if head.rows == 0:
        return True  # nothing on the GPU to judge by
    counts = head.counts
    head = yield from _in_start_order(head)
    found = _period_and_anchor(head.kernels[0], head.rows)
    if found is not None:
        return bool(np.median(counts) >= ITERATION_SHARE * found[0])
    busy = _Busy(spans)
    yield from _fed(busy, head)
    return busy.holds(BUSY_SHARE)


class _Busy:
    """GPU-busy time (ns) of one device's kernels — their union — and the part of it inside ``spans`` (a Coverage),
    fed runs of consecutive kernels in start order: the union's last interval stays open for the next run (a later
    kernel can still extend it); the others are measured and dropped."""

    def __init__(self, spans: Coverage):
        self.spans, self.total, self.inside = spans, 0, 0
        self.open = (np.empty(0, np.int64), np.empty(0, np.int64))

    def feed(self, names: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
        starts, ends = union(np.concatenate((self.open[0], starts)), np.concatenate((self.open[1], ends)))
        self._measure(starts[:-1], ends[:-1])
        self.open = (starts[-1:].copy(), ends[-1:].copy())

    def _measure(self, starts: np.ndarray, ends: np.ndarray) -> None:
        self.total += int((ends - starts).sum())
        self.inside += int(self.spans.within(starts, ends).sum())

    def holds(self, share: float) -> bool:
        """Whether the part inside the spans is at least ``share`` of the busy time, once every kernel is fed (True
        without busy time)."""
        self._measure(*self.open)
        self.open = (self.open[0][:0], self.open[1][:0])
        return self.total == 0 or bool(np.int64(self.inside) >= share * self.total)


def _assign_to_ranges(tids: np.ndarray, times: np.ndarray, ranges: pd.DataFrame, key: str = "globalTid") -> np.ndarray:
    """Index into ``ranges`` (rows with ``key``, cpu_start, cpu_end) of the range with the same key
    (thread, or process for key="globalPid" with ``tids`` holding globalPids) holding each time,
    or -1. Ranges of one key must not overlap.

    One sorted lookup for all keys: each key is a lane of its own on one time axis (see
    intervals.STACK_LIMIT), so the cost does not grow with the number of threads or processes.
    """
    out = np.full(times.shape, -1, dtype=np.int64)
    if ranges.empty or times.size == 0:
        return out
    lanes, r_lane = np.unique(ranges[key].to_numpy(), return_inverse=True)
    r_start, r_end = ranges["cpu_start"].to_numpy(), ranges["cpu_end"].to_numpy()
    lo = min(int(times.min()), int(r_start.min()))
    stride = max(int(times.max()), int(r_end.max())) - lo + 1
    per_batch = lanes_per_batch(stride)
    for first in range(0, lanes.size, per_batch):
        batch = lanes[first:first + per_batch]
        sel = np.flatnonzero((r_lane >= first) & (r_lane < first + per_batch))
        # each lane shifted onto its own stretch of the axis; one lane: the times as they are
        shift = (r_lane[sel] - first) * stride - lo if batch.size > 1 else np.zeros(sel.size, dtype=np.int64)
        order = np.argsort(r_start[sel] + shift, kind="stable")
        sel, shift = sel[order], shift[order]
        starts, ends, labels = r_start[sel] + shift, r_end[sel] + shift, ranges.index.to_numpy()[sel]
        for r in row_blocks(times.size):
            key_t, t = tids[r], times[r]
            if batch.size == 1:
                on = key_t == batch[0]
                on = None if on.all() else np.flatnonzero(on)  # None: every time (one thread or process)
                if on is not None:
                    t = t[on]
            else:
                lane = np.minimum(np.searchsorted(batch, key_t), batch.size - 1)
                on = np.flatnonzero(batch[lane] == key_t)
                t = t[on] + (lane[on] * stride - lo)
            search = searchsorted_sorted if is_sorted(t) else np.searchsorted
            k = search(starts, t, side="right") - 1
            inside = (k >= 0) & (t <= ends[np.maximum(k, 0)])
            rows = np.flatnonzero(inside)
            out[r.start + (rows if on is None else on[rows])] = labels[k[rows]]
    return out


Frames = "pd.DataFrame | Sequence[pd.DataFrame]"
# Runtime/driver APIs that can put work on a GPU (kernels, copies, memsets): the calls step projection needs.
LAUNCHES_GPU_WORK = re.compile(r"^cu(da)?(Launch|Graph\w*Launch|Memcpy|Memset|MemPrefetch)")


def _parts(frames) -> Iterator[pd.DataFrame]:
    """The frames with rows of one frame, or of several with the same columns (e.g. blocks of kernels
    (nsysanalyze.blocks), memcpys, memsets: never concatenated), taken one at a time."""
    return (f for f in ([frames] if isinstance(frames, pd.DataFrame) else frames) if len(f))


def _has_rows(frames) -> bool:
    """Whether one of the frames (as :func:`_parts`) has rows (the frames are taken up to the first that has)."""
    return next(_parts(frames), None) is not None


def _first_call_steps(corr: np.ndarray, step: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique correlationIds of one process's calls (given in call order) with a step for each:
    that of its first call inside a step (step >= 0), else -1."""
    if corr.size < 2 or bool(np.all(corr[1:] > corr[:-1])):  # the usual order: already unique and sorted
        return corr, step
    # by correlationId, calls inside steps first, then call order: one stable (run-aware) sort of one key
    if int(corr.max()) < 1 << 61 and int(corr.min()) >= 0:
        order = np.argsort(corr.astype(np.int64) * 2 + (step < 0), kind="stable")
    else:
        order = np.lexsort((step < 0, corr))
    corr, step = corr[order], step[order]
    first = np.concatenate(([True], corr[1:] != corr[:-1]))
    return corr[first], step[first]


def steady_frame(steady_steps: dict[tuple[int, int], list[int]]) -> pd.DataFrame:
    """The steady steps (per (globalPid, deviceId): their step numbers) as rows globalPid, deviceId, step (int64),
    in the dict's order."""
    counts = [len(steps) for steps in steady_steps.values()]
    keys = np.array(list(steady_steps), dtype=np.int64).reshape(-1, 2)
    steps = [np.asarray(s, dtype=np.int64) for s in steady_steps.values()]
    return pd.DataFrame({"globalPid": np.repeat(keys[:, 0], counts), "deviceId": np.repeat(keys[:, 1], counts),
                         "step": np.concatenate(steps) if steps else np.empty(0, np.int64)})


def rows_by_process(global_ids: np.ndarray, of_tid: bool) -> list[tuple[int, np.ndarray | None]]:
    """Rows per process of globalTids (``of_tid``) or globalPids: (globalPid, indices or None for all rows)."""
    if global_ids.size == 0:
        return []
    first = int(pid_of(global_ids[:1])[0]) if of_tid else int(global_ids[0])
    one = all(bool(((pid_of(b) if of_tid else b) == first).all())
              for b in (global_ids[r] for r in row_blocks(global_ids.size)))
    if one:
        return [(first, None)]
    return [(pid, idx) for (pid,), idx in group_indices(pid_of(global_ids) if of_tid else global_ids)]


def _calls_by_process(runtime: Frames, steps: pd.DataFrame | None) -> dict[int, list[tuple[np.ndarray, np.ndarray]]]:
    """Per process, per runtime frame: sorted unique correlationIds of its calls and the step row
    (label in ``steps``) each was made in, -1 for calls inside no step (every call without ``steps``)."""
    out: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
    for part in _parts(runtime):
        tid, corr = part["globalTid"].to_numpy(), part["correlationId"].to_numpy()
        if steps is None or steps.empty:
            step = np.broadcast_to(np.int64(-1), tid.shape)
        else:
            start = part["start"].to_numpy()
            step = np.empty(tid.size, dtype=np.int32)  # step rows fit int32: half the memory

            def assign(at: slice) -> None:
                step[at] = _assign_to_ranges(pid_of(tid[at]), start[at], steps, key="globalPid")
            for_blocks(assign, row_blocks(tid.size))
        for pid, idx in rows_by_process(tid, of_tid=True):
            c, st = (corr, step) if idx is None else (corr[idx], step[idx])
            out.setdefault(pid, []).append(_first_call_steps(c, st))
    return out


def _launching_step(calls: list[tuple[np.ndarray, np.ndarray]], act_corr: np.ndarray) -> np.ndarray:
    """Per activity (of one process): the step of its launching call, -1 when that call is inside no
    step, -2 when no call has its correlationId (a call inside a step wins, then the first frame)."""
    step = np.full(act_corr.shape, -2, dtype=np.int64)
    for corr, st in calls:
        if corr.size == 0:
            continue
        pos = np.minimum(np.searchsorted(corr, act_corr), corr.size - 1)
        hit = (corr[pos] == act_corr) & (step < 0)
        found = st[pos[hit]]
        idx = np.flatnonzero(hit)
        better = (found >= 0) | (step[idx] == -2)
        step[idx[better]] = found[better]
    return step


ACTIVITY_COLUMNS = ["globalPid", "correlationId", "deviceId", "start", "end"]


def _joined_block(part: dict[str, np.ndarray], block: slice, calls: dict[int, list]) -> tuple[list, list]:
    """One block of one activity frame's columns (ACTIVITY_COLUMNS) joined to its launching calls, process by
    process: the extents (:func:`_step_device_extent`) of the activities launched inside steps, and the
    (globalPid, correlationId) of those no call launched."""
    gpid, corr = part["globalPid"][block], part["correlationId"][block]
    extents, missing = [], []
    for pid, idx in rows_by_process(gpid, of_tid=False):
        step = _launching_step(calls.get(pid, []), corr if idx is None else corr[idx])
        rows = np.arange(block.start, block.start + gpid.size) if idx is None else block.start + idx
        hit = np.flatnonzero(step >= 0)
        if hit.size:
            at = rows[hit]
            extents.append(_step_device_extent(step[hit], part["deviceId"][at], part["start"][at], part["end"][at]))
        none = np.flatnonzero(step == -2)
        if none.size:
            at = rows[none]
            missing.append(pd.DataFrame({"globalPid": part["globalPid"][at], "correlationId": part["correlationId"][at]}))
    return extents, missing


def _step_device_extent(step: np.ndarray, device: np.ndarray, start: np.ndarray, end: np.ndarray) -> pd.DataFrame:
    """min(start), max(end) per (step_row, deviceId) of matched activities, sorted by both."""
    if step.size == 0:
        return pd.DataFrame({"step_row": step, "deviceId": device, "gpu_start": start, "gpu_end": end})
    d0, span = int(device.min()), int(device.max()) - int(device.min()) + 1
    if span > 4096:  # sparse device ids: let pandas group
        work = pd.DataFrame({"step_row": step, "deviceId": device, "start": start, "end": end})
        return work.groupby(["step_row", "deviceId"]).agg(gpu_start=("start", "min"), gpu_end=("end", "max")).reset_index()
    s0 = int(step.min())
    cells = (int(step.max()) - s0 + 1) * span
    key = (step - s0) * span + (device - d0)
    # activities come in runs of one (step, device): reduced per run first, then scattered per run
    first = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))
    key = key[first]
    lo = np.full(cells, np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.full(cells, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(lo, key, np.minimum.reduceat(start, first))
    np.maximum.at(hi, key, np.maximum.reduceat(end, first))
    used = np.flatnonzero(np.bincount(key, minlength=cells))
    return pd.DataFrame({"step_row": used // span + s0, "deviceId": used % span + d0,
                         "gpu_start": lo[used], "gpu_end": hi[used]})


def _project(steps: pd.DataFrame | None, runtime: Frames, activities: Frames) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Both answers of one join of activities to their launching calls: per (step row, device) the
    extent of the work steps launched (step_row, deviceId, gpu_start, gpu_end), and the unique
    (globalPid, correlationId) of activities no call launched."""
    calls = _calls_by_process(runtime, steps)
    extents, missing = [], []
    for frame in _parts(activities):  # one frame at a time (a block of kernels, the memcpys, the memsets)
        part = {c: frame[c].to_numpy() for c in ACTIVITY_COLUMNS}
        for block_extents, block_missing in in_blocks(lambda b: _joined_block(part, b, calls),
                                                      row_blocks(part["start"].size)):
            extents += block_extents
            missing += block_missing
    per = (pd.concat(extents, ignore_index=True) if extents else
           pd.DataFrame({c: np.empty(0, np.int64) for c in ("step_row", "deviceId", "gpu_start", "gpu_end")}))
    if len(extents) > 1:
        per = per.groupby(["step_row", "deviceId"]).agg(gpu_start=("gpu_start", "min"), gpu_end=("gpu_end", "max")).reset_index()
    missing_keys = (pd.concat(missing, ignore_index=True).drop_duplicates(ignore_index=True) if missing else
                    pd.DataFrame({"globalPid": np.empty(0, np.int64), "correlationId": np.empty(0, np.int64)}))
    return per.astype(np.int64), missing_keys


def unlaunched_activities(runtime: Frames, activities: Frames) -> pd.DataFrame:
    """(globalPid, correlationId) of GPU activities that no call in ``runtime`` launched, unique.

    Used to check that runtime calls loaded by API name missed no launching call (see Analysis).
    """
    return _project(None, runtime, activities)[1]


def project_steps(steps: pd.DataFrame, runtime: Frames, activities: Frames) -> pd.DataFrame:
    """Per (step, device): gpu_start/gpu_end of the GPU work the step launched, and its window.

    ``runtime`` and ``activities`` are each one frame or several (e.g. kernels, memcpys, memsets;
    activities need start, end, deviceId, correlationId, globalPid). A call launches the activities
    with its (process, correlationId); should a correlationId repeat among a process's calls inside
    steps, its first call counts (first frame first). Returns the step columns plus deviceId,
    gpu_start, gpu_end, window_start, window_end (ns) and closed (an earlier step on the device starts the window).
    """
    return project_steps_checked(steps, runtime, activities)[0]


def project_steps_checked(steps: pd.DataFrame, runtime: Frames, activities: Frames) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`project_steps` and :func:`unlaunched_activities` from one join (see both)."""
    cols = STEP_COLUMNS + ["deviceId", "gpu_start", "gpu_end", "window_start", "window_end", "closed"]
    if steps.empty or not _has_rows(runtime) or not _has_rows(activities):
        return pd.DataFrame(columns=cols), unlaunched_activities(runtime, activities)
    per, missing = _project(steps, runtime, activities)
    if per.empty:
        return pd.DataFrame(columns=cols), missing
    out = steps.loc[per["step_row"]].reset_index(drop=True)
    out[["deviceId", "gpu_start", "gpu_end"]] = per[["deviceId", "gpu_start", "gpu_end"]].to_numpy()
    out = out.sort_values(["globalPid", "deviceId", "step"]).reset_index(drop=True)
    done = out.groupby(["globalPid", "deviceId"])["gpu_end"].cummax()  # completion, kept monotonic
    prev = done.groupby([out["globalPid"], out["deviceId"]]).shift(1)
    out["window_start"] = prev.fillna(out["gpu_start"]).astype(np.int64)
    out["window_end"] = np.maximum(done, out["window_start"])
    out["closed"] = prev.notna().to_numpy()
    return out[cols].sort_values(["globalPid", "step", "deviceId"]).reset_index(drop=True), missing


def capture_windows(activities: Frames) -> pd.DataFrame:
    """One window per (process, device): first GPU activity start to last GPU activity end.

    ``activities``: one frame or several (as for :func:`project_steps`).
    """
    rows = []
    for part in _parts(activities):
        start, end = part["start"].to_numpy(), part["end"].to_numpy()
        for key, idx in group_indices(part["globalPid"].to_numpy(), part["deviceId"].to_numpy()):
            s, e = (start, end) if idx is None else (start[idx], end[idx])
            rows.append((*key, s.min(), e.max()))
    per = pd.DataFrame(rows, columns=["globalPid", "deviceId", "window_start", "window_end"], dtype=np.int64)
    if len(rows) > 1:
        per = per.groupby(["globalPid", "deviceId"]).agg(window_start=("window_start", "min"),
                                                         window_end=("window_end", "max")).reset_index()
    return per


def subranges(nvtx: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """CPU time of NVTX ranges nested in each step on the step's thread.

    One row per (globalPid, step, name): ns (summed durations), count, share (of the step's CPU time);
    numbered sub-ranges are grouped by family (``IO 12``, ``IO 13`` -> one ``IO {n}`` row).
    Groups are formed on integer codes (step row x name code), so millions of ranges cost a few arrays.
    """
    cols = ["globalPid", "step", "name", "ns", "count", "share"]
    if steps.empty or nvtx.empty:
        return pd.DataFrame(columns=cols)
    start, end = nvtx["start"].to_numpy(), nvtx["end"].to_numpy()
    owner = _assign_to_ranges(nvtx["globalTid"].to_numpy(), start, steps)
    pos = steps.index.get_indexer(owner[owner >= 0])  # step label -> row position
    rows = np.flatnonzero(owner >= 0)
    del owner
    s_start, s_end = steps["cpu_start"].to_numpy()[pos], steps["cpu_end"].to_numpy()[pos]
    nested = (end[rows] <= s_end) & ~((start[rows] == s_start) & (end[rows] == s_end))
    rows, pos, step_ns = rows[nested], pos[nested], (s_end - s_start)[nested]
    del s_start, s_end, nested
    name_code, names = pd.factorize(group_name(pd.Series(nvtx["name"].to_numpy()[rows])).to_numpy())
    group, keys = pd.factorize(pos * np.int64(max(len(names), 1)) + name_code)  # groups in order of appearance
    count = np.bincount(group, minlength=len(keys))
    dur = (end[rows] - start[rows])[np.argsort(group, kind="stable")]
    ns = np.add.reduceat(dur, np.cumsum(count) - count) if len(keys) else dur
    g_pos = keys // max(len(names), 1)
    g_step_ns = np.zeros(len(keys), dtype=np.int64)
    g_step_ns[group] = step_ns
    out = pd.DataFrame({"globalPid": steps["globalPid"].to_numpy()[g_pos], "step": steps["step"].to_numpy()[g_pos],
                        "name": pd.array(np.asarray(names, dtype=object)[keys % max(len(names), 1)], dtype=str),
                        "ns": ns, "count": count, "share": ns / np.where(g_step_ns > 0, g_step_ns, np.nan)})
    return out.sort_values(["globalPid", "step", "ns"], ascending=[True, True, False]).reset_index(drop=True)
