"""One rank of a job given alone: whether a single-rank report looks like one rank of a multi-rank job,
and the command that gives the cross-rank view.

A file looks like one rank when it holds collectives (NCCL kernels, or MPI) or its name carries a rank
number (the last number of its stem) with sibling files of the same pattern beside it
(``ddp-8gpu_0.sqlite`` … ``ddp-8gpu_7.sqlite``); the glob of that pattern is the command's argument. The
ranks of one job are profiled at the same time, so a sibling whose profiling session does not overlap this
file's in UTC (``run_1.sqlite`` and ``run_2.sqlite``, one run after the other) is not one of its ranks; one
whose session is unknown (not an SQLite export, or no session times) still counts.
"""
from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

from .ranks import TRAILING_NUMBER, rank_count
from .trace.open import session_window_utc_ns


def collectives(report: dict) -> bool:
    """Whether the report holds NCCL kernels or MPI."""
    return bool(report["trace"].get("mpi")) or any((d.get("nccl_count") or 0) > 0 for d in report["summary"]["devices"])


def sibling_files(path: Path) -> tuple[int | None, str | None, list[str]]:
    """(rank number, glob, files of the pattern beside ``path`` including it) of a file whose stem ends its
    last number: ``run_3.sqlite`` → (3, 'run_*.sqlite', ['run_0.sqlite', …]); (None, None, []) without one."""
    m = TRAILING_NUMBER.search(path.stem)
    if m is None:
        return None, None, []
    before, after = path.stem[:m.start()], path.stem[m.end():] + path.suffix
    pattern = re.compile(re.escape(before) + r"\d+" + re.escape(after) + r"\Z")
    try:
        names = sorted(n for n in os.listdir(path.parent) if pattern.match(n))
    except OSError:
        names = []
    return int(m.group(1)), before + "*" + after, names


def _profiled_with(path: Path, names: list[str]) -> list[str]:
    """The ``names`` (files beside ``path``) whose profiling session overlaps that of ``path`` in UTC, or
    is unknown on either side; ``path``'s own name is kept."""
    own = session_window_utc_ns(path) if len(names) > 1 else None
    if own is None:
        return names

    def overlaps(name: str) -> bool:
        other = session_window_utc_ns(path.parent / name)
        return other is None or (other[0] < own[1] and own[0] < other[1])

    return [n for n in names if n == path.name or overlaps(n)]


def job_hint(report: dict) -> str | None:
    """'… looks like rank 0 of what looks like a 2-rank job …; the cross-rank view: nsysanalyze diagnose …'
    for a report of one rank that holds collectives or has numbered siblings; else None."""
    if rank_count(report) != 1:
        return None
    path = Path(str(report["trace"]["path"]))
    rank, glob, matching = sibling_files(path)
    names = _profiled_with(path, matching)
    several = len(names) > 1
    if not several and not collectives(report):
        return None
    what = "it holds NCCL collectives" if not report["trace"].get("mpi") else "it uses MPI"
    every = names == matching  # no sibling left out: the glob names the job's files
    files = f"{len(names)} files {glob}" if every else f"{len(names)} of the files {glob}, profiled at the same time,"
    why = f"{files} in its folder" + (f" and {what}" if collectives(report) else "") if several else what
    if several:
        command = "nsysanalyze diagnose " + (_glob_arg(path.parent, glob) if every else
                                             " ".join(shlex.quote(str(path.parent / n)) for n in names))
        return (f"this is rank {rank} of what looks like a {len(names)}-rank job ({why}); "
                f"for the cross-rank view run: {command}")
    return (f"this looks like one rank of a multi-rank job ({why}); give every rank's export together for the "
            f"cross-rank view: nsysanalyze diagnose RANK_0.sqlite RANK_1.sqlite …")


def _glob_arg(folder: Path, glob: str) -> str:
    """The glob as a shell argument: its literal parts quoted when they need it, the ``*`` left to the shell."""
    return "*".join(part if shlex.quote(part) == part or not part else shlex.quote(part)
                    for part in str(folder / glob).split("*", 1))


def with_job_hint(report: dict) -> dict:
    """``report`` with :func:`job_hint` as its first note, when there is one."""
    hint = job_hint(report)
    return report if hint is None else {**report, "notes": [hint, *report["notes"]]}
