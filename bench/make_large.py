#!/usr/bin/env python3
"""Build a large, real-derived nsys SQLite export by repeating a real export's activity in time.

    python bench/make_large.py ../shared/traces/h200/resnet18-baseline-nvtx.sqlite \
        --activities 1000000 -o /work/bench_data/resnet18-1M.sqlite

The output is a copy of the source (same schema, every table kept) in which every table with a
``start`` column (kernels, memcpys, memsets, runtime/driver calls, synchronization, NVTX, OSRT,
profiler overhead, ...) holds its rows ``R`` times: copy ``k`` is shifted by ``k * period`` ns
(period = the source's activity span + 1 ms), its ``correlationId`` by ``k * (max id + 1)`` so
GPU work still joins its launching call, and an integer primary key (if any) made fresh.
NVTX domain create/destroy rows (eventType 75/76) stay once. Step ranges keep working: the
names of the step family that nsysanalyze detects in the source (``Batch 3`` ...) are renumbered
per copy (new ``StringIds`` rows, or new ``text``), so the output has R x (source steps) steps.
``ANALYSIS_DETAILS`` is stretched to cover the copies. The source is opened read-only.
``R`` = ceil(activities / GPU activities of the source), GPU activities = kernels + memcpys + memsets.
"""
from __future__ import annotations

import argparse
import math
import re
import sqlite3
import sys
import time
from pathlib import Path

GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
NVTX = "NVTX_EVENTS"
NVTX_DOMAIN_ROWS = (75, 76)
GAP_NS = 1_000_000
DIGITS = re.compile(r"\d+")


def columns(conn: sqlite3.Connection, table: str) -> list[tuple[str, bool]]:
    """(name, is integer primary key) per column."""
    return [(r[1], bool(r[5]) and "INT" in (r[2] or "").upper()) for r in conn.execute(f'PRAGMA table_info("{table}")')]


def step_names(src: Path) -> set[str]:
    """NVTX range names of the step family nsysanalyze detects in the source (empty if none)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from nsysanalyze.steps import detect_step_family, family_of
    from nsysanalyze.trace import Trace

    with Trace(src) as t:
        nvtx = t.nvtx
        family = detect_step_family(nvtx)
        if family is None:
            return set()
        return set(nvtx["name"][family_of(nvtx["name"]) == family])


def renumber(name: str, k: int, span: int) -> str:
    """``name`` with each digit run n replaced by n + k * span."""
    return DIGITS.sub(lambda m: str(int(m.group()) + k * span), name)


def build(src: Path, dst: Path, activities: int, log=print) -> dict:
    """Write the repeated export to ``dst``; returns counts (reps, rows per table)."""
    t0 = time.perf_counter()
    src_conn = sqlite3.connect(src.resolve().as_uri() + "?mode=ro&immutable=1", uri=True)
    tables = [r[0] for r in src_conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    cols = {t: columns(src_conn, t) for t in tables}
    per_rep = sum(src_conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in GPU_TABLES if t in cols)
    if per_rep == 0:
        raise SystemExit(f"{src}: no GPU activity to repeat")
    reps = max(1, math.ceil(activities / per_rep))
    repeated = [t for t in tables if any(c == "start" for c, _ in cols[t])]

    def where(t: str) -> str:
        return f"WHERE eventType NOT IN {NVTX_DOMAIN_ROWS}" if t == NVTX and any(c == "eventType" for c, _ in cols[t]) else ""

    lo, hi, max_corr = None, None, 0
    for t in repeated:
        last = 'COALESCE("end", start)' if any(c == "end" for c, _ in cols[t]) else "start"
        a, b = src_conn.execute(f'SELECT min(start), max({last}) FROM "{t}" {where(t)}').fetchone()
        if a is not None:
            lo, hi = (a if lo is None else min(lo, a)), (b if hi is None else max(hi, b))
        if any(c == "correlationId" for c, _ in cols[t]):
            max_corr = max(max_corr, src_conn.execute(f'SELECT COALESCE(max(correlationId), 0) FROM "{t}"').fetchone()[0])
    period = hi - lo + GAP_NS
    corr_step = max_corr + 1
    names = step_names(src)
    numbers = [int(n) for name in names for n in DIGITS.findall(name)]
    span = (max(numbers) - min(numbers) + 1) if numbers else 0

    dst.parent.mkdir(parents=True, exist_ok=True)
    for p in (dst, Path(str(dst) + "-journal")):
        p.unlink(missing_ok=True)
    out = sqlite3.connect(dst)
    src_conn.backup(out)
    src_conn.close()
    out.executescript("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA cache_size=-262144; PRAGMA temp_store=MEMORY;")
    out.execute("CREATE TEMP TABLE reps(k INTEGER PRIMARY KEY)")
    out.executemany("INSERT INTO reps VALUES (?)", ((k,) for k in range(1, reps)))

    rename_id = rename_text = False
    if names and reps > 1 and NVTX in cols:
        out.execute("CREATE TEMP TABLE rename_id(k INTEGER, old INTEGER, new INTEGER, PRIMARY KEY (k, old))")
        out.execute("CREATE TEMP TABLE rename_text(k INTEGER, old TEXT, new TEXT, PRIMARY KEY (k, old))")
        ids = {}
        if "StringIds" in cols and any(c == "textId" for c, _ in cols[NVTX]):
            marks = ",".join("?" * len(names))
            ids = dict(out.execute(f"SELECT value, id FROM StringIds WHERE value IN ({marks})", sorted(names)))
        next_id = (out.execute("SELECT COALESCE(max(id), 0) FROM StringIds").fetchone()[0] + 1) if ids else 0
        new_strings, id_rows, text_rows = [], [], []
        for k in range(1, reps):
            for name in sorted(names):
                new = renumber(name, k, span)
                text_rows.append((k, name, new))
                if name in ids:
                    new_strings.append((next_id, new))
                    id_rows.append((k, ids[name], next_id))
                    next_id += 1
        out.executemany("INSERT INTO StringIds(id, value) VALUES (?, ?)", new_strings)
        out.executemany("INSERT INTO rename_id VALUES (?, ?, ?)", id_rows)
        out.executemany("INSERT INTO rename_text VALUES (?, ?, ?)", text_rows)
        rename_id, rename_text = bool(id_rows), True

    counts = {}
    for t in repeated:
        n_src = out.execute(f'SELECT count(*) FROM "{t}" {where(t)}').fetchone()[0]
        if n_src == 0 or reps == 1:
            counts[t] = n_src
            continue
        pk_max = {c: out.execute(f'SELECT COALESCE(max("{c}"), 0) FROM "{t}"').fetchone()[0] for c, pk in cols[t] if pk}
        select = []
        for c, _ in cols[t]:
            q = f'e."{c}"'
            if c in ("start", "end"):
                q = f"{q} + r.k * {period}"
            elif c == "correlationId":
                q = f"{q} + r.k * {corr_step}"
            elif c in pk_max:
                q = f"{q} + r.k * {pk_max[c] + 1}"
            elif t == NVTX and c == "textId" and rename_id:
                q = f"COALESCE((SELECT x.new FROM rename_id x WHERE x.k = r.k AND x.old = e.textId), {q})"
            elif t == NVTX and c == "text" and rename_text:
                q = f"COALESCE((SELECT x.new FROM rename_text x WHERE x.k = r.k AND x.old = e.text), {q})"
            select.append(q)
        names_sql = ", ".join(f'"{c}"' for c, _ in cols[t])
        out.execute(f'CREATE TEMP TABLE src_rows AS SELECT * FROM "{t}" {where(t)}')
        out.execute(f'INSERT INTO "{t}" ({names_sql}) SELECT {", ".join(select)} FROM reps r CROSS JOIN src_rows e')
        out.execute("DROP TABLE src_rows")
        counts[t] = n_src * reps
        log(f"  {t}: {n_src} x {reps} = {n_src * reps} rows ({time.perf_counter() - t0:.1f} s)")
    if "ANALYSIS_DETAILS" in cols and {"duration", "stopTime"} <= {c for c, _ in cols["ANALYSIS_DETAILS"]}:
        out.execute(f"UPDATE ANALYSIS_DETAILS SET duration = duration + {(reps - 1) * period}, "
                    f"stopTime = stopTime + {(reps - 1) * period}")
    out.commit()
    out.close()
    gpu = sum(counts.get(t, 0) for t in GPU_TABLES)
    log(f"{dst}: {reps} copies, {gpu} GPU activities, {dst.stat().st_size / 1e6:.0f} MB in {time.perf_counter() - t0:.1f} s")
    return {"reps": reps, "gpu_activities": gpu, "period_ns": period, "rows": counts}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source", type=Path, help="real nsys SQLite export (opened read-only)")
    ap.add_argument("--activities", type=float, default=1e6, help="GPU activities wanted (kernels+memcpys+memsets)")
    ap.add_argument("-o", "--output", type=Path, required=True, help="output .sqlite (overwritten)")
    args = ap.parse_args(argv)
    if args.output.resolve() == args.source.resolve():
        raise SystemExit("refusing to overwrite the source")
    build(args.source, args.output, int(args.activities))


if __name__ == "__main__":
    main()
