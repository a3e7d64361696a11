"""`nsysanalyze compare`: deltas between two reports, --fail-on gates, exit codes, renderers."""
import json
import math

import pytest
from click.testing import CliRunner
from conftest import default_report, shared_trace

from nsysanalyze.cli import cli, main
from nsysanalyze.compare import BY_NAME, GateError, compare, metric_values, parse_gate

NVTX = "h200/resnet18-baseline-nvtx.sqlite"          # 3 NVTX steps
BS8 = "h200/resnet18-bs8-nvtx0.2.17-dropped.sqlite"   # same model, batch 8, NVTX dropped: whole capture only
TWO_GPU = "public/nsys-ai__mfu_2gpu_after.sqlite"


def report(rel):
    return default_report(shared_trace(rel))


def run(*args):
    return CliRunner().invoke(cli, ["compare", *map(str, args)])


@pytest.mark.parametrize("rel", [NVTX, TWO_GPU])
def test_trace_against_itself_has_zero_deltas(rel):
    r = report(rel)
    c = compare(r, r, [parse_gate("step_time>+0%"), parse_gate("gpu_idle_fraction>+0.0")])
    assert not c["tripped"] and all(g["tripped"] is False for g in c["gates"])
    for row in c["metrics"]:
        for scope in ("step", "whole"):
            v = row[scope]
            assert v["base"] == v["new"]
            assert v["abs"] in (0.0, None) and v["rel"] in (0.0, None)
    assert c["findings"]["appeared"] == [] and c["findings"]["disappeared"] == []
    result = run(shared_trace(rel), shared_trace(rel), "--fail-on", "step_time>+5%")
    assert result.exit_code == 0, result.output
    assert "PASS" in result.output


def test_step_medians_and_whole_capture_values():
    v = metric_values(report(NVTX))
    # real values of the H200 ResNet-18 trace: steps 2-3 closed, median GPU step window 565.0 ms
    assert v.at["step_time", "step"] == 564976584.0
    assert v.at["step_time", "whole"] == 1266326675.0
    assert v.at["gpu_idle_fraction", "step"] == pytest.approx(0.83455, abs=1e-5)
    assert v.at["gpu_idle_fraction", "whole"] == pytest.approx(959230737 / 1266326675)
    assert v.at["htod_bytes", "whole"] == 603981312
    assert math.isnan(v.at["cpu_step_time", "whole"])


def test_two_devices_are_aggregated():
    v = metric_values(report(TWO_GPU))
    # DtoD bytes summed over both GPUs, NCCL share recomputed from the summed parts
    assert v.at["dtod_bytes", "whole"] == 2 * 3597688320
    assert v.at["nccl_share", "whole"] == pytest.approx((9989016 + 23753085) / (299251215 + 299269422))
    assert v.at["step_time", "whole"] == 73196976680 - 72897704203
    assert v.at["step_time", "step"] == 19198059.5  # median step over both GPUs' steps inferred from the kernel sequence


def test_known_difference_trips_gate_exit_1():
    """bs8 → baseline: the whole capture grows from 21.6 ms to 1266 ms and the GPU idles more."""
    result = run(shared_trace(BS8), shared_trace(NVTX), "--fail-on", "step_time>+5%",
                 "--fail-on", "gpu_idle_fraction>+0.03", "--fail-on", "dtod_bytes>+10%", "--format", "json")
    assert result.exit_code == 1, result.output
    doc = json.loads(result.output)
    assert doc["gate_scope"] == "whole" and doc["tripped"]
    verdict = {g["expr"]: g for g in doc["gates"]}
    assert verdict["step_time>+5%"]["tripped"] and verdict["step_time>+5%"]["measured"] == pytest.approx(
        1266326675 / 21552125 - 1)
    assert verdict["gpu_idle_fraction>+0.03"]["tripped"]
    assert verdict["dtod_bytes>+10%"]["tripped"] is False  # 0 → 0
    assert [f["rule"] for f in doc["findings"]["appeared"]] == ["dataloader-workers"]
    # the same pair in the other direction: the regression gate holds, an improvement gate trips
    assert run(shared_trace(NVTX), shared_trace(BS8), "--fail-on", "step_time>+5%").exit_code == 0
    assert run(shared_trace(NVTX), shared_trace(BS8), "--fail-on", "step_time<-50%").exit_code == 1


@pytest.mark.parametrize("expr", ["step_time>>5%", "step_time", "foo>+5%", "step_time>+5kg", "step_time>5%",
                                  "step_time>5", "gpu_idle_fraction>+x", ">+5%"])
def test_malformed_gate_is_one_stderr_line_exit_2(expr, capsys):
    with pytest.raises(GateError):
        parse_gate(expr)
    with pytest.raises(SystemExit) as e:
        main(["compare", "a.sqlite", "b.sqlite", "--fail-on", expr])  # rejected before any file is read
    assert e.value.code == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.startswith("nsysanalyze: error:") and out.err.count("\n") == 1


def test_parse_gate_forms():
    g = parse_gate("step_time>+5%")
    assert parse_gate(" step_time > +5% ").threshold == g.threshold
    assert (g.kind, g.op, g.threshold) == ("relative", ">", 0.05)
    g = parse_gate("gpu_idle_fraction<-0.03")
    assert (g.kind, g.op, g.threshold) == ("absolute", "<", -0.03)
    g = parse_gate("step_time>=+2ms")
    assert (g.kind, g.threshold) == ("absolute", 2e6)
    g = parse_gate("gpu_idle_fraction>40%")
    assert (g.kind, g.threshold) == ("level", 0.4)
    assert parse_gate("htod_pageable_bytes>1.5GB").threshold == 1.5e9
    assert parse_gate("nccl_count>+3").threshold == 3
    assert set(BY_NAME) >= {"step_time", "gpu_idle_fraction", "nccl_share", "dtod_bytes"}


def test_bad_input_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    for args in ([str(tmp_path / "missing.sqlite"), str(shared_trace(NVTX))], [str(bad), str(shared_trace(NVTX))]):
        with pytest.raises(SystemExit) as e:
            main(["compare", *args])
        assert e.value.code == 2
        assert capsys.readouterr().err.count("\n") == 1


def test_saved_json_report_as_baseline(tmp_path):
    saved = tmp_path / "base.json"
    result = CliRunner().invoke(cli, ["diagnose", str(shared_trace(NVTX)), "--format", "json"])
    saved.write_text(result.output)
    result = run(saved, shared_trace(NVTX), "--fail-on", "step_time>+1%", "--format", "json")
    assert result.exit_code == 0
    doc = json.loads(result.output)
    assert doc["gates"][0]["measured"] == 0.0 and doc["gate_scope"] == "step"


def test_markdown_for_pr_comment():
    result = run(shared_trace(BS8), shared_trace(NVTX), "--fail-on", "step_time>+5%", "--format", "markdown")
    assert result.exit_code == 1
    md = result.output
    assert md.startswith("## nsysanalyze compare")
    assert "**❌ FAIL: 1 of 1 gate(s) tripped: step_time>+5%**" in md
    assert "| step_time>+5% | 21.6 ms | 1,266.3 ms | +5,775.6% | TRIPPED |" in md
    assert "| step time (GPU window) `step_time` | 21.6 ms | 1,266.3 ms | +1,244.8 ms | +5,775.6% |" in md
    assert "- appeared: dataloader-workers" in md
    # step time is the first metric row
    rows = [line for line in md.splitlines() if line.startswith("| ") and "`" in line]
    assert "`step_time`" in rows[0]


def test_unavailable_metric_is_na_and_fails_unless_allowed():
    r = report(BS8)
    no_copies = json.loads(json.dumps(r))
    for d in no_copies["summary"]["devices"]:
        d["memcpy_ns"] = d["memcpy_hidden_ns"] = 0
    c = compare(r, no_copies, [parse_gate("memcpy_kernel_overlap<-0.1")])
    assert c["gates"][0]["tripped"] is None and c["gates"][0]["verdict"] == "n/a" and c["tripped"]
    assert any("is n/a" in n and "in NEW" in n for n in c["notes"])
    assert not compare(r, no_copies, [parse_gate("memcpy_kernel_overlap<-0.1")], allow_missing=True)["tripped"]


def test_gating_a_trace_without_gpu_activity_is_exit_2(capsys):
    cpu_only = shared_trace("h200/cpu-nvtx0.2.11-recorded.sqlite")
    with pytest.raises(SystemExit) as e:
        main(["compare", str(cpu_only), str(shared_trace(NVTX)), "--fail-on", "step_time>+5%"])
    assert e.value.code == 2
    assert "no GPU activity" in capsys.readouterr().err
    assert run(cpu_only, shared_trace(NVTX)).exit_code == 0   # without gates: an informative table
