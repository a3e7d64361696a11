"""Typed loaders: each returns only the columns the metrics need, as int64 pandas frames.

This module and ``trace/open.py``/``trace/schema.py`` are the only code that speaks SQL.
Times are ns on the export's clock; sizes are bytes. Missing tables give empty frames.
"""
from __future__ import annotations

import itertools
import os
import re
import sqlite3
import threading
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..errors import InputError
from ..threads import ordered_map
from . import pages
from .open import SESSION_START_SQL, readonly_connection
from .schema import NVTX_DOMAIN_CREATE, NVTX_PUSHPOP, NVTX_STARTEND, Schema

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
NVTX = "NVTX_EVENTS"
OSRT = "OSRT_API"

FETCH_ROWS = 1 << 16
# Column-wise fetches (fetch_columns): rows per rowid chunk, reader threads, and the switch
# back to plain row tuples (fetch_int_frame) that tests use as the straightforward reference.
# 2^16 rows: the text of the chunks in flight stays small (10M-kernel load: peak 1,058 -> 1,018 MiB).
CHUNK_ROWS = 1 << 16
INT32_MIN, INT32_MAX = np.iinfo(np.int32).min, np.iinfo(np.int32).max
# Id-like columns that loaders asked for ``compact=True`` keep as int32 when every value fits.
SMALL_COLUMNS = frozenset({"deviceId", "streamId", "nameId", "demangledId", "copyKind", "srcKind", "dstKind", "correlationId"})
WORKERS = max(1, min(2, os.cpu_count() or 1))
COLUMNAR = True
# The page reader (trace/pages.py) first, where it applies; its leaf pages per chunk, in bytes of pages.
PAGES = True
CHUNK_PAGES_BYTES = pages.CHUNK_BYTES
# numpy warns (and will raise) when text does not parse to its end; a short parse is detected by its length.
warnings.filterwarnings("ignore", message="string or file could not be read to its end",
                        category=DeprecationWarning, module=__name__)
# globalTid/globalPid layout: [vm id][pid: 24 bits][tid: 24 bits]; the pid part of a tid is its process.
PROCESS_MASK = ~np.int64(0xFFFFFF)


def pid_of(global_tid: np.ndarray | pd.Series) -> np.ndarray:
    """globalPid of a globalTid (the low 24 tid bits cleared)."""
    return np.asarray(global_tid, dtype=np.int64) & PROCESS_MASK


def fetch_int_frame(conn: sqlite3.Connection, sql: str, columns: list[str], count_sql: str, table: str) -> pd.DataFrame:
    """Run ``sql`` (integer columns only, no NULLs, of ``table``) into one preallocated int64 block, in chunks.

    ``count_sql`` gives the row count so memory is allocated once: 8 bytes x columns x rows.
    """
    n = conn.execute(count_sql).fetchone()[0]
    out = np.empty((n, len(columns)), dtype=np.int64)
    cur = conn.execute(sql)
    filled = 0
    while filled < n:
        rows = cur.fetchmany(FETCH_ROWS)
        if not rows:
            break
        k = min(len(rows), n - filled)
        try:
            out[filled:filled + k] = np.fromiter(
                itertools.chain.from_iterable(rows[:k]), dtype=np.int64, count=k * len(columns)
            ).reshape(k, len(columns))
        except (TypeError, ValueError, OverflowError):
            raise InputError(f"{table}: non-integer values where nsys writes integers ({', '.join(columns)}): "
                             "the export is corrupted") from None
        filled += k
    return pd.DataFrame(out[:filled], columns=columns, copy=False)


def _parse_ints(text: bytes | None, n: int) -> np.ndarray | None:
    """Comma-separated integers (SQLite group_concat) as int64, or None unless exactly ``n`` parse."""
    if n == 0:
        return np.empty(0, dtype=np.int64)
    if text is None:
        return None
    try:
        out = np.fromstring(text, sep=",", dtype=np.int64)
    except ValueError:
        return None
    return out if out.size == n else None


def _database_file(conn: sqlite3.Connection) -> str | None:
    """The path of ``conn``'s main database file, or None for an in-memory database."""
    row = conn.execute("SELECT CAST(file AS BLOB) FROM pragma_database_list WHERE name = 'main'").fetchone()
    return os.fsdecode(row[0]) if row and row[0] else None


def _reader(conn: sqlite3.Connection) -> sqlite3.Connection | None:
    """Another read-only connection to the same file (for a reader thread), or None for in-memory databases."""
    path = _database_file(conn)
    return readonly_connection(path) if path else None


@dataclass(frozen=True)
class Where:
    """A row filter both readers evaluate: every ``not_null`` column is not NULL and every ``within`` column's
    value is among its ids (an empty id list selects no row); ``sql`` is the same filter as an SQL condition."""

    not_null: tuple[str, ...] = ()
    within: tuple[tuple[str, tuple[int, ...]], ...] = ()

    @property
    def sql(self) -> str:
        parts = [f'"{c}" IS NOT NULL' for c in self.not_null] + [f'"{c}" IN ({_id_list(ids)})' for c, ids in self.within]
        return " AND ".join(parts) or "1"

    def columns(self) -> list[str]:
        return list(dict.fromkeys([*self.not_null, *(c for c, _ in self.within)]))


TIMED = Where(not_null=("end", "start"))  # rows with both times: every event table's loaders ask this


def fetch_columns(conn: sqlite3.Connection, table: str, exprs: dict[str, str], where: str | Where = "1",
                  chunk_rows: int | None = None, workers: int | None = None, small=(), steady=(),
                  keep: Callable[[dict[str, np.ndarray]], np.ndarray] | None = None,
                  rowids: tuple[int, int] | None = None,
                  early: tuple[tuple[str, ...], Callable[..., np.ndarray]] | None = None) -> pd.DataFrame:
    """Integer columns (SQL expressions that are never NULL) of the rows of ``table`` matching ``where``, in rowid order.

    Two readers give the same values. With a :class:`Where` filter and expressions that are columns, COALESCE of a
    column with an integer, or integers, the table's pages are decoded straight from the file (trace/pages.py,
    2-3x cheaper than SQLite's own decode and text transfer); whatever that decoder does not handle (and any
    other filter) goes to the SQL reader. SQL: each chunk of rowids is one ``SELECT count(*), group_concat(expr),
    ...`` whose comma-separated text numpy parses in C, about 3x faster than Python row tuples. Either
    reader's chunks are read on up to ``workers`` threads (SQLite releases the GIL while it scans, numpy
    while it decodes; the text comes back as a BLOB so no UTF-8 decoding holds the GIL) and copied in
    rowid order into int64 columns sized by the rowid range (pages past the last row are never
    touched, so they cost no memory). A chunk whose text does not parse back to exactly its row
    count (corrupted values) is re-read as row tuples by :func:`fetch_int_frame`, which raises
    InputError on non-integers. Columns named in ``small`` are int32 while their values fit (int64 from
    the first value that does not). Columns named in ``steady`` (globalPid, deviceId, streamId: one value
    in a one-GPU, one-stream trace) are compared with the first row's values in SQL (one aggregate for all of
    them, cheaper than their text); a chunk where every row has those values sends no text for them, and a
    column that differs in a chunk is sent as text from that chunk on. A steady column that holds one value in
    every row comes back as a read-only broadcast view of that value (no memory: 4 or 8 bytes a row saved).
    ``keep`` (columns of one chunk by name -> mask of the rows to keep) filters each chunk as it arrives, so
    only the kept rows are ever held together. ``early`` (columns, test: their arrays -> row mask): a test on
    those columns alone (plain columns that ``where`` keeps from NULL, e.g. start and end) that comes first:
    ``keep`` is asked only about the rows it keeps (its answer for the others does not matter). The page
    reader tests it before it decodes a row's other columns; else it is tested with ``keep``, on each chunk.
    ``rowids`` (lo, hi) reads only the rows with lo <= rowid < hi.
    """
    names = list(exprs)
    sql_where = where.sql if isinstance(where, Where) else where
    if rowids is not None:
        sql_where = f"rowid >= {int(rowids[0])} AND rowid < {int(rowids[1])} AND ({sql_where})"
    if not COLUMNAR:
        frame = fetch_int_frame(conn, f'SELECT {", ".join(exprs.values())} FROM "{table}" WHERE {sql_where}', names,
                                f'SELECT count(*) FROM "{table}" WHERE {sql_where}', table)
        keep = _after(early, keep)
        if keep is not None:
            frame = frame[keep({name: frame[name].to_numpy() for name in names})].reset_index(drop=True)
        check_summable(frame, table)
        return frame
    workers = workers or WORKERS
    lo, hi = rowid_ends(conn, table)
    if rowids is not None and lo is not None:  # the chunks keep to the asked range
        lo, hi = max(lo, int(rowids[0])), min(hi, int(rowids[1]) - 1)
    sized = lo is not None and (hi - lo + 1) * len(names) <= 1 << 36  # else no rowid, or ids too sparse to size by
    capacity = max(hi - lo + 1, 0) if sized else conn.execute(f'SELECT count(*) FROM "{table}" WHERE {sql_where}').fetchone()[0]
    plan = _page_plan(conn, table, exprs, where) if PAGES and sized and isinstance(where, Where) else None
    if plan is not None:
        try:
            chunks = _PageChunks(plan, names, where, steady, rowids, early)
            columns = chunks.read(capacity, small, keep if chunks.early is not None else _after(early, keep), workers,
                                  table)
        except pages.Unsupported:
            columns = None
        finally:
            plan.table.close()
        if columns is not None:
            return _checked_frame(columns, table)
    chunk_rows = chunk_rows or CHUNK_ROWS
    scopes = ([f"rowid >= {a} AND rowid < {min(a + chunk_rows, hi + 1)} AND " for a in range(lo, hi + 1, chunk_rows)]
              if sized else [""])
    sql = _SqlChunks(conn, table, exprs, sql_where, scopes, steady, lo is not None)
    return _checked_frame(sql.read(capacity, small, _after(early, keep), workers), table)


def _after(early: tuple[tuple[str, ...], Callable[..., np.ndarray]] | None,
           keep: Callable[[dict[str, np.ndarray]], np.ndarray] | None) -> Callable[[dict[str, np.ndarray]], np.ndarray] | None:
    """:func:`fetch_columns`' ``keep`` as one test of a chunk, ``early``'s included (for a reader that has not
    tested ``early`` already)."""
    if early is None:
        return keep
    columns, test = early

    def both(chunk: dict[str, np.ndarray]) -> np.ndarray:
        rows = test(*(chunk[c] for c in columns))
        return rows & keep(chunk) if keep is not None else rows
    return both


def rowid_ends(conn: sqlite3.Connection, table: str) -> tuple[int | None, int | None]:
    """The smallest and largest rowid of ``table`` (None, None: empty, or a table without rowid). Two queries:
    SQLite answers a lone min() or max() of rowid from the b-tree's ends (one query asking both scans the table)."""
    try:
        lo = conn.execute(f'SELECT min(rowid) FROM "{table}"').fetchone()[0]
        hi = conn.execute(f'SELECT max(rowid) FROM "{table}"').fetchone()[0]
    except sqlite3.OperationalError:  # a table without rowid
        return None, None
    return lo, hi


def _checked_frame(columns: dict[str, np.ndarray], table: str) -> pd.DataFrame:
    frame = pd.DataFrame(columns, copy=False)
    check_summable(frame, table)
    return frame


class _InOrder:
    """Chunks of columns copied in chunk order (from any reader thread) into one buffer per column, sized by
    ``capacity`` rows: int32 for ``small`` columns while their values fit; a column that ``steady`` leaves
    unwritten while every chunk so far was a broadcast view of one value (only that value is kept)."""

    def __init__(self, names: list[str], capacity: int, small, unwritten):
        self.names, self.capacity, self.small = names, capacity, small
        self.out = [None if name in unwritten else np.empty(capacity, dtype=np.int32 if name in small else np.int64)
                    for name in names]
        self.one_value: dict[int, int] = {}
        self.lock = threading.Lock()
        self.pending: dict[int, list[np.ndarray]] = {}
        self.next_chunk, self.rows = 0, 0

    def narrow(self, i: int, value: int) -> type:
        return np.int32 if self.names[i] in self.small and INT32_MIN <= value <= INT32_MAX else np.int64

    def add(self, j: int, cols: list[np.ndarray], table: str) -> None:
        with self.lock:
            self.pending[j] = cols
            while self.next_chunk in self.pending:
                self._copy(self.pending.pop(self.next_chunk), table)
                self.next_chunk += 1

    def _copy(self, part: list[np.ndarray], table: str) -> None:
        out, filled = self.out, self.rows
        k = len(part[0]) if part else 0
        if filled + k > self.capacity:
            raise InputError(f"{table}: more rows than its rowid range (the export is corrupted)")
        for i, col in enumerate(part if k else ()):
            if out[i] is None:
                if _one_value(col) and self.one_value.setdefault(i, int(col[0])) == int(col[0]):
                    continue
                value = self.one_value.get(i, 0)  # the rows so far held this value: now written out
                out[i] = np.empty(self.capacity, dtype=self.narrow(i, value))
                out[i][:filled] = value
            if out[i].dtype == np.int32 and (col.min() < INT32_MIN or col.max() > INT32_MAX):
                wide = np.empty(self.capacity, dtype=np.int64)
                wide[:filled] = out[i][:filled]
                out[i] = wide
            out[i][filled:filled + k] = col
        self.rows += k

    def columns(self) -> dict[str, np.ndarray]:
        n = self.rows
        return {name: self.out[i][:n] if self.out[i] is not None else
                np.broadcast_to(np.array(self.one_value.get(i, 0), dtype=self.narrow(i, self.one_value.get(i, 0))), (n,))
                for i, name in enumerate(self.names)}


def _kept(cols: list[np.ndarray], names: list[str], keep) -> list[np.ndarray]:
    """The rows of one chunk's columns that ``keep`` selects (broadcast views stay views)."""
    if keep is None or not len(cols[0]):
        return cols
    rows = np.flatnonzero(keep(dict(zip(names, cols))))
    return [np.broadcast_to(col[:1], rows.shape) if _one_value(col) else col[rows] for col in cols]


def _in_threads(chunks: int, connections: list, read_chunk: Callable) -> None:
    """``read_chunk(connection, j)`` for every chunk j, on one thread per connection, each taking the next chunk
    in order until none is left: no reader runs ahead of the in-order copying, so at most a chunk per reader
    waits to be copied."""
    if len(connections) == 1:
        for j in range(chunks):
            read_chunk(connections[0], j)
        return
    order, taking = iter(range(chunks)), threading.Lock()

    def run(i: int) -> None:
        while True:
            with taking:
                j = next(order, None)
            if j is None:
                return
            read_chunk(connections[i], j)

    with ThreadPoolExecutor(len(connections)) as pool:
        list(pool.map(run, range(len(connections))))


class _SqlChunks:
    """The SQL reader of :func:`fetch_columns`: one ``group_concat`` query per rowid chunk (``scopes``)."""

    def __init__(self, conn, table: str, exprs: dict[str, str], where: str, scopes: list[str], steady, by_rowid: bool):
        self.conn, self.table, self.exprs, self.where, self.scopes = conn, table, exprs, where, scopes
        self.names = list(exprs)
        ranging = [n for n in self.names if n in steady]  # steady columns whose chunks so far held the first row's value
        first = conn.execute(f'SELECT {", ".join(exprs[x] for x in ranging)} FROM "{table}" WHERE {where}'
                             f'{" ORDER BY rowid" if by_rowid else ""} LIMIT 1').fetchone() if ranging else None
        if first is None or any(type(v) is not int for v in first):  # no row, or not integers: nothing is steady
            ranging = []
        self.ranging, self.first_value = ranging, dict(zip(ranging, first or ()))

    def read(self, capacity: int, small, keep, workers: int) -> dict[str, np.ndarray]:
        self.sink = _InOrder(self.names, capacity, small, set(self.ranging))
        self.keep = keep
        # readers of their own (``conn`` may serve another fetch in another thread at the same time)
        readers = [r for r in (_reader(self.conn) for _ in range(min(workers, len(self.scopes)) if workers > 1 else 0)) if r]
        try:
            _in_threads(len(self.scopes), readers or [self.conn], self.chunk)
        finally:
            for c in readers:
                c.close()
        return self.sink.columns()

    def chunk(self, c: sqlite3.Connection, j: int) -> None:
        exprs, names, first_value = self.exprs, self.names, self.first_value
        scope = f'FROM "{self.table}" WHERE {self.scopes[j]}({self.where})'
        rng = list(self.ranging)
        asked = [x for x in names if x not in rng]
        parts = [f"CAST(group_concat({exprs[x]}) AS BLOB)" for x in asked]
        if rng:  # one aggregate for all of them: does any row differ from the first row?
            parts.append(f"max({' OR '.join(f'{exprs[x]} != {first_value[x]}' for x in rng)})")
        n, *values = c.execute(f"SELECT count(*), {', '.join(parts)} {scope}").fetchone()
        got = {x: _parse_ints(t, n) for x, t in zip(asked, values)}
        if rng and values[-1]:  # it does: fetch them as text, and ask later chunks for those that vary as text
            texts = c.execute(f"SELECT {', '.join(f'CAST(group_concat({exprs[x]}) AS BLOB)' for x in rng)} {scope}").fetchone()
            varying = {x: v for x, t in zip(rng, texts) if (v := _parse_ints(t, n)) is None or (v != first_value[x]).any()}
            got.update(varying)
            self.ranging = [x for x in self.ranging if x not in varying]
        for x in rng:
            got.setdefault(x, np.broadcast_to(np.int64(first_value[x]), (n,)))
        cols = [got[name] for name in names]
        if any(x is None for x in cols):
            rows = fetch_int_frame(c, f'SELECT {", ".join(exprs.values())} {scope}', names,
                                   f"SELECT count(*) {scope}", self.table)
            cols = [rows[name].to_numpy() for name in names]
        self.sink.add(j, _kept(cols, names, self.keep), self.table)


_COLUMN = re.compile(r'^"?([A-Za-z_][A-Za-z0-9_]*)"?$')
_COALESCE = re.compile(r'^COALESCE\("([A-Za-z_][A-Za-z0-9_]*)", (-?[0-9]+)\)$')
_INTEGER = re.compile(r"^-?[0-9]+$")


@dataclass
class _PagePlan:
    """What the page reader decodes: the table's leaf pages, and per expression its record field (None: a
    constant) and the integer that replaces a NULL (None: a NULL is not allowed)."""

    table: pages.TablePages
    field: dict[str, int | None]
    default: dict[str, int | None]


def _page_plan(conn: sqlite3.Connection, table: str, exprs: dict[str, str], where: Where) -> _PagePlan | None:
    """A plan for decoding ``exprs`` and ``where`` from the file's pages, or None when they are not all plain
    columns (see :func:`fetch_columns`), the table has generated or rowid-alias columns among them, or the
    database is not a file."""
    path = _database_file(conn)
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone()
    if not path or not root or not root[0]:
        return None
    try:
        info = conn.execute(f'PRAGMA table_xinfo("{table}")').fetchall()  # cid, name, type, notnull, default, pk, hidden
    except sqlite3.DatabaseError:
        return None
    if any(r[6] for r in info):  # generated or hidden columns: not stored as the declared columns are
        return None
    position = {r[1]: i for i, r in enumerate(info)}
    alias = [r[1] for r in info if r[5]]
    alias = alias[0] if len(alias) == 1 and str(info[position[alias[0]]][2]).upper() == "INTEGER" else None
    field, default = {}, {}
    for name, expr in [*exprs.items(), *((f"where:{c}", c) for c in where.columns())]:
        if _INTEGER.match(expr):
            field[name], default[name] = None, int(expr)
            continue
        m = _COLUMN.match(expr) or _COALESCE.match(expr)
        if not m or m.group(1) not in position or m.group(1) == alias:
            return None
        field[name] = position[m.group(1)]
        default[name] = int(m.group(2)) if m.lastindex == 2 else None
    if all(f is None for f in field.values()):  # constants only: no record to count the rows by
        return None
    try:
        return _PagePlan(pages.TablePages(path, root[0]), field, default)
    except (pages.Unsupported, OSError):
        return None


class _PageChunks:
    """The page reader of :func:`fetch_columns`: one block of leaf pages per chunk, decoded by trace/pages.py."""

    def __init__(self, plan: _PagePlan, names: list[str], where: Where, steady, rowids: tuple[int, int] | None,
                 early: tuple[tuple[str, ...], Callable[..., np.ndarray]] | None = None):
        self.plan, self.names, self.where, self.steady = plan, names, where, set(steady)
        self.fields = sorted({f for f in plan.field.values() if f is not None})
        # the early test before the other fields: on columns read as plain columns that may not be NULL
        tested = early is not None and set(early[0]) <= set(where.not_null) and all(
            plan.field.get(c) is not None and plan.default.get(c) is None for c in early[0])
        self.early = (tuple(plan.field[c] for c in early[0]), early[1]) if tested else None
        blocks = plan.table.blocks(CHUNK_PAGES_BYTES, rowids)
        # only the first and last leaf pages of a rowid range can hold rows outside it (the parents' keys
        # bound every page between): the other blocks skip decoding each row's rowid
        self.blocks = [(b, rowids if rowids is not None and j in (0, len(blocks) - 1) else None)
                       for j, b in enumerate(blocks)]
        self.within = [(plan.field[f"where:{c}"], np.asarray(ids, dtype=np.int64)) for c, ids in where.within]

    def read(self, capacity: int, small, keep, workers: int, table: str) -> dict[str, np.ndarray]:
        sink = _InOrder(self.names, capacity, small, self.steady)
        for j, cols in enumerate(ordered_map(self.chunk, self.blocks, max(1, min(workers, len(self.blocks))))):
            sink.add(j, _kept(cols, self.names, keep), table)
        return sink.columns()

    def chunk(self, block: tuple[np.ndarray, tuple[int, int] | None]) -> list[np.ndarray]:
        """One block of leaf pages decoded (with the rowid range its rows are kept to, if any): the rows
        ``where`` keeps, each expression's column."""
        plan, fields = self.plan, self.fields
        pages_of_block, rowids = block
        values, nulls = plan.table.decode(pages_of_block, fields, rowids, self.early)
        by_field = {f: (v, z) for f, v, z in zip(fields, values, nulls)}
        n = len(values[0])
        rows = np.ones(n, dtype=bool)
        for c in self.where.not_null:
            null = by_field[plan.field[f"where:{c}"]][1]
            if null is not None:
                rows &= ~null
        for f, ids in self.within:
            value, null = by_field[f]
            rows &= np.isin(value, ids) if null is None else np.isin(value, ids) & ~null
        picked = None if rows.all() else np.flatnonzero(rows)
        cols = []
        for name in self.names:
            f, d = plan.field[name], plan.default[name]
            if f is None:
                cols.append(np.broadcast_to(np.int64(d), (n if picked is None else picked.size,)))
                continue
            value, null = by_field[f]
            if picked is not None:
                value, null = value[picked], None if null is None else null[picked]
            if null is not None and null.any():
                if d is None:  # a NULL the SQL reader reports as a non-integer value
                    raise pages.Unsupported("NULL in a column that must not hold one")
                value = np.where(null, d, value)
            if name in self.steady and value.size and value.min() == value.max():
                value = np.broadcast_to(value[:1], value.shape)
            cols.append(value)
        return cols


def _one_value(column: np.ndarray) -> bool:
    """Whether ``column`` is a broadcast view of one value (what fetch_columns makes of a steady column)."""
    return column.size > 0 and column.strides == (0,)


# Bound on |timestamps|, on the sum of |durations| and on the sum of |bytes| of one table: the metrics
# add these as int64 (window sums, cumulative sums, differences), which must not wrap around.
SUMMABLE_MAX = 1 << 62


def check_summable(frame: pd.DataFrame, table: str) -> None:
    """Raise InputError when int64 sums over ``frame`` could wrap: timestamps (``start``, ``end``)
    beyond ±2**62, or durations or ``bytes`` whose absolute total reaches 2**62 (corrupted values);
    and when an interval ends before it starts (a negative duration would make every sum nonsense).
    The totals are only computed when rows × largest value could reach the bound."""
    n = len(frame)
    if n == 0:
        return
    lo, hi = {}, {}
    for c in ("start", "end", "bytes"):
        if c in frame:
            values = frame[c].to_numpy()
            lo[c], hi[c] = int(values.min()), int(values.max())
    if any(lo[c] < -SUMMABLE_MAX or hi[c] > SUMMABLE_MAX for c in ("start", "end") if c in lo):
        raise InputError(f"{table}: timestamps beyond ±2**62 ns (the export is corrupted)")
    if "start" in lo and "end" in lo:
        backwards = int(np.count_nonzero(frame["end"].to_numpy() < frame["start"].to_numpy()))
        if backwards:
            raise InputError(f"{table}: {backwards} row(s) end before they start (the export is corrupted)")
    totals = {}
    if "start" in lo and "end" in lo and n * (hi["end"] - lo["start"]) >= SUMMABLE_MAX:
        # no row ends before it starts (checked above): the durations' total is sum(end) - sum(start)
        totals["durations"] = _float_total(frame["end"].to_numpy()) - _float_total(frame["start"].to_numpy())
    if "bytes" in lo and n * max(hi["bytes"], -lo["bytes"]) >= SUMMABLE_MAX:
        values = frame["bytes"].to_numpy()
        totals["byte counts"] = _float_total(values, values > 0) - _float_total(values, values < 0)
    for what, total in totals.items():
        if not total < SUMMABLE_MAX:
            raise InputError(f"{table}: {what} add up past 2**62 and would overflow int64 sums "
                             "(the export is corrupted)")


def _float_total(values: np.ndarray, where: np.ndarray | bool = True) -> float:
    """Sum of ``values`` (where ``where``) as float64, cast a buffer at a time (no float copy of the column).
    Its rounding error, about (rows / 8192) x 2**-53 of the sum of |values| (numpy adds each buffer pairwise), stays
    far below the factor of 2 between SUMMABLE_MAX and int64's limit for any table of timestamps within ±2**62."""
    return float(np.sum(values, dtype=np.float64, where=where))


def _empty(columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame({c: np.empty(0, dtype=np.int64) for c in columns})


ACTIVITY_BASE = ["start", "end", "deviceId", "streamId", "correlationId", "globalPid"]


def _activity(conn: sqlite3.Connection, schema: Schema, table: str, extra: dict[str, tuple[str, str]],
              columns: list[str] | None = None, compact: bool = False,
              rowids: tuple[int, int] | None = None) -> pd.DataFrame:
    """Rows of a CUPTI GPU activity table with the common columns plus ``extra`` (output name -> (table
    column, default when the table lacks it)).

    ``columns`` (output names) loads only those, in that order; ``compact`` keeps id-like columns
    (SMALL_COLUMNS) as int32 when they fit; ``rowids`` (lo, hi): only the rows lo <= rowid < hi.
    """
    sql_of = {c: schema.col_or(table, c, "0") for c in ACTIVITY_BASE}
    sql_of.update({name: schema.col_or(table, c, d) for name, (c, d) in extra.items()})
    names = columns or list(sql_of)
    if not schema.has(table, "start", "end"):
        return _empty(names)
    return fetch_columns(conn, table, {c: sql_of[c] for c in names}, TIMED, small=SMALL_COLUMNS if compact else (),
                         steady=("globalPid", "deviceId", "streamId"), rowids=rowids)


def kernels(conn: sqlite3.Connection, schema: Schema, columns: list[str] | None = None,
            compact: bool = False, rowids: tuple[int, int] | None = None) -> pd.DataFrame:
    """Kernels: start, end, deviceId, streamId, correlationId, globalPid, nameId (StringIds id of shortName),
    demangledId (of the name ``nsys stats`` shows: :func:`kernel_name_column`).

    ``columns`` loads only the named ones (in that order); ``compact``: id columns as int32 when they fit;
    ``rowids`` (lo, hi): only the rows lo <= rowid < hi.
    """
    short = "shortName" if schema.has(KERNEL, "shortName") else "demangledName"
    return _activity(conn, schema, KERNEL, {"nameId": (short, "-1"), "demangledId": (kernel_name_column(schema) or short, "-1")},
                     columns, compact, rowids)


def memcpys(conn: sqlite3.Connection, schema: Schema, columns: list[str] | None = None,
            compact: bool = False) -> pd.DataFrame:
    """Memcpys: common columns + bytes, copyKind, srcKind, dstKind (ids, see schema.COPY_*/MEM_*; -1 unknown)."""
    return _activity(conn, schema, MEMCPY, {"bytes": ("bytes", "0"), "copyKind": ("copyKind", "0"),
                                            "srcKind": ("srcKind", "-1"), "dstKind": ("dstKind", "-1")}, columns, compact)


def memsets(conn: sqlite3.Connection, schema: Schema, columns: list[str] | None = None,
            compact: bool = False) -> pd.DataFrame:
    """Memsets: common columns + bytes."""
    return _activity(conn, schema, MEMSET, {"bytes": ("bytes", "0")}, columns, compact)


RUNTIME_COLUMNS = (("start", "0"), ("end", "0"), ("globalTid", "0"), ("correlationId", "0"), ("nameId", "-1"))


def _ids(ids) -> tuple[int, ...]:
    return tuple(sorted({int(i) for i in ids}))


def _id_list(ids) -> str:
    return ",".join(str(i) for i in _ids(ids)) or "NULL"


def runtime_calls(conn: sqlite3.Connection, schema: Schema, name_ids=None, compact: bool = False,
                  rowids: tuple[int, int] | None = None) -> pd.DataFrame:
    """CUDA runtime/driver API calls: start, end, globalTid, correlationId, nameId.

    With ``name_ids``, only calls whose nameId is among them (the filter runs in SQL);
    ``compact``: correlationId and nameId as int32 when they fit; ``rowids`` (lo, hi): only the rows
    lo <= rowid < hi.
    """
    columns = [c for c, _ in RUNTIME_COLUMNS]
    if not schema.has(RUNTIME, *columns):
        return _empty(columns)
    where = TIMED if name_ids is None else Where(TIMED.not_null, (("nameId", _ids(name_ids)),))
    return fetch_columns(conn, RUNTIME, {c: schema.col_or(RUNTIME, c, d) for c, d in RUNTIME_COLUMNS}, where,
                         small=SMALL_COLUMNS if compact else (), rowids=rowids)


def runtime_named_share(conn: sqlite3.Connection, schema: Schema, name_ids, rowids: tuple[int, int] | None,
                        samples: int = 4096) -> float:
    """The share of the runtime calls whose nameId is among ``name_ids``, estimated from the rows at ``samples``
    evenly spaced rowids of ``rowids`` [lo, hi) (one rowid lookup each; with 4096 rows found, its standard error
    is at most 0.8 points); 0.0 without rows."""
    if rowids is None or not schema.has(RUNTIME, "nameId"):
        return 0.0
    spaced = np.unique(np.linspace(rowids[0], rowids[1] - 1, samples).astype(np.int64))
    found = np.array([n for (n,) in conn.execute(
        f"SELECT coalesce(nameId, -1) FROM {RUNTIME} WHERE rowid IN ({','.join(map(str, spaced))})")], dtype=np.int64)
    return float(np.isin(found, _ids(name_ids)).mean()) if found.size else 0.0


def runtime_calls_by_correlation(conn: sqlite3.Connection, schema: Schema, correlation_ids,
                                 exclude_name_ids=()) -> pd.DataFrame:
    """Runtime calls (as :func:`runtime_calls`) whose correlationId is among ``correlation_ids`` and
    whose nameId is not in ``exclude_name_ids`` (the ids go through a temporary table)."""
    columns = [c for c, _ in RUNTIME_COLUMNS]
    corr = np.unique(np.asarray(correlation_ids, dtype=np.int64))
    if not schema.has(RUNTIME, *columns) or corr.size == 0:
        return _empty(columns)
    conn.execute("CREATE TEMP TABLE IF NOT EXISTS nsysanalyze_corr(id INTEGER PRIMARY KEY)")
    try:
        conn.executemany("INSERT INTO temp.nsysanalyze_corr VALUES (?)", ((int(c),) for c in corr))
        where = (f"{TIMED.sql} AND {schema.col_or(RUNTIME, 'correlationId', '0')} IN "
                 f"(SELECT id FROM temp.nsysanalyze_corr) AND nameId NOT IN ({_id_list(exclude_name_ids)})")
        return fetch_columns(conn, RUNTIME, {c: schema.col_or(RUNTIME, c, d) for c, d in RUNTIME_COLUMNS},
                             where, workers=1)
    finally:
        conn.execute("DROP TABLE temp.nsysanalyze_corr")


def strings(conn: sqlite3.Connection, schema: Schema, ids) -> dict[int, str]:
    """StringIds values for the given ids."""
    ids = sorted({int(i) for i in ids if i >= 0})
    if not ids or not schema.has("StringIds", "id", "value"):
        return {}
    out: dict[int, str] = {}
    for chunk in range(0, len(ids), 500):
        part = ids[chunk:chunk + 500]
        q = f"SELECT id, value FROM StringIds WHERE id IN ({','.join('?' * len(part))}) AND value IS NOT NULL"
        out.update({int(i): str(v) for i, v in conn.execute(q, part)})
    return out


def string_ids_like(conn: sqlite3.Connection, schema: Schema, pattern: str) -> np.ndarray:
    """Ids of StringIds whose value matches a SQL LIKE pattern (ASCII case-insensitive)."""
    if not schema.has("StringIds", "id", "value"):
        return np.empty(0, dtype=np.int64)
    return np.array([r[0] for r in conn.execute("SELECT id FROM StringIds WHERE value LIKE ?", (pattern,))],
                    dtype=np.int64)


def patterns_present(conn: sqlite3.Connection, schema: Schema, patterns: list[str]) -> set[str]:
    """Those SQL LIKE ``patterns`` that some StringIds value matches, in one scan of the table."""
    if not schema.has("StringIds", "value") or not patterns:
        return set()
    row = conn.execute("SELECT " + ", ".join(["MAX(value LIKE ?)"] * len(patterns)) + " FROM StringIds", patterns).fetchone()
    return {p for p, hit in zip(patterns, row) if hit}


def strings_like(conn: sqlite3.Connection, schema: Schema, pattern: str) -> dict[int, str]:
    """StringIds id -> value for values matching a SQL LIKE pattern (ASCII case-insensitive)."""
    if not schema.has("StringIds", "id", "value"):
        return {}
    return {int(i): str(v) for i, v in conn.execute("SELECT id, value FROM StringIds WHERE value LIKE ?", (pattern,))}


def nvtx_ranges(conn: sqlite3.Connection, schema: Schema) -> pd.DataFrame:
    """Closed NVTX ranges (push/pop and start/end): start, end, globalTid, endGlobalTid, domainId, name, domain.

    name = COALESCE(StringIds.value at textId, text); domain = the domain's name from its create
    row in the same process ('' for the default domain or when the create row was not captured).
    Read column-wise in chunks (:func:`fetch_columns`): the integer columns and textId, then the
    distinct names once; ``name`` and ``domain`` hold shared string objects (8 bytes a row), so
    millions of ranges stay small.
    """
    columns = ["start", "end", "globalTid", "endGlobalTid", "domainId", "name", "domain"]
    if not schema.has(NVTX, "start", "end", "eventType"):
        return pd.DataFrame({c: [] for c in columns})
    has_textid = schema.has(NVTX, "textId") and schema.has("StringIds", "id", "value")
    tid = "COALESCE(globalTid, 0)"
    exprs = {"start": "start", "end": '"end"', "globalTid": tid,
             "endGlobalTid": f"COALESCE(endGlobalTid, {tid})" if schema.has(NVTX, "endGlobalTid") else tid,
             "domainId": "COALESCE(domainId, 0)" if schema.has(NVTX, "domainId") else "0",
             "textId": "COALESCE(textId, -1)" if has_textid else "-1"}
    where = f'eventType IN ({NVTX_PUSHPOP}, {NVTX_STARTEND}) AND "end" IS NOT NULL AND "end" >= start'
    df = fetch_columns(conn, NVTX, exprs, where, small=("domainId", "textId"), steady=("globalTid", "domainId"))
    text_id = df.pop("textId").to_numpy()
    found = strings(conn, schema, np.unique(text_id[text_id >= 0])) if has_textid else {}
    ids = np.array(sorted(found), dtype=np.int64)
    names = [found[i] for i in ids.tolist()]
    code = np.full(len(df), -1, dtype=np.int64)
    if ids.size:
        pos = np.minimum(np.searchsorted(ids, text_id), ids.size - 1)
        hit = ids[pos] == text_id
        code[hit] = pos[hit]
        del pos, hit
    by_text = np.flatnonzero(code < 0)  # no string at textId: the row's own text ('' when none)
    if by_text.size:
        no_string = ("(textId IS NULL OR NOT EXISTS (SELECT 1 FROM StringIds s WHERE s.id = textId "
                     "AND s.value IS NOT NULL))" if has_textid else "1")
        text = "COALESCE(text, '')" if schema.has(NVTX, "text") else "''"
        texts = [r[0] for r in conn.execute(f"SELECT {text} FROM {NVTX} WHERE {where} AND {no_string}")]
        if len(texts) != by_text.size:
            raise InputError(f"{NVTX}: range names changed while reading (the export is corrupted)")
        codes, uniques = pd.factorize(np.array(texts, dtype=object))
        code[by_text] = codes + len(names)
        names += list(uniques)
    del text_id
    df["name"] = np.array(names, dtype=object)[code] if len(df) else np.empty(0, dtype=object)
    domains = nvtx_domains(conn, schema)
    domain = np.full(len(df), "", dtype=object)
    named = np.flatnonzero(df["domainId"].to_numpy() != 0) if len(domains) else np.empty(0, dtype=np.int64)
    if named.size:
        key = pd.MultiIndex.from_arrays([pid_of(df["globalTid"].to_numpy()[named]), df["domainId"].to_numpy()[named]])
        lookup = pd.Series(domains["domain"].values,
                           index=pd.MultiIndex.from_arrays([domains["globalPid"], domains["domainId"]]))
        lookup = lookup[~lookup.index.duplicated()]
        domain[named] = lookup.reindex(key).fillna("").to_numpy()
    df["domain"] = domain
    return df[columns].astype({"domainId": np.int64, "name": str, "domain": str})


def nvtx_domains(conn: sqlite3.Connection, schema: Schema) -> pd.DataFrame:
    """NVTX domains created per process: globalPid, domainId, domain (name)."""
    if not schema.has(NVTX, "eventType", "domainId", "text"):
        return pd.DataFrame({"globalPid": [], "domainId": [], "domain": []})
    rows = conn.execute(
        f"SELECT COALESCE(globalTid, 0), domainId, COALESCE(text, '') FROM {NVTX} WHERE eventType = {NVTX_DOMAIN_CREATE}"
    ).fetchall()
    df = pd.DataFrame(rows, columns=["globalTid", "domainId", "domain"])
    return pd.DataFrame({"globalPid": pid_of(df["globalTid"]), "domainId": df["domainId"].astype(np.int64),
                         "domain": df["domain"].astype(str)})


def nvtx_event_type_counts(conn: sqlite3.Connection, schema: Schema) -> dict[int, int]:
    """Rows of NVTX_EVENTS per eventType (used to explain traces whose ranges were dropped)."""
    if not schema.has(NVTX, "eventType"):
        return {}
    return {int(t): int(n) for t, n in conn.execute(f"SELECT eventType, count(*) FROM {NVTX} GROUP BY eventType")}


OSRT_COLUMNS = ["start", "end", "globalTid", "name"]


def osrt_calls(conn: sqlite3.Connection, schema: Schema, names: tuple[str, ...] | None, threads=None,
               keep: Callable[[dict[str, np.ndarray]], np.ndarray] | None = None,
               keep_time: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
               rowids: tuple[int, int] | None = None) -> pd.DataFrame:
    """OS runtime calls with the given names (e.g. munmap; None: every call): start, end, globalTid, name
    (categorical: a trace's millions of calls have a few dozen names). ``threads`` (globalTids) keeps only
    the calls of those threads (in SQL); ``keep_time`` (start, end -> row mask) keeps calls before their other
    columns are decoded, and ``keep`` (start, end, globalTid arrays of a chunk -> row mask; asked only about the
    calls ``keep_time`` keeps) filters each chunk as it is read (:func:`fetch_columns`), so only the kept calls
    are ever held; ``rowids``
    (lo, hi): only the rows lo <= rowid < hi. Read column-wise; the names once per distinct nameId; calls
    whose nameId has no string are left out."""
    if not _has_osrt(schema):
        return _no_osrt_calls()
    within = []
    if names is not None:
        ids = _name_ids(conn, names)
        if not ids:  # no such name in the export: no call can have it
            return _no_osrt_calls()
        within.append(("nameId", ids))
    if threads is not None:
        if not len(threads):
            return _no_osrt_calls()
        within.append(("globalTid", _ids(threads)))
    early = (("start", "end"), keep_time) if keep_time is not None else None
    return _named(conn, schema, _osrt_rows(conn, tuple(within), keep, early, rowids))


def _rowid_span(conn: sqlite3.Connection, table: str, present: bool) -> tuple[int, int] | None:
    """(lo, hi): ``table``'s rowids are lo <= rowid < hi (:func:`rowid_ends`); None when not ``present`` or empty."""
    lo, hi = rowid_ends(conn, table) if present else (None, None)
    return None if lo is None else (int(lo), int(hi) + 1)


def kernel_rowids(conn: sqlite3.Connection, schema: Schema) -> tuple[int, int] | None:
    """(lo, hi): the kernel table's rowids (:func:`_rowid_span`); None without kernels."""
    return _rowid_span(conn, KERNEL, schema.has(KERNEL, "start", "end"))


def runtime_rowids(conn: sqlite3.Connection, schema: Schema) -> tuple[int, int] | None:
    """(lo, hi): the CUDA runtime table's rowids (:func:`_rowid_span`); None without runtime calls."""
    return _rowid_span(conn, RUNTIME, schema.has(RUNTIME, *(c for c, _ in RUNTIME_COLUMNS)))


def osrt_rowids(conn: sqlite3.Connection, schema: Schema) -> tuple[int, int] | None:
    """(lo, hi): the OS runtime table's rowids (:func:`_rowid_span`); None without OS runtime calls."""
    return _rowid_span(conn, OSRT, _has_osrt(schema))


def osrt_calls_and_named(conn: sqlite3.Connection, schema: Schema, names: tuple[str, ...], threads,
                         keep: Callable[[dict[str, np.ndarray]], np.ndarray] | None = None,
                         keep_time: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
                         rowids: tuple[int, int] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(osrt_calls(names), osrt_calls(None, threads, keep, keep_time))`` from one scan of the table instead
    of two: the calls either selects are read together (a call is kept when it has one of the names or
    passes the thread, ``keep_time`` and ``keep`` tests) and split after, a column at a time. The same rows,
    in the same order, as the two reads (a test of a row depends on that row alone); ``rowids`` as there."""
    ids = _name_ids(conn, names) if _has_osrt(schema) else ()
    if not ids or threads is None or not len(threads):  # one of the two reads is empty or reads every call
        return (osrt_calls(conn, schema, names, rowids=rowids),
                osrt_calls(conn, schema, None, threads, keep, keep_time, rowids))
    named_ids, tids = np.asarray(ids, dtype=np.int64), np.asarray(_ids(threads), dtype=np.int64)

    def selected(rows: dict[str, np.ndarray]) -> np.ndarray:  # of the rows keep_time keeps
        mask = np.isin(rows["globalTid"], tids)
        return mask & keep(rows) if keep is not None else mask

    early = None
    if keep_time is not None:
        early = (("start", "end", "nameId"), lambda s, e, name_id: np.isin(name_id, named_ids) | keep_time(s, e))
    rows = _osrt_rows(conn, (), lambda chunk: np.isin(chunk["nameId"], named_ids) | selected(chunk), early, rowids)
    columns = {c: rows.pop(c).to_numpy() for c in list(rows.columns)}
    del rows
    is_named = np.isin(columns["nameId"], named_ids)
    named_rows = np.flatnonzero(is_named)
    mask = ~is_named  # every call kept without a name was selected: only the named ones are tested again
    del is_named
    named_columns = {c: v[named_rows] for c, v in columns.items()}
    mask[named_rows] = selected(named_columns) & (keep_time(named_columns["start"], named_columns["end"])
                                                  if keep_time is not None else True)
    selected_rows = None if mask.all() else np.flatnonzero(mask)
    del mask
    named, chosen = {}, {}
    for c in list(columns):
        values = columns.pop(c)
        named[c] = values[named_rows]
        chosen[c] = values if selected_rows is None else values[selected_rows]
    return (_named(conn, schema, pd.DataFrame(named, copy=False)),
            _named(conn, schema, pd.DataFrame(chosen, copy=False)))


def _has_osrt(schema: Schema) -> bool:
    return schema.has(OSRT, "start", "end", "globalTid", "nameId") and schema.has("StringIds", "id", "value")


def _no_osrt_calls() -> pd.DataFrame:
    return pd.DataFrame({c: [] for c in OSRT_COLUMNS}).astype({"start": np.int64, "end": np.int64,
                                                                "globalTid": np.int64})


def _name_ids(conn: sqlite3.Connection, names: tuple[str, ...]) -> tuple[int, ...]:
    """The StringIds ids of these names."""
    return _ids(r[0] for r in conn.execute(f"SELECT id FROM StringIds WHERE value IN ({','.join('?' * len(names))})",
                                           names))


def _osrt_rows(conn: sqlite3.Connection, within: tuple, keep, early, rowids: tuple[int, int] | None = None) -> pd.DataFrame:
    """The OS runtime calls' start, end, globalTid and nameId (:func:`fetch_columns`: every column not NULL,
    ``within``, ``keep``, ``early``, ``rowids``)."""
    where = Where(("end", "start", "globalTid", "nameId"), within)
    return fetch_columns(conn, OSRT, {"start": "start", "end": '"end"', "globalTid": "globalTid", "nameId": "nameId"},
                         where, small=("nameId",), steady=("globalTid",), keep=keep, early=early, rowids=rowids)


def _named(conn: sqlite3.Connection, schema: Schema, df: pd.DataFrame) -> pd.DataFrame:
    """OS runtime calls (:func:`_osrt_rows`) with their names (categorical) for nameId; the calls whose nameId
    has no string are left out."""
    name_id = df.pop("nameId").to_numpy()
    found = strings(conn, schema, np.unique(name_id))
    ids = np.array(sorted(found), dtype=np.int64)
    categories, code_of_id = np.unique(np.array([found[i] for i in ids.tolist()], dtype=object), return_inverse=True)
    code = _codes_of_ids(name_id, ids, code_of_id)
    del name_id
    named = code >= 0
    if not named.all():  # no string at its nameId: left out, as a join with StringIds leaves it
        df, code = df[named].reset_index(drop=True), code[named]
    df["name"] = pd.Categorical.from_codes(code, categories=categories)
    return df[OSRT_COLUMNS]


def _codes_of_ids(values: np.ndarray, ids: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Per value, ``codes[i]`` where ``ids[i]`` (sorted, unique) equals it, else -1: int16 through a lookup
    table when the ids are small and few (2 bytes a row, no int64 temporaries), else a sorted search."""
    if ids.size and ids[0] >= 0 and ids[-1] < 1 << 24 and codes.size < 1 << 15:
        table = np.full(int(ids[-1]) + 1, -1, dtype=np.int16)
        table[ids] = codes
        inside = (values >= 0) & (values <= ids[-1])
        return np.where(inside, table[np.where(inside, values, 0)], np.int16(-1)).astype(np.int16, copy=False)
    pos = np.minimum(np.searchsorted(ids, values), max(ids.size - 1, 0))
    return np.where(ids[pos] == values, codes[pos], -1) if ids.size else np.full(values.size, -1)


MPI_EVENT_TABLES = ("MPI_COLLECTIVES_EVENTS", "MPI_P2P_EVENTS", "MPI_START_WAIT_EVENTS", "MPI_OTHER_EVENTS")


def mpi_calls(conn: sqlite3.Connection, schema: Schema) -> pd.DataFrame:
    """MPI calls of nsys' MPI trace (--trace=mpi; its MPI_*_EVENTS tables): start, end, globalTid, name (the
    call, e.g. MPI_Allreduce, from StringIds by textId). MPI calls are few: read as rows."""
    columns = ["start", "end", "globalTid", "name"]
    parts = []
    for table in MPI_EVENT_TABLES:
        if schema.has(table, "start", "end", "globalTid", "textId") and schema.has("StringIds", "id", "value"):
            parts += conn.execute(f'SELECT m.start, m."end", m.globalTid, s.value FROM "{table}" m JOIN StringIds s '
                                  'ON s.id = m.textId WHERE m.start IS NOT NULL AND m."end" IS NOT NULL').fetchall()
    frame = pd.DataFrame(parts, columns=columns)
    return frame.astype({"start": np.int64, "end": np.int64, "globalTid": np.int64, "name": object})


def processes(conn: sqlite3.Connection, schema: Schema) -> pd.DataFrame:
    """Processes: globalPid, pid, name."""
    if not schema.has("PROCESSES", "globalPid", "pid", "name"):
        return pd.DataFrame({"globalPid": [], "pid": [], "name": []})
    rows = conn.execute("SELECT globalPid, pid, COALESCE(name, '') FROM PROCESSES").fetchall()
    return pd.DataFrame(rows, columns=["globalPid", "pid", "name"])


def thread_names(conn: sqlite3.Connection, schema: Schema) -> pd.DataFrame:
    """Named threads: globalTid, name (ThreadNames; every thread of the host in some captures)."""
    if not schema.has("ThreadNames", "nameId", "globalTid") or not schema.has("StringIds", "id", "value"):
        return pd.DataFrame({"globalTid": [], "name": []})
    rows = conn.execute("SELECT t.globalTid, s.value FROM ThreadNames t JOIN StringIds s ON s.id = t.nameId").fetchall()
    return pd.DataFrame(rows, columns=["globalTid", "name"])


def gpus(conn: sqlite3.Connection, schema: Schema) -> pd.DataFrame:
    """GPUs known to the capture: deviceId (CUDA ordinal; None when the recorder left it out), name."""
    rows = []
    for table, id_col in (("TARGET_INFO_GPU", "cuDevice"), ("TARGET_INFO_GPU", "id"), ("TARGET_INFO_CUDA_DEVICE", "cudaId")):
        if schema.has(table, id_col, "name"):
            rows = conn.execute(f"SELECT DISTINCT {id_col}, name FROM {table}").fetchall()
            if any(i is not None for i, _ in rows):  # old recorders (2019/2020) leave the id NULL
                break
    return pd.DataFrame(rows, columns=["deviceId", "name"])


def session_start_utc_ns(conn: sqlite3.Connection, schema: Schema) -> int | None:
    """UTC epoch ns of the session start (aligns separate per-rank files)."""
    if not schema.has("TARGET_INFO_SESSION_START_TIME", "utcEpochNs"):
        return None
    row = conn.execute(SESSION_START_SQL).fetchone()
    return int(row[0]) if row and row[0] is not None else None


def kernel_name_column(schema: Schema, base: bool = False) -> str | None:
    """The KERNEL column that names a kernel as ``nsys stats`` does: demangledName (``base``: shortName)."""
    order = ("shortName", "demangledName") if base else ("demangledName", "shortName")
    return next((c for c in order if schema.has(KERNEL, c)), None)


def kernel_names(conn: sqlite3.Connection, schema: Schema, base: bool = False) -> pd.DataFrame:
    """Every kernel: globalPid, deviceId, nameId (see :func:`kernel_name_column`), start, end."""
    columns = ["globalPid", "deviceId", "nameId", "start", "end"]
    name = kernel_name_column(schema, base)
    if name is None or not schema.has(KERNEL, "start", "end"):
        return _empty(columns)
    exprs = {"globalPid": schema.col_or(KERNEL, "globalPid", "0"), "deviceId": schema.col_or(KERNEL, "deviceId", "0"),
             "nameId": schema.col_or(KERNEL, name, "-1"), "start": "start", "end": '"end"'}
    return fetch_columns(conn, KERNEL, exprs, TIMED, steady=("globalPid", "deviceId"))


def gpu_activities_between(conn: sqlite3.Connection, schema: Schema, global_pid: int, device_id: int,
                           t0: int, t1: int) -> pd.DataFrame:
    """Kernels, memcpys and memsets of one (process, device) starting in [t0, t1): kind ('kernel',
    'memcpy', 'memset'), start, end, streamId, copyKind (memcpys; else -1), nameId (kernels' shortName
    StringIds id; else -1), ordered by start. For drawing one step, so a plain indexed-range query."""
    columns = ["kind", "start", "end", "streamId", "copyKind", "nameId"]
    parts = []
    for kind, table, copy, name in (("kernel", KERNEL, "-1", schema.col_or(KERNEL, "shortName", "-1")),
                                    ("memcpy", MEMCPY, schema.col_or(MEMCPY, "copyKind", "0"), "-1"),
                                    ("memset", MEMSET, "-1", "-1")):
        if not schema.has(table, "start", "end"):
            continue
        parts.append(
            f"SELECT '{kind}', start, \"end\", {schema.col_or(table, 'streamId', '0')}, {copy}, {name} FROM {table} "
            f"WHERE start >= ? AND start < ? AND \"end\" IS NOT NULL AND {schema.col_or(table, 'globalPid', '0')} = ? "
            f"AND {schema.col_or(table, 'deviceId', '0')} = ?")
    if not parts:
        return pd.DataFrame({c: [] for c in columns})
    args = [int(t0), int(t1), int(global_pid), int(device_id)] * len(parts)
    rows = conn.execute(" UNION ALL ".join(parts) + " ORDER BY 2", args).fetchall()
    frame = pd.DataFrame(rows, columns=columns)
    return frame.astype({c: np.int64 for c in columns[1:]})
