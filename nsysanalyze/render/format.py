"""Shared formatting: units and the columns every tabular renderer shows."""
from __future__ import annotations

import math
import re

from .sanitize import printable


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
    if key.endswith("_bps"):
        return "-" if value != value else f"{value / 1e9:,.1f} GB/s"
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

def ms_number(ns) -> str:
    """ns as a bare number of ms (for tables whose header carries the unit)."""
    return "-" if ns is None or (isinstance(ns, float) and math.isnan(ns)) else f"{ns / 1e6:,.1f}"


def step_name(step: dict) -> str:
    """Step label; the open first step (its window starts at its own first GPU work) is starred."""
    return str(step.get("name", "")) + ("" if step.get("closed", True) else "*")


# Summary rows shown even when zero (others are hidden when zero or absent on every device).
SUMMARY_ALWAYS = {"window_ns", "gpu_idle_fraction", "memcpy_kernel_overlap", "htod_kernel_overlap", "kernel_ns", "memcpy_ns", "htod_bytes", "dtod_bytes", "nccl_ns"}


def summary_cells(devices: list[dict]) -> list[list[str]]:
    """Rows [label, value per device] of the summary table for the given summary devices."""
    def shown(key):
        values = [d.get(key) for d in devices]
        if key in SUMMARY_ALWAYS:
            return any(v is not None for v in values)
        return any(v is not None and v == v and v != 0 for v in values)
    return [[label] + [fmt(d.get(key)) for d in devices] for label, key, fmt in SUMMARY_ROWS if shown(key)]


# (header, step key, formatter): the per-step table's columns (times in ms).
STEP_COLUMNS = [
    ("step", "name", step_name),
    ("GPU", "deviceId", count),
    ("CPU ms", "cpu_ns", ms_number),
    ("window ms", "window_ns", ms_number),
    ("idle", "idle_fraction", pct),
    ("kernels ms", "kernel_ns", ms_number),
    ("HtoD ms", "htod_ns", ms_number),
    ("HtoD hidden", "htod_kernel_overlap", pct),
    ("DtoD", "dtod_bytes", size),
    ("NCCL ms", "nccl_ns", ms_number),
    ("NCCL exp. ms", "nccl_exposed_ns", ms_number),
    ("munmap", "munmap_count", count),
]


def device_label(dev: dict, processes: list[dict]) -> str:
    """'GPU 0 (pid 461)' for a summary/device row."""
    pid = next((p["pid"] for p in processes if p["globalPid"] == dev.get("globalPid")), None)
    return f"GPU {dev['deviceId']}" + (f" (pid {pid})" if pid is not None and len(processes) > 1 else "")


def step_cells(step: dict) -> list[str]:
    return [fmt(step) if fmt is step_name else fmt(step.get(key)) for _, key, fmt in STEP_COLUMNS]


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


def by_unit(unit: str, x) -> str:
    """A metric value by its unit: 'ns' → ms, 'bytes' → size, 'fraction' → %, 'count'."""
    return {"ns": ms, "bytes": size, "fraction": pct}.get(unit, count)(x)


def signed_by_unit(unit: str, d) -> str:
    """A change by its unit, always signed: '+1.2 ms', '-3.0 pp' (percentage points), '+1.5 MB', '+12'."""
    if d is None or (isinstance(d, float) and math.isnan(d)):
        return "-"
    if d == 0:
        return "0"
    sign = "+" if d > 0 else "-"
    if unit == "fraction":
        return f"{sign}{abs(100 * d):.1f} pp"
    return sign + by_unit(unit, abs(d))


def rel_change(r) -> str:
    """A relative change: '+5.2%', 'from 0' when the base was zero ('inf'/'-inf'), '-' when unknown."""
    if r is None:
        return "-"
    if r in ("inf", "-inf"):
        return "from 0"
    return "0%" if r == 0 else f"{100 * r:+,.1f}%"


# (label, step/summary key, colour): the time partition of a window, in stacking order (metrics.py time_*).
TIME_PARTITION = [
    ("compute only", "time_compute_only_ns", "#4878d0"),
    ("copy hidden under compute", "time_copy_hidden_ns", "#8fd694"),
    ("copy exposed", "time_copy_exposed_ns", "#ee854a"),
    ("NCCL overlapped", "time_nccl_overlapped_ns", "#b39ddb"),
    ("NCCL exposed", "time_nccl_exposed_ns", "#d65f5f"),
    ("idle", "idle_ns", "#d0d0d0"),
]


def trace_name(report: dict) -> str:
    """The trace's file name (its path without folders)."""
    return str(report["trace"]["path"]).replace("\\", "/").rsplit("/", 1)[-1]


def partition_bars(report: dict) -> tuple[list[dict], bool]:
    """Rows to draw as one bar each: steps (one per step and device) or, without steps, the
    whole-capture window of each device; the flag says which (True: steps)."""
    if report.get("steps"):
        return report["steps"], True
    return report["summary"]["devices"], False


def bar_label(row: dict, many_devices: bool, is_step: bool) -> str:
    """'Batch 3', 'Batch 3 · GPU 1' (several devices), 'GPU 0' (whole capture); '*' marks an open (first) step."""
    dev = row["deviceId"]
    if not is_step:
        return f"GPU {dev}"
    name = str(row.get("name", "")) + ("*" if row.get("closed") is False else "")
    return f"{name} · GPU {dev}" if many_devices else name


def gain_text(finding: dict) -> str:
    """'up to 475.0 ms, 81.3% of the step' (of the capture for a trace without steps) or 'no gain expected'."""
    if not finding["gain_ns"]:
        return "no gain expected"
    of = "the capture" if finding.get("scope") == "capture" else "the step"
    return f"up to {ms(finding['gain_ns'])}, {finding['gain_pct']:.1f}% of {of}"


def next_text(finding: dict) -> str:
    """'Next: rule — title (up to 466.9 ms, 84.0% of the step)': the one thing to do first."""
    return f"Next: {finding['rule']} — {finding['title']} ({gain_text(finding)})"


def steady_step_count(report: dict, global_pid: int, device_id: int) -> int:
    """Steps of one (process, device) that its medians use: the closed ones, or all when none is closed."""
    mine = [s for s in report.get("steps") or [] if s["globalPid"] == global_pid and s["deviceId"] == device_id]
    closed = [s for s in mine if s.get("closed", True)]
    return len(closed or mine)


def device_findings(report: dict, global_pid: int, device_id: int) -> list[dict]:
    """The findings of one (process, device), ranked as in the report."""
    return [f for f in report["findings"] if f["globalPid"] == global_pid and f["deviceId"] == device_id]


def headline(report: dict, device: dict) -> str:
    """'GPU 0: step 555.8 ms (median of 2 steady steps) · GPU idle 84.0%' (capture values without steps)."""
    label = device_label(device, report["trace"]["processes"])
    steady = steady_step_count(report, device["globalPid"], device["deviceId"])
    if steady and device.get("step_median_window_ns") is not None:
        plural = "s" if steady != 1 else ""
        return (f"{label}: step {ms(device['step_median_window_ns'])} (median of {steady} steady step{plural})"
                f" · GPU idle {pct(device.get('step_median_idle_fraction'))} of the step")
    return f"{label}: no steps, capture {ms(device['window_ns'])} · GPU idle {pct(device.get('gpu_idle_fraction'))}"


def headlines(report: dict) -> list[tuple[str, str]]:
    """Per (process, device): its headline and its 'Next:' line (the top finding, or that none matched)."""
    out = []
    for d in report["summary"]["devices"]:
        mine = device_findings(report, d["globalPid"], d["deviceId"])
        out.append((headline(report, d), next_text(mine[0]) if mine else "Next: nothing flagged (no rule matched)"))
    return out


def trace_line(report: dict) -> str:
    """'resnet18_baseline.sqlite · nsys 2023.4.4.54 · NVIDIA H200 · steps: Batch {n} · program: pytorch'."""
    t = report["trace"]
    gpus = ", ".join(sorted({d["name"] for d in t["devices"] if d.get("name")})) or (
        f"{len(t['devices'])} GPU(s), name not recorded" if t["devices"] else "no GPU activity")
    steps = f"steps: {t['step_family']}" if t.get("step_family") else "no steps (one window per device)"
    program = f" · program: {t.get('framework') or 'unknown'}" + (" + MPI" if t.get("mpi") else "")
    return f"{t['path']} · {nsys_versions(t)} · {gpus} · {steps}{program}"


def nsys_versions(trace: dict) -> str:
    """'nsys 2023.4.4.54', or 'nsys 2020.3.2 (exported with 2023.4.4.54)' when another nsys recorded the trace."""
    exporter, recorder = trace["nsys_version"], trace.get("recorder_nsys_version")
    if recorder and exporter and not exporter.startswith(recorder):
        return f"nsys {recorder} (exported with {exporter})"
    return f"nsys {exporter or recorder or '?'}"


def evidence_pairs(finding: dict) -> list[tuple[str, str]]:
    """(label, value with its unit) of a finding's evidence."""
    return [(k, evidence_value(k, v)) for k, v in finding["evidence"].items()]


def keeping_snippets(report: dict, sanitize) -> dict:
    """``sanitize(report)`` (render.sanitize.for_text / for_markdown) with each finding's snippet still
    multi-line: its lines made printable one by one (code is shown as code, never as markdown)."""
    safe = sanitize(report)
    for f, original in zip(safe["findings"], report["findings"]):
        f["snippet"] = "\n".join(printable(line) for line in original["snippet"].split("\n"))
    return safe


def code_fence(code: str) -> str:
    """A markdown fence longer than any backtick run in ``code``."""
    return "`" * max(3, 1 + max((len(r) for r in re.findall("`+", code)), default=0))
