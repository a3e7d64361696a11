"""The runtime-call consumers of metrics that take the CUDA runtime calls as blocks (nsysanalyze.blocks): cpu_metrics,
median_launch_ns, launch_waits give over any cut of the calls the result over one block."""
import numpy as np
import pandas as pd
import pytest

import nsysanalyze
from nsysanalyze import blocks as B
from nsysanalyze import metrics as M
from nsysanalyze.analysis import Analysis
from nsysanalyze.blocks import frame_blocks
from nsysanalyze.trace.tables import pid_of
from conftest import fixture_trace, shared_trace
from tiny import gpid

# one GPU, a rank of a 2-GPU DDP job, launches made blocking (launch waits), CUDA graphs made blocking, a gloo rank,
# other projects' exports: two processes with their correlationIds out of order, many streams (26,680 calls)
REAL = [("fixtures", "vit_l32_ddp.sqlite"), ("fixtures", "vit_l32_2gpu_ddp_0.sqlite"),
        ("fixtures", "launch_blocking.sqlite"), ("fixtures", "tinyops_graphs_blocking.sqlite"),
        ("fixtures", "gloo_8rank_slow_2.sqlite"), ("shared", "public/nsys-ai__mfu_2gpu_after.sqlite"),
        ("shared", "public/abacus__resnet101_streams_report1.sqlite")]
SHUFFLED = REAL[:3] + REAL[5:6]  # the shuffled calls' cuts: those with 2,000 to 7,000 calls
ONE_ROW_BLOCKS_UP_TO = 2000  # calls: blocks of one row beyond that take too long


def _frames(where, name):
    """What the analysis passes (Analysis._window_metric_columns): windows (steps, then captures, each for every
    thread of its process; then the captures again for their process's busiest thread alone), the kernels, the runtime
    calls (start, end, globalTid, correlationId, nameId), them classified without correlationId, the API names."""
    with nsysanalyze.open(fixture_trace(name) if where == "fixtures" else shared_trace(name)) as a:
        capture = a._capture_windows
        capture = capture.assign(globalTid=-1, cpu_start=capture["window_start"], cpu_end=capture["window_end"])
        runtime = a._runtime_calls
        tids = runtime["globalTid"]
        busiest = tids.groupby(pid_of(tids.to_numpy())).agg(lambda t: t.value_counts().idxmax())
        on_thread = capture.assign(globalTid=busiest.reindex(capture["globalPid"]).to_numpy())
        parts = [w[Analysis.WINDOW_KEYS].assign(globalTid=-1) for w in (a._step_windows, capture) if len(w)]
        windows = pd.concat(parts + [on_thread[Analysis.WINDOW_KEYS].dropna()], ignore_index=True).astype(np.int64)
        classified = M.classify_runtime(runtime.drop(columns="correlationId"), a._api_names)
        return windows, a._kernels, runtime, classified, a._api_names


def _results(windows, kernels, runtime_blocks, classified_blocks, names):
    return (M.cpu_metrics(windows, classified_blocks), M.median_launch_ns(runtime_blocks, names),
            M.launch_waits(windows, [kernels], runtime_blocks))


def _assert_same(got, expected):
    cpu, medians, waits = got
    pd.testing.assert_frame_equal(cpu, expected[0])
    assert medians == expected[1]
    assert all(type(v) is float for v in medians.values())
    pd.testing.assert_frame_equal(waits, expected[2])


def _cuts(frame):
    """The same cuts of a frame's rows: blocks of 97 rows, of one row (13 on larger exports), three unequal blocks,
    and two halves with an empty block between them."""
    n = len(frame)
    return {"97": frame_blocks(frame, 97), "1": frame_blocks(frame, 1 if n <= ONE_ROW_BLOCKS_UP_TO else 13),
            "3": [frame.iloc[:n // 3], frame.iloc[n // 3:n // 3 + 7], frame.iloc[n // 3 + 7:]],
            "empty": [frame.iloc[:n // 2], frame.iloc[0:0], frame.iloc[n // 2:]]}


@pytest.mark.parametrize("where,name", REAL, ids=[r[1].split("/")[-1] for r in REAL])
def test_runtime_blocks_equal_one_block_on_real_exports(where, name):
    """Each consumer over cuts of the runtime calls gives exactly its result over the calls as one block (values,
    dtypes, index; the medians as the same floats)."""
    windows, kernels, runtime, classified, names = _frames(where, name)
    expected = _results(windows, kernels, [runtime], [classified], names)
    assert expected[1] and expected[0].drop(columns="cpu_ns").to_numpy().any()  # launches and calls in the windows
    for cut, runtime_blocks in _cuts(runtime).items():
        _assert_same(_results(windows, kernels, runtime_blocks, _cuts(classified)[cut], names), expected)


@pytest.mark.parametrize("where,name", SHUFFLED, ids=[r[1].split("/")[-1] for r in SHUFFLED])
def test_shuffled_runtime_blocks_equal_one_block(where, name):
    """The same with the calls' rows shuffled: the calls of a process out of start and correlationId order, their
    processes and threads interleaved."""
    windows, kernels, runtime, classified, names = _frames(where, name)
    order = np.random.default_rng(0).permutation(len(runtime))
    runtime, classified = runtime.iloc[order], classified.iloc[order]
    expected = _results(windows, kernels, [runtime], [classified], names)
    for cut in ("97", "3"):
        _assert_same(_results(windows, kernels, _cuts(runtime)[cut], _cuts(classified)[cut], names), expected)


class Walked(list):
    """Blocks that count their walks."""
    walks = 0

    def __iter__(self):
        self.walks += 1
        return super().__iter__()


def test_median_over_blocks_narrowing_walks(monkeypatch):
    """median_launch_ns over blocks with a budget of 64 values (blocks.ROWS): blocks.order_statistics narrows the
    process's range in counting walks (more than the walk for the extremes and the gathering one); the median is still
    the one-block float."""
    _, _, runtime, _, names = _frames("shared", "public/abacus__resnet101_streams_report1.sqlite")
    expected = M.median_launch_ns([runtime], names)
    monkeypatch.setattr(B, "ROWS", 64)
    blocks = Walked(frame_blocks(runtime, 997))
    assert M.median_launch_ns(blocks, names) == expected
    assert blocks.walks > 2


def test_no_calls_or_only_empty_blocks_equal_one_empty_block():
    """No block at all, or empty blocks only, give what one empty block gives: zero sums, no median."""
    windows, kernels, runtime, classified, names = _frames("fixtures", "gloo_8rank_slow_2.sqlite")
    expected = _results(windows, kernels, [runtime.iloc[:0]], [classified.iloc[:0]], names)
    assert expected[1] == {} and not expected[0].drop(columns="cpu_ns").to_numpy().any()
    for runtime_blocks, classified_blocks in (([], []), ([runtime.iloc[:0]] * 3, [classified.iloc[:0]] * 3)):
        _assert_same(_results(windows, kernels, runtime_blocks, classified_blocks, names), expected)


P, Q = gpid(100), gpid(200)


def test_median_launch_even_and_odd_counts_over_blocks():
    """Hand-made frames (not a trace), exact values: P's launches last 5, 1, 10, 2 ns (even count: the mean of the
    middle pair, (2 + 5) / 2), Q's 7, 2, 10 (odd: 7), both over two threads and split over blocks (one empty); a
    synchronization call of P (1,000 ns) is no launch."""
    names = {1: "cudaLaunchKernel", 2: "cudaDeviceSynchronize", 3: "cuLaunchKernel"}
    runtime = pd.DataFrame({"globalTid": [P + 1, Q + 1, P + 1, P + 2, P + 1, Q + 2, P + 2, Q + 1],
                            "nameId": np.array([1, 1, 2, 3, 1, 1, 1, 3], dtype=np.int32),
                            "start": [0, 10, 20, 30, 40, 50, 60, 70], "end": [5, 17, 1_020, 31, 50, 52, 62, 80]})
    expected = {P: 3.5, Q: 7.0}
    assert M.median_launch_ns([runtime], names) == expected
    for blocks in ([runtime.iloc[:3], runtime.iloc[0:0], runtime.iloc[3:]], frame_blocks(runtime, 1),
                   [runtime.iloc[:1], runtime.iloc[1:6], runtime.iloc[6:]]):
        got = M.median_launch_ns(blocks, names)
        assert got == expected and all(type(v) is float for v in got.values())


def test_launch_waits_duplicate_correlation_ids_resolve_in_row_order_over_blocks():
    """Hand-made frames (not a trace), exact values: two calls of process P (on two threads) share correlationId 4,
    the first in row order 100-1,000 ns, the later one 2,000-2,100 ns; its kernel (150-200) is matched with the first,
    as in one block: 50 ns blocked, a wait of 1,000 - 150. The calls come out of correlationId order (9 first), so
    they are sorted (stable) first; correlationId 9's kernel (300-400) ended after its call (250-350): nothing."""
    kernels = pd.DataFrame({"globalPid": P, "deviceId": 0, "correlationId": np.array([4, 9], dtype=np.int32),
                            "start": [150, 300], "end": [200, 400]})
    runtime = pd.DataFrame({"globalTid": [P + 1, P + 1, P + 2], "correlationId": np.array([9, 4, 4], dtype=np.int32),
                            "start": [250, 100, 2_000], "end": [350, 1_000, 2_100]})
    windows = pd.DataFrame({"globalPid": [P], "deviceId": [0], "window_start": [0], "window_end": [3_000]})
    expected = pd.DataFrame({"launch_blocked_kernel_ns": [50], "launch_wait_ns": [850]})
    for blocks in ([runtime], frame_blocks(runtime, 1), [runtime.iloc[:2], runtime.iloc[0:0], runtime.iloc[2:]]):
        pd.testing.assert_frame_equal(M.launch_waits(windows, [kernels], blocks), expected)


def test_calls_over_blocks_hold_no_view_of_a_block():
    """Hand-made frame (not a trace): over several blocks, launch_waits' calls of each process (correlationId, with
    its int32 dtype, start and end) are copies, also for a process whose calls lie in one block: a view would hold that
    block's other columns. Over one block of one process, they are its columns (no copy)."""
    runtime = pd.DataFrame({"globalTid": [P + 1, P + 1, Q + 1], "correlationId": np.array([1, 2, 3], dtype=np.int32),
                            "start": [0, 10, 20], "end": [5, 15, 25], "nameId": np.array([1, 1, 1], dtype=np.int32)})
    blocks = [runtime.iloc[:2], runtime.iloc[2:]]
    calls = M._calls_by_correlation(blocks)
    assert [c.tolist() for c in calls[P]] == [[1, 2], [0, 10], [5, 15]] and calls[P][0].dtype == np.int32
    for block in blocks:
        for kept in (*calls[P], *calls[Q]):
            assert not any(np.shares_memory(kept, block[c].to_numpy()) for c in block)
    one = M._calls_by_correlation(blocks[:1])[P]
    columns = ("correlationId", "start", "end")
    assert all(np.shares_memory(kept, blocks[0][c].to_numpy()) for kept, c in zip(one, columns))
