"""Trace access: the only layer that touches SQL. ``Trace`` (trace.reader) wraps one read-only export.

``Trace`` is imported on first use, so that ``trace.open`` (stat checks, read-only connection, .nsys-rep
export: standard library only) loads without pandas, numpy or SQLAlchemy — the CLI starts at once.
"""
from __future__ import annotations

__all__ = ["Trace", "open_trace"]


def __getattr__(name: str):
    if name in __all__:
        from . import reader

        return getattr(reader, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
