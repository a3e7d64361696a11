"""Open an nsys SQLite export read-only, or export a .nsys-rep first.

The file is opened with SQLite's ``mode=ro&immutable=1`` URI: no journal, WAL or lock
file is created and the file's bytes and mtime are never touched.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import stat
import subprocess
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
    head = _read_head(p, len(SQLITE_MAGIC))
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


def _read_head(p: Path, n: int) -> bytes:
    """The first ``n`` bytes of a regular file, opened without blocking (it may have become a FIFO)."""
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as e:
        raise InputError(f"{p}: cannot read ({e.strerror or e})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InputError(f"{p}: is not a regular file; give an nsys SQLite export")
        return os.read(fd, n)
    except OSError as e:
        raise InputError(f"{p}: cannot read ({e.strerror or e})") from None
    finally:
        os.close(fd)


def _refuse_pending_writes(p: Path) -> None:
    """A read-only immutable open ignores a ``-wal`` log and a hot ``-journal``: refuse rather than
    analyze data that is stale (WAL frames not yet in the file) or half-written (interrupted transaction)."""
    wal, journal = Path(f"{p}-wal"), Path(f"{p}-journal")
    try:
        wal_size = wal.stat().st_size if wal.exists() else 0
        hot = journal.exists() and _read_head(journal, len(JOURNAL_MAGIC)) == JOURNAL_MAGIC
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


def export_nsys_rep(rep: Path, cache_dir: Path | None = None) -> Path:
    """Export a .nsys-rep to SQLite with the ``nsys`` on PATH, into a cache directory.

    The export is keyed by the report's size and mtime, so a second run reuses it. It is never
    written beside the input (which may sit on a read-only filesystem).
    """
    nsys = shutil.which("nsys")
    if nsys is None:
        raise InputError(
            f"{rep}: is an nsys report; nsys is not on PATH to export it. "
            f"Run `nsys export --type sqlite -o {rep.with_suffix('.sqlite').name} {rep.name}` and pass the .sqlite"
        )
    st = rep.stat()
    key = hashlib.sha1(f"{rep.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:16]
    cache_dir = cache_dir or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "nsysanalyze"
    cache_dir.mkdir(parents=True, exist_ok=True)
    out = cache_dir / f"{rep.stem}-{key}.sqlite"
    if out.exists():
        return out
    tmp = out.with_suffix(".partial.sqlite")
    proc = subprocess.run(
        [nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "-o", str(tmp), str(rep)],
        capture_output=True, text=True,
    )
    if proc.returncode != 0 or not tmp.exists():
        last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise InputError(f"{rep}: nsys export failed: {last[0]}")
    tmp.replace(out)
    return out


def resolve_input(path: str | os.PathLike) -> Path:
    """Map a user argument to the SQLite file to analyze (exporting a .nsys-rep if needed)."""
    p = Path(path)
    if p.suffix in NSYS_REP_SUFFIXES and stat.S_ISREG(stat_input(p).st_mode):
        return export_nsys_rep(p)
    return p
