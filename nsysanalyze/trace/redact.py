"""A shareable copy of an export: environment, paths, host and user names removed.

``redact(src, dst)`` copies ``src`` (opened read-only, through SQLite's backup API) into
memory, so the unredacted bytes are never written to disk (an export above
``IN_MEMORY_MAX_BYTES`` is copied to a scratch file beside ``dst`` instead, deleted at the end),
and, in the copy:

- deletes the process environment: ``META_DATA_CAPTURE`` rows ``PROCESS_<n>:ENVIRONMENT_VARIABLE``;
  blanks the NUL-joined environment blocks in ``StringIds`` (the id is kept) and
  ``TARGET_INFO_SYSTEM_ENV.DeviceEnvironment``;
- blanks host and user names and directories: ``EXPORT_HOST``, ``EXPORT_USER``, ``*_PATH_ABS``,
  ``DEVICE_DISPLAY_NAME``, ``PROCESS_<n>:USER_NAME``/``WORKING_DIR``, ``Hostname``,
  ``TargetInstallDir``, ``InjectionFilesStoragePath`` ...;
- shortens absolute paths to their file name in the remaining metadata (command line,
  export file names, diagnostics, callchain module names, captured file names);
- blanks captured program output and config files (``ProcessStreams``, ``ANALYSIS_FILE`` content);
- replaces user and host names found in the environment wherever they remain in metadata;

then writes the copy with ``VACUUM INTO`` (no free pages keep deleted bytes). Tables the
analysis reads (GPU activities, runtime, NVTX, OSRT, names they reference) are untouched,
so the copy analyzes to the same metrics.
"""
from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path

from ..errors import InputError
from ..outputs import atomic_output, check_output
from .open import connect_readonly, stat_input

ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(%%)?=")
# An absolute POSIX path's directory part, or a Windows one (C:\dir\), up to the last separator.
PATH_DIRS = re.compile(r"(?<![\w.~$-])(?:~|[A-Za-z]:)?/[^\s\"'`;:,=|()<>]*/|(?<!\w)[A-Za-z]:\\(?:[^\s\"'`;,=|\\]+\\)+")

# META_DATA_CAPTURE / META_DATA_EXPORT / EXPORT_META_DATA names whose value is blanked (SQL LIKE patterns).
BLANK_META = ("EXPORT_HOST", "EXPORT_USER", "%PATH_ABS", "DEVICE_DISPLAY_NAME", "%HOSTNAME%", "%USER_NAME%",
              "%WORKING_DIR%", "%:USER", "%CWD%")
# TARGET_INFO_SYSTEM_ENV names whose value is blanked.
BLANK_SYSTEM_ENV = ("DeviceEnvironment", "Hostname", "%HostName%", "%UserName%", "%User", "TargetInstallDir",
                    "InjectionFilesStoragePath", "%Environment%", "%WorkingDir%")
META_TABLES = ("META_DATA_CAPTURE", "META_DATA_EXPORT", "EXPORT_META_DATA")
# Environment variables whose values name the user or the host (to scrub them where they remain).
USER_VARS = ("USER", "LOGNAME", "USERNAME", "SLURM_JOB_USER", "SUDO_USER")
HOST_VARS = ("HOSTNAME", "HOST", "SLURMD_NODENAME", "SLURM_NODELIST", "CONTAINER_NAME")
HOME_VARS = ("HOME",)
# Identity tokens shorter than this (e.g. host 'vm') are only blanked where they stand alone.
MIN_TOKEN = 3
USER_MARK, HOST_MARK = "<user>", "<host>"
IN_MEMORY_MAX_BYTES = 4 << 30  # larger exports are redacted in a scratch file


def shorten_paths(text: str | None) -> str | None:
    """Absolute paths in ``text`` reduced to their last component ('/home/a/x/train.py' → 'train.py')."""
    return text if not text else PATH_DIRS.sub("", text)


def redact(src: str | os.PathLike, dst: str | os.PathLike, force: bool = False) -> dict[str, int]:
    """Write a redacted copy of the export ``src`` to ``dst``; return what was removed (counts by kind).

    ``src`` is never modified; ``dst`` must not be ``src`` (also through a link, relative path or hard
    link) and, unless ``force``, must not exist (outputs.check_output).
    """
    src_p = Path(src)
    stat_input(src_p)
    dst_p = check_output(dst, [src_p], force)
    source = connect_readonly(src_p)
    scratch = dst_p.with_name(f".{dst_p.name}.redact-scratch")
    big = src_p.stat().st_size > IN_MEMORY_MAX_BYTES
    if big:
        scratch.unlink(missing_ok=True)
    mem = sqlite3.connect(scratch if big else ":memory:")
    try:
        try:
            source.backup(mem)
        except sqlite3.DatabaseError as e:
            raise InputError(f"{src_p}: cannot copy this SQLite file ({e})") from None
        finally:
            source.close()
        tables = {r[0] for r in mem.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables & {"StringIds", *META_TABLES}:
            raise InputError(f"{src_p}: SQLite file is not an Nsight Systems export (no nsys tables)")
        removed = _redact_in_place(mem, tables)
        mem.commit()
        try:
            with atomic_output(dst_p) as tmp:
                mem.execute("VACUUM INTO ?", (str(tmp),))
        except sqlite3.Error as e:
            raise InputError(f"{dst_p}: cannot write the redacted copy ({e})") from None
    finally:
        mem.close()
        if big:
            scratch.unlink(missing_ok=True)
    return removed


def _q(name: str) -> str:
    """An SQL identifier, quoted (table names come from the file)."""
    return '"' + name.replace('"', '""') + '"'


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in conn.execute(f"PRAGMA table_info({_q(table)})")}


def _changes(conn: sqlite3.Connection, sql: str, params=()) -> int:
    return conn.execute(sql, params).rowcount


def _identities(conn: sqlite3.Connection, tables: set[str]) -> tuple[set[str], set[str]]:
    """User and host names named by the environment and metadata (read before they are removed)."""
    users, hosts = set(), set()
    env_lines: list[str] = []
    if "META_DATA_CAPTURE" in tables:
        for name, value in conn.execute("SELECT name, value FROM META_DATA_CAPTURE"):
            value = str(value or "")
            if "ENVIRONMENT_VARIABLE" in name:
                env_lines.append(value)
            elif name.endswith("USER_NAME"):
                users.add(value)
            elif name == "DEVICE_DISPLAY_NAME":
                hosts.add(value)
    if "TARGET_INFO_SYSTEM_ENV" in tables:
        for name, value in conn.execute("SELECT name, value FROM TARGET_INFO_SYSTEM_ENV "
                                        "WHERE name IN ('DeviceEnvironment', 'Hostname')"):
            if name == "Hostname":
                hosts.add(str(value or ""))
            else:
                env_lines += str(value or "").split(";")
    for table in META_TABLES:
        if table in tables and table != "META_DATA_CAPTURE":
            for name, value in conn.execute(f"SELECT name, value FROM {_q(table)} "
                                            "WHERE name IN ('EXPORT_HOST', 'EXPORT_USER')"):
                (hosts if name == "EXPORT_HOST" else users).add(str(value or ""))
    if "StringIds" in tables:
        for (value,) in conn.execute("SELECT CAST(value AS BLOB) FROM StringIds WHERE instr(value, char(0)) > 0"):
            env_lines += bytes(value).decode("utf-8", "replace").split("\0")
    for line in env_lines:
        key, _, value = line.partition("=")
        value = value.strip().strip('"')
        if key in USER_VARS:
            users.add(value)
        elif key in HOST_VARS:
            hosts.update(value.split(","))
        elif key in HOME_VARS and value.rstrip("/"):
            users.add(value.rstrip("/").rsplit("/", 1)[-1])
    drop = {"", "root", "localhost", "unknown", "user", "nobody"}
    return {u for u in users if u not in drop}, {h for h in hosts if h not in drop}


def _scrubber(users: set[str], hosts: set[str]):
    """text → text with absolute paths shortened and user/host names replaced by markers."""
    pats = [(re.compile(rf"(?<![\w.-]){re.escape(t)}(?![\w-])"), mark)
            for names, mark in ((users, USER_MARK), (hosts, HOST_MARK)) for t in sorted(names, key=len, reverse=True)
            if len(t) >= MIN_TOKEN]
    short = {t: mark for names, mark in ((users, USER_MARK), (hosts, HOST_MARK)) for t in names}

    def scrub(text):
        if not isinstance(text, str) or not text:
            return text
        if text in short:
            return short[text]
        text = shorten_paths(text)
        for pat, mark in pats:
            text = pat.sub(mark, text)
        return text
    return scrub


def _like_any(column: str, patterns: tuple[str, ...]) -> str:
    return "(" + " OR ".join(f"{column} LIKE '{p}'" for p in patterns) + ")"


def _redact_in_place(conn: sqlite3.Connection, tables: set[str]) -> dict[str, int]:
    """All removals on an open writable copy; returns counts by kind."""
    users, hosts = _identities(conn, tables)
    conn.create_function("nsa_scrub", 1, _scrubber(users, hosts), deterministic=True)
    out = dict.fromkeys(("environment_variables", "environment_strings", "system_env_values", "metadata_values",
                         "captured_files", "values_scrubbed"), 0)
    if "META_DATA_CAPTURE" in tables:
        out["environment_variables"] = _changes(
            conn, "DELETE FROM META_DATA_CAPTURE WHERE name LIKE '%ENVIRONMENT_VARIABLE%'")
    for table in META_TABLES:
        if table in tables:
            out["metadata_values"] += _changes(
                conn, f"UPDATE {_q(table)} SET value = '' WHERE {_like_any('name', BLANK_META)} AND value <> ''")
    if "TARGET_INFO_SYSTEM_ENV" in tables:
        out["system_env_values"] = _changes(
            conn, f"UPDATE TARGET_INFO_SYSTEM_ENV SET value = '' "
                  f"WHERE {_like_any('name', BLANK_SYSTEM_ENV)} AND value <> ''")
    if "StringIds" in tables:
        env_ids = [i for i, v in conn.execute(
            "SELECT id, CAST(value AS BLOB) FROM StringIds WHERE instr(value, char(0)) > 0")
            if any(ENV_ASSIGNMENT.match(p) for p in bytes(v).decode("utf-8", "replace").split("\0"))]
        conn.executemany("UPDATE StringIds SET value = '' WHERE id = ?", [(i,) for i in env_ids])
        out["environment_strings"] = len(env_ids)
        out["captured_files"] += _blank_referenced_strings(conn, tables)
        out["values_scrubbed"] += _scrub_referenced_strings(conn, tables)
    if "ANALYSIS_FILE" in tables and "content" in _columns(conn, "ANALYSIS_FILE"):
        out["captured_files"] += _changes(conn, "UPDATE ANALYSIS_FILE SET content = '' WHERE content <> ''")
    for table, column in _free_text_columns(conn, tables):
        out["values_scrubbed"] += _changes(
            conn, f"UPDATE {_q(table)} SET {_q(column)} = nsa_scrub({_q(column)}) "
                  f"WHERE {_q(column)} IS NOT nsa_scrub({_q(column)})")
    return out


def _free_text_columns(conn: sqlite3.Connection, tables: set[str]) -> list[tuple[str, str]]:
    """Metadata text columns (never read by the analysis) to scrub for paths and names."""
    wanted = {t: ("value",) for t in (*META_TABLES, "TARGET_INFO_SYSTEM_ENV")}
    wanted.update({"DIAGNOSTIC_EVENT": ("text",), "ANALYSIS_FILE": ("filename",)})
    return [(t, c) for t, cols in wanted.items() if t in tables for c in cols if c in _columns(conn, t)]


def _string_refs(conn: sqlite3.Connection, tables: set[str], pairs: list[tuple[str, str]]) -> str:
    """SQL: ids of StringIds referenced by the (table, column) pairs that exist."""
    parts = [f"SELECT {_q(c)} FROM {_q(t)}" for t, c in pairs if t in tables and c in _columns(conn, t)]
    return " UNION ".join(parts) if parts else "SELECT NULL WHERE 0"


def _blank_referenced_strings(conn: sqlite3.Connection, tables: set[str]) -> int:
    """Blank captured stdout/stderr and config file contents kept as StringIds."""
    refs = _string_refs(conn, tables, [("ProcessStreams", "contentId"), ("ANALYSIS_FILE", "contentId")])
    return _changes(conn, f"UPDATE StringIds SET value = '' WHERE id IN ({refs}) AND value <> ''")


def _scrub_referenced_strings(conn: sqlite3.Connection, tables: set[str]) -> int:
    """Shorten paths / replace names in file and module names (captured file names, callchain modules)."""
    pairs = [("ProcessStreams", "filenameId")]
    pairs += [(t, "module") for t in sorted(tables) if t.endswith("CALLCHAINS")]
    refs = _string_refs(conn, tables, pairs)
    return _changes(conn, f"UPDATE StringIds SET value = nsa_scrub(value) "
                          f"WHERE id IN ({refs}) AND value IS NOT nsa_scrub(value)")
