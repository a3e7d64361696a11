"""`nsysanalyze report`: one self-contained HTML page; every trace string escaped."""
import re
from html.parser import HTMLParser

import pytest
from click.testing import CliRunner
from conftest import shared_trace
from hostile import KERNEL_PAYLOAD, PAYLOAD, PROCESS_PAYLOAD, hostile_copy

from nsysanalyze.cli import cli, main

NVTX = "h200/resnet18-baseline-nvtx.sqlite"
BS8 = "h200/resnet18-bs8-nvtx0.2.17-dropped.sqlite"


class Tags(HTMLParser):
    """Every start tag and attribute of a page, as the browser's tokenizer sees them."""

    def __init__(self):
        super().__init__()
        self.tags, self.attrs = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [(tag, k, v or "") for k, v in attrs]


def make(tmp_path, *args) -> str:
    out = tmp_path / "report.html"
    result = CliRunner().invoke(cli, ["report", *map(str, args), "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out.read_text(encoding="utf-8")


def parse(page: str) -> Tags:
    t = Tags()
    t.feed(page)
    return t


def assert_self_contained(page: str):
    t = parse(page)
    assert not {"script", "iframe", "img", "link", "object", "embed"} & set(t.tags)
    for tag, key, value in t.attrs:
        assert not key.startswith("on"), (tag, key)
        if key in ("src", "href", "xlink:href"):
            assert value.startswith(("#", "data:")), (tag, key, value)
    assert re.findall(r"url\((.)", page) == ["#"] * page.count("url(")  # only in-page references
    assert "@import" not in page


def test_report_sections(tmp_path):
    page = make(tmp_path, shared_trace(NVTX))
    assert page.startswith("<!DOCTYPE html>")
    assert_self_contained(page)
    for text in ("nsysanalyze: resnet18-baseline-nvtx.sqlite", "2023.4.4.54", "python3 (pid 461)", "NVIDIA H200",
                 "Summary", "565.0 ms", "Per step", "Batch 3", "get batch", "Findings", "dataloader-workers",
                 "num_workers=8", "pin_memory=True", "No OS runtime data"):
        assert text in page, text
    assert page.count("<svg") == 2 and "Comparison" not in page  # the step's timeline and the per-step chart


def test_report_with_baseline(tmp_path):
    page = make(tmp_path, shared_trace(NVTX), "--baseline", shared_trace(BS8))
    assert_self_contained(page)
    assert "Comparison with the baseline" in page
    assert "step time (GPU window) <code>step_time</code>" in page
    assert "+5,775.6%" in page                      # whole-capture step time 21.6 ms → 1,266.3 ms
    assert "appeared: dataloader-workers" in page
    assert "baseline left, this trace right" in page


def test_trace_strings_are_escaped(tmp_path):
    evil = hostile_copy(shared_trace(NVTX), tmp_path)
    page = make(tmp_path, evil, "--baseline", shared_trace(NVTX))
    assert_self_contained(page)
    assert not re.search(r"<\s*(script|iframe|img)", page, re.I)
    # the payloads are on the page, as text
    assert "&lt;script&gt;alert(&#x27;nvtx&#x27;)&lt;/script&gt;&lt;img src=x onerror=" in page
    assert "&lt;iframe src=javascript:alert(&#x27;proc&#x27;)&gt;python3" in page
    assert "evil&lt;i&gt;&amp;amp;&#x27;&quot;x.sqlite" in page
    assert PAYLOAD not in page and PROCESS_PAYLOAD not in page and KERNEL_PAYLOAD not in page
    assert "Batch 3" in page and "get batch" in page   # steps still found under the payload


@pytest.mark.parametrize("args", [["-o", "/no/such/dir/r.html"], ["--baseline", "/missing.sqlite", "-o", "r.html"]])
def test_bad_input_exit_2(args, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(["report", str(shared_trace(NVTX)), *args])
    assert e.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert not (tmp_path / "r.html").exists()
