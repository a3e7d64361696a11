"""The per-kernel table over blocks of kernels (kernels.aggregate) and the exact order statistics behind its
medians (blocks.order_statistics) equal the one-block results."""
import numpy as np
import pandas as pd
import pytest

import nsysanalyze
from nsysanalyze import blocks as B
from nsysanalyze import kernels as K
from conftest import fixture_trace, shared_trace

# one GPU with steps, a DDP rank (NCCL beside compute), two GPUs in one file, many streams and kernel names
REAL = [("fixtures", "resnet18_baseline.sqlite"), ("fixtures", "vit_l32_ddp.sqlite"),
        ("shared", "public/nsys-ai__mfu_2gpu_after.sqlite"), ("shared", "public/abacus__resnet101_streams_report1.sqlite")]


def _inputs(where, name):
    path = fixture_trace(name) if where == "fixtures" else shared_trace(name)
    with nsysanalyze.open(path) as a:
        kernels = a._kernels  # as read, before the pass drops the columns it is done with
        return kernels, K.step_windows(a.steps()), a.trace.strings(kernels["demangledId"].unique())


def _cuts(n: int, *at: int) -> list[slice]:
    bounds = [0, *at, n]
    return [slice(a, b) for a, b in zip(bounds[:-1], bounds[1:])]


@pytest.mark.parametrize("where,name", REAL, ids=[r[1] for r in REAL])
def test_kernel_table_over_blocks_equals_one_block(where, name):
    """Blocks of 97 and 1,000 kernels (two or more), and three unequal blocks, give the one-block table: counts, sums,
    extremes, medians, shares and per-step columns, exactly."""
    kernels, steps, names = _inputs(where, name)
    one = K.aggregate([kernels], names, steps, name_column="demangledId")
    n = len(kernels)
    for blocks in (B.frame_blocks(kernels, 97), B.frame_blocks(kernels, 1000),
                   [kernels.iloc[s] for s in _cuts(n, n // 7, n // 2 + 3)]):
        assert len(blocks) >= 2
        pd.testing.assert_frame_equal(K.aggregate(blocks, names, steps, name_column="demangledId"), one)


def test_kernel_table_medians_walk_the_blocks_when_the_budget_is_small(monkeypatch):
    """With a budget of 50 values the medians take counting walks before the gathering one (real kernels of
    resnet18_baseline in blocks of 500) and still equal the one-block medians."""
    kernels, steps, names = _inputs("fixtures", "resnet18_baseline.sqlite")
    one = K.aggregate([kernels], names, steps, name_column="demangledId")
    walks = []
    real = B.order_statistics

    def small_budget(pairs, *args, **kwargs):
        def counted():
            walks.append(1)
            return pairs()
        return real(counted, *args, budget=50)
    monkeypatch.setattr(K, "order_statistics", small_budget)
    got = K.aggregate(B.frame_blocks(kernels, 500), names, steps, name_column="demangledId")
    assert len(walks) >= 3
    pd.testing.assert_frame_equal(got, one)


def _reference(code, value, group, rank):
    return np.array([np.sort(value[code == g])[r] for g, r in zip(group, rank)], dtype=np.int64)


def test_order_statistics_on_hand_made_values():
    """Hand-made values (not a trace): group 0 = 5, 1, 9, 1, 7 (sorted 1 1 5 7 9), group 1 = 4, 4 (one value),
    in blocks of two; ranks 0, 2, 4 of group 0 and 1 of group 1 with budgets from 1 (every range narrowed
    to one value) to 10 (one gathering walk)."""
    code = np.array([0, 1, 0, 0, 1, 0, 0])
    value = np.array([5, 4, 1, 9, 4, 1, 7])

    def pairs():
        return ((code[s], value[s]) for s in _cuts(7, 2, 4, 6))
    group, rank = np.array([0, 0, 0, 1]), np.array([0, 2, 4, 1])
    lo, hi = np.array([1, 1, 1, 4]), np.array([9, 9, 9, 4])
    for budget in (1, 2, 3, 10):
        got = B.order_statistics(pairs, group, rank, lo, hi, np.array([5, 2]), budget=budget)
        assert got.tolist() == [1, 5, 9, 4]


def test_order_statistics_against_a_sort():
    """Random values (not a trace) of 1-5 groups in 0-4 cuts, ranges from 0-1 to 0-10^12 with negative offsets,
    budgets of 1-50 values: every asked rank (first, both middles, last) is the sorted array's value."""
    rng = np.random.default_rng(20)
    for trial in range(400):
        n = int(rng.integers(1, 300))
        code = rng.integers(0, int(rng.integers(1, 6)), n)
        value = rng.integers(0, [2, 3, 1000, 10**12][trial % 4], n) - int(rng.integers(0, 9))
        counts = np.bincount(code)
        group = np.array([g for g in np.unique(code) for _ in range(4)])
        rank = np.array([r for g in np.unique(code) for r in (0, (counts[g] - 1) // 2, counts[g] // 2, counts[g] - 1)])
        lo = np.array([value[code == g].min() for g in group])
        hi = np.array([value[code == g].max() for g in group])
        cuts = _cuts(n, *sorted(rng.integers(0, n, int(rng.integers(0, 5))).tolist()))

        def pairs():
            return ((code[s], value[s]) for s in cuts)
        got = B.order_statistics(pairs, group, rank, lo, hi, counts, budget=int(rng.integers(1, 50)))
        np.testing.assert_array_equal(got, _reference(code, value, group, rank))


def test_blocks_of_a_frame_are_its_rows_in_order():
    """frame_blocks cuts a frame into runs of rows (the last one shorter) and in_start_order sees an
    inversion inside a block and across a cut (hand-made frame, not a trace)."""
    frame = pd.DataFrame({"start": [0, 5, 5, 9, 12]})
    blocks = B.frame_blocks(frame, 2)
    assert [b["start"].tolist() for b in blocks] == [[0, 5], [5, 9], [12]]
    assert len(B.frame_blocks(frame, 5)) == 1 and B.frame_blocks(frame, 5)[0] is frame
    assert B.in_start_order(blocks) and sum(len(b) for b in blocks) == 5
    assert B.in_start_order([frame.iloc[[0, 1]], frame.iloc[[2]]])  # 5 after 5: in order
    assert not B.in_start_order([frame.iloc[[1, 3]], frame.iloc[[0]]])  # 0 after 9: not
    assert not B.in_start_order([pd.DataFrame({"start": [3, 1]})])
