"""Analyze many exports at once (one per rank): a local process pool or a Dask cluster.

Each worker runs the whole pipeline on one file and returns its report dict
(``render.contract.report``); reports come back in the order of the paths.
"""
from __future__ import annotations

import contextlib
import multiprocessing
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from .errors import InputError
from .outputs import Terminated, exit_on_sigterm, raise_terminated


def analyze_job(path: str, step_range: str | None, reader_threads: int | None = None) -> dict:
    """One export -> its report dict; run in a worker (``reader_threads``: the reader and analysis threads it may
    use: trace/tables.py's WORKERS, threads.THREADS)."""
    from . import threads
    from .render.contract import report_of as report
    from .trace import tables

    if reader_threads:
        tables.WORKERS = threads.THREADS = reader_threads
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
    return _in_pool(paths, step_range, jobs, threads, done)


def _in_pool(paths: list[str], step_range: str | None, jobs: int, threads: int,
             done: Callable[[str], None]) -> list[dict]:
    """analyze_job over ``paths`` in ``jobs`` worker processes that never outlive this one: each watches
    its parent (``_watch_parent``); SIGTERM here stops them (``_stop_workers``: each unwinds, so the nsys
    export it runs is stopped and its partial cache file removed) and exits 143; any other exit (error,
    Ctrl-C) stops them too. A worker that dies (OOM killer) is one InputError naming its file."""
    ctx = multiprocessing.get_context()
    started = ctx.SimpleQueue()  # (worker pid, path) as each job starts
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_worker_init, initargs=(started,))
    with exit_on_sigterm():
        try:
            futures = {pool.submit(_pool_job, p, step_range, threads): i for i, p in enumerate(paths)}
            workers = dict(getattr(pool, "_processes", None) or {})  # pid -> Process, for exit codes
            reports: list[dict | None] = [None] * len(paths)
            try:
                for f in as_completed(futures):
                    reports[futures[f]] = f.result()
                    done(paths[futures[f]])
            except BrokenProcessPool:
                raise InputError(_dead_worker(workers, started, paths)) from None
        except BaseException:
            _stop_workers(pool)
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
    return reports  # type: ignore[return-value]


WORKER_GRACE_S = 5.0  # how long a stopped worker may take to unwind before it is killed


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """SIGTERM every live worker — it unwinds (Terminated): the process group of the nsys export it runs is
    killed and the partial export removed (trace.open) — then SIGKILL those still alive after WORKER_GRACE_S."""
    procs = [p for p in list((getattr(pool, "_processes", None) or {}).values()) if p.is_alive()]
    for proc in procs:
        with contextlib.suppress(OSError):
            proc.terminate()
    deadline = time.monotonic() + WORKER_GRACE_S
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))
        if proc.is_alive():
            proc.kill()


_STARTED = None  # in a pool worker: where it announces each job


def _worker_init(started) -> None:
    """Pool worker setup: remember the announcement queue, unwind on SIGTERM (the parent's _stop_workers), and
    exit when the parent is gone."""
    global _STARTED
    _STARTED = started
    signal.signal(signal.SIGTERM, raise_terminated)
    parent = os.getppid()
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()


def _watch_parent(parent: int, every_s: float = 0.2) -> None:
    """Exit this worker at once when its parent dies (even by SIGKILL): it is re-parented, so getppid changes."""
    while os.getppid() == parent:
        time.sleep(every_s)
    os._exit(1)


def _pool_job(path: str, step_range: str | None, reader_threads: int) -> dict:
    _STARTED.put((os.getpid(), path))
    try:
        return analyze_job(path, step_range, reader_threads)
    except Terminated:  # stopped: the job's cleanups have run; leave now, not wait for another job
        os._exit(128 + signal.SIGTERM)


def _dead_worker(workers: dict, started, paths: list[str]) -> str:
    """The one-line message for a worker that died: the file it was analyzing and how it died."""
    running = {}
    while not started.empty():
        pid, path = started.get()
        running[pid] = path  # the last job each worker started
    for proc in workers.values():
        proc.join(timeout=1)
    stopped = (None, 0, -signal.SIGTERM, 128 + signal.SIGTERM)  # alive, done, or stopped by a SIGTERM
    dead = [p for p in workers.values() if p.exitcode not in stopped and p.pid in running]
    how = (f"was killed by signal {-dead[0].exitcode}" if dead and dead[0].exitcode < 0 else
           f"exited with status {dead[0].exitcode}" if dead else "died")
    path = running[dead[0].pid] if dead else next(iter(running.values()), paths[0])
    return (f"{path}: the worker process analyzing it {how} (out of memory?); "
            f"analyze it alone, or with fewer --jobs")


# A Dask scheduler address the CLI accepts: [tcp://]HOST:PORT, HOST a name, an IPv4 address or [IPv6].
SCHEDULER_ADDRESS = re.compile(r"(?:tcp://)?(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?):"
                               r"(?P<port>[0-9]{1,5})")


def check_scheduler_address(address: str) -> None:
    """InputError (one line) unless ``address`` is tcp://HOST:PORT or HOST:PORT with a port in 1..65535
    (other transports need a security or UCX setup that --dask does not take)."""
    m = SCHEDULER_ADDRESS.fullmatch(address)
    if not m or not 0 < int(m["port"]) < 65536:
        raise InputError(f"--dask {address!r}: not a Dask scheduler address; give tcp://HOST:PORT "
                         "(e.g. tcp://10.0.0.5:8786)")


def _on_dask(scheduler, paths: list[str], step_range: str | None, done: Callable[[str], None]) -> list[dict]:
    """Run analyze_job on a Dask cluster; files are sent as absolute paths (the workers must see them).
    Anything that goes wrong reaching it (refused, not a Dask scheduler, a garbled reply) is one line."""
    if isinstance(scheduler, str):
        check_scheduler_address(scheduler)
    try:
        from dask.distributed import Client, as_completed as dask_completed
    except ImportError:
        raise InputError("--dask needs Dask: pip install 'nsysanalyze[dask]'") from None
    try:
        client = scheduler if hasattr(scheduler, "submit") else Client(scheduler, timeout="10s")
    except Exception as e:  # MemoryError too: a listener that is not a scheduler can make it read any length
        raise InputError(f"cannot reach the Dask scheduler at {scheduler} ({type(e).__name__}: {str(e)[:200]})") from None
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
