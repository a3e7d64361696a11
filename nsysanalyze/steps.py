"""Training steps: detect the repeating NVTX step range and project each step onto the GPU.

A step is an NVTX range that repeats with a counter (``Batch 12``, ``ProfilerStep#3``,
``step 5``, ``iteration 7``, ``Step 10 to 20``) or a repeated ``train_step``-like name.
The outermost such family is chosen automatically (see ``detect_step_family``);
``pattern`` (a regex) overrides.

GPU projection (as NVIDIA's ``nvtx_gpu_proj_trace``): runtime calls made on the step's
thread inside its CPU range → GPU work with the same correlationId in the same process →
``gpu_start``/``gpu_end`` per device. A step's GPU *window* runs from its own ``gpu_start``
to the next step's ``gpu_start`` on that device (the last step: to its own ``gpu_end``),
so windows partition the steady state and GPU idle between steps is charged to the step
that waited. The last step's window is ``closed=False``: the idle after it is not in the capture.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .trace.tables import pid_of

DIGITS = re.compile(r"\d+")
COUNTER = "{n}"
UNCOUNTED_STEP_NAME = re.compile(r"^(train(ing)?[ _]?)?(step|iter|iteration)$", re.IGNORECASE)
STEP_WORD = re.compile(r"step|batch|iter|train", re.IGNORECASE)
NOT_A_STEP = re.compile(r"epoch", re.IGNORECASE)
MIN_COVERAGE = 0.5  # a family without a step-like word must cover this share of its time span

STEP_COLUMNS = ["globalPid", "globalTid", "step", "name", "cpu_start", "cpu_end"]


def family_of(names: pd.Series) -> pd.Series:
    """Step-family key per range name: the name with digit runs as '{n}' ('Batch {n}', 'Step {n} to {n}'),
    a repeated step-like name as itself ('train_step'), or '' when the name cannot be a step."""
    stripped = names.str.strip()
    key = stripped.str.replace(DIGITS, COUNTER, regex=True)
    counted = stripped.str.contains(DIGITS) & key.str.replace(COUNTER, "").str.strip().ne("")
    uncounted = stripped.str.fullmatch(UNCOUNTED_STEP_NAME).fillna(False)
    family = pd.Series(np.where(counted | uncounted, key, ""), index=names.index)
    return family.where(~family.str.contains(NOT_A_STEP), "")


def _contained_fraction(inner: pd.DataFrame, outer: pd.DataFrame) -> float:
    """Fraction of ``inner`` ranges lying inside some ``outer`` range on the same thread."""
    if inner.empty or outer.empty:
        return 0.0
    contained = 0
    for tid, rows in inner.groupby("globalTid"):
        o = outer[outer["globalTid"] == tid].sort_values("start")
        if o.empty:
            continue
        max_end = np.maximum.accumulate(o["end"].to_numpy())
        k = np.searchsorted(o["start"].to_numpy(), rows["start"].to_numpy(), side="right") - 1
        ok = k >= 0
        contained += int(np.count_nonzero(max_end[k[ok]] >= rows["end"].to_numpy()[ok]))
    return contained / len(inner)


def _coverage(ranges: pd.DataFrame) -> float:
    """Share of the family's own time span (first start → last end) its ranges cover."""
    span = ranges["end"].max() - ranges["start"].min()
    return float((ranges["end"] - ranges["start"]).sum() / span) if span > 0 else 0.0


def detect_step_family(nvtx: pd.DataFrame) -> str | None:
    """Family key of the outermost repeating step range, or None.

    Candidates are families with at least two ranges; a family mostly (>50%) nested inside
    another candidate is not outermost. An outermost family named like a step (step, batch,
    iter, train) wins, the longest in total first; otherwise one that covers at least half
    of its time span (so sparse per-op ranges such as ``aten::to, op_id = 12`` are not steps).
    """
    if nvtx.empty:
        return None
    fam = family_of(nvtx["name"])
    ranges = nvtx.assign(family=fam)[fam != ""]
    counts = ranges["family"].value_counts()
    candidates = list(counts[counts >= 2].index)
    groups = {f: ranges[ranges["family"] == f] for f in candidates}
    others = ranges[ranges["family"].isin(candidates)]
    outermost = [f for f in candidates if _contained_fraction(groups[f], others[others["family"] != f]) <= 0.5]
    by_total = sorted(outermost, key=lambda f: -int((groups[f]["end"] - groups[f]["start"]).sum()))
    named = [f for f in by_total if STEP_WORD.search(f)]
    dense = [f for f in by_total if _coverage(groups[f]) >= MIN_COVERAGE]
    return (named or dense or [None])[0]


def find_steps(nvtx: pd.DataFrame, pattern: str | None = None) -> tuple[pd.DataFrame, str | None]:
    """Step ranges (one row per step: globalPid, globalTid, step, name, cpu_start, cpu_end) and a label.

    ``pattern`` selects ranges whose name matches the regex (re.search); otherwise the family
    is auto-detected. Steps are numbered 0.. in time order within each process.
    """
    if nvtx.empty:
        return pd.DataFrame(columns=STEP_COLUMNS), None
    if pattern is not None:
        chosen = nvtx[nvtx["name"].str.contains(pattern, regex=True)]
        label = f"/{pattern}/"
    else:
        family = detect_step_family(nvtx)
        if family is None:
            return pd.DataFrame(columns=STEP_COLUMNS), None
        chosen = nvtx[family_of(nvtx["name"]) == family]
        label = family
    steps = chosen.assign(globalPid=pid_of(chosen["globalTid"])).sort_values(["globalPid", "start"])
    steps = steps.rename(columns={"start": "cpu_start", "end": "cpu_end"})
    steps["step"] = steps.groupby("globalPid").cumcount()
    return steps[STEP_COLUMNS].reset_index(drop=True), label


def _assign_to_ranges(tids: np.ndarray, times: np.ndarray, ranges: pd.DataFrame) -> np.ndarray:
    """Index into ``ranges`` (rows with globalTid, cpu_start, cpu_end) of the range on the same
    thread holding each time, or -1. Ranges of one thread must not overlap."""
    out = np.full(times.shape, -1, dtype=np.int64)
    for tid, group in ranges.groupby("globalTid"):
        group = group.sort_values("cpu_start")
        on_thread = np.flatnonzero(tids == tid)
        t = times[on_thread]
        k = np.searchsorted(group["cpu_start"].to_numpy(), t, side="right") - 1
        inside = (k >= 0) & (t <= group["cpu_end"].to_numpy()[np.maximum(k, 0)])
        out[on_thread[inside]] = group.index.to_numpy()[k[inside]]
    return out


def gpu_activities(kernels: pd.DataFrame, memcpys: pd.DataFrame, memsets: pd.DataFrame) -> pd.DataFrame:
    """All GPU work (start, end, deviceId, correlationId, globalPid) of the three activity tables."""
    cols = ["start", "end", "deviceId", "correlationId", "globalPid"]
    return pd.concat([kernels[cols], memcpys[cols], memsets[cols]], ignore_index=True)


def project_steps(steps: pd.DataFrame, runtime: pd.DataFrame, activities: pd.DataFrame) -> pd.DataFrame:
    """Per (step, device): gpu_start/gpu_end of the GPU work the step launched, and its window.

    Returns the step columns plus deviceId, gpu_start, gpu_end, window_start, window_end (ns)
    and closed (a later step on the device ends the window).
    """
    cols = STEP_COLUMNS + ["deviceId", "gpu_start", "gpu_end", "window_start", "window_end", "closed"]
    if steps.empty or runtime.empty or activities.empty:
        return pd.DataFrame(columns=cols)
    call_step = _assign_to_ranges(runtime["globalTid"].to_numpy(), runtime["start"].to_numpy(), steps)
    launched = runtime[call_step >= 0]
    call_step = call_step[call_step >= 0]
    # join activities to their launching call on (process, correlationId)
    rt_key = pd.MultiIndex.from_arrays([pid_of(launched["globalTid"]), launched["correlationId"].to_numpy()])
    step_of_call = pd.Series(call_step, index=rt_key)
    step_of_call = step_of_call[~step_of_call.index.duplicated()]
    act_key = pd.MultiIndex.from_arrays([activities["globalPid"].to_numpy(), activities["correlationId"].to_numpy()])
    step_idx = step_of_call.reindex(act_key).to_numpy()
    mine = ~np.isnan(step_idx)
    work = activities[mine].assign(step_row=step_idx[mine].astype(np.int64))
    per = work.groupby(["step_row", "deviceId"]).agg(gpu_start=("start", "min"), gpu_end=("end", "max")).reset_index()
    out = steps.loc[per["step_row"]].reset_index(drop=True)
    out[["deviceId", "gpu_start", "gpu_end"]] = per[["deviceId", "gpu_start", "gpu_end"]].to_numpy()
    out = out.sort_values(["globalPid", "deviceId", "gpu_start"]).reset_index(drop=True)
    nxt = out.groupby(["globalPid", "deviceId"])["gpu_start"].shift(-1)
    out["window_start"] = out["gpu_start"]
    out["window_end"] = np.maximum(nxt.fillna(out["gpu_end"]).astype(np.int64), out["gpu_start"])
    out["closed"] = nxt.notna().to_numpy()
    return out[cols].sort_values(["globalPid", "step", "deviceId"]).reset_index(drop=True)


def capture_windows(activities: pd.DataFrame) -> pd.DataFrame:
    """One window per (process, device): first GPU activity start to last GPU activity end."""
    per = activities.groupby(["globalPid", "deviceId"]).agg(window_start=("start", "min"), window_end=("end", "max"))
    return per.reset_index()


def subranges(nvtx: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """CPU time of NVTX ranges nested in each step on the step's thread.

    One row per (globalPid, step, name): ns (summed durations), count, share (of the step's CPU time).
    """
    cols = ["globalPid", "step", "name", "ns", "count", "share"]
    if steps.empty or nvtx.empty:
        return pd.DataFrame(columns=cols)
    owner = _assign_to_ranges(nvtx["globalTid"].to_numpy(), nvtx["start"].to_numpy(), steps)
    inside = owner >= 0
    rows = nvtx[inside].assign(owner=owner[inside])
    host = steps.loc[rows["owner"]].reset_index(drop=True)
    rows = rows.reset_index(drop=True)
    nested = (rows["end"].to_numpy() <= host["cpu_end"].to_numpy()) & ~(
        (rows["start"].to_numpy() == host["cpu_start"].to_numpy()) & (rows["end"].to_numpy() == host["cpu_end"].to_numpy())
    )
    rows, host = rows[nested], host[nested]
    rows = rows.assign(globalPid=host["globalPid"].to_numpy(), step=host["step"].to_numpy(),
                       ns=(rows["end"] - rows["start"]).to_numpy(),
                       step_ns=(host["cpu_end"] - host["cpu_start"]).to_numpy())
    out = rows.groupby(["globalPid", "step", "name"], sort=False).agg(
        ns=("ns", "sum"), count=("ns", "size"), step_ns=("step_ns", "first")).reset_index()
    out["share"] = out["ns"] / out["step_ns"].where(out["step_ns"] > 0)
    return out[cols].sort_values(["globalPid", "step", "ns"], ascending=[True, True, False]).reset_index(drop=True)
