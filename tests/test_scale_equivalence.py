"""The fast path gives exactly the straightforward path's results (issue 5).

The fast path reads columns as group_concat text in rowid chunks on two reader threads, loads
only the columns and runtime calls it uses (API names filtered in SQL, plus a correlationId
fallback), never concatenates the activity tables, and builds overlaps by intersection instead of
unions. Here it is checked against: row-tuple fetches of every column and every runtime call;
tiny chunks; and deliberately simple reference computations (elementary time segments for the
GPU metrics, a pandas merge for the step projection, per-ns masks for the interval algebra).
"""
import importlib.util
import shutil
import sqlite3
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings

import nsysanalyze
from conftest import FIXTURES, ROOT, SHARED_TRACES, default_report, per_file_fixtures, shared_trace
from test_intervals import covered, intervals, mask, windows
from nsysanalyze import metrics as M
from nsysanalyze import steps as S
from nsysanalyze.analysis import Analysis
from nsysanalyze.intervals import Coverage, count_in_windows, group_indices, intersection_within, union
from nsysanalyze.trace import tables
from nsysanalyze.trace.tables import pid_of
from nsysanalyze.render.contract import report as contract_report

REAL = ["h200/resnet18-baseline-nvtx.sqlite", "h200/resnet18-baseline-cudaonly.sqlite",
        "public/sc23-openmp-tutorial__report3.sqlite", "public/pipit__perlmutter-cloverleaf-cuda.sqlite",
        "public/nsightful__power_iteration__baseline.sqlite", "public/nsys-ai__mfu_2gpu_after.sqlite"]


def _make_large():
    spec = importlib.util.spec_from_file_location("make_large", ROOT / "bench" / "make_large.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Straightforward(Analysis):
    """Analysis fed the plain way: every column as int64, every runtime call, no name filter."""

    @cached_property
    def _kernels(self) -> pd.DataFrame:
        return self.trace.kernels

    @cached_property
    def _memcpys(self) -> pd.DataFrame:
        return self.trace.memcpys

    @cached_property
    def _memsets(self) -> pd.DataFrame:
        return self.trace.memsets

    @cached_property
    def _runtime_calls(self) -> pd.DataFrame:
        return self.trace.runtime  # every call: classify_runtime and the projection pick what they need


def straightforward(path, monkeypatch, **kw) -> dict:
    with monkeypatch.context() as m:
        m.setattr(tables, "COLUMNAR", False)
        with Straightforward(path, **kw) as a:
            return contract_report(a)


def fast(path, **kw) -> dict:
    with nsysanalyze.open(path, **kw) as a:
        return contract_report(a)


def _repeat(factory, rel: str, copies: int) -> Path:
    """``rel`` repeated ``copies`` times by bench/make_large.py (its GPU activities x copies)."""
    src = shared_trace(rel)
    with sqlite3.connect(src.resolve().as_uri() + "?mode=ro&immutable=1", uri=True) as conn:
        per_copy = sum(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in (tables.KERNEL, tables.MEMCPY, tables.MEMSET))
    out = factory.mktemp("large") / f"{src.stem}-x{copies}.sqlite"
    _make_large().build(src, out, copies * per_copy, log=lambda *_: None)
    return out


@pytest.fixture(scope="module")
def repeated(tmp_path_factory) -> Path:
    """A real-derived export: the ResNet-18 NVTX trace x4 (12 steps)."""
    return _repeat(tmp_path_factory, "h200/resnet18-baseline-nvtx.sqlite", 4)


@pytest.fixture(scope="module")
def repeated_two_processes(tmp_path_factory) -> Path:
    """The 2-process torchrun trace x3."""
    return _repeat(tmp_path_factory, "public/nsys-ai__mfu_2gpu_after.sqlite", 3)


def all_real() -> list[str]:
    return REAL + [str(p.relative_to(SHARED_TRACES)) for p in sorted(SHARED_TRACES.glob("*/*.sqlite"))
                   if str(p.relative_to(SHARED_TRACES)) not in REAL] if SHARED_TRACES.exists() else REAL


@pytest.mark.parametrize("rel", all_real())
def test_fast_path_equals_straightforward_path(rel, monkeypatch):
    path = shared_trace(rel)
    assert default_report(path) == straightforward(path, monkeypatch)


@pytest.mark.parametrize("name", [p.name for p in per_file_fixtures()] or ["(no fixture yet)"])
def test_fast_path_equals_straightforward_path_on_fixtures(name, monkeypatch):
    path = FIXTURES / name
    if not path.exists():
        pytest.skip("no fixture in fixtures/ yet")
    assert default_report(path) == straightforward(path, monkeypatch)


def test_repeated_trace_fast_equals_straightforward(repeated, monkeypatch):
    d = fast(repeated)
    assert len({s["step"] for s in d["steps"]}) == 12
    assert d == straightforward(repeated, monkeypatch)


def test_two_process_repeated_trace_with_a_step_regex(repeated_two_processes, monkeypatch):
    d = fast(repeated_two_processes, step_range="^ncclGroupEnd$")
    assert {s["globalPid"] for s in d["steps"]} == {dv["globalPid"] for dv in d["summary"]["devices"]}
    assert d == straightforward(repeated_two_processes, monkeypatch, step_range="^ncclGroupEnd$")
    assert fast(repeated_two_processes) == straightforward(repeated_two_processes, monkeypatch)


def test_tiny_chunks_and_one_reader_change_nothing(repeated, monkeypatch):
    expected = fast(repeated)
    with monkeypatch.context() as m:
        m.setattr(tables, "CHUNK_ROWS", 7)
        m.setattr(tables, "CHUNK_PAGES_BYTES", 1)  # one leaf page per chunk
        assert fast(repeated) == expected
        m.setattr(tables, "PAGES", False)
        assert fast(repeated) == expected
        m.setattr(tables, "WORKERS", 1)
        assert fast(repeated) == expected


def test_row_blocks_on_threads_change_nothing(repeated, repeated_two_processes, monkeypatch):
    """Blocks of a few hundred rows, two at a time on threads (threads.in_blocks: the step projection, the idle
    tests of host intervals, coverage queries and per-window sums), give the report of one block each."""
    from nsysanalyze import attribution as A
    from nsysanalyze import intervals as I
    from nsysanalyze import threads
    for path in (repeated, repeated_two_processes):
        expected = fast(path)
        with monkeypatch.context() as m:
            for module in (I, A):  # metrics and steps take their blocks from intervals.row_blocks
                m.setattr(module, "BLOCK", 512)
            m.setattr(I, "QUERY_BLOCK", 256)
            m.setattr(threads, "THREADS", 2)
            blocks = []
            m.setattr(threads, "ordered_map", lambda fn, items, n=None, seen=threads.ordered_map: (
                blocks.append((len(items), n)), seen(fn, items, n))[1])
            assert fast(path) == expected
        assert any(n >= 8 and on == 2 for n, on in blocks)  # several blocks did run on two threads


def test_in_blocks_spreads_only_the_main_threads_blocks(monkeypatch):
    """threads.in_blocks: blocks asked for on the main thread run on the pool's threads, in order; blocks asked
    for on a worker thread run in that worker (no pool inside a pool)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from nsysanalyze import threads
    monkeypatch.setattr(threads, "THREADS", 2)

    def run() -> tuple[list, set, int]:
        ran = set()
        out = list(threads.in_blocks(lambda b: (ran.add(threading.get_ident()), b * b)[1], range(6)))
        return out, ran, threading.get_ident()
    out, ran, caller = run()
    assert out == [0, 1, 4, 9, 16, 25] and caller not in ran
    with ThreadPoolExecutor(1) as pool:
        out, ran, caller = pool.submit(run).result()
    assert out == [0, 1, 4, 9, 16, 25] and ran == {caller}


def test_launching_calls_with_unexpected_api_names_are_still_found(tmp_path, monkeypatch):
    """Memsets launched by an API the name filter does not know reach their steps through the
    correlationId fallback, exactly as when every runtime call is loaded."""
    path = tmp_path / "renamed.sqlite"
    shutil.copyfile(shared_trace("h200/resnet18-baseline-nvtx.sqlite"), path)
    with sqlite3.connect(path) as conn:
        n = conn.execute("UPDATE StringIds SET value = 'cudaFancyFill_v1' WHERE value LIKE 'cudaMemsetAsync%'").rowcount
    assert n == 1
    with Analysis(path) as a:
        contract_report(a)
        rt = a.trace.runtime
    with Analysis(path) as a:
        a._step_windows
        fetched = a._fetched_calls
        assert len(fetched) == 1 and len(fetched[0]) == 81  # the renamed memset calls, fetched by correlationId
        assert set(fetched[0]["nameId"]) <= set(rt["nameId"])
    assert fast(path) == straightforward(path, monkeypatch)


# ---------------------------------------------------------------- deliberately simple references
def reference_projection(steps: pd.DataFrame, runtime: pd.DataFrame, activities: pd.DataFrame) -> pd.DataFrame:
    """gpu_start/gpu_end per (step row, device) by a plain merge: a call inside a step's CPU range, on any
    thread of the step's process -> the activities with its correlationId in that process."""
    calls = runtime.assign(globalPid=pid_of(runtime["globalTid"]))
    calls = calls.merge(steps.reset_index().rename(columns={"index": "step_row", "globalTid": "stepTid"}),
                        on="globalPid")
    calls = calls[(calls["start"] >= calls["cpu_start"]) & (calls["start"] <= calls["cpu_end"])]
    calls = calls.drop_duplicates(["globalPid", "correlationId"])
    work = activities.merge(calls[["globalPid", "correlationId", "step_row"]], on=["globalPid", "correlationId"])
    return work.groupby(["step_row", "deviceId"]).agg(gpu_start=("start", "min"), gpu_end=("end", "max")).reset_index()


def reference_gpu_metrics(windows: pd.DataFrame, k: pd.DataFrame, m: pd.DataFrame, s: pd.DataFrame,
                          nccl_ids) -> pd.DataFrame:
    """Interval metrics by elementary segments: cut time at every boundary, mark which kinds of work
    cover each piece, add up the pieces inside each window."""
    rows = []
    for _, w in windows.iterrows():
        key = lambda f: f[(f["globalPid"] == w["globalPid"]) & (f["deviceId"] == w["deviceId"])]  # noqa: E731
        kk, mm, ss = key(k), key(m), key(s)
        nccl = kk["nameId"].isin(nccl_ids).to_numpy()
        kinds = {"X": kk[~nccl], "N": kk[nccl], "M": mm, "S": ss, "H": mm[mm["copyKind"] == 1]}
        cuts = np.unique(np.concatenate([np.concatenate([f["start"], f["end"]]) for f in kinds.values()]
                                        + [[w["window_start"], w["window_end"]]]).astype(np.int64))
        lo, hi = cuts[:-1], cuts[1:]
        inside = (lo >= w["window_start"]) & (hi <= w["window_end"])
        on = {name: np.zeros(lo.size, dtype=bool) for name in kinds}
        for name, f in kinds.items():
            for a, b in zip(f["start"], f["end"]):
                on[name] |= (lo >= a) & (hi <= b)
        length = lambda mask: int(((hi - lo) * (mask & inside)).sum())  # noqa: E731
        X, N, C, H, MM, SS = on["X"], on["N"], on["M"] | on["S"], on["H"], on["M"], on["S"]
        K = X | N
        rows.append({"busy_ns": length(K | C), "kernel_ns": length(K), "memcpy_ns": length(MM), "memset_ns": length(SS),
                     "memcpy_hidden_ns": length(MM & K), "htod_ns": length(H), "htod_hidden_ns": length(H & K),
                     "nccl_ns": length(N), "nccl_exposed_ns": length(N & ~X),
                     "time_compute_only_ns": length(X & ~N & ~C), "time_copy_hidden_ns": length(C & K),
                     "time_copy_exposed_ns": length(C & ~K), "time_nccl_overlapped_ns": length(X & N & ~C),
                     "time_nccl_exposed_ns": length(N & ~X & ~C)})
    return pd.DataFrame(rows, index=windows.index)


@pytest.mark.parametrize("rel", ["h200/resnet18-baseline-nvtx.sqlite", "public/nsys-ai__mfu_2gpu_after.sqlite",
                                 "public/nsightful__power_iteration__baseline.sqlite"])
def test_gpu_metrics_match_elementary_segments(rel):
    with Analysis(shared_trace(rel), step_range="^ncclGroupEnd$" if "mfu" in rel else None) as a:
        contract_report(a)
        t = a.trace
        windows = pd.concat([a._step_windows, a._capture_windows], ignore_index=True)
        windows = windows[["globalPid", "deviceId", "window_start", "window_end"]].astype(np.int64)
        got = M.gpu_metrics(windows, [t.kernels], t.memcpys, t.memsets, t.nccl_kernel_name_ids)
        want = reference_gpu_metrics(windows, t.kernels, t.memcpys, t.memsets, t.nccl_kernel_name_ids)
    pd.testing.assert_frame_equal(got[want.columns].astype(np.int64), want.astype(np.int64))


@pytest.mark.parametrize("rel,step_range", [("h200/resnet18-baseline-nvtx.sqlite", None),
                                            ("public/nsightful__power_iteration__baseline.sqlite", None),
                                            ("public/nsys-ai__mfu_2gpu_after.sqlite", "^ncclGroupEnd$")])
def test_projection_matches_a_plain_merge(rel, step_range):
    with Analysis(shared_trace(rel), step_range=step_range) as a:
        t = a.trace
        steps = a._step_ranges[0]
        cols = ["start", "end", "deviceId", "correlationId", "globalPid"]
        acts = pd.concat([f[cols] for f in (t.kernels, t.memcpys, t.memsets)], ignore_index=True)
        got = S.project_steps(steps, t.runtime, [t.kernels, t.memcpys, t.memsets])
        want = reference_projection(steps, t.runtime, acts)
    assert len(got) == len(want) > 0
    got = got.merge(steps.reset_index().rename(columns={"index": "step_row"})[["step_row", "globalTid", "cpu_start"]],
                    on=["globalTid", "cpu_start"])
    merged = got.merge(want, on=["step_row", "deviceId"], suffixes=("", "_ref"))
    assert len(merged) == len(want)
    assert (merged["gpu_start"] == merged["gpu_start_ref"]).all() and (merged["gpu_end"] == merged["gpu_end_ref"]).all()


# ---------------------------------------------------------------- interval helpers vs per-ns masks
@settings(max_examples=200, deadline=None)
@given(intervals, intervals, windows)
def test_intersection_within_matches_masks(x, y, win):
    mx, lo = mask(*x)
    my, _ = mask(*y)
    got = intersection_within(Coverage(*x), Coverage(*y), *win)
    assert (got == covered(mx & my, lo, *win)).all()
    assert (got == intersection_within(Coverage(*y), Coverage(*x), *win)).all()


@settings(max_examples=100, deadline=None)
@given(intervals, windows)
def test_union_sorted_input_and_counts(iv, win):
    order = np.argsort(iv[0], kind="stable")
    a, b = union(*iv), union(iv[0][order], iv[1][order])
    assert (a[0] == b[0]).all() and (a[1] == b[1]).all()
    starts = iv[0]
    assert (count_in_windows(starts, *win) == [((starts >= x) & (starts < y)).sum() for x, y in zip(*win)]).all()


def test_group_indices():
    p = np.array([5, 3, 5, 3, 5])
    d = np.array([0, 1, 0, 0, 0])
    got = {k: list(v) for k, v in group_indices(p, d)}
    assert got == {(3, 0): [3], (3, 1): [1], (5, 0): [0, 2, 4]}
    assert group_indices(np.array([7, 7]), np.array([1, 1])) == [((7, 1), None)]
    assert group_indices(np.array([], dtype=np.int64)) == []
