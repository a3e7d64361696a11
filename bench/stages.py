#!/usr/bin/env python3
"""Wall and CPU seconds (of them system), page faults and peak RSS per pipeline stage of one export, in this
checkout (reader-thread CPU included).

    python bench/stages.py /work/bench_data/resnet18-1M.sqlite

Runs the stages of ``Analysis`` one after the other — imports; reading the tables (kernels, runtime
calls by API name, memcpys, memsets, side by side); step choice (NVTX families judged against the
GPU work, projection, or steps inferred from the kernel sequence); the one metrics pass, split into
its GPU and CPU metrics, the idle-gap attribution and the per-kernel table; evidence + rules; the
report dict (header facts, framework); the JSON render — and prints one line per stage and the peak RSS.
The pass's parts are timed by wrapping the functions it calls (this script only).
"""
from __future__ import annotations

import functools
import os
import resource
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


PAGE_MIB = os.sysconf("SC_PAGE_SIZE") / 2**20 if hasattr(os, "sysconf") else 0.0


def now() -> list[float]:
    """Wall seconds, process CPU seconds, system CPU seconds and minor page faults so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return [time.perf_counter(), time.process_time(), usage.ru_stime, usage.ru_minflt]


def rss_mib() -> float | None:
    """The process's resident set now (MiB), from /proc/self/statm; None where there is none."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * PAGE_MIB
    except OSError:
        return None


class Clock:
    """Per stage name (accumulated): wall, process-CPU and system-CPU seconds and minor page faults (``now``),
    and the largest RSS (MiB) seen while each stage ran (a sampling thread; the innermost running stage gets
    the sample)."""

    def __init__(self):
        self.rows: dict[str, list[float]] = {}
        self.peaks: dict[str, float] = {}
        self.stage = "imports"
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        while self.note() is not None:
            time.sleep(0.005)

    def note(self) -> float | None:
        """Record the RSS now against the running stage."""
        r = rss_mib()
        if r is not None and r > self.peaks.get(self.stage, 0.0):
            self.peaks[self.stage] = r
        return r

    def add(self, name: str, spent: list[float]) -> None:
        row = self.rows.setdefault(name, [0.0] * 4)
        row[:] = [r + d for r, d in zip(row, spent)]

    def run(self, name: str, fn, *args, **kwargs):
        outer, self.stage = self.stage, name
        self.note()
        before = now()
        try:
            return fn(*args, **kwargs)
        finally:
            self.add(name, [b - a for a, b in zip(before, now())])
            self.note()
            self.stage = outer

    def wrap(self, module, attr: str, name: str) -> None:
        fn = getattr(module, attr)
        setattr(module, attr, functools.wraps(fn)(lambda *a, **k: self.run(name, fn, *a, **k)))


def main(path: str) -> None:
    clock = Clock()
    start = now()
    from nsysanalyze import analysis
    from nsysanalyze import attribution as A
    from nsysanalyze import metrics as M
    from nsysanalyze import segmented as SEG
    from nsysanalyze.render import json as json_render
    from nsysanalyze.render.contract import report
    clock.add("imports", [b - a for a, b in zip(start, now())])
    pass_parts = [(M, "gpu_metrics", "pass: GPU metrics"), (M, "busy_coverage", "pass: busy unions"),
                  (M, "cpu_metrics", "pass: CPU metrics"), (A, "host_intervals", "pass: attribution (host intervals)"),
                  (A, "attribute", "pass: attribution (idle gaps)"), (A, "idle_by_device", "pass: idle intervals"),
                  (A, "idle_gap_metrics", "pass: idle-gap metrics"), (A, "first_launch_times", "pass: first launches"),
                  (SEG, "attribute_in_segments", "pass: attribution in segments (OS calls, idle gaps, munmap)")]
    for module, attr, name in pass_parts:
        clock.wrap(module, attr, name)
    a = clock.run("open (schema)", analysis.Analysis, path)
    clock.run("read tables", a._load_tables)
    clock.run("steps (choice, projection)", lambda: a._step_choice)
    before = now()
    clock.stage = "pass: rest (kernel table, windows)"
    a._window_metric_columns  # noqa: B018
    parts = [sum(clock.rows[n][i] for _, _, n in pass_parts if n in clock.rows) for i in range(4)]
    clock.add("pass: rest (kernel table, windows)", [b - a - p for a, b, p in zip(before, now(), parts)])
    clock.run("summary + evidence + rules", a.findings)
    doc = clock.run("report dict (header, framework, tables)", report, a)
    clock.run("render JSON", json_render.render, doc)
    total = [b - a for a, b in zip(start, now())]
    total[1] = time.process_time()  # CPU from the interpreter's start
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("| stage | wall (s) | CPU (s) | of it system (s) | minor page faults | peak RSS in it (MiB) |\n"
          "|---|---:|---:|---:|---:|---:|")
    for name, (wall, cpu, system, faults) in clock.rows.items():
        peak = f"{clock.peaks[name]:.0f}" if name in clock.peaks else ""
        print(f"| {name} | {wall:.2f} | {cpu:.2f} | {system:.2f} | {faults:,.0f} | {peak} |")
    print(f"| **total** (after interpreter start; peak RSS {rss:.0f} MiB) | **{total[0]:.2f}** | **{total[1]:.2f}** | "
          f"**{total[2]:.2f}** | **{total[3]:,.0f}** | |")


if __name__ == "__main__":
    main(sys.argv[1])
