"""Bounded output for many steps: tables show the first and last --max-steps rows with a note, charts
draw means of consecutive steps; JSON keeps every step."""
import json
import subprocess
import sys

import pytest

from conftest import fixture_trace
from nsysanalyze.steplimit import binned, capped


def run(*args):
    return subprocess.run([sys.executable, "-m", "nsysanalyze", *map(str, args)], capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def vit_report():
    proc = run("diagnose", "--format", "json", fixture_trace("vit_l32_2gpu_ddp_0.sqlite"))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_text_and_markdown_show_first_and_last_rows_json_every_step(vit_report):
    names = [s["name"] for s in vit_report["steps"]]
    assert len(names) == 3
    path = fixture_trace("vit_l32_2gpu_ddp_0.sqlite")
    md = run("steps", "--format", "markdown", "--max-steps", "2", path).stdout
    assert names[0] in md and names[-1] in md and f"| {names[1]}" not in md
    assert "the first 1 and last 1 of 3 step rows are shown" in md
    text = run("diagnose", "--max-steps", "2", path).stdout
    assert "the first 1 and last 1 of 3 step rows" in " ".join(text.split())
    assert len(json.loads(run("diagnose", "--format", "json", "--max-steps", "2", path).stdout)["steps"]) == 3


def test_capped_keeps_reports_within_the_limit_unchanged(vit_report):
    assert capped(vit_report, 3) is vit_report
    assert binned(vit_report, 3) is vit_report
    cut = capped(vit_report, 1)
    assert [s["name"] for s in cut["steps"]] == [vit_report["steps"][0]["name"]] and len(cut["notes"]) == len(vit_report["notes"]) + 1


def test_binned_bars_are_means_of_consecutive_steps(vit_report):
    steps = vit_report["steps"]
    out = binned(vit_report, 2)
    assert len(out["steps"]) == 2
    first, second = out["steps"]
    assert first["window_ns"] == (steps[0]["window_ns"] + steps[1]["window_ns"]) / 2
    assert second["window_ns"] == steps[2]["window_ns"] and second["name"] == steps[2]["name"]
    assert first["name"] == f"{steps[0]['name']} – {steps[1]['name']} (2 steps)" and first["closed"] is False
    assert "3 step rows drawn as 2 bars" in out["notes"][-1]
