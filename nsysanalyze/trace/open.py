"""Open an nsys SQLite export read-only, or export a .nsys-rep first.

The file is opened with SQLite's ``mode=ro&immutable=1`` URI: no journal, WAL or lock
file is created and the file's bytes and mtime are never touched.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

from ..errors import InputError

SQLITE_MAGIC = b"SQLite format 3\x00"
NSYS_REP_SUFFIXES = (".nsys-rep", ".qdrep")


def connect_readonly(path: str | os.PathLike) -> sqlite3.Connection:
    """Return a read-only, immutable connection to an SQLite file after basic sanity checks."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: no such file")
    if p.is_dir():
        raise InputError(f"{p}: is a directory, expected an nsys SQLite export")
    try:
        size = p.stat().st_size
        with p.open("rb") as f:
            head = f.read(len(SQLITE_MAGIC))
    except OSError as e:
        raise InputError(f"{p}: cannot read ({e.strerror})") from None
    if size == 0:
        raise InputError(f"{p}: empty file")
    if head != SQLITE_MAGIC:
        raise InputError(f"{p}: not an SQLite file (export it with: nsys export --type sqlite {p.name})")
    uri = p.resolve().as_uri() + "?mode=ro&immutable=1"
    try:
        conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
        conn.text_factory = decode_text
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except (sqlite3.DatabaseError, UnicodeDecodeError) as e:
        raise InputError(f"{p}: corrupted or unreadable SQLite file ({e})") from None
    return conn


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
    if p.suffix in NSYS_REP_SUFFIXES and p.is_file():
        return export_nsys_rep(p)
    return p
