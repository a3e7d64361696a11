"""Bounded output for traces with many steps: what the human-readable views show of a report.

The JSON report keeps every step. Tables (text, markdown, HTML) show the first and last steps up
to ``max_steps`` rows and say so in the notes (the summary's step medians still cover every step);
plots draw at most ``max_steps`` bars, each the mean of consecutive steps of one device.
"""
from __future__ import annotations

DEFAULT_MAX_STEPS = 200


def capped(report: dict, max_steps: int) -> dict:
    """``report`` with at most ``max_steps`` step rows: the first half and the last half, and a note."""
    steps = report.get("steps") or []
    if len(steps) <= max_steps:
        return report
    head, tail = (max_steps + 1) // 2, max_steps // 2
    note = (f"Per-step table: the first {head} and last {tail} of {len(steps):,} step rows are shown "
            f"(--max-steps to change; --format json has every step); step medians cover every step.")
    return {**report, "steps": steps[:head] + (steps[-tail:] if tail else []), "notes": [*report["notes"], note]}


def binned(report: dict, max_bars: int) -> dict:
    """``report`` with at most about ``max_bars`` step rows: consecutive steps of each device averaged
    into one row (numeric fields: the mean; name: 'first – last (n steps)'), and a note."""
    steps = report.get("steps") or []
    if len(steps) <= max_bars:
        return report
    import numpy as np
    import pandas as pd

    frame = pd.DataFrame(steps)
    device = frame.groupby(["globalPid", "deviceId"], sort=False)
    per_device = max(1, max_bars // device.ngroups)
    size = -(-device["step"].transform("size") // per_device)
    frame["bin"] = device.cumcount() // size
    numeric = [c for c in frame.columns if c not in ("name", "closed", "bin", "globalPid", "deviceId")
               and pd.api.types.is_numeric_dtype(frame[c])]
    groups = frame.groupby(["globalPid", "deviceId", "bin"], sort=False)
    out = groups[numeric].mean()
    first, last, n = groups["name"].first(), groups["name"].last(), groups.size()
    out["name"] = [f"{a} – {b} ({k} steps)" if k > 1 else str(a) for a, b, k in zip(first, last, n)]
    out["closed"] = groups["closed"].all() if "closed" in frame else True
    out = out.reset_index().drop(columns="bin")
    rows = [{k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in r.items()}
            for r in out.to_dict("records")]
    note = f"Per-step chart: {len(steps):,} step rows drawn as {len(rows)} bars, each the mean of consecutive steps."
    return {**report, "steps": rows, "notes": [*report["notes"], note]}
