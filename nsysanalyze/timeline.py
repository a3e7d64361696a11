"""One steady step as lanes for the HTML report's timeline: a CPU lane (the step's NVTX sub-ranges, nested
by depth, and its blocking CUDA calls), lanes of the OS calls the verdicts are about (munmap, file I/O,
waits; when OS runtime tracing was captured), one lane per CUDA stream (kernels, NCCL kernels, copies by
kind, memsets) and a lane of the GPU's idle gaps, each gap tagged with the cause kind that holds most of
it (``attribution.interval_causes``). Times are ns on the export's clock.

``lanes`` is pure (frames in, plain data out); ``step_timeline`` reads the step's rows from a trace.
"""
from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pandas as pd

from . import attribution as A
from .metrics import api_categories, classify_runtime, steady_steps
from .trace.schema import COPY_DTOD, COPY_DTOH, COPY_HTOD, COPY_PTOP
from .trace.tables import pid_of

COPY_KIND = {COPY_HTOD: "memcpy-htod", COPY_DTOH: "memcpy-dtoh", COPY_DTOD: "memcpy-dtod", COPY_PTOP: "memcpy-ptop"}
KIND_LABEL = {"memcpy-htod": "memcpy HtoD", "memcpy-dtoh": "memcpy DtoH", "memcpy-dtod": "memcpy DtoD",
              "memcpy-ptop": "memcpy PtoP", "memcpy-other": "memcpy", "memset": "memset"}
BLOCKING = ("sync_copy", "sync_wait")
FILE_IO = re.compile(r"^(p?read(v|64)?|p?write(v|64)?|preadv2|pwritev2|open(at)?(64)?|close|f?sync|fdatasync|"
                     r"sync_file_range|fread|fwrite|fopen(64)?|fclose|fflush|lseek(64)?|sendfile(64)?|copy_file_range)$")
OS_LANES = [("munmap", "OS: munmap"), ("file-io", "OS: file I/O"), ("wait", "OS: waits")]


def pick_step(report: dict) -> dict | None:
    """The steady step of the report's first (process, GPU) whose GPU window is closest to their median."""
    steps = pd.DataFrame(report.get("steps") or [])
    if steps.empty:
        return None
    first = steps.iloc[0]
    mine = steady_steps(steps[(steps["globalPid"] == first["globalPid"]) & (steps["deviceId"] == first["deviceId"])])
    at = (mine["window_ns"] - mine["window_ns"].median()).abs().idxmin()
    return mine.loc[at].to_dict()


def idle_gaps(starts: np.ndarray, ends: np.ndarray, t0: int, t1: int) -> tuple[np.ndarray, np.ndarray]:
    """Intervals of [t0, t1) covered by no activity (starts sorted)."""
    if len(starts) == 0:
        return np.array([t0]), np.array([t1])
    covered_to = np.maximum.accumulate(np.minimum(ends, t1))
    gap_starts = np.r_[t0, covered_to]
    gap_ends = np.r_[starts, t1]
    keep = gap_ends > gap_starts
    return gap_starts[keep], gap_ends[keep]


def nesting_depth(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For each range, how many other ranges enclose it, as a stack sweep in O(R log R) time and O(R) memory
    (a step may hold 60k ranges). In start order (the longer first on a tie) every earlier range is either
    still open at this one's start (on the stack: it encloses this one when ranges nest) or has ended by then
    (popped): depth = earlier ranges - ended ones. Exact for nested ranges (NVTX push/pop); for ranges that
    only overlap it is the number still open."""
    starts, ends = np.asarray(starts), np.asarray(ends)
    position = np.empty(len(starts), dtype=np.int64)
    position[np.lexsort((-ends, starts))] = np.arange(len(starts))
    ended = np.searchsorted(np.sort(ends), starts, side="right") - (ends <= starts)  # not counting itself
    return np.maximum(position - ended, 0)


def os_lane(names: pd.Series) -> np.ndarray:
    """Per OS runtime call name: its lane key ('munmap', 'file-io', 'wait') or '' (not drawn)."""
    kind = pd.Series("", index=names.index, dtype=object)
    kind[names.str.fullmatch(FILE_IO)] = "file-io"
    kind[names.str.fullmatch(A.OS_WAIT)] = "wait"
    kind[names == "munmap"] = "munmap"
    return kind.to_numpy()


def lanes(step: dict, activities: pd.DataFrame, names: dict[int, str], ranges: pd.DataFrame,
          calls: pd.DataFrame, os_calls: pd.DataFrame | None = None,
          gap_cause: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None) -> dict:
    """The drawing of ``step``: ``t0``/``t1`` (span drawn: CPU range and GPU window), ``lanes`` (label,
    rows, items: start, end, kind, name, row; an idle gap's ``cause`` too). ``activities``: kind, start, end,
    streamId, copyKind, nameId; ``ranges``: NVTX start, end, name; ``calls``: blocking API start, end, name;
    ``os_calls``: OS runtime start, end, name, lane (:func:`os_lane`); ``gap_cause``: idle starts, ends →
    the cause kind of each gap (default: untraced)."""
    ws, we = int(step["window_start"]), int(step["window_end"])
    t0, t1 = min(int(step["cpu_start"]), ws), max(int(step["cpu_end"]), we)
    a = activities.sort_values("start", kind="stable")
    name = a["nameId"].map(names).fillna("")
    kind = np.where(a["kind"] == "kernel", np.where(name.str.lower().str.startswith("nccl"), "nccl", "kernel"),
                    np.where(a["kind"] == "memcpy", a["copyKind"].map(COPY_KIND).fillna("memcpy-other"), a["kind"]))
    label = np.where(a["kind"] == "kernel", name, pd.Series(kind, index=a.index).map(KIND_LABEL))
    gpu = pd.DataFrame({"start": a["start"], "end": a["end"], "kind": kind, "name": label, "row": 0,
                        "stream": a["streamId"]})
    out = []
    if len(ranges):
        depth = nesting_depth(ranges["start"].to_numpy(), ranges["end"].to_numpy())
        items = pd.DataFrame({"start": ranges["start"], "end": ranges["end"], "kind": "nvtx", "name": ranges["name"],
                              "row": depth})
        out.append({"label": "CPU: NVTX ranges", "rows": int(depth.max()) + 1, "items": items.to_dict("records")})
    if len(calls):
        items = pd.DataFrame({"start": calls["start"], "end": calls["end"], "kind": "blocking", "name": calls["name"],
                              "row": 0})
        out.append({"label": "CPU: blocking calls", "rows": 1, "items": items.to_dict("records")})
    for key, label in OS_LANES if os_calls is not None else []:
        mine = os_calls[os_calls["lane"] == key]
        if len(mine):
            items = pd.DataFrame({"start": mine["start"], "end": mine["end"], "kind": "os-" + key,
                                  "name": mine["name"].astype(str), "row": 0})
            out.append({"label": label, "rows": 1, "items": items.to_dict("records")})
    for stream, g in gpu.groupby("stream", sort=True):
        out.append({"label": f"stream {stream}", "rows": 1, "items": g.drop(columns="stream").to_dict("records")})
    gs, ge = idle_gaps(a["start"].to_numpy(), a["end"].to_numpy(), ws, we)
    cause = gap_cause(gs, ge) if gap_cause is not None else np.full(gs.size, A.LEVELS[-1], dtype=object)
    out.append({"label": "GPU idle (by cause)", "rows": 1, "items": pd.DataFrame(
        {"start": gs, "end": ge, "kind": "idle", "name": "GPU idle: " + pd.Series(cause, dtype=object), "row": 0,
         "cause": cause}).to_dict("records")})
    return {"step": str(step.get("name", "")), "globalPid": int(step["globalPid"]), "deviceId": int(step["deviceId"]),
            "t0": t0, "t1": t1, "window_start": ws, "window_end": we, "activities": int(len(a)), "lanes": out}


def step_timeline(trace, report: dict) -> dict | None:
    """The lanes of the report's median steady step, read from ``trace`` (None without steps)."""
    step = pick_step(report)
    if step is None:
        return None
    pid, dev, tid = int(step["globalPid"]), int(step["deviceId"]), int(step["globalTid"])
    acts = trace.gpu_activities_between(pid, dev, int(step["window_start"]), int(step["window_end"]))
    names = trace.strings(acts.loc[acts["nameId"] >= 0, "nameId"].unique())
    c0, c1 = int(step["cpu_start"]), int(step["cpu_end"])
    nvtx = trace.nvtx
    inside = ((nvtx["globalTid"] == tid) & (nvtx["start"] >= c0) & (nvtx["end"] <= c1)
              & ~((nvtx["start"] == c0) & (nvtx["end"] == c1)))  # the step's own range is the lane itself
    api = {i: n for i, n in trace.api_names().items() if api_categories({i: n}).get(i) in BLOCKING}
    calls = trace.runtime_named(list(api)) if api else pd.DataFrame(columns=["start", "end", "globalTid", "nameId"])
    calls = calls[(pid_of(calls["globalTid"]) == pid) & (calls["start"] >= c0) & (calls["start"] < c1)]
    calls = calls.assign(name=calls["nameId"].map(api))
    every_os = trace.osrt(None, keep=lambda chunk: (chunk["start"] < c1) & (chunk["end"] > c0))  # the step's
    every_os = every_os[pid_of(every_os["globalTid"].to_numpy()) == pid]
    osrt = every_os.assign(lane=os_lane(every_os["name"].astype(str)))
    waits_elsewhere = (osrt["lane"] == "wait") & (osrt["globalTid"] != tid) if tid >= 0 else osrt["lane"] == "wait"
    osrt = osrt[(osrt["lane"] != "") & ~waits_elsewhere]  # helper threads wait whole steps: not drawn

    def gap_cause(gs: np.ndarray, ge: np.ndarray) -> np.ndarray:
        """The attribution's cause kind per idle gap, from the step's own host calls."""
        runtime = trace.runtime
        runtime = runtime[(pid_of(runtime["globalTid"]) == pid) & (runtime["start"] < c1) & (runtime["end"] > c0)]
        runtime = classify_runtime(runtime, trace.api_names())
        ranges = pd.DataFrame({"globalPid": [pid] * (tid >= 0), "globalTid": [tid] * (tid >= 0),
                               "cpu_start": [c0] * (tid >= 0), "cpu_end": [c1] * (tid >= 0)})
        step_nvtx = nvtx[(pid_of(nvtx["globalTid"]) == pid) & (nvtx["start"] < c1) & (nvtx["end"] > c0)]
        def os_calls(threads, keep, keep_time):  # the step's OS calls, as the analysis reads them (host_intervals)
            mine = every_os[np.isin(every_os["globalTid"].to_numpy(), threads)]
            mine = mine[keep_time(mine["start"].to_numpy(), mine["end"].to_numpy())]
            return mine if keep is None else mine[keep(mine)]
        host = A.host_intervals(runtime, trace.api_names(), os_calls, step_nvtx, ranges, {pid: [(gs, ge)]})
        return A.interval_causes((pid, dev), gs, ge, host, A.sync_ends(runtime))

    return lanes(step, acts, names, nvtx.loc[inside, ["start", "end", "name"]], calls[["start", "end", "name"]],
                 osrt, gap_cause)
