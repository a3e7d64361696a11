"""Inferred steps have names (issue 23 item 2): 'step 1' … 'step N' per GPU in the steps table, JSON, the
plot (one panel per GPU, each with its own median) and the HTML report. On a real 2-GPU export without NVTX
steps (nsys-ai's MFU run: 14 steps of 119 kernels per GPU)."""
import json
import re

from click.testing import CliRunner

from conftest import shared_trace
from nsysanalyze.cli import cli
from nsysanalyze.render import plot

MFU = "public/nsys-ai__mfu_2gpu_after.sqlite"


def run(*args):
    result = CliRunner().invoke(cli, list(map(str, args)))
    assert result.exit_code == 0, result.output
    return result.output


def test_inferred_steps_are_named_in_json_and_tables():
    path = shared_trace(MFU)
    doc = json.loads(run("steps", path, "--format", "json"))
    assert doc["trace"]["step_source"] == "inferred"
    for gpu in (0, 1):
        names = [s["name"] for s in doc["steps"] if s["deviceId"] == gpu]
        assert names == [f"step {n}" for n in range(1, 15)]
    text = run("steps", path)
    assert "steps: step 1…14 (inferred from the kernel sequence, period 119 kernels)" in text.splitlines()[0]
    rows = [line for line in text.splitlines() if line.startswith("│")]
    assert len(rows) == 28 and all(re.match(r"│ step \d+\*? +│", r) for r in rows)
    csv = run("steps", path, "--format", "csv").splitlines()
    assert csv[1].split(",")[csv[0].split(",").index("name")] == "step 1"
    assert "| step 14 |" in run("steps", path, "--format", "markdown")


def test_plot_has_one_panel_per_gpu_each_with_its_own_median():
    path = shared_trace(MFU)
    report = json.loads(run("diagnose", path, "--format", "json"))
    fig = plot.figure([report])
    assert len(fig.axes) == 2
    for ax, gpu in zip(fig.axes, (0, 1)):
        assert f"GPU {gpu} (pid" in ax.get_title() and "step 1…14" in ax.get_title()
        ticks = [t.get_text() for t in ax.get_xticklabels()]
        assert ticks[0] == "step 1" and ticks[-1] == "step 14" and not any("·" in t for t in ticks)
        windows = sorted(s["window_ns"] / 1e6 for s in report["steps"] if s["deviceId"] == gpu and s["closed"])
        median = (windows[6] + windows[7]) / 2
        label = next(t.get_text() for t in ax.texts if t.get_text().startswith("median"))
        assert label == f"median {median:,.1f} ms"
    assert fig.axes[0].texts[0].get_text() != fig.axes[1].texts[0].get_text()  # 18.9 ms and 19.7 ms


def test_html_timeline_heading_names_the_step(tmp_path):
    out = tmp_path / "r.html"
    run("report", shared_trace(MFU), "-o", out)
    page = out.read_text()
    assert re.search(r"Timeline of step \d+ \(GPU 0", page) and "Timeline of step  (" not in page
    assert '<td class="t">step 1</td>' in page
