"""The attribution in time segments (issue 20, item 2): with the OS runtime calls read a block of rowids at a
time and each process's idle attributed up to a cut, the gaps and summary equal the one-pass attribution."""
import shutil
import sqlite3
import threading

import numpy as np
import pandas as pd
import pytest

import nsysanalyze
from nsysanalyze import attribution as A
from nsysanalyze import metrics as M
from nsysanalyze import segmented as SEG
from nsysanalyze import threads as T
from nsysanalyze.trace import Trace
from conftest import fixture_trace, shared_trace

REAL = [("fixtures", "compile_warmup.sqlite", 4000, 400), ("fixtures", "optimizer_unfused.sqlite", 2000, 100),
        ("fixtures", "vit_l32_ddp.sqlite", 1000, 100), ("fixtures", "gloo_8rank_slow_2.sqlite", 1000, 100),
        ("fixtures", "resnet18_baseline.sqlite", 500, 60), ("fixtures", "empty_cache_per_step.sqlite", 500, 60),
        ("shared", "public/bwyogatama__report1.sqlite", 300, 30),
        ("shared", "public/nsightful__power_iteration__baseline.sqlite", 100, 10)]


def _results(path, one_pass: bool = False):
    """The gaps, and the summary and step rows (their munmap metrics come from the same blocks); ``one_pass``:
    every OS call read and attributed at once (the path the timeline export keeps, segmented.attribute_in_one_pass)."""
    with nsysanalyze.open(path) as a:
        a.keep_attribution_inputs = one_pass
        return a.gaps(), pd.concat([a.summary(), a.steps()])


def _segmented(monkeypatch, path, block: int, segment: int):
    """The gaps and summary with blocks of ``block`` rowids and cuts every ``segment`` held calls, the number
    of segments attributed, and whether the attribution fell back to one pass."""
    monkeypatch.setattr(SEG, "OS_BLOCK_ROWS", block)
    monkeypatch.setattr(SEG, "OS_SEGMENT_ROWS", segment)
    seen = {"segments": 0, "one_pass": False}
    real_attribute, real_run = SEG._Segments.attribute, SEG._Segments.run

    def attribute(self, final):
        seen["segments"] += 1
        return real_attribute(self, final)

    def run(self, read, rowids, windows):
        try:
            return real_run(self, read, rowids, windows)
        except SEG._OnePass:
            seen["one_pass"] = True
            raise

    monkeypatch.setattr(SEG._Segments, "attribute", attribute)
    monkeypatch.setattr(SEG._Segments, "run", run)
    out = _results(path)
    monkeypatch.undo()
    return (*out, seen)


@pytest.mark.parametrize("where,name,block,segment", REAL, ids=[r[1] for r in REAL])
def test_segments_equal_one_pass_on_real_exports(monkeypatch, where, name, block, segment):
    """Real exports (a torch.compile capture with 336k OS calls, multi-threaded launches, DDP, gloo ranks, other
    projects' captures; power_iteration's OS calls are not in start order by rowid): read in the default
    blocks (one here) and cut into many segments, the attribution gives the one-pass gaps, summary and steps
    (munmap metrics included), without falling back to one pass."""
    path = fixture_trace(name) if where == "fixtures" else shared_trace(name)
    gaps, summary = _results(path, one_pass=True)
    for got, expected in zip(_results(path), (gaps, summary)):  # the default blocks: one for these exports
        pd.testing.assert_frame_equal(got, expected)
    seg_gaps, seg_summary, seen = _segmented(monkeypatch, path, block, segment)
    assert seen["segments"] >= 3 and not seen["one_pass"]
    pd.testing.assert_frame_equal(seg_gaps, gaps)
    pd.testing.assert_frame_equal(seg_summary, summary)
    assert (gaps["cause_kind"] == "os_runtime").any()


@pytest.mark.parametrize("threads", [1, 2, 8])
def test_reads_run_side_by_side_only_with_a_spare_thread(monkeypatch, threads):
    """On a real export (compile_warmup, its 336,219 OS calls in 85 blocks of 4,000 rowids): with threads.THREADS
    = 1 (what ``diagnose --jobs`` sets where each job has one core) no two table reads overlap and every block
    of OS calls is read on the analysing thread; with 2 or more, the next block (never more than one ahead:
    bounded memory) is read on another thread while this one is attributed. The result is the same."""
    path = fixture_trace("compile_warmup.sqlite")
    expected = _results(path, one_pass=True)
    lock, active, seen = threading.Lock(), {"all": 0, "os": 0}, {"most": 0, "os_most": 0, "os_threads": set()}

    def counted(read):
        def wrapper(self, *args, **kwargs):
            os_read = read is real_osrt
            with lock:
                active["all"] += 1
                active["os"] += os_read
                seen["most"], seen["os_most"] = max(seen["most"], active["all"]), max(seen["os_most"], active["os"])
                if os_read:
                    seen["os_threads"].add(threading.get_ident())
            try:
                return read(self, *args, **kwargs)
            finally:
                with lock:
                    active["all"] -= 1
                    active["os"] -= os_read
        return wrapper

    real_osrt = Trace.osrt_and_named
    for name in ("gpu_table", "runtime_named", "osrt_and_named"):
        monkeypatch.setattr(Trace, name, counted(getattr(Trace, name)))
    monkeypatch.setattr(T, "THREADS", threads)
    monkeypatch.setattr(SEG, "OS_BLOCK_ROWS", 4000)
    got = _results(path)
    for frame, want in zip(got, expected):
        pd.testing.assert_frame_equal(frame, want)
    if threads == 1:
        assert seen["most"] == 1 and seen["os_threads"] == {threading.get_ident()}
    else:  # the four tables are read side by side first (up to THREADS), then at most two OS blocks at a time
        assert seen["most"] <= min(threads, 4) and seen["os_most"] <= 2
        assert threading.get_ident() not in seen["os_threads"]


def test_calls_out_of_start_order_fall_back_to_one_pass(tmp_path, monkeypatch):
    """A copy of a real export (resnet18_baseline) whose OS runtime table is rewritten in reverse start order:
    the first block's cut lies after the next block's calls, so the attribution is made in one pass, and it
    equals the original's."""
    path = tmp_path / "reversed.sqlite"
    shutil.copy(fixture_trace("resnet18_baseline.sqlite"), path)
    with sqlite3.connect(path) as db:
        ddl = db.execute("SELECT sql FROM sqlite_master WHERE name = 'OSRT_API'").fetchone()[0]
        db.execute(ddl.replace("OSRT_API", "OSRT_API_reversed", 1))
        db.execute("INSERT INTO OSRT_API_reversed SELECT * FROM OSRT_API ORDER BY start DESC")
        db.execute("DROP TABLE OSRT_API")
        db.execute("ALTER TABLE OSRT_API_reversed RENAME TO OSRT_API")
    gaps, summary = _results(fixture_trace("resnet18_baseline.sqlite"), one_pass=True)
    seg_gaps, seg_summary, seen = _segmented(monkeypatch, path, 1000, 100)
    assert seen["one_pass"]
    pd.testing.assert_frame_equal(seg_gaps, gaps)
    pd.testing.assert_frame_equal(seg_summary, summary)


def test_a_process_found_waiting_late_falls_back_to_one_pass(monkeypatch):
    """On a real export (vit_l32_ddp, whose backward is launched from autograd threads): when the primary
    thread's OS waits are first seen after a segment was attributed without that process's launch gaps of
    other threads (the waits hidden from the first half of the blocks here), the attribution is made in one
    pass and equals the one-pass result; without the fallback those segments would lack the launch gaps."""
    path = fixture_trace("vit_l32_ddp.sqlite")
    gaps, summary = _results(path, one_pass=True)
    with nsysanalyze.open(path) as a:
        lo, hi = a.trace.osrt_rowids()
    hidden = (hi - lo) // 1000 // 2
    assert gaps["cause"].str.startswith("between launches on another thread").any()
    real = A.HostSources.waiting_processes
    calls = {"n": 0}

    def late(self, waiting):
        calls["n"] += 1
        return real(self, waiting) if calls["n"] > hidden else np.empty(0, np.int64)

    monkeypatch.setattr(A.HostSources, "waiting_processes", late)
    seg_gaps, seg_summary, seen = _segmented(monkeypatch, path, 1000, 100)
    assert seen["one_pass"] and calls["n"] > hidden + 1
    pd.testing.assert_frame_equal(seg_gaps, gaps)
    pd.testing.assert_frame_equal(seg_summary, summary)


def test_carried_picks_the_open_and_the_last_started():
    """Unit test on made-up intervals of one process (worked out by hand), cut at 50. Level 0 has none open
    and keeps its last started (g, 38-40), not a (0-45), d (20-45) or b (30-35); level 1 keeps the one open at
    the cut (c, 25-60), also its last started, not e (10-12); f starts at the cut, so it is not before it."""
    #                 a   b   c   d   e   f   g
    start = np.array([0, 30, 25, 20, 10, 50, 38])
    end = np.array([45, 35, 60, 45, 12, 70, 40])
    level = np.array([0, 0, 1, 0, 1, 0, 0])
    order = np.argsort(start, kind="stable")  # the host order: by start
    keep = SEG.carried(start[order], end[order], np.ones(7, np.int64), level[order], np.full(7, 50))
    assert sorted("abcdefg"[i] for i in order[keep]) == ["c", "g"]


def test_carried_intervals_give_the_same_labels_and_bounds_after_the_cut():
    """Random intervals (one or two processes with cuts of their own, three levels, nested and overlapping,
    ties included): with only the carried ones before each process's cut, each (process, level)'s label
    (attribution._active_label) at every time from the cut on, and the interval edges from the cut on, are
    those of every interval — what the exactness of the segments rests on."""
    rng = np.random.default_rng(20)
    for trial in range(400):
        n = int(rng.integers(1, 40))
        processes = 1 + trial % 2
        pid = np.sort(rng.integers(0, processes, n))  # the host order: by process, then start
        start = np.concatenate([np.sort(rng.integers(0, 100, int((pid == p).sum()))) for p in range(processes)])
        end = start + rng.integers(1, 60, n)
        level = rng.integers(0, 3, n).astype(np.int8)
        cuts = rng.integers(0, 120, processes)
        keep = SEG.carried(start, end, pid, level, cuts[pid])
        keep |= start >= cuts[pid]
        for p in range(processes):
            times = np.arange(cuts[p], 200)
            for lv in range(3):
                mine = (level == lv) & (pid == p)
                every = A._active_label(start[mine], end[mine], np.flatnonzero(mine), times)
                kept = mine & keep
                some = A._active_label(start[kept], end[kept], np.flatnonzero(kept), times)
                assert (every == some).all()
            edges = np.unique(np.concatenate([start[pid == p], end[pid == p]]))
            kept_edges = np.unique(np.concatenate([start[keep & (pid == p)], end[keep & (pid == p)]]))
            assert (edges[edges >= cuts[p]] == kept_edges[kept_edges >= cuts[p]]).all()


def test_munmap_blocks_add_up_to_the_union_of_every_call():
    """Unit test on made-up calls of one thread in two blocks (worked out by hand): the second block's union
    counts only what the first did not cover ([10, 15) of 9-15, and 20-25), so the two add up to the union's
    25 ns; a later block with a call before the first block's latest start is out of order."""
    reach = {}
    first = M._uncovered_before(np.array([0, 5]), np.array([10, 8]), reach, "t")
    second = M._uncovered_before(np.array([9, 20]), np.array([15, 25]), reach, "t")
    assert (first.starts.tolist(), first.ends.tolist()) == ([0], [10])
    assert (second.starts.tolist(), second.ends.tolist()) == ([10, 20], [15, 25])
    assert reach["t"] == (20, 25)
    with pytest.raises(M.CallsOutOfOrder):
        M._uncovered_before(np.array([19]), np.array([30]), reach, "t")
