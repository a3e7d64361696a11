"""`nsysanalyze timeline`: the Chrome trace event export, checked against the traces themselves.

Inputs are the project's real fixtures and ../shared/traces exports (skipped when absent); counts are
checked with SQL on the export, idle against the attribution (Analysis.gaps), findings against
`diagnose --format json`.
"""
import json
import sqlite3
from collections import defaultdict

import numpy as np
import pandas as pd
import pytest
from conftest import fixture_trace, shared_trace
from hostile import TERMINAL_PAYLOAD, hostile_copy

import nsysanalyze
from nsysanalyze import attribution, trace_events
from nsysanalyze.cli import main
from nsysanalyze.metrics import api_categories
from nsysanalyze.trace_events import proper_lanes

FINDING_KEYS = ["title", "gain_ns", "gain_pct", "confidence", "severity", "fix", "rule", "scope"]


def run(capsys, *argv) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in argv])
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


def timeline(capsys, tmp_path, *args) -> dict:
    out = tmp_path / "t.json"
    code, _, err = run(capsys, "timeline", *args, "-o", out, "--force")
    assert code == 0, err
    raw = out.read_bytes()
    assert all(b >= 0x20 or b == 0x0A for b in raw) and raw.isascii()  # strings escaped: no control bytes
    doc = json.loads(raw)
    check_valid(doc)
    return doc


def ns(us: float) -> int:
    return round(us * 1000)


def check_valid(doc: dict) -> None:
    """Trace event format: every event has ph, ts, pid, tid; X events dur >= 0; slices nest on each track."""
    assert doc["displayTimeUnit"] == "ns" and isinstance(doc["traceEvents"], list)
    per_track = defaultdict(list)
    for e in doc["traceEvents"]:
        assert {"ph", "ts", "pid", "tid"} <= set(e), e
        assert e["ph"] in ("X", "i", "M")
        if e["ph"] == "X":
            assert e["dur"] >= 0
            per_track[(e["pid"], e["tid"])].append((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])))
    for key, spans in per_track.items():
        open_ends = []
        for s, end in sorted(spans, key=lambda x: (x[0], -x[1])):
            while open_ends and open_ends[-1] <= s:
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1], f"slice [{s}, {end}) crosses its parent on {key}"
            open_ends.append(end)


def tracks(doc: dict) -> dict[tuple[int, int], str]:
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}


def events_on(doc: dict, prefix: str) -> dict[str, list[dict]]:
    """Non-metadata events of the tracks whose name starts with ``prefix``, by track name without the lane."""
    names = tracks(doc)
    out = defaultdict(list)
    for e in doc["traceEvents"]:
        name = names.get((e["pid"], e["tid"]), "")
        if e["ph"] != "M" and name.startswith(prefix):
            out[name.split(" (lane")[0]].append(e)
    return out


def meta(doc: dict) -> dict:
    return doc["metadata"]["nsysanalyze"]


def con_rows(path, sql: str, args=()) -> list[tuple]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


def sql_count(path, sql: str, args) -> int:
    return con_rows(path, sql, args)[0][0]


def test_default_window_counts_match_the_trace(capsys, tmp_path):
    path = fixture_trace("resnet18_baseline.sqlite")
    doc = timeline(capsys, tmp_path, path)
    t = meta(doc)["traces"][0]
    t0, t1 = t["window_start_ns"], t["window_end_ns"]
    assert t["steps"] == [1, 2] and t["median_step"] in t["steps"] and t1 > t0
    streams = events_on(doc, "GPU 0 stream ")
    assert streams
    for name, events in streams.items():
        stream = int(name.rsplit(" ", 1)[1])
        expected = sum(sql_count(path, f'SELECT count(*) FROM {table} WHERE deviceId = 0 AND streamId = ? '
                                       'AND start < ? AND "end" > ?', (stream, t1, t0))
                       for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                                     "CUPTI_ACTIVITY_KIND_MEMSET"))
        assert len(events) == expected > 0
    nvtx = events_on(doc, "thread ")
    for name, events in nvtx.items():
        if name.endswith(": NVTX"):
            tid = int(name.split()[1].rstrip(":"))
            assert len(events) == sql_count(path, 'SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN (59, 60) AND '
                                                  '"end" >= start AND (globalTid & 16777215) = ? AND start < ? '
                                                  'AND "end" > ?', (tid, t1, t0)) > 0
    names = dict(con_rows(path, "SELECT id, value FROM StringIds WHERE value LIKE 'cu%'"))
    blocking = [i for i, c in api_categories(names).items() if c in trace_events.BLOCKING_APIS]
    calls = {name: ev for name, ev in nvtx.items() if name.endswith(": CUDA")}
    assert calls
    for name, events in calls.items():
        tid = int(name.split()[1].rstrip(":"))
        assert len(events) == sql_count(path, f'SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE nameId IN '
                                              f'({",".join(map(str, blocking))}) AND (globalTid & 16777215) = ? AND '
                                              'start < ? AND "end" > ?', (tid, t1, t0))
    steps = events_on(doc, "GPU 0 steps")["GPU 0 steps"]
    marked = [e for e in steps if e["name"] == "median step"]
    assert len(marked) == 1 and marked[0]["args"]["step"] == t["median_step"]
    assert {e["name"] for e in steps if e["ph"] == "X"} >= {"Batch 11", "Batch 12"}  # names as in the tables


def idle_by_step(doc: dict) -> dict[tuple[int, int], int]:
    """Idle slice ns per (GPU, step), over every process."""
    out = defaultdict(int)
    for name, events in events_on(doc, "GPU ").items():
        if name.endswith(" idle"):
            for e in events:
                out[(int(name.split()[1]), e["args"]["step"])] += ns(e["dur"])
    return out


@pytest.mark.parametrize("name", ["resnet18_baseline.sqlite", "io_midstep.sqlite", "resnet18_loader_noranges.sqlite",
                                  "vit_l32_ddp.sqlite"])
def test_idle_slices_sum_to_the_attributed_idle(capsys, tmp_path, name):
    path = fixture_trace(name)
    doc = timeline(capsys, tmp_path, path)
    gaps = nsysanalyze.open(path).gaps()
    idle = idle_by_step(doc)
    chosen = meta(doc)["traces"][0]["steps"]
    assert chosen
    for dev in gaps["deviceId"].unique():
        for step in chosen:
            expected = int(gaps.loc[(gaps["step"] == step) & (gaps["deviceId"] == dev), "ns"].sum())
            assert idle[(dev, step)] == expected > 0
    whole = idle_by_step(timeline(capsys, tmp_path, path, "--all"))
    assert sum(whole.values()) == int(gaps["ns"].sum())
    per_device = gaps.groupby("deviceId")["ns"].sum()
    assert {d: sum(v for (dev, _), v in whole.items() if dev == d) for d in per_device.index} == per_device.to_dict()


def test_idle_slices_are_named_by_cause(capsys, tmp_path):
    doc = timeline(capsys, tmp_path, fixture_trace("io_midstep.sqlite"))
    idle = [e for events in events_on(doc, "GPU ").values() for e in events if e["cat"] == "idle"]
    causes = {e["name"] for e in idle}
    assert {e["args"]["cause_kind"] for e in idle} <= {"cuda_blocking", "os_runtime", "launch", "os_wait",
                                                        "nvtx_range", "untraced"}
    assert all(e["args"]["ns"] == ns(e["dur"]) for e in idle)
    assert len(causes) > 1


@pytest.mark.parametrize("args", [["fixtures/resnet18_baseline.sqlite"], ["fixtures/io_midstep.sqlite", "--all"]])
def test_finding_events_match_the_json_report(capsys, tmp_path, args):
    code, out, err = run(capsys, "diagnose", "--format", "json", args[0])
    assert code in (0, None), err
    report = json.loads(out)
    doc = timeline(capsys, tmp_path, *args)
    found = [e for events in events_on(doc, "GPU ").values() for e in events if e["cat"] == "finding"]
    assert [{k: e["args"][k] for k in FINDING_KEYS} for e in found] == [
        {k: f[k] for k in FINDING_KEYS} for f in report["findings"]]
    assert all(e["ph"] == "i" and e["name"] == e["args"]["title"] for e in found)
    assert len(found) == len(report["findings"]) > 0
    assert [v["headline"] for v in meta(doc)["verdict"]]


def test_ranks_of_one_job_share_one_axis(capsys, tmp_path):
    paths = [fixture_trace("vit_l32_2gpu_ddp_1.sqlite"), fixture_trace("vit_l32_2gpu_ddp_0.sqlite")]
    doc = timeline(capsys, tmp_path, *paths, "--steps", "1")
    m = meta(doc)
    assert m["aligned_on_utc_clock"]
    assert [t["path"].rsplit("_", 1)[1] for t in m["traces"]] == ["0.sqlite", "1.sqlite"]  # rank order
    assert m["traces"][0]["steps"] == m["traces"][1]["steps"] == [m["traces"][0]["median_step"]]
    shift = [t["clock_shift_ns"] for t in m["traces"]]
    start = [t["session_start_utc_ns"] for t in m["traces"]]
    assert shift[1] - shift[0] == start[1] - start[0]
    procs = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert len(procs) == 2 and all(events_on(doc, f"GPU {d} stream") for d in (0, 1))
    steps = events_on(doc, "GPU ")
    medians = [e for name, ev in steps.items() if name.endswith("steps") for e in ev if e["name"] == "median step"]
    assert len(medians) == 2


def test_several_processes_of_one_file_are_processes(capsys, tmp_path):
    doc = timeline(capsys, tmp_path, shared_trace("public/nsys-ai__mfu_2gpu_after.sqlite"))
    gpu_pids = {pid for (pid, _), name in tracks(doc).items() if " stream " in name}
    assert len(gpu_pids) == 2
    nccl = [e for ev in events_on(doc, "GPU ").values() for e in ev if e.get("cat") == "nccl"]
    assert nccl and all(e["name"].startswith("nccl") and e["args"]["kernel"] for e in nccl)


def test_no_steps_gives_the_whole_capture(capsys, tmp_path):
    path = shared_trace("public/Lyrics-WangKL__darknet1img.sqlite")
    doc = timeline(capsys, tmp_path, path)
    t = meta(doc)["traces"][0]
    if t["steps"]:
        pytest.skip("steps were inferred for this trace")
    streams = events_on(doc, "GPU ")
    gpu = sum(len(ev) for name, ev in streams.items() if " stream " in name)
    tables = [r for (r,) in con_rows(path, "SELECT name FROM sqlite_master WHERE name IN ('CUPTI_ACTIVITY_KIND_KERNEL', "
                                           "'CUPTI_ACTIVITY_KIND_MEMCPY', 'CUPTI_ACTIVITY_KIND_MEMSET')")]
    assert gpu == sum(sql_count(path, f'SELECT count(*) FROM {t} WHERE "end" IS NOT NULL', ()) for t in tables) > 1000


def test_copies_are_named_by_kind_and_memory(capsys, tmp_path):
    doc = timeline(capsys, tmp_path, fixture_trace("dtoh_pageable.sqlite"), "--all")
    copies = [e for ev in events_on(doc, "GPU ").values() for e in ev if e.get("cat") == "memcpy"]
    assert "memcpy DtoH pageable" in {e["name"] for e in copies}
    assert all(e["args"]["bytes"] > 0 for e in copies)


def test_trace_strings_are_escaped(capsys, tmp_path):
    path = hostile_copy(fixture_trace("resnet18_baseline.sqlite"), tmp_path, payload=TERMINAL_PAYLOAD,
                        kernel_payload=TERMINAL_PAYLOAD, process_payload=TERMINAL_PAYLOAD, name="hostile.sqlite")
    doc = timeline(capsys, tmp_path, path)
    names = [e["name"] for e in doc["traceEvents"] if e["ph"] == "X"]
    assert any(n.startswith(TERMINAL_PAYLOAD) for n in names)  # kept, as JSON escapes
    procs = [e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"]
    assert all(TERMINAL_PAYLOAD in p for p in procs)


def test_output_safety(capsys, tmp_path):
    path = fixture_trace("gpu_bound.sqlite")
    code, _, err = run(capsys, "timeline", path, "-o", path, "--force")
    assert code == 2 and "is the input file" in err and err.count("\n") == 1
    out = tmp_path / "t.json"
    out.write_text("keep me")
    code, _, err = run(capsys, "timeline", path, "-o", out)
    assert code == 2 and "already exists; pass --force" in err and out.read_text() == "keep me"
    code, _, err = run(capsys, "timeline", path, "-o", tmp_path)
    assert code == 2 and "is a directory" in err
    code, stdout, err = run(capsys, "timeline", path, "-o", out, "--force")
    assert code in (0, None) and "ui.perfetto.dev" in stdout
    check_valid(json.loads(out.read_text()))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json"]  # no temporary file left


def test_files_of_different_jobs_are_refused(capsys, tmp_path):
    code, _, err = run(capsys, "timeline", fixture_trace("resnet18_baseline.sqlite"),
                       fixture_trace("gpu_bound.sqlite"), "-o", tmp_path / "t.json")
    assert code == 2 and "not one job" in err and err.count("\n") == 1
    assert not (tmp_path / "t.json").exists()


def test_large_output_warns_with_the_event_count(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(trace_events, "LARGE_EVENTS", 100)
    out = tmp_path / "t.json"
    code, stdout, err = run(capsys, "timeline", fixture_trace("gpu_bound.sqlite"), "-o", out)
    count = json.loads(out.read_text())["metadata"]["nsysanalyze"]["events"]
    assert code in (0, None) and f"{count:,} events" in err and "warning" in err and count >= 100


def test_diagnose_and_report_link_the_timeline(capsys, tmp_path):
    path = fixture_trace("gpu_bound.sqlite")
    code, out, _ = run(capsys, "diagnose", path)
    assert code in (0, None)
    hint = [line for line in out.splitlines() if "nsysanalyze timeline" in line]
    assert len(hint) == 1 and str(path) in hint[0] and "ui.perfetto.dev" in hint[0]
    code, _, err = run(capsys, "report", path, "-o", tmp_path / "r.html")
    assert code in (0, None), err
    assert f"nsysanalyze timeline {path} -o timeline.json" in (tmp_path / "r.html").read_text()


def test_proper_lanes_nest_every_lane():
    """Random intervals (fixed seed): each lane nests properly, and intervals that nest stay on one lane."""
    rng = np.random.default_rng(0)

    def nests(s, e):
        ends = []
        for a, b in sorted(zip(s.tolist(), e.tolist()), key=lambda x: (x[0], -x[1])):
            while ends and ends[-1] <= a:
                ends.pop()
            if ends and b > ends[-1]:
                return False
            ends.append(b)
        return True
    crossed = 0
    for _ in range(200):
        n = int(rng.integers(1, 60))
        s = rng.integers(0, 100, n)
        e = s + rng.integers(0, 30, n)
        lane = proper_lanes(s, e)
        assert all(nests(s[lane == k], e[lane == k]) for k in range(lane.max() + 1))
        if nests(s, e):
            assert not lane.any()
        else:
            crossed += 1
    assert crossed > 100


@pytest.mark.parametrize("rel", ["public/YoonKyonghwan__poolformer.sqlite", "public/abacus__resnet101_streams_report1.sqlite",
                                 "public/nvfuser__report1.sqlite", "public/casio__nerf_output-file.sqlite"])
def test_valid_on_other_projects_exports(capsys, tmp_path, rel):
    doc = timeline(capsys, tmp_path, shared_trace(rel), "--all")  # checked inside: format, nesting, escaping
    assert meta(doc)["events"] == sum(1 for e in doc["traceEvents"] if e["ph"] in ("X", "i")) - 1  # - the verdict


def test_os_calls_are_those_overlapping_gpu_idle(capsys, tmp_path):
    doc = timeline(capsys, tmp_path, shared_trace("public/pipit__perlmutter-cloverleaf-cuda.sqlite"), "--all")
    os_calls = [e for name, ev in events_on(doc, "thread ").items() if name.endswith(": OS") for e in ev]
    idle = sorted((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])) for name, ev in events_on(doc, "GPU ").items()
                  if name.endswith(" idle") for e in ev)
    starts = np.array([s for s, _ in idle])
    ends = np.maximum.accumulate(np.array([e for _, e in idle]))
    assert {"write", "fflush"} <= {e["name"] for e in os_calls}  # its ioctls run inside CUDA calls: theirs
    for e in os_calls:
        s, end = ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])
        k = np.searchsorted(starts, end, side="left") - 1  # the last idle slice starting before the call ends
        assert k >= 0 and ends[k] > s, e


@pytest.mark.parametrize("path", ["fixtures/io_midstep.sqlite", "fixtures/sync_per_param.sqlite",
                                  "fixtures/vit_l32_2gpu_ddp_0.sqlite", "public/nsys-ai__mfu_2gpu_after.sqlite"])
def test_idle_segments_regroup_to_the_gaps(path, monkeypatch):
    """attribution.idle_segments are the segments attribute() sums: per (process, GPU, step, cause) the same ns;
    idle intervals cut every few host calls (HOST_CHUNK: bounded cause timelines) give the same segments."""
    path = shared_trace(path) if path.startswith("public/") else fixture_trace(path.split("/")[1])
    a = nsysanalyze.open(path)
    a.keep_attribution_inputs = True
    keys = ["globalPid", "deviceId", "step", "cause_kind", "cause"]
    segments = a.idle_segments(*trace_events.EVERYTHING)
    assert (segments["end"] > segments["start"]).all()
    summed = segments.assign(ns=segments["end"] - segments["start"]).groupby(keys)["ns"].sum()
    expected = a.gaps().groupby(keys)["ns"].sum()
    assert len(expected) > 3 and summed.to_dict() == expected[expected > 0].to_dict()
    t0, t1 = (int(x) for x in segments["start"].quantile([0.3, 0.6]))  # any window: the segments cut to it
    cut = a.idle_segments(t0, t1)
    inside = segments.assign(start=segments["start"].clip(lower=t0), end=segments["end"].clip(upper=t1))
    inside = inside[inside["end"] > inside["start"]]
    assert (cut["end"] - cut["start"]).sum() == (inside["end"] - inside["start"]).sum() > 0
    monkeypatch.setattr(attribution, "HOST_CHUNK", 3)
    pd.testing.assert_frame_equal(a.idle_segments(*trace_events.EVERYTHING), segments)
