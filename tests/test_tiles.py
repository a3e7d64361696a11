"""The GPU window metrics over time tiles (metrics.gpu_metrics, metrics.time_tiles) equal the one-pass metrics."""
import numpy as np
import pandas as pd
import pytest

import nsysanalyze
from nsysanalyze import blocks as B
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

    def counted(kernels, others, tile_kernels):
        out = real(kernels, others, tile_kernels)
        if out is None:
            tiles.append(0)
            return None
        out = list(out)
        tiles.append(len(out))
        return out
    monkeypatch.setattr(M, "time_tiles", counted)
    monkeypatch.setattr(M, "TILE_KERNELS", tile)
    tiled_summary, tiled_ledger = _results(path)
    assert max(tiles) >= 3  # the tiled path ran
    pd.testing.assert_frame_equal(tiled_summary, summary)
    pd.testing.assert_frame_equal(tiled_ledger, ledger)


def _overlapping(frame, t0, t1):
    """The rows a tile [t0, t1) holds: those starting in it and those started before it that end after t0."""
    s, e = frame["start"], frame["end"]
    return frame[((s >= t0) & (s < t1)) | ((s < t0) & (e > t0))]["start"].tolist()


def test_time_tiles_carry_the_activities_that_reach_past_a_cut():
    """Hand-made frames (not a trace): cuts at the first start of every 2 kernels of a block; a long kernel
    (0-100) and a copy (5-40) belong to every tile they overlap, a kernel ending exactly at a cut does not
    reach past it. One block: cuts at 20 and 50; blocks of 3: at 20, 30 and 60; blocks of 1: at every start."""
    kernels = pd.DataFrame({"start": [0, 10, 20, 30, 50, 60], "end": [100, 20, 25, 35, 55, 61]})
    copies = pd.DataFrame({"start": [5, 52], "end": [40, 53]})
    tiles = list(M.time_tiles([kernels], (copies,), 2))
    assert [[f["start"].tolist() for f in rows] for _, rows in tiles] == [
        [[0, 10], [5]],        # kernel 10-20 ends at the cut (20): not carried
        [[0, 20, 30], [5]],
        [[0, 50, 60], [52]]]   # the copy ended at 40
    for blocks, cuts in (([kernels], [20, 50]), (B.frame_blocks(kernels, 3), [20, 30, 60]),
                         (B.frame_blocks(kernels, 1), [10, 20, 30, 50, 60])):
        tiles = list(M.time_tiles(blocks, (copies,), 2))
        bounds = [M.NEVER_BEFORE, *cuts, M.NEVER_AFTER]
        assert [b for b, _ in tiles] == list(zip(bounds[:-1], bounds[1:]))
        for (t0, t1), (tile, copy) in tiles:
            assert tile["start"].tolist() == _overlapping(kernels, t0, t1)
            assert copy["start"].tolist() == _overlapping(copies, t0, t1)
    assert M.time_tiles([kernels], (copies,), 6) is None  # one tile
    unsorted = kernels.iloc[[1, 0, 2, 3, 4, 5]]
    assert M.time_tiles([unsorted], (copies,), 2) is None
    assert M.time_tiles([kernels.iloc[3:], kernels.iloc[:3]], (copies,), 2) is None  # blocks out of order


def test_kernels_starting_at_a_cut_belong_to_the_later_tile():
    """Hand-made kernels (not a trace) with equal starts across block cuts: 0, 10, 10 | 10, 10 | 30. A cut equal
    to the tile's start is no cut, and every kernel is in exactly the tiles it overlaps."""
    kernels = pd.DataFrame({"start": [0, 10, 10, 10, 10, 30], "end": [5, 12, 13, 14, 15, 31]})
    none = pd.DataFrame({"start": np.empty(0, np.int64), "end": np.empty(0, np.int64)})
    tiles = list(M.time_tiles([kernels.iloc[:3], kernels.iloc[3:5], kernels.iloc[5:]], (none,), 3))
    assert [(b, rows[0]["start"].tolist()) for b, rows in tiles] == [
        ((M.NEVER_BEFORE, 10), [0]), ((10, 30), [10, 10, 10, 10]), ((30, M.NEVER_AFTER), [30])]


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
        got = M.gpu_metrics(windows, [kernels], copies, sets, np.empty(0, np.int64), tile_kernels=tile)
        assert got.loc[0, ["window_ns", "busy_ns", "kernel_ns", "kernel_count", "kernel_sum_ns", "idle_ns"]].tolist() == \
            [100, 70, 70, 4, 80, 30]
        assert got.loc[0, "idle_fraction"] == pytest.approx(0.3)
