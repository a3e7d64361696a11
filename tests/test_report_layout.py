"""The HTML report reads top-down: verdict, findings, a timeline of one steady step, chart, tables."""
import re
import sqlite3

from click.testing import CliRunner

from conftest import fixture_trace
from nsysanalyze.cli import analyze, cli
from nsysanalyze.timeline import idle_gaps, nesting_depth, pick_step

import numpy as np

BASELINE = fixture_trace("resnet18_baseline.sqlite")
WORKERS = fixture_trace("resnet18_workers.sqlite")


def make(tmp_path, *args) -> str:
    out = tmp_path / "report.html"
    result = CliRunner().invoke(cli, ["report", *map(str, args), "-o", str(out), "--force"])
    assert result.exit_code == 0, result.output
    return out.read_text(encoding="utf-8")


def test_findings_come_before_the_summary_and_the_timeline_after_them(tmp_path):
    page = make(tmp_path, BASELINE)
    at = {k: page.index(k) for k in ("Next: dataloader-workers", "Findings (largest", 'id="timeline"',
                                     "GPU time per step", "Summary (whole capture")}
    assert list(at) == sorted(at, key=at.get)
    assert "<th>htod pageable size</th><td>201.3 MB</td>" in page  # evidence: labelled values with units, no unit suffix


def test_timeline_has_one_rect_per_activity_of_the_step(tmp_path):
    page = make(tmp_path, BASELINE)
    svg = page[page.index('id="timeline"'):]
    svg = svg[:svg.index("</svg>")]
    step = pick_step(analyze(BASELINE, None))
    conn = sqlite3.connect(f"file:{BASELINE}?mode=ro&immutable=1", uri=True)
    expected = sum(conn.execute(f'SELECT count(*) FROM {t} WHERE start >= ? AND start < ? AND deviceId = ?',
                                (step["window_start"], step["window_end"], step["deviceId"])).fetchone()[0]
                   for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"))
    acts = re.findall(r'<rect class="act ([a-z-]+)"', svg)
    assert len(acts) == expected > 100 and {"kernel", "memcpy-htod"} <= set(acts)
    assert f"Timeline of {step['name']} (GPU" in page and f"{expected} GPU activities" in page
    assert re.findall(r"<rect class=\"cpu nvtx\"", svg) and re.findall(r"<rect class=\"gap idle nvtx_range\"", svg)
    assert "get batch" in svg and "stream 7" in svg


def test_baseline_headline_is_green_when_faster_and_red_when_slower(tmp_path):
    faster = make(tmp_path, WORKERS, "--baseline", BASELINE)
    assert re.search(r'<p class="delta better">step \(median\) [\d.,]+ ms → [\d.,]+ ms \(-\d+\.\d%\)', faster)
    assert faster.index('class="delta') < faster.index("Findings (largest") < faster.index("Comparison with")
    slower = make(tmp_path, BASELINE, "--baseline", WORKERS)
    assert '<p class="delta worse">' in slower


def test_several_files_give_one_page_led_by_the_ranks(tmp_path):
    files = [fixture_trace(f"vit_l32_2gpu_ddp_{r}.sqlite") for r in (0, 1)]
    page = make(tmp_path, *files)
    assert page.index("2 ranks") < page.index("No straggler") < page.index("vit_l32_2gpu_ddp_0.sqlite · nsys")
    assert page.count('class="timeline"') == 2 and "ranks 0, 1" in page


def test_lane_helpers_exact_values():
    """Unit test on hand-made intervals (not a trace)."""
    gs, ge = idle_gaps(np.array([10, 12, 30]), np.array([20, 15, 40]), 0, 50)
    assert gs.tolist() == [0, 20, 40] and ge.tolist() == [10, 30, 50]
    assert nesting_depth(np.array([0, 1, 2, 10]), np.array([9, 8, 3, 12])).tolist() == [0, 1, 2, 0]
