"""Threads of one analysis. numpy (and SQLite, see trace/tables.py) release the GIL in their loops, so
independent blocks of work run side by side; ``diagnose --jobs`` lowers THREADS in each of its processes."""
from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor

THREADS = max(1, min(2, os.cpu_count() or 1))


def ordered_map(fn: Callable, items: Iterable, threads: int | None = None) -> Iterator:
    """``fn(item)`` of each item, in the items' order, on up to ``threads`` (default THREADS) threads; the
    items are taken as the results are, so at most ``threads`` items are in flight (bounded memory)."""
    threads = threads or THREADS
    if threads <= 1:
        yield from map(fn, items)
        return
    with ThreadPoolExecutor(threads) as pool:
        pending: deque = deque()
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) >= threads:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def in_blocks(fn: Callable, blocks: Iterable) -> Iterator:
    """``fn(block)`` of each block of one array's rows (slices or index arrays), in order: on up to THREADS
    threads when called from the main thread and there are several blocks, else in the calling thread (a
    worker's blocks run in it: no pool inside a pool). At most THREADS blocks are in flight, so the temporaries
    stay those of THREADS blocks; the callers' blocks are 2^18-2^19 rows (intervals.QUERY_BLOCK, BLOCK), large
    enough that numpy's loops, which release the GIL, take most of the time."""
    blocks = list(blocks)
    threads = THREADS if len(blocks) > 1 and threading.current_thread() is threading.main_thread() else 1
    return ordered_map(fn, blocks, threads)


def for_blocks(fn: Callable, blocks: Iterable) -> None:
    """:func:`in_blocks` for an ``fn`` that writes its block's part of a result and returns nothing."""
    for _ in in_blocks(fn, blocks):
        pass
