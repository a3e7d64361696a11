"""nsysanalyze: per-step GPU metrics and optimization advice from Nsight Systems SQLite exports."""
from .errors import InputError

__version__ = "0.1.0"
__all__ = ["Analysis", "open", "InputError", "Finding", "Evidence", "__version__"]
# Analysis, open, Finding and Evidence are imported on first use (they pull in pandas/numpy), so the
# command line starts without them.
_LAZY = {"Analysis": "analysis", "open": "analysis", "Finding": "rules", "Evidence": "rules"}


def __getattr__(name: str):
    if name in _LAZY:
        from importlib import import_module

        value = getattr(import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
