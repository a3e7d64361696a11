"""The idle-gap attribution's context rules, exact on a tiny synthetic trace built on a real nsys schema
(tests/tiny.py; not a trace): warm-up causes (a long launch loading its module, a compile range on another
thread), an OS call inside its thread's CUDA call belonging to that call, and the primary thread's OS wait
while another thread launches going to that thread."""
import pytest

import nsysanalyze
from tiny import TinyTrace, gtid

P = 300
T, T2 = gtid(P, 1), gtid(P, 2)   # the main thread, and a helper that launches too (an autograd thread)
MS = 1_000_000


def ms(x: float) -> int:
    """x milliseconds in whole ns."""
    return round(x * MS)


@pytest.fixture
def context_path(tmp_path):
    """GPU 0 busy [0, 1) and [10, 11) ms: idle [1, 10) ms = 9 ms, every ns of it worked out below."""
    t = TinyTrace(tmp_path / "context.sqlite")
    t.insert("META_DATA_CAPTURE", name="CAPTURE_EVENT_TYPE", value="NvtxEvents")
    t.process(P)
    t.runtime(0, 5_000, 1, T)
    t.kernel(0, 1 * MS, 1, P)
    t.runtime(2 * MS, ms(4.5), 2, T)          # a 2.5 ms launch while the GPU idles: loading its module
    t.osrt(ms(2.5), 3 * MS, T, "ioctl")        # ... its ioctl is the launch's
    t.kernel(10 * MS, 11 * MS, 2, P)
    t.runtime(ms(4.6), ms(4.65), 3, T)   # a 50 us launch
    t.osrt(ms(4.61), ms(4.62), T, "ioctl")  # inside it: the launch's, not an OS cause
    t.runtime(5 * MS, ms(5.5), 4, T, "cudaMalloc_v3020")
    t.osrt(6 * MS, 7 * MS, T, "write")
    t.nvtx(7 * MS, 8 * MS, "KernelExecutor::compile", T2)  # compiling on another thread: warm-up
    t.osrt(8 * MS, ms(9.5), T, "pthread_cond_wait")
    t.runtime(ms(8.1), ms(8.12), 5, T2)   # T2 launches twice, 30 us apart, while T waits
    t.runtime(ms(8.15), ms(8.17), 6, T2)
    for i, a in enumerate((9.6, 9.7, 9.8)):          # T makes the most launches: the primary thread
        t.runtime(ms(a), ms(a + 0.01), 7 + i, T)
    return t.close()


def test_every_idle_ns_gets_its_cause_in_context(context_path):
    with nsysanalyze.open(context_path) as a:
        g = a.gaps()
    got = {(k, c): int(ns) for (k, c), ns in g.groupby(["cause_kind", "cause"])["ns"].sum().items()}
    assert got == {
        ("warmup", "kernel launch loading its module"): ms(2.5),
        ("warmup", "KernelExecutor::compile"): 1 * MS,
        ("cuda_blocking", "cudaMalloc"): ms(0.5),
        ("os_runtime", "write"): 1 * MS,   # no ioctl: both were inside launches
        ("launch", "kernel launch"): ms(0.05) + 2 * ms(0.02) + 3 * ms(0.01),
        ("launch", "between launches on another thread"): ms(0.03),
        ("os_wait", "pthread_cond_wait"): ms(1.5) - ms(0.07),
        ("untraced", "host work outside traced calls"): ms(2.42),
    }
    assert sum(got.values()) == 9 * MS


def test_warm_up_and_writes_are_findings_of_their_own(context_path):
    with nsysanalyze.open(context_path) as a:
        found = {f.rule: f for f in a.findings()}
    assert found["warmup-capture"].gain_ns == pytest.approx(3.5 * MS)
    assert "--capture-range=cudaProfilerApi" in found["warmup-capture"].fix
    assert found["file-io"].gain_ns == pytest.approx(1 * MS)
    assert "allocator-churn" not in found  # 0.5 ms of 11 ms: below the 5% a host cause needs


@pytest.mark.parametrize("name, warming", [
    ("KernelExecutor::compile", True), ("NVRTC", True), ("JIT compile", True), ("jit", True),
    ("Torch-Compiled Region: 0/0", True), ("cudnn autotuning", True),
    # XLA's ranges around a compiled program's steady-state execution name the jitted function: not warm-up
    ("XlaModule:#hlo_module=jit_train_step,program_id=8623#", False),
    ("Thunk:#name=jit(train_step)/jvp(),hlo_op=gemm_fusion_dot.7,unique_hlo_op_id=107374182416#", False),
    ("train step", False), ("forward", False)])
def test_warm_up_ranges_are_named_by_what_they_do(name, warming):
    import pandas as pd

    from nsysanalyze.attribution import _warmup_range
    assert bool(_warmup_range(pd.Series([name])).iloc[0]) is warming
