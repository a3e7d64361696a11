"""Terminal output: the verdict on top, nothing cropped (piped or narrow), --top, --details, ranks first."""
import io
import json
import os
import subprocess
import sys

from rich.console import Console

from conftest import fixture_trace
from nsysanalyze.cli import analyze
from nsysanalyze.render import terminal
from nsysanalyze.render.format import STEP_COLUMNS

BASELINE = fixture_trace("resnet18_baseline.sqlite")


def run(*args, columns=80):
    env = {**os.environ, "COLUMNS": str(columns)}
    return subprocess.run([sys.executable, "-m", "nsysanalyze", *map(str, args)], capture_output=True, text=True,
                          timeout=300, env=env)


def snippet_lines(finding):
    return [line.strip() for line in finding["snippet"].splitlines() if line.strip()]


def test_piped_output_at_80_columns_leads_with_the_fix_and_crops_nothing():
    proc = run("diagnose", BASELINE)
    report = json.loads(run("diagnose", BASELINE, "--format", "json").stdout)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    top = report["findings"][0]
    assert "…" not in out
    first = "\n".join(out.splitlines()[:12])
    gain = f"up to {top['gain_ns'] / 1e6:,.1f} ms, {top['gain_pct']:.1f}% of the step"
    assert f"Next: {top['rule']} — {top['title']} ({gain})" in first and top["rule"] == "dataloader-workers"
    assert "Fix: " + top["fix"] in first  # the fix whole, on one line: stdout is not a terminal
    stripped = [line.strip() for line in out.splitlines()]
    for f in report["findings"]:
        assert all(line in stripped for line in snippet_lines(f))  # every snippet line whole
    assert "num_workers=8,            # ~ CPU cores available per GPU; tune" in out
    assert "Per step" not in out and "--details" in out  # tables only when asked


def rendered(report, width):
    """The report as a terminal of ``width`` columns shows it (plain text)."""
    console = Console(width=width, force_terminal=True, color_system=None, record=True, file=io.StringIO())
    terminal.render(report, console)
    return console.export_text()


def test_narrow_terminal_drops_columns_instead_of_cropping():
    report = analyze(BASELINE, None)
    out = rendered(report, 60)
    assert "…" not in out
    table_part = out[out.index("Per step"):out.index("columns left out", out.index("Per step"))]
    assert all(line.rstrip() == line.rstrip()[:60] for line in table_part.splitlines())
    for s in report["steps"]:  # names and step windows whole, one row per step
        assert any(s["name"] in line and f"{s['window_ns'] / 1e6:,.1f}" in line for line in table_part.splitlines())
    dropped = out[out.index("columns left out at this width: ", out.index("Per step")):].split(":", 1)[1].split("(")[0]
    names = [d.strip() for d in dropped.split(",")]
    assert names and set(names) <= {h for h, _, _ in STEP_COLUMNS}
    for f in report["findings"]:
        assert all(line in out for line in snippet_lines(f))


def test_wide_terminal_keeps_every_step_column():
    out = rendered(analyze(BASELINE, None), 200)
    assert "columns left out" not in out
    header = next(line for line in out.splitlines() if "window ms" in line)
    assert all(h in header for h, _, _ in STEP_COLUMNS)


def test_top_limits_the_findings_and_says_how_many_are_hidden():
    out = run("diagnose", BASELINE, "--top", "1").stdout
    assert "1. dataloader-workers" in out and "2. pin-memory" not in out
    assert "1 more finding(s) not shown (--top 1)." in out


def test_details_prints_the_tables_after_the_findings():
    out = run("diagnose", BASELINE, "--details").stdout
    assert out.index("Findings") < out.index("Summary") < out.index("Per step") < out.index("CPU sub-ranges")
    assert "columns left out" not in out  # piped: full width


def test_several_ranks_lead_with_the_cross_rank_verdict():
    files = [fixture_trace(f"vit_l32_2gpu_ddp_{r}.sqlite") for r in (0, 1)]
    out = run("diagnose", *files).stdout
    assert out.index("Ranks") < out.index("One row per rank") < out.index("Findings")
    assert "ranks 0, 1" in out and "--per-rank" in out
    assert out.count("vit_l32_2gpu_ddp_0.sqlite · nsys") == 0  # per-rank headlines only on demand
    full = run("diagnose", "--per-rank", *files).stdout
    assert full.count("Findings (largest possible gain first)") == 3  # across ranks, then one per rank
    assert "vit_l32_2gpu_ddp_0.sqlite · nsys" in full and "vit_l32_2gpu_ddp_1.sqlite · nsys" in full
