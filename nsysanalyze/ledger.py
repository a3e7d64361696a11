"""The ledger: every ns of a window on a device accounted once (the stage between attribution and rules).

A window (a step, or the whole capture of a device) is split into rows that sum to its length:

- **busy** rows, one per class of GPU work (``metrics.BUSY_CLASSES``: compute, NCCL beyond compute,
  each copy class beyond kernels and the classes before it, memsets), and
- **idle** rows, one per cause of the attribution (``attribution.LEVELS`` as ``what``, the cause's
  name, and its tags ``before_launch``, ``after_sync``, ``short_gap``).

Rules *claim* rows (:class:`Ledger`): a row belongs to one finding at most, so no two findings spend
the same ns, and what no finding claims is what stays unexplained. A finding's gain is a bound from a
two-resource model of the window after its fix (:class:`WhatIf`): the step cannot become shorter than
the GPU work left or the host's own work left (host work between syncs stays when a sync goes).

At the evidence's scope (the median steady step, or the capture), each row is the median over the
steady steps of that row's ns (a step without it counting 0), so rows of one scope need not sum to the
median window exactly; every window's own rows do (:func:`window_rows`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd

from .intervals import key_groups, median_per_group
from .metrics import BUSY_CLASSES
from .steps import steady_frame

DEVICE = ["globalPid", "deviceId"]
ROW_KEYS = ["kind", "what", "cause", "before_launch", "after_sync", "short_gap"]
BUSY_COLUMNS = [f"busy_{c}_ns" for c in BUSY_CLASSES]
# host time in CUDA calls that wait for the GPU: syncs, blocking copies, and launches (a launch call blocks
# while the GPU's queue is full; the rest of its cost is what graphs and fusion remove)
HOST_WAITS = ["sync_wait_ns", "sync_copy_ns", "async_copy_ns", "launch_ns"]
LEDGER_COLUMNS = [*DEVICE, "window", "step", *ROW_KEYS, "ns"]


def window_rows(steps: pd.DataFrame, capture: pd.DataFrame, gaps: pd.DataFrame) -> pd.DataFrame:
    """The ledger of every window: one row per (globalPid, deviceId, window, step, kind, what, cause, tags)
    with its ns (int64); ``window`` is 'step' (step = its number) or 'capture' (step = -1).

    ``steps``/``capture``: windows with their busy_<class>_ns metrics; ``gaps``: the attribution
    (attribution.GAP_COLUMNS; step -1 is idle outside every step window: it counts in the capture only).
    Rows with 0 ns are left out."""
    parts = []
    for window, frame in (("step", steps), ("capture", capture)):
        if frame.empty:
            continue
        n, k = len(frame), len(BUSY_CLASSES)  # one row per (window, class), made from the n×k matrix at once
        step = frame["step"].to_numpy(np.int64) if window == "step" else np.full(n, -1, np.int64)
        parts.append(pd.DataFrame({"globalPid": np.repeat(frame["globalPid"].to_numpy(np.int64), k),
                                   "deviceId": np.repeat(frame["deviceId"].to_numpy(np.int64), k),
                                   "window": window, "step": np.repeat(step, k), "kind": "busy",
                                   "what": np.tile(np.array(BUSY_CLASSES, dtype=object), n), "cause": "",
                                   "before_launch": False, "after_sync": False, "short_gap": False,
                                   "ns": frame[BUSY_COLUMNS].to_numpy(np.int64).ravel()}))
    if len(gaps):
        idle = gaps.rename(columns={"cause_kind": "what"}).assign(kind="idle")
        in_steps = idle[idle["step"] >= 0].assign(window="step")
        keys = [*DEVICE, *ROW_KEYS]
        whole = idle.groupby(keys, as_index=False, sort=False, observed=True)["ns"].sum().assign(window="capture", step=-1)
        parts += [in_steps[LEDGER_COLUMNS], whole[LEDGER_COLUMNS]]
    if not parts:
        return pd.DataFrame({c: [] for c in LEDGER_COLUMNS})
    rows = pd.concat(parts, ignore_index=True)
    return rows[rows["ns"] > 0].reset_index(drop=True).astype({"ns": np.int64, "step": np.int64})


def scope_rows(rows: pd.DataFrame, steady_steps: dict[tuple[int, int], list[int]]) -> dict[tuple[int, int], "RowArrays"]:
    """Per device: its ledger at the evidence's scope (ROW_KEYS + ns, float64, largest first): the median
    per steady step of each row (``steady_steps`` lists them), else the capture window's rows. Every device's
    rows are one :class:`RowTable`, each device's a slice of it."""
    out: dict[tuple[int, int], pd.DataFrame] = {}
    if rows.empty:
        return out
    chosen = steady_frame(steady_steps)
    stepped = pd.MultiIndex.from_frame(rows[DEVICE]).isin(pd.MultiIndex.from_frame(chosen[DEVICE]))
    in_steps = (rows["window"] == "step").to_numpy() & pd.MultiIndex.from_frame(
        rows[[*DEVICE, "step"]]).isin(pd.MultiIndex.from_frame(chosen))
    capture = rows[~stepped & (rows["window"] == "capture").to_numpy()][[*DEVICE, *ROW_KEYS, "ns"]]
    parts = [capture.astype({"ns": np.float64})]
    mine = rows[in_steps]
    if len(mine):
        keys = [*DEVICE, *ROW_KEYS]
        group, firsts = key_groups(mine, keys)
        n = chosen.groupby(DEVICE).size().reindex(pd.MultiIndex.from_frame(firsts[DEVICE])).to_numpy(np.int64)
        parts.append(firsts.assign(ns=median_per_group(group, mine["ns"].to_numpy(np.float64), n)))
    every = pd.concat(parts, ignore_index=True)
    every = every[every["ns"] > 0].sort_values([*DEVICE, "ns"], ascending=[True, True, False], kind="stable")
    every = every.reset_index(drop=True)
    table = RowTable(every)
    pid, dev = every["globalPid"].to_numpy(), every["deviceId"].to_numpy()
    first = np.flatnonzero(np.concatenate(([True], (pid[1:] != pid[:-1]) | (dev[1:] != dev[:-1])))) if len(every) else []
    bounds = np.append(first, len(every)).tolist()
    for a, b in zip(bounds[:-1], bounds[1:]):
        out[(int(pid[a]), int(dev[a]))] = RowArrays(table, a, b)
    return out


def largest_first(keys: list, ns: np.ndarray) -> list[tuple[object, float]]:
    """(key, ns summed per key) of ``keys`` (one per row; hashable) with their ``ns``, largest first, ties in
    their order of first appearance (a device's rows: tens, a dict is quicker than a groupby)."""
    total: dict = {}
    for key, v in zip(keys, ns.tolist()):
        total[key] = total.get(key, 0.0) + v
    return sorted(total.items(), key=lambda kv: -kv[1])


def host_work_ns(m: dict[str, float]) -> float:
    """The host's own work in the window (ns): its CPU range (``cpu_ns``, the window itself for captures and
    inferred steps) less the time its threads spend in CUDA calls that wait for the GPU (HOST_WAITS), at most the
    window. The waits are counted in the CPU range, so they come off it before the clamp: a host that runs ahead
    and blocks in a full launch queue has a CPU range longer than the GPU's step. It stays when a sync goes; OS
    waits (a loader worker's queue) count as host work."""
    cpu = m.get("cpu_ns") or m.get("window_ns") or 0.0
    waits = sum((m.get(k) or 0.0) for k in HOST_WAITS if m.get(k) == m.get(k))  # NaN: no runtime table
    return max(0.0, min(float(cpu) - waits, float(m.get("window_ns") or cpu)))


@dataclass(frozen=True)
class WhatIf:
    """What a fix removes from a window, and the bound that follows (all ns).

    The gain is at most what the fix removes (``removable_ns``: the idle rows it claims plus the busy time
    it takes off the GPU's critical path) and at most window − max(GPU work left, host work left), where
    the GPU keeps ``busy_ns − busy_removed_ns`` and the host ``host_work_ns − host_removed_ns``;
    ``caps`` add the fix's own limits (name -> ns)."""

    window_ns: float
    removable_ns: float
    busy_ns: float
    host_work_ns: float
    busy_removed_ns: float = 0.0
    host_removed_ns: float = 0.0
    caps: dict[str, float] = field(default_factory=dict)

    @property
    def gpu_left_ns(self) -> float:
        return max(0.0, self.busy_ns - self.busy_removed_ns)

    @property
    def host_left_ns(self) -> float:
        return max(0.0, self.host_work_ns - self.host_removed_ns)

    @property
    def gain_ns(self) -> float:
        limits = [self.removable_ns, self.window_ns - max(self.gpu_left_ns, self.host_left_ns), *self.caps.values()]
        return max(0.0, min(limits))

    def terms(self) -> dict[str, float | str]:
        """The bound's terms for a finding's evidence (ns), with the bound written out in ms."""
        named = {"removable": self.removable_ns,
                 "window - max(GPU left, host left)": self.window_ns - max(self.gpu_left_ns, self.host_left_ns),
                 **self.caps}
        text = ", ".join(f"{k} {v / 1e6:,.2f} ms" for k, v in named.items())
        return {"bound_removable_ns": self.removable_ns, "bound_gpu_left_ns": self.gpu_left_ns,
                "bound_host_left_ns": self.host_left_ns,
                **{f"bound_{k.replace(' ', '_')}_ns": v for k, v in self.caps.items()},
                "bound": f"min({text}) = {self.gain_ns / 1e6:,.2f} ms"}


class RowTable:
    """Ledger rows (ROW_KEYS + ns; of one device or of many, each device's together) as arrays, made once:
    idle/busy masks, the ``what`` and ``cause`` columns as codes into their distinct values (a regex is
    matched once per distinct cause), the tags and ns (float64)."""

    def __init__(self, frame: pd.DataFrame):
        self.frame = frame
        kind = frame["kind"].to_numpy(dtype=object)
        self.is_idle, self.is_busy = kind == "idle", kind == "busy"
        self.what_code, self.what = pd.factorize(frame["what"].to_numpy(dtype=object))
        self.cause_code, self.cause = pd.factorize(frame["cause"].astype(str).to_numpy(dtype=object))
        self.tags = {t: frame[t].to_numpy(bool) for t in ("before_launch", "after_sync", "short_gap")}
        self.ns = frame["ns"].to_numpy(np.float64)
        self._matches: dict = {}  # regex or tuple of names -> per distinct cause / what

    def what_in(self, names: tuple[str, ...]) -> np.ndarray:
        """Per distinct ``what``: whether it is one of ``names``."""
        key = tuple(names)
        if key not in self._matches:
            self._matches[key] = np.array([w in key for w in self.what], dtype=bool)
        return self._matches[key]

    def cause_matches(self, regex: str) -> np.ndarray:
        """Per distinct cause: whether it fully matches ``regex``."""
        if regex not in self._matches:
            pattern = re.compile(regex)
            self._matches[regex] = np.array([pattern.fullmatch(c) is not None for c in self.cause], dtype=bool)
        return self._matches[regex]


class RowArrays:
    """One device's ledger rows: rows lo..hi-1 of a :class:`RowTable` (views of its arrays)."""

    def __init__(self, table: RowTable, lo: int = 0, hi: int | None = None):
        hi = table.ns.size if hi is None else hi
        self.table, self.lo, self.hi = table, lo, hi
        self.is_idle, self.is_busy, self.ns = table.is_idle[lo:hi], table.is_busy[lo:hi], table.ns[lo:hi]
        self.what_code, self.cause_code = table.what_code[lo:hi], table.cause_code[lo:hi]
        self.tags = {t: v[lo:hi] for t, v in table.tags.items()}

    @classmethod
    def of(cls, rows: pd.DataFrame) -> "RowArrays":
        return cls(RowTable(rows))

    def __len__(self) -> int:
        return self.hi - self.lo

    @cached_property
    def frame(self) -> pd.DataFrame:
        """The rows as a frame (ROW_KEYS + ns), made when asked."""
        return self.table.frame.iloc[self.lo:self.hi][[*ROW_KEYS, "ns"]].reset_index(drop=True)

    def what_in(self, names: tuple[str, ...]) -> np.ndarray:
        """Mask of the rows whose ``what`` is one of ``names``."""
        return self.table.what_in(names)[self.what_code]

    def cause_matches(self, regex: str) -> np.ndarray:
        """Mask of the rows whose cause fully matches ``regex``."""
        return self.table.cause_matches(regex)[self.cause_code] if len(self) else np.zeros(0, dtype=bool)

    def what_and_cause(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``what`` and cause of the rows at positions ``rows`` (object arrays)."""
        t = self.table
        return np.asarray(t.what, dtype=object)[self.what_code[rows]], np.asarray(t.cause, dtype=object)[self.cause_code[rows]]


@dataclass(frozen=True)
class Ledger:
    """One device's ledger at the evidence's scope, with the rows claimed so far (by rule id).

    ``arrays``: its rows (ROW_KEYS + ns, see :func:`scope_rows`; ``rows`` as a frame); ``claimed``: rule id per
    row, '' while unclaimed; ``window_ns``, ``busy_ns``, ``host_work_ns``: the scope's window, GPU busy time and
    host work."""

    arrays: RowArrays
    window_ns: float
    busy_ns: float
    host_work_ns: float
    claimed: tuple[str, ...] = ()

    @property
    def rows(self) -> pd.DataFrame:
        return self.arrays.frame

    def __len__(self) -> int:
        return len(self.arrays)

    @classmethod
    def of(cls, rows: pd.DataFrame | RowArrays, m: dict[str, float]) -> "Ledger":
        """The unclaimed ledger of ``rows`` (a frame, or :func:`scope_rows`' arrays of one device) with the window,
        busy and host work of ``m`` (the evidence's metrics: window_ns, busy_ns, and host_work_ns's inputs)."""
        arrays = rows if isinstance(rows, RowArrays) else RowArrays.of(rows)
        return cls(arrays=arrays, window_ns=float(m.get("window_ns") or 0.0), busy_ns=float(m.get("busy_ns") or 0.0),
                   host_work_ns=host_work_ns(m), claimed=("",) * len(arrays))

    @cached_property
    def free(self) -> np.ndarray:
        """Mask of the rows no finding has claimed."""
        return np.array([c == "" for c in self.claimed], dtype=bool)

    def idle(self, kinds: tuple[str, ...] = (), causes: str | None = None, before_launch: bool | None = None,
             after_sync: bool | None = None, short_gap: bool | None = None, free: bool = True) -> np.ndarray:
        """Mask of idle rows whose ``what`` (cause kind) is in ``kinds`` (any when empty) or whose cause
        fully matches the regex ``causes``, with each given tag as asked (None: either); only unclaimed
        rows unless ``free`` is False."""
        r = self.arrays
        mask = r.is_idle
        if kinds or causes:
            which = r.what_in(kinds) if kinds else np.zeros(mask.size, dtype=bool)
            if causes:
                which = which | r.cause_matches(causes)
            mask = mask & which
        for tag, want in (("before_launch", before_launch), ("after_sync", after_sync), ("short_gap", short_gap)):
            if want is not None:
                mask = mask & (r.tags[tag] == want)
        return mask & self.free if free else mask.copy()

    def busy(self, *classes: str, free: bool = True) -> np.ndarray:
        """Mask of the busy rows of ``classes`` (metrics.BUSY_CLASSES), unclaimed ones unless ``free`` is False."""
        mask = self.arrays.is_busy & self.arrays.what_in(classes)
        return mask & self.free if free else mask

    def smallest_rows(self, mask: np.ndarray, need_ns: float) -> np.ndarray:
        """Mask of the rows under ``mask``, smallest first, adding up to at least ``need_ns`` (all of them when they
        do not reach it; none when it is not positive): a claim no larger than a bound needs."""
        out = np.zeros(len(self.arrays), dtype=bool)
        if need_ns <= 0 or not mask.any():
            return out
        ns = self.arrays.ns
        order = np.flatnonzero(mask)[np.argsort(ns[mask], kind="stable")]
        out[order[:int(np.searchsorted(np.cumsum(ns[order]), need_ns) + 1)]] = True
        return out

    def ns(self, mask: np.ndarray) -> float:
        """Sum of the rows' ns under ``mask``."""
        return float(self.arrays.ns[mask].sum()) if mask.size else 0.0

    def causes(self, mask: np.ndarray) -> list[tuple[tuple[str, str], float]]:
        """((what, cause), ns) of the rows under ``mask`` per (what, cause), largest first (ties in their order
        of appearance)."""
        rows = np.flatnonzero(mask)
        what, cause = self.arrays.what_and_cause(rows)
        return largest_first(list(zip(what.tolist(), cause.tolist())), self.arrays.ns[rows])

    def names(self, mask: np.ndarray) -> list[tuple[str, float]]:
        """(name, ns) of the rows under ``mask`` per name — an idle row's cause, a busy row's class — largest
        first (ties in their order of appearance)."""
        rows = np.flatnonzero(mask)
        what, cause = self.arrays.what_and_cause(rows)
        return largest_first(np.where(self.arrays.is_idle[rows], cause, what).tolist(), self.arrays.ns[rows])

    def busy_ns_of(self, *classes: str) -> float:
        """GPU time of ``classes`` in the scope, claimed or not."""
        return self.ns(self.busy(*classes, free=False))

    def what_if(self, removable_ns: float, busy_removed_ns: float = 0.0, host_removed_ns: float = 0.0,
                caps: dict[str, float] | None = None) -> WhatIf:
        """The bound of a fix that removes ``removable_ns`` of the window, ``busy_removed_ns`` of it from
        the GPU's work and ``host_removed_ns`` from the host's."""
        return WhatIf(window_ns=self.window_ns, removable_ns=removable_ns, busy_ns=self.busy_ns,
                      host_work_ns=self.host_work_ns, busy_removed_ns=busy_removed_ns,
                      host_removed_ns=host_removed_ns, caps=dict(caps or {}))

    def claim(self, rule: str, mask: np.ndarray) -> "Ledger":
        """This ledger with the unclaimed rows under ``mask`` claimed by ``rule``."""
        mask = mask & self.free
        claimed = tuple(rule if m else c for c, m in zip(self.claimed, mask))
        return Ledger(self.arrays, self.window_ns, self.busy_ns, self.host_work_ns, claimed)


EMPTY_ROWS = pd.DataFrame({c: pd.Series(dtype=object if c in ("kind", "what", "cause") else bool) for c in ROW_KEYS}
                          ).assign(ns=pd.Series(dtype=np.float64))
EMPTY_LEDGER_ROWS = RowArrays.of(EMPTY_ROWS)


def combined(ledger: Ledger, fixes: list[WhatIf]) -> dict[str, float]:
    """The window after every proposed fix together: the window less their gains, but never below the GPU
    work or the host work that all of them together leave, never above the window (ns)."""
    gpu_left = max(0.0, ledger.busy_ns - sum(w.busy_removed_ns for w in fixes))
    host_left = max(0.0, ledger.host_work_ns - sum(w.host_removed_ns for w in fixes))
    after = min(ledger.window_ns, max(ledger.window_ns - sum(w.gain_ns for w in fixes), gpu_left, host_left))
    return {"window_ns": ledger.window_ns, "after_fixes_ns": after, "gain_ns": ledger.window_ns - after,
            "gpu_left_ns": gpu_left, "host_left_ns": host_left}
