#!/usr/bin/env python3
"""CPU seconds per pipeline stage of one export, in this checkout (reader-thread CPU included).

    python bench/stages.py /work/bench_data/resnet18-1M.sqlite

Times ``time.process_time()`` around each stage of ``Analysis`` (imports, NVTX + step detection,
reading the tables, step projection, metrics, summary + sub-ranges, rules, report dict, JSON render)
and prints one line with the total CPU and peak RSS.
"""
from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(path: str) -> None:
    from nsysanalyze.analysis import Analysis
    from nsysanalyze.render import json as json_render

    out = {"imports": time.process_time()}
    a = Analysis(path)
    stages = [("NVTX + steps", lambda: (a._step_ranges, a._api_names)), ("read tables", a._load_tables),
              ("projection", lambda: a._step_windows), ("metrics", lambda: a._window_metric_columns),
              ("summary + subranges", lambda: (a._summary, a._steps_metrics, a.subranges())),
              ("rules", a.findings), ("report dict", a.to_dict)]
    for name, stage in stages:
        t = time.process_time()
        result = stage()
        out[name] = time.process_time() - t
    t = time.process_time()
    json_render.render(result)
    out["render json"] = time.process_time() - t
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(" | ".join(f"{k} {v:.2f}" for k, v in out.items()), f"| total CPU {time.process_time():.2f} | peak RSS {rss:.0f} MB")


if __name__ == "__main__":
    main(sys.argv[1])
