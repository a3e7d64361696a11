"""Output files that never replace an input, a device or a directory, and never appear half-written.

``check_output(out, inputs, force)`` refuses an OUT that is, resolves to, or hard-links to (same
``st_dev`` and ``st_ino``) one of ``inputs``; an OUT that is not a regular-file path (a directory, FIFO,
device, socket, or a symlink to one of those); an existing OUT without ``force``; an OUT whose folder is
missing. Without ``force`` it claims OUT at once, before any analysis: an empty placeholder created
with ``O_CREAT | O_EXCL``, so of several runs writing the same new OUT exactly one proceeds and the others
are told it exists; ``release_claims`` removes the placeholders of outputs never written (a failed or
stopped command). ``atomic_output(out)`` yields a private (0600) temporary file in OUT's folder to write,
then renames it onto OUT (``os.replace``: readers see the old file or the whole new one), or deletes it
(and an SQLite ``-journal`` beside it) on any failure, SIGTERM included under ``exit_on_sigterm``.
``report -o``, ``plot -o`` and ``redact OUT`` all go through both.
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
    if not force:
        _claim(target)
    return target


# Outputs this process claimed (path -> (st_dev, st_ino) of its empty placeholder), not yet written.
_CLAIMS: dict[Path, tuple[int, int]] = {}


def _claim(target: Path) -> None:
    """Create ``target`` empty, failing if anything (a file, a link, another run's claim) is there."""
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
    except FileExistsError:
        raise InputError(f"{target}: already exists; pass --force to replace it") from None
    except OSError as e:
        raise InputError(f"{target}: cannot write ({e.strerror})") from None
    st = os.fstat(fd)
    os.close(fd)
    _CLAIMS[target] = (st.st_dev, st.st_ino)


def release_claims(targets: Iterable[Path] | None = None) -> None:
    """Remove the placeholders of claimed outputs (``targets``, default all) that were never written:
    only while the path is still this process's empty placeholder."""
    for target in list(_CLAIMS) if targets is None else [t for t in targets if t in _CLAIMS]:
        ident = _CLAIMS.pop(target)
        with contextlib.suppress(OSError):
            st = os.lstat(target)
            if (st.st_dev, st.st_ino) == ident and st.st_size == 0:
                os.unlink(target)


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
        _CLAIMS.pop(out, None)
    except OSError as e:
        raise InputError(f"{out}: cannot write ({e.strerror})") from None
    finally:
        tmp.unlink(missing_ok=True)
        Path(f"{tmp}-journal").unlink(missing_ok=True)  # SQLite's, when VACUUM INTO was stopped


def _umask() -> int:
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


class Terminated(SystemExit):
    """SIGTERM under ``exit_on_sigterm``: unwinds like an exception (cleanups run), then exits 143."""


def raise_terminated(signum, frame) -> None:
    """A SIGTERM handler: raise Terminated (exit status 143), so the code running unwinds and its cleanups run."""
    raise Terminated(128 + signal.SIGTERM)


@contextlib.contextmanager
def exit_on_sigterm() -> Iterator[None]:
    """Within the block, SIGTERM raises Terminated (exit status 143 = 128 + 15) instead of killing the
    process outright, so temporary files are removed and worker processes stopped (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
