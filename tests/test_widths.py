"""Terminal output at widths 60/80/120/200 (issue 23 item 3): tables wrap between words or leave a named
column out, never split a word or a number from its unit; wrapped prose keeps its indent; with several GPUs
every GPU's verdict comes within the first 15 lines at 80 columns (up to 8 GPUs)."""
import copy
import io
import json
import re

import pytest
from click.testing import CliRunner
from rich.console import Console

from conftest import fixture_trace, shared_trace
from nsysanalyze import ranks
from nsysanalyze.cli import cli
from nsysanalyze.render import ranks as ranks_render
from nsysanalyze.render import terminal

BASELINE = fixture_trace("resnet18_baseline.sqlite")
DDP = [fixture_trace(f"vit_l32_2gpu_ddp_{r}.sqlite") for r in (0, 1)]
UNITS = {"ns", "µs", "ms", "s", "B", "kB", "MB", "GB", "GB/s", "%", "pp"}
BOX = "│┃┏┓┗┛┡┩┣┫━─┳┻╇╈┼└┘┌┐├┤┴┬"


def report_of(path):
    result = CliRunner().invoke(cli, ["diagnose", str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def console(width):
    return Console(width=width, force_terminal=True, color_system=None, record=True, file=io.StringIO())


def rendered(report, width):
    c = console(width)
    terminal.render(report, c)
    return c.export_text()


def words(text):
    return set(re.split(rf"[\s{BOX}]+", text)) - {""}


def table_cells(out):
    """The contents of every body cell line of the tables (between the vertical bars; headers wrap between
    words: 'window' over 'ms')."""
    return [cell.strip() for line in out.splitlines() if line.startswith("│") for cell in line.split("│")[1:-1]]


@pytest.fixture(scope="module")
def baseline():
    return report_of(BASELINE)


@pytest.mark.parametrize("width", [60, 80, 120, 200])
def test_tables_never_split_a_word_or_a_number(baseline, width):
    whole = words(rendered(baseline, 10_000))  # every word as printed at full width
    out = rendered(baseline, width)
    snippets = {line.strip() for f in baseline["findings"] for line in f["snippet"].splitlines()}
    for line in out.splitlines():
        if line.strip() not in snippets:  # snippets are soft-wrapped by the terminal, printed whole
            assert len(line) <= width, line
    dropped_lines = " ".join(re.findall(r"columns left out at this width: .*?json\)", out, re.S))
    assert words(out) - whole <= words(dropped_lines)
    assert not UNITS & set(table_cells(out))  # '18.9 | ms': a unit never alone on a cell line
    for name in ("cudaMemcpyAsync", "cudaDeviceSynchronize", "dataloader-workers", "pin-memory"):
        assert name in out or width < 80


@pytest.mark.parametrize("width", [60, 80])
def test_wrapped_prose_keeps_its_indent(baseline, width):
    out = rendered(baseline, width)
    findings = out[out.index("Findings"):out.index("Where the GPU waited")].splitlines()[1:]
    for line in findings:
        assert not line or re.match(r"\d+\. ", line) or line.startswith("   "), line
    head = out[:out.index("Findings")].splitlines()
    assert all(line.startswith(("  ", "note: ", "      ")) for line in head[1:] if line), head
    assert not any(re.search(r"\d $", line) or re.match(r"\s*(ms|MB|%)\b", line) for line in out.splitlines())


def eight_ranks():
    """Eight ranks: the two real ranks of the ViT-L/32 DDP run, four times, under rank-numbered names and
    distinct processes (only the names and process ids are changed)."""
    base = [report_of(p) for p in DDP]
    out = []
    for i in range(8):
        r = copy.deepcopy(base[i % 2])
        pid = r["summary"]["devices"][0]["globalPid"] + 2**24 * i
        for rows in (r["summary"]["devices"], r["steps"], r["findings"], r["trace"]["devices"], r["trace"]["processes"]):
            for row in rows:
                row["globalPid"] = pid
        r["trace"]["path"] = f"run_{i}.sqlite"
        out.append(r)
    return out


def test_every_gpus_verdict_within_15_lines_at_80_columns_for_8_ranks():
    reports = eight_ranks()
    c = console(80)
    ranks_render.render_text(ranks.cross_rank(reports), c, reports)
    first = c.export_text().splitlines()[:15]
    for i in range(8):
        assert any(line.startswith(f"  rank {i}: step ") and "→ " in line for line in first), first


def test_every_gpus_verdict_within_15_lines_at_80_columns_for_one_file_of_2_gpus():
    report = report_of(shared_trace("public/nsys-ai__mfu_2gpu_after.sqlite"))
    out = rendered(report, 80).splitlines()[:15]
    for gpu in (0, 1):
        assert any(re.match(rf"  GPU {gpu} \(pid \d+\): step [\d.]+ ms, idle [\d.]+% → (\S+|nothing flagged)", line)
                   for line in out), out
    view = ranks.cross_rank([report])
    c = console(80)
    ranks_render.render_text(view, c, [report])
    assert sum(line.startswith("  rank ") for line in c.export_text().splitlines()[:15]) == 2
