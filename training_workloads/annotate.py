"""NVTX ranges with a no-op fallback.

``get_annotator(backend)`` returns ``annotate(message, color=None)``, a context-manager factory:

* ``"nvtx"``: the python ``nvtx`` package (``nvtx.annotate``), as the articles use.
  nsys 2023.4 records python ``nvtx`` <= 0.2.11 only (see CAPTURE_NOTES.md); newer releases are
  silently dropped by that nsys, so a warning is printed for them.
* ``"torch"``: ``torch.cuda.nvtx.range`` (no colors).
* ``"none"``: a no-op.
* ``"auto"`` (default, or ``$TRAINING_WORKLOADS_NVTX``): ``nvtx`` when importable, else no-op.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Callable, ContextManager, Optional

Annotator = Callable[..., ContextManager[None]]

BACKENDS = ("auto", "nvtx", "torch", "none")
LAST_RECORDED_NVTX = (0, 2, 11)  # newest python nvtx that nsys 2023.4 records


class _NoOpRange(contextlib.ContextDecorator):
    def __enter__(self) -> "_NoOpRange":
        return self

    def __exit__(self, *exc: object) -> bool:
        return False


_NOOP = _NoOpRange()


def noop_annotate(message: str = "", color: Optional[str] = None, **_: object) -> _NoOpRange:
    return _NOOP


def _version_tuple(version: str) -> tuple[int, ...]:
    out = []
    for part in version.split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        if not digits:
            break
        out.append(int(digits))
    return tuple(out)


def _nvtx_version(mod: object) -> str:
    version = getattr(mod, "__version__", None)
    if version:
        return str(version)
    try:
        from importlib.metadata import version as _v

        return _v("nvtx")
    except Exception:  # pragma: no cover - metadata missing
        return "unknown"


def _nvtx_annotator() -> tuple[Annotator, str]:
    import nvtx  # type: ignore[import-not-found]

    version = _nvtx_version(nvtx)
    vt = _version_tuple(version)
    if vt and vt > LAST_RECORDED_NVTX:
        print(
            f"WARNING: python nvtx {version} is newer than 0.2.11; nsys 2023.4 does not record its "
            "ranges (pip install nvtx==0.2.11, or --nvtx-backend torch)",
            file=sys.stderr,
        )

    def annotate(message: str, color: Optional[str] = None, **kw: object) -> ContextManager[None]:
        return nvtx.annotate(message, color=color, **kw)

    return annotate, f"nvtx {version}"


def _torch_annotator() -> tuple[Annotator, str]:
    import torch

    rng = torch.cuda.nvtx.range

    def annotate(message: str, color: Optional[str] = None, **_: object) -> ContextManager[None]:
        return rng(message)

    return annotate, "torch.cuda.nvtx"


def get_annotator(backend: Optional[str] = None) -> tuple[Annotator, str]:
    """Return ``(annotate, description)`` for ``backend`` (see module doc)."""
    backend = (backend or os.environ.get("TRAINING_WORKLOADS_NVTX") or "auto").lower()
    if backend not in BACKENDS:
        raise ValueError(f"unknown NVTX backend {backend!r}; choose one of {BACKENDS}")
    if backend == "none":
        return noop_annotate, "none"
    if backend == "torch":
        return _torch_annotator()
    try:
        return _nvtx_annotator()
    except ImportError:
        if backend == "nvtx":
            raise
        return noop_annotate, "none (python nvtx not importable)"
