"""One rank of a job given alone: whether a single-rank report looks like one rank of a multi-rank job,
and the command that gives the cross-rank view.

A file looks like one rank when it holds collectives (NCCL kernels, or MPI) or its name carries a rank
number (the last number of its stem) with sibling files of the same pattern beside it
(``ddp-8gpu_0.sqlite`` … ``ddp-8gpu_7.sqlite``); the glob of that pattern is the command's argument.
"""
from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

from .ranks import TRAILING_NUMBER, rank_count


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


def job_hint(report: dict) -> str | None:
    """'… looks like rank 0 of what looks like a 2-rank job …; the cross-rank view: nsysanalyze diagnose …'
    for a report of one rank that holds collectives or has numbered siblings; else None."""
    if rank_count(report) != 1:
        return None
    path = Path(str(report["trace"]["path"]))
    rank, glob, names = sibling_files(path)
    several = len(names) > 1
    if not several and not collectives(report):
        return None
    what = "it holds NCCL collectives" if not report["trace"].get("mpi") else "it uses MPI"
    why = (f"{len(names)} files {glob} in its folder" + (f" and {what}" if collectives(report) else "")
           if several else what)
    if several:
        command = "nsysanalyze diagnose " + _glob_arg(path.parent, glob)
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
