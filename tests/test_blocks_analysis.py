"""The whole report is the same whether the kernels are held whole or never held but read from the export a
block at a time (analysis.KERNEL_BUDGET_BYTES exceeded): issue 20 item 2."""
import json
import os
import subprocess
import sys

import pytest

import nsysanalyze
from nsysanalyze import analysis as AN
from nsysanalyze import blocks as B
from nsysanalyze.render.contract import report
from nsysanalyze.trace import Trace
from conftest import fixture_trace, shared_trace

# NVTX steps with OS calls; a DDP rank (NCCL, DtoD); HtoD prefetch on a side stream; inferred steps (no NVTX);
# an NVTX family rejected as op-level; a CUDA-graph capture; two GPUs in one file
REAL = [("fixtures", "resnet18_baseline.sqlite"), ("fixtures", "vit_l32_ddp.sqlite"),
        ("fixtures", "resnet18_prefetch.sqlite"), ("fixtures", "cupy_tinyops.sqlite"),
        ("fixtures", "emit_nvtx_only.sqlite"), ("fixtures", "compile_graphs.sqlite"),
        ("shared", "public/nsys-ai__mfu_2gpu_after.sqlite")]


def _report(path) -> str:
    with nsysanalyze.open(path) as a:
        return json.dumps(report(a), sort_keys=True, default=str)


@pytest.mark.parametrize("where,name", REAL, ids=[r[1] for r in REAL])
def test_report_is_the_same_for_any_cut_of_the_kernels(monkeypatch, where, name):
    """Blocks of 150 rowids read from the export at each walk (the budget set to 0 bytes) give the report of
    the kernels held whole, byte for byte; the kernel table is never read whole."""
    path = fixture_trace(name) if where == "fixtures" else shared_trace(name)
    whole = _report(path)
    monkeypatch.setattr(B, "ROWS", 150)
    monkeypatch.setattr(AN, "KERNEL_BUDGET_BYTES", 0)
    kinds, blocks = [], []
    gpu_table, kernel_rows = Trace.gpu_table, Trace.kernel_rows
    monkeypatch.setattr(Trace, "gpu_table", lambda self, kind, *a: kinds.append(kind) or gpu_table(self, kind, *a))
    monkeypatch.setattr(Trace, "kernel_rows", lambda self, *a: blocks.append(a[1]) or kernel_rows(self, *a))
    assert _report(path) == whole
    assert "kernels" not in kinds  # never read whole
    assert len(set(blocks)) >= 2  # read a block of rowids at a time, each block at every walk


def test_the_budget_is_set_from_the_environment(monkeypatch):
    """NSYSANALYZE_KERNEL_BUDGET_MB: 0 reads resnet18_baseline's kernels in blocks, a large value holds them
    whole, and a value that is no number of MiB is one clear error (exit 2 from the CLI)."""
    path = fixture_trace("resnet18_baseline.sqlite")
    for mb, in_blocks in (("0", True), ("4096", False)):
        monkeypatch.setenv("NSYSANALYZE_KERNEL_BUDGET_MB", mb)
        with nsysanalyze.open(path) as a:
            assert a._kernels_read_in_blocks is in_blocks
    env = dict(os.environ, NSYSANALYZE_KERNEL_BUDGET_MB="lots")
    proc = subprocess.run([sys.executable, "-m", "nsysanalyze", "diagnose", str(path)], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "NSYSANALYZE_KERNEL_BUDGET_MB='lots'" in proc.stderr
