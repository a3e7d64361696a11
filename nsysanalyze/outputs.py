"""Output files that never replace an input, a device or a directory, and never appear half-written.

``check_output(out, inputs, force)`` refuses an OUT that is, resolves to, or hard-links to (same
``st_dev`` and ``st_ino``) one of ``inputs``; an OUT that is not a regular-file path (a directory, FIFO,
device, socket, or a symlink to one of those); an existing OUT without ``force``; an OUT whose folder is
missing. ``atomic_output(out)`` yields a private (0600) temporary file in OUT's folder to write, then
renames it onto OUT (``os.replace``: readers see the old file or the whole new one), or deletes it on
any failure. ``report -o``, ``plot -o`` and ``redact OUT`` all go through both.
"""
from __future__ import annotations

import contextlib
import os
import signal
import stat
import tempfile
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

from .errors import InputError


def check_output(out: str | os.PathLike, inputs: Iterable[str | os.PathLike], force: bool = False) -> Path:
    """``out`` as a Path once it is safe to (re)place; InputError (one line) otherwise."""
    target = Path(out)
    try:
        link = target.lstat()
    except FileNotFoundError:
        link = None
    except OSError as e:
        raise InputError(f"{target}: cannot use as output ({e.strerror})") from None
    try:
        st = target.stat() if link is not None else None
    except FileNotFoundError:
        st = None  # a dangling symlink: replaced by the new file, never written through
    except OSError as e:
        raise InputError(f"{target}: cannot use as output ({e.strerror})") from None
    for given in inputs:
        if _same_file(target, st, Path(given)):
            raise InputError(f"{target}: is the input file {given}; give another output path "
                             "(inputs are never modified)")
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise InputError(f"{target}: is a directory; give the output file's path")
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise InputError(f"{target}: is not a regular file (a device, FIFO or socket); give a file path")
    if link is not None and not force:
        raise InputError(f"{target}: already exists; pass --force to replace it")
    if not target.parent.resolve().is_dir():
        raise InputError(f"{target.parent}: no such directory")
    return target


def _same_file(target: Path, target_stat: os.stat_result | None, given: Path) -> bool:
    """Whether ``target`` names the input ``given``: the same resolved path, or the same inode."""
    try:
        if target.resolve() == given.resolve():
            return True
        if target_stat is None:
            return False
        st = given.stat()
    except (OSError, RuntimeError):
        return False
    return (st.st_dev, st.st_ino) == (target_stat.st_dev, target_stat.st_ino)


@contextlib.contextmanager
def atomic_output(out: Path) -> Iterator[Path]:
    """Yield a new private temporary file beside ``out`` (same suffix); on success it gets the
    default permissions (0666 less the umask) and replaces ``out``; on failure it is deleted."""
    fd, name = tempfile.mkstemp(prefix=f".{out.stem}.", suffix=f".partial{out.suffix}", dir=out.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, out)
    except OSError as e:
        raise InputError(f"{out}: cannot write ({e.strerror})") from None
    finally:
        tmp.unlink(missing_ok=True)


def _umask() -> int:
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


class Terminated(SystemExit):
    """SIGTERM under ``exit_on_sigterm``: unwinds like an exception (cleanups run), then exits 143."""


@contextlib.contextmanager
def exit_on_sigterm() -> Iterator[None]:
    """Within the block, SIGTERM raises Terminated (exit status 143 = 128 + 15) instead of killing the
    process outright, so temporary files are removed and worker processes stopped (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum, frame):
        raise Terminated(128 + signal.SIGTERM)
    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
