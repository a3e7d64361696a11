"""JSON renderer: the report dict as-is (NaN never appears: it is null).

The text is exactly ``json.dumps(report, indent=2, allow_nan=False, default=str)``; it is built
by a small encoder that handles the report's types directly (dicts with str keys, lists,
str/int/float/bool/None), several times faster than the standard library's pure-Python indented
encoder on reports with tens of thousands of steps. Anything else falls back to ``json.dumps``.
"""
from __future__ import annotations

import json
from json.encoder import encode_basestring_ascii

_FLOAT_REPR = float.__repr__
_INF = float("inf")


def _float(x: float) -> str:
    if x != x or x in (_INF, -_INF):
        raise ValueError("Out of range float values are not JSON compliant: " + repr(x))
    return _FLOAT_REPR(x)


_SCALARS = {
    str: encode_basestring_ascii,
    int: int.__repr__,
    float: _float,
    bool: lambda b: "true" if b else "false",
    type(None): lambda _: "null",
}


class _Fallback(Exception):
    """A value the fast encoder does not handle exactly like json.dumps."""


def _encode(o, indent: str, out: list[str], keys: dict[str, str]) -> None:
    """Append the indented JSON of ``o`` to ``out``; ``keys`` caches encoded dict keys."""
    scalar = _SCALARS.get(type(o))
    if scalar is not None:
        out.append(scalar(o))
        return
    inner = indent + "  "
    if type(o) is dict:
        if not o:
            out.append("{}")
            return
        sep = "{\n" + inner
        for k, v in o.items():
            key = keys.get(k)
            if key is None:
                if type(k) is not str:
                    raise _Fallback
                key = keys[k] = encode_basestring_ascii(k) + ": "
            scalar = _SCALARS.get(type(v))
            if scalar is not None:
                out.append(sep + key + scalar(v))
            else:
                out.append(sep + key)
                _encode(v, inner, out, keys)
            sep = ",\n" + inner
        out.append("\n" + indent + "}")
    elif type(o) in (list, tuple):
        if not o:
            out.append("[]")
            return
        sep = "[\n" + inner
        for v in o:
            out.append(sep)
            _encode(v, inner, out, keys)
            sep = ",\n" + inner
        out.append("\n" + indent + "]")
    else:
        raise _Fallback


def render(report: dict) -> str:
    out: list[str] = []
    try:
        _encode(report, "", out, {})
    except _Fallback:
        return json.dumps(report, indent=2, allow_nan=False, default=str)
    return "".join(out)
