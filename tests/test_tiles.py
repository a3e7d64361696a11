"""The GPU window metrics over time tiles (metrics.gpu_metrics, metrics.time_tiles) equal the one-pass metrics."""
import numpy as np
import pandas as pd
import pytest

import nsysanalyze
from nsysanalyze import metrics as M
from conftest import fixture_trace, shared_trace

# a DDP capture (NCCL kernels beside compute, DtoD copies), HtoD copies with prefetch, a gloo rank (CPU
# collectives), other projects' exports: two GPUs in one file (NCCL), many streams
REAL = [("fixtures", "vit_l32_ddp.sqlite", 300), ("fixtures", "resnet18_baseline.sqlite", 200),
        ("fixtures", "resnet18_prefetch.sqlite", 200), ("fixtures", "gloo_8rank_slow_2.sqlite", 40),
        ("shared", "public/nsys-ai__mfu_2gpu_after.sqlite", 500),
        ("shared", "public/abacus__resnet101_streams_report1.sqlite", 500)]


def _results(path):
    with nsysanalyze.open(path) as a:
        return pd.concat([a.summary(), a.steps()]), a.ledger()


@pytest.mark.parametrize("where,name,tile", REAL, ids=[r[1] for r in REAL])
def test_tiles_equal_one_pass_on_real_exports(monkeypatch, where, name, tile):
    """With tiles of a few hundred kernels (many tiles; the default is one tile for these exports) every
    summary, step and ledger value is the one-pass value, ratios included."""
    path = fixture_trace(name) if where == "fixtures" else shared_trace(name)
    summary, ledger = _results(path)
    tiles = []
    real = M.time_tiles

    def counted(frames, tile_kernels):
        out = real(frames, tile_kernels)
        tiles.append(0 if out is None else len(out))
        return out
    monkeypatch.setattr(M, "time_tiles", counted)
    monkeypatch.setattr(M, "TILE_KERNELS", tile)
    tiled_summary, tiled_ledger = _results(path)
    assert max(tiles) >= 3  # the tiled path ran
    pd.testing.assert_frame_equal(tiled_summary, summary)
    pd.testing.assert_frame_equal(tiled_ledger, ledger)


def test_time_tiles_carry_the_activities_that_reach_past_a_cut():
    """Hand-made frames (not a trace): cuts at every 2nd kernel start; a long kernel (0-100) and a copy
    (5-40) belong to every tile they overlap, a kernel ending exactly at a cut does not reach past it."""
    kernels = pd.DataFrame({"start": [0, 10, 20, 30, 50, 60], "end": [100, 20, 25, 35, 55, 61]})
    copies = pd.DataFrame({"start": [5, 52], "end": [40, 53]})
    tiles = M.time_tiles((kernels, copies), 2)
    assert [b for b, _ in tiles] == [(M.NEVER_BEFORE, 20), (20, 50), (50, M.NEVER_AFTER)]
    assert [[r.tolist() for r in rows] for _, rows in tiles] == [
        [[0, 1], [0]],        # kernel 1 ends at the cut (20): not carried
        [[0, 2, 3], [0]],
        [[0, 4, 5], [1]]]     # the copy ended at 40
    assert M.time_tiles((kernels, copies), 6) is None  # one tile
    unsorted = kernels.iloc[[1, 0, 2, 3, 4, 5]]
    assert M.time_tiles((unsorted, copies), 2) is None


def test_tiled_sums_on_hand_made_activities():
    """Hand-made kernels, one window 0-100 ns (not a trace): busy, kernel and count values with tiles of one
    kernel equal the exact values (union 0-40 and 60-90: 70 ns busy; 4 kernels; summed durations 80 ns)."""
    kernels = pd.DataFrame({"start": [0, 10, 30, 60], "end": [30, 20, 40, 90], "deviceId": 0, "globalPid": 1,
                            "nameId": 7})
    copies = pd.DataFrame({c: np.empty(0, np.int64) for c in ["start", "end", "deviceId", "globalPid", "bytes",
                                                              "copyKind", "srcKind", "dstKind"]})
    sets = copies[["start", "end", "deviceId", "globalPid"]]
    windows = pd.DataFrame({"globalPid": [1], "deviceId": [0], "window_start": [0], "window_end": [100]})
    for tile in (1, 2, 10):
        got = M.gpu_metrics(windows, kernels, copies, sets, np.empty(0, np.int64), tile_kernels=tile)
        assert got.loc[0, ["window_ns", "busy_ns", "kernel_ns", "kernel_count", "kernel_sum_ns", "idle_ns"]].tolist() == \
            [100, 70, 70, 4, 80, 30]
        assert got.loc[0, "idle_fraction"] == pytest.approx(0.3)
