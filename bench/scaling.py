#!/usr/bin/env python3
"""Is nsysanalyze linear in each dimension on its own? Doubles one dimension of a real export at a time.

    python bench/scaling.py --runs 3                 # every dimension, 5 points each
    python bench/scaling.py --dims devices,streams   # a subset

Each dimension starts from a real export (``../shared/traces/h200``) repeated by ``bench/make_large.py``
and changes only that dimension, over 5 points that double it (x1 .. x16):

- ``nvtx_ranges``: every non-step NVTX range of a repeated ResNet trace is recorded again k times
  (same name, same times): more ranges, same names and steps.
- ``families``: F extra families of two ranges each (``<word> 0``, ``<word> 1``, distinct words, so
  2F distinct names), inside the first step.
- ``steps``: each ``Batch n`` step range of the ResNet-1M-style trace is cut into k equal steps.
- ``streams``: kernels spread over S streams (streamId = rowid mod S).
- ``htod_streams``: 20,160 HtoD copies over S streams, kernels over the same S streams (the
  "HtoD copies on kernel streams" fact asks, per HtoD stream, whether kernels run on it).
- ``devices``: kernels, copies and memsets of a repeated CUDA-only ResNet trace spread over D deviceIds.
- ``processes``: the same trace's GPU activities and runtime calls spread over P processes.

Every point runs ``nsysanalyze diagnose --format json FILE`` under ``/usr/bin/time`` (``--runs``
times: median wall and CPU, largest peak RSS), in a subprocess, as a user runs it. Prints per dimension the
wall, CPU (user + system: what contention on a shared machine disturbs least) and RSS of each point
and their ratio to the previous point; a doubling within 1.3x of linear costs at most 2.6x CPU and RSS.
Files go to ``--work`` (default /work/bench_data/scaling), built once and reused.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_large import build  # noqa: E402
from run import ROOT, timed  # noqa: E402

NVTX_SOURCE = ROOT.parent / "shared" / "traces" / "h200" / "resnet18-baseline-nvtx.sqlite"
CUDA_SOURCE = ROOT.parent / "shared" / "traces" / "h200" / "resnet18-baseline-cudaonly.sqlite"
GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
PUSHPOP = 59
STEP_NAME = "Batch %"
LINEAR_SLACK = 1.3


def nvtx_columns(conn: sqlite3.Connection) -> list[str]:
    return [r[1] for r in conn.execute("PRAGMA table_info(NVTX_EVENTS)")]


def step_filter() -> str:
    """SQL condition: the NVTX row is a step range (Batch n, by textId or text)."""
    return (f"COALESCE((SELECT value FROM StringIds s WHERE s.id = textId), text) LIKE '{STEP_NAME}'")


def repeat_ranges(conn: sqlite3.Connection, k: int) -> None:
    """Record every non-step push/pop range k times in all (same name and times)."""
    names = nvtx_columns(conn)
    cols, e_cols = ", ".join(f'"{c}"' for c in names), ", ".join(f'e."{c}"' for c in names)
    conn.execute("CREATE TEMP TABLE reps(k INTEGER PRIMARY KEY)")
    conn.executemany("INSERT INTO reps VALUES (?)", ((i,) for i in range(1, k)))
    conn.execute(f"INSERT INTO NVTX_EVENTS ({cols}) SELECT {e_cols} FROM NVTX_EVENTS e "
                 f"CROSS JOIN reps WHERE e.eventType = {PUSHPOP} AND NOT ({step_filter()})")


def word(i: int) -> str:
    """A digit-free name for family i (base-26 letters)."""
    out = ""
    while True:
        i, r = divmod(i, 26)
        out += chr(97 + r)
        if i == 0:
            return "layer_" + out


def add_families(conn: sqlite3.Connection, families: int) -> None:
    """``families`` families of two ranges each, nested in the first step, on its thread."""
    start, end, tid = conn.execute(f"SELECT start, \"end\", globalTid FROM NVTX_EVENTS WHERE {step_filter()} "
                                   "ORDER BY start LIMIT 1").fetchone()
    span = max(1, (end - start) // (2 * families + 1))
    rows = [(start + (2 * f + j) * span, start + (2 * f + j + 1) * span, PUSHPOP, f"{word(f)} {j}", tid, tid)
            for f in range(families) for j in (0, 1)]
    conn.executemany("INSERT INTO NVTX_EVENTS (start, \"end\", eventType, text, globalTid, endGlobalTid) "
                     "VALUES (?, ?, ?, ?, ?, ?)", rows)


def split_steps(conn: sqlite3.Connection, k: int) -> None:
    """Cut each step range into k equal consecutive steps (Batch n*k .. n*k+k-1)."""
    steps = conn.execute(f"SELECT rowid, start, \"end\", globalTid FROM NVTX_EVENTS WHERE {step_filter()} "
                         "ORDER BY start").fetchall()
    rows = []
    for n, (_, s, e, tid) in enumerate(steps):
        cuts = [s + (e - s) * j // k for j in range(k + 1)]
        rows += [(cuts[j], cuts[j + 1], PUSHPOP, f"Batch {n * k + j}", tid, tid) for j in range(k)]
    conn.executemany("DELETE FROM NVTX_EVENTS WHERE rowid = ?", ((r[0],) for r in steps))
    conn.executemany("INSERT INTO NVTX_EVENTS (start, \"end\", eventType, text, globalTid, endGlobalTid) "
                     "VALUES (?, ?, ?, ?, ?, ?)", rows)


def spread_streams(conn: sqlite3.Connection, streams: int, tables=("CUPTI_ACTIVITY_KIND_KERNEL",)) -> None:
    for t in tables:
        conn.execute(f"UPDATE {t} SET streamId = 1000 + rowid % {streams}")


def htod_streams(conn: sqlite3.Connection, streams: int) -> None:
    """20,160 HtoD copies (the repeated trace's, recorded again with later rowids) over ``streams`` streams;
    kernels over the same streams."""
    t = "CUPTI_ACTIVITY_KIND_MEMCPY"
    cols = ", ".join(f'"{r[1]}"' for r in conn.execute(f"PRAGMA table_info({t})"))
    have = conn.execute(f"SELECT count(*) FROM {t} WHERE copyKind = 1").fetchone()[0]
    for _ in range(-(-20160 // have) - 1):
        conn.execute(f"INSERT INTO {t} ({cols}) SELECT {cols} FROM {t} WHERE copyKind = 1 LIMIT {have}")
    spread_streams(conn, streams, (t, "CUPTI_ACTIVITY_KIND_KERNEL"))


def spread_devices(conn: sqlite3.Connection, devices: int) -> None:
    for t in GPU_TABLES:
        conn.execute(f"UPDATE {t} SET deviceId = rowid % {devices}")


def spread_processes(conn: sqlite3.Connection, processes: int) -> None:
    """GPU activities and runtime calls over ``processes`` pids (the pid bits of globalPid/globalTid)."""
    pid_bits = 0xFFFFFF << 24
    for t in GPU_TABLES:
        conn.execute(f"UPDATE {t} SET globalPid = (globalPid & ~{pid_bits}) | ((1000 + rowid % {processes}) << 24)")
    conn.execute(f"UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET globalTid = (globalTid & ~{pid_bits}) | "
                 f"((1000 + rowid % {processes}) << 24)")


# name -> (source, GPU activities of the repeated base, size at x1, transform(conn, size))
DIMENSIONS = {
    "nvtx_ranges": (NVTX_SOURCE, 100_000, 64, repeat_ranges),
    "families": (NVTX_SOURCE, 100_000, 1250, add_families),
    "steps": (NVTX_SOURCE, 1_000_000, 1, split_steps),
    "streams": (NVTX_SOURCE, 200_000, 1250, spread_streams),
    "htod_streams": (NVTX_SOURCE, 200_000, 1250, htod_streams),
    "devices": (CUDA_SOURCE, 40_000, 625, spread_devices),
    "processes": (CUDA_SOURCE, 40_000, 625, spread_processes),
}
UNITS = {"nvtx_ranges": "non-step ranges x", "families": "families", "steps": "steps x", "streams": "streams",
         "htod_streams": "HtoD streams", "devices": "deviceIds", "processes": "processes"}


def make_point(work: Path, dim: str, size: int) -> Path:
    """The file of one point (built once: a copy of the dimension's base, transformed)."""
    source, activities, _, transform = DIMENSIONS[dim]
    base = work / f"base-{source.stem}-{activities}.sqlite"
    if not base.exists():
        build(source, base, activities, log=lambda *_: None)
    out = work / f"{dim}-{size}.sqlite"
    if not out.exists():
        tmp = out.with_suffix(".partial")
        shutil.copyfile(base, tmp)
        conn = sqlite3.connect(tmp)
        conn.execute("PRAGMA journal_mode=OFF")
        transform(conn, size)
        conn.commit()
        conn.close()
        tmp.rename(out)
    return out


def measure(path: Path, runs: int, timeout: float) -> dict:
    cmd = [sys.executable, "-m", "nsysanalyze", "diagnose", "--format", "json", str(path)]
    got = [timed(cmd, ROOT, timeout) for _ in range(runs)]
    ok = [g for g in got if g["rc"] == 0]
    if not ok:
        return {"wall_s": None, "cpu_s": None, "rss_mb": None, "note": got[-1]["note"] or str(got[-1]["rc"])}
    return {"wall_s": statistics.median(g["wall_s"] for g in ok), "cpu_s": statistics.median(g["cpu_s"] for g in ok),
            "rss_mb": max(g["rss_mb"] for g in ok), "note": ""}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dims", default=",".join(DIMENSIONS), help="comma-separated subset of " + ", ".join(DIMENSIONS))
    ap.add_argument("--points", type=int, default=5)
    ap.add_argument("--runs", type=int, default=3, help="runs per point (median wall, max RSS)")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--work", type=Path, default=Path("/work/bench_data/scaling"))
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    results, verdicts = {}, []
    print("| dimension | size | wall (s) | CPU (s) | peak RSS (MB) | wall / previous | CPU / previous | RSS / previous |\n"
          "|---|---:|---:|---:|---:|---:|---:|---:|")
    for dim in args.dims.split(","):
        first = DIMENSIONS[dim][2]
        rows, worst = [], 0.0
        for i in range(args.points):
            size = first * 2 ** i
            m = measure(make_point(args.work, dim, size), args.runs, args.timeout)
            prev = rows[-1] if rows else None
            ratios = ("-", "-", "-")
            if prev and prev["wall_s"] and m["wall_s"]:
                w, c, r = m["wall_s"] / prev["wall_s"], m["cpu_s"] / prev["cpu_s"], m["rss_mb"] / prev["rss_mb"]
                worst = max(worst, c, r)
                ratios = (f"{w:.2f}x", f"{c:.2f}x", f"{r:.2f}x")
            wall = f"{m['wall_s']:.2f} | {m['cpu_s']:.2f}" if m["wall_s"] else f"{m['note']} | -"
            rss = f"{m['rss_mb']:.0f}" if m["rss_mb"] else "-"
            print(f"| {dim} | {size:,} {UNITS[dim]} | {wall} | {rss} | {' | '.join(ratios)} |", flush=True)
            rows.append({"size": size, **m})
            if not m["wall_s"]:
                worst = float("inf")
                break
        results[dim] = rows
        verdicts.append(f"{dim}: worst doubling of CPU or RSS {worst:.2f}x "
                        f"({'within' if worst <= 2 * LINEAR_SLACK else 'NOT within'} {LINEAR_SLACK}x of linear)")
    print("\n" + "\n".join(verdicts))
    out = ROOT / "bench" / "out" / f"scaling-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
