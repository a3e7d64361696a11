"""JSON renderer: the report dict as-is (NaN never appears: it is null).

Reports of up to ``INDENT_UP_TO`` steps are indented for reading; larger ones are written on
one line by the standard library's C encoder (its indented encoder is pure Python and takes
seconds on tens of thousands of steps). Either way it is the same JSON document.
"""
from __future__ import annotations

import json

INDENT_UP_TO = 2000


def _size(report: dict) -> int:
    traces = report.get("traces", [report])
    return sum(len(t.get("steps", ())) for t in traces if isinstance(t, dict))


def render(report: dict) -> str:
    indent = 2 if _size(report) <= INDENT_UP_TO else None
    return json.dumps(report, indent=indent, allow_nan=False, default=str)
