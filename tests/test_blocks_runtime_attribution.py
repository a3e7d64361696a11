"""The attribution's consumers of the classified CUDA runtime calls take them as blocks (nsysanalyze.blocks):
first_launch_times, sync_ends and host_sources give over any cut the result of the one frame of their rows,
in at most two walks over the blocks."""
from collections.abc import Sequence
from functools import cache

import numpy as np
import pandas as pd
import pytest

import nsysanalyze
from nsysanalyze import attribution as A
from nsysanalyze import metrics as M
from nsysanalyze.blocks import frame_blocks
from conftest import fixture_trace, shared_trace

# OSRT captures whose autograd threads launch the backward beside the main thread (helper gaps on each; one a
# torch.compile warm-up), and other projects' exports without OSRT: two processes on two GPUs (one launching thread
# each, its launches out of start order by rowid), four launching threads in one process (helper gaps)
REAL = [("fixtures", "resnet18_baseline.sqlite"), ("fixtures", "vit_l32_ddp.sqlite"),
        ("fixtures", "compile_warmup.sqlite"), ("shared", "public/nsys-ai__mfu_2gpu_after.sqlite"),
        ("shared", "public/casio__nerf_output-file.sqlite")]
WITH_HELPER_GAPS = {"resnet18_baseline.sqlite", "vit_l32_ddp.sqlite", "compile_warmup.sqlite",
                    "public/casio__nerf_output-file.sqlite"}
# each launching thread's launches go back in time once by rowid (their rows out of start order: gathered)
LAUNCHES_OUT_OF_ORDER = {"public/nsys-ai__mfu_2gpu_after.sqlite"}
ONE_ROW_BLOCKS_UP_TO = 1000  # runtime calls: blocks of one row beyond that take too long


@cache
def _inputs(where: str, name: str) -> dict:
    """What the analysis passes (Analysis._window_metric_columns): the step windows, the classified runtime calls
    and host_sources' other arguments, the GPU idle per process made from the kernels, copies and memsets (read
    once per export; not changed by the tests)."""
    with nsysanalyze.open(fixture_trace(name) if where == "fixtures" else shared_trace(name)) as a:
        steps, capture = a._step_windows, a._capture_windows
        idle = A.idle_by_device([steps, capture], M.busy_coverage([a._kernels], a._memcpys, a._memsets))
        runtime = M.classify_runtime(a._runtime_calls.drop(columns="correlationId"), a._api_names)
        return {"steps": steps, "runtime": runtime, "api_names": a._api_names, "nvtx": a.trace.nvtx,
                "step_ranges": a._step_ranges[0], "devices": A.idle_by_process(capture, idle), "mpi": a.trace.mpi}


def _results(runtime, x: dict) -> tuple:
    """first_launch_times, sync_ends and host_sources of ``runtime`` (a frame or blocks), host_sources as if OS calls
    were captured (so that the launch gaps of other threads are made on every export)."""
    sources = A.host_sources(runtime, x["api_names"], x["nvtx"], x["step_ranges"], x["devices"], x["mpi"],
                             os_calls_captured=True)
    return A.first_launch_times(x["steps"], runtime), A.sync_ends(runtime), sources


def _assert_same(got: tuple, expected: tuple) -> None:
    """Equal values, dtypes, row order and index; every HostSources field, its OS-call tests on the same arrays."""
    (first, syncs, sources), (first_0, syncs_0, sources_0) = got, expected
    np.testing.assert_array_equal(first, first_0)
    assert first.dtype == first_0.dtype
    pd.testing.assert_frame_equal(syncs, syncs_0)
    assert len(sources.parts) == len(sources_0.parts)
    for part, part_0 in zip(sources.parts, sources_0.parts):
        pd.testing.assert_frame_equal(part, part_0)
    pd.testing.assert_frame_equal(sources.helper, sources_0.helper)
    np.testing.assert_array_equal(sources.cause_threads, sources_0.cause_threads)
    assert sources.cause_threads.dtype == sources_0.cause_threads.dtype
    assert list(sources.primary.items()) == list(sources_0.primary.items())
    assert sources.launch_tids == sources_0.launch_tids
    pd.testing.assert_frame_equal(sources.runtime, sources_0.runtime)
    calls = {c: sources_0.runtime[c].to_numpy() for c in ("start", "end", "globalTid")}
    calls["end"] = calls["end"] + 1_000  # calls a little longer than the runtime's: some reach into idle
    assert (sources.keep is None) == (sources_0.keep is None)
    if sources.keep is not None:
        np.testing.assert_array_equal(sources.keep(calls), sources_0.keep(calls))
    np.testing.assert_array_equal(sources.keep_time(calls["start"], calls["end"]),
                                  sources_0.keep_time(calls["start"], calls["end"]))


def _cuts(runtime: pd.DataFrame) -> dict[str, list[pd.DataFrame]]:
    """Blocks of 97 rows, of one row (or 13 on larger exports), three unequal blocks, and those with an empty
    block before them and one in the middle."""
    n = len(runtime)
    three = [runtime.iloc[:n // 3], runtime.iloc[n // 3:n // 3 + 7], runtime.iloc[n // 3 + 7:]]
    return {"97": frame_blocks(runtime, 97), "1": frame_blocks(runtime, 1 if n <= ONE_ROW_BLOCKS_UP_TO else 13),
            "3": three, "empty": [runtime.iloc[:0], three[0], runtime.iloc[:0], *three[1:]]}


@pytest.mark.parametrize("where,name", REAL, ids=[r[1] for r in REAL])
def test_blocks_equal_one_frame_on_real_exports(where, name):
    """Each consumer over the cuts gives exactly its result over the runtime calls as one frame (values, dtypes,
    row order, index), the blocks in the exports' order; the exports with helper gaps have some, and the launches
    are found out of start order across blocks only where they are."""
    x = _inputs(where, name)
    expected = _results(x["runtime"], x)
    assert (len(expected[2].helper) > 0) == (name in WITH_HELPER_GAPS)
    _assert_same(_results([x["runtime"]], x), expected)
    for blocks in _cuts(x["runtime"]).values():
        _assert_same(_results(blocks, x), expected)
    unordered = A._calls_during_idle(_cuts(x["runtime"])["97"], x["devices"])[3]
    assert unordered == (expected[2].launch_tids if name in LAUNCHES_OUT_OF_ORDER else set())


@pytest.mark.parametrize("where,name", REAL, ids=[r[1] for r in REAL])
def test_blocks_out_of_start_order_equal_one_frame(where, name):
    """The same with the rows shuffled (each launching thread's launches out of start order across the cuts: they
    are gathered), then with only one other launching thread's rows reversed (it is gathered, the rest carried)."""
    x = _inputs(where, name)
    runtime = x["runtime"]
    shuffled = runtime.iloc[np.random.default_rng(0).permutation(len(runtime))]
    expected = _results(shuffled, x)
    for blocks in _cuts(shuffled).values():
        _assert_same(_results(blocks, x), expected)
    sources = expected[2]
    assert A._calls_during_idle(_cuts(shuffled)["97"], x["devices"])[3] == sources.launch_tids
    others = sorted(sources.launch_tids - set(sources.primary.values()))
    if not others:
        return
    order, tid = np.arange(len(runtime)), runtime["globalTid"].to_numpy()
    mine = np.flatnonzero(tid == others[0])
    order[mine] = mine[::-1]
    reversed_ = runtime.iloc[order]
    blocks = _cuts(reversed_)["97"]
    assert A._calls_during_idle(blocks, x["devices"])[3] == {others[0]}
    _assert_same(_results(blocks, x), _results(reversed_, x))


class _Walked(Sequence):
    """Blocks that count their walks (the reads of their first block)."""

    def __init__(self, blocks: list[pd.DataFrame]):
        self.blocks, self.walks = blocks, 0

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, i: int) -> pd.DataFrame:
        self.walks += i == 0
        return self.blocks[i]


def test_walks_per_function():
    """first_launch_times and sync_ends walk the blocks once; host_sources twice where a process has another
    launching thread (its launch gaps), else once."""
    x = _inputs(*REAL[0])
    args = (x["api_names"], x["nvtx"], x["step_ranges"], x["devices"], x["mpi"])
    for call, walks in ((lambda b: A.first_launch_times(x["steps"], b), 1), (A.sync_ends, 1),
                        (lambda b: A.host_sources(b, *args), 2),
                        (lambda b: A.host_sources(b, *args, os_calls_captured=False), 1)):
        blocks = _Walked(frame_blocks(x["runtime"], 97))
        call(blocks)
        assert blocks.walks == walks


P = 1 << 24  # a globalPid
MAIN, HELPER = P + 1, P + 2
NAMES = {1: "cudaLaunchKernel_v7000", 2: "cudaStreamSynchronize_v3020"}


def _calls(rows: list[tuple[int, int, int, int]]) -> pd.DataFrame:
    """Classified runtime calls of (start, end, globalTid, nameId) rows."""
    frame = pd.DataFrame(rows, columns=["start", "end", "globalTid", "nameId"])
    return M.classify_runtime(frame, NAMES)


def test_a_helper_gap_spans_a_cut_and_an_empty_block():
    """Hand-made frames (not a trace), exact values: the helper thread launches at 100-110 and 150-160 ns, its gap
    110-150 made across the cut (an empty block between), in start order or not; the main thread (most launches)
    has none; a sync returns at 400 ns; the step's first launch is the helper's (the main thread's is later)."""
    runtime = _calls([(100, 110, HELPER, 1), (120, 130, MAIN, 1), (200, 210, MAIN, 1), (300, 400, MAIN, 2),
                      (150, 160, HELPER, 1), (500, 510, MAIN, 1)])
    steps = pd.DataFrame({"globalPid": [P], "cpu_start": [90], "cpu_end": [1_000]})
    empty = pd.DataFrame({"start": [], "end": [], "globalTid": [], "name": []})
    no_steps = pd.DataFrame({"globalPid": [], "globalTid": [], "cpu_start": [], "cpu_end": []})
    devices = {P: [(np.array([0]), np.array([1_000]))]}
    for blocks in ([runtime.iloc[:2], runtime.iloc[:0], runtime.iloc[2:]], frame_blocks(runtime, 1),
                   [runtime.iloc[4:], runtime.iloc[:4]]):
        sources = A.host_sources(blocks, NAMES, empty, no_steps, devices)
        assert sources.primary == {P: MAIN}
        assert sources.helper[["start", "end", "globalPid"]].to_dict("list") == {"start": [110], "end": [150],
                                                                                  "globalPid": [P]}
        assert A.sync_ends(blocks).to_dict("list") == {"globalPid": [P], "end": [400]}
        assert A.first_launch_times(steps, blocks).tolist() == [100]


def test_equal_launch_counts_make_the_first_appearing_thread_primary():
    """Hand-made frames, exact values: two threads of one process launch twice each; the one whose first launch
    comes first in the rows is the primary thread whatever the cut (the counts of earlier blocks come first)."""
    runtime = _calls([(100, 110, HELPER, 1), (120, 130, MAIN, 1), (140, 150, HELPER, 1), (160, 170, MAIN, 1)])
    empty = pd.DataFrame({"start": [], "end": [], "globalTid": [], "name": []})
    no_steps = pd.DataFrame({"globalPid": [], "globalTid": [], "cpu_start": [], "cpu_end": []})
    devices = {P: [(np.array([0]), np.array([1_000]))]}
    for blocks in ([runtime], [runtime.iloc[:1], runtime.iloc[1:]], frame_blocks(runtime, 1)):
        assert A.host_sources(blocks, NAMES, empty, no_steps, devices).primary == {P: HELPER}
