#!/usr/bin/env python3
"""Size and speed of the Perfetto timeline export against the analysis alone, in one run each.

    nice python bench/timeline.py /work/bench_data/resnet18-1M.sqlite

Times (``bench/run.py``'s ``timed``: wall, CPU, peak RSS) ``nsysanalyze diagnose --format json FILE`` (the
analysis the export starts from), ``nsysanalyze timeline FILE -o OUT`` (the default window: the steady
steps around the median) and ``timeline --all`` (the whole capture), with this checkout first on the
path, and prints a markdown table with the output's size and event count.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from run import timed

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--timeout", type=float, default=1800)
    args = ap.parse_args(argv)
    os.environ["PYTHONPATH"] = str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")
    cli = [sys.executable, "-m", "nsysanalyze"]
    print("| export | command | wall (s) | CPU (s) | peak RSS (MiB) | output (MB) | events |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for path in args.files:
        path.read_bytes()  # a warm page cache for every command
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "t.json"
            runs = {"diagnose --format json": [*cli, "diagnose", "--format", "json", str(path)],
                    "timeline (default window)": [*cli, "timeline", str(path), "-o", str(out), "--force"],
                    "timeline --all": [*cli, "timeline", str(path), "-o", str(out), "--force", "--all"]}
            for name, cmd in runs.items():
                r = timed(cmd, ROOT, args.timeout)
                size = events = "-"
                if name.startswith("timeline") and out.exists() and r["rc"] == 0:
                    size = f"{out.stat().st_size / 1e6:,.1f}"
                    with open(out) as f:
                        events = f"{json.load(f)['metadata']['nsysanalyze']['events']:,}"
                    out.unlink()
                wall = "-" if r["wall_s"] is None else f"{r['wall_s']:.2f}"
                cpu = "-" if r["cpu_s"] is None else f"{r['cpu_s']:.2f}"
                rss = "-" if r["rss_mb"] is None else f"{r['rss_mb']:,.0f}"
                note = f" ({r['rc']}: {r['note']})" if r["rc"] else ""
                print(f"| {path.name} | {name}{note} | {wall} | {cpu} | {rss} | {size} | {events} |", flush=True)


if __name__ == "__main__":
    main()
