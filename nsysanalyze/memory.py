"""Handing freed memory back to the OS between pipeline stages, and large blocks at once.

glibc keeps the pages of freed arrays that came from its heaps (every block below its mmap threshold,
which rises to 32 MB as large arrays are freed), so a stage's temporaries stay in the process's RSS and add
to the next stage's peak. ``malloc_trim(0)``
returns the free pages of every arena; it costs a walk of the free lists (milliseconds at 10M rows).
:func:`tune_allocator` fixes the threshold at 16 MiB, so every block from 16 MiB up is mapped on its own
and unmapped when freed, also within a stage (10M-activity DDP export: peak 966 -> 886 MiB, the same CPU
time), keeps every thread on the main arena (fewer page faults) and lets the heap keep up to 32 MiB of free
memory at its top for the next blocks (fewer page faults again). Elsewhere than glibc both do nothing.
"""
from __future__ import annotations

import ctypes
import sys
from functools import cache


@cache
def _glibc(symbol: str):
    """A function of glibc by name, or None where there is none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return getattr(ctypes.CDLL(None), symbol)  # the symbols the process has loaded: glibc's, when it is glibc
    except (OSError, AttributeError):
        return None


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8  # mallopt's parameter numbers (glibc malloc.h)
MMAP_THRESHOLD = 16 << 20  # bytes
TRIM_THRESHOLD = 32 << 20  # bytes of free heap top kept for the next blocks instead of handed back at each free


@cache
def tune_allocator() -> None:
    """For the rest of the process: glibc serves blocks of MMAP_THRESHOLD bytes or more by mmap (setting the
    threshold turns off its rise to the largest block freed), and every thread allocates from the one main
    arena: the reader and attribution threads' own arenas handed their freed tops back and page-faulted
    them in again for the next block (10M-activity ResNet export: 2.1M minor page faults and 7 s of system
    time, against 0.6M and 4 s; the same peak). Up to TRIM_THRESHOLD of free memory at the heap's top stays
    for the next blocks below MMAP_THRESHOLD (fixing the mmap threshold leaves glibc's trim threshold at
    128 KiB, so the heap top was handed back and faulted in again at nearly every free): 10M-activity DDP
    export, 0.53-0.73M minor page faults and 14.1-14.4 s against 0.22M and 13.4-13.6 s, peak +10-25 MiB
    (release_freed_memory still hands it back between stages). Once per process, a no-op elsewhere."""
    mallopt = _glibc("mallopt")
    if mallopt is not None:
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
        mallopt(M_ARENA_MAX, 1)


def release_freed_memory() -> None:
    """Return freed heap pages to the OS (glibc ``malloc_trim(0)``; a no-op elsewhere)."""
    trim = _glibc("malloc_trim")
    if trim is not None:
        trim(0)
