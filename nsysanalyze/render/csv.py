"""CSV renderer: rows of the JSON contract (summary devices, steps, kernels), one header line, nulls empty."""
from __future__ import annotations

import csv
import io


def render(rows: list[dict]) -> str:
    """``rows`` as CSV; the columns are the union of the rows' keys, in first-seen order."""
    columns = list(dict.fromkeys(k for r in rows for k in r))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in r.items()})
    return buf.getvalue()
