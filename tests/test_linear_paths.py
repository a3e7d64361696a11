"""The linear (grouped, vectorized) paths give exactly what a straightforward per-group path gives.

Each test runs the fast code on real exports and on real-derived variants (a fixture copied into
tmp and spread over several streams/devices/processes with SQL, as bench/scaling.py does), and
compares with a deliberately simple reference: one SQL query or one boolean mask per group.
"""
import shutil
import sqlite3

import numpy as np
import pandas as pd
import pytest

import nsysanalyze
from nsysanalyze import attribution as A
from nsysanalyze import intervals, metrics
from conftest import fixture_trace, shared_trace
from nsysanalyze.render.contract import report as contract_report

REAL = ["h200/resnet18-baseline-nvtx.sqlite", "public/nsys-ai__mfu_2gpu_after.sqlite",
        "public/pipit__perlmutter-cloverleaf-cuda.sqlite"]


def spread(src, tmp_path, sql: list[str]):
    """A copy of ``src`` with ``sql`` applied (the source is never written)."""
    dst = tmp_path / f"spread-{src.name}"
    shutil.copyfile(src, dst)
    with sqlite3.connect(dst) as conn:
        for q in sql:
            conn.execute(q)
    return dst


MANY_STREAMS = ["UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET streamId = 100 + rowid % 5, deviceId = rowid % 2",
                "UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET streamId = 102 + rowid % 7, deviceId = rowid % 3"]


def htod_fraction_per_stream_sql(path) -> dict:
    """The old path: per (process, device) with HtoD copies, one EXISTS query per stream."""
    conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro&immutable=1", uri=True)
    out = {}
    copies = conn.execute("SELECT globalPid, deviceId, streamId FROM CUPTI_ACTIVITY_KIND_MEMCPY "
                          "WHERE copyKind = 1 AND start IS NOT NULL AND \"end\" IS NOT NULL").fetchall()
    for key in {c[:2] for c in copies}:
        streams = [c[2] for c in copies if c[:2] == key]
        on = [s for s in set(streams) if conn.execute(
            "SELECT EXISTS (SELECT 1 FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE globalPid = ? AND deviceId = ? AND "
            "streamId = ? AND \"end\" IS NOT NULL AND start IS NOT NULL)", (*key, s)).fetchone()[0]]
        out[key] = float(np.isin(streams, on).mean())
    conn.close()
    return out


@pytest.mark.parametrize("rel", REAL)
def test_htod_on_kernel_streams_equals_one_query_per_stream(rel):
    path = shared_trace(rel)
    with nsysanalyze.open(path) as a:
        assert a._htod_on_kernel_streams == htod_fraction_per_stream_sql(path)


def test_htod_on_kernel_streams_over_several_streams_and_devices(tmp_path):
    path = spread(fixture_trace("resnet18_baseline.sqlite"), tmp_path, MANY_STREAMS)
    expected = htod_fraction_per_stream_sql(path)
    assert sorted(expected.values()) == [0.0, 0.0, 0.5]  # devices with none, and with some, on kernel streams
    with nsysanalyze.open(path) as a:
        assert a._htod_on_kernel_streams == expected
        facts = {(e.globalPid, e.deviceId): e.facts["htod_on_kernel_streams_fraction"] for e in a.evidence()}
    assert {k: v for k, v in facts.items() if k in expected} == {k: expected[k] for k in facts if k in expected}


def report(path, **kw) -> dict:
    with nsysanalyze.open(path, **kw) as a:
        return contract_report(a)


SPREAD_DEVICES = [f"UPDATE {t} SET deviceId = rowid % 7" for t in
                  ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")]
SPREAD_PROCESSES = [f"UPDATE {t} SET globalPid = (globalPid & ~(16777215 << 24)) | ((1000 + rowid % 5) << 24)" for t in
                    ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")] + [
    "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET globalTid = (globalTid & ~(16777215 << 24)) | ((1000 + rowid % 5) << 24)"]


@pytest.mark.parametrize("variant", ["2-GPU real", "7 devices", "5 processes"])
def test_devices_side_by_side_equal_one_device_at_a_time(variant, tmp_path, monkeypatch):
    """gpu_metrics lays devices side by side on one time axis; with STACK_LIMIT too small for two, it
    measures one device at a time (the straightforward per-device path): same report."""
    if variant == "2-GPU real":
        path = shared_trace("public/nsys-ai__mfu_2gpu_after.sqlite")
    else:
        src = fixture_trace("vit_l32_2gpu_ddp_0.sqlite" if variant == "7 devices" else "resnet18_baseline.sqlite")
        path = spread(src, tmp_path, SPREAD_DEVICES if variant == "7 devices" else SPREAD_PROCESSES)
    fast = report(path)
    assert len(fast["summary"]["devices"]) >= 2
    monkeypatch.setattr(intervals, "STACK_LIMIT", 1)
    assert report(path) == fast


def window_sums_one_window_at_a_time(windows, tids, starts, ends, codes, columns):
    """Reference for metrics._window_sums: one boolean mask per window."""
    pids = tids & ~np.int64(0xFFFFFF)
    out = {name: np.zeros(len(windows), dtype=np.int64) for name in columns}
    for i, w in enumerate(windows.itertuples(index=False)):
        on = (tids == w.globalTid) if w.globalTid >= 0 else (pids == w.globalPid)
        inside = on & (starts >= w.cpu_start) & (starts < w.cpu_end)
        for name, (want, durations) in columns.items():
            sel = inside if want is None else inside & (codes == want)
            out[name][i] = int((ends - starts)[sel].sum()) if durations else int(sel.sum())
    return out


@pytest.mark.parametrize("variant", ["real", "5 processes"])
def test_window_sums_equal_one_mask_per_window(variant, tmp_path, monkeypatch):
    from nsysanalyze import metrics
    src = fixture_trace("resnet18_baseline.sqlite")
    path = src if variant == "real" else spread(src, tmp_path, SPREAD_PROCESSES)
    with nsysanalyze.open(path) as a:
        steps, summary, runtime = a.steps(), a.summary(), a.trace.runtime
    cols = ["globalPid", "globalTid", "cpu_start", "cpu_end"]
    windows = pd.concat([steps[cols], summary.assign(globalTid=-1, cpu_start=summary["window_start"],
                                                     cpu_end=summary["window_end"])[cols]], ignore_index=True)
    windows = windows.astype(np.int64)
    tids, starts, ends = runtime["globalTid"].to_numpy(), runtime["start"].to_numpy(), runtime["end"].to_numpy()
    codes = (runtime["nameId"].to_numpy() % 2).astype(np.int8)
    columns = {"all": (None, False), "odd": (1, False), "odd_ns": (1, True), "all_ns": (None, True)}
    expected = window_sums_one_window_at_a_time(windows, tids, starts, ends, codes, columns)
    assert expected["all"].sum() > 0 and 0 < expected["odd"].sum() < expected["all"].sum()
    for limit in (intervals.STACK_LIMIT, 1):  # lanes side by side, then one lane per batch
        monkeypatch.setattr(intervals, "STACK_LIMIT", limit)
        got = metrics._window_sums(windows, tids, starts, ends, codes, columns)
        assert {k: v.tolist() for k, v in got.items()} == {k: v.tolist() for k, v in expected.items()}


def assign_one_key_at_a_time(tids, times, ranges, key="globalTid"):
    """Reference for steps._assign_to_ranges: per key, a searchsorted over its sorted ranges."""
    out = np.full(times.shape, -1, dtype=np.int64)
    for k, group in ranges.groupby(key):
        group = group.sort_values("cpu_start", kind="stable")
        starts, ends, labels = group["cpu_start"].to_numpy(), group["cpu_end"].to_numpy(), group.index.to_numpy()
        on = np.flatnonzero(tids == k)
        j = np.searchsorted(starts, times[on], side="right") - 1
        inside = (j >= 0) & (times[on] <= ends[np.maximum(j, 0)])
        out[on[inside]] = labels[j[inside]]
    return out


def subranges_by_pandas(nvtx, steps):
    """Reference for steps.subranges: a pandas groupby over the nested ranges."""
    owner = assign_one_key_at_a_time(nvtx["globalTid"].to_numpy(), nvtx["start"].to_numpy(), steps)
    rows = nvtx[owner >= 0].assign(owner=owner[owner >= 0]).reset_index(drop=True)
    host = steps.loc[rows["owner"]].reset_index(drop=True)
    nested = (rows["end"] <= host["cpu_end"]) & ~((rows["start"] == host["cpu_start"]) & (rows["end"] == host["cpu_end"]))
    rows, host = rows[nested], host[nested]
    rows = rows.assign(globalPid=host["globalPid"].to_numpy(), step=host["step"].to_numpy(),
                       ns=(rows["end"] - rows["start"]).to_numpy(), step_ns=(host["cpu_end"] - host["cpu_start"]).to_numpy())
    out = rows.groupby(["globalPid", "step", "name"], sort=False).agg(
        ns=("ns", "sum"), count=("ns", "size"), step_ns=("step_ns", "first")).reset_index()
    out["share"] = out["ns"] / out["step_ns"].where(out["step_ns"] > 0)
    cols = ["globalPid", "step", "name", "ns", "count", "share"]
    return out[cols].sort_values(["globalPid", "step", "ns"], ascending=[True, True, False]).reset_index(drop=True)


THREADS = ["UPDATE NVTX_EVENTS SET globalTid = globalTid + (rowid % 6) * 3, endGlobalTid = NULL",
           "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET globalTid = globalTid + (rowid % 6) * 3"]


@pytest.mark.parametrize("variant", ["real", "real 2 processes", "6 threads"])
def test_step_assignment_and_subranges_equal_one_key_at_a_time(variant, tmp_path, monkeypatch):
    from nsysanalyze import steps as S
    if variant == "real 2 processes":
        path = shared_trace("public/nsys-ai__mfu_2gpu_after.sqlite")
    else:
        src = fixture_trace("resnet18_baseline.sqlite")
        path = src if variant == "real" else spread(src, tmp_path, THREADS)
    with nsysanalyze.open(path) as a:
        nvtx, runtime = a.trace.nvtx, a.trace.runtime
        steps = S.find_steps(nvtx, "^ncclGroupEnd$" if "processes" in variant else None)[0]
    assert len(steps) >= 2
    for limit in (intervals.STACK_LIMIT, 1):
        monkeypatch.setattr(intervals, "STACK_LIMIT", limit)
        for tids, times, key in ((nvtx["globalTid"].to_numpy(), nvtx["start"].to_numpy(), "globalTid"),
                                 (runtime["globalTid"].to_numpy() & ~np.int64(0xFFFFFF), runtime["start"].to_numpy(), "globalPid")):
            got = S._assign_to_ranges(tids, times, steps, key)
            assert (got >= 0).any() and got.tolist() == assign_one_key_at_a_time(tids, times, steps, key).tolist()
        expected = subranges_by_pandas(nvtx, steps)
        assert len(expected) or variant != "real"
        pd.testing.assert_frame_equal(S.subranges(nvtx, steps), expected)


@pytest.mark.parametrize("rel", ["public/pipit__perlmutter-cloverleaf-cuda.sqlite", "public/kamalchowdhury326__report1.sqlite",
                                 "public/bwyogatama__report1.sqlite", "workers_nonpersistent over 3 devices"])
def test_munmap_gpu_idle_equals_one_mask_per_window(rel, tmp_path):
    """metrics._munmap_gpu_idle groups the munmap calls once (one union per process for all of its devices)
    and measures them against the GPU idle; the reference masks them per window against the busy union."""
    from nsysanalyze import metrics as M
    from nsysanalyze.intervals import Coverage, intersection_within
    path = (spread_devices(fixture_trace("workers_nonpersistent.sqlite"), tmp_path, 3) if "over" in rel
            else shared_trace(rel))
    with nsysanalyze.open(path) as a:
        summary, munmap = a.summary(), a.trace.osrt(("munmap",))
        busy = M.busy_coverage([a.trace.kernels], a.trace.memcpys, a.trace.memsets)
    windows = summary.assign(globalTid=-1)[["globalPid", "deviceId", "globalTid", "window_start", "window_end"]]
    tid = munmap["globalTid"].to_numpy()
    expected = []
    for w in windows.itertuples(index=False):
        mine = (tid & ~np.int64(0xFFFFFF)) == w.globalPid
        if not mine.any() or (w.globalPid, w.deviceId) not in busy:
            expected.append(0)
            continue
        mm = Coverage(munmap["start"].to_numpy()[mine], munmap["end"].to_numpy()[mine])
        a_, b_ = np.array([w.window_start]), np.array([w.window_end])
        expected.append(int((mm.within(a_, b_) - intersection_within(mm, busy[(w.globalPid, w.deviceId)], a_, b_))[0]))
    idle = A.idle_by_device([windows], busy)  # the pipeline's idle spans more windows: the same idle inside each
    assert len(munmap) and M._munmap_gpu_idle(windows, munmap, idle).tolist() == expected
    assert summary["munmap_gpu_idle_ns"].tolist() == expected
    # the calls in start order, three blocks at a time (the segmented pass): the blocks' sums are the same
    ordered = munmap.sort_values("start", kind="stable").reset_index(drop=True)
    reach, cuts = {}, np.linspace(0, len(ordered), 4).astype(int)
    blocks = [M._munmap_gpu_idle(windows, ordered.iloc[a:b], idle, reach) for a, b in zip(cuts[:-1], cuts[1:])]
    assert np.sum(blocks, axis=0).tolist() == expected
    if "over" in rel:  # one process, three devices: each device's idle under the process's munmaps
        assert len(windows) == 3 and sum(v > 0 for v in expected) >= 2


def test_idle_intervals_are_the_complement_of_busy_per_ns():
    """Unit test on random intervals: attribution's idle intervals inside [a, b) against a per-ns mask."""
    from nsysanalyze.attribution import _idle
    from nsysanalyze.intervals import Coverage
    rng = np.random.default_rng(11)
    for _ in range(200):
        s = rng.integers(0, 300, size=rng.integers(0, 12))
        busy = Coverage(s, s + rng.integers(1, 40, size=s.size))
        a, b = sorted(rng.integers(-20, 360, size=2))
        b += 1
        m = np.zeros(400, dtype=bool)
        for x, y in zip(busy.starts, busy.ends):
            m[x + 20:y + 20] = True
        want = ~m[a + 20:b + 20]
        got = np.zeros(b - a, dtype=bool)
        starts, ends = _idle(busy, int(a), int(b))
        assert (ends > starts).all() and (starts[1:] > ends[:-1]).all()
        for x, y in zip(starts, ends):
            got[x - a:y - a] = True
        assert (got == want).all()


def test_first_call_steps_equal_a_lexsort():
    """Unit test on random calls: the one-key stable sort picks, per correlationId, the same call (inside a
    step first, then call order) as a two-key lexsort."""
    from nsysanalyze.steps import _first_call_steps
    rng = np.random.default_rng(5)
    for _ in range(300):
        n = rng.integers(2, 40)
        corr, step = rng.integers(0, 15, n), rng.integers(-1, 4, n)
        order = np.lexsort((step < 0, corr))
        c, s = corr[order], step[order]
        first = np.concatenate(([True], c[1:] != c[:-1]))
        got = _first_call_steps(corr, step)
        assert got[0].tolist() == c[first].tolist() and got[1].tolist() == s[first].tolist()


def summary_one_device_at_a_time(gaps: pd.DataFrame, steady: dict) -> dict:
    """Reference for attribution.summarize: each device's rows on their own, the steps' medians by pandas
    over a (cause x step) table with absent steps filled with 0; ties in ns keep the causes' sorted order."""
    values = A.SUMMARY_COLUMNS[2:]
    out = {}
    for (pid, dev), g in gaps.groupby(["globalPid", "deviceId"]):
        chosen = steady.get((int(pid), int(dev)))
        g = g.assign(before_launch_ns=g["ns"].where(g["before_launch"], 0), after_sync_ns=g["ns"].where(g["after_sync"], 0),
                     short_gap_ns=g["ns"].where(g["short_gap"], 0),
                     short_after_sync_ns=g["ns"].where(g["short_gap"] & g["after_sync"], 0))
        if chosen:
            per_step = g[g["step"].isin(chosen)].groupby(["cause_kind", "cause", "step"])[values].sum()
            per_step = per_step.unstack("step", fill_value=0).reindex(
                columns=pd.MultiIndex.from_product([values, chosen]), fill_value=0)
            frame = pd.DataFrame({v: per_step[v].median(axis=1) for v in values})
        else:
            frame = g.groupby(["cause_kind", "cause"])[values].sum()
        frame = frame[frame["ns"] > 0].sort_values("ns", ascending=False, kind="stable").reset_index()
        out[(int(pid), int(dev))] = frame[A.SUMMARY_COLUMNS]
    return out


@pytest.mark.parametrize("variant", ["resnet18 (steps)", "2-GPU real", "5 processes", "capture only"])
def test_gap_summary_equals_one_device_at_a_time(variant, tmp_path):
    """summarize groups every device's gaps at once; the reference takes one device at a time."""
    if variant == "2-GPU real":
        path = shared_trace("public/nsys-ai__mfu_2gpu_after.sqlite")
    else:
        src = fixture_trace("resnet18_baseline.sqlite")
        path = spread(src, tmp_path, SPREAD_PROCESSES) if variant == "5 processes" else src
    with nsysanalyze.Analysis(path) as a:
        gaps, steps = a.gaps(), a.steps()
    steady = {} if variant == "capture only" or steps.empty else {
        (int(p), int(d)): sorted(g["step"].astype(int)) for (p, d), g in
        metrics.steady_steps(steps).groupby(["globalPid", "deviceId"])}
    if steady:  # one device with steps whose rows are all outside them: an empty median table
        steady[next(iter(steady))] = [10 ** 6]
    got, want = A.summarize(gaps, steady), summary_one_device_at_a_time(gaps, steady)
    assert got.keys() == want.keys() and len(got) >= 1
    for key in want:
        if want[key].empty:  # (pandas infers the empty name columns' dtype its own way)
            assert got[key].empty and list(got[key].columns) == list(want[key].columns)
        else:
            pd.testing.assert_frame_equal(got[key], want[key])


def gaps_one_device_at_a_time(capture, steps, idle, host, syncs) -> pd.DataFrame:
    """Reference for attribution.attribute: per device on its own, every elementary segment between all of its
    points (its idle edges, its process's host-interval edges and sync returns inside its idle intervals,
    its steps' window starts and first launches), each given the attributes of its start — per level, lowest
    first, the process's host interval _active_label picks; the step window holding it; the tags — and summed
    per group by pandas."""
    rows = []
    if steps.empty:
        steps = pd.DataFrame({c: np.empty(0, np.int64) for c in
                              ["globalPid", "deviceId", "step", "window_start", "window_end", "cpu_start", "first_launch"]})
    for w in capture.itertuples(index=False):
        key = (int(w.globalPid), int(w.deviceId))
        s, e = A._idle_within(idle[key], int(w.window_start), int(w.window_end))
        if not s.size:
            continue
        h = host[host["globalPid"] == key[0]].sort_values("start", kind="stable")
        ends = np.sort(syncs.loc[syncs["globalPid"] == key[0], "end"].to_numpy())
        mine = steps[(steps["globalPid"] == key[0]) & (steps["deviceId"] == key[1])].sort_values("window_start")
        j = np.searchsorted(ends, s)
        first_sync = np.where(ends[np.minimum(j, len(ends) - 1)] < e, ends[np.minimum(j, len(ends) - 1)],
                              A.NEVER) if len(ends) else np.full(s.size, A.NEVER)
        first_sync[j >= len(ends)] = A.NEVER
        points = [s, e, first_sync, h["start"], h["end"], mine["window_start"], mine["first_launch"]]
        p = np.unique(np.clip(np.concatenate([np.asarray(x, np.int64) for x in points]), s[0], e[-1]))
        x, y = p[:-1], p[1:]
        k = np.searchsorted(s, x, side="right") - 1
        keep = (k >= 0) & (x < e[np.maximum(k, 0)])
        x, y, k = x[keep], y[keep], k[keep]
        level, cause = np.full(x.size, len(A.LEVELS) - 1), np.full(x.size, -1)
        codes = h["cause"].cat.codes.to_numpy(np.int64) if len(h) else np.empty(0, np.int64)
        for lv in range(len(A.LEVELS) - 2, -1, -1):
            m = (h["level"] == lv).to_numpy()
            if m.any():
                lab = A._active_label(h["start"].to_numpy()[m], h["end"].to_numpy()[m], codes[m], x)
                level[lab >= 0], cause[lab >= 0] = lv, lab[lab >= 0]
        step, before = np.full(x.size, -1), np.zeros(x.size, bool)
        for i, t in enumerate(x):  # the step window holding each segment start: one mask per segment
            holds = (mine["window_start"].to_numpy() <= t)
            if holds.any():
                last = mine.iloc[np.flatnonzero(holds)[-1]]
                if t < last["window_end"]:
                    step[i] = last["step"]
                    before[i] = last["cpu_start"] <= t < last["first_launch"]
        names = np.asarray(A.host_causes(host), dtype=object)
        rows.append(pd.DataFrame({
            "globalPid": key[0], "deviceId": key[1], "step": step, "cause_kind": np.array(A.LEVELS, dtype=object)[level],
            "cause": np.where(cause >= 0, names[np.maximum(cause, 0)] if names.size else "", A.UNTRACED),
            "before_launch": before, "after_sync": x >= first_sync[k], "short_gap": (e - s)[k] < A.SHORT_GAP_NS,
            "ns": y - x}))
    keys = [c for c in A.GAP_COLUMNS if c != "ns"]
    return pd.concat(rows).groupby(keys)["ns"].sum()


SPREAD_ONE_PROCESS = [f"UPDATE {t} SET deviceId = rowid % 7" for t in
                      ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")]


@pytest.mark.parametrize("variant", ["vit_l32_2gpu_ddp_0", "vit_l32_2gpu_powersgd_1", "gloo_8rank_0", "clip_item",
                                     "2-GPU real", "ddp 7 devices", "resnet 5 processes"])
def test_attribution_equals_one_device_at_a_time(variant, tmp_path, monkeypatch):
    """attribute lays every device (and process) side by side and sums each idle piece's causes from its
    process's cause timeline; the reference takes one device at a time, segment by segment. Also in slices
    (IDLE_CHUNK), with idle intervals cut every few host calls (HOST_CHUNK) and one device per batch
    (STACK_LIMIT): the same gaps."""
    if variant == "2-GPU real":
        path = shared_trace("public/nsys-ai__mfu_2gpu_after.sqlite")
    elif variant == "ddp 7 devices":
        path = spread(fixture_trace("vit_l32_2gpu_ddp_0.sqlite"), tmp_path, SPREAD_ONE_PROCESS)
    elif variant == "resnet 5 processes":
        path = spread(fixture_trace("resnet18_baseline.sqlite"), tmp_path, SPREAD_PROCESSES)
    else:
        path = fixture_trace(f"{variant}.sqlite")
    a = nsysanalyze.open(path)
    a.keep_attribution_inputs = True
    gaps = a.gaps()
    capture, steps, idle, host, syncs = a._kept_attribution()
    a.close()
    want = gaps_one_device_at_a_time(capture, steps, idle, host, syncs)
    assert len(want) > 10 and want.index.get_level_values("step").max() >= (-1 if "processes" in variant else 1)
    assert len(capture) == (7 if "7" in variant else 5 if "5" in variant else 2 if "2-GPU" in variant else 1)
    keys = [c for c in A.GAP_COLUMNS if c != "ns"]
    assert gaps.groupby(keys)["ns"].sum().to_dict() == want.to_dict()
    assert not gaps.duplicated(keys).any() and (gaps["ns"] > 0).all()
    monkeypatch.setattr(A, "IDLE_CHUNK", 13)
    monkeypatch.setattr(A, "HOST_CHUNK", 5)
    monkeypatch.setattr(intervals, "STACK_LIMIT", 1)
    pd.testing.assert_frame_equal(A.attribute(capture, steps, idle, host, syncs), gaps)


def test_idle_chunks_cut_only_at_host_starts_and_cover_the_idle(monkeypatch):
    """A unit test on made-up arrays (not a trace): _idle_chunks over two devices of one process. The pieces
    of each device, joined where they were cut, are its idle intervals; every cut is a host-interval start;
    each piece keeps its whole interval; a chunk holds at most IDLE_CHUNK pieces and, on the process lane,
    at most HOST_CHUNK host starts, unless one time holds more (50 is started six times: no cut between)."""
    monkeypatch.setattr(A, "IDLE_CHUNK", 3)
    monkeypatch.setattr(A, "HOST_CHUNK", 4)
    host = np.array([0, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 50, 50, 50, 50, 50, 50, 60], np.int64)
    idle = {0: (np.array([5, 40, 49]), np.array([30, 45, 70])), 1: (np.array([1, 12]), np.array([2, 13]))}
    stride = 1000
    devices = [(d, 7, d, *idle[d], *idle[d]) for d in (0, 1)]  # uncut: each device's idle is its whole idle
    device_shift = np.array([0, stride], np.int64)
    to_process = -device_shift  # one process, on its own times
    pieces = {0: [], 1: []}
    for lane, s, e, whole_s, whole_e in A._idle_chunks(devices, device_shift, to_process, host):
        assert 1 <= s.size <= 3 and (e > s).all()
        on_process = (s + to_process[lane], e + to_process[lane])
        held = np.searchsorted(host, on_process[1].max()) - np.searchsorted(host, on_process[0].min())
        assert held <= 4 or set(host[(host >= on_process[0].min()) & (host < on_process[1].max())]) <= {50, 60}
        for d, x, y, wx, wy in zip(lane, s - device_shift[lane], e - device_shift[lane],
                                   whole_s - device_shift[lane], whole_e - device_shift[lane]):
            pieces[int(d)].append((int(x), int(y), int(wx), int(wy)))
    for d, got in pieces.items():
        whole = sorted({(wx, wy) for _, _, wx, wy in got})
        assert whole == list(zip(idle[d][0].tolist(), idle[d][1].tolist()))
        for wx, wy in whole:
            parts = sorted((x, y) for x, y, a, b in got if (a, b) == (wx, wy))
            assert parts[0][0] == wx and parts[-1][1] == wy
            assert all(y == x2 for (_, y), (x2, _) in zip(parts, parts[1:]))  # joined where cut
            assert {y for _, y in parts[:-1]} <= set(host.tolist())           # cut at host starts only
    assert [(x, y) for x, y, _, _ in sorted(pieces[0])] == [(5, 14), (14, 18), (18, 30), (40, 45), (49, 50),
                                                            (50, 60), (60, 70)]  # [10, 14): four host starts
    assert [(x, y) for x, y, _, _ in sorted(pieces[1])] == [(1, 2), (12, 13)]
    # device 0 cut to [20, 65) (a segment of the attribution): its pieces cover that, each keeping its whole interval
    clipped = [(0, 7, 0, np.array([20, 40, 49]), np.array([30, 45, 65]), *idle[0])]
    got = [(int(x), int(y), int(wx), int(wy)) for lane, s, e, whole_s, whole_e
           in A._idle_chunks(clipped, device_shift[:1], to_process[:1], host) for x, y, wx, wy in zip(s, e, whole_s, whole_e)]
    assert sorted(got) == [(20, 30, 5, 30), (40, 45, 40, 45), (49, 50, 49, 70), (50, 60, 49, 70), (60, 65, 49, 70)]


def test_process_idle_union_keeps_the_calls_of_every_device(tmp_path):
    """idle_by_process gives a process's devices' idle as one union; the host calls it keeps (_during_idle) are
    those overlapping some device's idle, asked one device at a time."""
    path = spread(fixture_trace("vit_l32_2gpu_ddp_0.sqlite"), tmp_path, SPREAD_ONE_PROCESS)
    a = nsysanalyze.open(path)
    a.keep_attribution_inputs = True
    capture, _, idle, _, _ = a._kept_attribution()
    runtime = a.trace.runtime
    a.close()
    per_device = {}
    for w in capture.itertuples(index=False):
        per_device.setdefault(int(w.globalPid), []).append(
            A._idle_within(idle[(int(w.globalPid), int(w.deviceId))], int(w.window_start), int(w.window_end)))
    united = A.idle_by_process(capture, idle)
    assert [len(v) for v in per_device.values()] == [7] and [len(v) for v in united.values()] == [1]
    want = np.zeros(len(runtime), bool)
    start, end = runtime["start"].to_numpy(), runtime["end"].to_numpy()
    for s, e in next(iter(per_device.values())):
        for x, y in zip(s, e):
            want |= (start < y) & (end > x) & (end > start)
    got = A._during_idle(runtime, united)
    assert 0 < want.sum() < len(want) and got.tolist() == want.tolist()


def stall_facts_of_one_device(steps: pd.DataFrame, ledger: pd.DataFrame) -> dict:
    """Reference for Analysis._stall_facts: one device's closed steps and its own ledger rows, masked."""
    from nsysanalyze import steps as S
    closed = steps[steps["closed"]]
    w = closed["window_ns"].to_numpy(np.float64)
    if len(closed) < 2 or not (w > S.STALL_FACTOR * np.median(w)).any():
        return {}
    stalls = closed[w > S.STALL_FACTOR * np.median(w)]
    pid, dev = int(steps["globalPid"].iloc[0]), int(steps["deviceId"].iloc[0])
    mine = ledger[(ledger["globalPid"] == pid) & (ledger["deviceId"] == dev) & (ledger["window"] == "step")
                  & (ledger["kind"] == "idle") & ledger["step"].isin(stalls["step"])]
    top = mine.groupby(["what", "cause"], sort=False)["ns"].sum().sort_values(ascending=False, kind="stable")
    idle = float(mine["ns"].sum())
    return {"stall_steps": float(len(stalls)), "steady_step_count": float(len(closed)),
            "stall_excess_ns": float(w.mean()) - float(np.median(w)), "stall_step_ns": float(np.median(stalls["window_ns"])),
            "stall_cause": f"{top.index[0][0]}: {top.index[0][1]}" if len(top) else "",
            "stall_before_launch_share": float(mine.loc[mine["before_launch"], "ns"].sum()) / idle if idle else 0.0,
            "stall_process_start_ns": float(mine.loc[mine["cause"].isin(["fork", "vfork", "clone", "clone3",
                                                                         "posix_spawn", "posix_spawnp"]), "ns"].sum())}


def spread_devices(src, tmp_path, n: int):
    return spread(src, tmp_path, [f"UPDATE {t} SET deviceId = rowid % {n}" for t in
                                  ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")])


EVIDENCE_VARIANTS = ["vit_l32_2gpu_ddp_1", "2-GPU real", "workers_nonpersistent 3 devices", "ddp 7 devices",
                     "resnet + a one-kernel device"]


def evidence_variant(variant, tmp_path):
    if variant == "2-GPU real":
        return shared_trace("public/nsys-ai__mfu_2gpu_after.sqlite")
    if variant == "workers_nonpersistent 3 devices":
        return spread_devices(fixture_trace("workers_nonpersistent.sqlite"), tmp_path, 3)
    if variant == "ddp 7 devices":
        return spread_devices(fixture_trace("vit_l32_2gpu_ddp_0.sqlite"), tmp_path, 7)
    if variant == "resnet + a one-kernel device":  # never idle: no gap rows (its own frame is an empty one)
        return spread(fixture_trace("resnet18_baseline.sqlite"), tmp_path,
                      ["UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = 5 WHERE rowid = 1"])
    return fixture_trace(f"{variant}.sqlite")


@pytest.mark.parametrize("variant", EVIDENCE_VARIANTS)
def test_step_evidence_equals_one_device_at_a_time(variant, tmp_path):
    """The evidence's per-device step medians, step counts, first steps, steady steps and stall facts come from
    one grouping of every device's steps (and one mask of the ledger); the reference masks one device at a time."""
    with nsysanalyze.open(evidence_variant(variant, tmp_path)) as a:
        steps, ledger = a.steps(), a.ledger()
        medians, counts, first_steps = a._step_evidence
        steady_ids, stalls = a._steady_ids, a._stall_facts
    groups = dict(list(steps.groupby(["globalPid", "deviceId"])))
    assert len(groups) == {"vit_l32_2gpu_ddp_1": 1, "2-GPU real": 2, "workers_nonpersistent 3 devices": 3,
                           "ddp 7 devices": 7, "resnet + a one-kernel device": 2}[variant]
    assert set(medians) == set(counts) == set(steady_ids) == {(int(p), int(d)) for p, d in groups}
    for (p, d), mine in groups.items():
        key = (int(p), int(d))
        steady = metrics.steady_steps(mine)
        pd.testing.assert_series_equal(pd.Series(medians[key]), steady.select_dtypes("number").median(), check_names=False)
        assert counts[key] == len(mine) and steady_ids[key] == sorted(steady["step"].astype(int))
        assert first_steps.get(key) == (float(mine.loc[~mine["closed"], "window_ns"].iloc[0])
                                        if not mine["closed"].all() else None)
        assert stalls.get(key, {}) == stall_facts_of_one_device(mine, ledger)
    assert stalls or "workers" not in variant  # the 3 spread devices each show the epoch stalls (and their forks)
    assert all(f["stall_process_start_ns"] > 0 for f in stalls.values()) if "workers" in variant else True
    assert len(stalls) == 3 if "workers" in variant else True


@pytest.mark.parametrize("variant", EVIDENCE_VARIANTS)
def test_ledgers_and_gap_rows_equal_one_device_at_a_time(variant, tmp_path):
    """scope_rows makes every device's scope ledger in one table (each device a slice), the JSON ledger rows are
    converted in one pass over it, and where_gpu_waited takes every device's summary rows at once; the reference
    runs scope_rows on one device's rows, converts one ledger at a time and joins each device's own gap frame."""
    from nsysanalyze import ledger as L
    from nsysanalyze.render.contract import ledger_row_records, records
    with nsysanalyze.open(evidence_variant(variant, tmp_path)) as a:
        rows, steady, evidence, diagnoses = a.ledger(), a._steady_ids, a.evidence(), a.diagnoses()
        waited = a.where_gpu_waited()
    together = L.scope_rows(rows, steady)
    assert len(together) == len(evidence) >= 1
    for (pid, dev), arrays in together.items():
        alone = L.scope_rows(rows[(rows["globalPid"] == pid) & (rows["deviceId"] == dev)],
                             {k: v for k, v in steady.items() if k == (pid, dev)})[(pid, dev)]
        pd.testing.assert_frame_equal(arrays.frame, alone.frame)
    ledgers = [d.ledger for d in diagnoses]
    assert any(c for led in ledgers for c in led.claimed)  # findings claimed rows: claimed_by is not all null
    assert ledger_row_records(ledgers) == [records(led.rows.assign(claimed_by=[c or None for c in led.claimed]))
                                           for led in ledgers]
    one_at_a_time = pd.concat([ev.gaps.assign(globalPid=ev.globalPid, deviceId=ev.deviceId, scope=ev.scope)
                               for ev in evidence], ignore_index=True)[waited.columns]
    assert len(waited) > 3
    pd.testing.assert_frame_equal(waited, one_at_a_time)


@pytest.mark.parametrize("ends_never_fall", [True, False])
def test_active_label_follows_its_definition(ends_never_fall):
    """_active_label on generated intervals (a unit test: no trace) against its definition taken one time at a
    time: the latest-starting interval (last in start order) when it holds t, else the first of those started
    by t that reaches furthest, when it holds t, else -1. With ends that never fall in start order (the fast
    path every real level took in the OSRT exports) and with nested intervals (the general path)."""
    rng = np.random.default_rng(7)
    starts = np.sort(rng.integers(0, 10_000, 400))
    ends = starts + rng.integers(0, 300, starts.size) * rng.integers(1, 4, starts.size) ** 3
    if ends_never_fall:
        ends = np.maximum.accumulate(ends)
    assert bool((np.diff(ends) >= 0).all()) == ends_never_fall
    labels = rng.integers(0, 9, starts.size)
    t = np.unique(np.concatenate([starts, ends, rng.integers(-50, 20_000, 500)]))
    want = np.full(t.size, -1)
    for i, x in enumerate(t):
        started = np.flatnonzero(starts <= x)
        if not started.size:
            continue
        latest = started[-1]
        furthest = started[np.argmax(ends[started])]
        if ends[latest] > x:
            want[i] = labels[latest]
        elif ends[furthest] > x:
            want[i] = labels[furthest]
    np.testing.assert_array_equal(A._active_label(starts, ends, labels, t), want)



def _label_at(starts: np.ndarray, ends: np.ndarray, causes: np.ndarray, t: int) -> int | None:
    """The cause of one level's intervals (in start order) at t, by _active_label's definition; None: no label."""
    started = np.flatnonzero(starts <= t)
    if not started.size:
        return None
    latest, furthest = started[-1], started[np.argmax(ends[started])]
    if ends[latest] > t:
        return int(causes[latest])
    return int(causes[furthest]) if ends[furthest] > t else None


@pytest.mark.parametrize("seed", [3, 4])
def test_cause_timeline_follows_its_definition(seed):
    """_cause_timeline on generated host intervals (a unit test: no trace) against its definition, one bound at a
    time: the highest-precedence level that has a label there (_active_label's rule within the level), else
    untraced. Levels of few intervals among many bounds (asked only about the bounds inside them: cuda_blocking
    first, launch and os_wait after the many OS calls) and levels asked about every unclaimed bound (the OS
    calls, the NVTX ranges)."""
    rng = np.random.default_rng(seed)
    parts = []
    for level, n, longest in [(A.BLOCKING, 30, 400), (A.OS_ACTIVE, 3000, 40), (A.LAUNCH, 60, 30), (A.WAIT, 8, 3000),
                              (A.RANGE, 20, 20_000)]:
        start = rng.integers(0, 100_000, n)
        parts.append(pd.DataFrame({"start": start, "end": start + rng.integers(0, longest, n), "globalPid": 1,
                                   "level": np.int8(level), "cause": rng.choice(list("abcdef"), n)}))
    host = pd.concat(parts, ignore_index=True)
    host = host.sort_values("start", kind="stable").reset_index(drop=True)
    host["cause"] = pd.Categorical(host["cause"])
    calls = A._lane_calls(host, np.array([1]), np.zeros(1, np.int64))
    a, b = 5_000, 95_000
    timeline = A._cause_timeline(calls, a, b, len(host["cause"].cat.categories))
    bounds, label = timeline["bounds"], timeline["label"]
    level_of, cause_of = timeline["level"][label], timeline["cause"][label]
    codes, checked = host["cause"].cat.codes.to_numpy(), 0
    for j in np.flatnonzero((bounds >= a) & (bounds < b)):
        want = (len(A.LEVELS) - 1, -1)
        for level in range(len(A.LEVELS) - 1):
            mine = (host["level"] == level).to_numpy()
            found = _label_at(host["start"].to_numpy()[mine], host["end"].to_numpy()[mine], codes[mine], bounds[j])
            if found is not None:
                want = (level, found)
                break
        assert (level_of[j], cause_of[j]) == want, (j, bounds[j])
        checked += 1
    assert checked > 5000 and len(set(level_of.tolist())) == 6  # every level, untraced too, holds some bound

def test_idle_gap_metrics_cut_at_each_frames_span():
    """idle_gap_metrics against its definition (a unit test on generated intervals: no trace): per frame and
    device, the idle cut to the span of the frame's windows (a copy with its edge intervals cut), then per
    window the intervals starting in it and the ns of those shorter than SHORT_GAP_NS. Idle lengths lie
    around SHORT_GAP_NS and the spans start and end inside idle intervals, so a cut changes which are short."""
    rng = np.random.default_rng(11)
    short = A.SHORT_GAP_NS
    idle, frames = {}, [[], []]
    for key in [(1, 0), (1, 1), (2, 0)]:
        edges = np.cumsum(rng.integers(short // 3, 3 * short, 400))
        idle[key] = (edges[0::2].copy(), edges[1::2].copy())
        for f, frame in enumerate(frames):
            n_bounds = 2 * (20 + 30 * f)  # distinct window edges, from before the first idle to after the last
            candidates = np.unique(rng.integers(edges[0] - short, edges[-1] + short, 4 * n_bounds))
            bounds = np.sort(rng.choice(candidates, n_bounds, replace=False))
            frame.append(pd.DataFrame({"globalPid": key[0], "deviceId": key[1],
                                       "window_start": bounds[0::2], "window_end": bounds[1::2]}))
    frames = [pd.concat(f, ignore_index=True) for f in frames]
    got = A.idle_gap_metrics(frames, idle)
    for windows, result in zip(frames, got):
        for key, rows in windows.groupby(["globalPid", "deviceId"]):
            ws, we = rows["window_start"].to_numpy(), rows["window_end"].to_numpy()
            s, e = A._idle_within(idle[key], int(ws.min()), int(we.max()))
            counts = [int(((s >= a) & (s < b)).sum()) for a, b in zip(ws, we)]
            shorts = [int(np.where(((s >= a) & (s < b)) & (e - s < short), e - s, 0).sum()) for a, b in zip(ws, we)]
            assert result.loc[rows.index, "idle_gap_count"].tolist() == counts
            assert result.loc[rows.index, "idle_short_gap_ns"].tolist() == shorts
