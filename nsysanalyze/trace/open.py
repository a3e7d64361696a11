"""Open an nsys SQLite export read-only, or export a .nsys-rep first.

The file is opened with SQLite's ``mode=ro&immutable=1`` URI: no journal, WAL or lock
file is created and the file's bytes and mtime are never touched.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import signal
import sqlite3
import stat
import subprocess
import tempfile
import urllib.parse
from pathlib import Path

from ..errors import InputError

SQLITE_MAGIC = b"SQLite format 3\x00"
NSYS_REP_SUFFIXES = (".nsys-rep", ".qdrep")


# What a path names when it is not a file or directory (stat mode test -> words for the message).
SPECIAL_FILES = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                 (stat.S_ISSOCK, "a socket"))
WAL_HEADER_BYTES = 32  # a -wal file no longer than its header holds no frames
JOURNAL_MAGIC = bytes.fromhex("d9d505f920a163d7")  # first bytes of a hot rollback journal
# nsys table names a view must not impersonate (the analysis reads tables only).
NSYS_TABLE_PREFIXES = ("CUPTI_", "NVTX_", "OSRT_", "TARGET_INFO_", "META_DATA_", "EXPORT_META_DATA", "ENUM_",
                       "StringIds", "PROCESSES", "ThreadNames", "CUDA_", "NCCL_", "COMPOSITE_", "SCHED_")


def stat_input(path: str | os.PathLike) -> os.stat_result:
    """``os.stat`` of an input path (symlinks followed) that is a regular file or a directory; anything
    else (missing, FIFO, device, socket, permission denied, name too long, link loop) is a one-line
    InputError, raised before anything opens the path (opening a FIFO would block forever)."""
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise InputError(f"{p}: no such file") from None
    except OSError as e:
        raise InputError(f"{p}: cannot read ({e.strerror or e})") from None
    for is_kind, kind in SPECIAL_FILES:
        if is_kind(st.st_mode):
            raise InputError(f"{p}: is {kind}, not a file; give an nsys SQLite export")
    return st


def connect_readonly(path: str | os.PathLike) -> sqlite3.Connection:
    """Return a read-only, immutable connection to an SQLite file after basic sanity checks."""
    p = Path(path)
    st = stat_input(p)
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{p}: is a directory, expected an nsys SQLite export")
    head = read_head(p, len(SQLITE_MAGIC))
    if st.st_size == 0:
        raise InputError(f"{p}: empty file")
    if head != SQLITE_MAGIC:
        raise InputError(f"{p}: not an SQLite file (export it with: nsys export --type sqlite {p.name})")
    _refuse_pending_writes(p)
    try:
        conn = readonly_connection(p)
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        _refuse_impersonating_views(p, conn)
    except (sqlite3.DatabaseError, UnicodeDecodeError) as e:
        raise InputError(f"{p}: corrupted or unreadable SQLite file ({e})") from None
    return conn


def readonly_connection(path: str | os.PathLike) -> sqlite3.Connection:
    """An immutable read-only connection to ``path`` (any file name: the URI carries its bytes)."""
    uri = "file:" + urllib.parse.quote(os.fsencode(Path(path).resolve())) + "?mode=ro&immutable=1"
    conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
    conn.text_factory = decode_text
    return conn


SESSION_START_SQL = "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME"  # UTC epoch ns of the session start


def session_window_utc_ns(path: str | os.PathLike) -> tuple[int, int] | None:
    """(start, end) UTC epoch ns of the profiling session of the SQLite export at ``path``: its start
    (TARGET_INFO_SESSION_START_TIME.utcEpochNs) to that plus the last ANALYSIS_DETAILS.stopTime (ns after the
    start). None where the file cannot be opened as an export or lacks either (the caller cannot tell)."""
    try:
        with contextlib.closing(connect_readonly(path)) as conn:
            start = conn.execute(SESSION_START_SQL).fetchone()
            stop = conn.execute("SELECT max(stopTime) FROM ANALYSIS_DETAILS").fetchone()
    except (InputError, OSError, sqlite3.Error):
        return None
    if not start or not stop or not isinstance(start[0], int) or not isinstance(stop[0], int):
        return None
    return start[0], start[0] + stop[0]


def open_input(path: str | os.PathLike) -> io.BufferedReader:
    """The one gate every input goes through: ``stat_input`` first, then an open that cannot block (a
    FIFO swapped in after the stat is refused too, never waited on); returns the regular file, binary."""
    p = Path(path)
    stat_input(p)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as e:
        raise InputError(f"{p}: cannot read ({e.strerror or e})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise InputError(f"{p}: is not a regular file; give an nsys SQLite export")
    return os.fdopen(fd, "rb")


def read_head(p: str | os.PathLike, n: int) -> bytes:
    """The first ``n`` bytes of an input file (through ``open_input``)."""
    with open_input(p) as f:
        try:
            return f.read(n)
        except OSError as e:
            raise InputError(f"{p}: cannot read ({e.strerror or e})") from None


def _refuse_pending_writes(p: Path) -> None:
    """A read-only immutable open ignores a ``-wal`` log and a hot ``-journal``: refuse rather than
    analyze data that is stale (WAL frames not yet in the file) or half-written (interrupted transaction)."""
    wal, journal = Path(f"{p}-wal"), Path(f"{p}-journal")
    try:
        wal_size = wal.stat().st_size if wal.exists() else 0
        hot = journal.exists() and read_head(journal, len(JOURNAL_MAGIC)) == JOURNAL_MAGIC
    except OSError as e:
        raise InputError(f"{p}: cannot check for its -wal/-journal file ({e.strerror or e})") from None
    if wal_size > WAL_HEADER_BYTES:
        raise InputError(f"{p}: has changes not yet in the file ({wal.name}, SQLite write-ahead log); "
                         f"let the writer finish, or checkpoint it: sqlite3 {p.name} 'PRAGMA wal_checkpoint'")
    if hot:
        raise InputError(f"{p}: has a hot journal ({journal.name}): a write was interrupted and the file may be "
                         f"inconsistent; open it once with sqlite3 to roll it back")


def _refuse_impersonating_views(p: Path, conn: sqlite3.Connection) -> None:
    """nsys writes tables only; a view under an nsys table name would be ignored silently, so say so."""
    views = [name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'view'")
             if str(name).startswith(NSYS_TABLE_PREFIXES)]
    if views:
        raise InputError(f"{p}: {views[0]} is a view, not a table (nsys exports hold tables only; "
                         f"this file was changed after export)")


def decode_text(raw: bytes) -> str:
    """TEXT values as str; invalid UTF-8 (mangled names, corrupted pages) becomes U+FFFD, never an error."""
    return raw.decode("utf-8", "replace")


NSYS_TIMEOUT_ENV = "NSYSANALYZE_NSYS_TIMEOUT"  # seconds an `nsys export` may take (--nsys-timeout)
NSYS_TIMEOUT_S = 600.0
HASH_CHUNK = 1 << 20
NSYS_OUTPUT_TAIL = 1 << 16  # bytes of nsys' output searched for its error line


def nsys_timeout_s() -> float:
    """The --nsys-timeout in seconds (the CLI sets it in the environment, so --jobs workers see it too)."""
    try:
        return float(os.environ.get(NSYS_TIMEOUT_ENV, NSYS_TIMEOUT_S))
    except ValueError:
        return NSYS_TIMEOUT_S


def content_key(path: Path) -> str:
    """A hash of the file's bytes (the cache key: a changed report never reuses an old export)."""
    h = hashlib.blake2b(digest_size=16)
    with open_input(path) as f:
        while chunk := f.read(HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def export_nsys_rep(rep: Path, cache_dir: Path | None = None) -> Path:
    """Export a .nsys-rep to SQLite with the ``nsys`` on PATH, into a cache directory.

    The export is keyed by a hash of the report's content, so a second run reuses it. nsys writes
    a private temporary file of this process in the cache (concurrent runs never share one); it is
    checked to open as an nsys export, then renamed into place, so the cache only ever holds
    complete exports. Beside each entry a manifest records the report's hash and the entry's own
    metadata (device, inode, size, mtime and ctime: any write to it changes them); an entry is used
    only when it is a regular file of this user (never a link) that matches its manifest, otherwise
    (planted, truncated, linked, or from an older version) it is exported afresh. It is never written
    beside the input (which may sit on a read-only filesystem).
    """
    nsys = shutil.which("nsys")
    if nsys is None:
        raise InputError(
            f"{rep}: is an nsys report; nsys is not on PATH to export it. "
            f"Run `nsys export --type sqlite -o {rep.with_suffix('.sqlite').name} {rep.name}` and pass the .sqlite"
        )
    try:
        key = content_key(rep)
    except OSError as e:
        raise InputError(f"{rep}: cannot read ({e.strerror})") from None
    cache_dir = cache_dir or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "nsysanalyze"
    out = cache_dir / f"{rep.stem}-{key}.sqlite"
    manifest = cache_dir / f"{rep.stem}-{key}.manifest.json"
    if _cache_entry_valid(out, manifest, key):
        return out
    try:
        cache_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, name = tempfile.mkstemp(prefix=f".{rep.stem}.", suffix=".partial.sqlite", dir=cache_dir)
    except OSError as e:
        raise InputError(f"{cache_dir}: cannot write the export cache ({e.strerror})") from None
    os.close(fd)
    tmp = Path(name)
    try:
        _run_nsys_export(nsys, rep, tmp)
        _check_export(rep, tmp)
        os.replace(tmp, out)
        _write_manifest(manifest, key, os.lstat(out))
    except OSError as e:
        raise InputError(f"{cache_dir}: cannot write the export cache ({e.strerror})") from None
    finally:
        tmp.unlink(missing_ok=True)
    return out


def _entry_identity(key: str, st: os.stat_result) -> dict:
    """What a manifest records of a cache entry (the report's hash; the entry's dev, inode, size, times)."""
    return {"report_blake2b": key, "dev": st.st_dev, "ino": st.st_ino, "size": st.st_size,
            "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns}


def _cache_entry_valid(out: Path, manifest: Path, key: str) -> bool:
    """Whether ``out`` is the export this process's user wrote for the report hashed ``key``: a regular
    file (lstat: a link is never followed) of this user matching its manifest (read without following links)."""
    try:
        st = os.lstat(out)
        fd = os.open(manifest, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        with os.fdopen(fd, "rb") as f:
            recorded = json.loads(f.read(4096)) if stat.S_ISREG(os.fstat(f.fileno()).st_mode) else None
    except (OSError, ValueError):
        recorded = None
    return (stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid()
            and recorded == _entry_identity(key, st))


def _write_manifest(manifest: Path, key: str, st: os.stat_result) -> None:
    """Record the entry's identity beside it (a private temporary file renamed into place)."""
    fd, name = tempfile.mkstemp(prefix=".manifest.", suffix=".partial", dir=manifest.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(_entry_identity(key, st), f)
        os.replace(name, manifest)
    finally:
        Path(name).unlink(missing_ok=True)


def _run_nsys_export(nsys: str, rep: Path, tmp: Path) -> None:
    """``nsys export`` of ``rep`` into ``tmp`` in its own process group, killed after the timeout. Its
    output goes to temporary files, not pipes (a child that keeps them open cannot hold this run), and
    whatever is left of its process group when it exits, fails, times out or this run stops is killed."""
    timeout = nsys_timeout_s()
    cmd = [nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "-o", str(tmp), "--", str(rep.resolve())]
    with tempfile.TemporaryFile() as output:
        try:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        except OSError as e:
            raise InputError(f"{rep}: cannot run nsys ({e.strerror})") from None
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise InputError(f"{rep}: nsys export did not finish in {timeout:g} s (--nsys-timeout)") from None
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # the group outlives its leader while a child runs
            proc.wait()
        if proc.returncode != 0:
            output.seek(max(0, output.seek(0, os.SEEK_END) - NSYS_OUTPUT_TAIL))
            raise InputError(f"{rep}: nsys export failed (exit {proc.returncode}): {_error_line(output.read())}")


def _error_line(output: bytes) -> str:
    """The line of nsys output that says what went wrong: the last one naming an error, else the last one."""
    lines = [ln.strip() for ln in output.decode("utf-8", "replace").splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln.lower() or "fail" in ln.lower()]
    return ((errors or lines or ["no output"])[-1])[:300]


def _check_export(rep: Path, tmp: Path) -> None:
    """Refuse what nsys wrote unless it opens as an nsys SQLite export (an nsys can exit 0 with garbage)."""
    from .schema import read_schema

    try:
        conn = connect_readonly(tmp)
    except InputError as e:
        raise InputError(f"{rep}: nsys export did not produce an SQLite export ({str(e).split(': ', 1)[-1]})") from None
    try:
        read_schema(conn, str(rep))
    except sqlite3.DatabaseError as e:
        raise InputError(f"{rep}: nsys export produced a corrupted file ({e})") from None
    finally:
        conn.close()


def resolve_input(path: str | os.PathLike) -> Path:
    """Map a user argument to the SQLite file to analyze (exporting a .nsys-rep if needed)."""
    p = Path(path)
    if p.suffix in NSYS_REP_SUFFIXES and stat.S_ISREG(stat_input(p).st_mode):
        return export_nsys_rep(p)
    return p
