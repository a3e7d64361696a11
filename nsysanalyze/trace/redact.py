"""A shareable copy of an export: environment, paths, names and identifiers removed.

``redact(src, dst)`` copies ``src`` (opened read-only, through SQLite's backup API) into
memory, so the unredacted bytes are never written to disk (an export above
``IN_MEMORY_MAX_BYTES`` is copied into a private (0700) temporary folder instead, removed at
the end, on Ctrl-C and on SIGTERM), and, in the copy:

- deletes the process environment: ``META_DATA_CAPTURE`` rows ``PROCESS_<n>:ENVIRONMENT_VARIABLE``;
  blanks the NUL-joined environment blocks in ``StringIds`` (the id is kept) and
  ``TARGET_INFO_SYSTEM_ENV.DeviceEnvironment``;
- blanks host and user names, directories and the kernel release: ``EXPORT_HOST``, ``EXPORT_USER``,
  ``*_PATH_ABS``, ``DEVICE_DISPLAY_NAME``, ``PROCESS_<n>:USER_NAME``/``WORKING_DIR``, ``Hostname``,
  ``TargetInstallDir`` (left as ``nsight-systems-<version>``: the recorder's version, no path),
  ``InjectionFilesStoragePath``, ``SoftwareReleaseVersion`` ...;
- in every other text value (metadata, command lines, GPU and NIC info, diagnostics, and every
  ``StringIds`` row, referenced or not, except the names the analysis reads) shortens absolute
  paths to their last component and replaces UUIDs (GPU, session), PCI bus ids, MAC and e-mail
  addresses, IP addresses and host names (FQDNs) with markers (``<ip>``), and the user and host
  names the environment names with ``<user>``/``<host>``;
- blanks captured program output and config files (``ProcessStreams``, ``ANALYSIS_FILE`` content);
- sets the session's local start time to its UTC time (the offset tells the time zone);
- keeps only the profiled processes (those with GPU, CUDA API, NVTX or OS runtime events) in
  ``PROCESSES`` and ``ThreadNames`` (nsys lists every process of the host);

then writes the copy with ``VACUUM INTO`` (no free pages keep deleted bytes). What the analysis
reads (GPU activities, runtime, NVTX, OSRT, the names they reference) is untouched, so the copy
analyzes to the same metrics. ``identifying(path)`` (``redact --check``) lists what still looks
identifying in an export.
"""
from __future__ import annotations

import contextlib
import functools
import os
import re
import sqlite3
import tempfile
from pathlib import Path

from ..errors import InputError
from ..outputs import atomic_output, check_output, exit_on_sigterm, release_claims
from .open import connect_readonly, stat_input
from .schema import Schema, recorder_version

ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(%%)?=")
# Identifying tokens in free text, replaced by a marker (command lines: --master_addr=10.1.2.3). Each is
# (marker, pattern); redact replaces every match and ``redact --check`` reports every match (IP_ADDRESS and
# paths are filtered as ``_not_a_version`` and ``personal_path`` say).
TOP_LEVEL = ("com|org|net|edu|gov|mil|int|io|ai|dev|app|cloud|info|biz|local|localdomain|internal|lan|corp|"
             "cluster|home|us|uk|de|fr|ch|nl|se|fi|no|dk|it|es|pl|cz|at|be|jp|cn|kr|tw|in|au|ca|br|ru|il|sg")
# A URL: everything after the scheme (host, credentials, path, query) can name a site or hold a secret.
URL = re.compile(r"(?i)(?<![\w+.-])[a-z][a-z0-9+.-]{1,15}://[^\s\"'`<>]+")
# Values of command-line options that are secrets (--token X, --aws-secret-access-key=...).
SECRET_OPTION = re.compile(r"(?i)(?<![\w-])(--?[\w-]*(?:secret|token|passw(?:or)?d|api[_-]?key|access[_-]?key|"
                           r"credential|auth)[\w-]*(?:=|\s+))(?!<)[^\s\"'`]+")
# Well-known secret formats (AWS access key ids, GitHub, Slack, OpenAI-style, Google API, Hugging Face tokens).
SECRET_TOKEN = re.compile(r"(?<![\w-])(?:(?:AKIA|ASIA)[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{36,}|github_pat_\w{22,}|"
                          r"xox[abprs]-[\w-]{10,}|sk-[A-Za-z0-9_-]{20,}|AIza[\w-]{35}|hf_[A-Za-z]{30,})(?![\w-])")
# Values of options that name a host (--master_addr gpu-node-17, --rdzv_endpoint=gpu-node-17:29500): the
# host part, not a port or a number (--master_port 29500, --nnodes 2 stay).
HOST_OPTION = re.compile(r"(?i)(?<![\w-])(--?[\w-]*(?:addr|address|host|hostname|endpoint|server|nodelist|"
                         r"master|rdzv|coordinator)[\w-]*(?:=|\s+))(?![\d.]+(?![\w-]))(?!<)[\w.\[\],-]+")
# A SLURM node list (gpu-node-[01-04,07], nid[001-004]: a range or a list in the brackets); not an index
# (args[0], p[2][1]) nor an XLA array shape (u32[2048,10]{1,0}, bf16[8,128]).
NODE_LIST = re.compile(r"(?<![\w-])(?!(?:[sfuc]\d+|bf16|pred)\[)[A-Za-z][\w-]*\[(?=[\d,-]*[-,])\d+(?:-\d+)?"
                       r"(?:,\d+(?:-\d+)?)*\](?=[^\w{[]|$)")
IP_ADDRESS = re.compile(r"(?<![\w./])(?:\d{1,3}\.){3}\d{1,3}(?![\w.-])|(?i:(?<![\w:])(?:[0-9a-f]{1,4}:){7}"
                        r"[0-9a-f]{1,4}(?![\w:])|(?<![\w:])(?:[0-9a-f]{1,4}:){1,6}:"
                        r"(?:[0-9a-f]{1,4}(?::[0-9a-f]{1,4})*)?(?![\w:]))")
IDENTIFIERS = (
    ("<url>", URL),
    ("<secret>", SECRET_OPTION),
    ("<secret>", SECRET_TOKEN),
    ("<uuid>", re.compile(r"(?i)(?<![0-9a-f-])(?:GPU-|MIG-)?[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-"
                          r"[0-9a-f]{12}(?![0-9a-f-])")),
    ("<pci>", re.compile(r"(?i)(?<![\w:])(?:[0-9a-f]{4,8}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-7](?![\w.])")),
    ("<mac>", re.compile(r"(?i)(?<![\w:])(?:[0-9a-f]{2}[:-]){5}[0-9a-f]{2}(?![\w:])")),
    ("<email>", re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")),
    ("<ip>", IP_ADDRESS),
    ("<host>", re.compile(rf"(?i)(?<![\w.-])(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\.)+(?:{TOP_LEVEL})(?![\w.-])")),
    ("<host>", HOST_OPTION),
    ("<host>", NODE_LIST),
)
# The prefix a marker keeps of its match: the option's name.
KEEP_GROUP = {SECRET_OPTION: r"\1", HOST_OPTION: r"\1"}
# Just before a dotted quad, words that make it a version number (NV_CUDNN_VERSION=9.7.0.66), not an address
# (a dotted quad in a path, /opt/cray/pe/libsci/23.02.1.1, or before '-', 9.7.0.66-1, is not one either).
VERSION_BEFORE = re.compile(r"(?i)(?:version|ver|v)[\s=:_\"'-]*$")
# A user's home directory, also when the user name has spaces (PATH_DIRS stops at a space).
HOME_DIR = re.compile(r"(?<![\w.~$-])/(?:home|Users)/[^/]+/")
WINDOWS_HOME_DIR = re.compile(r"(?i)(?<!\w)([a-z]:[\\/])(?:Users|Documents and Settings)[\\/][^\\/]+[\\/]")
# An absolute POSIX path's directory part (also ~/ and ~user/), a Windows one (C:\dir\), or a UNC one
# (\\server\share\dir\), up to the last separator.
PATH_DIRS = re.compile(r"(?<![\w.~$-])(?:~[\w.-]*|[A-Za-z]:)?/[^\s\"'`;:,=|()<>]*/|(?<!\w)[A-Za-z]:\\(?:[^\s\"'`;,=|\\]+\\)*"
                       r"|(?<![\w\\])\\\\[^\s\"'`;,=|\\]+\\(?:[^\s\"'`;,=|\\]+\\)*")
# Directories that name no person, host or site: the system's (redact still shortens them; ``redact --check``
# does not report them), and an installed package's or Nsight tool's (PACKAGE_DIRS, PACKAGE_MODULE) outside PERSONAL_DIRS.
SYSTEM_DIRS = re.compile(r"(?:/usr|/lib|/lib32|/lib64|/libx32|/bin|/sbin|/etc|/opt/(?:nvidia|cray|rocm|intel)|/proc|/sys|/dev|/run|"
                         r"/snap|/tmp/nvidia|/var/lib)/")
PACKAGE_DIRS = re.compile(r".*/(?:site-packages|dist-packages|lib-dynload|nsight-systems[\w.-]*|nsight-compute[\w.-]*)/")
PACKAGE_MODULE = re.compile(r"[\w.-]+\.(?:cpython-[\w-]+|abi3)\.so(?![\w.])")  # a Python extension module
PERSONAL_DIRS = re.compile(r"(?i)~|/(?:home|Users|root)/|[a-z]:[\\/](?:Users|Documents and Settings)[\\/]")

# META_DATA_CAPTURE / META_DATA_EXPORT / EXPORT_META_DATA names whose value is blanked (SQL LIKE patterns).
BLANK_META = ("EXPORT_HOST", "EXPORT_USER", "%PATH_ABS", "DEVICE_DISPLAY_NAME", "%HOSTNAME%", "%USER_NAME%",
              "%WORKING_DIR%", "%:USER", "%CWD%")
# TARGET_INFO_SYSTEM_ENV names whose value is blanked.
BLANK_SYSTEM_ENV = ("DeviceEnvironment", "Hostname", "%HostName%", "%UserName%", "%User", "TargetInstallDir",
                    "InjectionFilesStoragePath", "%Environment%", "%WorkingDir%", "SoftwareReleaseVersion",
                    "%KernelRelease%", "%KernelVersion%")
# StringIds the analysis reads (names of kernels, API calls, NVTX ranges, OS calls): never changed, so the
# copy analyzes to the same metrics. (table, column) pairs; plus values LIKE these (looked up by pattern).
ANALYSIS_STRINGS = (("CUPTI_ACTIVITY_KIND_KERNEL", "shortName"), ("CUPTI_ACTIVITY_KIND_KERNEL", "demangledName"),
                    ("CUPTI_ACTIVITY_KIND_KERNEL", "mangledName"), ("CUPTI_ACTIVITY_KIND_RUNTIME", "nameId"),
                    ("NVTX_EVENTS", "textId"), ("OSRT_API", "nameId"))
ANALYSIS_STRING_PATTERNS = ("cu%", "nccl%")
# Tables whose text is left as is: the analysis reads it (NVTX names), or it is nsys's own (enums).
VERBATIM_TABLES = ("NVTX_EVENTS", "StringIds", "ENUM_%")
# Tables whose rows name one process (globalPid) or thread (globalTid): only the profiled ones are kept.
PROCESS_TABLES = (("PROCESSES", "globalPid"), ("ThreadNames", "globalTid"))
# Where profiled processes show: (table, column holding a globalPid or globalTid).
PROFILED_IN = (("CUPTI_ACTIVITY_KIND_KERNEL", "globalPid"), ("CUPTI_ACTIVITY_KIND_MEMCPY", "globalPid"),
               ("CUPTI_ACTIVITY_KIND_MEMSET", "globalPid"), ("CUPTI_ACTIVITY_KIND_RUNTIME", "globalTid"),
               ("NVTX_EVENTS", "globalTid"), ("OSRT_API", "globalTid"))
PID_MASK = ~0xFFFFFF  # globalTid → globalPid: the thread id is the low 24 bits
META_TABLES = ("META_DATA_CAPTURE", "META_DATA_EXPORT", "EXPORT_META_DATA")
# Environment variables whose values name the user or the host (to scrub them where they remain).
USER_VARS = ("USER", "LOGNAME", "USERNAME", "SLURM_JOB_USER", "SUDO_USER")
HOST_VARS = ("HOSTNAME", "HOST", "SLURMD_NODENAME", "SLURM_NODELIST", "CONTAINER_NAME")
HOME_VARS = ("HOME",)
# Identity tokens shorter than this (e.g. host 'vm') are only blanked where they stand alone.
MIN_TOKEN = 3
USER_MARK, HOST_MARK = "<user>", "<host>"
IN_MEMORY_MAX_BYTES = 4 << 30  # larger exports are redacted in a scratch file
SCRUB_MEMO = 1 << 16  # distinct values whose scrubbed text (or flag) is kept (a few MB for event JSON of ~500 bytes)


def shorten_paths(text: str | None) -> str | None:
    """Absolute paths in ``text`` reduced to their last component ('/home/a/x/train.py' → 'train.py'),
    home directories first (so '/home/Jane Doe/x/a.py' loses the user name too)."""
    return text if not text else PATH_DIRS.sub("", WINDOWS_HOME_DIR.sub(r"\1", HOME_DIR.sub("/", text)))


def _not_a_version(m: re.Match) -> bool:
    """A dotted quad that is not a version number (nothing like 'VERSION=' just before it)."""
    return not (m.group().count(".") == 3 and VERSION_BEFORE.search(m.string, 0, m.start()))


def _matches(pattern: re.Pattern, text: str):
    return (m for m in pattern.finditer(text) if pattern is not IP_ADDRESS or _not_a_version(m))


def replace_identifiers(text: str) -> str:
    """URLs, secrets, UUIDs, PCI bus ids, MAC and e-mail addresses, IP addresses, host names (FQDNs, option
    values, node lists) → markers (IDENTIFIERS)."""
    for mark, pattern in IDENTIFIERS:
        keep = KEEP_GROUP.get(pattern)
        text = pattern.sub(lambda m: (m.expand(keep) if keep else "") + mark if pattern is not IP_ADDRESS
                           or _not_a_version(m) else m.group(), text)
    return text


def personal_path(text: str) -> bool:
    """Whether ``text`` holds a path whose folders could name a person, host or site: any but SYSTEM_DIRS
    and, outside PERSONAL_DIRS, an installed Python package's folder."""
    for m in PATH_DIRS.finditer(text):
        folder = m.group()
        package = (PACKAGE_DIRS.match(folder) or PACKAGE_MODULE.match(text, m.end())) and not PERSONAL_DIRS.match(folder)
        if not (SYSTEM_DIRS.match(folder) or package):
            return True
    return False


def redact(src: str | os.PathLike, dst: str | os.PathLike, force: bool = False) -> dict[str, int]:
    """Write a redacted copy of the export ``src`` to ``dst``; return what was removed (counts by kind).

    ``src`` is never modified; ``dst`` must not be ``src`` (also through a link, relative path or hard
    link) and, unless ``force``, must not exist (outputs.check_output).
    """
    src_p = Path(src)
    stat_input(src_p)
    dst_p = check_output(dst, [src_p], force)
    with contextlib.ExitStack() as stack:
        stack.callback(release_claims, [dst_p])  # OUT's placeholder, when no copy was written
        source = connect_readonly(src_p)
        stack.callback(source.close)
        if src_p.stat().st_size > IN_MEMORY_MAX_BYTES:  # scratch copy in a private (0700) temporary folder,
            stack.enter_context(exit_on_sigterm())      # removed on any exit, SIGTERM and Ctrl-C included
            scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="nsysanalyze-redact-"))) / "copy"
        else:
            scratch = ":memory:"
        return _redact_copy(source, src_p, dst_p, scratch)


def _redact_copy(source: sqlite3.Connection, src_p: Path, dst_p: Path, scratch) -> dict[str, int]:
    """Copy ``source`` into ``scratch`` (a path, or ':memory:'), redact it there, write ``dst_p``."""
    mem = sqlite3.connect(scratch)
    try:
        try:
            source.backup(mem)
        except sqlite3.DatabaseError as e:
            raise InputError(f"{src_p}: cannot copy this SQLite file ({e})") from None
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
            name, value = str(name), str(value or "")  # untyped columns may hold integers
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

    @functools.lru_cache(maxsize=SCRUB_MEMO)  # a column's repeated values, and the UPDATE's WHERE then SET
    def scrub(text):
        if not isinstance(text, str) or not text:
            return text
        if text in short:
            return short[text]
        text = replace_identifiers(shorten_paths(URL.sub("<url>", text)))  # a URL whole, before its path
        for pat, mark in pats:
            text = pat.sub(mark, text)
        return text
    return scrub


def _like_any(column: str, patterns: tuple[str, ...]) -> str:
    return "(" + " OR ".join(f"{column} LIKE '{p}'" for p in patterns) + ")"


def _redact_in_place(conn: sqlite3.Connection, tables: set[str]) -> dict[str, int]:
    """All removals on an open writable copy; returns counts by kind."""
    users, hosts = _identities(conn, tables)
    conn.create_function("nsa_scrub_bytes", 1, _on_bytes(_scrubber(users, hosts)), deterministic=True)
    out = dict.fromkeys(("environment_variables", "environment_strings", "system_env_values", "metadata_values",
                         "captured_files", "values_scrubbed", "other_processes"), 0)
    if "META_DATA_CAPTURE" in tables:
        out["environment_variables"] = _changes(
            conn, "DELETE FROM META_DATA_CAPTURE WHERE name LIKE '%ENVIRONMENT_VARIABLE%'")
    for table in META_TABLES:
        if table in tables:
            out["metadata_values"] += _changes(
                conn, f"UPDATE {_q(table)} SET value = '' WHERE {_like_any('name', BLANK_META)} AND value <> ''")
    if "TARGET_INFO_SYSTEM_ENV" in tables:
        where = Schema({t: frozenset(_columns(conn, t)) for t in ("TARGET_INFO_SYSTEM_ENV", "StringIds") if t in tables})
        recorder = recorder_version(conn, where)  # read before its paths are blanked and shortened
        out["system_env_values"] = _changes(
            conn, f"UPDATE TARGET_INFO_SYSTEM_ENV SET value = '' "
                  f"WHERE {_like_any('name', BLANK_SYSTEM_ENV)} AND value <> ''")
        if recorder:
            conn.execute("UPDATE TARGET_INFO_SYSTEM_ENV SET value = ? WHERE name = 'TargetInstallDir'",
                         (f"nsight-systems-{recorder}",))
    if "StringIds" in tables:
        env_ids = [i for i, v in conn.execute(
            "SELECT id, CAST(value AS BLOB) FROM StringIds WHERE instr(value, char(0)) > 0")
            if any(ENV_ASSIGNMENT.match(p) for p in bytes(v).decode("utf-8", "replace").split("\0"))]
        conn.executemany("UPDATE StringIds SET value = '' WHERE id = ?", [(i,) for i in env_ids])
        out["environment_strings"] = len(env_ids)
        out["captured_files"] += _blank_referenced_strings(conn, tables)
        out["values_scrubbed"] += _scrub_strings(conn, tables)
    if "ANALYSIS_FILE" in tables and "content" in _columns(conn, "ANALYSIS_FILE"):
        out["captured_files"] += _changes(conn, "UPDATE ANALYSIS_FILE SET content = '' WHERE content <> ''")
    if "TARGET_INFO_SESSION_START_TIME" in tables and {"localTime", "utcTime"} <= _columns(
            conn, "TARGET_INFO_SESSION_START_TIME"):  # the local time tells the time zone
        out["metadata_values"] += _changes(conn, "UPDATE TARGET_INFO_SESSION_START_TIME SET localTime = utcTime "
                                                 "WHERE localTime IS NOT utcTime")
    out["other_processes"] = _keep_profiled_processes(conn, tables)
    for table, column in _free_text_columns(conn, tables):
        out["values_scrubbed"] += _changes(
            conn, f"UPDATE {_q(table)} SET {_q(column)} = {_scrubbed(column)} "
                  f"WHERE typeof({_q(column)}) = 'text' AND {_q(column)} IS NOT {_scrubbed(column)}")
    return out


def _free_text_columns(conn: sqlite3.Connection, tables: set[str]) -> list[tuple[str, str]]:
    """Text columns to scrub for paths, names and identifiers: every column declared as text (or untyped)
    of every table but VERBATIM_TABLES."""
    keep = re.compile("|".join(p.replace("%", ".*") for p in VERBATIM_TABLES))
    return [(t, r[1]) for t in sorted(tables) if not keep.fullmatch(t)
            for r in conn.execute(f"PRAGMA table_info({_q(t)})")
            if not r[2] or any(k in r[2].upper() for k in ("TEXT", "CHAR", "CLOB"))]


def _keep_profiled_processes(conn: sqlite3.Connection, tables: set[str]) -> int:
    """Delete the rows of processes (and their threads) that did not run any traced work: nsys lists
    every process of the host. Returns how many processes were removed."""
    sources = [f"SELECT DISTINCT {_q(c)} & {PID_MASK} FROM {_q(t)}" for t, c in PROFILED_IN
               if t in tables and c in _columns(conn, t)]
    if not sources:
        return 0
    conn.execute(f"CREATE TEMP TABLE nsa_profiled AS {' UNION '.join(sources)}")
    removed = 0
    for table, column in PROCESS_TABLES:
        if table in tables and column in _columns(conn, table):
            n = _changes(conn, f"DELETE FROM {_q(table)} WHERE ({_q(column)} & {PID_MASK}) "
                               "NOT IN (SELECT * FROM nsa_profiled)")
            removed += n if table == "PROCESSES" else 0
    conn.execute("DROP TABLE nsa_profiled")
    return removed


def _string_refs(conn: sqlite3.Connection, tables: set[str], pairs: list[tuple[str, str]]) -> str:
    """SQL: ids of StringIds referenced by the (table, column) pairs that exist."""
    parts = [f"SELECT {_q(c)} FROM {_q(t)} WHERE {_q(c)} IS NOT NULL"  # NOT IN (..., NULL) matches nothing
             for t, c in pairs if t in tables and c in _columns(conn, t)]
    return " UNION ".join(parts) if parts else "SELECT NULL WHERE 0"


def _blank_referenced_strings(conn: sqlite3.Connection, tables: set[str]) -> int:
    """Blank captured stdout/stderr and config file contents kept as StringIds."""
    refs = _string_refs(conn, tables, [("ProcessStreams", "contentId"), ("ANALYSIS_FILE", "contentId")])
    return _changes(conn, f"UPDATE StringIds SET value = '' WHERE id IN ({refs}) AND value <> ''")


def _scrub_strings(conn: sqlite3.Connection, tables: set[str]) -> int:
    """Shorten paths and replace names and identifiers in every StringIds value, referenced or not,
    except the names the analysis reads (ANALYSIS_STRINGS, ANALYSIS_STRING_PATTERNS)."""
    return _changes(conn, f"UPDATE StringIds SET value = {_scrubbed('value')} "
                          f"WHERE NOT {_read_by_analysis(conn, tables)} "
                          f"AND typeof(value) = 'text' AND value IS NOT {_scrubbed('value')}")


def _read_by_analysis(conn: sqlite3.Connection, tables: set[str]) -> str:
    """SQL condition on a StringIds row: the analysis reads it (ANALYSIS_STRINGS, or a name like
    ANALYSIS_STRING_PATTERNS: API and NCCL kernel names, which hold no space)."""
    like = " OR ".join(f"value LIKE '{p}'" for p in ANALYSIS_STRING_PATTERNS)
    return (f"(id IN ({_string_refs(conn, tables, list(ANALYSIS_STRINGS))}) "
            f"OR (({like}) AND instr(value, ' ') = 0))")


def _scrubbed(column: str) -> str:
    """SQL: the text of ``column`` through the scrubber, byte for byte (invalid UTF-8 kept as it is)."""
    return f"CAST(nsa_scrub_bytes(CAST({_q(column)} AS BLOB)) AS TEXT)"


def _on_bytes(fn, text_result: bool = True):
    """A function of str as an SQL function on the raw bytes of a TEXT value (CAST AS BLOB): decoded with
    surrogateescape, so undecodable bytes pass through unchanged; a str result goes back as those bytes."""
    def call(raw):
        if not isinstance(raw, bytes):
            return raw
        out = fn(raw.decode("utf-8", "surrogateescape"))
        return out.encode("utf-8", "surrogateescape") if text_result and isinstance(out, str) else out
    return call


def identifying(path: str | os.PathLike, limit: int = 20) -> tuple[int, list[tuple[str, str, str, bool]]]:
    """What in the export at ``path`` still looks identifying (``redact --check``): the number of values,
    and up to ``limit`` of them as (where, kind, value, kept), ``kept`` when redact leaves it because the
    analysis reads it (kernel, API and NVTX range names). Kinds: environment, path, the IDENTIFIERS
    markers (uuid, pci, mac, email, ip, host) and the user and host names the export itself names."""
    conn = connect_readonly(path)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        users, hosts = _identities(conn, tables)
        conn.create_function("nsa_flag", 1, _on_bytes(_flagger(users, hosts), text_result=False), deterministic=True)
        columns = [("StringIds", "value")] if "StringIds" in tables else []
        columns += [(t, c) for t, c in _free_text_columns(conn, tables) if t != "StringIds"]
        if "NVTX_EVENTS" in tables and "text" in _columns(conn, "NVTX_EVENTS"):
            columns.append(("NVTX_EVENTS", "text"))
        count, found = 0, []
        for table, column in columns:
            flag = f"nsa_flag(CAST({_q(column)} AS BLOB))"
            kept = (_read_by_analysis(conn, tables) if table == "StringIds" else
                    "1" if table == "NVTX_EVENTS" else "0")
            flagged = conn.execute(  # one pass; a flagged value's second call is a hit of the flagger's memo
                f"SELECT * FROM (SELECT rowid, {flag} AS kind, {_q(column)}, {kept} FROM {_q(table)} "
                f"WHERE typeof({_q(column)}) = 'text') WHERE kind IS NOT NULL")
            for rowid, kind, value, analysis in flagged:
                count += 1
                if len(found) < limit:
                    found.append((f"{table}.{column} (row {rowid})", kind, str(value), bool(analysis)))
        return count, found
    finally:
        conn.close()


def _flagger(users: set[str], hosts: set[str]):
    """text → the kind of identifying thing it holds (see ``identifying``), or None."""
    names = [(re.compile(rf"(?<![\w.-]){re.escape(t)}(?![\w-])"), kind)
             for group, kind in ((users, "user name"), (hosts, "host name")) for t in group if len(t) >= MIN_TOKEN]
    patterns = [*((p, mark.strip("<>")) for mark, p in IDENTIFIERS), *names]

    @functools.lru_cache(maxsize=SCRUB_MEMO)  # a column's repeated values
    def flag(text):
        if not isinstance(text, str) or not text:
            return None
        if "\0" in text and any(ENV_ASSIGNMENT.match(part) for part in text.split("\0")):
            return "environment"
        found = next((kind for pattern, kind in patterns if next(_matches(pattern, text), None)), None)
        return found or ("path" if personal_path(text) else None)
    return flag
