"""The kernel-side consumers of metrics that take the kernels as blocks (nsysanalyze.blocks): launch_waits,
busy_coverage, htod_on_kernel_streams, nccl_on_compute_streams give over any cut the result over one block."""
import numpy as np
import pandas as pd
import pytest

import nsysanalyze
from nsysanalyze import metrics as M
from nsysanalyze.analysis import Analysis
from nsysanalyze.blocks import frame_blocks, in_start_order
from nsysanalyze.trace.schema import COPY_HTOD
from conftest import fixture_trace, shared_trace

# a DDP capture on one GPU and a rank of a 2-GPU one (NCCL kernels beside compute), HtoD copies with prefetch,
# a gloo rank (CPU collectives), other projects' exports: two GPUs in one file (NCCL), many streams
REAL = [("fixtures", "vit_l32_ddp.sqlite"), ("fixtures", "vit_l32_2gpu_ddp_0.sqlite"),
        ("fixtures", "resnet18_prefetch.sqlite"), ("fixtures", "gloo_8rank_slow_2.sqlite"),
        ("shared", "public/nsys-ai__mfu_2gpu_after.sqlite"), ("shared", "public/abacus__resnet101_streams_report1.sqlite")]
ONE_ROW_BLOCKS_UP_TO = 2000  # kernels: blocks of one row beyond that take too long


def _frames(path):
    """The frames the analysis passes (Analysis._window_metric_columns): windows (steps, then captures), kernels,
    memcpys, memsets, runtime calls, the NCCL kernel name ids."""
    with nsysanalyze.open(path) as a:
        capture = a._capture_windows
        capture = capture.assign(globalTid=-1, cpu_start=capture["window_start"], cpu_end=capture["window_end"])
        parts = [w[Analysis.WINDOW_KEYS].assign(globalTid=-1) for w in (a._step_windows, capture) if len(w)]
        windows = pd.concat(parts, ignore_index=True).astype(np.int64)
        return windows, a._kernels, a._memcpys, a._memsets, a._runtime_calls, a.trace.nccl_kernel_name_ids


def _results(blocks, windows, memcpys, memsets, runtime, nccl_ids):
    busy = M.busy_coverage(blocks, memcpys, memsets)
    return (M.launch_waits(windows, blocks, [runtime]), {key: (c.starts, c.ends) for key, c in busy.items()},
            M.htod_on_kernel_streams(blocks, memcpys), M.nccl_on_compute_streams(blocks, nccl_ids))


def _assert_same(got, expected):
    waits, busy, htod, nccl = got
    pd.testing.assert_frame_equal(waits, expected[0])
    assert list(busy) == list(expected[1])
    for key, (starts, ends) in expected[1].items():
        for a, b in zip(busy[key], (starts, ends)):
            np.testing.assert_array_equal(a, b)
            assert a.dtype == b.dtype
    pd.testing.assert_frame_equal(htod, expected[2])
    pd.testing.assert_frame_equal(nccl, expected[3])


def _cuts(kernels):
    """Blocks of 97 rows, of one row (or 13 on larger exports), and three unequal blocks."""
    n = len(kernels)
    return {"97": frame_blocks(kernels, 97), "1": frame_blocks(kernels, 1 if n <= ONE_ROW_BLOCKS_UP_TO else 13),
            "3": [kernels.iloc[:n // 3], kernels.iloc[n // 3:n // 3 + 7], kernels.iloc[n // 3 + 7:]]}


@pytest.mark.parametrize("where,name", REAL, ids=[r[1] for r in REAL])
def test_blocks_equal_one_block_on_real_exports(where, name):
    """Each consumer over tiny blocks gives exactly its result over the kernels as one block (values, dtypes,
    row order, index), the blocks in start order as the exports' are."""
    windows, kernels, memcpys, memsets, runtime, nccl_ids = _frames(fixture_trace(name) if where == "fixtures"
                                                                    else shared_trace(name))
    assert in_start_order([kernels])
    expected = _results([kernels], windows, memcpys, memsets, runtime, nccl_ids)
    for cut, blocks in _cuts(kernels).items():
        assert in_start_order(blocks), cut
        _assert_same(_results(blocks, windows, memcpys, memsets, runtime, nccl_ids), expected)


@pytest.mark.parametrize("where,name", REAL, ids=[r[1] for r in REAL])
def test_blocks_out_of_start_order_equal_one_block(where, name):
    """The same with the kernels' rows shuffled (no export here has its kernels out of start order): the
    consumers take their path that relies on no order."""
    windows, kernels, memcpys, memsets, runtime, nccl_ids = _frames(fixture_trace(name) if where == "fixtures"
                                                                    else shared_trace(name))
    shuffled = kernels.iloc[np.random.default_rng(0).permutation(len(kernels))]
    expected = _results([shuffled], windows, memcpys, memsets, runtime, nccl_ids)
    for cut, blocks in _cuts(shuffled).items():
        assert not in_start_order(blocks), cut
        _assert_same(_results(blocks, windows, memcpys, memsets, runtime, nccl_ids), expected)


P = 1 << 24  # a globalPid


def test_launch_waits_carry_a_graph_call_across_a_cut():
    """Hand-made frames (not a trace), exact values: a graph launch (correlationId 4, call 600-10,000 ns) whose
    three kernels all end inside it, the third one in the next block: their 100 ns each count, the call's wait
    once (10,000 - 700, with its first kernel, in that kernel's window), the later block's kernel waits nothing.
    Call 5 (100-150) ends before the first block's last start: its kernels (110-140, 120-130) count 40 ns, its
    wait once from its first kernel (150 - 110) and it is not carried. Out of start order (the kernel 110-140 in a
    later block, after its call was done with), the first kernel by start still carries the wait."""
    kernels = pd.DataFrame({"globalPid": P, "deviceId": 0, "correlationId": np.array([5, 5, 4, 4, 4], dtype=np.int32),
                            "start": [110, 120, 700, 900, 1_200], "end": [140, 130, 800, 1_000, 1_300]})
    runtime = pd.DataFrame({"globalTid": P + 5, "correlationId": np.array([4, 5], dtype=np.int32),
                            "start": [600, 100], "end": [10_000, 150]})
    windows = pd.DataFrame({"globalPid": P, "deviceId": 0, "window_start": [0, 650, 1_100],
                            "window_end": [650, 1_100, 2_000]}, index=[7, 8, 9])
    expected = pd.DataFrame({"launch_blocked_kernel_ns": [40, 200, 100], "launch_wait_ns": [40, 9_300, 0]},
                            index=[7, 8, 9])
    for blocks in ([kernels], [kernels.iloc[:4], kernels.iloc[4:]], frame_blocks(kernels, 1),
                   [kernels.iloc[1:], kernels.iloc[:1]], [kernels.iloc[[3, 4]], kernels.iloc[:3]]):
        pd.testing.assert_frame_equal(M.launch_waits(windows, blocks, [runtime]), expected)
    # a kept kernel that ends before it starts (no trace has one: 1,200-150 of call 5, after call 5 was done with)
    # breaks the order too: call 5 still waits once
    odd = kernels.iloc[[0, 2, 4]].assign(end=[140, 800, 150], correlationId=np.array([5, 4, 5], dtype=np.int32))
    expected = pd.DataFrame({"launch_blocked_kernel_ns": [30, 100, -1_050], "launch_wait_ns": [40, 9_300, 0]},
                            index=[7, 8, 9])
    for blocks in ([odd], frame_blocks(odd, 1), [odd.iloc[:2], odd.iloc[2:]]):
        pd.testing.assert_frame_equal(M.launch_waits(windows, blocks, [runtime]), expected)


def test_busy_coverage_merges_an_interval_across_a_cut():
    """Hand-made frames (not a trace), exact values: device 0's kernels 0-10 and 5-20 in the first block and
    15-30 in the second make one interval 0-30 whatever the cut; a copy touching the kernel 40-50 joins it (40-55);
    device 1 has a memset only."""
    kernels = pd.DataFrame({"globalPid": P, "deviceId": 0, "start": [0, 5, 15, 40], "end": [10, 20, 30, 50]})
    memcpys = pd.DataFrame({"globalPid": [P], "deviceId": [0], "start": [50], "end": [55]})
    memsets = pd.DataFrame({"globalPid": [P, P], "deviceId": [0, 1], "start": [60, 3], "end": [61, 4]})
    for blocks in ([kernels], [kernels.iloc[:2], kernels.iloc[2:]], frame_blocks(kernels, 1),
                   [kernels.iloc[[2, 3]], kernels.iloc[:2]]):
        busy = M.busy_coverage(blocks, memcpys, memsets)
        assert list(busy) == [(P, 0), (P, 1)]
        assert (busy[(P, 0)].starts.tolist(), busy[(P, 0)].ends.tolist()) == ([0, 40, 60], [30, 55, 61])
        assert (busy[(P, 1)].starts.tolist(), busy[(P, 1)].ends.tolist()) == ([3], [4])


def test_stream_consumers_see_streams_of_earlier_blocks():
    """Hand-made frames (not a trace), exact values, one kernel a block: stream 7's compute kernel (block 0) makes
    its NCCL kernels of later blocks (6 ns) shared, stream 9 runs NCCL only (2 ns); an HtoD copy on stream 7
    is on a kernel stream, one on stream 8 is not."""
    kernels = pd.DataFrame({"globalPid": [P] * 4, "deviceId": [0] * 4, "streamId": [7, 7, 7, 9], "nameId": [1, 2, 2, 2],
                            "start": [0, 10, 30, 40], "end": [10, 14, 32, 42]})
    memcpys = pd.DataFrame({"globalPid": P, "deviceId": 0, "streamId": [7, 8], "copyKind": COPY_HTOD})
    for blocks in ([kernels], frame_blocks(kernels, 1), [kernels.iloc[[3, 2]], kernels.iloc[[1, 0]]]):
        nccl = M.nccl_on_compute_streams(blocks, [2])
        assert nccl.to_dict("records") == [{"globalPid": P, "deviceId": 0, "nccl_on_compute_stream_fraction": 6 / 8,
                                            "nccl_compute_stream": 7}]
        htod = M.htod_on_kernel_streams(blocks, memcpys)
        assert htod["htod_on_kernel_streams_fraction"].tolist() == [0.5]
