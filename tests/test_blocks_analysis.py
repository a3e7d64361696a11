"""The whole report is the same whether the kernels and the runtime calls are held whole or never held but read
from the export a block at a time (analysis.TABLE_BUDGET_BYTES exceeded): issue 20 item 2."""
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
def test_report_is_the_same_for_any_cut_of_the_tables(monkeypatch, where, name):
    """Blocks of 150 rowids read from the export at each walk (the budget set to 0 bytes) give the report of
    the kernels and runtime calls held whole, byte for byte; neither table is ever read whole."""
    path = fixture_trace(name) if where == "fixtures" else shared_trace(name)
    whole = _report(path)
    monkeypatch.setattr(B, "ROWS", 150)
    monkeypatch.setattr(AN, "TABLE_BUDGET_BYTES", 0)
    kinds, blocks, calls = [], [], []
    gpu_table, kernel_rows, runtime_named = Trace.gpu_table, Trace.kernel_rows, Trace.runtime_named
    monkeypatch.setattr(Trace, "gpu_table", lambda self, kind, *a: kinds.append(kind) or gpu_table(self, kind, *a))
    monkeypatch.setattr(Trace, "kernel_rows", lambda self, *a: blocks.append(a[1]) or kernel_rows(self, *a))
    monkeypatch.setattr(Trace, "runtime_named", lambda self, ids, rowids=None: calls.append(rowids)
                        or runtime_named(self, ids, rowids))
    assert _report(path) == whole
    assert "kernels" not in kinds and None not in calls  # never read whole
    assert len(set(blocks)) >= 2 and len(set(calls)) >= 2  # a block of rowids at a time, each at every walk


def test_the_budget_is_set_from_the_environment(monkeypatch):
    """NSYSANALYZE_TABLE_BUDGET_MB: 0 reads resnet18_baseline's kernels and runtime calls in blocks, a large value
    holds them whole, and a value that is no number of MiB is one clear error (exit 2 from the CLI)."""
    path = fixture_trace("resnet18_baseline.sqlite")
    for mb, in_blocks in (("0", True), ("4096", False)):
        monkeypatch.setenv("NSYSANALYZE_TABLE_BUDGET_MB", mb)
        with nsysanalyze.open(path) as a:
            assert a._tables_read_in_blocks == ({"kernels", "runtime"} if in_blocks else set())
    env = dict(os.environ, NSYSANALYZE_TABLE_BUDGET_MB="lots")
    proc = subprocess.run([sys.executable, "-m", "nsysanalyze", "diagnose", str(path)], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "NSYSANALYZE_TABLE_BUDGET_MB='lots'" in proc.stderr


def test_the_larger_table_goes_to_blocks_first(monkeypatch):
    """tables_in_blocks: none while the tables fit the budget together (100 bytes here); above it, the largest is
    read in blocks, then the next, until those left fit."""
    monkeypatch.setattr(AN, "TABLE_BUDGET_BYTES", 100)
    assert AN.tables_in_blocks({"kernels": 40, "runtime": 60}) == set()
    assert AN.tables_in_blocks({"kernels": 40, "runtime": 61}) == {"runtime"}
    assert AN.tables_in_blocks({"kernels": 120, "runtime": 10}) == {"kernels"}
    assert AN.tables_in_blocks({"kernels": 101, "runtime": 101}) == {"kernels", "runtime"}
    assert AN.tables_in_blocks({"kernels": 0, "runtime": 0}) == set()


@pytest.mark.parametrize("name", ["recompile_static.sqlite", "resnet18_baseline.sqlite"])
def test_the_runtime_calls_read_are_sampled_to_weigh_them(monkeypatch, name):
    """The share of the runtime table the pass reads is estimated from 4096 evenly spaced rowids: within
    3 points of the exact share on recompile_static (87,691 calls, a sample), equal to it on resnet18_baseline
    (fewer rows than samples: every row). The budget weighs the calls read, not the whole table: between the two
    the tables are held whole, below what is read the larger goes to blocks."""
    import sqlite3

    path = fixture_trace(name)
    with nsysanalyze.open(path) as a:
        ids, rowids = a._runtime_name_ids, a._runtime_rowids
        share = a.trace.runtime_named_share(ids, rowids)
        kernels = (a._kernel_rowids[1] - a._kernel_rowids[0]) * AN.KERNEL_ROW_BYTES
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    total, named = con.execute("SELECT count(*), sum(nameId IN (%s)) FROM CUPTI_ACTIVITY_KIND_RUNTIME"
                               % ",".join(map(str, ids))).fetchone()
    con.close()
    exact = named / total
    assert 0 < exact < 1 and (abs(share - exact) <= 0.03 if total > 4096 else share == exact)
    whole = (rowids[1] - rowids[0]) * AN.RUNTIME_ROW_BYTES
    read = round(whole * share)
    for budget, in_blocks in (((kernels + whole + kernels + read) // 2, set()),
                              (kernels + read - 1, {"kernels" if kernels > read else "runtime"})):
        monkeypatch.setattr(AN, "TABLE_BUDGET_BYTES", budget)
        with nsysanalyze.open(path) as a:
            assert a._tables_read_in_blocks == in_blocks


def test_empty_blocks_change_nothing():
    """A rowid range past the table's end reads as an empty block (sparse rowids give such blocks); with one at
    each end of 97-row blocks of resnet18_baseline's kernels, the kernel table, the inferred steps, the launch
    waits, the GPU window metrics (50-kernel tiles) and the busy unions equal those of one block."""
    import numpy as np
    import pandas as pd
    from nsysanalyze import kernels as K, metrics as M, steps as S
    with nsysanalyze.open(fixture_trace("resnet18_baseline.sqlite")) as a:
        kernels, copies, sets, calls = a._kernels, a._memcpys, a._memsets, a._runtime_calls
        hi = a._kernel_rowids[1]
        empty = a.trace.kernel_rows(list(kernels.columns), (hi + 10, hi + 20))
        windows = a.steps()[["globalPid", "deviceId", "window_start", "window_end"]].astype(np.int64)
        assert empty.empty and list(empty.columns) == list(kernels.columns)
        cut = [empty, *B.frame_blocks(kernels, 97), empty]
        for result in (lambda b: K.aggregate(b, a.trace.strings, None, "demangledId"), S.inferred_steps,
                       lambda b: M.launch_waits(windows, b, [calls]),
                       lambda b: M.gpu_metrics(windows, b, copies, sets, a.trace.nccl_kernel_name_ids, tile_kernels=50)):
            pd.testing.assert_frame_equal(result(cut), result([kernels]))
        one, cut = M.busy_coverage([kernels], copies, sets), M.busy_coverage(cut, copies, sets)
        assert one.keys() == cut.keys()
        for key in one:
            np.testing.assert_array_equal(cut[key].starts, one[key].starts)
            np.testing.assert_array_equal(cut[key].ends, one[key].ends)
