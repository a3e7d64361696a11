"""Interval algebra against a brute-force per-ns reference on random integer intervals."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from nsysanalyze.intervals import (Coverage, dense_codes, intersection_within, overlapping, sum_in_windows, union,
                                   union_of)

SPAN = 200
intervals = st.lists(st.tuples(st.integers(0, SPAN), st.integers(0, 40)), max_size=25).map(
    lambda xs: (np.array([a for a, _ in xs], dtype=np.int64), np.array([a + d for a, d in xs], dtype=np.int64)))
windows = st.lists(st.tuples(st.integers(-10, SPAN + 50), st.integers(0, 120)), min_size=1, max_size=8).map(
    lambda xs: (np.array([a for a, _ in xs], dtype=np.int64), np.array([a + d for a, d in xs], dtype=np.int64)))


def mask(starts, ends, lo=-10, hi=SPAN + 200):
    m = np.zeros(hi - lo, dtype=bool)
    for s, e in zip(starts, ends):
        m[s - lo:e - lo] = True
    return m, lo


def covered(m, lo, a, b):
    return np.array([m[max(x - lo, 0):max(y - lo, 0)].sum() for x, y in zip(a, b)])


@settings(max_examples=200, deadline=None)
@given(intervals, windows)
def test_coverage_within_matches_brute_force(iv, win):
    m, lo = mask(*iv)
    assert (Coverage(*iv).within(*win) == covered(m, lo, *win)).all()


@settings(max_examples=200, deadline=None)
@given(intervals, intervals, windows)
def test_overlap_and_union_of_coverages(x, y, win):
    mx, lo = mask(*x)
    my, _ = mask(*y)
    cx, cy = Coverage(*x), Coverage(*y)
    cxy = Coverage.of(cx, cy)
    assert (cxy.within(*win) == covered(mx | my, lo, *win)).all()
    assert (intersection_within(cx, cy, *win) == covered(mx & my, lo, *win)).all()


def test_union_merges_touching_and_nested():
    s, e = union(np.array([5, 0, 10, 2, 30]), np.array([10, 3, 20, 4, 30]))
    assert s.tolist() == [0, 5] and e.tolist() == [4, 20]  # [30,30) is empty and dropped


def test_sum_in_windows_half_open():
    t = np.array([0, 10, 10, 20])
    v = np.array([1, 2, 3, 4])
    assert sum_in_windows(t, v, np.array([0, 10, 21]), np.array([10, 20, 30])).tolist() == [1, 5, 0]


def test_union_of_parts_equals_the_union_of_their_concatenation():
    """Unit test on random intervals: merging each part's union by insertion = one union of everything."""
    rng = np.random.default_rng(7)
    for _ in range(50):
        parts = []
        for n in rng.integers(0, 40, size=rng.integers(1, 4)):
            s = rng.integers(0, 500, size=n)
            parts.append((s, s + rng.integers(-3, 30, size=n)))
        want = union(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
        got = union_of(*parts)
        assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()


@settings(max_examples=200, deadline=None)
@given(intervals, st.sampled_from([1, 2, 3, 7]), st.booleans())
def test_union_compacted_in_blocks_matches_brute_force(iv, block, owned):
    """union writes merged intervals over its scratch arrays a block at a time (blocks of a few rows
    here, so merged intervals cross block edges): the covered ns equal the brute-force mask's."""
    from nsysanalyze import intervals as I
    saved, I.BLOCK = I.BLOCK, block
    try:
        s, e = union(iv[0].copy(), iv[1].copy(), owned=owned)
    finally:
        I.BLOCK = saved
    m, lo = mask(*iv)
    got, _ = mask(s, e)
    assert (got == m).all() and (s[1:] > e[:-1]).all() and (e > s).all()


def test_group_codes_match_a_pandas_grouping():
    """Unit test on random keys (constant, one varying, several varying): codes in sorted key order."""
    import pandas as pd

    from nsysanalyze.intervals import group_codes
    rng = np.random.default_rng(3)
    for keys in ([np.full(9, 4)], [np.full(9, 4), rng.integers(0, 3, 9)], [rng.integers(0, 3, 30), rng.integers(5, 9, 30)],
                 [rng.integers(0, 2, 30), np.full(30, 1), rng.integers(-5, 5, 30)]):
        frame = pd.DataFrame({f"k{i}": k for i, k in enumerate(keys)})
        want = frame.groupby(list(frame.columns), sort=True).ngroup().to_numpy()
        code, values = group_codes(*keys)
        assert code.tolist() == want.tolist()
        firsts = frame.groupby(list(frame.columns), sort=True).size().index.to_frame().to_numpy().T
        assert [v.tolist() for v in values] == [list(f) for f in firsts]


@settings(max_examples=200, deadline=None)
@given(intervals, windows, st.sampled_from([1, 2, 3, 7]))
def test_coverage_sums_in_blocks_match_brute_force(iv, win, block):
    """Coverage's prefix sums are made a block of intervals at a time, and its queries answered a block of
    times at a time (blocks of a few here, so the running total crosses block edges); ``owned`` arrays are
    merged in place: the covered ns equal the brute-force mask's either way."""
    from nsysanalyze import intervals as I
    m, lo = mask(*iv)
    saved, I.BLOCK, I.QUERY_BLOCK = (I.BLOCK, I.QUERY_BLOCK), block, block
    try:
        for owned in (False, True):
            cov = Coverage(iv[0].copy(), iv[1].copy(), owned=owned)
            assert (cov.within(*win) == covered(m, lo, *win)).all() and cov.total == m.sum()
            other = Coverage(win[0] + 3, win[1] + 9)
            both = m & mask(win[0] + 3, win[1] + 9)[0]
            assert (intersection_within(cov, other, *win) == covered(both, lo, *win)).all()
    finally:
        I.BLOCK, I.QUERY_BLOCK = saved


@settings(max_examples=200, deadline=None)
@given(intervals, windows, st.sampled_from([1, 2, 3, 7]))
def test_durations_in_windows_equal_a_sum_of_durations(iv, win, block):
    """The durations of the intervals starting in each window, from prefix sums a block at a time (blocks of
    a few here; windows past the last start take the total), equal the sum over a plain duration array;
    unsorted starts too."""
    from nsysanalyze import intervals as I
    from nsysanalyze.intervals import durations_in_windows
    s, e = iv
    want = np.array([(e - s)[(s >= x) & (s < y)].sum() for x, y in zip(*win)], dtype=np.int64)
    saved, I.QUERY_BLOCK = I.QUERY_BLOCK, block
    try:
        order = np.argsort(s, kind="stable")
        assert durations_in_windows(s[order], e[order], *win).tolist() == want.tolist()
        assert durations_in_windows(s, e, *win).tolist() == want.tolist()
    finally:
        I.QUERY_BLOCK = saved


def test_dense_codes_renumber_the_codes_present():
    """Unit test on hand-made codes: the present values sorted, each code's index among them, -1 kept, dtype kept."""
    values, codes = dense_codes(np.array([5, -1, 2, 5, 9, 2], dtype=np.int16), 12)
    assert values.tolist() == [2, 5, 9] and codes.tolist() == [1, -1, 0, 1, 2, 0] and codes.dtype == np.int16
    values, codes = dense_codes(np.array([], dtype=np.int64), 4)
    assert values.size == 0 and codes.size == 0


@settings(max_examples=300, deadline=None)
@given(intervals, windows)
def test_overlapping_matches_brute_force(iv, calls):
    """``overlapping``: a call [start, end) is kept exactly when it is not empty and shares an instant with one of
    the disjoint intervals (their union here), also when the slice it searches is empty or one interval."""
    iv_s, iv_e = union(*iv)
    m, lo = mask(iv_s, iv_e)
    s, e = calls
    expected = (e > s) & (covered(m, lo, s, e) > 0)
    assert (overlapping(s, e, iv_s, iv_e) == expected).all()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(-50, 50), max_size=30), st.lists(st.integers(-60, 60), max_size=40),
       st.sampled_from(["left", "right"]))
def test_searchsorted_sorted_equals_numpy(a, v, side):
    """``searchsorted_sorted`` (a merge of two sorted arrays, ties and empty ones included) is np.searchsorted."""
    from nsysanalyze.intervals import searchsorted_sorted
    a, v = np.sort(np.array(a, dtype=np.int64)), np.sort(np.array(v, dtype=np.int64))
    assert searchsorted_sorted(a, v, side).tolist() == np.searchsorted(a, v, side=side).tolist()
