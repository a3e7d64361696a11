"""Typed loaders: each returns only the columns the metrics need, as int64 pandas frames.

This module and ``trace/open.py``/``trace/schema.py`` are the only code that speaks SQL.
Times are ns on the export's clock; sizes are bytes. Missing tables give empty frames.
"""
from __future__ import annotations

import itertools
import sqlite3

import numpy as np
import pandas as pd

from ..errors import InputError
from .schema import NVTX_DOMAIN_CREATE, NVTX_PUSHPOP, NVTX_STARTEND, Schema

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
NVTX = "NVTX_EVENTS"
OSRT = "OSRT_API"

FETCH_ROWS = 1 << 16
# globalTid/globalPid layout: [vm id][pid: 24 bits][tid: 24 bits]; the pid part of a tid is its process.
PROCESS_MASK = ~np.int64(0xFFFFFF)


def pid_of(global_tid: np.ndarray | pd.Series) -> np.ndarray:
    """globalPid of a globalTid (the low 24 tid bits cleared)."""
    return np.asarray(global_tid, dtype=np.int64) & PROCESS_MASK


def fetch_int_frame(conn: sqlite3.Connection, sql: str, columns: list[str], count_sql: str) -> pd.DataFrame:
    """Run ``sql`` (integer columns only, no NULLs) into one preallocated int64 block, in chunks.

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
            raise InputError(f"non-integer values where nsys writes integers ({', '.join(columns)}): "
                             "the export is corrupted") from None
        filled += k
    return pd.DataFrame(out[:filled], columns=columns, copy=False)


def _empty(columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame({c: np.empty(0, dtype=np.int64) for c in columns})


def _activity(conn: sqlite3.Connection, schema: Schema, table: str, extra: dict[str, str]) -> pd.DataFrame:
    """Rows of a CUPTI GPU activity table with the common columns plus ``extra`` (name -> default)."""
    base = ["start", "end", "deviceId", "streamId", "correlationId", "globalPid"]
    columns = base + list(extra)
    if not schema.has(table, "start", "end"):
        return _empty(columns)
    select = ", ".join([schema.col_or(table, c, "0") for c in base]
                       + [schema.col_or(table, c, d) for c, d in extra.items()])
    where = 'WHERE "end" IS NOT NULL AND start IS NOT NULL'
    return fetch_int_frame(
        conn, f"SELECT {select} FROM {table} {where}", columns, f"SELECT count(*) FROM {table} {where}"
    )


def kernels(conn: sqlite3.Connection, schema: Schema) -> pd.DataFrame:
    """Kernels: start, end, deviceId, streamId, correlationId, globalPid, nameId (StringIds id of shortName)."""
    name_col = "shortName" if schema.has(KERNEL, "shortName") else "demangledName"
    return _activity(conn, schema, KERNEL, {name_col: "-1"}).rename(columns={name_col: "nameId"})


def memcpys(conn: sqlite3.Connection, schema: Schema) -> pd.DataFrame:
    """Memcpys: common columns + bytes, copyKind, srcKind, dstKind (ids, see schema.COPY_*/MEM_*; -1 unknown)."""
    return _activity(conn, schema, MEMCPY, {"bytes": "0", "copyKind": "0", "srcKind": "-1", "dstKind": "-1"})


def memsets(conn: sqlite3.Connection, schema: Schema) -> pd.DataFrame:
    """Memsets: common columns + bytes."""
    return _activity(conn, schema, MEMSET, {"bytes": "0"})


def runtime_calls(conn: sqlite3.Connection, schema: Schema) -> pd.DataFrame:
    """CUDA runtime/driver API calls: start, end, globalTid, correlationId, nameId."""
    columns = ["start", "end", "globalTid", "correlationId", "nameId"]
    if not schema.has(RUNTIME, *columns):
        return _empty(columns)
    where = 'WHERE "end" IS NOT NULL AND start IS NOT NULL'
    select = ", ".join(schema.col_or(RUNTIME, c, d) for c, d in
                       (("start", "0"), ("end", "0"), ("globalTid", "0"), ("correlationId", "0"), ("nameId", "-1")))
    return fetch_int_frame(
        conn, f"SELECT {select} FROM {RUNTIME} {where}", columns, f"SELECT count(*) FROM {RUNTIME} {where}"
    )


def strings(conn: sqlite3.Connection, schema: Schema, ids) -> dict[int, str]:
    """StringIds values for the given ids."""
    ids = sorted({int(i) for i in ids if i >= 0})
    if not ids or not schema.has("StringIds", "id", "value"):
        return {}
    out: dict[int, str] = {}
    for chunk in range(0, len(ids), 500):
        part = ids[chunk:chunk + 500]
        q = f"SELECT id, value FROM StringIds WHERE id IN ({','.join('?' * len(part))})"
        out.update({int(i): str(v) for i, v in conn.execute(q, part)})
    return out


def string_ids_like(conn: sqlite3.Connection, schema: Schema, pattern: str) -> np.ndarray:
    """Ids of StringIds whose value matches a SQL LIKE pattern (ASCII case-insensitive)."""
    if not schema.has("StringIds", "id", "value"):
        return np.empty(0, dtype=np.int64)
    return np.array([r[0] for r in conn.execute("SELECT id FROM StringIds WHERE value LIKE ?", (pattern,))],
                    dtype=np.int64)


def nvtx_ranges(conn: sqlite3.Connection, schema: Schema) -> pd.DataFrame:
    """Closed NVTX ranges (push/pop and start/end): start, end, globalTid, endGlobalTid, domainId, name, domain.

    name = COALESCE(StringIds.value at textId, text); domain = the domain's name from its create
    row in the same process ('' for the default domain or when the create row was not captured).
    """
    columns = ["start", "end", "globalTid", "endGlobalTid", "domainId", "name", "domain"]
    if not schema.has(NVTX, "start", "end", "eventType"):
        return pd.DataFrame({c: [] for c in columns})
    has_textid = schema.has(NVTX, "textId") and schema.has("StringIds", "id", "value")
    name = "COALESCE(s.value, e.text, '')" if has_textid else "COALESCE(e.text, '')"
    join = "LEFT JOIN StringIds s ON s.id = e.textId" if has_textid else ""
    tid = "COALESCE(e.globalTid, 0)"
    end_tid = f"COALESCE(e.endGlobalTid, {tid})" if schema.has(NVTX, "endGlobalTid") else tid
    dom = "COALESCE(e.domainId, 0)" if schema.has(NVTX, "domainId") else "0"
    rows = conn.execute(
        f"SELECT e.start, e.\"end\", {tid}, {end_tid}, {dom}, {name} FROM {NVTX} e {join} "
        f"WHERE e.eventType IN ({NVTX_PUSHPOP}, {NVTX_STARTEND}) AND e.\"end\" IS NOT NULL AND e.\"end\" >= e.start"
    ).fetchall()
    df = pd.DataFrame(rows, columns=columns[:-1])
    for c in columns[:5]:
        df[c] = df[c].astype(np.int64)
    df["name"] = df["name"].astype(str)
    domains = nvtx_domains(conn, schema)
    df["domain"] = ""
    if len(df) and len(domains):
        key = pd.MultiIndex.from_arrays([pid_of(df["globalTid"]), df["domainId"]])
        lookup = pd.Series(domains["domain"].values,
                           index=pd.MultiIndex.from_arrays([domains["globalPid"], domains["domainId"]]))
        lookup = lookup[~lookup.index.duplicated()]
        df["domain"] = lookup.reindex(key).fillna("").values
    return df


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


def osrt_calls(conn: sqlite3.Connection, schema: Schema, names: tuple[str, ...]) -> pd.DataFrame:
    """OS runtime calls with the given names (e.g. munmap): start, end, globalTid, name."""
    columns = ["start", "end", "globalTid", "name"]
    if not schema.has(OSRT, "start", "end", "globalTid", "nameId") or not schema.has("StringIds", "id", "value"):
        return pd.DataFrame({c: [] for c in columns}).astype({"start": np.int64, "end": np.int64, "globalTid": np.int64})
    marks = ",".join("?" * len(names))
    rows = conn.execute(
        f"SELECT o.start, o.\"end\", o.globalTid, s.value FROM {OSRT} o JOIN StringIds s ON s.id = o.nameId "
        f"WHERE o.nameId IN (SELECT id FROM StringIds WHERE value IN ({marks})) AND o.\"end\" IS NOT NULL",
        names,
    ).fetchall()
    df = pd.DataFrame(rows, columns=columns)
    return df.astype({"start": np.int64, "end": np.int64, "globalTid": np.int64})


def processes(conn: sqlite3.Connection, schema: Schema) -> pd.DataFrame:
    """Processes: globalPid, pid, name."""
    if not schema.has("PROCESSES", "globalPid", "pid", "name"):
        return pd.DataFrame({"globalPid": [], "pid": [], "name": []})
    rows = conn.execute("SELECT globalPid, pid, COALESCE(name, '') FROM PROCESSES").fetchall()
    return pd.DataFrame(rows, columns=["globalPid", "pid", "name"])


def gpus(conn: sqlite3.Connection, schema: Schema) -> pd.DataFrame:
    """GPUs known to the capture: deviceId (CUDA ordinal when known), name."""
    for table, id_col in (("TARGET_INFO_GPU", "cuDevice"), ("TARGET_INFO_GPU", "id"), ("TARGET_INFO_CUDA_DEVICE", "cudaId")):
        if schema.has(table, id_col, "name"):
            rows = conn.execute(f"SELECT DISTINCT {id_col}, name FROM {table}").fetchall()
            return pd.DataFrame(rows, columns=["deviceId", "name"])
    return pd.DataFrame({"deviceId": [], "name": []})


def session_start_utc_ns(conn: sqlite3.Connection, schema: Schema) -> int | None:
    """UTC epoch ns of the session start (aligns separate per-rank files)."""
    if not schema.has("TARGET_INFO_SESSION_START_TIME", "utcEpochNs"):
        return None
    row = conn.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
    return int(row[0]) if row and row[0] is not None else None
