#!/usr/bin/env python3
"""Start-up time of the command line against the bare interpreter, in one run.

    python bench/startup.py --runs 11

Times (wall, median of ``--runs``) ``python -c 'import json, sqlite3'`` (the floor: an interpreter
that can read an export) and ``python -m nsysanalyze --help`` / ``diagnose --help`` with this
checkout first on the path, and prints each with its ratio to the floor (target: --help <= 5x).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = {
    "python -c 'import json, sqlite3'": [sys.executable, "-c", "import json, sqlite3"],
    "nsysanalyze --help": [sys.executable, "-m", "nsysanalyze", "--help"],
    "nsysanalyze diagnose --help": [sys.executable, "-m", "nsysanalyze", "diagnose", "--help"],
}


def wall(cmd: list[str], runs: int) -> float:
    """Median wall seconds of ``runs`` runs of ``cmd`` (output discarded)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=11)
    args = ap.parse_args(argv)
    floor = None
    print("| command | wall (s) | vs import json, sqlite3 |\n|---|---:|---:|")
    for i, (label, cmd) in enumerate(COMMANDS.items()):
        w = wall(cmd, args.runs)
        floor = floor if i else w
        print(f"| `{label}` | {w:.3f} | {w / floor:.1f}x |")


if __name__ == "__main__":
    main()
