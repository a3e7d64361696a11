"""Step-family detection on range names (pure functions over an NVTX frame)."""
import numpy as np
import pandas as pd

from nsysanalyze import steps as S
from nsysanalyze.steps import detect_step_family, family_of, find_steps


def nvtx(rows, tid=1 << 24 | 1):
    return pd.DataFrame([{"start": a, "end": b, "globalTid": tid, "name": n} for n, a, b in rows])


def test_family_keys():
    names = pd.Series(["Batch 12", "ProfilerStep#3", "step 5", "iteration 7", "train_step", "Step 10 to 20",
                       "get batch", "epoch 3", "forward"])
    assert family_of(names).tolist() == ["Batch {n}", "ProfilerStep#{n}", "step {n}", "iteration {n}",
                                         "train_step", "Step {n} to {n}", "", "", ""]


def test_outermost_counted_family_wins_over_nested_ones():
    rows = []
    for i in range(3):
        base = i * 100
        rows += [(f"Batch {i}", base, base + 100), (f"layer {i}", base + 10, base + 20), (f"layer {i + 10}", base + 30, base + 40)]
    assert detect_step_family(nvtx(rows)) == "Batch {n}"


def test_epoch_is_not_a_step_and_steps_inside_it_are_found():
    rows = [("epoch 0", 0, 1000), ("epoch 1", 1000, 2000)] + [(f"iteration {i}", i * 100, i * 100 + 90) for i in range(20)]
    assert detect_step_family(nvtx(rows)) == "iteration {n}"


def test_sparse_per_op_ranges_are_not_steps():
    rows = [(f"aten::to, op_id = {i}", i * 1000, i * 1000 + 10) for i in range(5)]
    assert detect_step_family(nvtx(rows)) is None


def test_dense_unnamed_family_is_accepted():
    rows = [(f"chunk {i}", i * 100, i * 100 + 95) for i in range(5)]
    assert detect_step_family(nvtx(rows)) == "chunk {n}"


def test_step_range_regex_overrides_and_numbers_per_process():
    p1, p2 = (1 << 24) | 1, (2 << 24) | 1
    frame = pd.concat([nvtx([("fwd", 0, 10), ("fwd", 20, 30)], p1), nvtx([("fwd", 5, 15)], p2)], ignore_index=True)
    steps, label = find_steps(frame, "^fwd$")
    assert label == "/^fwd$/"
    assert steps[["globalTid", "step", "cpu_start"]].values.tolist() == [[p1, 0, 0], [p1, 1, 20], [p2, 0, 5]]


def test_kernel_period_splits_where_the_gpu_waits():
    """Unit input: names A B C D repeated 4 times, 10 ns kernels 1 ns apart, except a 100 ns wait before each C
    (the 'batch load'): period 4, iterations start at C, boundaries at the end of the D before it... i.e. at the
    GPU completion before each C."""
    import numpy as np
    from nsysanalyze.steps import kernel_period

    names = np.array([1, 2, 3, 4] * 4)
    starts, t = [], 0
    for n in names:
        t += 100 if n == 3 else 1
        starts.append(t)
        t += 10
    starts = np.array(starts)
    kernels = pd.DataFrame({"globalPid": 1, "deviceId": 0, "nameId": names, "start": starts, "end": starts + 10})
    found = kernel_period([kernels])
    assert list(found) == [(1, 0)]
    assert found[1, 0].period == 4 and found[1, 0].joined == 1 and found[1, 0].first_start == starts[0]
    assert found[1, 0].boundaries.tolist() == (starts[names == 3] - 100).tolist()


def test_completion_before_equals_the_running_maximum_of_ends():
    """kernel_period's segment maxima give what a running maximum over every kernel gives (random
    start-sorted kernels built here; indices repeat, include the first and last kernel)."""
    rng = np.random.default_rng(7)
    for n in (1, 2, 9, 5000):
        t0 = np.sort(rng.integers(0, 10**9, n))
        t1 = t0 + rng.integers(0, 10**6, n)
        reference = np.concatenate(([t0[0]], np.maximum.accumulate(t1)[:-1]))
        for idx in (rng.integers(0, n, (4, 6)), np.array([0, 0, n - 1, n - 1])):
            assert (S._completion_before(t0, t1, idx) == reference[idx]).all()


def test_spacing_stats_equal_a_pandas_groupby():
    """kernel_period's per-name spacing statistics (numpy) equal pandas' groupby min/max/median/size
    (random names and gaps built here; names repeat, some groups of one, even and odd sizes)."""
    rng = np.random.default_rng(11)
    for n in (1, 2, 7, 3000):
        name = np.sort(rng.integers(0, max(n // 3, 1), n))
        gap = rng.integers(1, 50, n)
        want = pd.DataFrame({"name": name, "gap": gap}).groupby("name")["gap"].agg(["min", "max", "median", "size"])
        got_name, low, high, median, size = S._spacing_stats(name, gap)
        assert got_name.tolist() == want.index.tolist()
        assert low.tolist() == want["min"].tolist() and high.tolist() == want["max"].tolist()
        assert median.tolist() == want["median"].tolist() and size.tolist() == want["size"].tolist()
