"""Saved JSON reports (``diagnose --format json FILE``) read back for compare, plot and report.

``read_report(path)`` parses the file and checks the keys and types those consumers use, so a
hand-edited, truncated or foreign JSON file is one line and exit 2, never a traceback. Extra keys
are allowed (newer reports add some); a metric row (a summary device, a step) may hold any keys,
but every value in it must be a finite number, a boolean, null, or (for the named keys) a string;
a step row has at least its step number and window; a finding's evidence holds only such scalars.
Every number is bounded (magnitude at most 2**63, as the int64 ns and byte counts it stands for).
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

from .compare import METRICS
from .errors import InputError
from .trace.open import open_input

SEVERITIES = ("high", "medium", "low", "info")


# Bound on any number in a saved report: ns and byte counts are int64 in the analysis; larger values (a
# 400-digit integer, 1.7e308) are hand edits that would overflow the consumers' arithmetic.
NUMBER_MAX = 2 ** 63


def _number(x) -> bool:
    """A finite int or float of magnitude at most NUMBER_MAX (abs() of any int is exact; NaN compares false)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and abs(x) <= NUMBER_MAX


def _int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and abs(x) <= NUMBER_MAX


def _str(x) -> bool:
    return isinstance(x, str)


@dataclass(frozen=True)
class Rows:
    """A list of metric rows: ``required`` keys (name → check), string-valued keys, numbers elsewhere."""

    required: dict
    strings: frozenset = frozenset()


@dataclass(frozen=True)
class Optional:
    """A key that may be absent (checked when present)."""

    spec: object


def _bool(x) -> bool:
    return isinstance(x, bool)


def _severity(x) -> bool:
    return x in SEVERITIES


def _scalar(x) -> bool:
    return x is None or isinstance(x, (bool, str)) or _number(x)


def _scalars(x) -> bool:
    """An object whose values are numbers, strings, booleans or null (a finding's evidence)."""
    return isinstance(x, dict) and all(_scalar(v) for v in x.values())


TYPE_NAMES = {_number: "a finite number (at most 2**63 in magnitude)", _int: "an integer (at most 2**63)",
              _str: "a string", _bool: "a boolean", _severity: f"one of {SEVERITIES}",
              _scalars: "an object of numbers, strings, booleans or nulls"}


def _opt(check):
    """``check``, or null."""
    def optional(x) -> bool:
        return x is None or check(x)
    TYPE_NAMES[optional] = f"{TYPE_NAMES[check]} or null"
    return optional

REPORT = {
    "format_version": _int,
    "trace": {
        "path": _str,
        "nsys_version": Optional(_opt(_str)),
        "recorder_nsys_version": Optional(_opt(_str)),
        "schema_version": Optional(_opt(_str)),
        "step_family": Optional(_opt(_str)),
        "processes": [{"globalPid": _int, "pid": _opt(_int), "name": _opt(_str)}],
        "devices": [{"globalPid": Optional(_int), "deviceId": _int, "name": _opt(_str)}],
    },
    "notes": [_str],
    "summary": {"devices": Rows({"globalPid": _int, "deviceId": _int, "window_start": _number, "window_end": _number,
                                 **{c: _opt(_number) for m in METRICS if m.is_ratio for c in (m.num, m.den)}})},
    "steps": Rows({"globalPid": _int, "deviceId": _int, "name": _str, "step": _int, "window_ns": _number},
                  frozenset({"name"})),
    "subranges": Optional([{"name": _str, "ns": _number, "share": _opt(_number)}]),
    "kernels": Optional([{"globalPid": _int, "deviceId": _int, "name": _str, "total_ns": _number,
                          "per_step_ns": _opt(_number)}]),
    "findings": [{"rule": _str, "title": _str, "severity": _severity, "confidence": _number, "gain_ns": _opt(_number),
                  "gain_pct": _number, "evidence": _scalars, "fix": _str, "snippet": _str}],
    "gaps": Optional([{"globalPid": _int, "deviceId": _int, "cause_kind": _str, "cause": _str, "ns": _number,
                       "before_launch_ns": _number, "after_sync_ns": _number}]),
    "ledger": Optional([{"globalPid": _int, "deviceId": _int, "scope": _str, "window_ns": _number,
                         "after_fixes_ns": _number, "combined_gain_ns": _number,
                         "rows": [{"kind": _str, "what": _str, "cause": _str, "before_launch": _bool,
                                   "after_sync": _bool, "short_gap": _bool, "ns": _number,
                                   "claimed_by": _opt(_str)}]}]),
}


def read_report(path: str | os.PathLike) -> dict:
    """The single-trace report saved in ``path``; InputError (one line) when it is not one."""
    try:
        with open_input(path) as f:
            doc = json.load(f)
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror})") from None
    except (ValueError, RecursionError) as e:  # invalid JSON or UTF-8; nesting too deep
        raise InputError(f"{path}: not a JSON report ({str(e)[:200]})") from None
    summary = doc.get("summary") if isinstance(doc, dict) else None
    devices = summary.get("devices") if isinstance(summary, dict) else None
    for d in devices if isinstance(devices, list) else []:
        if isinstance(d, dict) and "deviceId" not in d and "device" in d:  # format 1 named it "device"
            d["deviceId"] = d.pop("device")
    problem = check(doc, REPORT, "")
    if problem:
        raise InputError(f"{path}: not a single-trace nsysanalyze JSON report (diagnose --format json FILE): "
                         f"{problem}")
    return doc


def check(value, spec, where: str) -> str | None:
    """The first mismatch of ``value`` against ``spec`` as 'WHERE: expected ...', or None."""
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            return f"{where or 'the document'}: expected an object"
        for key, sub in spec.items():
            if key not in value:
                if isinstance(sub, Optional):
                    continue
                return f"{where}.{key}: missing" if where else f"{key}: missing"
            problem = check(value[key], sub.spec if isinstance(sub, Optional) else sub, f"{where}.{key}".lstrip("."))
            if problem:
                return problem
        return None
    if isinstance(spec, list):
        if not isinstance(value, list):
            return f"{where}: expected a list"
        return next((p for i, v in enumerate(value) if (p := check(v, spec[0], f"{where}[{i}]"))), None)
    if isinstance(spec, Rows):
        if not isinstance(value, list):
            return f"{where}: expected a list"
        return next((p for i, row in enumerate(value) if (p := _check_row(row, spec, f"{where}[{i}]"))), None)
    if spec(value):
        return None
    return f"{where}: expected {TYPE_NAMES.get(spec, 'another type')}, got {_kind(value)}"


def _check_row(row, spec: Rows, where: str) -> str | None:
    problem = check(row, spec.required, where)
    if problem:
        return problem
    for key, v in row.items():
        if key not in spec.strings and not (v is None or isinstance(v, bool) or _number(v)):
            return f"{where}.{key}: expected {TYPE_NAMES[_number]}, got {_kind(v)}"
    return None


def _kind(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) > NUMBER_MAX:
        return "a number beyond 2**63"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "an object"}.get(type(value), type(value).__name__)
