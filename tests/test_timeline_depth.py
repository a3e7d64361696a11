"""The HTML timeline's NVTX nesting depth (issue 19 item 5): a stack sweep, linear in memory, equal to the
pairwise definition (how many other ranges enclose each) on nested ranges."""
import tracemalloc

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from nsysanalyze.timeline import nesting_depth


def pairwise_depth(starts, ends):
    encloses = (starts[:, None] <= starts[None, :]) & (ends[:, None] >= ends[None, :])
    np.fill_diagonal(encloses, False)
    return encloses.sum(axis=0)


def children(splits, lo, hi, out):
    """Distinct disjoint ranges inside [lo, hi) (push/pop ranges, as NVTX records them on one thread)."""
    made = []
    for a, b in splits:
        s, e = lo + (hi - lo) * a // 100, lo + (hi - lo) * b // 100
        if e - s > 2 and (s, e) not in out:
            out.add((s, e))
            made.append((s, e))
            lo = e  # the next sibling starts after this one
    return made


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 49), st.integers(50, 100)), max_size=4), max_size=6),
       st.booleans())
def test_stack_sweep_equals_pairwise_on_nested_ranges(levels, shuffle):
    ranges, level = {(0, 10**6)}, [(0, 10**6)]
    for splits in levels:  # each level nests new ranges inside the previous level's
        level = [c for s, e in level for c in children(splits, s, e, ranges)]
    starts, ends = (np.array(x, dtype=np.int64) for x in zip(*sorted(ranges)))
    if shuffle:
        order = np.random.default_rng(len(starts)).permutation(len(starts))
        starts, ends = starts[order], ends[order]
    assert nesting_depth(starts, ends).tolist() == pairwise_depth(starts, ends).tolist()


def test_real_shape_and_60k_ranges_in_linear_memory():
    assert nesting_depth(np.array([0, 1, 2, 10]), np.array([9, 8, 3, 12])).tolist() == [0, 1, 2, 0]
    # 60k ranges in one step: 20k outer ranges each holding two nested ones (the pairwise matrix: 3.6 GB)
    outer = np.arange(20_000, dtype=np.int64) * 100
    starts = np.concatenate([outer, outer + 10, outer + 20])
    ends = np.concatenate([outer + 90, outer + 80, outer + 30])
    tracemalloc.start()
    depth = nesting_depth(starts, ends)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert np.bincount(depth).tolist() == [20_000, 20_000, 20_000] and peak < 20 * 2**20
