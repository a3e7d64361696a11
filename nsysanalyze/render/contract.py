"""The JSON contract: one :class:`~nsysanalyze.analysis.Analysis` as plain data (documented in docs/json.md,
checked against ``nsysanalyze/schema/report.schema.json``).

Rules: every key is always present; a metric that the trace could not capture is null, never 0
(no OS runtime table → the munmap metrics; no CUDA runtime table → the API call counts; no steps →
the ``step_median_*`` fields); bytes and counts are integers (a median over an even number of steps
is rounded to the nearest integer); devices are named ``deviceId`` everywhere.
"""
from __future__ import annotations

from dataclasses import asdict

import numpy as np
import pandas as pd

from ..analysis import run
from ..ledger import ROW_KEYS
from ..metrics import SUMMARY_MEDIAN_COLUMNS

# 3: the per-device ledger (rows claimed by findings, the combined estimate), findings' claimed rows and
#    bound terms, um_* metrics; 2: trace.framework/step_source, gaps, NCCL by kind, alloc/async_copy metrics
FORMAT_VERSION = 3

OSRT_METRICS = ("munmap_count", "munmap_ns", "munmap_gpu_idle_ns", "step_median_munmap_gpu_idle_ns")
RUNTIME_METRICS = ("launch_calls", "launch_ns", "sync_copy_calls", "sync_copy_ns", "sync_wait_calls", "sync_wait_ns",
                   "module_load_calls", "module_load_ns")
STEP_MEDIAN_KEYS = [f"step_median_{c}" for c in SUMMARY_MEDIAN_COLUMNS]
INTEGER_SUFFIXES = ("_bytes", "_count", "_calls")


def is_integer_key(name: str) -> bool:
    """Bytes and counts: written as integers."""
    return name.endswith(INTEGER_SUFFIXES) or name == "steps"


def records(frame: pd.DataFrame) -> list[dict]:
    """DataFrame rows as JSON-safe dicts (NaN → None, numpy scalars → Python, bytes/counts → int), built
    column by column."""
    if frame.empty:
        return []
    columns = []
    for name in frame.columns:
        col = frame[name]
        if is_integer_key(str(name)) and col.dtype.kind == "f":
            col = np.floor(col + 0.5).astype("Int64")
        values = col.to_numpy().tolist() if col.dtype.kind in "iufb" else list(col)
        missing = col.isna().to_numpy()
        if missing.any():
            values = [None if m else v for v, m in zip(values, missing)]
        if col.dtype.kind not in "iufb":
            values = [v.item() if isinstance(v, np.generic) else v for v in values]
        columns.append(values)
    names = [str(c) for c in frame.columns]
    return [dict(zip(names, row)) for row in zip(*columns)]


def finding_record(finding: dict) -> dict:
    """A finding with its evidence's bytes and counts as integers (``munmap_count: 2``, never ``2.0``)."""
    evidence = {k: int(np.floor(v + 0.5)) if is_integer_key(k) and isinstance(v, float) and np.isfinite(v) else v
                for k, v in finding["evidence"].items()}
    return {**finding, "evidence": evidence}


def uncaptured(frame: pd.DataFrame, schema) -> pd.DataFrame:
    """``frame`` with the metrics the trace did not capture set to null (see the module docstring)."""
    missing = (() if schema.has("OSRT_API") else OSRT_METRICS) + \
        (() if schema.has("CUPTI_ACTIVITY_KIND_RUNTIME") else RUNTIME_METRICS)
    present = [c for c in missing if c in frame.columns]
    if not present or frame.empty:
        return frame
    return frame.assign(**{c: pd.Series([None] * len(frame), index=frame.index, dtype="object") for c in present})


def summary_frame(analysis) -> pd.DataFrame:
    """Summary with the contract's names (gpu_idle_fraction: whole capture) and every step field present."""
    s = analysis.summary().rename(columns={"idle_fraction": "gpu_idle_fraction"})
    if s.empty:
        return s
    if "steps" not in s:
        s["steps"] = 0
    s["steps"] = s["steps"].fillna(0).astype(np.int64)
    for key in STEP_MEDIAN_KEYS:
        if key not in s:
            s[key] = np.nan
    return uncaptured(s, analysis.trace.schema)


def kernel_records(analysis) -> list[dict]:
    """Every kernel of the trace (``nsysanalyze.kernels``), largest total first per device."""
    from ..kernels import kernel_table

    return records(kernel_table(analysis))


def finding_records(analysis) -> list[dict]:
    """The findings as plain dicts (finding_record), evidence values NaN (not measurable here) → None."""
    out = []
    for f in analysis.findings():
        d = finding_record(f.to_dict())
        d["evidence"] = {k: None if isinstance(v, float) and v != v else v for k, v in d["evidence"].items()}
        out.append(d)
    return out


def ledger_records(analysis) -> list[dict]:
    """Per device: its ledger at the findings' scope — rows (kind, what, cause, tags, ns, claimed_by: the
    finding's rule or null), window, GPU busy and host work — and the window after all proposed fixes."""
    diagnoses = analysis.diagnoses()
    rows = ledger_row_records([d.ledger for d in diagnoses])
    return [{"globalPid": d.evidence.globalPid, "deviceId": d.evidence.deviceId, "scope": d.evidence.scope,
             "window_ns": d.ledger.window_ns, "busy_ns": d.ledger.busy_ns, "host_work_ns": d.ledger.host_work_ns,
             "after_fixes_ns": d.combined["after_fixes_ns"], "combined_gain_ns": d.combined["gain_ns"], "rows": r}
            for d, r in zip(diagnoses, rows)]


def ledger_row_records(ledgers: list) -> list[list[dict]]:
    """Each ledger's rows with ``claimed_by`` (the claiming rule or None) as records; the ledgers whose rows
    are slices of one table (every device's: ledger.scope_rows) converted in one pass over that table."""
    out: list[list[dict]] = [[] for _ in ledgers]
    by_table: dict[int, list[int]] = {}
    for i, led in enumerate(ledgers):
        by_table.setdefault(id(led.arrays.table), []).append(i)
    for mine in by_table.values():
        table = ledgers[mine[0]].arrays.table
        claimed = np.full(len(table.frame), None, dtype=object)
        for i in mine:
            a = ledgers[i].arrays
            claimed[a.lo:a.hi] = [c or None for c in ledgers[i].claimed]
        rows = records(table.frame[[*ROW_KEYS, "ns"]].assign(claimed_by=claimed))
        for i in mine:
            out[i] = rows[ledgers[i].arrays.lo:ledgers[i].arrays.hi]
    return out


def report(analysis) -> dict:
    """The report of one analysis: format_version, trace, notes, summary, steps, subranges, gaps, ledger,
    findings, kernels."""
    info = asdict(analysis.info)
    return {
        "format_version": FORMAT_VERSION,
        "trace": info,
        "notes": list(analysis.notes),
        "summary": {"devices": records(summary_frame(analysis))},
        "steps": records(uncaptured(analysis.steps(), analysis.trace.schema)),
        "subranges": records(analysis.subranges()),
        "gaps": records(analysis.where_gpu_waited()),
        "ledger": ledger_records(analysis),
        "findings": finding_records(analysis),
        "kernels": kernel_records(analysis),
    }


def report_of(path, step_range: str | None = None) -> dict:
    """The whole pipeline on one export → its report dict; errors as :func:`nsysanalyze.analysis.run`."""
    return run(path, report, step_range)
