#!/usr/bin/env python3
"""``diagnose`` wall/CPU time and peak RSS against the reader (the page reader, trace/pages.py, or SQL
only) and the number of reader threads, and `nsys stats` beside it when an nsys is given, on one export in
one run.

    python bench/readers.py /work/bench_data/resnet18-10M.sqlite --readers pages,sql --workers 1,2,4,8 \
        --nsys /opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys

Each run is a child process timed by ``os.wait4`` (wall seconds, user + system CPU seconds, peak RSS),
so no ``/usr/bin/time`` is needed. nsysanalyze runs from this checkout with
``nsysanalyze.trace.tables.PAGES`` on ("pages") or off ("sql") and ``WORKERS`` set to each count (readers per
table; two tables are read side by side). ``nsys stats -r cuda_gpu_kern_sum,cuda_gpu_mem_size_sum`` runs on a copy of the export (it writes
next to its input). Prints a Markdown table; ``--json`` also writes the raw figures.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN_WITH_READER = ("import sys; from nsysanalyze.trace import tables; tables.PAGES = sys.argv[1] == 'pages'; "
                   "tables.WORKERS = int(sys.argv[2]); sys.argv = ['nsysanalyze'] + sys.argv[3:]; "
                   "from nsysanalyze.cli import program; program()")


def timed(cmd: list[str], cwd: Path, env: dict | None = None) -> dict:
    """Wall and CPU seconds, peak RSS (MiB) and exit code of ``cmd`` (stdout discarded)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode(errors="replace").strip().splitlines()
    proc.stderr.close()
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "rss_mb": usage.ru_maxrss / 1024,
            "rc": os.waitstatus_to_exitcode(status), "note": err[-1][:160] if err else ""}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("export", type=Path)
    ap.add_argument("--readers", default="pages", help="comma-separated readers: pages (the default reader), sql")
    ap.add_argument("--workers", default="1,2,4,8", help="comma-separated reader-thread counts")
    ap.add_argument("--nsys", type=Path, help="an nsys binary for `nsys stats` beside it")
    ap.add_argument("--runs", type=int, default=1, help="runs of each (the fastest is kept)")
    ap.add_argument("--json", type=Path, help="also write the raw figures here")
    args = ap.parse_args()
    path = args.export.resolve()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    rows = []
    print(f"{path.name} on {os.cpu_count()} cores\n")
    print("| tool | wall (s) | CPU (s) | peak RSS (MiB) | wall vs first row | rc |\n|---|---:|---:|---:|---:|---|", flush=True)

    def add(tool: str, runs: list[dict]) -> None:  # printed as it comes (a run cut short keeps its rows)
        r = {"tool": tool, **min(runs, key=lambda r: r["wall_s"])}
        rows.append(r)
        print(f"| {r['tool']} | {r['wall_s']:.2f} | {r['cpu_s']:.2f} | {r['rss_mb']:.0f} | "
              f"{r['wall_s'] / rows[0]['wall_s']:.2f}x | {r['rc']}{' ' + r['note'] if r['rc'] else ''} |", flush=True)
    for reader in args.readers.split(","):
        for w in [int(x) for x in args.workers.split(",")]:
            add(f"nsysanalyze, {reader} reader, {w} thread{'s' * (w > 1)} per table",
                [timed([sys.executable, "-c", RUN_WITH_READER, reader, str(w), "diagnose", "--format", "json", str(path)],
                       ROOT, env) for _ in range(args.runs)])
    if args.nsys:
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / path.name
            shutil.copyfile(path, copy)
            add("nsys stats", [timed([str(args.nsys), "stats", "-r", "cuda_gpu_kern_sum,cuda_gpu_mem_size_sum", str(copy)],
                                     Path(tmp)) for _ in range(args.runs)])
    if args.json:
        args.json.write_text(json.dumps({"export": str(path), "cores": os.cpu_count(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
