"""Analyze many exports at once (one per rank): a local process pool or a Dask cluster.

Each worker runs the whole pipeline on one file and returns its report dict
(``Analysis.to_dict()``); reports come back in the order of the paths.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from .errors import InputError


def analyze_job(path: str, step_range: str | None, reader_threads: int | None = None) -> dict:
    """One export -> its report dict; run in a worker (``reader_threads``: SQLite reader threads it may use)."""
    from .analysis import report
    from .trace import tables

    if reader_threads:
        tables.WORKERS = reader_threads
    return report(path, step_range)


def analyze_many(paths: Sequence[str | os.PathLike], step_range: str | None, jobs: int | None = None,
                 scheduler: str | object | None = None, on_done: Callable[[str], None] | None = None) -> list[dict]:
    """Reports of ``paths`` in order: ``jobs`` processes at a time (default: the number of cores), or the
    tasks of a Dask cluster at ``scheduler`` (an address, or a Cluster/Client object). ``on_done(path)``
    is called as each one finishes (progress)."""
    paths = [str(p) for p in paths]
    done = on_done or (lambda _p: None)
    if scheduler is not None:
        return _on_dask(scheduler, paths, step_range, done)
    cores = os.cpu_count() or 1
    jobs = max(1, min(jobs or cores, len(paths)))
    if jobs == 1:
        reports = []
        for p in paths:
            reports.append(analyze_job(p, step_range))
            done(p)
        return reports
    threads = max(1, cores // jobs)
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(analyze_job, p, step_range, threads): i for i, p in enumerate(paths)}
        reports: list[dict | None] = [None] * len(paths)
        try:
            for f in as_completed(futures):
                reports[futures[f]] = f.result()
                done(paths[futures[f]])
        except BaseException:
            for f in futures:
                f.cancel()
            raise
    return reports  # type: ignore[return-value]


def _on_dask(scheduler, paths: list[str], step_range: str | None, done: Callable[[str], None]) -> list[dict]:
    """Run analyze_job on a Dask cluster; files are sent as absolute paths (the workers must see them)."""
    try:
        from dask.distributed import Client, as_completed as dask_completed
    except ImportError:
        raise InputError("--dask needs Dask: pip install 'nsysanalyze[dask]'") from None
    try:
        client = scheduler if hasattr(scheduler, "submit") else Client(scheduler, timeout="10s")
    except (OSError, TimeoutError) as e:
        raise InputError(f"cannot reach the Dask scheduler at {scheduler} ({e})") from None
    try:
        futures = [client.submit(analyze_job, str(Path(p).resolve()), step_range, pure=False) for p in paths]
        index = {f.key: i for i, f in enumerate(futures)}
        reports: list[dict | None] = [None] * len(paths)
        for f in dask_completed(futures):
            i = index[f.key]
            report = f.result()
            report["trace"]["path"] = paths[i]  # as given, like a local run
            reports[i] = report
            done(paths[i])
    finally:
        if client is not scheduler:
            client.close()
    return reports  # type: ignore[return-value]
