"""Words and units (issue 23 item 5): one format per quantity in every output, evidence shown without unit
suffixes, a glossary for every term the output uses (`nsysanalyze explain`, the README), markdown with the
same sections as text, integer counts in JSON."""
import json
import re

from click.testing import CliRunner

from conftest import ROOT, fixture_trace
from nsysanalyze.attribution import LEVELS
from nsysanalyze.cli import cli
from nsysanalyze.glossary import GLOSSARY, explain, markdown
from nsysanalyze.render.format import (DETAILS_HINT, FINDINGS_TITLE, GAP_HEADERS, STEPS_TITLE, SUBRANGES_TITLE,
                                       SUMMARY_TITLE)
from nsysanalyze.units import ms, size

BASELINE = fixture_trace("resnet18_baseline.sqlite")
DTOH = fixture_trace("dtoh_pageable.sqlite")


def run(*args):
    result = CliRunner().invoke(cli, list(map(str, args)))
    assert result.exit_code == 0, result.output
    return result.output


def test_one_format_per_quantity():
    assert ms(12_843_300_000) == "12,843.3 ms" and ms(4.0e6) == "4.0 ms"
    # a µs-scale step (a fused kernel per iteration) is not '0.0 ms': three decimals where one would show nothing
    assert ms(21_152) == "0.021 ms" and ms(-4_000) == "-0.004 ms" and ms(0) == "0.0 ms" and ms(50_000) == "0.1 ms"
    assert size(51.2e9) == "51.2 GB" and size(8) == "8 B" and size(201_327_104) == "201.3 MB"
    outputs = [run("diagnose", f, "--details", *fmt) for f in (BASELINE, DTOH) for fmt in ((), ("--format", "markdown"))]
    for out in outputs:
        assert not re.search(r"(?<![\d,])\d{4,}\.\d ms", out)  # '12827.3 ms' is '12,827.3 ms'
        assert not re.search(r"\d\.\d+e-?\d+ [kMG]?B", out)  # never '8e-06 MB'
        assert not re.search(r"\b\d{4,}(\.\d+)? (MB|kB)\b", out)  # '51200 MB' is '51.2 GB'
        assert "stall every capture" not in out


def test_evidence_keys_without_unit_suffixes_in_human_output():
    text = run("diagnose", BASELINE)
    evidence = [line for line in text.splitlines() if line.strip().startswith("evidence:")]
    assert evidence and not any(re.search(r"\w_(ns|bytes|bps)\b", line) for line in evidence)
    assert "htod pageable size 201.3 MB" in text and "pinned bandwidth 40.0 GB/s" in text
    doc = json.loads(run("diagnose", BASELINE, "--format", "json"))
    assert "htod_pageable_bytes" in doc["findings"][1]["evidence"]  # JSON keeps the keys


def test_json_counts_are_integers():
    doc = json.loads(run("diagnose", BASELINE, "--format", "json"))
    for f in doc["findings"]:
        for k, v in f["evidence"].items():
            if re.search(r"(_count|_calls|_bytes)$", k) and v is not None:
                assert type(v) is int, (f["rule"], k, v)
    assert type(doc["findings"][1]["evidence"]["munmap_count"]) is int


def test_markdown_carries_the_sections_of_text():
    for args in ((BASELINE,), (BASELINE, "--details"), (DTOH, "--details")):
        text, md = run("diagnose", *args), run("diagnose", *args, "--format", "markdown")
        for title in (FINDINGS_TITLE, "Where the GPU waited (median per step)", SUMMARY_TITLE, STEPS_TITLE,
                      SUBRANGES_TITLE, DETAILS_HINT):
            assert (title in text) == (title in md), (args, title)
        assert "Where the GPU waited (median per step)" in md and "(idle per step median, or whole capture)" not in md


def test_every_term_the_output_uses_is_explained():
    used = [*LEVELS, *GAP_HEADERS[3:], "pp", "MAD", "exposed", "hidden", "pageable", "straggler", "spread",
            "offset", "start skew", "steady step", "window", "gain", "confidence", "severity", "DtoD", "PtoP"]
    for term in used:
        assert explain(term) is not None, term
    assert explain("cuda-blocking")[0] == "cuda_blocking" and explain("before first launch")[0] == "before 1st launch"
    out = run("explain", "MAD")
    assert out.startswith("MAD: Median absolute deviation")
    assert len(run("explain").splitlines()) == len(GLOSSARY)
    bad = CliRunner().invoke(cli, ["explain", "launc"])
    assert bad.exit_code == 2 and "did you mean: launch" in bad.output
    assert markdown() in (ROOT / "README.md").read_text()  # the README's Glossary is this glossary


def test_the_idle_table_says_which_values_it_shows():
    from nsysanalyze.render.format import gaps_title

    assert "Where the GPU waited (median per step)" in run("diagnose", BASELINE)
    assert gaps_title({"steps": []}) == "Where the GPU waited (whole capture)"
