"""One number format per quantity, for every output (renderers, finding titles, notes): times in ms with
thousands separators ('12,843.3 ms'; three decimals under 0.05 ms), sizes auto-scaled ('51.2 GB', '8 B'), fractions in %, counts as
integers with separators. Input units: ns, bytes, fractions in [0, 1]."""
from __future__ import annotations

import math


def _missing(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def ms(ns) -> str:
    """ns → '1,234.5 ms'; under 0.05 ms, which one decimal would show as 0.0, three ('0.021 ms'); '-' when
    unknown."""
    if _missing(ns):
        return "-"
    return f"{ns / 1e6:.3f} ms" if 0 < abs(ns) < 50_000 else f"{ns / 1e6:,.1f} ms"


def pct(x) -> str:
    """A fraction → '12.3%'."""
    return "-" if _missing(x) else f"{100 * x:.1f}%"


def size(b) -> str:
    """Bytes → '51.2 GB', '1.3 MB', '2.0 kB', '8 B'."""
    if _missing(b):
        return "-"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(b) >= scale:
            return f"{b / scale:,.1f} {unit}"
    return f"{b:.0f} B"


def count(n) -> str:
    """A count → '1,234'."""
    return "-" if _missing(n) else f"{n:,.0f}"
