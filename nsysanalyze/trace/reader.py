"""``Trace``: one nsys SQLite export, opened read-only, with cached column loaders (see trace/tables.py)."""
from __future__ import annotations

import os
import sqlite3
import threading
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import InputError
from . import tables
from .open import connect_readonly, readonly_connection, resolve_input
from .schema import Schema, read_schema

__all__ = ["Trace", "open_trace"]


class Trace:
    """One nsys SQLite export, opened read-only; loaders are cached per instance."""

    def __init__(self, path: str | os.PathLike):
        self.source = Path(path)
        self.path = resolve_input(path)
        self._connections: dict[int, sqlite3.Connection] = {threading.get_ident(): connect_readonly(self.path)}
        self._opening, self._closed = threading.Lock(), False
        try:
            self.schema: Schema = read_schema(self.conn, str(self.source))
        except sqlite3.DatabaseError as e:
            self.close()
            raise InputError(f"{self.source}: corrupted or unreadable SQLite file ({e})") from None

    @property
    def conn(self) -> sqlite3.Connection:
        """This thread's read-only connection to the export (the tables are read on threads side by side; one
        connection shared by two threads mixes up SQLite's error state, so a damaged page could surface as a
        wrong row count or a missing row instead of an error)."""
        me = threading.get_ident()
        conn = self._connections.get(me)
        if conn is None:
            with self._opening:
                if self._closed:
                    raise sqlite3.ProgrammingError("Cannot operate on a closed database.")
                conn = self._connections[me] = readonly_connection(self.path)
        return conn

    def close(self) -> None:
        with self._opening:
            self._closed = True
            for conn in self._connections.values():
                conn.close()

    def __enter__(self) -> "Trace":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @cached_property
    def kernels(self) -> pd.DataFrame:
        return tables.kernels(self.conn, self.schema)

    @cached_property
    def memcpys(self) -> pd.DataFrame:
        return tables.memcpys(self.conn, self.schema)

    @cached_property
    def memsets(self) -> pd.DataFrame:
        return tables.memsets(self.conn, self.schema)

    @cached_property
    def runtime(self) -> pd.DataFrame:
        return tables.runtime_calls(self.conn, self.schema)

    def gpu_table(self, kind: str, columns: list[str] | None = None) -> pd.DataFrame:
        """``kind`` ('kernels', 'memcpys', 'memsets') with only the named columns (default: all), id
        columns as int32 where they fit, a process, device or stream column with one value in every row as a
        read-only broadcast view (values as in the cached loaders); not cached."""
        return getattr(tables, kind)(self.conn, self.schema, columns, compact=True)

    def kernel_rows(self, columns: list[str], rowids: tuple[int, int]) -> pd.DataFrame:
        """The kernels with lo <= rowid < hi (``rowids``), as :meth:`gpu_table` gives them; not cached."""
        return tables.kernels(self.conn, self.schema, columns, compact=True, rowids=rowids)

    def kernel_rowids(self) -> tuple[int, int] | None:
        """(lo, hi): the kernels' rowids lie in [lo, hi); None without kernels."""
        return tables.kernel_rowids(self.conn, self.schema)

    def runtime_named(self, name_ids, rowids: tuple[int, int] | None = None) -> pd.DataFrame:
        """Runtime calls (as ``runtime``) whose nameId is among ``name_ids`` (filtered in SQL), correlationId
        and nameId as int32 where they fit; ``rowids`` (lo, hi): only those with lo <= rowid < hi; not cached."""
        return tables.runtime_calls(self.conn, self.schema, name_ids, compact=True, rowids=rowids)

    def runtime_rowids(self) -> tuple[int, int] | None:
        """(lo, hi): the runtime calls' rowids lie in [lo, hi); None without runtime calls."""
        return tables.runtime_rowids(self.conn, self.schema)

    def runtime_named_share(self, name_ids, rowids: tuple[int, int] | None) -> float:
        """The share of the runtime calls in ``rowids`` named by ``name_ids``, from a sample (tables.runtime_named_share)."""
        return tables.runtime_named_share(self.conn, self.schema, name_ids, rowids)

    def runtime_by_correlation(self, correlation_ids, exclude_name_ids=()) -> pd.DataFrame:
        """Runtime calls with the given correlationIds, except those named by ``exclude_name_ids``; not cached."""
        return tables.runtime_calls_by_correlation(self.conn, self.schema, correlation_ids, exclude_name_ids)

    def api_names(self) -> dict[int, str]:
        """StringIds id -> value of every string that can name a CUDA API (starts with 'cu')."""
        return tables.strings_like(self.conn, self.schema, "cu%")

    def patterns_present(self, patterns: list[str]) -> set[str]:
        """Those SQL LIKE ``patterns`` that some string of the export matches (one scan)."""
        return tables.patterns_present(self.conn, self.schema, list(patterns))

    def kernel_names(self, base: bool = False) -> pd.DataFrame:
        """Every kernel's process, device, name id (demangled; ``base``: short), start and end (ns); not cached."""
        return tables.kernel_names(self.conn, self.schema, base)

    def gpu_activities_between(self, global_pid: int, device_id: int, t0: int, t1: int) -> pd.DataFrame:
        """Kernels, memcpys, memsets of one (process, device) starting in [t0, t1), with streamId; not cached."""
        return tables.gpu_activities_between(self.conn, self.schema, global_pid, device_id, t0, t1)

    @cached_property
    def nvtx(self) -> pd.DataFrame:
        return tables.nvtx_ranges(self.conn, self.schema)

    @cached_property
    def nvtx_domain_names(self) -> list[str]:
        """Names of the NVTX domains the capture saw created (any process), sorted."""
        return sorted(set(tables.nvtx_domains(self.conn, self.schema)["domain"]) - {""})

    @cached_property
    def nvtx_event_type_counts(self) -> dict[int, int]:
        return tables.nvtx_event_type_counts(self.conn, self.schema)

    @cached_property
    def nccl_kernel_name_ids(self) -> np.ndarray:
        """StringIds ids of NCCL kernel names (``ncclKernel_*``, ``ncclDevKernel_*``)."""
        return tables.string_ids_like(self.conn, self.schema, "nccl%")

    def osrt(self, names: tuple[str, ...] | None = ("munmap",), threads=None, keep=None, keep_time=None) -> pd.DataFrame:
        """OS runtime calls (start, end, globalTid, name) with these names (None: every call), on ``threads``
        (globalTids; None: every thread), those ``keep_time`` (a test on start and end) and then ``keep`` (chunk
        by chunk) select (:func:`tables.osrt_calls`)."""
        return tables.osrt_calls(self.conn, self.schema, names, threads, keep, keep_time)

    def osrt_and_named(self, names: tuple[str, ...], threads, keep=None, keep_time=None,
                       rowids: tuple[int, int] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
        """``(osrt(names), osrt(None, threads, keep, keep_time))`` from one scan of the OS runtime calls
        (:func:`tables.osrt_calls_and_named`); ``rowids`` (lo, hi): of the rows lo <= rowid < hi only."""
        return tables.osrt_calls_and_named(self.conn, self.schema, names, threads, keep, keep_time, rowids)

    def osrt_rowids(self) -> tuple[int, int] | None:
        """(lo, hi): the OS runtime calls' rowids lie in [lo, hi); None without OS runtime calls."""
        return tables.osrt_rowids(self.conn, self.schema)

    @cached_property
    def mpi(self) -> pd.DataFrame:
        return tables.mpi_calls(self.conn, self.schema)

    def strings(self, ids) -> dict[int, str]:
        return tables.strings(self.conn, self.schema, ids)

    @cached_property
    def processes(self) -> pd.DataFrame:
        return tables.processes(self.conn, self.schema)

    @cached_property
    def thread_names(self) -> pd.DataFrame:
        return tables.thread_names(self.conn, self.schema)

    @cached_property
    def gpus(self) -> pd.DataFrame:
        return tables.gpus(self.conn, self.schema)

    @cached_property
    def session_start_utc_ns(self) -> int | None:
        return tables.session_start_utc_ns(self.conn, self.schema)


def open_trace(path: str | os.PathLike) -> Trace:
    return Trace(path)
