"""The ledger (nsysanalyze.ledger): every window's ns accounted once, findings' claimed rows disjoint, no gain
above its bound, and the combined estimate within the window — on every real export (the project's
fixtures and ../shared/traces, skipped when absent), plus exact values on the tiny synthetic trace."""
import importlib.util
import json
from pathlib import Path

import pytest

import nsysanalyze
from conftest import FIXTURES, P, SHARED_TRACES, default_report, per_file_fixtures, shared_trace
from nsysanalyze.compare import compare
from nsysanalyze.ledger import Ledger, WhatIf, host_work_ns
from nsysanalyze.render.contract import report as contract_report
from tiny import gpid


def bench_module(name: str):
    """A script of bench/ as a module (bench/fix_pairs.py: the pairs' predicted and realized gains)."""
    spec = importlib.util.spec_from_file_location(name, FIXTURES.parent / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fix_pairs = bench_module("fix_pairs")

REAL = per_file_fixtures() + sorted(SHARED_TRACES.glob("*/*.sqlite"))


def rows_of(ledger, pid, dev, window, step):
    r = ledger[(ledger.globalPid == pid) & (ledger.deviceId == dev) & (ledger.window == window) & (ledger.step == step)]
    return {(k, w): int(ns) for k, w, ns in r.groupby(["kind", "what"], as_index=False)["ns"].sum().itertuples(index=False)}


def test_tiny_windows_split_by_busy_class_and_idle(tiny_path):
    """Hand-computed from conftest.tiny_path: GPU 0's steps [700,950), [950,1900), [1900,2700)."""
    with nsysanalyze.open(tiny_path) as a:
        led = a.ledger()
    p = gpid(P)
    # step 0: pageable HtoD [700,800) before the kernels [800,950)
    assert rows_of(led, p, 0, "step", 0) == {("busy", "compute"): 150, ("busy", "htod_pageable"): 100}
    # step 1: compute [1650,1750), NCCL [1750,1850) beyond it, the pinned copy [1700,1800) under kernels,
    # DtoD [1850,1900); idle [950,1650)
    s1 = rows_of(led, p, 0, "step", 1)
    assert {k: v for k, v in s1.items() if k[0] == "busy"} == {("busy", "compute"): 100, ("busy", "nccl"): 100,
                                                              ("busy", "dtod"): 50}
    assert sum(v for k, v in s1.items() if k[0] == "idle") == 700
    # step 2: compute [2500,2600), NCCL [2550,2700): 100 beyond compute; idle [1900,2500)
    s2 = rows_of(led, p, 0, "step", 2)
    assert (s2[("busy", "compute")], s2[("busy", "nccl")]) == (100, 100)
    assert sum(v for k, v in s2.items() if k[0] == "idle") == 600


def test_what_if_bound_is_the_smallest_limit():
    ms = 1e6
    w = WhatIf(window_ns=100 * ms, removable_ns=60 * ms, busy_ns=50 * ms, host_work_ns=70 * ms, host_removed_ns=20 * ms,
               caps={"compute": 80 * ms})
    assert (w.gpu_left_ns, w.host_left_ns) == (50 * ms, 50 * ms)
    assert w.gain_ns == 50 * ms  # window 100 - max(GPU left 50, host left 50) < removable 60 < cap 80
    assert w.terms()["bound"] == ("min(removable 60.00 ms, window - max(GPU left, host left) 50.00 ms, compute 80.00 ms)"
                                  " = 50.00 ms")
    assert WhatIf(100 * ms, 30 * ms, 10 * ms, 20 * ms).gain_ns == 30 * ms
    assert WhatIf(100 * ms, 30 * ms, 90 * ms, 20 * ms).gain_ns == 10 * ms  # the GPU work stays: at most the idle beside it


def test_host_work_leaves_out_waits_for_the_gpu():
    m = {"window_ns": 100.0, "cpu_ns": 120.0, "sync_wait_ns": 10.0, "sync_copy_ns": 5.0, "async_copy_ns": float("nan"),
         "launch_ns": 20.0}
    assert host_work_ns(m) == 120.0 - 35.0  # the waits off the CPU range, NaN (no runtime table) skipped
    assert Ledger.of(nsysanalyze.ledger.EMPTY_ROWS, m).host_work_ns == 85.0
    assert host_work_ns({**m, "cpu_ns": 150.0}) == 100.0  # then capped at the window


@pytest.mark.parametrize("path", REAL, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_ns_once_claims_disjoint_gains_within_bounds(path):
    with nsysanalyze.open(path) as a:
        led, steps, summary, d = a.ledger(), a.steps(), a.summary(), contract_report(a)
    sums = led.groupby(["globalPid", "deviceId", "window", "step", "kind"])["ns"].sum()
    for window, frame in (("step", steps), ("capture", summary)):
        for r in frame.itertuples():
            step = r.step if window == "step" else -1
            busy = sums.get((r.globalPid, r.deviceId, window, step, "busy"), 0)
            idle = sums.get((r.globalPid, r.deviceId, window, step, "idle"), 0)
            assert (busy, idle) == (r.busy_ns, r.idle_ns), (window, step)
    ledgers = {(x["globalPid"], x["deviceId"]): x for x in d["ledger"]}
    seen: dict[tuple, set] = {}
    for f in d["findings"]:
        x = ledgers[(f["globalPid"], f["deviceId"])]
        rows = x["rows"]
        mine = set(f["claimed"])
        assert not mine & seen.setdefault((f["globalPid"], f["deviceId"]), set()), f["rule"]  # no row twice
        seen[(f["globalPid"], f["deviceId"])] |= mine
        assert all(rows[i]["claimed_by"] == f["rule"] for i in mine)
        claimed_ns = sum(rows[i]["ns"] for i in mine)
        # a periodic stall's gain lies in the slow steps, outside the median step's ledger: it claims no row
        assert f["gain_ns"] <= claimed_ns + 1e-6 or f["gain_ns"] == 0 or "amortized_gain_ns" in f["evidence"], f["rule"]
        if "bound_removable_ns" in f["evidence"]:
            e = f["evidence"]
            after = max(e["bound_gpu_left_ns"], e["bound_host_left_ns"])
            assert f["gain_ns"] <= min(e["bound_removable_ns"], x["window_ns"] - after) + 1e-6, f["rule"]
    for x in d["ledger"]:
        assert 0 <= x["combined_gain_ns"] <= x["window_ns"] + 1e-6
        assert x["after_fixes_ns"] <= x["window_ns"] + 1e-6
        gains = sum(f["gain_ns"] for f in d["findings"] if (f["globalPid"], f["deviceId"]) == (x["globalPid"], x["deviceId"]))
        assert x["combined_gain_ns"] <= gains + 1e-6


def public(name):
    return default_report(shared_trace(f"public/{name}"))


def by_rule(d):
    return {f["rule"]: f for f in d["findings"]}


def test_nerf_idle_after_syncs_is_counted_once_and_bounded_by_host_work():
    """TensorFlow NeRF: 0.13 ms of DtoH and 0.29 ms of HtoD copies per capture are below the smallest gain worth
    reporting; the 146 ms of idle after syncs belongs to one finding, bounded by the host's own work."""
    d = public("casio__nerf_output-file.sqlite")
    f = by_rule(d)
    assert "dtoh-sync" not in f and "pin-memory" not in f
    sync = f["host-sync"]
    assert sync["gain_ns"] < 0.5 * sync["evidence"]["gpu_idle_in_and_after_syncs_ns"]


@pytest.mark.parametrize("name", ["MohanadOdema__w_Relu_nsys_profile.sqlite", "nsys-ai__mfu_2gpu_after.sqlite"])
def test_a_scalar_copy_is_no_pinning_finding(name):
    assert "pin-memory" not in by_rule(public(name))


def test_pinning_never_estimates_a_slower_pinned_copy():
    """CloverLeaf's pageable copies run at 24 GB/s, above the assumed A100 link rate: the estimate uses their rate."""
    e = by_rule(public("pipit__perlmutter-cloverleaf-cuda.sqlite"))["pin-memory"]["evidence"]
    assert e["pinned_copy_estimate_ns"] <= e["htod_pageable_ns"]


def test_one_inferred_step_covering_little_of_the_capture_is_low_confidence():
    d = public("bwyogatama__report1.sqlite")
    assert d["trace"]["step_source"] == "inferred"
    assert all(f["confidence"] < 0.4 for f in d["findings"])


def test_compare_reports_predicted_against_realized():
    """workers → pinned: BASE's pin-memory finding disappears; NEW's step is shorter by what the fix delivered."""
    base, new = default_report(FIXTURES / "resnet18_workers.sqlite"), default_report(FIXTURES / "resnet18_pinned.sqlite")
    gone = {x["rule"]: x for x in compare(base, new)["findings"]["disappeared"]}["pin-memory"]
    realized = base["ledger"][0]["window_ns"] - new["ledger"][0]["window_ns"]
    assert gone["realized_ns"] == pytest.approx(realized)
    assert abs(gone["gain_ns"] - realized) <= 0.3 * realized


PAIRS = [pytest.param(p, marks=pytest.mark.xfail(strict=True, reason=p["known_miss"])) if p.get("known_miss") else p
         for p in json.loads((FIXTURES / "fix_pairs.json").read_text())]


def pair_id(p) -> str:
    return f"{Path(p['bad']).stem}->{Path(p['fixed']).stem}"


@pytest.mark.parametrize("pair", PAIRS, ids=[pair_id(p if isinstance(p, dict) else p.values[0]) for p in PAIRS])
def test_predicted_gain_matches_the_realized_one(pair):
    """|predicted − realized| ≤ max(10% of the bad step, 30% of the realized gain) for every bad→fixed pair of the
    project's own captures (fixtures/fix_pairs.json; bench/fix_pairs.py evaluates them): realized from the profiled
    step medians of both (the mean steady step for a periodic stall; per sample when the batch changed)."""
    e = fix_pairs.evaluate(pair, FIXTURES, default_report)
    assert e["within"], e
