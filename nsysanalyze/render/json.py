"""JSON renderer: the report dict as-is (NaN never appears: it is null)."""
from __future__ import annotations

import json


def render(report: dict) -> str:
    return json.dumps(report, indent=2, allow_nan=False, default=str)
