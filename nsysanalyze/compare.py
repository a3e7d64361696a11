"""Compare two analyses (report dicts, see ``render.contract.report``) and evaluate CI gates.

Pure functions: no SQL, no formatting. A metric has two values per trace (ns, bytes, counts,
fractions in [0, 1]):

- ``step``: the median over steps (over the closed steps when there are any; every
  (step, device) row counts once, as in ``metrics.step_medians``);
- ``whole``: the whole capture, all devices together: times, bytes and counts are summed over
  devices, fractions are recomputed from the summed parts, step_time is the span from the first
  to the last GPU activity of any device.

Gate expressions (``--fail-on``): ``NAME OP VALUE`` with OP one of ``> >= < <=``.
A signed VALUE (``+5%``, ``-0.03``, ``+2ms``) is a change from BASE to NEW: relative with ``%``,
absolute otherwise. An unsigned VALUE (``0.3``, ``40%``, ``120ms``, ``1GB``) is a threshold on
NEW's value itself. Times and sizes need a unit (ns us ms s; B kB MB GB) unless the VALUE is a
relative change; for fractions an unsigned % is a level (``40%`` = 0.4). A gate uses the step
medians when both traces have steps, otherwise the whole-capture values. Metric names: ``METRICS``,
and ``kernel:TEXT`` for the time of the kernels whose name contains TEXT (case-sensitive substring;
per step: the matching kernels' ``per_step_ns`` summed, averaged over devices; whole capture: their
``total_ns`` summed), e.g. ``kernel:gemm>+10%``.

A gate on a metric that is null in either trace (not captured, e.g. munmap without OS runtime
tracing) is ``n/a`` and fails the comparison unless ``allow_missing``; a gate on medians of fewer
than ``MIN_STEADY_STEPS`` steady steps is evaluated with a warning in the notes.
"""
from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass

import pandas as pd

from .metrics import steady_steps

NS, BYTES, COUNT, FRACTION = "ns", "bytes", "count", "fraction"


@dataclass(frozen=True)
class Metric:
    """A comparable metric: ``column`` of the step rows; ``den`` makes it a ratio column/den
    for the whole capture (else the column is summed, or ``span`` for the capture window)."""

    name: str
    label: str
    unit: str
    column: str
    num: str | None = None   # whole capture: sum(num) / sum(den)
    den: str | None = None

    @property
    def is_ratio(self) -> bool:
        return self.den is not None


METRICS: list[Metric] = [
    Metric("step_time", "step time (GPU window)", NS, "window_ns"),
    Metric("cpu_step_time", "step time (CPU range)", NS, "cpu_ns"),
    Metric("gpu_idle_fraction", "GPU idle", FRACTION, "idle_fraction", "idle_ns", "window_ns"),
    Metric("gpu_idle", "GPU idle time", NS, "idle_ns"),
    Metric("gpu_busy", "GPU busy time", NS, "busy_ns"),
    Metric("kernel_time", "kernel time", NS, "kernel_ns"),
    Metric("kernel_count", "kernels", COUNT, "kernel_count"),
    Metric("compute_only", "compute only (no copy, no NCCL)", NS, "time_compute_only_ns"),
    Metric("copy_hidden", "copy hidden under compute", NS, "time_copy_hidden_ns"),
    Metric("copy_exposed", "copy exposed", NS, "time_copy_exposed_ns"),
    Metric("nccl_overlapped", "NCCL overlapped with compute", NS, "time_nccl_overlapped_ns"),
    Metric("nccl_exposed", "NCCL exposed", NS, "nccl_exposed_ns"),
    Metric("memcpy_time", "memcpy time", NS, "memcpy_ns"),
    Metric("memcpy_kernel_overlap", "memcpy hidden under kernels", FRACTION, "memcpy_kernel_overlap",
           "memcpy_hidden_ns", "memcpy_ns"),
    Metric("htod_bytes", "HtoD", BYTES, "htod_bytes"),
    Metric("htod_pageable_bytes", "HtoD from pageable memory", BYTES, "htod_pageable_bytes"),
    Metric("htod_time", "HtoD time", NS, "htod_ns"),
    Metric("htod_kernel_overlap", "HtoD hidden under kernels", FRACTION, "htod_kernel_overlap",
           "htod_hidden_ns", "htod_ns"),
    Metric("dtoh_bytes", "DtoH", BYTES, "dtoh_bytes"),
    Metric("dtod_bytes", "DtoD", BYTES, "dtod_bytes"),
    Metric("dtod_count", "DtoD copies", COUNT, "dtod_count"),
    Metric("dtod_time", "DtoD time", NS, "dtod_ns"),
    Metric("ptop_bytes", "PtoP", BYTES, "ptop_bytes"),
    Metric("nccl_time", "NCCL kernel time", NS, "nccl_ns"),
    Metric("nccl_share", "NCCL share", FRACTION, "nccl_share", "nccl_ns", "window_ns"),
    Metric("nccl_count", "NCCL kernels", COUNT, "nccl_count"),
    Metric("launch_calls", "kernel launch API calls", COUNT, "launch_calls"),
    Metric("sync_copy_calls", "sync copy API calls", COUNT, "sync_copy_calls"),
    Metric("sync_wait_calls", "sync wait API calls", COUNT, "sync_wait_calls"),
    Metric("munmap_count", "munmap calls", COUNT, "munmap_count"),
    Metric("munmap_gpu_idle", "GPU idle during munmap", NS, "munmap_gpu_idle_ns"),
]
BY_NAME = {m.name: m for m in METRICS}

UNIT_SCALE = {NS: {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9},
              BYTES: {"b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9},
              COUNT: {}, FRACTION: {"%": 0.01}}
GATE = re.compile(r"^\s*(?P<name>[a-z_][a-z0-9_]*)\s*(?P<op>>=|<=|>|<)\s*(?P<sign>[+-])?\s*"
                  r"(?P<num>\d+(?:\.\d*)?|\.\d+)(?:[eE](?P<exp>[+-]?\d+))?\s*(?P<unit>%|[a-zA-Z]+)?\s*$")
GATE_MAX = 1e18  # largest gate threshold in a metric's unit (ns: 31 years; bytes: 1 EB)
OPS = {">": lambda a, b: a > b, ">=": lambda a, b: a >= b, "<": lambda a, b: a < b, "<=": lambda a, b: a <= b}


KERNEL_PREFIX = "kernel:"
KERNEL_GATE = re.compile(r"^\s*kernel:(?P<text>.+?)\s*(?P<rest>(?:>=|<=|>|<)\s*[+-]?\s*[\d.].*)$")
MIN_STEADY_STEPS = 3
TOP_KERNEL_MOVERS = 10


class GateError(ValueError):
    """A malformed --fail-on expression (the message is one line)."""


@dataclass(frozen=True)
class Gate:
    """A parsed gate: ``kind`` is 'relative' (fraction of base), 'absolute' (change) or 'level' (NEW's value)."""

    expr: str
    metric: str
    op: str
    kind: str
    threshold: float  # in the metric's unit (relative: a fraction, 0.05 = 5%)


UNIT_WORDS = {NS: "a time", BYTES: "a size", COUNT: "a count", FRACTION: "a fraction in [0, 1]"}
UNIT_NAMES = {NS: "ns, us, ms, s", BYTES: "B, kB, MB, GB", COUNT: "none", FRACTION: "none or %"}


def in_metric_unit(expr: str, metric: Metric, op: str, value: float, unit: str | None) -> float:
    """An absolute VALUE (a level or a change) in ``metric``'s unit, checked the same way for every unit:
    the unit must be one of the metric's (``UNIT_SCALE``; a time or size needs one unless the value is 0,
    a count takes none, a fraction takes none or ``%``), and a fraction's value must lie in [0, 1]."""
    units = UNIT_SCALE[metric.unit]
    key = (unit or "").lower()
    needs_unit = metric.unit in (NS, BYTES) and value != 0
    if (key or needs_unit) and key not in units:
        examples = {NS: f"{metric.name}{op}120ms", BYTES: f"{metric.name}{op}1GB", COUNT: f"{metric.name}{op}10",
                    FRACTION: f"{metric.name}{op}0.3 or {metric.name}{op}30%"}[metric.unit]
        what = f"unit {unit!r} does not fit" if unit else "give a unit for"
        raise GateError(f"--fail-on {expr!r}: {what} {metric.name} ({UNIT_WORDS[metric.unit]}; units: "
                        f"{UNIT_NAMES[metric.unit]}), "
                        f"e.g. '{examples}' (a relative change: '{metric.name}{op}+5%')")
    value *= units.get(key, 1)
    if metric.unit == FRACTION and value > 1:
        as_level = (f"write {value / 100:g} or {value:g}%" if not unit and value <= 100
                    else "write a value from 0 to 1 or from 0% to 100%")
        raise GateError(f"--fail-on {expr!r}: {metric.name} is {UNIT_WORDS[FRACTION]} and never exceeds 1: "
                        f"{as_level} (a relative change: '{metric.name}{op}+5%')")
    return value


def parse_gate(expr: str, shown_as: str | None = None) -> Gate:
    """Parse ``step_time>+5%`` and friends; raise GateError with a one-line reason (quoting ``shown_as``,
    the user's text, when given)."""
    kernel = KERNEL_GATE.match(expr)
    if kernel:  # the VALUE is read as for kernel_time (ns); the metric is the kernels matching TEXT
        gate = parse_gate("kernel_time" + kernel["rest"], expr)
        return Gate(expr=expr.strip(), metric=KERNEL_PREFIX + kernel["text"], op=gate.op, kind=gate.kind,
                    threshold=gate.threshold)
    m = GATE.match(expr)
    expr = shown_as or expr
    if not m:
        raise GateError(f"malformed --fail-on expression {expr!r}: expected NAME OP VALUE, "
                        f"e.g. 'step_time>+5%' or 'gpu_idle_fraction>+0.03'")
    name = m["name"]
    if name not in BY_NAME:
        raise GateError(f"unknown metric {name!r} in --fail-on {expr!r} (known: {', '.join(BY_NAME)})")
    metric = BY_NAME[name]
    value = float(m["num"] + (f"e{m['exp']}" if m["exp"] else ""))  # a float parse: 1e99999999 is inf at once
    if m["sign"] is not None and m["unit"] == "%":
        kind, value = "relative", value / 100  # a relative change fits every unit
    else:
        kind, value = "absolute" if m["sign"] else "level", in_metric_unit(expr, metric, m["op"], value, m["unit"])
    if not abs(value) <= GATE_MAX:
        raise GateError(f"--fail-on {expr!r}: value out of range (larger than {GATE_MAX:g})")
    if m["sign"] == "-":
        value = -value
    return Gate(expr=expr.strip(), metric=name, op=m["op"], kind=kind, threshold=value)


# ---- per-trace values ---------------------------------------------------------------------

def metric_values(report: dict) -> pd.DataFrame:
    """Index: metric name; columns ``step`` (median over steps, NaN without steps) and ``whole``."""
    steps = steady_steps(pd.DataFrame(report.get("steps") or []))
    devices = pd.DataFrame(report["summary"]["devices"])
    rows = {}
    for m in METRICS:
        step = float(pd.to_numeric(steps[m.column], errors="coerce").median()) \
            if m.column in steps else math.nan
        rows[m.name] = {"step": step, "whole": _whole(devices, m)}
    return pd.DataFrame.from_dict(rows, orient="index", columns=["step", "whole"])


def _whole(devices: pd.DataFrame, m: Metric) -> float:
    """Whole-capture value of ``m`` over all devices (see the module docstring)."""
    if devices.empty:
        return math.nan
    if m.name == "step_time":
        return float(devices["window_end"].max() - devices["window_start"].min())
    if m.name == "cpu_step_time":
        return math.nan  # the capture has no CPU step
    if m.is_ratio:
        den = _sum(devices, m.den)
        return _sum(devices, m.num) / den if den > 0 else math.nan
    return _sum(devices, m.column)


def _sum(devices: pd.DataFrame, column: str) -> float:
    """Sum of a column over devices; NaN when absent or null on every device (not captured)."""
    if column not in devices:
        return math.nan
    return float(pd.to_numeric(devices[column], errors="coerce").sum(min_count=1))


def kernel_values(report: dict, text: str) -> dict[str, float]:
    """``step`` and ``whole`` time (ns) of the kernels whose name contains ``text`` (see the module
    docstring); NaN when the report has no kernel view (a report saved before it existed)."""
    kernels = pd.DataFrame(report.get("kernels") or [])
    if kernels.empty:
        return {"step": math.nan, "whole": math.nan}
    mine = kernels[kernels["name"].str.contains(text, regex=False)]
    per_device = mine.groupby(["globalPid", "deviceId"])["per_step_ns"].sum(min_count=1)
    devices = kernels.groupby(["globalPid", "deviceId"])["per_step_ns"].count()
    step = per_device.reindex(devices[devices > 0].index).fillna(0.0).mean() if (devices > 0).any() else math.nan
    return {"step": float(step), "whole": float(mine["total_ns"].sum())}


def kernel_movers(base: dict, new: dict, scope: str, limit: int = TOP_KERNEL_MOVERS) -> list[dict]:
    """Kernel names whose time changed most (absolute), per step or whole capture, summed over devices;
    unchanged ones left out (none changed: [])."""
    column = "per_step_ns" if scope == "step" else "total_ns"

    def by_name(report):
        k = pd.DataFrame(report.get("kernels") or [])
        return k.groupby("name")[column].sum(min_count=1) if len(k) else pd.Series(dtype=float)

    b, n = by_name(base), by_name(new)
    both = pd.DataFrame({"base": b, "new": n}).fillna(0.0)
    if both.empty:
        return []
    both["abs"] = both["new"] - both["base"]
    both = both[both["abs"] != 0]  # unchanged kernels are not movers
    both = both.reindex(both["abs"].abs().sort_values(ascending=False, kind="stable").index).head(limit)
    out = []
    for name, row in both.iterrows():
        d_abs, d_rel = delta(row["base"], row["new"])
        out.append({"name": name, "base_ns": _num(row["base"]), "new_ns": _num(row["new"]), "abs": _num(d_abs),
                    "rel": _num(d_rel)})
    return out


def steady_step_count(report: dict) -> int:
    """The fewest steady steps of any (process, device) of the report (0 without steps)."""
    steps = steady_steps(pd.DataFrame(report.get("steps") or []))
    return int(steps.groupby(["globalPid", "deviceId"]).size().min()) if len(steps) else 0


def has_steps(report: dict) -> bool:
    return bool(report.get("steps"))


# ---- deltas, gates, findings --------------------------------------------------------------

def delta(base: float, new: float) -> tuple[float, float]:
    """(new - base, (new - base) / base); relative is +-inf when base is 0 and new is not, NaN when unknown."""
    if _missing(base) or _missing(new):
        return math.nan, math.nan
    d = new - base
    if base == 0:
        return d, 0.0 if d == 0 else math.copysign(math.inf, d)
    return d, d / abs(base)


def _missing(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def gate_values(gate: Gate, report: dict, values: pd.DataFrame, scope: str) -> float:
    """The value a gate reads from one report."""
    if gate.metric.startswith(KERNEL_PREFIX):
        return kernel_values(report, gate.metric[len(KERNEL_PREFIX):])[scope]
    return values.at[gate.metric, scope]


def evaluate(gate: Gate, b: float, n: float, scope: str) -> dict:
    """One gate's verdict from the BASE and NEW values: the measured quantity, whether it tripped
    (None: a value is null, the verdict is ``n/a``)."""
    d_abs, d_rel = delta(b, n)
    measured = {"relative": d_rel, "absolute": d_abs, "level": n}[gate.kind]
    missing = _missing(b) or _missing(n) if gate.kind != "level" else _missing(n)
    tripped = None if missing or _missing(measured) else bool(OPS[gate.op](measured, gate.threshold))
    unit = NS if gate.metric.startswith(KERNEL_PREFIX) else BY_NAME[gate.metric].unit
    return {**asdict(gate), "scope": scope, "unit": unit, "base": _num(b), "new": _num(n),
            "measured": _num(measured), "tripped": tripped, "verdict": VERDICTS[tripped]}


VERDICTS = {True: "tripped", False: "ok", None: "n/a"}


def scope_windows(report: dict) -> dict[int, tuple[str, float]]:
    """deviceId -> (scope, window ns) of the report's ledger (the window its findings' gains are of); the
    first process on a device wins. Empty for saved reports made before the ledger (format_version < 3)."""
    out: dict[int, tuple[str, float]] = {}
    for d in report.get("ledger") or []:
        out.setdefault(int(d["deviceId"]), (d["scope"], float(d["window_ns"])))
    return out


def realized_ns(finding: dict, base: dict, new: dict) -> float | None:
    """How much shorter NEW's window is than BASE's on the finding's device (ns): what the fix delivered,
    when both windows have the same scope (step medians or whole captures); None otherwise."""
    device = finding.get("deviceId")
    b, n = scope_windows(base).get(device), scope_windows(new).get(device)
    if b is None or n is None or b[0] != n[0]:
        return None
    return b[1] - n[1]


def finding_changes(base: dict, new: dict) -> dict[str, list[dict]]:
    """Findings by rule: ``appeared`` (only in NEW), ``disappeared`` (only in BASE; with ``realized_ns``,
    how much shorter NEW's window is, beside the ``gain_ns`` BASE predicted), ``kept`` (both)."""
    def by_rule(report):
        out = {}
        for f in report.get("findings", []):
            out.setdefault(f["rule"], f)  # findings are ranked: keep each rule's largest
        return out

    b, n = by_rule(base), by_rule(new)

    def brief(f, other=None):
        row = {"rule": f["rule"], "title": f["title"], "severity": f["severity"], "gain_ns": f["gain_ns"],
               "gain_pct": f["gain_pct"]}
        if other is not None:
            row.update(base_title=other["title"], base_severity=other["severity"], base_gain_ns=other["gain_ns"],
                       base_gain_pct=other["gain_pct"])
        return row

    return {"appeared": [brief(f) for r, f in n.items() if r not in b],
            "disappeared": [{**brief(f), "realized_ns": _num(realized_ns(f, base, new))}
                            for r, f in b.items() if r not in n],
            "kept": [brief(f, b[r]) for r, f in n.items() if r in b]}


def compare(base: dict, new: dict, gates: list[Gate] = (), allow_missing: bool = False) -> dict:
    """The comparison document: trace headers, per-metric deltas, gates, finding changes, kernel movers.

    ``tripped`` is true when a gate tripped, or when a gate is n/a (a value is null) and not ``allow_missing``.
    """
    vb, vn = metric_values(base), metric_values(new)
    scope = "step" if has_steps(base) and has_steps(new) else "whole"
    rows = []
    for m in METRICS:
        row = {"name": m.name, "label": m.label, "unit": m.unit}
        for s in ("step", "whole"):
            b, n = vb.at[m.name, s], vn.at[m.name, s]
            d_abs, d_rel = delta(b, n)
            row[s] = {"base": _num(b), "new": _num(n), "abs": _num(d_abs), "rel": _num(d_rel)}
        rows.append(row)
    results = [evaluate(g, gate_values(g, base, vb, scope), gate_values(g, new, vn, scope), scope) for g in gates]
    notes = [f"{side} has no steps: gates use the whole-capture values." for side, r in (("BASE", base), ("NEW", new))
             if not has_steps(r)]
    what = "accepted (--allow-missing)" if allow_missing else "fails the comparison (--allow-missing accepts it)"
    notes += [f"gate {r['expr']!r} is n/a: {r['metric']} is null (not captured) in "
              f"{'BASE and NEW' if r['base'] is None and r['new'] is None else 'BASE' if r['base'] is None else 'NEW'}; "
              f"{what}." for r in results if r["tripped"] is None]
    if gates and scope == "step":
        notes += [f"warning: {side} has only {n} steady step(s) per GPU: its medians are noisy "
                  f"(gate on at least {MIN_STEADY_STEPS})." for side, r in (("BASE", base), ("NEW", new))
                  if (n := steady_step_count(r)) < MIN_STEADY_STEPS]
    missing = any(r["tripped"] is None for r in results)
    return {
        "format_version": 3,
        "base": _header(base), "new": _header(new),
        "gate_scope": scope,
        "notes": notes,
        "metrics": rows,
        "gates": results,
        "tripped": any(r["tripped"] for r in results) or (missing and not allow_missing),
        "allow_missing": allow_missing,
        "findings": finding_changes(base, new),
        "kernels": kernel_movers(base, new, scope),
    }


def _header(report: dict) -> dict:
    t = report["trace"]
    return {"path": t["path"], "nsys_version": t.get("nsys_version"), "step_family": t.get("step_family"),
            "steps": len(report.get("steps") or []), "devices": len(t.get("devices") or [])}


def _num(x):
    """JSON-safe number: NaN → None; +-inf kept as a string marker ('inf', '-inf')."""
    if _missing(x):
        return None
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return float(x)
