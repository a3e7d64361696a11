"""Shared formatting: units and the columns every tabular renderer shows."""
from __future__ import annotations

import math


def ms(ns) -> str:
    return "-" if ns is None or (isinstance(ns, float) and math.isnan(ns)) else f"{ns / 1e6:,.1f} ms"


def pct(x) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}%"


def size(b) -> str:
    if b is None or (isinstance(b, float) and math.isnan(b)):
        return "-"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(b) >= scale:
            return f"{b / scale:,.1f} {unit}"
    return f"{b:.0f} B"


def count(n) -> str:
    return "-" if n is None or (isinstance(n, float) and math.isnan(n)) else f"{n:,.0f}"


def evidence_value(key: str, value) -> str:
    """Format an evidence entry by its unit suffix."""
    if isinstance(value, str):
        return value
    if key.endswith("_ns"):
        return ms(value)
    if key.endswith("_bytes"):
        return size(value)
    if key.endswith(("_fraction", "_share", "_overlap")) or "share_of" in key:
        return pct(value)
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.3g}"
    return count(value)


# (label, summary key, formatter): what the summary table shows per device.
SUMMARY_ROWS = [
    ("capture window", "window_ns", ms),
    ("steps", "steps", count),
    ("step time (median, GPU)", "step_median_window_ns", ms),
    ("step time (median, CPU)", "step_median_cpu_ns", ms),
    ("GPU idle", "gpu_idle_fraction", pct),
    ("GPU idle per step (median)", "step_median_idle_fraction", pct),
    ("kernel time", "kernel_ns", ms),
    ("memcpy time", "memcpy_ns", ms),
    ("memcpy hidden under kernels", "memcpy_kernel_overlap", pct),
    ("HtoD", "htod_bytes", size),
    ("HtoD from pageable memory", "htod_pageable_bytes", size),
    ("HtoD time", "htod_ns", ms),
    ("HtoD hidden under kernels", "htod_kernel_overlap", pct),
    ("DtoH", "dtoh_bytes", size),
    ("DtoD", "dtod_bytes", size),
    ("DtoD count", "dtod_count", count),
    ("DtoD time", "dtod_ns", ms),
    ("PtoP", "ptop_bytes", size),
    ("NCCL kernel time", "nccl_ns", ms),
    ("NCCL share", "nccl_share", pct),
    ("NCCL exposed", "nccl_exposed_ns", ms),
    ("sync copy API calls", "sync_copy_calls", count),
    ("sync wait API calls", "sync_wait_calls", count),
    ("munmap calls", "munmap_count", count),
    ("munmap time", "munmap_ns", ms),
    ("GPU idle during munmap", "munmap_gpu_idle_ns", ms),
]

# (header, step key, formatter): the per-step table's columns.
STEP_COLUMNS = [
    ("step", "name", str),
    ("dev", "deviceId", count),
    ("CPU", "cpu_ns", ms),
    ("GPU window", "window_ns", ms),
    ("idle", "idle_fraction", pct),
    ("kernels", "kernel_ns", ms),
    ("HtoD", "htod_ns", ms),
    ("HtoD hidden", "htod_kernel_overlap", pct),
    ("DtoD", "dtod_bytes", size),
    ("NCCL", "nccl_ns", ms),
    ("NCCL exposed", "nccl_exposed_ns", ms),
    ("munmap", "munmap_count", count),
]


def device_label(dev: dict, processes: list[dict]) -> str:
    """'GPU 0 (pid 461)' for a summary/device row."""
    pid = next((p["pid"] for p in processes if p["globalPid"] == dev.get("globalPid")), None)
    d = dev.get("device", dev.get("deviceId"))
    return f"GPU {d}" + (f" (pid {pid})" if pid is not None and len(processes) > 1 else "")


def step_cells(step: dict) -> list[str]:
    return [fmt(step.get(key)) if fmt is not str else str(step.get(key, "")) for _, key, fmt in STEP_COLUMNS]


def subrange_table(report: dict) -> list[tuple[str, float, float]]:
    """(name, median ns, median share) of CPU sub-ranges across steps, largest first."""
    rows: dict[str, list[tuple[float, float]]] = {}
    for r in report.get("subranges", []):
        rows.setdefault(r["name"], []).append((r["ns"], r["share"] if r["share"] is not None else math.nan))
    out = []
    for name, vals in rows.items():
        ns = sorted(v[0] for v in vals)
        sh = sorted(v[1] for v in vals)
        out.append((name, ns[len(ns) // 2], sh[len(sh) // 2]))
    return sorted(out, key=lambda r: -r[1])
