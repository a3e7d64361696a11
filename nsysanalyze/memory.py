"""Handing freed memory back to the OS between pipeline stages.

glibc keeps the pages of freed arrays that came from its heaps (every block below its mmap threshold,
which rises to 32 MB as large arrays are freed, and every block freed in a reader thread's arena), so a
stage's temporaries stay in the process's RSS and add to the next stage's peak. ``malloc_trim(0)``
returns the free pages of every arena; it costs a walk of the free lists (milliseconds at 10M rows).
Elsewhere than glibc this does nothing.
"""
from __future__ import annotations

import ctypes
import sys
from functools import cache


@cache
def _malloc_trim():
    """glibc's malloc_trim, or None where there is none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None).malloc_trim  # the symbols the process has loaded: glibc's, when it is glibc
    except (OSError, AttributeError):
        return None


def release_freed_memory() -> None:
    """Return freed heap pages to the OS (glibc ``malloc_trim(0)``; a no-op elsewhere)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
