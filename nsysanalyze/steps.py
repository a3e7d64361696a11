"""Training steps: detect the repeating NVTX step range and project each step onto the GPU.

A step is an NVTX range that repeats with a counter (``Batch 12``, ``ProfilerStep#3``,
``step 5``, ``iteration 7``, ``Step 10 to 20``) or a repeated ``train_step``-like name.
The outermost such family is chosen automatically (see ``detect_step_family``);
``pattern`` (a regex) overrides.

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

import re

import numpy as np
import pandas as pd

from .intervals import BLOCK, group_indices, lanes_per_batch
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
        sel = np.flatnonzero((r_lane >= first) & (r_lane < first + per_batch))
        shift = (r_lane[sel] - first) * stride - lo
        order = np.argsort(r_start[sel] + shift, kind="stable")
        sel, shift = sel[order], shift[order]
        starts, ends, labels = r_start[sel] + shift, r_end[sel] + shift, ranges.index.to_numpy()[sel]
        batch = lanes[first:first + per_batch]
        for lo_t in range(0, times.size, BLOCK):
            key_t = tids[lo_t:lo_t + BLOCK]
            lane = np.minimum(np.searchsorted(batch, key_t), batch.size - 1)
            on = np.flatnonzero(batch[lane] == key_t)
            t = times[lo_t:lo_t + BLOCK][on] + (lane[on] * stride - lo)
            k = np.searchsorted(starts, t, side="right") - 1
            inside = (k >= 0) & (t <= ends[np.maximum(k, 0)])
            out[lo_t + on[inside]] = labels[k[inside]]
    return out


Frames = "pd.DataFrame | Sequence[pd.DataFrame]"
# Runtime/driver APIs that can put work on a GPU (kernels, copies, memsets): the calls step projection needs.
LAUNCHES_GPU_WORK = re.compile(r"^cu(da)?(Launch|Graph\w*Launch|Memcpy|Memset|MemPrefetch)")


def _parts(frames) -> list[pd.DataFrame]:
    """One frame, or several with the same columns (e.g. kernels, memcpys, memsets: never concatenated)."""
    return [frames] if isinstance(frames, pd.DataFrame) else [f for f in frames if len(f)]


def _first_call_steps(corr: np.ndarray, step: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique correlationIds of one process's calls (given in call order) with a step for each:
    that of its first call inside a step (step >= 0), else -1."""
    if corr.size < 2 or bool(np.all(corr[1:] > corr[:-1])):  # the usual order: already unique and sorted
        return corr, step
    order = np.lexsort((step < 0, corr))  # by correlationId, calls inside steps first, then call order
    corr, step = corr[order], step[order]
    first = np.concatenate(([True], corr[1:] != corr[:-1]))
    return corr[first], step[first]


def _by_process(global_ids: np.ndarray, of_tid: bool) -> list[tuple[int, np.ndarray | None]]:
    """Rows per process of globalTids (``of_tid``) or globalPids: (globalPid, indices or None for all rows)."""
    if global_ids.size == 0:
        return []
    first = int(pid_of(global_ids[:1])[0]) if of_tid else int(global_ids[0])
    one = all(bool(((pid_of(b) if of_tid else b) == first).all())
              for b in (global_ids[lo:lo + BLOCK] for lo in range(0, global_ids.size, BLOCK)))
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
            for lo in range(0, tid.size, BLOCK):
                step[lo:lo + BLOCK] = _assign_to_ranges(pid_of(tid[lo:lo + BLOCK]), start[lo:lo + BLOCK], steps,
                                                        key="globalPid")
        for pid, idx in _by_process(tid, of_tid=True):
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


def _activity_blocks(parts: list[pd.DataFrame], calls: dict[int, list]):
    """(part, row slice, row indices in the slice or None for all, launching step per row) for the
    activities, block by block and process by process."""
    for part in parts:
        gpid, corr = part["globalPid"].to_numpy(), part["correlationId"].to_numpy()
        for lo in range(0, gpid.size, BLOCK):
            block = slice(lo, lo + BLOCK)
            for pid, idx in _by_process(gpid[block], of_tid=False):
                act_corr = corr[block] if idx is None else corr[block][idx]
                yield part, block, idx, _launching_step(calls.get(pid, []), act_corr)


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
    lo = np.full(cells, np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.full(cells, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(lo, key, start)
    np.maximum.at(hi, key, end)
    used = np.flatnonzero(np.bincount(key, minlength=cells))
    return pd.DataFrame({"step_row": used // span + s0, "deviceId": used % span + d0,
                         "gpu_start": lo[used], "gpu_end": hi[used]})


def _project(steps: pd.DataFrame | None, runtime: Frames, activities: Frames) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Both answers of one join of activities to their launching calls: per (step row, device) the
    extent of the work steps launched (step_row, deviceId, gpu_start, gpu_end), and the unique
    (globalPid, correlationId) of activities no call launched."""
    parts = _parts(activities)
    calls = _calls_by_process(runtime, steps)
    extents, missing = [], []
    for part, block, idx, step in _activity_blocks(parts, calls):
        rows = np.arange(block.start, min(block.stop, len(part))) if idx is None else block.start + idx

        def pick(c: str, which: np.ndarray) -> np.ndarray:
            return part[c].to_numpy()[rows[which]]
        hit = np.flatnonzero(step >= 0)
        if hit.size:
            extents.append(_step_device_extent(step[hit], pick("deviceId", hit), pick("start", hit), pick("end", hit)))
        none = np.flatnonzero(step == -2)
        if none.size:
            missing.append(pd.DataFrame({"globalPid": pick("globalPid", none), "correlationId": pick("correlationId", none)}))
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
    if steps.empty or not _parts(runtime) or not _parts(activities):
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

    One row per (globalPid, step, name): ns (summed durations), count, share (of the step's CPU time).
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
    name_code, names = pd.factorize(nvtx["name"].to_numpy()[rows])
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
