"""Gates on real fixtures: uncaptured metrics are n/a and fail, kernel gates, the steady-step warning, `0`."""
import json

import pytest
from click.testing import CliRunner

from conftest import fixture_trace
from nsysanalyze.cli import cli
from nsysanalyze.compare import compare, kernel_values, parse_gate

BASELINE = fixture_trace("resnet18_baseline.sqlite")
WORKERS = fixture_trace("resnet18_workers.sqlite")
DDP = fixture_trace("vit_l32_2gpu_ddp_0.sqlite")     # no OSRT_API table: munmap not captured
BF16 = fixture_trace("vit_l32_2gpu_bf16_0.sqlite")   # idem


def run(*args):
    return CliRunner().invoke(cli, ["compare", *map(str, args)])


def test_gate_on_an_uncaptured_metric_is_na_and_exit_1():
    result = run(DDP, BF16, "--fail-on", "munmap_count>0", "--format", "json")
    assert result.exit_code == 1, result.output
    doc = json.loads(result.output)
    gate = doc["gates"][0]
    assert gate["base"] is None and gate["new"] is None and gate["tripped"] is None and gate["verdict"] == "n/a"
    assert doc["tripped"] and any("munmap_count is null (not captured) in BASE and NEW" in n for n in doc["notes"])
    text = run(DDP, BF16, "--fail-on", "munmap_count>0")
    assert text.exit_code == 1 and "FAIL: none of 1 gate(s) tripped; 1 n/a" in text.output and "n/a" in text.output
    allowed = run(DDP, BF16, "--fail-on", "munmap_count>0", "--allow-missing")
    assert allowed.exit_code == 0 and "PASS" in allowed.output and "accepted with --allow-missing" in allowed.output
    captured = json.loads(run(BASELINE, WORKERS, "--fail-on", "munmap_count>0", "--format", "json").output)
    assert captured["gates"][0]["verdict"] in ("ok", "tripped")  # with OSRT the gate is evaluated


def test_medians_of_fewer_than_three_steady_steps_warn():
    doc = json.loads(run(BASELINE, WORKERS, "--fail-on", "step_time>+5%", "--format", "json").output)
    warnings = [n for n in doc["notes"] if n.startswith("warning:")]
    assert warnings == [f"warning: {side} has only 2 steady step(s) per GPU: its medians are noisy (gate on at "
                        "least 3)." for side in ("BASE", "NEW")]
    assert not [n for n in json.loads(run(BASELINE, WORKERS, "--format", "json").output)["notes"]
                if n.startswith("warning:")]  # no gate, nothing to warn about


def test_zero_needs_no_unit():
    assert parse_gate("step_time>0").threshold == 0 and parse_gate("dtod_bytes>+0").kind == "absolute"
    result = run(WORKERS, WORKERS, "--fail-on", "dtod_bytes>0")
    assert result.exit_code == 0, result.output
    with pytest.raises(ValueError, match="give a unit"):
        parse_gate("step_time>5")


def test_kernel_gate_matches_names_by_substring():
    gate = parse_gate("kernel:bn_bw_1C11_kernel_new<float, float>+10%")
    assert gate.metric == "kernel:bn_bw_1C11_kernel_new<float, float" and gate.kind == "relative"
    assert gate.threshold == pytest.approx(0.10)
    result = run(BASELINE, WORKERS, "--fail-on", "kernel:gemm>+10%", "--fail-on", "kernel:gemm<-90%",
                 "--format", "json")
    doc = json.loads(result.output)
    g = {x["expr"]: x for x in doc["gates"]}
    base = json.loads(CliRunner().invoke(cli, ["diagnose", str(BASELINE), "--format", "json"]).output)
    gemm = [k for k in base["kernels"] if "gemm" in k["name"]]
    assert g["kernel:gemm>+10%"]["base"] == pytest.approx(sum(k["per_step_ns"] for k in gemm))
    assert g["kernel:gemm>+10%"]["tripped"] is False and result.exit_code == 0  # same model, same kernels
    assert kernel_values(base, "gemm")["whole"] == sum(k["total_ns"] for k in gemm)
    nothing = json.loads(run(BASELINE, WORKERS, "--fail-on", "kernel:no_such_kernel>+1%", "--format", "json").output)
    assert nothing["gates"][0]["base"] == 0 and nothing["gates"][0]["tripped"] is False


def test_kernel_movers_are_the_largest_changes():
    c = compare(*[json.loads(CliRunner().invoke(cli, ["diagnose", str(p), "--format", "json"]).output)
                  for p in (BASELINE, WORKERS)])
    movers = c["kernels"]
    assert 0 < len(movers) <= 10
    sizes = [abs(k["abs"]) for k in movers]
    assert sizes == sorted(sizes, reverse=True)
    assert all(k["abs"] == pytest.approx(k["new_ns"] - k["base_ns"]) for k in movers)
    md = run(BASELINE, WORKERS, "--format", "markdown").output
    assert "### Kernels: largest changes (per step, summed over GPUs)" in md


@pytest.mark.parametrize("expr", ["gpu_idle_fraction>50", "gpu_idle_fraction>10", "gpu_idle_fraction>+3",
                                  "gpu_idle_fraction>150%", "nccl_share>1.5", "htod_kernel_overlap<-2"])
def test_a_fraction_gate_above_one_is_refused(expr):
    """A fraction never exceeds 1: '>50' could never trip (it passed CI silently); the error names the unit."""
    with pytest.raises(ValueError, match=r"is a fraction in \[0, 1\] and never exceeds 1"):
        parse_gate(expr)
    result = CliRunner().invoke(cli, ["compare", str(BASELINE), str(WORKERS), "--fail-on", expr])
    assert result.exit_code == 2 and "fraction in [0, 1]" in result.output


def test_a_fraction_gate_in_percent_is_a_level():
    gate = parse_gate("gpu_idle_fraction>50%")
    assert (gate.kind, gate.threshold) == ("level", 0.5)
    assert parse_gate("gpu_idle_fraction>0.5").threshold == 0.5 and parse_gate("nccl_share<=1").threshold == 1
    assert parse_gate("gpu_idle_fraction>+50%").kind == "relative"  # a signed % stays a relative change
    doc = json.loads(run(BASELINE, WORKERS, "--fail-on", "gpu_idle_fraction>50%", "--format", "json").output)
    g = doc["gates"][0]
    assert g["threshold"] == 0.5 and g["tripped"] == (g["new"] > 0.5)


def test_every_metric_unit_is_checked_the_same_way():
    """Per unit: a right unit parses to the same threshold for every metric of that unit; a wrong one is refused
    naming the metric's unit."""
    from nsysanalyze.compare import METRICS

    good = {"ns": ("2ms", 2e6), "bytes": ("1GB", 1e9), "count": ("10", 10), "fraction": ("30%", 0.3)}
    bad = {"ns": ["5", "5%", "5GB"], "bytes": ["5", "5%", "5ms"], "count": ["5ms", "5%", "5GB"],
           "fraction": ["5", "5ms", "5GB"]}
    words = {"ns": "a time", "bytes": "a size", "count": "a count", "fraction": "a fraction"}
    for m in METRICS:
        text, value = good[m.unit]
        assert parse_gate(f"{m.name}>{text}").threshold == pytest.approx(value), m.name
        assert parse_gate(f"{m.name}>+5%").kind == "relative"
        for value in bad[m.unit]:
            with pytest.raises(ValueError, match=words[m.unit]):
                parse_gate(f"{m.name}>{value}")


@pytest.mark.parametrize("gate, status", [("munmap_count>+0", 1), ("munmap_count>+1000", 0)])
def test_a_tripped_gate_exit_status_survives_a_closed_pipe(gate, status):
    """`compare … --fail-on X | head -5` under `set -o pipefail`: the reader goes away before the output is
    written; the exit status is still the gate's (1 tripped, 0 not), quietly."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.Popen([sys.executable, "-m", "nsysanalyze", "compare", str(BASELINE), str(WORKERS),
                             "--fail-on", gate], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    proc.stdout.close()  # closed before the analysis ends: every write meets a broken pipe
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == status and err == ""
    shell = subprocess.run(["bash", "-c", f"set -o pipefail; {sys.executable} -m nsysanalyze compare {BASELINE} "
                            f"{WORKERS} --fail-on '{gate}' | head -5"], capture_output=True, env=env, timeout=120)
    assert shell.returncode == status and len(shell.stdout.decode().splitlines()) == 5


def test_unchanged_kernels_are_no_movers_and_the_output_says_nothing_changed():
    doc = json.loads(run(BASELINE, BASELINE, "--format", "json").output)
    assert doc["kernels"] == []
    for fmt in ("text", "markdown"):
        out = run(BASELINE, BASELINE, "--format", fmt).output
        assert "Kernels: no kernel's time changed (per step, summed over GPUs)" in out and "+0.0 ms" not in out
    moved = json.loads(run(BASELINE, WORKERS, "--format", "json").output)["kernels"]
    assert moved and all(k["abs"] != 0 for k in moved)
