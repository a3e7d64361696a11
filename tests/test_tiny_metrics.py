"""Exact metrics on a tiny synthetic trace built on a real nsys schema (see conftest.tiny_path)."""
import math

import pytest

import nsysanalyze
from conftest import P, Q, T
from tiny import gpid
from nsysanalyze.render.contract import report as contract_report


@pytest.fixture
def analysis(tiny_path):
    with nsysanalyze.open(tiny_path) as a:
        yield a


def step_row(steps, step, device=0):
    rows = steps[(steps["step"] == step) & (steps["deviceId"] == device) & (steps["globalPid"] == gpid(P))]
    assert len(rows) == 1
    return rows.iloc[0]


def test_steps_are_detected_and_projected(analysis):
    steps = analysis.steps()
    assert analysis.info.step_family == "Batch {n}"
    # GPU 0 windows: completion to completion (the first step from its own first GPU work)
    assert [(r.window_start, r.window_end, r.closed) for r in steps[steps.deviceId == 0].itertuples()] == [
        (700, 950, False), (950, 1900, True), (1900, 2700, True)]
    # GPU 1 only got work from step 1
    gpu1 = steps[steps.deviceId == 1]
    assert [(r.step, r.window_start, r.window_end) for r in gpu1.itertuples()] == [(0, 900, 1000)]
    assert set(steps["globalTid"]) == {T}


def test_step1_copies_and_cpu(analysis):
    s = step_row(analysis.steps(), 0)
    assert s.window_ns == 250          # [700, 950): its own GPU work
    assert s.busy_ns == 250 and s.idle_ns == 0 and s.idle_fraction == 0.0
    assert s.kernel_ns == 150 and s.kernel_count == 2
    assert s.memcpy_ns == 100 and s.memcpy_hidden_ns == 0 and s.memcpy_kernel_overlap == 0.0
    assert s.htod_bytes == 1000 and s.htod_pageable_bytes == 1000 and s.htod_pinned_bytes == 0
    assert s.sync_copy_calls == 1 and s.sync_copy_ns == 5
    assert s.launch_calls == 3
    assert s.cpu_ns == 1000
    assert s.munmap_count == 1 and s.munmap_ns == 40
    assert s.munmap_gpu_idle_ns == 0   # [960, 1000) lies after this window


def test_step2_overlap_nccl_dtod(analysis):
    s = step_row(analysis.steps(), 1)
    assert s.window_ns == 950 and s.busy_ns == 250 and s.idle_ns == 700   # [950, 1900)
    assert s.memcpy_ns == 150 and s.memcpy_hidden_ns == 100
    assert s.memcpy_kernel_overlap == pytest.approx(100 / 150)
    assert s.htod_ns == 100 and s.htod_kernel_overlap == 1.0
    assert s.htod_pinned_bytes == 2000 and s.htod_pageable_bytes == 0
    assert s.nccl_count == 1 and s.nccl_ns == 100 and s.nccl_exposed_ns == 100
    assert s.nccl_share == pytest.approx(100 / 950)
    assert (s.dtod_bytes, s.dtod_count, s.dtod_ns) == (4096, 1, 50)
    assert s.sync_wait_calls == 1
    # in its CPU range: the munmap at [1660,1700), under a kernel; in its GPU window, the idle
    # [960,1000) coincides with the munmap that step 1's CPU range made
    assert s.munmap_count == 1 and s.munmap_gpu_idle_ns == 40
    # the time partition: X=[1650,1750) N=[1750,1850) C=[1700,1800)+[1850,1900)
    assert (s.time_compute_only_ns, s.time_copy_hidden_ns, s.time_copy_exposed_ns,
            s.time_nccl_overlapped_ns, s.time_nccl_exposed_ns) == (50, 100, 50, 0, 50)


def test_step3_nccl_partly_hidden(analysis):
    s = step_row(analysis.steps(), 2)
    assert s.window_ns == 800 and s.idle_ns == 600   # [1900, 2700)
    assert s.nccl_ns == 150 and s.nccl_exposed_ns == 100
    assert s.time_nccl_overlapped_ns == 50 and s.time_compute_only_ns == 50 and s.time_nccl_exposed_ns == 100
    assert math.isnan(s.memcpy_kernel_overlap)  # no copy in the window


def test_partition_sums_to_window(analysis):
    steps = analysis.steps()
    parts = [c for c in steps.columns if c.startswith("time_")] + ["idle_ns"]
    assert (steps[parts].sum(axis=1) == steps["window_ns"]).all()


def test_whole_capture_per_process_and_device(analysis):
    s = analysis.summary().set_index(["globalPid", "deviceId"])
    p0 = s.loc[(gpid(P), 0)]
    assert (p0.window_start, p0.window_end) == (700, 2700)
    assert p0.busy_ns == 700 and p0.idle_ns == 1300
    assert p0.dtod_bytes == 4096 and p0.htod_bytes == 3000
    assert p0.munmap_count == 2 and p0.munmap_gpu_idle_ns == 40
    # process Q's kernel reuses correlationId 1 but is its own device window, and not one of P's steps
    q0 = s.loc[(gpid(Q), 0)]
    assert (q0.window_start, q0.window_end, q0.busy_ns) == (0, 500, 500)
    assert math.isnan(q0.steps)
    # medians over closed steps (steps 2 and 3 on GPU 0)
    assert p0.step_median_window_ns == (950 + 800) / 2
    assert p0.steps == 3


def test_subranges(analysis):
    sub = analysis.subranges()
    first = sub[(sub.step == 0)].set_index("name")
    assert first.loc["get batch", "ns"] == 600 and first.loc["get batch", "share"] == 0.6
    assert first.loc["copy batch", "ns"] == 80
    assert "Batch 1" not in first.index


def test_info_and_json_contract(analysis):
    d = contract_report(analysis)
    assert d["format_version"] == 3
    assert d["trace"]["nsys_version"] == "2023.4.4.54" and d["trace"]["schema_version"] == "3.7.2"
    assert {(x["globalPid"], x["deviceId"]) for x in d["trace"]["devices"]} == {(gpid(P), 0), (gpid(P), 1), (gpid(Q), 0)}
    dev = next(x for x in d["summary"]["devices"] if x["globalPid"] == gpid(P) and x["deviceId"] == 0)
    for key in ("gpu_idle_fraction", "memcpy_kernel_overlap", "nccl_share", "dtod_bytes", "htod_bytes", "htod_pageable_bytes"):
        assert key in dev
    assert dev["gpu_idle_fraction"] == pytest.approx(1300 / 2000)
    assert len(d["steps"]) == 4


def test_old_schema_export_meta_data_and_inline_nvtx_text(tmp_path):
    """Older exports: EXPORT_META_DATA instead of META_DATA_EXPORT, NVTX text inline (no textId)."""
    from tiny import TinyTrace
    t = TinyTrace(tmp_path / "old.sqlite", nsys_version="2022.2.1.31", schema_version="2.7.1")
    t.conn.execute("ALTER TABLE META_DATA_EXPORT RENAME TO EXPORT_META_DATA")
    t.conn.execute("ALTER TABLE NVTX_EVENTS DROP COLUMN textId")
    t.process(P)
    for i in range(2):
        t.insert("NVTX_EVENTS", start=i * 100, end=i * 100 + 100, eventType=59, text=f"iteration {i}", globalTid=T)
        t.runtime(i * 100 + 10, i * 100 + 11, i + 1, T)
        t.kernel(i * 100 + 20, i * 100 + 60, i + 1, P)
    with nsysanalyze.open(t.close()) as a:
        assert (a.info.nsys_version, a.info.schema_version) == ("2022.2.1.31", "2.7.1")
        assert a.info.step_family == "iteration {n}"
        steps = a.steps()
    assert steps[["window_start", "window_end", "busy_ns"]].values.tolist() == [[20, 60, 40], [60, 160, 40]]


def test_launches_that_return_after_their_kernel():
    """metrics.launch_waits on hand-made frames (exact values): a kernel counts when it ended before the call of its
    own process with its correlationId (its launch) returned; the wait runs from the later of the kernel's and the
    call's start to the call's return. Q's call with P's correlationId and a kernel without a call count for
    nothing; calls out of correlationId order are sorted first."""
    import numpy as np
    import pandas as pd

    from nsysanalyze import metrics as M
    from tiny import gtid

    kernels = pd.DataFrame({"globalPid": [gpid(P)] * 3 + [gpid(Q), gpid(P)], "deviceId": 0,
                            "correlationId": np.array([1, 2, 3, 1, 9], dtype=np.int32),
                            "start": [100, 200, 400, 100, 500], "end": [150, 300, 420, 150, 510]})
    runtime = pd.DataFrame({"globalTid": [T, gtid(P, 6), T, gtid(Q, 1), T],
                            "correlationId": np.array([2, 3, 1, 1, 4], dtype=np.int32),
                            "start": [180, 395, 90, 0, 600], "end": [190, 430, 160, 10, 10_000]})
    windows = pd.DataFrame({"globalPid": [gpid(P), gpid(P), gpid(Q)], "deviceId": 0,
                            "window_start": [0, 350, 0], "window_end": [350, 1000, 1000]})
    out = M.launch_waits(windows, [kernels], [runtime])
    assert out["launch_blocked_kernel_ns"].tolist() == [50, 20, 0]
    assert out["launch_wait_ns"].tolist() == [60, 30, 0]
    # a graph launch (one call, correlationId 4, 600-10,000) whose three kernels all ended inside it: their time
    # counts each, the call's wait once, from its first kernel's start (700) and in that kernel's window
    graph = pd.DataFrame({"globalPid": gpid(P), "deviceId": 0, "correlationId": np.array([4, 4, 4], dtype=np.int32),
                          "start": [900, 700, 1_200], "end": [1_000, 800, 1_300]})
    windows = pd.DataFrame({"globalPid": [gpid(P)] * 2, "deviceId": 0, "window_start": [650, 1_100],
                            "window_end": [1_100, 2_000]})
    out = M.launch_waits(windows, [graph], [runtime])
    assert out["launch_blocked_kernel_ns"].tolist() == [200, 100]
    assert out["launch_wait_ns"].tolist() == [10_000 - 700, 0]


def test_median_launch_call_per_process(monkeypatch):
    """metrics.median_launch_ns on hand-made frames (exact values): per process, the median duration of its launch
    calls only (a sync call's 1,000 ns is left out); an even count takes the mean of the middle two. Blocks of 2
    rows check that the block-at-a-time fill gives the whole-array median."""
    import numpy as np
    import pandas as pd

    from nsysanalyze import intervals
    from nsysanalyze import metrics as M
    from tiny import gtid

    names = {1: "cudaLaunchKernel", 2: "cudaDeviceSynchronize", 3: "cuLaunchKernelEx"}
    runtime = pd.DataFrame({"globalTid": [T, gtid(P, 6), gtid(Q, 1), T, T, gtid(Q, 1), T],
                            "nameId": [1, 3, 1, 2, 1, 1, 1],
                            "start": [0, 10, 20, 30, 40, 50, 60], "end": [5, 19, 21, 1_030, 47, 54, 62]})
    expected = {gpid(P): float(np.median([5, 9, 7, 2])), gpid(Q): 2.5}  # P: 5, 9, 7, 2 -> 6.0
    assert M.median_launch_ns([runtime], names) == expected == {gpid(P): 6.0, gpid(Q): 2.5}
    monkeypatch.setattr(intervals, "BLOCK", 2)
    assert M.median_launch_ns([runtime], names) == expected
    assert M.median_launch_ns([runtime[runtime["nameId"] == 2]], names) == {}
