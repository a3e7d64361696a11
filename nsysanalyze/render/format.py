"""Shared formatting: units and the columns every tabular renderer shows."""
from __future__ import annotations

import math
import re
import shlex

from ..units import count, ms, pct, size  # noqa: F401 (the renderers' formatters)
from .sanitize import printable


def evidence_value(key: str, value) -> str:
    """Format an evidence entry by its unit suffix."""
    if isinstance(value, str):
        return value
    if key.endswith("_ns"):
        return ms(value)
    if key.endswith("_bytes"):
        return size(value)
    if key.endswith("_gbps"):
        return "-" if value != value else f"{value:,.1f} GB/s"
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


def combined_text(report: dict, global_pid: int, device_id: int) -> str:
    """' · all 3 fixes together: up to 250.1 ms, 74.7% of the step' (the ledger's combined estimate) when
    more than one finding of the device has a gain, else ''."""
    gains = [f for f in device_findings(report, global_pid, device_id)
             if f["gain_ns"] > 0 and f["rule"] != "gpu-idle-unexplained"]  # the residual idle is no fix
    mine = [x for x in report.get("ledger") or [] if (x["globalPid"], x["deviceId"]) == (global_pid, device_id)]
    if len(gains) < 2 or not mine or not mine[0]["window_ns"]:
        return ""
    x = mine[0]
    of = "the capture" if x["scope"] == "capture" else "the step"
    return (f" · all {len(gains)} fixes together: up to {ms(x['combined_gain_ns'])}, "
            f"{100 * x['combined_gain_ns'] / x['window_ns']:.1f}% of {of}")


def headlines(report: dict) -> list[tuple[str, str]]:
    """Per (process, device): its headline and its 'Next:' line (the top finding, or that none matched),
    with the combined estimate of all its findings' fixes."""
    out = []
    for d in report["summary"]["devices"]:
        mine = device_findings(report, d["globalPid"], d["deviceId"])
        nxt = next_text(mine[0]) + combined_text(report, d["globalPid"], d["deviceId"]) if mine else \
            "Next: nothing flagged (no rule matched)"
        out.append((headline(report, d), nxt))
    return out


def step_names(report: dict) -> str:
    """The step family as the tables name its steps: 'Batch {n}', or for inferred steps 'step 1…14
    (inferred from the kernel sequence, period 119 kernels)'."""
    t = report["trace"]
    if t.get("step_source") != "inferred":
        return str(t["step_family"])
    last = max((s["name"] for s in report.get("steps") or []), key=lambda n: (len(n), n), default="step 1")
    family = str(t["step_family"]).replace(" (", ", ", 1).rstrip(")")
    return f"step 1…{last.rsplit(' ', 1)[-1]} (inferred from the {family})"


def compact_headlines(report: dict) -> list[str]:
    """One short line per (process, GPU), its verdict: 'GPU 1 (pid 149): step 19.7 ms, idle 12.6% → pin-memory
    (up to 1.4%)' (capture values without steps; '→ nothing flagged' when no rule matched)."""
    out = []
    for d in report["summary"]["devices"]:
        mine = device_findings(report, d["globalPid"], d["deviceId"])
        label = device_label(d, report["trace"]["processes"])
        if steady_step_count(report, d["globalPid"], d["deviceId"]) and d.get("step_median_window_ns") is not None:
            what = f"step {ms(d['step_median_window_ns'])}, idle {pct(d.get('step_median_idle_fraction'))}"
        else:
            what = f"capture {ms(d['window_ns'])}, idle {pct(d.get('gpu_idle_fraction'))}"
        top = mine[0] if mine else None
        nxt = (f"{top['rule']} (up to {top['gain_pct']:.1f}%)" if top and top["gain_ns"] else top["rule"] if top
               else "nothing flagged")
        out.append(f"{label}: {what} → {nxt}")
    return out


def trace_line(report: dict) -> str:
    """'resnet18_baseline.sqlite · nsys 2023.4.4.54 · NVIDIA H200 · steps: Batch {n} · program: pytorch'."""
    t = report["trace"]
    gpus = ", ".join(sorted({d["name"] for d in t["devices"] if d.get("name")})) or (
        f"{len(t['devices'])} GPU(s), name not recorded" if t["devices"] else "no GPU activity")
    steps = f"steps: {step_names(report)}" if t.get("step_family") else "no steps (one window per device)"
    program = f" · program: {t.get('framework') or 'unknown'}" + (" + MPI" if t.get("mpi") else "")
    return f"{t['path']} · {nsys_versions(t)} · {gpus} · {steps}{program}"


def nsys_versions(trace: dict) -> str:
    """'nsys 2023.4.4.54', or 'nsys 2020.3.2 (exported with 2023.4.4.54)' when another nsys recorded the trace."""
    exporter, recorder = trace.get("nsys_version"), trace.get("recorder_nsys_version")
    if recorder and exporter and not exporter.startswith(recorder):
        return f"nsys {recorder} (exported with {exporter})"
    return f"nsys {exporter or recorder or '?'}"


UNIT_SUFFIX = re.compile(r"_(ns|bytes|bps|gbps)$")
UNIT_WORD = {"_ns": " time", "_bytes": " size"}  # said when two keys differ only by their unit


def evidence_label(key: str) -> str:
    """An evidence key as words, its unit suffix dropped (the value carries the unit):
    'pinned_copy_estimate_ns' → 'pinned copy estimate' (JSON keeps the key)."""
    return UNIT_SUFFIX.sub("", key).replace("_", " ")


def evidence_pairs(finding: dict) -> list[tuple[str, str]]:
    """(label, value with its unit) of a finding's evidence; keys that differ only by their unit
    ('htod_pageable_bytes', 'htod_pageable_ns') keep a word for it ('htod pageable size', '… time')."""
    labels = [evidence_label(k) for k in finding["evidence"]]
    twice = {lab for lab in labels if labels.count(lab) > 1}
    return [(lab + next((w for sfx, w in UNIT_WORD.items() if k.endswith(sfx)), "") if lab in twice else lab,
             evidence_value(k, v)) for lab, (k, v) in zip(labels, finding["evidence"].items())]


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


def timeline_hint(paths: list[str]) -> str:
    """The line that points to the Perfetto timeline of these traces (``nsysanalyze timeline``)."""
    files = " ".join(shlex.quote(str(p)) for p in paths)
    return f"See the timeline: nsysanalyze timeline {files} -o timeline.json, then open it in ui.perfetto.dev"


# Section titles, the same in text, markdown and HTML.
FINDINGS_TITLE = "Findings (largest possible gain first)"
SUMMARY_TITLE = "Summary (whole capture; step medians where marked)"
STEPS_TITLE = "Per step (* first step: its window starts at its own GPU work; medians skip it)"
SUBRANGES_TITLE = "CPU sub-ranges (median per step)"
DETAILS_HINT = "Summary and per-step tables: --details."
GAP_ROWS = 5  # idle causes shown per device
GAP_HEADERS = ["device", "cause", "kind", "idle", "before 1st launch", "after sync"]


def gaps_title(report: dict) -> str:
    """'Where the GPU waited (median per step)', or '(whole capture)' for a trace without steps."""
    return "Where the GPU waited " + ("(median per step)" if report.get("steps") else "(whole capture)")


LEDGER_ROWS = 10  # ledger rows shown per device
LEDGER_HEADERS = ["device", "row", "tags", "time", "share", "claimed by"]


def ledger_title(report: dict) -> str:
    """'Ledger of the median step: every ns once, and the finding that claimed it' (or the capture's)."""
    scope = "the median step" if report.get("steps") else "the capture"
    return f"Ledger of {scope}: every ns once, and the finding that claimed it"


def ledger_cells(report: dict) -> list[list[str]]:
    """Rows of the ledger table (``LEDGER_HEADERS``): the largest LEDGER_ROWS rows per device."""
    labels = {(d["globalPid"], d["deviceId"]): device_label(d, report["trace"]["processes"])
              for d in report["summary"]["devices"]}
    cells = []
    for x in report.get("ledger") or []:
        window = x["window_ns"] or 1.0
        for r in x["rows"][:LEDGER_ROWS]:
            what = f"GPU busy: {r['what']}" if r["kind"] == "busy" else f"idle: {r['cause']} ({r['what']})"
            tags = ", ".join(t for t, on in (("before 1st launch", r["before_launch"]), ("after sync", r["after_sync"]),
                                             ("short gap", r["short_gap"])) if on)
            cells.append([labels.get((x["globalPid"], x["deviceId"]), ""), what, tags, ms(r["ns"]),
                          pct(r["ns"] / window), r["claimed_by"] or ""])
    return cells


def gap_cells(report: dict) -> list[list[str]]:
    """Rows of the idle-cause table (``GAP_HEADERS``): the top ``GAP_ROWS`` causes per device."""
    labels = {(d["globalPid"], d["deviceId"]): device_label(d, report["trace"]["processes"])
              for d in report["summary"]["devices"]}
    shown: dict = {}
    cells = []
    for r in report.get("gaps") or []:
        key = (r["globalPid"], r["deviceId"])
        shown[key] = shown.get(key, 0) + 1
        if shown[key] <= GAP_ROWS:
            cells.append([labels.get(key, ""), str(r["cause"]), r["cause_kind"], ms(r["ns"]), ms(r["before_launch_ns"]),
                          ms(r["after_sync_ns"])])
    return cells

