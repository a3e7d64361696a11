"""One steady step as lanes for the HTML report's timeline: a CPU lane (the step's NVTX sub-ranges, nested
by depth, and its blocking CUDA calls), one lane per CUDA stream (kernels, NCCL kernels, copies by kind,
memsets) and a lane of the GPU's idle gaps. Times are ns on the export's clock.

``lanes`` is pure (frames in, plain data out); ``step_timeline`` reads the step's rows from a trace.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .metrics import api_categories, steady_steps
from .trace.schema import COPY_DTOD, COPY_DTOH, COPY_HTOD, COPY_PTOP
from .trace.tables import pid_of

COPY_KIND = {COPY_HTOD: "memcpy-htod", COPY_DTOH: "memcpy-dtoh", COPY_DTOD: "memcpy-dtod", COPY_PTOP: "memcpy-ptop"}
KIND_LABEL = {"memcpy-htod": "memcpy HtoD", "memcpy-dtoh": "memcpy DtoH", "memcpy-dtod": "memcpy DtoD",
              "memcpy-ptop": "memcpy PtoP", "memcpy-other": "memcpy", "memset": "memset"}
BLOCKING = ("sync_copy", "sync_wait")


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


def lanes(step: dict, activities: pd.DataFrame, names: dict[int, str], ranges: pd.DataFrame,
          calls: pd.DataFrame) -> dict:
    """The drawing of ``step``: ``t0``/``t1`` (span drawn: CPU range and GPU window), ``lanes`` (label,
    rows, items: start, end, kind, name, row). ``activities``: kind, start, end, streamId, copyKind,
    nameId; ``ranges``: NVTX start, end, name; ``calls``: blocking API start, end, name."""
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
    for stream, g in gpu.groupby("stream", sort=True):
        out.append({"label": f"stream {stream}", "rows": 1, "items": g.drop(columns="stream").to_dict("records")})
    gs, ge = idle_gaps(a["start"].to_numpy(), a["end"].to_numpy(), ws, we)
    out.append({"label": "GPU idle", "rows": 1, "items": pd.DataFrame(
        {"start": gs, "end": ge, "kind": "idle", "name": "GPU idle", "row": 0}).to_dict("records")})
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
    return lanes(step, acts, names, nvtx.loc[inside, ["start", "end", "name"]], calls[["start", "end", "name"]])
