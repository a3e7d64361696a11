#!/usr/bin/env python3
"""Benchmark nsysanalyze against `nsys stats` and `nsys-ai diagnose` on the same exports.

    python bench/run.py /work/bench_data/resnet18-1M.sqlite /work/bench_data/resnet18-10M.sqlite

For each file, in one go: ``nsysanalyze diagnose --format json`` (on the file itself: it opens
read-only), ``nsys stats -r cuda_gpu_kern_sum,cuda_gpu_mem_size_sum`` (nsys 2023.4 through
../shared/tools/nsys-local.sh) and ``nsys-ai diagnose`` (from its own venv), the last two on a fresh
copy because they write next to (nsys stats) or into (nsys-ai) their input; nsys-ai runs once on a fresh
copy (its first run: it builds its cache into and beside the file) and ``--nsys-ai-runs`` more times on
that copy (cached). Every command
runs under ``/usr/bin/time -f '%e %M'``: wall seconds and peak RSS. The file is read once first so
every tool starts from a warm page cache; copying is not timed. nsysanalyze and nsys stats take turns,
one run each per round, in reversed order every other round (``--runs`` rounds, medians), so a machine whose
speed drifts slows them alike and none always runs first;
``--before DIR`` adds another checkout's nsysanalyze to each round (e.g. ``git archive REV | tar -x -C DIR``:
the session start), for before/after in the same rounds. Both checkouts' modules are byte-compiled first (as an
installed package's are), so neither pays for compiling its source when the environment sets
PYTHONDONTWRITEBYTECODE. Prints a markdown table with the
ratios (tool / nsysanalyze) and writes the raw figures as JSON to bench/out/ (after each file).
``--tools`` picks a subset (nsys-ai takes minutes from 1M activities on).
"""
from __future__ import annotations

import argparse
import compileall
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NSYS_LOCAL = ROOT.parent / "shared" / "tools" / "nsys-local.sh"
NSYS_AI = Path("/work/bench_venv/bin/nsys-ai")


def timed(cmd: list[str], cwd: Path, timeout: float, env: dict | None = None) -> dict:
    """Run ``cmd`` (in ``cwd``, with ``env``: default this process's) under /usr/bin/time; wall seconds, CPU
    seconds (user + system), peak RSS (MB), exit code, last stderr line."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        # its own process group, so a timeout stops the tool itself, not only /usr/bin/time
        proc = subprocess.Popen(["/usr/bin/time", "-f", "%e %M %U %S", "-o", tf.name, *cmd], cwd=cwd, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            _, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return {"wall_s": None, "cpu_s": None, "rss_mb": None, "rc": "timeout", "note": f"killed after {timeout:.0f} s"}
        fields = (tf.read().strip().splitlines() or ["nan nan nan nan"])[-1].split()
    err = [line for line in stderr.splitlines() if line.strip()]
    return {"wall_s": float(fields[0]), "cpu_s": float(fields[2]) + float(fields[3]), "rss_mb": float(fields[1]) / 1024,
            "rc": proc.returncode,
            "note": err[-1][:160] if proc.returncode and err else ""}


def on_copy(src: Path, work: Path, cmd_of, timeout: float, runs: int = 1) -> list[dict]:
    """Copy ``src`` into a fresh ``work`` folder, run cmd_of(copy) there ``runs`` times in a row (a
    tool's later runs find what its first run wrote: nsys-ai's cache), remove everything after."""
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    try:
        copy = work / src.name
        shutil.copyfile(src, copy)
        os.sync()
        return [timed(cmd_of(copy), work, timeout) for _ in range(runs)]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def gpu_activities(path: Path) -> int:
    import sqlite3
    conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro&immutable=1", uri=True)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    return sum(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in
               ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET") if t in tables)


def median_run(runs: list[dict]) -> dict:
    ok = [r for r in runs if r["rc"] == 0]
    if not ok:
        return runs[-1]
    return {"wall_s": statistics.median(r["wall_s"] for r in ok), "cpu_s": statistics.median(r["cpu_s"] for r in ok),
            "rss_mb": max(r["rss_mb"] for r in ok),
            "rc": 0, "note": f"median of {len(ok)}" if len(ok) > 1 else "", "runs": [r["wall_s"] for r in ok]}


def bench(path: Path, args) -> dict:
    work = Path(args.work) / "bench-copy"
    with path.open("rb") as f:  # warm the page cache for everyone
        while f.read(1 << 24):
            pass
    out = {"file": str(path), "size_mb": path.stat().st_size / 1e6, "gpu_activities": gpu_activities(path), "tools": {}}
    diagnose = [sys.executable, "-m", "nsysanalyze", "diagnose", "--format", "json", str(path)]
    turns = []  # (tool, one run of it): each round runs every tool once
    for tree in (ROOT, args.before):  # bytecode, as an installed package has it (PYTHONDONTWRITEBYTECODE may be set)
        if tree:
            compileall.compile_dir(tree / "nsysanalyze", quiet=1)
    if "nsysanalyze" in args.tools:  # run from ROOT: this checkout's package
        turns.append(("nsysanalyze", lambda: timed(diagnose, ROOT, args.timeout)))
    if args.before:  # from its own folder, first on the path: that checkout's package
        before = args.before.resolve()
        before_path = os.pathsep.join(filter(None, [str(before), os.environ.get("PYTHONPATH")]))  # the rest stays importable
        turns.append((f"nsysanalyze ({before.name})",
                      lambda: timed(diagnose, before, args.timeout, {**os.environ, "PYTHONPATH": before_path})))
    if "nsys-stats" in args.tools:
        turns.append(("nsys stats", lambda: on_copy(path, work, lambda p: [
            "bash", str(NSYS_LOCAL), "nsys", "stats", "-r", "cuda_gpu_kern_sum,cuda_gpu_mem_size_sum", str(p)],
            args.timeout)[0]))
    runs: dict[str, list[dict]] = {}
    for i in range(args.runs):
        for tool, run in turns if i % 2 == 0 else turns[::-1]:  # ABBA: no tool always runs first
            runs.setdefault(tool, []).append(run())
    out["tools"].update({tool: median_run(r) for tool, r in runs.items()})
    if "nsys-ai" in args.tools:  # a first run on a fresh copy, then runs that find its cache
        runs = on_copy(path, work, lambda p: [str(args.nsys_ai), "diagnose", str(p)], args.nsys_ai_timeout,
                       1 + args.nsys_ai_runs)
        out["tools"]["nsys-ai diagnose (first run)"] = median_run(runs[:1])
        out["tools"]["nsys-ai diagnose (cached)"] = median_run(runs[1:])
    return out


def table(results: list[dict]) -> str:
    lines = ["| export | GPU activities | tool | wall (s) | CPU (s) | peak RSS (MB) | wall vs nsysanalyze | "
             "CPU vs nsysanalyze | RSS vs nsysanalyze |", "|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        base = r["tools"].get("nsysanalyze", {})
        for tool, m in r["tools"].items():
            if m["rc"] != 0:
                lines.append(f"| {Path(r['file']).name} | {r['gpu_activities']:,} | {tool} | {m['rc']} | - | - | - | - | - |")
                continue

            def ratio(key: str) -> str:
                return f"{m[key] / base[key]:.2f}x" if base.get(key) else "-"
            lines.append(f"| {Path(r['file']).name} | {r['gpu_activities']:,} | {tool} | {m['wall_s']:.2f} | "
                         f"{m['cpu_s']:.2f} | {m['rss_mb']:.0f} | {ratio('wall_s')} | {ratio('cpu_s')} | {ratio('rss_mb')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--runs", type=int, default=3, help="rounds of nsysanalyze and nsys stats, taking turns (median wall, max RSS)")
    ap.add_argument("--before", type=Path, help="another checkout whose nsysanalyze also runs in each round")
    ap.add_argument("--nsys-ai-runs", type=int, default=1, help="cached runs of nsys-ai after its first run")
    ap.add_argument("--nsys-ai", type=Path, default=NSYS_AI, help="nsys-ai executable (its own venv)")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--nsys-ai-timeout", type=float, default=3600)
    ap.add_argument("--work", default=os.environ.get("BENCH_WORK", "/work/bench_data"),
                    help="folder for the copies the other tools run on")
    ap.add_argument("--tools", default="nsysanalyze,nsys-stats,nsys-ai",
                    help="comma-separated subset of nsysanalyze, nsys-stats, nsys-ai")
    args = ap.parse_args(argv)
    args.tools = set(args.tools.split(","))
    machine = {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version(),
               "mem_gb": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 ** 30}
    out_dir = ROOT / "bench" / "out"
    out_dir.mkdir(parents=True, exist_ok=True)
    saved = out_dir / f"results-{time.strftime('%Y%m%d-%H%M%S')}.json"
    results = []
    for f in args.files:
        began = time.time()
        results.append(bench(f, args))
        saved.write_text(json.dumps({"machine": machine, "results": results}, indent=2))  # after each file
        print(f"{f}: done in {time.time() - began:.0f} s", file=sys.stderr)
    print(table(results))


if __name__ == "__main__":
    main()
