"""OS runtime calls are read only where they can matter (issue 20): the attribution's calls on the threads
that can hold causes, kept chunk by chunk while read when they overlap GPU idle; munmap by name. The
result equals reading every call and filtering in memory, as the code did before."""
import numpy as np
import pandas as pd
import pytest

import nsysanalyze
from nsysanalyze import attribution as A
from nsysanalyze.trace import Trace, pages, tables
from conftest import READERS, fixture_trace, use_reader
from tiny import TinyTrace, gtid


@pytest.mark.parametrize("reader", READERS)
def test_osrt_calls_by_thread_and_kept_chunk_by_chunk(tmp_path, monkeypatch, reader):
    """Unit test on a tiny trace built here (real nsys schema): ``threads`` selects in SQL (the page reader: as it
    decodes), ``keep`` sees each chunk's columns and only its rows come back, in rowid order; with 2-row SQL
    chunks the 7 calls span 4 chunks (the page reader: one page, one chunk)."""
    use_reader(monkeypatch, reader)
    monkeypatch.setattr(tables, "CHUNK_ROWS", 2)
    t = TinyTrace(tmp_path / "osrt.sqlite")
    t.process(100)
    main, helper, other = gtid(100, 1), gtid(100, 2), gtid(100, 3)
    for start, end, tid, name in [(10, 20, main, "poll"), (30, 31, helper, "munmap"), (40, 90, other, "read"),
                                  (50, 60, main, "munmap"), (70, 71, main, "pthread_cond_signal"),
                                  (80, 99, helper, "futex"), (100, 130, main, "read")]:
        t.osrt(start, end, tid, name)
    path = t.close()
    seen = []

    def longer_than_5(cols):
        seen.append(len(cols["start"]))
        return cols["end"] - cols["start"] > 5

    with Trace(path) as trace:
        got = trace.osrt(None, threads=[main, helper], keep=longer_than_5)
        none = trace.osrt(None, threads=[])
        munmap = trace.osrt(("munmap",))
    assert got["start"].tolist() == [10, 50, 80, 100] and got["end"].tolist() == [20, 60, 99, 130]
    assert got["globalTid"].tolist() == [main, main, helper, main]
    assert got["name"].tolist() == ["poll", "munmap", "futex", "read"]
    assert sum(seen) == 6 and (len(seen) > 1 if reader == "sql" else seen == [6])  # the other thread's call never read
    assert none.empty and list(none.columns) == ["start", "end", "globalTid", "name"]
    assert munmap["start"].tolist() == [30, 50]


@pytest.mark.parametrize("reader", READERS)
def test_munmap_and_attribution_calls_from_one_scan(tmp_path, monkeypatch, reader):
    """Unit test on a tiny trace built here (real nsys schema): ``osrt_and_named`` gives what the two reads give
    — every munmap call (on any thread, at any time) and the calls of ``threads`` that ``keep_time`` and ``keep``
    select (a munmap among them in both) — in rowid order; the page reader decodes the page once. ``keep`` is
    asked only about the calls ``keep_time`` keeps: a call it alone would keep (140) or a munmap call after
    ``keep_time``'s bound (160) is not among the selected calls."""
    use_reader(monkeypatch, reader)
    t = TinyTrace(tmp_path / "osrt.sqlite")
    t.process(100)
    main, helper = gtid(100, 1), gtid(100, 2)
    for start, end, tid, name in [(10, 20, main, "poll"), (30, 31, helper, "munmap"), (40, 45, main, "munmap"),
                                  (50, 60, main, "munmap"), (70, 71, main, "pthread_cond_signal"),
                                  (80, 99, helper, "futex"), (100, 130, main, "read"), (140, 150, main, "read"),
                                  (160, 170, main, "munmap")]:
        t.osrt(start, end, tid, name)
    path = t.close()
    decoded = []
    decode = pages.TablePages.decode

    def counting(self, numbers, fields, rowids=None, early=None):
        decoded.append(numbers.size)
        return decode(self, numbers, fields, rowids, early)

    monkeypatch.setattr(pages.TablePages, "decode", counting)

    def before_135(s, e):
        return s < 135

    def longer_than_5(cols):
        return cols["end"] - cols["start"] > 5

    with Trace(path) as trace:
        munmap, calls = trace.osrt_and_named(("munmap",), [main], longer_than_5, before_135)
        fused = len(decoded)
        alone = trace.osrt(("munmap",)), trace.osrt(None, threads=[main], keep=longer_than_5, keep_time=before_135)
    assert munmap["start"].tolist() == [30, 40, 50, 160] and munmap["globalTid"].tolist() == [helper, main, main, main]
    assert calls["start"].tolist() == [10, 50, 100] and calls["name"].astype(str).tolist() == ["poll", "munmap", "read"]
    for got, expected in zip((munmap, calls), alone):
        pd.testing.assert_frame_equal(got, expected)
    assert fused == (1 if reader == "pages" else 0) and len(decoded) == (3 if reader == "pages" else 0)


@pytest.mark.parametrize("name", ["compile_warmup.sqlite", "empty_cache_per_step.sqlite", "workers_nonpersistent.sqlite"])
def test_one_scan_equals_two_reads_on_real_exports(name, monkeypatch):
    """On real exports with munmap calls: the attribution's own read (its cause threads, kept by GPU idle) and
    the munmap read, made together in one scan, equal the two reads made apart."""
    seen = {}
    real = A.host_sources

    def spy(*args, **kwargs):
        seen["sources"] = real(*args, **kwargs)
        return seen["sources"]

    monkeypatch.setattr(A, "host_sources", spy)
    with nsysanalyze.open(fixture_trace(name)) as a:
        a.gaps()
        sources = seen["sources"]
        threads, keep, keep_time = sources.cause_threads, sources.keep, sources.keep_time
        munmap, calls = a.trace.osrt_and_named(("munmap",), threads, keep, keep_time)
        alone = a.trace.osrt(("munmap",)), a.trace.osrt(None, threads=threads, keep=keep, keep_time=keep_time)
    assert len(munmap) and len(calls)
    for got, expected in zip((munmap, calls), alone):
        pd.testing.assert_frame_equal(got, expected)


@pytest.mark.parametrize("name", ["resnet18_baseline.sqlite", "vit_l32_ddp.sqlite", "tinyops_eager.sqlite"])
def test_attribution_calls_equal_every_call_filtered_in_memory(name, monkeypatch):
    """On real exports: the host intervals made from the calls read by thread (SQL) and kept while read
    (chunks of 1,000 rows) equal those made from every OS runtime call filtered by GPU idle in memory (the
    code before issue 20), and fewer calls than every call are held."""
    monkeypatch.setattr(tables, "CHUNK_ROWS", 1000)
    calls = {}
    real_sources, real_frame = A.host_sources, A.host_frame

    def sources_spy(runtime, api_names, nvtx, step_ranges, devices, mpi=None, os_calls_captured=True):
        calls["args"] = (runtime, api_names, nvtx, step_ranges, devices)
        return real_sources(runtime, api_names, nvtx, step_ranges, devices, mpi, os_calls_captured)

    def frame_spy(sources, osrt):
        calls["read"] = osrt.copy()
        return real_frame(sources, osrt)

    monkeypatch.setattr(A, "host_sources", sources_spy)
    monkeypatch.setattr(A, "host_frame", frame_spy)
    with nsysanalyze.open(fixture_trace(name)) as a:
        a.keep_attribution_inputs = True  # every OS call read at once, and the host intervals kept
        host = a.attribution_host()
        every = a.trace.osrt(None)
    runtime, api_names, nvtx, step_ranges, devices = calls["args"]
    every_idle = every[A._during_idle(every, devices)].reset_index(drop=True)
    monkeypatch.undo()
    expected = A.host_intervals(runtime, api_names, lambda threads, keep, keep_time: every_idle, nvtx, step_ranges,
                                devices)
    pd.testing.assert_frame_equal(host, expected)
    assert (host["level"] == A.OS_ACTIVE).any()  # OS runtime causes are there to compare
    assert 0 < len(calls["read"]) <= len(every_idle) < len(every)


def test_host_intervals_are_sorted_by_process_then_start_with_ties_in_part_order():
    """Unit test on hand-made arrays: concat_host_parts orders rows by (globalPid, start), keeps ties in the
    parts' order (the attribution's stable sort by start relies on it), unions the causes' categories."""
    first = pd.DataFrame({"start": [30, 10], "end": [40, 20], "globalPid": [2, 1], "level": [1, 1],
                          "cause": pd.Categorical(["sync", "sync"])})
    second = {"start": [10, 5], "end": [15, 9], "globalPid": [1, 2], "level": [2, 2],
              "cause": pd.Categorical(["write", "read"])}
    got = A.concat_host_parts([first, {k: pd.Series(v).to_numpy() if k != "cause" else v for k, v in second.items()}])
    assert got[["globalPid", "start", "end", "level"]].values.tolist() == [
        [1, 10, 20, 1], [1, 10, 15, 2], [2, 5, 9, 2], [2, 30, 40, 1]]
    assert got["cause"].tolist() == ["sync", "write", "read", "sync"]
    assert [str(t) for t in got.dtypes[:4]] == ["int64", "int64", "int64", "int8"]
    for starts, expected in (([5, 3, 1], [3, 5, 1]), ([3, 5, 1], [3, 5, 1])):  # processes in order, starts not / sorted
        part = {"start": np.array(starts), "end": np.array(starts) + 1, "globalPid": np.array([1, 1, 2]),
                "level": np.array([1, 1, 1]), "cause": pd.Categorical(["a", "b", "c"])}
        assert A.concat_host_parts([part])["start"].tolist() == expected


def test_os_call_names_decode_by_lookup_table_or_search():
    """Unit test: nameIds become category codes (-1 where no string) the same way through the int16 lookup
    table (small ids) and the sorted search (ids of 2**24 and more)."""
    values = pd.array([7, 3, 9, 3, -1, 12]).to_numpy(dtype="int64")
    ids, codes = pd.array([3, 7, 12]).to_numpy(dtype="int64"), pd.array([1, 0, 2]).to_numpy(dtype="int64")
    small = tables._codes_of_ids(values, ids, codes)
    big = tables._codes_of_ids(values + (1 << 24), ids + (1 << 24), codes)
    assert small.tolist() == big.tolist() == [0, 1, -1, 1, -1, 2]
    assert small.dtype.itemsize == 2


def test_without_os_calls_no_launch_gaps_of_other_threads_are_made(monkeypatch):
    """vit_l32_2gpu_ddp_0 (no OSRT_API table; its backward launches from autograd threads): the launch gaps of
    other threads only matter where a primary thread waits in the OS, so without OS calls none are made, and
    the gaps equal those of an analysis that makes them."""
    made = []
    real = A.host_sources

    def spy(*args, os_calls_captured=True):
        sources = real(*args, os_calls_captured=os_calls_captured)
        made.append(len(sources.helper))
        return sources

    def gaps(force: bool):
        monkeypatch.setattr(A, "host_sources", (lambda *a, os_calls_captured=True: spy(*a)) if force else spy)
        with nsysanalyze.open(fixture_trace("vit_l32_2gpu_ddp_0.sqlite")) as a:
            return a.gaps()

    forced, skipped = gaps(True), gaps(False)
    assert made[0] > 1000 and made[1] == 0
    pd.testing.assert_frame_equal(forced, skipped)
