"""The reader and the pipeline on real exports from nsys 2023.3 → 2026.2 (../shared/traces)."""
import json
import subprocess
import sys

import pytest

import nsysanalyze
from conftest import shared_trace
from nsysanalyze.render.contract import report as contract_report

# file -> (nsys version prefix, schema, step family, steps, GPU devices (process, device) in use)
EXPECTED = {
    "public/sc23-openmp-tutorial__report3.sqlite": ("2023.3.1", "3.4.0", None, 0, 1),
    "h200/resnet18-baseline-nvtx.sqlite": ("2023.4.4", "3.7.2", "Batch {n}", 3, 1),
    # no NVTX: steps inferred from the repeating kernel sequence (389 kernels per ResNet-18 step; 3 anchors, 2 periods)
    "h200/resnet18-baseline-cudaonly.sqlite": ("2023.4.4", "3.7.2", "kernel sequence (period 389 kernels)", 2, 1),
    "public/pipit__perlmutter-cloverleaf-cuda.sqlite": ("2024.5.1", "3.13.2", None, 0, 1),
    "public/nsightful__power_iteration__baseline.sqlite": ("2025.3.1", "3.20.2", "Step {n} to {n}", 44, 1),
    # its NVTX ranges are op-level (aten::*, NCCL): steps come from the kernel sequence
    "public/nsys-ai__mfu_2gpu_after.sqlite": ("2026.2.1", "3.25.0", "kernel sequence (period 119 kernels)", 14, 2),
}


@pytest.mark.parametrize("rel", sorted(EXPECTED))
def test_versions_steps_devices(rel):
    version, schema, family, n_steps, n_devices = EXPECTED[rel]
    with nsysanalyze.open(shared_trace(rel)) as a:
        d = contract_report(a)
    assert d["trace"]["nsys_version"].startswith(version)
    assert d["trace"]["schema_version"] == schema
    assert d["trace"]["step_family"] == family
    assert len({s["step"] for s in d["steps"]}) == n_steps
    assert len(d["summary"]["devices"]) == n_devices
    for dev in d["summary"]["devices"]:
        assert 0.0 <= dev["gpu_idle_fraction"] <= 1.0
        parts = sum(dev[k] for k in dev if k.startswith("time_")) + dev["idle_ns"]
        assert parts == dev["window_ns"]
    json.dumps(d, allow_nan=False)


def test_openmp_pageable_copies_2023_3():
    """100 HtoD + 100 DtoH copies from pageable memory, driver API (SC23 tutorial)."""
    with nsysanalyze.open(shared_trace("public/sc23-openmp-tutorial__report3.sqlite")) as a:
        s = a.summary().iloc[0]
    assert s.htod_count == 100 and s.dtoh_count == 100
    assert s.htod_pageable_bytes == s.htod_bytes > 0
    assert s.dtoh_pageable_bytes == s.dtoh_bytes > 0


def test_cloverleaf_osrt_munmap_2024_5():
    with nsysanalyze.open(shared_trace("public/pipit__perlmutter-cloverleaf-cuda.sqlite")) as a:
        s = a.summary().iloc[0]
        munmap = a.trace.osrt(("munmap",))
    assert s.kernel_count == 1312
    assert len(munmap) > 0 and s.munmap_count == ((munmap.start >= s.window_start) & (munmap.start < s.window_end)).sum()


def test_two_processes_nccl_2026_2():
    with nsysanalyze.open(shared_trace("public/nsys-ai__mfu_2gpu_after.sqlite")) as a:
        s = a.summary()
        pids = set(a.trace.kernels.globalPid)
    assert set(s.globalPid) == pids and len(pids) == 2
    assert (s.nccl_count > 0).all() and (s.nccl_ns > 0).all()
    assert (s.nccl_exposed_ns <= s.nccl_ns).all()


def test_baseline_h200_ladder_first_rung():
    """The first article's baseline (DataLoader in the main process) → more workers first, then pinning."""
    with nsysanalyze.open(shared_trace("h200/resnet18-baseline-nvtx.sqlite")) as a:
        rules = [f.rule for f in a.findings()]
        steps = a.steps()
    assert rules[:2] == ["dataloader-workers", "pin-memory"]
    assert (steps[steps.closed].idle_fraction > 0.7).all()


@pytest.mark.parametrize("rel,expect", [
    ("h200/resnet18-bs8-nvtx0.2.17-dropped.sqlite", "nsys 2023.4 does not record python nvtx >= 0.2.12"),
    ("h200/cpu-nvtx0.2.12-dropped.sqlite", "nsys 2023.4 does not record python nvtx >= 0.2.12"),
    ("h200/resnet18-baseline-cudaonly.sqlite", "No NVTX ranges"),
])
def test_nvtx_notes(rel, expect):
    with nsysanalyze.open(shared_trace(rel)) as a:
        assert any(expect in n for n in a.notes)


def test_cli_json_on_every_shared_export():
    import glob
    root = shared_trace("h200").parent
    for f in sorted(glob.glob(str(root / "*" / "*.sqlite"))):
        proc = subprocess.run([sys.executable, "-m", "nsysanalyze", "diagnose", "--format", "json", f],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, (f, proc.stderr)
        assert json.loads(proc.stdout)["format_version"] == 3
