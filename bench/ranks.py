#!/usr/bin/env python3
"""Ranks in parallel (issue 20, item 4): ``diagnose`` of N rank files with ``--jobs N`` against one rank file
alone, in one run (for a machine with at least N cores: the H200 machine has 16).

    python bench/ranks.py --ranks 8 --activities 1e6 --work /tmp/ranks

Builds the rank files with ``bench/make_large.py`` from the two ranks of a real 2-GPU DDP export
(``fixtures/vit_l32_2gpu_ddp_0.sqlite`` and ``_1``: each file is one rank, made once and copied to the
other even or odd ranks as its own file), reads every file once (warm page cache), then times, as child
processes (``bench/readers.py``'s ``timed``: wall, CPU, peak RSS): ``diagnose --format json`` of rank 0
alone, then ``diagnose --format json --jobs N`` of all N files, ``--runs`` times each, alternating (the
fastest of each is kept). Prints a Markdown table with the ratio (target: N files ≤ 2x one file);
``--json`` also writes the raw figures.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_large import build  # noqa: E402
from readers import ROOT, timed  # noqa: E402

SOURCES = [ROOT / "fixtures" / f"vit_l32_2gpu_ddp_{r}.sqlite" for r in (0, 1)]


def rank_files(work: Path, ranks: int, activities: int) -> list[Path]:
    """``ranks`` files in ``work``: rank r a copy of the repeated source of rank r % 2 (built once each)."""
    work.mkdir(parents=True, exist_ok=True)
    built = {}
    out = []
    for r in range(ranks):
        path = work / f"rank{r}.sqlite"
        src = SOURCES[r % len(SOURCES)]
        if src not in built:
            build(src, path, activities, log=lambda *a: None)
            built[src] = path
        elif not path.exists() or path.stat().st_size != built[src].stat().st_size:
            shutil.copyfile(built[src], path)
        out.append(path)
    for path in out:  # warm the page cache for every run
        with path.open("rb") as f:
            while f.read(1 << 24):
                pass
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--activities", type=float, default=1e6, help="GPU activities per rank file")
    ap.add_argument("--work", type=Path, default=Path("/tmp/nsysanalyze-ranks"), help="folder for the rank files")
    ap.add_argument("--runs", type=int, default=2, help="runs of each (the fastest is kept)")
    ap.add_argument("--json", type=Path, help="also write the raw figures here")
    args = ap.parse_args()
    files = rank_files(args.work, args.ranks, int(args.activities))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    cmd = [sys.executable, "-m", "nsysanalyze", "diagnose", "--format", "json"]
    runs = {"one": [], "all": []}
    for _ in range(args.runs):
        runs["one"].append(timed([*cmd, str(files[0])], ROOT, env))
        runs["all"].append(timed([*cmd, "--jobs", str(args.ranks), *map(str, files)], ROOT, env))
    best = {k: min(v, key=lambda r: r["wall_s"]) for k, v in runs.items()}
    print(f"{args.ranks} rank files of {int(args.activities):,} GPU activities on {os.cpu_count()} cores\n")
    print("| run | wall (s) | CPU (s) | peak RSS (MiB, largest process) | wall vs one file | rc |\n|---|---:|---:|---:|---:|---|")
    for key, label in (("one", "diagnose, 1 file"), ("all", f"diagnose --jobs {args.ranks}, {args.ranks} files")):
        r = best[key]
        print(f"| {label} | {r['wall_s']:.2f} | {r['cpu_s']:.2f} | {r['rss_mb']:.0f} | "
              f"{r['wall_s'] / best['one']['wall_s']:.2f}x | {r['rc']}{' ' + r['note'] if r['rc'] else ''} |")
    if args.json:
        args.json.write_text(json.dumps({"cores": os.cpu_count(), "ranks": args.ranks, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
