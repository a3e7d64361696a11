"""Per-kernel view: per (process, GPU), every kernel name with its launches and time, largest total first.

Names are as ``nsys stats -r cuda_gpu_kern_sum`` shows them: the demangled name (``base``: the short
name). Times are ns of kernel execution (end - start); ``share`` is the kernel's part of the
device's summed kernel time (as the report's ``Time (%)``, per device). With steps, ``per_step_ns``
and ``launches_per_step`` are the kernel's time and launches in the steady steps (see
``metrics.steady_steps``: kernels starting inside a step window) divided by their number; without
steps they are null. ``aggregate`` is pure (arrays in, frame out); ``kernel_table`` ties it to a trace.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .metrics import steady_steps

KERNEL_COLUMNS = ["globalPid", "deviceId", "name", "count", "total_ns", "mean_ns", "median_ns", "min_ns", "max_ns",
                  "share", "steps", "per_step_ns", "launches_per_step"]
UNNAMED = "(unnamed kernel)"


def aggregate(durations: pd.DataFrame, names: dict[int, str], steps: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per (globalPid, deviceId, nameId) of ``durations`` (columns globalPid, deviceId, nameId, start,
    duration_ns), sorted by device then total time (desc); ``steps``: step windows (globalPid, deviceId,
    window_start, window_end) that the per-step columns count in."""
    if durations.empty:
        return pd.DataFrame(columns=KERNEL_COLUMNS)
    keys = ["globalPid", "deviceId", "nameId"]
    d = durations.sort_values(keys + ["duration_ns"], kind="stable", ignore_index=True)
    key_values = d[keys].to_numpy()
    first = np.flatnonzero(np.r_[True, (key_values[1:] != key_values[:-1]).any(axis=1)])
    count = np.diff(np.r_[first, len(d)])
    dur = d["duration_ns"].to_numpy(dtype=np.int64)
    total = np.add.reduceat(dur, first)
    median = (dur[first + (count - 1) // 2] + dur[first + count // 2]) / 2  # mean of the middle pair when even
    out = d.loc[first, keys].reset_index(drop=True)
    out["name"] = out["nameId"].map(names).fillna(UNNAMED)
    out = out.assign(count=count, total_ns=total, mean_ns=total / count, median_ns=median, min_ns=dur[first],
                     max_ns=dur[first + count - 1])
    out["share"] = out["total_ns"] / out.groupby(["globalPid", "deviceId"])["total_ns"].transform("sum")
    out["steps"], out["per_step_ns"], out["launches_per_step"] = None, None, None
    if steps is not None and not steps.empty:
        in_step = in_windows(d, steps)
        group = np.repeat(np.arange(len(first)), count)
        n_steps = steps.groupby(["globalPid", "deviceId"]).size()
        per_device = pd.MultiIndex.from_frame(out[["globalPid", "deviceId"]])
        n = n_steps.reindex(per_device).to_numpy(dtype=float)
        out["steps"] = pd.array(np.where(np.isnan(n), 0, n).astype(np.int64), dtype="Int64")
        with np.errstate(invalid="ignore", divide="ignore"):
            out["per_step_ns"] = np.bincount(group, weights=dur * in_step, minlength=len(first)) / n
            out["launches_per_step"] = np.bincount(group, weights=in_step, minlength=len(first)) / n
    out = out.sort_values(["globalPid", "deviceId", "total_ns"], ascending=[True, True, False], kind="stable")
    return out[KERNEL_COLUMNS].reset_index(drop=True)


def in_windows(kernels: pd.DataFrame, steps: pd.DataFrame) -> np.ndarray:
    """Whether each kernel (globalPid, deviceId, start) starts inside a step window of its device."""
    inside = np.zeros(len(kernels), dtype=bool)
    for (pid, dev), w in steps.groupby(["globalPid", "deviceId"]):  # one pass per device, vectorized inside
        mine = np.flatnonzero((kernels["globalPid"].to_numpy() == pid) & (kernels["deviceId"].to_numpy() == dev))
        w = w.sort_values("window_start")
        starts, ends = w["window_start"].to_numpy(), w["window_end"].to_numpy()
        t = kernels["start"].to_numpy()[mine]
        i = np.searchsorted(starts, t, side="right") - 1
        inside[mine] = (i >= 0) & (t < ends[np.clip(i, 0, None)])
    return inside


def kernel_table(analysis, base: bool = False) -> pd.DataFrame:
    """The per-kernel table of one :class:`~nsysanalyze.analysis.Analysis` (its steady steps for the per-step columns)."""
    trace = analysis.trace
    durations = trace.kernel_durations(base)
    names = trace.strings(np.unique(durations["nameId"].to_numpy())) if len(durations) else {}
    steps = analysis.steps()
    windows = steady_steps(steps)[["globalPid", "deviceId", "window_start", "window_end"]] if not steps.empty else None
    return aggregate(durations, names, windows)


def top(table: pd.DataFrame, n: int | None) -> pd.DataFrame:
    """The first ``n`` kernels of each (process, device) (all when ``n`` is None or 0)."""
    return table if not n else table.groupby(["globalPid", "deviceId"], sort=False).head(n)
