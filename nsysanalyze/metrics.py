"""Per-window GPU and CPU metrics: pure functions over the loaded frames (no SQL here).

A *window* is one row with globalPid, deviceId, window_start, window_end (ns) and the CPU
side's key: globalTid (a step's thread, or -1 for every thread of the process) with
cpu_start/cpu_end. Step windows come from ``steps.project_steps``; the whole-trace window
of a device (first GPU activity start → last GPU activity end) from ``steps.capture_windows``.

Definitions (all times ns, sizes bytes; |X| is the length of the union of intervals X
clipped to the window; counts and bytes are attributed by activity start):

- busy_ns = |kernels ∪ memcpys ∪ memsets|; idle_fraction = 1 - busy_ns / window_ns
- memcpy_kernel_overlap = |memcpys ∩ kernels| / |memcpys| (1.0: every copy hidden under compute);
  htod_kernel_overlap likewise for host-to-device copies only
- nccl_ns = |NCCL kernels|; nccl_share = nccl_ns / window_ns;
  nccl_exposed_ns = |NCCL kernels - non-NCCL kernels| (communication nothing else hides)
- dtod_* (copyKind 8) and ptop_* (copyKind 10): bytes, count, ns
- htod_* / dtoh_*: bytes split by host memory kind (pageable srcKind/dstKind 0, pinned 1)
- launch_* / sync_copy_* / sync_wait_*: CUDA API calls on the window's CPU thread(s):
  kernel launches, synchronous memcpy APIs (no ``Async``), and explicit synchronizations
- munmap_count/munmap_ns: munmap calls in the CPU range; munmap_gpu_idle_ns = GPU idle in the
  window that coincides with them (|munmap - busy|)
- time_* : a partition of the window (they sum to window_ns) over X = non-NCCL kernels,
  N = NCCL kernels, C = memcpys ∪ memsets: time_compute_only_ns = |X - N - C|,
  time_copy_hidden_ns = |C ∩ (X ∪ N)|, time_copy_exposed_ns = |C - X - N|,
  time_nccl_overlapped_ns = |X ∩ N - C|, time_nccl_exposed_ns = |N - X - C|, and idle_ns
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .intervals import Coverage, overlap_within, sum_in_windows
from .trace.schema import COPY_DTOD, COPY_DTOH, COPY_HTOD, COPY_PTOP, MEM_PAGEABLE, MEM_PINNED
from .trace.tables import pid_of

API_PATTERNS = {
    "launch": re.compile(r"^(cudaLaunch\w*|cuLaunch\w*|cudaGraphLaunch|cuGraphLaunch)(_v\d+)?$"),
    "sync_copy": re.compile(r"^(cudaMemcpy(2D|3D|Peer|ToSymbol|FromSymbol|ToArray|FromArray)?|"
                            r"cuMemcpy(HtoD|DtoH|DtoD|HtoA|AtoH|AtoD|DtoA|2D|3D|Peer)?)(_v\d+)?(_ptds)?$"),
    "sync_wait": re.compile(r"^(cudaStreamSynchronize|cudaDeviceSynchronize|cudaEventSynchronize|"
                            r"cuStreamSynchronize|cuCtxSynchronize|cuEventSynchronize)(_v\d+)?(_ptsz)?$"),
}


def classify_runtime(runtime: pd.DataFrame, names: dict[int, str]) -> pd.DataFrame:
    """Runtime calls of interest with an ``api`` column ('launch', 'sync_copy', 'sync_wait')."""
    category = {i: next((k for k, p in API_PATTERNS.items() if p.match(n)), "") for i, n in names.items()}
    api = runtime["nameId"].map(category).fillna("")
    return runtime.assign(api=api.to_numpy())[api.to_numpy() != ""].reset_index(drop=True)


def _by_window_key(events: pd.DataFrame, windows: pd.DataFrame, value: np.ndarray | None = None) -> np.ndarray:
    """Sum of ``value`` (default: 1 per event) over events starting in each window's CPU range,
    on the window's thread (globalTid) or, for globalTid -1, anywhere in its process."""
    out = np.zeros(len(windows), dtype=np.int64)
    if events.empty or windows.empty:
        return out
    values = np.ones(len(events), dtype=np.int64) if value is None else np.asarray(value, dtype=np.int64)
    ev_tid = events["globalTid"].to_numpy()
    ev_pid = pid_of(ev_tid)
    ev_start = events["start"].to_numpy()
    for (tid, pid), idx in windows.groupby(["globalTid", "globalPid"]).indices.items():
        mine = ev_pid == pid if tid < 0 else ev_tid == tid
        w = windows.iloc[idx]
        out[idx] = sum_in_windows(ev_start[mine], values[mine], w["cpu_start"].to_numpy(), w["cpu_end"].to_numpy())
    return out


def _coverage(frame: pd.DataFrame, mask: np.ndarray | None = None) -> Coverage:
    if mask is None:
        return Coverage(frame["start"].to_numpy(), frame["end"].to_numpy())
    return Coverage(frame["start"].to_numpy()[mask], frame["end"].to_numpy()[mask])


def gpu_metrics(windows: pd.DataFrame, kernels: pd.DataFrame, memcpys: pd.DataFrame, memsets: pd.DataFrame,
                nccl_name_ids: np.ndarray) -> pd.DataFrame:
    """GPU-side metrics per window row (same index as ``windows``); see the module docstring."""
    out = {}
    for (pid, dev), idx in windows.groupby(["globalPid", "deviceId"]).indices.items():
        a = windows["window_start"].to_numpy()[idx]
        b = windows["window_end"].to_numpy()[idx]
        k = kernels[(kernels["globalPid"] == pid) & (kernels["deviceId"] == dev)]
        m = memcpys[(memcpys["globalPid"] == pid) & (memcpys["deviceId"] == dev)]
        s = memsets[(memsets["globalPid"] == pid) & (memsets["deviceId"] == dev)]
        is_nccl = np.isin(k["nameId"].to_numpy(), nccl_name_ids)
        kind = m["copyKind"].to_numpy()
        htod, dtoh, dtod, ptop = (kind == COPY_HTOD), (kind == COPY_DTOH), (kind == COPY_DTOD), (kind == COPY_PTOP)
        kern, copies, sets = _coverage(k), _coverage(m), _coverage(s)
        nccl, compute = _coverage(k, is_nccl), _coverage(k, ~is_nccl)
        htod_cov = _coverage(m, htod)
        copy_or_set = Coverage.of(copies, sets)
        busy = Coverage.of(kern, copy_or_set)
        m_start, k_start = m["start"].to_numpy(), k["start"].to_numpy()
        m_bytes, m_dur = m["bytes"].to_numpy(), (m["end"] - m["start"]).to_numpy()
        src, dst = m["srcKind"].to_numpy(), m["dstKind"].to_numpy()

        def copy_sum(mask, values):
            return sum_in_windows(m_start[mask], values[mask], a, b)

        ones_m = np.ones(len(m), dtype=np.int64)
        window_ns = b - a
        cols = {
            "window_ns": window_ns,
            "busy_ns": busy.within(a, b),
            "kernel_ns": kern.within(a, b),
            "kernel_count": sum_in_windows(k_start, np.ones(len(k), dtype=np.int64), a, b),
            "kernel_sum_ns": sum_in_windows(k_start, (k["end"] - k["start"]).to_numpy(), a, b),
            "memcpy_ns": copies.within(a, b),
            "memcpy_hidden_ns": overlap_within(copies, kern, Coverage.of(copies, kern), a, b),
            "memset_ns": sets.within(a, b),
            "htod_ns": htod_cov.within(a, b),
            "htod_hidden_ns": overlap_within(htod_cov, kern, Coverage.of(htod_cov, kern), a, b),
            "htod_count": copy_sum(htod, ones_m),
            "htod_bytes": copy_sum(htod, m_bytes),
            "htod_pageable_bytes": copy_sum(htod & (src == MEM_PAGEABLE), m_bytes),
            "htod_pinned_bytes": copy_sum(htod & (src == MEM_PINNED), m_bytes),
            "htod_pageable_ns": copy_sum(htod & (src == MEM_PAGEABLE), m_dur),
            "htod_pinned_ns": copy_sum(htod & (src == MEM_PINNED), m_dur),
            "dtoh_count": copy_sum(dtoh, ones_m),
            "dtoh_bytes": copy_sum(dtoh, m_bytes),
            "dtoh_pageable_bytes": copy_sum(dtoh & (dst == MEM_PAGEABLE), m_bytes),
            "dtoh_ns": _coverage(m, dtoh).within(a, b),
            "dtod_count": copy_sum(dtod, ones_m),
            "dtod_bytes": copy_sum(dtod, m_bytes),
            "dtod_ns": _coverage(m, dtod).within(a, b),
            "ptop_count": copy_sum(ptop, ones_m),
            "ptop_bytes": copy_sum(ptop, m_bytes),
            "ptop_ns": _coverage(m, ptop).within(a, b),
            "nccl_count": sum_in_windows(k_start[is_nccl], np.ones(int(is_nccl.sum()), dtype=np.int64), a, b),
            "nccl_ns": nccl.within(a, b),
            # |NCCL - compute| = |kernels| - |compute|, since kernels = NCCL ∪ compute
            "nccl_exposed_ns": kern.within(a, b) - compute.within(a, b),
            **_time_partition(compute, nccl, copy_or_set, kern, busy, a, b),
        }
        for name, values in cols.items():
            out.setdefault(name, np.zeros(len(windows), dtype=np.int64))[idx] = values
    frame = pd.DataFrame(out, index=windows.index) if out else pd.DataFrame(index=windows.index)
    if frame.empty and not len(windows):
        return frame
    frame["idle_ns"] = frame["window_ns"] - frame["busy_ns"]
    frame["idle_fraction"] = _ratio(frame["idle_ns"], frame["window_ns"])
    frame["memcpy_kernel_overlap"] = _ratio(frame["memcpy_hidden_ns"], frame["memcpy_ns"])
    frame["htod_kernel_overlap"] = _ratio(frame["htod_hidden_ns"], frame["htod_ns"])
    frame["nccl_share"] = _ratio(frame["nccl_ns"], frame["window_ns"])
    return frame


def _time_partition(x: Coverage, n: Coverage, c: Coverage, xn: Coverage, xnc: Coverage,
                    a: np.ndarray, b: np.ndarray) -> dict[str, np.ndarray]:
    """Venn regions of X (compute), N (NCCL), C (copies) in each window, by inclusion-exclusion.

    ``xn`` and ``xnc`` are the unions X ∪ N and X ∪ N ∪ C (already built by the caller).
    """
    u_xn, u_xnc = xn.within(a, b), xnc.within(a, b)
    u_xc, u_nc = Coverage.of(x, c).within(a, b), Coverage.of(n, c).within(a, b)
    c_len = c.within(a, b)
    return {
        "time_compute_only_ns": u_xnc - u_nc,
        "time_copy_hidden_ns": c_len - (u_xnc - u_xn),
        "time_copy_exposed_ns": u_xnc - u_xn,
        "time_nccl_overlapped_ns": u_xc + u_nc - c_len - u_xnc,
        "time_nccl_exposed_ns": u_xnc - u_xc,
    }


def cpu_metrics(windows: pd.DataFrame, api_calls: pd.DataFrame, munmap: pd.DataFrame,
                busy_by_device: dict[tuple[int, int], Coverage]) -> pd.DataFrame:
    """CPU-side metrics per window row: API call counts/ns and munmap, see the module docstring."""
    out = pd.DataFrame(index=windows.index)
    out["cpu_ns"] = (windows["cpu_end"] - windows["cpu_start"]).to_numpy()
    for api in API_PATTERNS:
        calls = api_calls[api_calls["api"] == api]
        out[f"{api}_calls"] = _by_window_key(calls, windows)
        out[f"{api}_ns"] = _by_window_key(calls, windows, (calls["end"] - calls["start"]).to_numpy())
    out["munmap_count"] = _by_window_key(munmap, windows)
    out["munmap_ns"] = _by_window_key(munmap, windows, (munmap["end"] - munmap["start"]).to_numpy())
    out["munmap_gpu_idle_ns"] = _munmap_gpu_idle(windows, munmap, busy_by_device)
    return out


def _munmap_gpu_idle(windows: pd.DataFrame, munmap: pd.DataFrame,
                     busy_by_device: dict[tuple[int, int], Coverage]) -> np.ndarray:
    """GPU idle ns in each GPU window coinciding with munmap calls of the window's thread/process."""
    out = np.zeros(len(windows), dtype=np.int64)
    if munmap.empty:
        return out
    mm_tid = munmap["globalTid"].to_numpy()
    for (pid, dev, tid), idx in windows.groupby(["globalPid", "deviceId", "globalTid"]).indices.items():
        mine = pid_of(mm_tid) == pid if tid < 0 else mm_tid == tid
        busy = busy_by_device.get((pid, dev))
        if busy is None or not mine.any():
            continue
        mm = _coverage(munmap, mine)
        a = windows["window_start"].to_numpy()[idx]
        b = windows["window_end"].to_numpy()[idx]
        out[idx] = Coverage.of(mm, busy).within(a, b) - busy.within(a, b)  # |munmap - busy|
    return out


def busy_coverage(kernels: pd.DataFrame, memcpys: pd.DataFrame, memsets: pd.DataFrame) -> dict[tuple[int, int], Coverage]:
    """Union of all GPU work per (globalPid, deviceId)."""
    work = pd.concat([f[["globalPid", "deviceId", "start", "end"]] for f in (kernels, memcpys, memsets)])
    return {key: _coverage(g) for key, g in work.groupby(["globalPid", "deviceId"])}


def _ratio(num: pd.Series, den: pd.Series) -> pd.Series:
    """num / den with NaN where den is 0."""
    return num / den.where(den > 0)


def window_metrics(windows: pd.DataFrame, kernels: pd.DataFrame, memcpys: pd.DataFrame, memsets: pd.DataFrame,
                   nccl_name_ids: np.ndarray, api_calls: pd.DataFrame, munmap: pd.DataFrame) -> pd.DataFrame:
    """All metrics per window: the window's own columns, then GPU then CPU metrics."""
    gpu = gpu_metrics(windows, kernels, memcpys, memsets, nccl_name_ids)
    cpu = cpu_metrics(windows, api_calls, munmap, busy_coverage(kernels, memcpys, memsets))
    return pd.concat([windows, gpu, cpu], axis=1)


SUMMARY_MEDIAN_COLUMNS = ["window_ns", "cpu_ns", "idle_fraction", "memcpy_kernel_overlap", "htod_kernel_overlap",
                          "nccl_share", "nccl_ns", "nccl_exposed_ns", "dtod_bytes", "dtod_ns", "htod_bytes",
                          "htod_ns", "idle_ns", "munmap_gpu_idle_ns"]


def step_medians(step_metrics: pd.DataFrame) -> pd.DataFrame:
    """Median per (globalPid, deviceId) over closed steps (all steps when none is closed)."""
    if step_metrics.empty:
        return pd.DataFrame(columns=["globalPid", "deviceId", "steps"])
    closed = step_metrics.groupby(["globalPid", "deviceId"])["closed"].transform("any")
    use = step_metrics[step_metrics["closed"] | ~closed]
    med = use.groupby(["globalPid", "deviceId"])[SUMMARY_MEDIAN_COLUMNS].median()
    med.columns = [f"step_median_{c}" for c in med.columns]
    med.insert(0, "steps", step_metrics.groupby(["globalPid", "deviceId"]).size())
    return med.reset_index()
