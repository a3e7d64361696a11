"""The project's own H200 captures (fixtures/, nsys 2023.4 with --trace=cuda,nvtx,osrt) of scenarios beyond the
articles' ladder: each top finding follows the cause the workload was built to have."""
import numpy as np
import pytest

import nsysanalyze

from conftest import fixture_trace


def findings(name):
    with nsysanalyze.open(fixture_trace(name)) as a:
        return a.findings()


@pytest.mark.parametrize("name,top", [
    ("dtoh_pageable.sqlite", "dtoh-sync"),                 # .cpu() of 100 MB + .item() every step
    ("tinyops_eager.sqlite", "launch-bound"),              # ~1000 kernels of ~1.3 us per step, eager
    ("resnet18_loader_unnamed.sqlite", "dataloader-workers"),   # main-process loader in a range named 'prep'
    ("resnet18_loader_noranges.sqlite", "dataloader-workers"),  # ... with no sub-ranges at all
])
def test_top_finding_follows_the_cause(name, top):
    assert findings(name)[0].rule == top


@pytest.mark.parametrize("name,left", [("dtoh_pinned_async.sqlite", "fp32-matmul"), ("dtoh_deferred.sqlite", "fp32-matmul"),
                                       ("tinyops_graphs.sqlite", "input-pipeline-ok"), ("gpu_bound.sqlite", "input-pipeline-ok"),
                                       ("sync_timing.sqlite", "input-pipeline-ok")])
def test_fixed_or_healthy_loops_have_nothing_to_fix(name, left):
    """The fixes of the scenarios above (pinned async copies, deferred syncs, CUDA graphs), a GPU-bound loop, and
    the same loop synchronizing after every step to time it (unprofiled 25.34 against 25.02 ms a step: a sync in a
    GPU-bound loop costs ~1%, and no finding claims it). The fixed DtoH loops keep one small cause that was there
    all along: 8% of their kernel time is fp32 FMA GEMMs on an H200 (2.4-3.1 ms, 5-7% of a 46 ms step)."""
    found = findings(name)
    assert [f.rule for f in found] == [left]
    if left == "fp32-matmul":
        assert 2.0e6 < found[0].gain_ns < 3.5e6


def test_unnamed_loader_is_named_by_its_range():
    (f,) = [f for f in findings("resnet18_loader_unnamed.sqlite") if f.rule == "dataloader-workers"]
    assert f.evidence["top_cause"] == "prep" and "num_workers" in f.snippet
    (g,) = [f for f in findings("resnet18_loader_noranges.sqlite") if f.rule == "dataloader-workers"]
    assert g.evidence["top_cause_kind"] == "untraced"


def test_workers_pin_memory_cites_munmap_with_gpu_idle():
    """The first article's pattern: DataLoader workers hand batches over shared memory, the main process
    munmaps them after the blocking pageable copy while the GPU waits."""
    top = findings("resnet18_workers.sqlite")[0]
    assert top.rule == "pin-memory"
    assert top.evidence["munmap_count"] >= 1 and top.evidence["munmap_gpu_idle_ns"] > 0
    assert "munmap" in top.title


def test_launch_bound_counts_every_thread():
    with nsysanalyze.open(fixture_trace("tinyops_eager.sqlite")) as a:
        step = a.steps().iloc[-1]
        # launches of the main thread and of autograd's backward thread both count
        assert step["launch_calls"] >= step["kernel_count"] * 0.9


def test_per_parameter_item_calls_are_host_syncs():
    """sync-per-param: ResNet-18 at batch 32 reading each of its 62 gradient norms with .item() every step.
    The 4-byte copies are not a device-to-host volume problem; the syncs are. (At batch 32 the loop is also
    launch-bound between the syncs: both causes are reported, each with its own idle.)"""
    found = {f.rule: f for f in findings("sync_per_param.sqlite")}
    assert found["host-sync"].evidence["sync_wait_calls"] == 62
    assert "'grad norms'" in found["host-sync"].title
    assert "dtoh-sync" not in found and "launch-bound" in found


def test_file_io_inside_the_step_is_named():
    """io-midstep: 64 MB written and fsynced inside the step: the GPU waits on the OS calls (OSRT); the fix is
    to write less often and off the training thread, and no idle is left unexplained."""
    found = findings("io_midstep.sqlite")
    top = found[0]
    assert top.rule == "file-io" and "write less often" in top.fix.lower() or "less often" in top.fix
    assert {top.evidence["cause_1"], top.evidence["cause_2"]} == {"fsync", "write"}
    assert top.gain_pct > 50 and "gpu-idle-unexplained" not in {f.rule for f in found}


def test_attribution_in_slices_equals_one_pass(monkeypatch):
    """The attribution walks the idle intervals a slice at a time (bounded memory); the result is the same as
    one pass over all of them."""
    from nsysanalyze import attribution

    def gaps(chunk):
        monkeypatch.setattr(attribution, "IDLE_CHUNK", chunk)
        with nsysanalyze.open(fixture_trace("tinyops_eager.sqlite")) as a:
            g = a.gaps()
        keys = [c for c in attribution.GAP_COLUMNS if c != "ns"]
        return g.groupby(keys)["ns"].sum().sort_index()

    one, sliced = gaps(1 << 30), gaps(97)
    assert len(one) > 5 and one.equals(sliced)


@pytest.mark.parametrize("split", [False, True], ids=["every-call-in-the-timeline", "isolated-calls-split-out"])
def test_cause_timelines_stay_bounded_across_a_long_idle(monkeypatch, split):
    """compile_warmup: 138k OS calls while the GPU idles through the compile, under a warm-up range open across
    it. Each chunk's cause timeline holds at most HOST_CHUNK host-interval starts (idle intervals are cut
    there) and, per level, only the calls reaching into the chunk: the warm-up range keeps its own level's
    calls, not every OS call after it. The gaps are those of one timeline over everything. With the isolated
    OS calls split out of the timelines (the default, attribution._isolated_os_calls), most of its bounds go."""
    from nsysanalyze import attribution

    if not split:
        monkeypatch.setattr(attribution, "_isolated_os_calls", lambda start, end, level: np.empty(0, np.int64))

    def gaps(host_chunk):
        monkeypatch.setattr(attribution, "HOST_CHUNK", host_chunk)
        sizes = []
        build = attribution._cause_timeline

        def recorded(calls, a, b, n_causes):
            timeline = build(calls, a, b, n_causes)
            sizes.append(timeline["bounds"].size)
            return timeline

        monkeypatch.setattr(attribution, "_cause_timeline", recorded)
        with nsysanalyze.open(fixture_trace("compile_warmup.sqlite")) as a:
            g = a.gaps()
        monkeypatch.setattr(attribution, "_cause_timeline", build)
        keys = [c for c in attribution.GAP_COLUMNS if c != "ns"]
        return g.groupby(keys)["ns"].sum().sort_index(), sizes

    one, [whole] = gaps(1 << 30)
    cut, sizes = gaps(1000)
    assert (whole < 10_000 if split else whole > 250_000) and len(sizes) > 100  # split: 7,051 bounds, else 284,587
    assert max(sizes) <= 2 * 1000 + 10  # each start and end a bound, plus the few intervals open at the cut
    assert len(one) > 5 and one.equals(cut)


# ---- the second session's captures (issue 22.9): the cause each was built to have is the top finding ----
@pytest.mark.parametrize("name,top", [
    ("checkpoint_per_step.sqlite", "file-io"),              # torch.save every step: fopen/writev
    ("empty_cache_per_step.sqlite", "allocator-churn"),     # torch.cuda.empty_cache() every step
    ("compile_warmup.sqlite", "warmup-capture"),            # torch.compile from the first iteration: 5.9 s in step 0
    ("link_bound.sqlite", "link-bound"),                    # pinned copies at the link's rate, nothing to hide under
    ("cupy_pageable.sqlite", "pin-memory"),                 # CuPy ndarray.set() from pageable memory
    ("cupy_managed.sqlite", "unified-memory"),              # managed memory touched by host and device
    ("optimizer_unfused.sqlite", "unfused-optimizer"),      # AdamW(foreach=False) on 258 parameter tensors
    ("hook_sync.sqlite", "host-sync"),                      # torch.cuda.synchronize() in 49 forward hooks
    ("workers_nonpersistent.sqlite", "periodic-stall"),     # the DataLoader forks its workers every epoch
    ("jax_pageable.sqlite", "dataloader-workers"),          # JAX: the batch built in 'get batch' before the step
    ("gloo_8rank_0.sqlite", "allreduce-through-host"),      # DDP with gloo: gradients reduced through the host
    ("mpi_hoststaged_0.sqlite", "allreduce-through-host"),  # mpi4py + CuPy: MPI_Allreduce on host buffers
])
def test_new_captures_top_finding_follows_the_cause(name, top):
    assert findings(name)[0].rule == top


def test_jax_and_cupy_get_their_own_words():
    jax = findings("jax_pageable.sqlite")[0]
    assert "jax.device_put" in jax.snippet and "DataLoader" not in jax.fix + jax.snippet
    cupy = [f for f in findings("cupy_pageable.sqlite") if f.rule == "pin-memory"][0]
    assert "cupyx.empty_pinned" in cupy.snippet


def test_eight_real_rank_files_end_to_end_with_jobs():
    """diagnose of the slow 8-rank gloo job's files with --jobs: one job, aligned, rank 3 named by waiting."""
    import subprocess
    import sys

    files = [str(fixture_trace(f"gloo_8rank_slow_{r}.sqlite")) for r in range(8)]
    out = subprocess.run([sys.executable, "-m", "nsysanalyze", "diagnose", "--jobs", "2", *files],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "Likely straggler: rank 3: host work before the first launch" in out.stdout
    assert "Ranks aligned by session start (UTC)" in out.stdout


@pytest.mark.parametrize("name,syncs,back", [
    ("masked_loss_index.sqlite", 3, "12 B"),    # logits[valid], y[valid] (two nonzero) + a third sync per step
    ("amp_scaler_foreach.sqlite", 1, "4 B"),    # GradScaler.step reads found_inf with .item() (Adam foreach)
])
def test_a_launch_bound_step_that_syncs_is_told_to_lose_the_syncs_before_a_graph(name, syncs, back):
    """ResNet-18 at batch 16 under the profiler: launch-bound (the host issues a kernel every ~30 us). The step
    also syncs with the host, which a CUDA graph cannot hold: the fix says so first, with the syncs it counted
    and what they read back, and the snippet shows the sync-free forms before the graph."""
    (f,) = [f for f in findings(name) if f.rule == "launch-bound"]
    assert f.evidence["host_syncs"] == syncs
    assert f.fix.startswith(f"The step synchronizes with the host {'once' if syncs == 1 else f'{syncs} times'}, "
                            f"reading {back} back, and a CUDA graph cannot hold a sync")
    assert f.fix.index("Then: Cut per-kernel launch cost") > f.fix.index("ignore_index")
    assert f.snippet.index("fused=True") < f.snippet.index('mode="reduce-overhead"')


@pytest.mark.parametrize("name", ["masked_loss_ignore.sqlite", "amp_scaler_fused.sqlite"])
def test_a_launch_bound_step_without_syncs_goes_straight_to_the_graph(name):
    """The fixed twins: no sync per step, so the launch-bound fix is the graph itself."""
    (f,) = [f for f in findings(name) if f.rule == "launch-bound"]
    assert f.evidence["host_syncs"] == 0 and f.fix.startswith("Cut per-kernel launch cost")
    assert "ignore_index" not in f.snippet


def test_a_starved_loader_is_not_told_to_keep_workers_it_keeps():
    """loader-2workers: persistent workers, 4 ms of CPU per sample, 2 workers for batch 32: a batch every ~128 ms
    per worker, so steps alternate ~41 ms and ~116 ms while the main thread waits in 'get batch'. No worker is
    started in the slow steps (no fork/clone) and workers hand batches over (munmap): the workers fall behind;
    the fix is more workers, not persistent_workers. workers-nonpersistent, whose slow steps fork new workers,
    keeps the epoch-restart fix."""
    by_rule = {f.rule: f for f in findings("loader_2workers.sqlite")}
    stall = by_rule["periodic-stall"]
    assert stall.title.endswith("(waiting for the loader's workers)") and stall.evidence["stall_process_start_ns"] == 0
    assert "More workers" in stall.fix and "persistent_workers=True)" not in stall.fix
    assert "more workers" in by_rule["dataloader-workers"].fix  # the median step waits for its batch too
    restart = {f.rule: f for f in findings("workers_nonpersistent.sqlite")}["periodic-stall"]
    assert restart.title.endswith("(the loader starting over)") and restart.evidence["stall_process_start_ns"] > 100e6
    assert "persistent_workers=True" in restart.fix


def test_enough_workers_leave_no_stall():
    """loader-12workers: the same loader with 12 workers keeps up: no periodic stall and no loader finding."""
    assert not {"periodic-stall", "dataloader-workers"} & {f.rule for f in findings("loader_12workers.sqlite")}


def test_a_compiled_step_whose_host_outruns_its_gpu_work_is_told_to_launch_less():
    """compile-steady: the torch.compile'd MLP after warm-up runs 105 kernels (0.88 ms of GPU work) in a 4.6 ms
    step; the GPU waits on the host between launches, in gaps longer than an eager launch-bound loop's (42% of the
    idle under 100 us, so not launch-bound's pattern). The residual names launch overhead first, and its fix is to
    launch less (CUDA graphs also for a compiled model), not to move the work to another thread."""
    top = findings("compile_steady.sqlite")[0]
    assert top.rule == "gpu-idle-unexplained" and top.evidence["cause_1"].startswith("launch: ")
    assert "mode='reduce-overhead'" in top.fix and "background thread" not in top.fix
    # the same under CUDA graphs: the eager optimizer step is left, its per-op dispatch (77% of the idle in gaps < 1 ms
    # between 107 kernels): compile the optimizer step too. Its fp32 GEMMs (62% of 0.8 ms of kernels) are named
    # first, with the little the host leaves them (0.24 ms: the host's work with its launches is 4.46 of 4.7 ms)
    fp32, graphs = findings("compile_graphs.sqlite")
    assert fp32.rule == "fp32-matmul" and 0.2e6 < fp32.gain_ns < 0.3e6
    assert graphs.evidence["cause_1"] == "nvtx_range: optimizer" and "background thread" not in graphs.fix
    assert "the host's work per operation" in graphs.fix and "optimizer.step()" in graphs.snippet


def test_syncs_that_follow_copies_to_the_gpu_are_told_to_pin_and_batch_them():
    """small-copies: a dict batch of 64 pageable 8 KB tensors, each .to(device): 64 syncs per step, one per copy.
    The host-sync finding names the copies as their source (pin, non_blocking, one buffer), not .item()."""
    f = {f.rule: f for f in findings("small_copies.sqlite")}["host-sync"]
    assert f.evidence["sync_wait_calls"] == 64 and "'copy batch'" in f.title
    assert f.fix.startswith("The syncs come with the step's 64 host-to-device copies") and "100% of it from pageable" in f.fix
    assert "non_blocking=True" in f.snippet and ".item()" not in f.fix


def test_a_periodic_evaluation_is_named_by_its_range():
    """eval-every-4: every 4th step also evaluates 8 batches: those steps take ~33 ms against ~12 ms; the periodic
    stall names the range the host works in, and the fix is the periodic-work one, not the loader's."""
    f = {f.rule: f for f in findings("eval_every_4.sqlite")}["periodic-stall"]
    assert f.evidence["stall_steps"] == 3 and f.title.endswith("(mostly while the host works in 'evaluate')")
    assert "evaluation" in f.fix and "DataLoader" not in f.fix


def test_kernels_loaded_in_every_steady_step_point_at_retuning():
    """cudnn-benchmark: a new image size every step with cudnn.benchmark on: ~1.8 s steps (34 ms without), the main
    thread waiting while the autograd thread autotunes. Kernels are loaded in every steady step (15-25 module
    loads), so the residual finding's fix names that first: fixed shapes, or cudnn.benchmark off. Without
    benchmark (the fixed twin) no kernel is loaded in the steady steps and the fix says nothing of it."""
    f = findings("cudnn_benchmark.sqlite")[0]
    assert f.rule == "gpu-idle-unexplained" and f.fix.startswith("Kernels are loaded in every steady step (")
    assert "cudnn.benchmark off" in f.fix and f.gain_ns > 1.5e9
    assert "Kernels are loaded" not in findings("cudnn_default.sqlite")[0].fix


def test_a_periodic_checkpoint_is_named_by_its_range():
    f = {f.rule: f for f in findings("checkpoint_every_5.sqlite")}["periodic-stall"]
    assert f.evidence["stall_steps"] == 2 and f.title.endswith("(mostly while the host works in 'save checkpoint')")


def test_a_loader_reading_files_is_the_loader_not_file_writes():
    """disk-loader: a DataLoader in the main process reads every sample from disk (fread before the step's first
    launch). A host cause claims the rows of its kinds whose cause matches (file-io: writes, and file opens after
    the first launch); it claimed every OS call before and named these reads "files written inside the step"."""
    found = {f.rule: f for f in findings("disk_loader.sqlite")}
    assert "file-io" not in found
    top = findings("disk_loader.sqlite")[0]
    assert top.rule == "dataloader-workers" and top.evidence["top_cause"] == "fread" and "num_workers" in top.snippet


def test_sync_waits_are_not_allocator_churn():
    """The gloo ranks' cudaStreamSynchronize waits were claimed by allocator-churn (the same bug): they are
    host-sync's now, and no finding names a sync an allocation."""
    found = {f.rule: f for f in findings("gloo_8rank_3.sqlite")}
    assert "allocator-churn" not in found and "host-sync" in found


def test_python_work_after_the_step_is_named_by_its_range():
    """host-metrics: 15 ms of Python work after each optimizer step (range 'metrics', no sync): the GPU runs dry;
    the residual finding names the range and says to take the work off the critical path."""
    top = findings("host_metrics.sqlite")[0]
    assert top.rule == "gpu-idle-unexplained" and top.evidence["cause_1"] == "nvtx_range: metrics"
    assert "'metrics'" in top.fix and "background thread" in top.fix


# ---- the fourth round: programs beyond PyTorch's eager loop, a Python thread beside the loop ----
def test_op_by_op_dispatch_is_told_to_compile_the_step():
    """jax-eager: the JAX step run op by op: 107 kernels of ~1.3 us in a 26.8 ms step, the idle spread over the gaps
    between them (all of it in gaps < 1 ms, 15% under 100 us: not launch-bound's pattern). The residual names the
    host's work per operation and says to jit the step, in JAX's words, not to move the work to a thread."""
    top = findings("jax_eager.sqlite")[0]
    assert top.rule == "gpu-idle-unexplained" and top.evidence["cause_1"] == "nvtx_range: train step"
    assert "the host's work per operation" in top.fix and "107 kernels" in top.fix
    assert "jax.jit" in top.fix + top.snippet and "background thread" not in top.fix and "torch" not in top.snippet


def test_xla_op_ranges_are_neither_warm_up_nor_a_loader():
    """jax-jit: XLA opens 'Thunk:#name=jit(train_step),hlo_op=...#' ranges around every op of the compiled step;
    they were taken for JIT warm-up, and 'input_reduce_fusion' for a data loader. The step is launch-bound (44
    kernels of 1.6 us, 8.8 us apart), told so in JAX's words (XLA command buffers, several steps per call)."""
    found = findings("jax_jit.sqlite")
    rules = [f.rule for f in found]
    assert rules[0] == "launch-bound" and "warmup-capture" not in rules and "dataloader-workers" not in rules
    assert "command buffer" in found[0].fix and "jax.lax.scan" in found[0].snippet


def test_a_cupy_elementwise_chain_is_told_to_fuse():
    top = findings("cupy_tinyops.sqlite")[0]
    assert top.rule == "launch-bound" and top.evidence["kernels"] == 72
    assert "@cupy.fuse()" in top.snippet and "torch" not in top.fix + top.snippet


def test_a_python_thread_beside_the_loop_is_named_by_the_gil():
    """gil-thread: a background Python thread alternating 3 ms of pure-Python work with 3 ms of sleep: the main thread
    waits in pthread_cond_timedwait (CPython's GIL) 7 ms per step. The residual names the GIL and says to move the
    thread's work to a process; the fixed twin (a spawned process) has no such wait."""
    top = findings("gil_thread.sqlite")[0]
    assert top.rule == "gpu-idle-unexplained" and top.evidence["cause_1"] == "os_wait: pthread_cond_timedwait"
    assert "GIL" in top.fix and "Process(" in top.snippet
    assert not any("GIL" in f.fix for f in findings("gil_process.sqlite"))


def test_one_kernel_shorter_than_a_launch_per_iteration_is_launch_bound():
    """cupy-fused: the chain fused into one 2.3 us kernel per 21 us Python iteration: fewer than 20 kernels per step,
    but each shorter than a launch costs (LAUNCH_NS), so no host keeps the GPU fed: launch-bound. cupy-managed's
    3 kernels of ~20 ms per step are not."""
    top = findings("cupy_fused.sqlite")[0]
    assert top.rule == "launch-bound" and top.title.startswith("Launch-bound: 1 kernel per step averaging 2.3 us")
    assert "launch-bound" not in {f.rule for f in findings("cupy_managed.sqlite")}


def test_a_host_callback_in_the_jitted_step_is_named():
    """jax-callback: jax-jit plus a jax.debug.callback logging the loss (1 ms of Python) inside the step: the GPU
    stops 1.3 ms per step in XLA's debug_callback range, and the step's dispatch before its first launch takes
    0.7 ms (0.06 ms without the callback: a jitted function with effects leaves JAX's C++ dispatch path). One
    finding claims both, with the fix in JAX's words; no loader or sync finding is left beside it."""
    found = findings("jax_callback.sqlite")
    assert [f.rule for f in found] == ["host-callback"]
    f = found[0]
    assert "debug_callback" in f.evidence["callback"] and 1.2e6 < f.evidence["callback_idle_ns"] < 1.4e6
    assert 0.6e6 < f.evidence["dispatch_idle_ns"] < 0.8e6 and "jax.debug" in f.fix and "torch" not in f.snippet


def test_numba_launches_are_told_to_loop_inside_the_kernel():
    """numba-tinyops: one @cuda.jit kernel launched 48 times per iteration (1.2 us of GPU work each, 25.6 us apart):
    launch-bound, with Numba's own fix (the rounds in one kernel, an explicit signature), not PyTorch's."""
    top = findings("numba_tinyops.sqlite")[0]
    assert top.rule == "launch-bound" and top.evidence["kernels"] == 48
    assert "@cuda.jit(" in top.snippet and "torch" not in top.fix + top.snippet


def test_launches_that_wait_for_their_kernels_are_named():
    """launch-blocking: ResNet-18 b32 with CUDA_LAUNCH_BLOCKING=1 left set. Every kernel ends before its launch
    call returns (100% of the kernel time, against at most 3% in every other export: the plain twin 0.01%), so
    the host waits 9.1 ms per step inside launches; the finding says to unset the variable, and its gain is those
    waits (the fix realized 10.3 ms profiled, 11.4 ms unprofiled), not launch-bound's graphs."""
    found = findings("launch_blocking.sqlite")
    top = found[0]
    assert top.rule == "launch-blocking" and "CUDA_LAUNCH_BLOCKING" in top.fix + top.snippet
    assert top.evidence["blocked_kernel_ns"] == top.evidence["kernel_sum_ns"]
    assert 8.5e6 < top.evidence["launch_wait_ns"] < 9.5e6 and top.gain_ns == top.evidence["launch_wait_ns"]
    # it claims launch-path idle up to its gain: launch overhead keeps the rest (asynchronous launches still cost)
    assert found[1].rule == "launch-bound" and 8e6 < found[1].gain_ns < 10e6
    assert not any(f.rule == "launch-blocking" for f in findings("debug_off.sqlite"))


def test_the_debugging_settings_in_other_frameworks():
    """The same settings in JAX and CuPy programs (verdicts only: their twins were timed unprofiled in the same call,
    jax_eager 39.8 ms and cupy_tinyops 1.32 ms a step). XLA_PYTHON_CLIENT_ALLOCATOR=platform: 77.2 ms unprofiled, the
    buffers made and freed with the virtual-memory calls (cuMemCreate/Map/SetAccess, cuMemUnmap/Release) per op;
    CuPy without its pool: cudaMalloc/cudaFree per array (1.59 ms); CuPy with CUDA_LAUNCH_BLOCKING=1 (1.39 ms): every
    launch waits, but its 72 tiny kernels stay launch-bound first. Each fix is in the program's own terms."""
    jax = findings("jax_eager_platform.sqlite")[0]
    assert jax.rule == "allocator-churn" and "per operation" in jax.title and "XLA_PYTHON_CLIENT_ALLOCATOR" in jax.fix
    assert "cuMemSetAccess" in jax.title and "torch" not in jax.fix + jax.snippet
    cupy = {f.rule: f for f in findings("cupy_tinyops_nopool.sqlite")}
    assert "set_allocator" in cupy["allocator-churn"].fix and "per operation" in cupy["allocator-churn"].title
    blocking = findings("cupy_tinyops_blocking.sqlite")
    assert [f.rule for f in blocking] == ["launch-bound", "launch-blocking"]
    assert blocking[1].snippet.startswith("unset CUDA_LAUNCH_BLOCKING") and "os.environ" not in blocking[1].snippet


def test_allocations_per_operation_say_the_caching_allocator_is_off():
    """no-caching-allocator: PYTORCH_NO_CUDA_MEMORY_CACHING=1: 721 allocation calls for 382 launches per step
    (cudaMalloc and cudaFree per tensor): the finding says the caching allocator is bypassed and to unset the
    variable. empty-cache-per-step (61 calls for 388 launches: the cache emptied once a step) keeps its own fix."""
    top = findings("no_caching_allocator.sqlite")[0]
    assert top.rule == "allocator-churn" and top.title.startswith("Memory allocated and freed per operation (721 ")
    assert "PYTORCH_NO_CUDA_MEMORY_CACHING" in top.fix + top.snippet and "empty_cache" not in top.fix
    churn = [f for f in findings("empty_cache_per_step.sqlite") if f.rule == "allocator-churn"][0]
    assert "empty_cache()" in churn.fix and "PYTORCH_NO_CUDA" not in churn.fix


def test_one_byte_reads_per_backward_node_name_anomaly_detection():
    """anomaly-mode: torch.autograd.set_detect_anomaly(True): 141 syncs per step from the backward thread, each after
    a one-byte copy back (the NaN check of every backward node), and a Python traceback recorded per forward op.
    host-sync names the flag reads and anomaly detection; the residual (the forward's per-op host work) says to
    turn it off before anything else. hook_sync (cudaDeviceSynchronize, no copy back) and sync_per_param (4-byte
    reads) are not flag reads."""
    found = findings("anomaly_mode.sqlite")
    sync, residual = (next(f for f in found if f.rule == r) for r in ("host-sync", "gpu-idle-unexplained"))
    assert "one byte" in sync.fix and "set_detect_anomaly" in sync.fix and "set_detect_anomaly(False)" in sync.snippet
    assert residual.fix.startswith("The copies back are one-byte flag reads (141 per step)")
    for other in ("hook_sync.sqlite", "sync_per_param.sqlite"):
        assert not any("anomaly" in f.fix for f in findings(other))


@pytest.mark.parametrize("name,family,source,steps", [("emit_nvtx.sqlite", "Step {n}", "nvtx", 6),
                                                      ("emit_nvtx_only.sqlite", "kernel sequence (period 382 kernels)",
                                                       "inferred", 5)])
def test_per_op_ranges_of_emit_nvtx_are_never_steps(name, family, source, steps):
    """The plain ResNet loop under torch.autograd.profiler.emit_nvtx(): an NVTX range per op ('aten::...,
    op_id = N', 'autograd::engine::evaluate_function: ...'), thousands per step. With the program's 'Step i'
    ranges those are the steps; without them the steps come from the kernel sequence (382 kernels, the step's
    own count), never from the per-op ranges, which are not even candidates."""
    with nsysanalyze.open(fixture_trace(name)) as a:
        assert (a.info.step_family, a.info.step_source, len(a.steps())) == (family, source, steps)
        assert not any(c.startswith(("aten::", "autograd::")) for c in a._step_candidates)


def test_slow_steps_that_step_the_optimizer_get_the_optimizer_fix():
    """accumulate-unfused: gradient accumulation, AdamW(foreach=False) every 4th micro-batch step: 3 of 11 steady steps
    take 91.5 ms against 36.5 ms, their extra time in 'optimizer'. periodic-stall said to make that work "asynchronous,
    rarer"; the optimizer step is not optional, so it now gives the optimizer's fix (fused). With fused=True
    (accumulate-fused) no step stalls."""
    stall = next(f for f in findings("accumulate_unfused.sqlite") if f.rule == "periodic-stall")
    assert stall.evidence["stall_top_cause"] == "nvtx_range: optimizer" and stall.evidence["stall_steps"] == 3
    assert "not work to make rarer" in stall.fix and "fused=True" in stall.snippet and "asynchronous" not in stall.fix
    assert "periodic-stall" not in {f.rule for f in findings("accumulate_fused.sqlite")}
    evaluation = next(f for f in findings("eval_every_4.sqlite") if f.rule == "periodic-stall")
    assert "asynchronous" in evaluation.fix  # other periodic work keeps its fix


def test_the_new_signatures_hold_on_a_second_model_and_the_driver_api():
    """anomaly-mlp: the optimizer-* MLP (258 parameter tensors, fused AdamW every step) under anomaly detection: 645
    one-byte reads per step, so host-sync and the residual name anomaly detection as on ResNet-18. jax-eager-blocking:
    JAX launches through the driver API (cuLaunchKernelEx) with CUDA_LAUNCH_BLOCKING=1: launch-blocking sees 100% of
    the kernel time end inside its launches, its gain 1 ms of a 47 ms step that JAX's op-by-op dispatch dominates
    (the residual, jax.jit, comes first)."""
    found = {f.rule: f for f in findings("anomaly_mlp.sqlite")}
    assert "set_detect_anomaly(True)" in found["host-sync"].fix and found["host-sync"].evidence["sync_wait_calls"] == 645
    assert found["gpu-idle-unexplained"].fix.startswith("The copies back are one-byte flag reads (645 per step)")
    jax = findings("jax_eager_blocking.sqlite")
    assert [f.rule for f in jax] == ["gpu-idle-unexplained", "launch-blocking"] and "jax.jit" in jax[0].fix
    assert jax[1].evidence["blocked_kernel_ns"] == jax[1].evidence["kernel_sum_ns"] and jax[1].gain_ns < 1.5e6


def test_a_recompilation_every_step_is_named_with_its_fix():
    """recompile-static: torch.compile fed a new batch size every step with Dynamo's automatic dynamic shapes off:
    every steady step recompiles (5.6 s against 5.1 ms with them on). Captured without OS-runtime tracing, the
    host's compile before the first launch was 'host-before-launch' ("prepare step N+1 in a background thread"); a
    step that loads kernels compiles before it launches, so the residual now names the recompilation and how to
    stop it (dynamic dimensions), and cudnn_benchmark's autotuning keeps its cuDNN words."""
    found = findings("recompile_static.sqlite")
    assert [f.rule for f in found] == ["gpu-idle-unexplained"]
    assert "recompiles" in found[0].fix and "mark_dynamic" in found[0].snippet and "cudnn" not in found[0].fix
    cudnn = findings("cudnn_benchmark.sqlite")[0]
    assert "cudnn.benchmark" in cudnn.fix and "mark_dynamic" not in cudnn.snippet


def test_a_blocking_graph_launch_is_not_module_loading():
    """tinyops-graphs with CUDA_LAUNCH_BLOCKING=1: one cudaGraphLaunch per step returns after its ~1,000 kernels ran
    (3.3 ms). A launch that long used to read as "kernel launch loading its module" (warm-up: "profile after
    warm-up"); launch-blocking now comes first and takes those rows, and the call's wait counts once, not once per
    kernel of the graph (which summed past the step)."""
    found = findings("tinyops_graphs_blocking.sqlite")
    assert [f.rule for f in found] == ["launch-blocking"]
    assert 3.0e6 < found[0].evidence["launch_wait_ns"] < 3.6e6 and found[0].evidence["launch_calls"] == 1
