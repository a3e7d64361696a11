"""The step checks and inferred steps over blocks of kernels (steps.kernel_period, inferred_steps, is_loop_iteration,
choose_steps) equal the one-block results exactly, for any cut: the prefix, the phase and the boundaries are carried
across blocks (a running maximum of ends, the anchor's positions, the busy union's open interval)."""
import numpy as np
import pandas as pd
import pytest

import nsysanalyze
from nsysanalyze import steps as S
from nsysanalyze.blocks import frame_blocks
from conftest import fixture_trace, shared_trace

# (where, file, small enough for blocks of one kernel)
INFERRED = [("fixtures", "emit_nvtx_only.sqlite", True),                       # period 382, one GPU
            ("shared", "public/abacus__resnet101_streams_report1.sqlite", False),  # period 385, 23.8k kernels
            ("shared", "public/nsys-ai__mfu_2gpu_after.sqlite", False),          # period 119, two GPUs
            ("shared", "public/bwyogatama__report1.sqlite", True)]               # period 4, 12 kernels
# (where, file, families tried in order: the first is not a loop iteration, the second is)
REJECTED = [("shared", "public/nsightful__power_iteration__baseline.sqlite", ["Copy {n}", "Step {n} to {n}"]),
            ("fixtures", "jax_jit.sqlite",
             ["Thunk:#name=jit(train_step),hlo_op=gemm_fusion_dot.{n},unique_hlo_op_id={n}#", "Step {n}"])]


def _open(where, name):
    path = fixture_trace(name) if where == "fixtures" else shared_trace(name)
    a = nsysanalyze.open(path)
    a._load_tables()
    return a


def _cuts(kernels: pd.DataFrame, one: bool) -> list[list[pd.DataFrame]]:
    """Blocks of 1 (when ``one``), 97 and 1,000 kernels, and three unequal blocks."""
    n = len(kernels)
    out = [frame_blocks(kernels, 97), frame_blocks(kernels, 1000),
           [kernels.iloc[:n // 7], kernels.iloc[n // 7:n // 2 + 3], kernels.iloc[n // 2 + 3:]]]
    return ([frame_blocks(kernels, 1)] if one else []) + [b for b in out if len(b) >= 2]


def _assert_same_choice(got: S.StepChoice, want: S.StepChoice) -> None:
    pd.testing.assert_frame_equal(got.ranges, want.ranges)
    pd.testing.assert_frame_equal(got.windows, want.windows)
    assert (got.label, got.source, got.rejected) == (want.label, want.source, want.rejected)


@pytest.mark.parametrize("where,name,one", INFERRED, ids=[r[1] for r in INFERRED])
def test_inferred_steps_over_blocks_equal_one_block(where, name, one):
    """Exports without NVTX steps (steps inferred from the kernel sequence; one of them with two GPUs): choose_steps
    and inferred_steps over blocks equal one block, exactly."""
    with _open(where, name) as a:
        kernels, nvtx = a._kernels, a.trace.nvtx
        want = S.choose_steps(nvtx, None, a._step_candidates, a._project, lambda: [kernels])
        assert want.source == "inferred"
        inferred = S.inferred_steps([kernels])
        for blocks in _cuts(kernels, one):
            _assert_same_choice(S.choose_steps(nvtx, None, a._step_candidates, a._project, lambda: blocks), want)
            pd.testing.assert_frame_equal(S.inferred_steps(blocks), inferred)


def test_two_gpus_are_inferred_each_over_blocks():
    """nsys-ai's 2-GPU export: both devices get their 14 steps over blocks (a device's rows are picked out of each)."""
    with _open("shared", "public/nsys-ai__mfu_2gpu_after.sqlite") as a:
        steps = S.inferred_steps(frame_blocks(a._kernels, 97))
    assert steps.groupby("deviceId").size().tolist() == [14, 14]


@pytest.mark.parametrize("where,name,families", REJECTED, ids=[r[1] for r in REJECTED])
def test_rejected_family_over_blocks_equals_one_block(where, name, families):
    """An NVTX family of op/sub-ranges is rejected (is_loop_iteration False) and the step family after it taken,
    over blocks as over one block."""
    with _open(where, name) as a:
        kernels, nvtx = a._kernels, a.trace.nvtx
        want = S.choose_steps(nvtx, None, families, a._project, lambda: [kernels])
        assert (want.source, want.label, want.rejected) == ("nvtx", families[1], families[:1])
        for blocks in _cuts(kernels, False):
            _assert_same_choice(S.choose_steps(nvtx, None, families, a._project, lambda: blocks), want)


# prefixes short enough that the sequences run past them, long enough that periods are found in them (85 to 385
# kernels: at least two of the five exports each time)
PATCHED = [(2000, 16), (1200, 2), (400, 3)]


@pytest.mark.parametrize("prefix,iterations", PATCHED)
def test_prefix_phase_and_boundaries_cross_blocks(monkeypatch, prefix, iterations):
    """With PERIOD_PREFIX (and PHASE_ITERATIONS) patched down, the sequences outrun the prefix: the phase is chosen
    in the second pass and the boundaries found in the third, across cuts; every family's verdict and the inferred
    steps equal one block under the same values; rows out of start order (shuffled, or blocks in reverse order) give
    the start-ordered result."""
    monkeypatch.setattr(S, "PERIOD_PREFIX", prefix)
    monkeypatch.setattr(S, "PHASE_ITERATIONS", iterations)
    cases = [(w, n, []) for w, n, _ in INFERRED[:3]] + REJECTED
    streamed = 0
    for where, name, families in cases:
        with _open(where, name) as a:
            kernels, nvtx = a._kernels, a.trace.nvtx
            windows = [a._project(S.family_ranges(nvtx, f)) for f in families]
            inferred = S.inferred_steps([kernels])
            verdicts = [S.is_loop_iteration(w, [kernels]) for w in windows]
            shuffled = frame_blocks(kernels.sample(frac=1, random_state=3), 500)
            for blocks in _cuts(kernels, False) + [shuffled, frame_blocks(kernels, 500)[::-1]]:
                pd.testing.assert_frame_equal(S.inferred_steps(blocks), inferred)
                assert [S.is_loop_iteration(w, blocks) for w in windows] == verdicts
        streamed += len(inferred) > 0 and int(kernels.groupby(["globalPid", "deviceId"]).size().max()) > prefix
    assert streamed >= 2  # sequences past the prefix, with a period found in it


# ---- hand-made arrays (not a trace) -----------------------------------------------------------------------------

def _abcd(iterations: int = 6) -> pd.DataFrame:
    """Names A B C D (1..4) per iteration of 200 ns from T = 200 i: A [T, T+50) runs under B [T+5, T+15); C waits
    for its input: [T+150, T+160); D [T+161, T+171). Idle before each kernel: A 29 ns (after the first), B -45
    (starts under A), C 100 (after A's end: the completion, two kernels back), D 1. So the phase is C's (2), and the
    boundary before each C is the completion before it: A's end, T + 50."""
    t = 200 * np.repeat(np.arange(iterations), 4)
    return pd.DataFrame({"globalPid": 7, "deviceId": 1, "nameId": np.tile([1, 2, 3, 4], iterations),
                         "start": t + np.tile([0, 5, 150, 161], iterations),
                         "end": t + np.tile([50, 15, 160, 171], iterations)})


def _hand_cuts(kernels: pd.DataFrame) -> list[list[pd.DataFrame]]:
    """Blocks of 1, 2 (each C opens a block: its completion comes from the carry), 3, 5 and 7 kernels, uneven cuts,
    and rows not in start order: reversed, or two blocks each in start order but the later one first."""
    n = len(kernels)
    return ([frame_blocks(kernels, k) for k in (1, 2, 3, 5, 7)]
            + [[kernels.iloc[:3], kernels.iloc[3:14], kernels.iloc[14:]], [kernels.iloc[:n - 1], kernels.iloc[n - 1:]],
               [kernels.iloc[::-1]], frame_blocks(kernels.iloc[::-1], 5),
               [kernels.iloc[n // 2:], kernels.iloc[:n // 2]]])


@pytest.mark.parametrize("prefix", [12, 13, 1 << 19])
def test_hand_made_boundaries_straddle_the_cuts(monkeypatch, prefix):
    """hand-made arrays (not a trace): period 4 (found on the first 12 or 13 kernels, or all 24), phase 2 (chosen on
    all six iterations, past the prefix), boundaries at A's end before each C: 50, 250, … 1050 ns, for every cut."""
    monkeypatch.setattr(S, "PERIOD_PREFIX", prefix)
    kernels = _abcd()
    for blocks in _hand_cuts(kernels):
        found = S.kernel_period(blocks)
        assert list(found) == [(7, 1)]
        assert (found[7, 1].period, found[7, 1].joined, found[7, 1].first_start) == (4, 1, 0)
        assert found[7, 1].boundaries.tolist() == [50, 250, 450, 650, 850, 1050]
        steps = S.inferred_steps(blocks)
        assert steps["window_start"].tolist() == [50, 250, 450, 650, 850]
        assert steps["window_end"].tolist() == [250, 450, 650, 850, 1050]
        assert steps["closed"].all()  # every window opens after the first kernel's start (0 ns)


def test_hand_made_phase_from_the_first_iterations_only(monkeypatch):
    """hand-made arrays (not a trace): iterations 0-1 wait before C (as _abcd), iterations 2-5 wait longer before A
    (A moved 400 ns later). With PHASE_ITERATIONS 2 the phase stays C's (2): boundaries at A's end, T + 50 (T the
    iteration's A start); with 16 (all six) the median idle picks A (phase 0): the boundary before each A is the
    completion before it (D's end of the iteration before), or its own start for the first kernel."""
    monkeypatch.setattr(S, "PERIOD_PREFIX", 12)
    kernels = _abcd()
    later = kernels.index >= 8
    kernels.loc[later, ["start", "end"]] += 400 * ((kernels.index[later] // 4) - 1).to_numpy()[:, None]
    a_start = kernels["start"].to_numpy()[::4]  # 0, 200, 800, 1400, 2000, 2600
    d_end = kernels["end"].to_numpy()[3::4]
    for iterations, want in ((2, (a_start + 50).tolist()), (16, [0] + d_end[:-1].tolist())):
        monkeypatch.setattr(S, "PHASE_ITERATIONS", iterations)
        for blocks in _hand_cuts(kernels):
            assert S.kernel_period(blocks)[7, 1].boundaries.tolist() == want


def test_hand_made_joined_periods_over_blocks(monkeypatch):
    """hand-made arrays (not a trace): at most 2 windows per device: the six boundaries are joined three periods per
    window (every third kept: 50 and 650 ns), counted across the cuts before any is kept."""
    monkeypatch.setattr(S, "PERIOD_PREFIX", 12)
    monkeypatch.setattr(S, "MAX_INFERRED_STEPS", 2)
    for blocks in _hand_cuts(_abcd()):
        found = S.kernel_period(blocks)[7, 1]
        assert (found.joined, found.boundaries.tolist()) == (3, [50, 650])


def _spans(*spans):
    a, b = zip(*spans)
    return pd.DataFrame({"globalPid": 7, "deviceId": 1, "gpu_start": a, "gpu_end": b})


def test_hand_made_busy_union_carried_across_blocks(monkeypatch):
    """hand-made arrays (not a trace): five kernels with no period, [0,100) [50,150) [140,200) [300,400) [390,500):
    busy 400 ns in two merged intervals, each cut by blocks of 1-3. Steps spanning [0,120) and [300,350) hold 170 ns
    (< half: not loop iterations); [0,120) and [300,400), 220 ns (at least half)."""
    monkeypatch.setattr(S, "PERIOD_PREFIX", 2)  # the kernels outrun the prefix: the union is carried over blocks
    kernels = pd.DataFrame({"globalPid": 7, "deviceId": 1, "nameId": [1, 2, 3, 4, 5],
                            "start": [0, 50, 140, 300, 390], "end": [100, 150, 200, 400, 500]})
    in_order = [frame_blocks(kernels, k) for k in (1, 2, 3)]
    for blocks in in_order:
        busy = S._Busy(S.Coverage(np.array([0, 300]), np.array([120, 350])))
        for block in blocks:
            busy.feed(*(block[c].to_numpy() for c in ("nameId", "start", "end")))
        assert not busy.holds(S.BUSY_SHARE) and (busy.total, busy.inside) == (400, 170)
    for blocks in in_order + [[kernels.iloc[::-1]], frame_blocks(kernels.iloc[::-1], 2)]:
        assert not S.is_loop_iteration(_spans((0, 120), (300, 350)), blocks)
        assert S.is_loop_iteration(_spans((0, 120), (300, 400)), blocks)


def test_hand_made_steps_counted_across_blocks(monkeypatch):
    """hand-made arrays (not a trace): with _abcd's period of 4, steps holding one kernel each (A's start) are not
    iterations (median 1 < 2), steps of whole iterations are (median 4); the kernels are counted per step across
    cuts."""
    monkeypatch.setattr(S, "PERIOD_PREFIX", 12)
    kernels = _abcd()
    for blocks in _hand_cuts(kernels):
        assert not S.is_loop_iteration(_spans(*[(200 * i, 200 * i + 4) for i in range(6)]), blocks)
        assert S.is_loop_iteration(_spans(*[(200 * i, 200 * i + 171) for i in range(6)]), blocks)
