#!/usr/bin/env python3
"""Save, or compare against saved, ``nsysanalyze diagnose --format json`` of many exports (the "identical
JSON before and after a change" check).

    python bench/same_json.py --save /tmp/before fixtures/*.sqlite ../shared/traces/*/*.sqlite
    python bench/same_json.py --against /tmp/before fixtures/*.sqlite ../shared/traces/*/*.sqlite

Runs this checkout's package (``--root`` another one, e.g. an unpacked ``git archive`` of the commit before
the change) once per file, one file at a time; the JSON of each is saved as ``DIR/<name>.json`` (the
trace's path, which the report names, is the same either way). ``--against`` prints each file that
differs (and the first differing line) and exits 1 if any does.
"""
from __future__ import annotations

import argparse
import difflib
import hashlib
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def saved_name(path: Path) -> str:
    """A file name per input path (inputs from different folders may share a base name)."""
    return f"{path.stem}-{hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:8]}.json"


def report(path: Path, root: Path) -> str:
    env = dict(os.environ, PYTHONPATH=str(root))
    run = subprocess.run([sys.executable, "-m", "nsysanalyze", "diagnose", "--format", "json", str(path)],
                         cwd=root, env=env, capture_output=True, text=True)
    return run.stdout + (f"\n[exit {run.returncode}] {run.stderr.strip()}" if run.returncode else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", type=Path)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--save", type=Path, help="folder to write the reports to")
    mode.add_argument("--against", type=Path, help="folder of saved reports to compare with")
    ap.add_argument("--root", type=Path, default=ROOT, help="checkout whose nsysanalyze runs")
    args = ap.parse_args(argv)
    differing = 0
    for f in args.files:
        text = report(f, args.root.resolve())
        if args.save:
            args.save.mkdir(parents=True, exist_ok=True)
            (args.save / saved_name(f)).write_text(text)
            print(f"saved {f}", file=sys.stderr)
            continue
        before = (args.against / saved_name(f)).read_text()
        if text == before:
            print(f"same    {f}")
        else:
            differing += 1
            first = next((ln for ln in difflib.unified_diff(before.splitlines(), text.splitlines(), lineterm="", n=0)
                          if ln.startswith(("+", "-")) and not ln.startswith(("+++", "---"))), "")
            print(f"DIFFERS {f}: {first[:300]}")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
