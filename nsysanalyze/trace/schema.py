"""What an export holds: tables and columns (via SQLAlchemy inspection), versions, capture settings.

nsys creates tables lazily (a table with no rows is absent) and adds columns between
versions, so every loader asks the schema first and never uses ``SELECT *``.
"""
from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass, field

from sqlalchemy import create_engine, inspect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import StaticPool

from ..errors import InputError

# Tables whose presence marks an nsys export.
NSYS_MARKER_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA", "StringIds", "TARGET_INFO_SESSION_START_TIME")

# An nsys install path names the version that recorded the trace: /opt/nvidia/nsight-systems/2020.3.2/...,
# .../nsight-systems-cli/2026.2.1/..., /usr/local/cuda-11.8/NsightSystems-cli-2022.4.2/..., nsight-systems-2022.1.3/...
RECORDER_PATH = re.compile(r"nsight[-_ ]?systems(?:-cli)?[-/](\d{4}\.\d+(?:\.\d+)*)", re.IGNORECASE)

# copyKind ids of CUPTI_ACTIVITY_KIND_MEMCPY (stable 2022.2 -> 2026.2; ENUM_CUDA_MEMCPY_OPER when present).
COPY_HTOD, COPY_DTOH, COPY_DTOD, COPY_PTOP = 1, 2, 8, 10
COPY_UNIFIED = (11, 12, 13)  # unified-memory migrations: HtoD, DtoH, DtoD
# srcKind/dstKind ids (ENUM_CUDA_MEM_KIND).
MEM_PAGEABLE, MEM_PINNED, MEM_DEVICE, MEM_MANAGED = 0, 1, 2, 4
# NVTX_EVENTS.eventType ids (ENUM_NSYS_EVENT_TYPE).
NVTX_PUSHPOP, NVTX_STARTEND, NVTX_MARK, NVTX_DOMAIN_CREATE, NVTX_DOMAIN_DESTROY = 59, 60, 34, 75, 76


@dataclass
class Schema:
    """Tables/columns present plus version and capture metadata of one export."""

    columns: dict[str, frozenset[str]]
    nsys_version: str | None = None           # the exporter's (META_DATA_EXPORT)
    schema_version: str | None = None
    capture: dict[str, list[str]] = field(default_factory=dict)
    recorder_nsys_version: str | None = None  # the recorder's, from its install path (see recorder_version)
    exported_from: str | None = None          # the report file the export was made from (EXPORT_PARAM_INPUT_FILE)

    def has(self, table: str, *cols: str) -> bool:
        return table in self.columns and all(c in self.columns[table] for c in cols)

    def col_or(self, table: str, col: str, default: str) -> str:
        """SQL expression for a column, NULLs and absence replaced by the literal ``default``."""
        return f'COALESCE("{col}", {default})' if col in self.columns.get(table, ()) else default

    @property
    def converted_qdrep(self) -> bool:
        """True when the export was made from a ``.qdrep`` report: recorded by an older nsys than the exporter."""
        return bool(self.exported_from) and self.exported_from.lower().endswith(".qdrep")

    @property
    def recorder_known_or_assumed(self) -> str | None:
        """The recorder's version; without a clue, the exporter's unless the export came from an old ``.qdrep``."""
        if self.recorder_nsys_version:
            return self.recorder_nsys_version
        return None if self.converted_qdrep else self.nsys_version

    @property
    def nvtx_trace_requested(self) -> bool:
        """True when the capture asked for NVTX tracing (META_DATA_CAPTURE)."""
        flags = self.capture.get("PROCESS_0:COLLECT_NVTX_TRACE", [])
        return "true" in flags or "NvtxEvents" in self.capture.get("CAPTURE_EVENT_TYPE", [])


def _name_value_table(conn: sqlite3.Connection, table: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, value in conn.execute(f'SELECT name, value FROM "{table}"'):
        out.setdefault(str(name), []).append(str(value))
    return out


def read_schema(conn: sqlite3.Connection, label: str) -> Schema:
    """Inspect tables and columns and read version metadata; raise InputError if not an nsys export."""
    engine = create_engine("sqlite://", creator=lambda: conn, poolclass=StaticPool)
    try:
        insp = inspect(engine)
        columns = {t: frozenset(c["name"] for c in insp.get_columns(t)) for t in insp.get_table_names()}
    except DBAPIError as e:
        raise InputError(f"{label}: corrupted or unreadable SQLite file ({e.orig})") from None
    if not any(t in columns for t in NSYS_MARKER_TABLES) or not any(
        t.startswith(("CUPTI_ACTIVITY_KIND_", "NVTX_EVENTS", "OSRT_API", "TARGET_INFO_")) for t in columns
    ):
        raise InputError(f"{label}: SQLite file is not an Nsight Systems export (no nsys tables)")
    schema = Schema(columns=columns)
    for meta_table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if schema.has(meta_table, "name", "value"):
            meta = _name_value_table(conn, meta_table)
            schema.nsys_version = (meta.get("EXPORT_PRODUCT_VERSION") or [None])[0]
            schema.schema_version = (meta.get("EXPORT_SCHEMA_VERSION") or [None])[0]
            schema.exported_from = (meta.get("EXPORT_PARAM_INPUT_FILE") or [None])[0]
            break
    if schema.has("META_DATA_CAPTURE", "name", "value"):
        schema.capture = _name_value_table(conn, "META_DATA_CAPTURE")
    schema.recorder_nsys_version = recorder_version(conn, schema)
    return schema


def recorder_version(conn: sqlite3.Connection, schema: Schema) -> str | None:
    """The nsys version that recorded the trace, from its install path: ``TARGET_INFO_SYSTEM_ENV``'s
    ``TargetInstallDir``, else a string naming one of its libraries (injection, CUPTI); None without a clue."""
    paths = []
    if schema.has("TARGET_INFO_SYSTEM_ENV", "name", "value"):
        paths += [str(v) for (v,) in conn.execute(
            "SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'TargetInstallDir' AND value IS NOT NULL")]
    if schema.has("StringIds", "value"):
        paths += [str(v) for (v,) in conn.execute(
            "SELECT value FROM StringIds WHERE value LIKE '%nsight%systems%/target-%' LIMIT 4")]
    return next((m.group(1) for p in paths if (m := RECORDER_PATH.search(p))), None)
