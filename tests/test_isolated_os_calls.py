"""Isolated OS calls (issue 20): the attribution leaves the OS_ACTIVE calls that overlap no other interval of a
level up to OS_ACTIVE out of its cause timeline and adds their ns on top (attribution._isolated_os_calls,
_isolated_overlay). Its rows must equal the attribution with every call in the timeline: on real exports, and on
a real export's attribution inputs with random short OS calls added (a unit test: the added calls are made here,
at random times, lengths 0 ns to 2 ms, so that they straddle idle edges, step points, sync returns, lower-level
bounds and each other)."""
import numpy as np
import pandas as pd
import pytest

import nsysanalyze
from nsysanalyze import attribution as A
from conftest import fixture_trace, shared_trace

OSRT = [("fixtures", "resnet18_baseline.sqlite"), ("fixtures", "compile_warmup.sqlite"),
        ("fixtures", "vit_l32_ddp.sqlite"), ("fixtures", "gloo_8rank_slow_2.sqlite"),
        ("fixtures", "empty_cache_per_step.sqlite"), ("shared", "public/bwyogatama__report1.sqlite")]


def _inputs(where: str, name: str) -> tuple:
    path = fixture_trace(name) if where == "fixtures" else shared_trace(name)
    with nsysanalyze.open(path) as a:
        a.keep_attribution_inputs = True
        kept = a._kept_attribution()
    if kept is None:
        pytest.skip(f"{name}: no GPU window")
    return kept


def _both(monkeypatch, capture, steps, idle, host, syncs) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    """(attribution with the isolated calls split out, attribution with none split out, calls split out)."""
    found = []
    real = A._isolated_os_calls

    def counting(start, end, level):
        out = real(start, end, level)
        found.append(out.size)
        return out

    monkeypatch.setattr(A, "_isolated_os_calls", counting)
    split = A.attribute(capture, steps, idle, host, syncs)
    monkeypatch.setattr(A, "_isolated_os_calls", lambda start, end, level: np.empty(0, np.int64))
    whole = A.attribute(capture, steps, idle, host, syncs)
    monkeypatch.undo()
    return split, whole, sum(found)


@pytest.mark.parametrize("where,name", OSRT, ids=[n for _, n in OSRT])
def test_split_equals_whole_timeline_on_real_exports(monkeypatch, where, name):
    capture, steps, idle, host, syncs = _inputs(where, name)
    split, whole, n = _both(monkeypatch, capture, steps, idle, host, syncs)
    pd.testing.assert_frame_equal(split, whole)
    if name == "resnet18_baseline.sqlite":  # 997 of its pthread_cond_signal calls during GPU idle
        assert n > 500


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("chunks", [None, (7, 13)], ids=["chunks", "tiny-chunks"])
def test_split_equals_whole_timeline_with_random_os_calls(monkeypatch, seed, chunks):
    """Random OS_ACTIVE calls added to resnet18_baseline's inputs (their causes two new names); with tiny chunks
    (IDLE_CHUNK, HOST_CHUNK) the calls a chunk takes are cut at many chunk edges."""
    capture, steps, idle, host, syncs = _inputs("fixtures", "resnet18_baseline.sqlite")
    rng = np.random.default_rng(seed)
    # each step's CPU start moved into an idle interval of its window, where it takes effect at the next host
    # edge (an added call's end, below), and its first launch to the window's end
    idle_s, idle_e = idle[next(iter(idle))]
    mid = (idle_s + idle_e) // 2
    inside = np.searchsorted(mid, steps["window_start"].to_numpy()) + 1
    steps = steps.assign(cpu_start=mid[np.minimum(inside, mid.size - 1)], first_launch=steps["window_end"])
    pid = int(capture["globalPid"].iloc[0])
    a, b = int(capture["window_start"].min()), int(capture["window_end"].max())
    n = 3000
    start = rng.integers(a - 1000, b + 1000, n)
    length = rng.choice([0, 1, 7, 51, 400, 3_000, 40_000, 2_000_000], n, p=[.1, .1, .2, .3, .1, .1, .07, .03])
    # some start exactly at idle edges and other host intervals' ends
    edges = np.concatenate([idle_s[:200], host["end"].to_numpy()[:200]])
    start[:edges.size] = edges
    # and some hold a step point or a sync return (which take effect at the next host edge: the call's end)
    points = np.concatenate([steps[c].to_numpy() for c in ("cpu_start", "window_end", "first_launch")]
                            + [syncs["end"].to_numpy()[:300]])
    start[edges.size:edges.size + points.size] = points - 20
    length[edges.size:edges.size + points.size] = 51
    added = pd.DataFrame({"start": start, "end": start + length, "globalPid": pid,
                          "level": np.int8(A.OS_ACTIVE),
                          "cause": pd.Categorical(rng.choice(["pthread_cond_signal", "write"], n))})
    host = A.concat_host_parts([host, added])
    if chunks:
        monkeypatch.setattr(A, "IDLE_CHUNK", chunks[0])
        monkeypatch.setattr(A, "HOST_CHUNK", chunks[1])
    split, whole, found = _both(monkeypatch, capture, steps, idle, host, syncs)
    pd.testing.assert_frame_equal(split, whole)
    assert found > 500


def test_isolated_os_calls_are_those_overlapping_no_call_up_to_os_active():
    """Exact positions on a hand-made lane (a unit test): touching calls are isolated, overlapping ones, empty
    ones and calls of other levels are not; a launch (level LAUNCH) over an OS call does not count."""
    #                  0     1      2      3      4      5      6      7
    start = np.array([0,    10,    20,    20,    40,    50,    60,    70], np.int64)
    end = np.array([10,     20,    30,    25,    40,    55,    80,    75], np.int64)
    level = np.array([A.OS_ACTIVE, A.OS_ACTIVE, A.OS_ACTIVE, A.OS_ACTIVE, A.OS_ACTIVE, A.BLOCKING, A.OS_ACTIVE,
                      A.LAUNCH], np.int8)
    # 0, 1 touch (isolated); 2, 3 overlap; 4 is empty; 5 is not OS_ACTIVE; 6 holds a launch (7): isolated
    assert A._isolated_os_calls(start, end, level).tolist() == [0, 1, 6]
