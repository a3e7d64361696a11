"""The timeline export's data (``nsysanalyze timeline``, written by :mod:`nsysanalyze.render.perfetto`): the
events of a time window of each file of a job, as one frame per track, on one time axis.

Tracks, per (file, process): per GPU a ``steps`` track (the step windows, the median step marked), a
``findings`` track (one instant per finding), a ``GPU idle`` track (the attribution's idle segments named
by cause: ``attribution.idle_segments``, adjacent segments of one cause and step merged) and one track per
CUDA stream (kernels, NCCL kernels by collective kind, copies by kind and host memory, memsets); per CPU
thread an NVTX track (nested ranges), a CUDA track (the calls the attribution ranks as blocking:
synchronous copies, synchronizations, allocations, async copies) and an OS track (the OS runtime calls the
attribution weighed: those overlapping GPU idle on the threads it reads). Events that do not nest properly
on a track (crossing start/end NVTX ranges, overlapping kernels) go to extra lanes of it (``(lane 2)``), so
every track nests properly.

Window: the ``steps`` steady steps around the median step of the first rank (the steady step whose GPU
window is closest to the median), from the earliest CPU start to the latest GPU end of those steps on
every device; the same step numbers on the other ranks of the job; the whole capture with ``steps=None``
or without steps. An event belongs to the window when it overlaps it (start < t1 and end > t0).
Times are ns; files are placed by their session start on the UTC clock, the earliest event at 0.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from . import attribution as A
from .metrics import api_categories, nccl_kind, steady_steps
from .timeline import COPY_KIND, KIND_LABEL, pick_step
from .trace.schema import MEM_DEVICE, MEM_MANAGED, MEM_PAGEABLE, MEM_PINNED
from .trace.tables import pid_of

DEFAULT_STEPS = 5
LARGE_EVENTS = 1_000_000  # a warning from this many events: ui.perfetto.dev loads them slowly
EVERYTHING = (-(1 << 62), 1 << 62)
MEMORY = {MEM_PAGEABLE: "pageable", MEM_PINNED: "pinned", MEM_DEVICE: "device", MEM_MANAGED: "managed"}
HOST_MEMORY = ["pageable", "pinned", "managed"]
BLOCKING_APIS = ("sync_copy", "sync_wait", "alloc", "async_copy")  # attribution's cuda_blocking candidates
OS_LEVELS = (A.OS_ACTIVE, A.WAIT)  # attribution.LEVELS os_runtime and os_wait
MAX_LANES = 64


@dataclass
class Track:
    """One track of one process: ``events`` has start (ns), dur (ns; -1: an instant), name, cat, and the
    ``args`` columns (None/NaN: left out for that event)."""

    process: tuple[int, int]  # (file index, globalPid)
    name: str
    events: pd.DataFrame
    args: list[str] = field(default_factory=list)


@dataclass
class FileEvents:
    """The tracks of one file's window (times on the file's clock until :func:`align`)."""

    path: str
    session_start_utc_ns: int | None
    window: tuple[int, int] | None  # None: the whole capture
    steps: list[int]                # the step numbers of the window
    median_step: int | None
    processes: dict[int, str]       # globalPid -> label
    tracks: list[Track]


def window_steps(steps: pd.DataFrame, report: dict, count: int | None, numbers: list[int] | None) -> tuple[list[int], int | None]:
    """The step numbers of the window (``numbers``: those of the first rank, when they exist here; none with
    ``count`` None: the whole capture) and the median step (None without steps; ``steps``: Analysis.steps())."""
    if steps.empty:
        return [], None
    median = pick_step(report)
    if count is None:
        return [], int(median["step"])
    if numbers and steps["step"].isin(numbers).any():
        middle = numbers[(len(numbers) - 1) // 2]
        return list(numbers), int(median["step"]) if int(median["step"]) in numbers else middle
    first = steps[(steps["globalPid"] == median["globalPid"]) & (steps["deviceId"] == median["deviceId"])]
    steady = np.sort(steady_steps(first)["step"].to_numpy(np.int64))
    at = int(np.searchsorted(steady, int(median["step"])))
    lo = max(0, min(at - (count - 1) // 2, steady.size - count))
    return steady[lo:lo + count].tolist(), int(median["step"])


def step_span(steps: pd.DataFrame, numbers: list[int]) -> tuple[int, int]:
    """[earliest CPU start or GPU window start, latest end) of the steps ``numbers`` on every device (ns)."""
    mine = steps[steps["step"].isin(numbers)]
    return (int(min(mine["cpu_start"].min(), mine["window_start"].min())),
            int(max(mine["cpu_end"].max(), mine["window_end"].max())))


def in_window(frame: pd.DataFrame, window: tuple[int, int], start: str = "start", end: str = "end") -> pd.DataFrame:
    """Rows of ``frame`` (``start``, ``end`` columns, ns) overlapping [t0, t1)."""
    start, end = frame[start].to_numpy(), frame[end].to_numpy()
    return frame[(start < window[1]) & (end > window[0])]


def proper_lanes(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """A lane (0, 1, ...) per interval such that the intervals of each lane nest properly (any two are
    disjoint or one holds the other): a lane keeps its intervals that nest in the ones before them, those
    that cross one move on to the next lane (the last of MAX_LANES takes what remains)."""
    lane = np.zeros(start.size, np.int64)
    order = np.lexsort((-end, start))
    left = order
    for k in range(MAX_LANES - 1):
        keep = left
        while True:
            crossing, unsure = _nesting_faults(start[keep], end[keep])
            if crossing.any():
                keep = keep[~crossing]
            elif unsure.any():
                keep = keep[~unsure]
            else:
                break
        moved = np.setdiff1d(left, keep, assume_unique=True)
        if moved.size == 0:
            break
        lane[moved] = k + 1
        left = order[np.isin(order, moved)]
    return lane


def _nesting_faults(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For intervals sorted by (start, -end), each one's parent is the last interval before it one level up
    (levels counted as if they nested): those that cross their parent (start inside it, end beyond it),
    and those whose parent does not hold their start (the count is off: an earlier interval crosses). None
    of either: the intervals nest properly."""
    crossing, unsure = np.zeros(start.size, bool), np.zeros(start.size, bool)
    points = end == start  # empty intervals hold nothing and cross nothing
    if points.any():
        crossing[~points], unsure[~points] = _nesting_faults(start[~points], end[~points])
        return crossing, unsure
    n = start.size
    if n < 2:
        return crossing, unsure
    closed = np.searchsorted(np.sort(end), start, side="right")  # intervals closed by each start
    depth = np.arange(n) - closed  # intervals open at each start: the level, when they nest
    for d in range(1, int(depth.max()) + 1):
        parents, mine = np.flatnonzero(depth == d - 1), np.flatnonzero(depth == d)
        k = np.searchsorted(parents, mine) - 1
        p = parents[np.maximum(k, 0)] if parents.size else np.zeros(mine.size, np.int64)
        found = (k >= 0) & (parents.size > 0)
        crossing[mine] = found & (end[p] > start[mine]) & (end[p] < end[mine])
        unsure[mine] = ~found | (end[p] <= start[mine])
    return crossing, unsure


def laned(process: tuple[int, int], name: str, events: pd.DataFrame, args: list[str]) -> list[Track]:
    """``events`` as one track, or as lanes of it when they do not nest properly (see :func:`proper_lanes`)."""
    if events.empty:
        return []
    dur = events["dur"].to_numpy()
    lane = proper_lanes(events["start"].to_numpy(), events["start"].to_numpy() + np.maximum(dur, 0))
    if not lane.any():
        return [Track(process, name, events.reset_index(drop=True), args)]
    return [Track(process, name if k == 0 else f"{name} (lane {k + 1})", events[lane == k].reset_index(drop=True), args)
            for k in range(int(lane.max()) + 1)]


def slices(start, end, name, cat, **args) -> pd.DataFrame:
    """An events frame of complete slices (start, dur = end - start, at least 0)."""
    start = np.asarray(start, np.int64)
    return pd.DataFrame({"start": start, "dur": np.maximum(np.asarray(end, np.int64) - start, 0), "name": name,
                         "cat": cat, **args})


def gpu_tracks(a, window: tuple[int, int]) -> list[tuple[int, str, pd.DataFrame]]:
    """(globalPid, track name, events) per (device, stream) of the GPU activities in the window."""
    t = a.trace
    kernels = in_window(t.gpu_table("kernels", ["start", "end", "globalPid", "deviceId", "streamId", "nameId",
                                                "demangledId"]), window)
    copies = in_window(t.gpu_table("memcpys", ["start", "end", "globalPid", "deviceId", "streamId", "bytes", "copyKind",
                                               "srcKind", "dstKind"]), window)
    memsets = in_window(t.gpu_table("memsets", ["start", "end", "globalPid", "deviceId", "streamId", "bytes"]), window)
    names = t.strings(np.unique(np.r_[kernels["nameId"].to_numpy(), kernels["demangledId"].to_numpy()]))
    short = kernels["nameId"].map(names).fillna("kernel").to_numpy(object)
    full = kernels["demangledId"].map(names).fillna("").to_numpy(object)
    nccl = np.isin(kernels["nameId"].to_numpy(), t.nccl_kernel_name_ids) | np.isin(kernels["demangledId"].to_numpy(),
                                                                                   t.nccl_kernel_name_ids)
    kinds = {n: nccl_kind(n) for n in set(full[nccl].tolist())}
    kind = pd.Series(full[nccl]).map(kinds).to_numpy(object)
    short[nccl] = np.where(kind == "", "nccl", "nccl " + kind.astype(str))
    parts = [slices(kernels["start"], kernels["end"], short, np.where(nccl, "nccl", "kernel"), kernel=full)
             .assign(globalPid=kernels["globalPid"].to_numpy(), deviceId=kernels["deviceId"].to_numpy(),
                     stream=kernels["streamId"].to_numpy())]
    copy_kind = copies["copyKind"].map(COPY_KIND).fillna("memcpy-other").map(KIND_LABEL).to_numpy(object)
    src = copies["srcKind"].map(MEMORY).fillna("").to_numpy(object)
    dst = copies["dstKind"].map(MEMORY).fillna("").to_numpy(object)
    host = np.where(np.isin(src, HOST_MEMORY), src, np.where(np.isin(dst, HOST_MEMORY), dst, ""))  # names the copy
    parts.append(slices(copies["start"], copies["end"], np.where(host == "", copy_kind, copy_kind + " " + host),
                        "memcpy", bytes=pd.array(copies["bytes"].to_numpy(np.int64), dtype="Int64"), src=src, dst=dst)
                 .assign(globalPid=copies["globalPid"].to_numpy(), deviceId=copies["deviceId"].to_numpy(),
                         stream=copies["streamId"].to_numpy()))
    parts.append(slices(memsets["start"], memsets["end"], "memset", "memset",
                        bytes=pd.array(memsets["bytes"].to_numpy(np.int64), dtype="Int64"))
                 .assign(globalPid=memsets["globalPid"].to_numpy(), deviceId=memsets["deviceId"].to_numpy(),
                         stream=memsets["streamId"].to_numpy()))
    events = pd.concat([p for p in parts if len(p)] or parts[:1], ignore_index=True)
    events = events.sort_values(["globalPid", "deviceId", "stream", "start"], kind="stable")
    return [(int(p), f"GPU {d} stream {s}", g.drop(columns=["globalPid", "deviceId", "stream"]))
            for (p, d, s), g in events.groupby(["globalPid", "deviceId", "stream"], sort=True)]


def idle_track_events(segments: pd.DataFrame) -> pd.DataFrame:
    """Idle segments of one device (start, end, cause_kind, cause, step; by start) as slices, adjacent segments
    with the same cause and step merged; args ns, cause_kind, step."""
    s, e = segments["start"].to_numpy(), segments["end"].to_numpy()
    key = pd.MultiIndex.from_frame(segments[["cause_kind", "cause", "step"]]).codes
    same = np.ones(s.size, bool)
    same[0] = False
    same[1:] = s[1:] == e[:-1]
    for codes in key:
        same[1:] &= codes[1:] == codes[:-1]
    first = np.flatnonzero(~same)
    end = np.maximum.reduceat(e, first) if first.size else e
    rows = segments.iloc[first]
    return slices(rows["start"], end, rows["cause"].to_numpy(object), "idle", ns=end - rows["start"].to_numpy(),
                  cause_kind=rows["cause_kind"].to_numpy(object), step=rows["step"].to_numpy())


def step_track_events(mine: pd.DataFrame, median: int | None) -> pd.DataFrame:
    """One device's steps (rows of Analysis.steps()) as slices of their GPU windows, named as in the tables
    ('step N' for unnamed inferred steps), the median step's also as an instant 'median step'."""
    named = mine["name"].astype(str).to_numpy(object)
    name = np.where(named == "", "step " + mine["step"].astype(str).to_numpy(object), named)
    name = name + np.where(mine["closed"].astype(bool), "", "*")  # the open first step, starred as in the tables
    events = slices(mine["window_start"], mine["window_end"], name, "step", step=mine["step"].to_numpy(),
                    window_ns=mine["window_ns"].to_numpy(np.int64), cpu_ns=mine["cpu_ns"].to_numpy(np.int64),
                    idle_ns=mine["idle_ns"].to_numpy(np.int64), median=mine["step"].to_numpy() == median)
    at = mine["step"].to_numpy() == median
    if at.any():
        events = pd.concat([events, events[at].assign(dur=-1, name="median step", cat="median")], ignore_index=True)
    return events


def finding_events(findings: list[dict], steps: pd.DataFrame, median: int | None, t0: int) -> pd.DataFrame:
    """One device's findings (report dicts) as instants at the start of its median step's GPU window (else
    ``t0``); args title, gain_ns, gain_pct, confidence, severity, fix, rule, scope."""
    at = steps.loc[steps["step"] == median, "window_start"]
    ts = int(at.iloc[0]) if len(at) else t0
    cols = ["title", "gain_ns", "gain_pct", "confidence", "severity", "fix", "rule", "scope"]
    frame = pd.DataFrame([{c: f[c] for c in cols} for f in findings], columns=cols)
    return pd.DataFrame({"start": np.full(len(frame), ts, np.int64), "dur": -1, "name": frame["title"],
                         "cat": "finding", **{c: frame[c] for c in cols}})


def thread_tracks(a, window: tuple[int, int], pids: set[int]) -> list[tuple[int, str, pd.DataFrame, list[str]]]:
    """(globalPid, track name, events, args) per CPU thread of ``pids``: NVTX ranges, blocking CUDA calls,
    and the OS calls the attribution weighed."""
    t = a.trace
    out = []
    nvtx = t.nvtx
    if len(nvtx):
        nvtx = in_window(nvtx[np.isin(pid_of(nvtx["globalTid"].to_numpy()), list(pids))], window)
        out.append(("NVTX", slices(nvtx["start"], nvtx["end"], nvtx["name"].to_numpy(object), "nvtx",
                                   domain=nvtx["domain"].to_numpy(object)).assign(tid=nvtx["globalTid"].to_numpy()),
                    ["domain"]))
    names = t.api_names()
    blocking = {i: names[i] for i, category in api_categories(names).items() if category in BLOCKING_APIS}
    if blocking:
        calls = in_window(t.runtime_named(list(blocking)), window)
        calls = calls[np.isin(pid_of(calls["globalTid"].to_numpy()), list(pids))]
        out.append(("CUDA", slices(calls["start"], calls["end"], calls["nameId"].map(blocking).to_numpy(object),
                                   "cuda").assign(tid=calls["globalTid"].to_numpy()), []))
    host = a.attribution_host()
    host = in_window(host[np.isin(host["level"].to_numpy(), OS_LEVELS)], window)
    osrt = a.os_calls(window) if len(host) else host
    if len(host) and len(osrt):
        used = pd.MultiIndex.from_arrays([host["start"], host["end"], host["globalPid"], host["cause"].astype(str)])
        key = pd.MultiIndex.from_arrays([osrt["start"], osrt["end"], pid_of(osrt["globalTid"].to_numpy()),
                                         osrt["name"].astype(str)])
        osrt = osrt[key.isin(used)]
        out.append(("OS", slices(osrt["start"], osrt["end"], osrt["name"].astype(str).to_numpy(object), "os")
                    .assign(tid=osrt["globalTid"].to_numpy()), []))
    tracks = []
    for label, events, args in out:
        events = events.sort_values(["tid", "start"], kind="stable")
        for tid, g in events.groupby("tid", sort=True):
            tracks.append((int(pid_of(np.array([tid]))[0]), f"thread {int(tid) & 0xFFFFFF}: {label}",
                           g.drop(columns="tid"), args))
    return tracks


def file_events(index: int, a, report: dict, count: int | None, numbers: list[int] | None) -> FileEvents:
    """The tracks of one file (``a``: an Analysis made with keep_attribution_inputs; ``report``: its
    report dict) in the window of ``count`` steps (None: the whole capture; ``numbers``: the first rank's)."""
    steps = a.steps()
    chosen, median = window_steps(steps, report, count, numbers)
    window = step_span(steps, chosen) if chosen else None
    span = window or EVERYTHING
    pids = {p["globalPid"] for p in report["trace"]["processes"]} | {d["globalPid"] for d in report["summary"]["devices"]}
    label = {p["globalPid"]: f"{Path(report['trace']['path']).name} pid {p['pid']} ({p['name']})"
             for p in report["trace"]["processes"]}
    tracks: list[Track] = []
    segments = a.idle_segments(*span)
    seg_rows = segments.groupby(["globalPid", "deviceId"]).indices if len(segments) else {}
    step_rows = steps.groupby(["globalPid", "deviceId"]).indices if len(steps) else {}
    for d in report["summary"]["devices"]:
        key = (d["globalPid"], d["deviceId"])
        proc, dev = (index, key[0]), key[1]
        mine = steps.iloc[step_rows[key]] if key in step_rows else steps.iloc[:0]
        shown = in_window(mine, span, "window_start", "window_end")
        if len(shown):
            tracks.append(Track(proc, f"GPU {dev} steps", step_track_events(shown, median),
                                ["step", "window_ns", "cpu_ns", "idle_ns", "median"]))
        found = [f for f in report["findings"] if (f["globalPid"], f["deviceId"]) == key]
        if found:
            t0 = span[0] if window else int(d["window_start"])
            tracks.append(Track(proc, f"GPU {dev} findings", finding_events(found, mine, median, t0),
                                ["title", "gain_ns", "gain_pct", "confidence", "severity", "fix", "rule", "scope"]))
        if key in seg_rows:
            tracks.append(Track(proc, f"GPU {dev} idle", idle_track_events(segments.iloc[seg_rows[key]]),
                                ["ns", "cause_kind", "step"]))
    for pid, name, events in gpu_tracks(a, span):
        tracks += laned((index, pid), name, events, ["kernel", "bytes", "src", "dst"])
    for pid, name, events, args in thread_tracks(a, span, pids):
        tracks += laned((index, pid), name, events, args)
    used = {t.process[1] for t in tracks}
    processes = {p: label.get(p, f"{Path(report['trace']['path']).name} process {(p >> 24) & 0xFFFFFF}") for p in sorted(used)}
    return FileEvents(str(report["trace"]["path"]), report["trace"].get("session_start_utc_ns"), window, chosen,
                      median, processes, tracks)


def align(files: list[FileEvents]) -> tuple[list[int], bool]:
    """Shift every file's events onto one axis in place: by session start on the UTC clock when every file
    has one (else each on its own clock), the earliest event at 0. Returns each file's shift (ns added to
    its clock) and whether the files were aligned on the UTC clock."""
    starts = [f.session_start_utc_ns for f in files]
    aligned = all(s is not None for s in starts)
    base = [s - min(starts) for s in starts] if aligned else [0] * len(files)
    firsts = [int(t.events["start"].min()) + b for f, b in zip(files, base) for t in f.tracks if len(t.events)]
    origin = min(firsts) if firsts else 0
    for f, b in zip(files, base):
        for t in f.tracks:
            t.events["start"] = t.events["start"].to_numpy(np.int64) + (b - origin)
    return [b - origin for b in base], aligned


def event_count(files: list[FileEvents]) -> int:
    return sum(len(t.events) for f in files for t in f.tracks)
