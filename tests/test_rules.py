"""Rules are pure functions of Evidence (metrics + idle-gap attribution + ledger + framework): each fires on
its cause and stays quiet otherwise. Evidence here is hand-built; expected gains are worked out in comments
(a gain is the what-if bound: at most the ledger rows the fix removes, and at most the window less the
larger of the GPU work and the host work the fix leaves; host work = cpu_ns less the time in CUDA calls
that wait for the GPU)."""
import pandas as pd
import pytest

from nsysanalyze.ledger import Ledger
from nsysanalyze.rules import Evidence, diagnose

from evidence import ledger_rows

MS = 1_000_000


GAP_VALUES = ["ns", "before_launch_ns", "after_sync_ns", "short_gap_ns", "short_after_sync_ns"]


def gaps(*rows):
    """Attribution rows: (cause_kind, cause, ns, before_launch_ns, after_sync_ns[, short_gap_ns, short_after_sync_ns])."""
    rows = [tuple(r) + (0,) * (7 - len(r)) for r in rows]
    return pd.DataFrame(rows, columns=["cause_kind", "cause", *GAP_VALUES]).astype({c: float for c in GAP_VALUES})


def ev(facts=None, gap_rows=(), framework="pytorch", gpu="NVIDIA H200", scope="step median", **m):
    base = {"window_ns": 100 * MS, "cpu_ns": 100 * MS, "idle_fraction": 0.0, "idle_ns": 0.0}
    base.update(m)
    base.setdefault("busy_ns", base["window_ns"] - base["idle_ns"])
    return Evidence(globalPid=1, deviceId=0, scope=scope, m=base, facts={"gpu_devices": 1, **(facts or {})},
                    gaps=gaps(*gap_rows), framework=framework, gpu_name=gpu,
                    ledger=Ledger.of(ledger_rows(gap_rows, base), base))


def rules(e):
    return [f.rule for f in diagnose([e])]


# the host waits 30 ms in the blocking copies: not host work of its own
PAGEABLE = dict(htod_bytes=200e6, htod_pageable_bytes=200e6, htod_pageable_ns=30 * MS, htod_ns=30 * MS, htod_count=2,
                async_copy_ns=30 * MS)


def test_host_work_before_the_first_launch_is_the_loader_whatever_its_name():
    # 55 ms of idle before the step's first launch inside 'IO {n}'; the GPU is busy 40 ms (30 ms of it the
    # pageable copies, which the host waits in). Loader: 55 ms (the host work left, 100 - 30 - 55 = 15 ms, and
    # the GPU's 40 ms fit in the 45 ms left). Pinning 200 MB on an H200 (PCIe Gen5 class, 40 GB/s assumed:
    # 5 ms) saves 30 - 5 = 25 ms of copy time.
    e = ev(idle_fraction=0.6, idle_ns=60 * MS, **PAGEABLE,
           gap_rows=[("nvtx_range", "IO {n}", 55 * MS, 55 * MS, 0), ("untraced", "host work outside traced calls", 5 * MS, 0, 0)])
    found = diagnose([e])
    assert [f.rule for f in found] == ["dataloader-workers", "pin-memory"]
    assert found[0].gain_ns == 55 * MS and found[0].severity == "high" and "'IO {n}'" in found[0].title
    assert "num_workers" in found[0].snippet
    assert found[1].gain_ns == 25 * MS
    assert found[1].evidence["pinned_bandwidth_basis"].startswith("PCIe Gen5 x16 class of NVIDIA H200")
    assert found[0].claimed and not set(found[0].claimed) & set(found[1].claimed)


def test_pin_memory_gain_is_what_pinning_removes():
    # 100 MB pageable in 10 ms; the trace's own pinned copies ran at 50 GB/s -> 2 ms pinned: 8 ms faster;
    # + GPU idle 4 ms inside cudaMemcpyAsync and 6 ms after its sync (the copies are the only syncs) + 25 ms
    # idle during munmap = 43 ms. The GPU keeps 65 - 8 = 57 ms, the host 100 - 10 - 30 (waiting in copies
    # and full-queue launches) - 25 (munmap) = 35 ms: the bound, 100 - 57 = 43 ms, holds.
    e = ev(idle_fraction=0.35, idle_ns=35 * MS, htod_bytes=2e8, htod_pageable_bytes=1e8, htod_pageable_ns=10 * MS,
           htod_pinned_bytes=1e8, htod_pinned_ns=2 * MS, htod_ns=12 * MS, htod_hidden_ns=2 * MS, htod_count=4,
           munmap_gpu_idle_ns=25 * MS, munmap_count=3, munmap_ns=30 * MS, async_copy_ns=10 * MS, launch_ns=30 * MS,
           gap_rows=[("cuda_blocking", "cudaMemcpyAsync", 4 * MS, 0, 0),
                     ("untraced", "host work outside traced calls", 6 * MS, 0, 6 * MS), ("os_runtime", "munmap", 25 * MS, 0, 0)])
    (f,) = [f for f in diagnose([e]) if f.rule == "pin-memory"]
    assert f.gain_ns == 43 * MS and f.confidence == 0.9
    assert f.evidence["pinned_bandwidth_basis"] == "pinned host-to-device copies in this trace"
    assert f.evidence["bound"] == "min(removable 43.00 ms, window - max(GPU left, host left) 43.00 ms) = 43.00 ms"
    assert "3 munmap calls (30.0 ms)" in f.title


def test_pinning_is_bounded_by_the_host_work_it_leaves():
    # the same copies, but the host works the whole step on its own (no waits): pinning cannot shorten it
    e = ev(idle_fraction=0.35, idle_ns=35 * MS, htod_bytes=2e8, htod_pageable_bytes=1e8, htod_pageable_ns=10 * MS,
           htod_pinned_bytes=1e8, htod_pinned_ns=2 * MS, htod_ns=12 * MS, htod_count=4,
           gap_rows=[("cuda_blocking", "cudaMemcpyAsync", 4 * MS, 0, 0), ("untraced", "host work outside traced calls", 31 * MS, 0, 0)])
    assert "pin-memory" not in rules(e)


def test_pinned_but_serialized_copies():
    # 10 ms of pinned copies not under the 85 ms of compute; the host waits 50 ms on the full launch queue
    e = ev(idle_fraction=0.05, idle_ns=5 * MS, htod_bytes=1e8, htod_pinned_bytes=1e8, htod_ns=10 * MS, htod_hidden_ns=0,
           kernel_ns=85 * MS, launch_ns=50 * MS)
    (f,) = diagnose([e])
    assert f.rule == "copy-compute-overlap" and f.gain_ns == 10 * MS


def test_overlap_gains_at_most_the_compute_to_hide_under():
    # 28 ms of pinned copies at the link's rate (1.12 GB at 40 GB/s) and 0.76 ms of compute: overlap saves at
    # most 0.76 ms (below 1% of the step: no finding); only fewer bytes help, and halving them saves 14 ms
    e = ev(idle_fraction=0.7, idle_ns=70 * MS, htod_bytes=1.12e9, htod_pinned_bytes=1.12e9, htod_pinned_ns=28 * MS,
           htod_ns=28 * MS, kernel_ns=0.76 * MS, sync_wait_ns=70 * MS)
    found = diagnose([e])
    assert "copy-compute-overlap" not in [f.rule for f in found]
    (link,) = [f for f in found if f.rule == "link-bound"]
    assert link.gain_ns == 14 * MS and "fewer bytes" in link.fix


@pytest.mark.parametrize("copies", [dict(htod_bytes=1e8, htod_pinned_bytes=1e8, htod_ns=10 * MS, htod_hidden_ns=10 * MS), {}])
def test_busy_gpu_with_hidden_or_no_copies_is_ok(copies):
    (f,) = diagnose([ev(idle_fraction=0.02, idle_ns=2 * MS, kernel_ns=98 * MS, **copies)])
    assert f.rule == "input-pipeline-ok" and f.gain_ns == 0 and f.severity == "info"


def test_ddp_world_size_one():
    e = ev(dtod_bytes=2.4e9, dtod_count=600, dtod_ns=8 * MS, nccl_count=0, facts={"nccl_nvtx_ranges": 3}, launch_ns=50 * MS)
    (f,) = diagnose([e])
    assert f.rule == "ddp-single-gpu" and f.confidence == 0.85 and f.gain_ns == 8 * MS


# the host runs ahead and waits 50 ms per step on the full launch queue: the GPU's work sets the step
ALLREDUCE = dict(nccl_count=1, nccl_allreduce_count=1, nccl_allreduce_ns=40 * MS, nccl_allreduce_exposed_ns=38 * MS,
                 nccl_ns=40 * MS, nccl_exposed_ns=38 * MS, nccl_share=0.4, launch_ns=50 * MS)


def test_ddp_on_several_gpus_copies_and_one_exposed_bucket():
    found = rules(ev(dtod_bytes=2.4e9, dtod_ns=8 * MS, **ALLREDUCE))
    assert found[0] == "ddp-bucket-overlap"
    assert set(found) == {"ddp-bucket-overlap", "gradient-as-bucket-view", "grad-compression"}


def test_ddp_advice_only_for_pytorch():
    found = diagnose([ev(dtod_bytes=2.4e9, dtod_ns=8 * MS, framework="cuda", **ALLREDUCE)])
    assert [f.rule for f in found] == ["allreduce-exposed"]
    assert found[0].snippet == "" and "DDP" not in found[0].fix


def test_many_buckets_still_exposed_suggests_static_graph():
    e = ev(nccl_count=11, nccl_allreduce_count=11, nccl_allreduce_ns=20 * MS, nccl_allreduce_exposed_ns=18 * MS,
           launch_ns=50 * MS)
    assert rules(e) == ["ddp-static-graph"]


def test_fast_nccl_is_not_a_compression_case():
    # 2.4 GB DtoD -> payload estimate 2.4 GB in 10 ms = 240 GB/s: NVLink-class
    e = ev(dtod_bytes=2.4e9, dtod_ns=1 * MS, nccl_allreduce_count=11, nccl_allreduce_ns=10 * MS,
           nccl_allreduce_exposed_ns=1 * MS)
    assert "grad-compression" not in rules(e)


def test_point_to_point_is_pipeline_advice_not_ddp():
    e = ev(nccl_count=4, nccl_ns=12 * MS, nccl_exposed_ns=10 * MS, nccl_sendrecv_count=4, nccl_sendrecv_ns=12 * MS,
           nccl_sendrecv_exposed_ns=10 * MS, launch_ns=50 * MS)
    (f,) = diagnose([e])
    assert f.rule == "pipeline-p2p" and f.gain_ns == 5 * MS and "micro-batches" in f.fix


def test_fsdp_collectives():
    e = ev(nccl_allgather_count=24, nccl_allgather_exposed_ns=6 * MS, nccl_reducescatter_count=24,
           nccl_reducescatter_exposed_ns=4 * MS, launch_ns=50 * MS)
    (f,) = diagnose([e])
    assert f.rule == "fsdp-collectives" and f.gain_ns == 5 * MS and "limit_all_gathers" in f.snippet


LAUNCH_GAPS = [("untraced", "host work outside traced calls", 30 * MS, 0, 0, 25 * MS, 0),
               ("launch", "kernel launch", 20 * MS, 0, 0, 15 * MS, 0)]
LAUNCH = dict(idle_fraction=0.5, idle_ns=50 * MS, idle_gap_count=2000, kernel_count=2000, kernel_sum_ns=50 * MS,
              launch_ns=20 * MS, launch_calls=2000)


def test_launch_bound_from_short_gaps():
    # 25 + 15 ms of the 50 ms idle lie in gaps < 100 us with no sync before them
    (f,) = diagnose([ev(gap_rows=LAUNCH_GAPS, **LAUNCH)])
    assert f.rule == "launch-bound" and f.gain_ns == 40 * MS and "torch.compile" in f.snippet
    assert f.fix.endswith("here a kernel is issued every 50.0 us; without the profiler the host launches faster and "
                          "the gain is smaller than this bound, so time the loop without nsys before and after.")
    (c,) = diagnose([ev(framework="cuda", gap_rows=LAUNCH_GAPS, **LAUNCH)])
    assert "cudaStreamBeginCapture" in c.snippet


def test_launch_bound_with_syncs_in_the_step_removes_them_first():
    """Two host syncs per step (a wait and a blocking copy) reading 8 B back: a graph cannot hold them, so the fix
    (in the program's language) takes them out first; per capture (no steps) the count is not per iteration."""
    syncs = dict(sync_wait_calls=1, sync_copy_calls=1, dtoh_count=2, dtoh_bytes=8)
    (f,) = diagnose([ev(gap_rows=LAUNCH_GAPS, **LAUNCH, **syncs)])
    assert f.fix.startswith("The step synchronizes with the host 2 times, reading 8 B back, and a CUDA graph")
    assert f.evidence["host_syncs"] == 2 and f.gain_ns == 40 * MS
    assert f.snippet.index("ignore_index") < f.snippet.index("torch.compile")
    (c,) = diagnose([ev(framework="cuda", gap_rows=LAUNCH_GAPS, **LAUNCH, **syncs)])
    assert c.fix.startswith("The iteration synchronizes with the host 2 times") and "cudaStreamBeginCapture" in c.snippet
    (g,) = diagnose([ev(scope="capture", gap_rows=LAUNCH_GAPS, **LAUNCH, **syncs)])
    assert g.fix.startswith("Cut per-kernel launch cost")


def test_long_idle_gaps_are_not_launch_bound():
    e = ev(gap_rows=[("untraced", "host work outside traced calls", 50 * MS, 0, 0, 5 * MS, 0)], **LAUNCH)
    assert "launch-bound" not in rules(e)


def test_short_gaps_after_syncs_are_the_syncs():
    # the same short gaps, all right after host syncs: host-sync's, not launch overhead
    synced = [("untraced", "host work outside traced calls", 30 * MS, 0, 30 * MS, 25 * MS, 25 * MS),
              ("launch", "kernel launch", 20 * MS, 0, 20 * MS, 15 * MS, 15 * MS)]
    assert rules(ev(gap_rows=synced, sync_wait_calls=60, **LAUNCH)) == ["host-sync"]


def test_dtoh_copies_and_syncs():
    # 100 MB back, 20 ms on the compute stream (not hidden): pinned it takes 2.5 ms (17.5 ms saved) and hides
    # under the 70 ms of compute; + 10 ms idle after the sync = 30 ms (the host waits 60 ms in the sync)
    e = ev(idle_fraction=0.1, idle_ns=10 * MS, dtoh_bytes=100e6, dtoh_pageable_bytes=100e6, dtoh_count=1,
           dtoh_ns=20 * MS, dtoh_hidden_ns=0, sync_wait_calls=1, kernel_ns=70 * MS, sync_wait_ns=60 * MS,
           gap_rows=[("untraced", "host work outside traced calls", 10 * MS, 0, 10 * MS)])
    (f,) = diagnose([e])
    assert f.rule == "dtoh-sync" and f.gain_ns == 30 * MS and "pin_memory=True" in f.snippet


def test_dtoh_hidden_on_a_side_stream_is_quiet():
    e = ev(dtoh_bytes=100e6, dtoh_count=1, dtoh_ns=20 * MS, dtoh_hidden_ns=20 * MS, kernel_ns=95 * MS)
    assert "dtoh-sync" not in rules(e)


def test_host_sync_without_copies():
    e = ev(idle_fraction=0.13, idle_ns=13 * MS, sync_wait_calls=3, sync_wait_ns=70 * MS,
           gap_rows=[("launch", "kernel launch", 2 * MS, 0, 2 * MS), ("untraced", "host work outside traced calls", 6 * MS, 0, 6 * MS),
                     ("nvtx_range", "log", 2 * MS, 0, 2 * MS), ("os_runtime", "write", 3 * MS, 0, 3 * MS)])
    (f,) = diagnose([e])
    # 10 ms follow the syncs while the host works (the write is an OS call, a cause of its own): without the
    # syncs the host's work (in 'log' too) would overlap queued GPU work; the host's own 30 ms fit
    assert f.rule == "host-sync" and f.gain_ns == 10 * MS


@pytest.mark.parametrize("copies,back,starts", [
    (dict(htod_count=3, htod_bytes=3e6, htod_pageable_bytes=1.5e6), {}, "The syncs come with the step's 3 host-to-device "
     "copies: .to(device) without non_blocking=True waits for each copy (3.0 MB, 50% of it from pageable memory)"),
    (dict(htod_count=1), {}, "Remove per-step host synchronizations"),                 # 1 copy for 3 syncs
    (dict(htod_count=3, htod_bytes=3e6), dict(dtoh_count=3, dtoh_bytes=12), "Remove per-step host synchronizations"),
    (dict(htod_count=1), dict(dtoh_count=3, dtoh_bytes=3), "The syncs read one byte back: the host checks a boolean "
     "flag (3 per step: if t.any():, bool(t), torch.isnan(x).any()), and waits for the GPU each time. Keep"),  # flags
    (dict(htod_count=1), dict(dtoh_count=14, dtoh_bytes=17), "The syncs read one byte back"),  # 13 flags and a loss
    (dict(htod_count=1), dict(dtoh_count=14, dtoh_bytes=56), "Remove per-step host synchronizations"),  # 4-byte reads
])
def test_host_sync_names_copies_to_the_gpu_as_the_source_when_they_come_with_the_syncs(copies, back, starts):
    """3 syncs per step: with at least half as many host-to-device copies and no copies back, the syncs are the
    copies' own waits (pin, non_blocking, one buffer); else the usual sources (.item(), .cpu(), synchronize)."""
    e = ev(idle_fraction=0.13, idle_ns=13 * MS, sync_wait_calls=3, sync_wait_ns=70 * MS, **copies, **back,
           gap_rows=[("untraced", "host work outside traced calls", 10 * MS, 0, 10 * MS)])
    (f,) = [f for f in diagnose([e]) if f.rule == "host-sync"]
    assert f.fix.startswith(starts)


@pytest.mark.parametrize("where,anomaly", [("launch", True), ("nvtx_range", False)])
def test_one_byte_reads_name_anomaly_detection_only_from_another_thread(where, anomaly):
    """20 one-byte reads per step (boolean flags): when the GPU waits after them mostly on another thread's launches
    (autograd's engine, which runs anomaly detection's NaN check per backward node) the fix names anomaly detection;
    when it waits on the main thread's own work (a solver reading its convergence flag every iteration), only the
    flag reads."""
    cause = ("between launches on another thread in 'backward'" if where == "launch" else "solver")
    e = ev(idle_fraction=0.13, idle_ns=13 * MS, sync_wait_calls=20, sync_wait_ns=2 * MS, dtoh_count=20, dtoh_bytes=20,
           gap_rows=[(where, cause, 10 * MS, 0, 10 * MS)])
    (f,) = [f for f in diagnose([e]) if f.rule == "host-sync"]
    assert f.fix.startswith("The syncs read one byte back") and ("set_detect_anomaly(True)" in f.fix) == anomaly


def test_removing_syncs_cannot_remove_the_host_work_between_them():
    # 8.9 ms of CPU work between syncs, the GPU busy 0.3 ms: without the syncs the step still lasts 8.9 ms
    e = ev(window_ns=9.2 * MS, cpu_ns=9.2 * MS, idle_fraction=0.97, idle_ns=8.9 * MS, sync_wait_calls=20,
           sync_wait_ns=0.3 * MS, gap_rows=[("untraced", "host work outside traced calls", 8.9 * MS, 0, 8.9 * MS)])
    (f,) = [f for f in diagnose([e]) if f.rule == "host-sync"]
    assert f.gain_ns == pytest.approx(0.3 * MS)


def test_unexplained_idle_names_its_biggest_causes():
    e = ev(idle_fraction=0.37, idle_ns=37 * MS, gap_rows=[("nvtx_range", "IO {n}", 35 * MS, 0, 0), ("os_runtime", "write", 2 * MS, 0, 0)])
    (f,) = diagnose([e])
    assert f.rule == "gpu-idle-unexplained" and f.gain_ns == 37 * MS
    assert "IO {n} (nvtx_range, 35.0 ms)" in f.title and "'IO {n}'" in f.fix


def test_fixes_in_the_programs_language():
    openmp = [f for f in diagnose([ev(framework="openmp", gpu="Tesla T4", **PAGEABLE)]) if f.rule == "pin-memory"][0]
    assert "#pragma omp target data" in openmp.snippet and "torch" not in openmp.snippet
    unknown = [f for f in diagnose([ev(framework="unknown", **PAGEABLE)]) if f.rule == "pin-memory"][0]
    assert unknown.snippet == ""


def test_capture_scope_says_capture():
    (f,) = [f for f in diagnose([ev(scope="capture", **PAGEABLE)]) if f.rule == "pin-memory"]
    assert "per capture" in f.title and "step" not in f.title


@pytest.mark.parametrize("m", [
    {},                                                         # nothing going on
    {"htod_bytes": 1e3, "htod_pageable_bytes": 1e3, "htod_pageable_ns": 1000, "htod_ns": 1000},  # tiny pageable copy
])
def test_quiet_when_nothing_matches(m):
    assert rules(ev(**m)) == []


def test_pin_memory_shows_munmap_evidence_only_when_osrt_was_captured():
    (without,) = diagnose([ev(facts={"osrt_captured": 0.0}, **PAGEABLE)])
    (with_osrt,) = diagnose([ev(facts={"osrt_captured": 1.0}, **PAGEABLE)])
    assert "munmap_count" not in without.evidence
    assert with_osrt.evidence["munmap_count"] == 0


def test_empty_cache_every_step_is_allocator_churn():
    # cudaFree/cudaMalloc hold the host 12 ms while the GPU idles; the host waits 60 ms on the GPU otherwise
    e = ev(idle_fraction=0.2, idle_ns=20 * MS, alloc_calls=40, alloc_ns=12 * MS, sync_wait_ns=60 * MS,
           gap_rows=[("cuda_blocking", "cudaFree", 8 * MS, 0, 0), ("cuda_blocking", "cudaMalloc", 4 * MS, 0, 0),
                     ("untraced", "host work outside traced calls", 8 * MS, 0, 0)])
    found = {f.rule: f for f in diagnose([e])}
    churn = found["allocator-churn"]
    assert churn.gain_ns == 12 * MS and "empty_cache" in churn.fix and churn.evidence["alloc_calls"] == 40
    assert "background thread" not in churn.fix


def test_unified_memory_migrations_are_counted_and_named():
    e = ev(framework="cuda", um_count=300, um_bytes=6e8, um_ns=20 * MS, launch_ns=60 * MS)
    (f,) = diagnose([e])
    assert f.rule == "unified-memory" and f.gain_ns == 20 * MS and "cudaMemPrefetchAsync" in f.snippet


def test_host_waiting_in_mpi():
    e = ev(framework="cuda", idle_fraction=0.3, idle_ns=30 * MS, sync_wait_ns=60 * MS,
           gap_rows=[("nvtx_range", "MPI_Wait", 25 * MS, 0, 0), ("untraced", "host work outside traced calls", 5 * MS, 0, 0)])
    found = {f.rule: f for f in diagnose([e])}
    assert found["mpi-wait"].gain_ns == 25 * MS and "CUDA-aware MPI" in found["mpi-wait"].fix


def test_host_work_before_launch_without_data_loading_gets_no_dataloader_advice():
    # resident data (no copy per step), no loader-like range: the host prepares the step in 'build graph'
    e = ev(idle_fraction=0.5, idle_ns=50 * MS, gap_rows=[("nvtx_range", "build graph", 45 * MS, 45 * MS, 0)])
    (f,) = [f for f in diagnose([e]) if f.gain_ns]
    assert f.rule == "host-before-launch" and "DataLoader" not in f.fix + f.snippet


def test_a_loader_with_workers_is_told_they_cannot_keep_up():
    # the main thread waits 45 ms for the workers' batch (munmap of their shared memory in the step)
    e = ev(idle_fraction=0.5, idle_ns=50 * MS, munmap_count=2, htod_count=2,
           gap_rows=[("os_wait", "pthread_cond_wait", 45 * MS, 45 * MS, 0)])
    (f,) = [f for f in diagnose([e]) if f.rule == "dataloader-workers"]
    assert "waits in pthread_cond_wait for the loader's workers" in f.title
    assert "cannot keep up" in f.fix and "num_workers=16" in f.snippet


STALLS = dict(stall_steps=2.0, steady_step_count=10.0, stall_excess_ns=20 * MS, stall_step_ns=200 * MS,
              stall_cause="nvtx_range: get batch", stall_before_launch_share=0.9)


@pytest.mark.parametrize("facts,metrics,kind,text", [
    ({"stall_process_start_ns": 50 * MS, "osrt_captured": 1.0}, {"munmap_count": 2}, "(the loader starting over)",
     "keep them (persistent_workers=True)"),
    ({"stall_process_start_ns": 0.0, "osrt_captured": 1.0}, {"munmap_count": 2}, "(waiting for the loader's workers)",
     "More workers (up to the free cores)"),
    ({"stall_process_start_ns": 0.0, "osrt_captured": 1.0}, {}, "(waiting for the loader)", "more workers"),
    ({"stall_process_start_ns": 0.0, "osrt_captured": 0.0}, {}, "(waiting for the loader)", "--trace=osrt tells"),
])
def test_a_loader_stall_is_named_by_what_the_slow_steps_did(facts, metrics, kind, text):
    """Slow steps that wait for their batch before the first launch: worker processes started in them are the
    loader starting over at an epoch boundary; workers seen (munmap) and none started are workers falling
    behind; without the OS calls the fix names both (and how to tell them apart)."""
    (f,) = [f for f in diagnose([ev(facts={**STALLS, **facts}, htod_count=1, **metrics)]) if f.rule == "periodic-stall"]
    assert f.title.endswith(kind) and text in f.fix
    assert f.gain_ns == 20 * MS


@pytest.mark.parametrize("cause,kind", [("nvtx_range: evaluate", "(mostly while the host works in 'evaluate')"),
                                        ("os_runtime: write", "(mostly in write calls)"),
                                        ("untraced: host work outside traced calls", "on average")])
def test_a_periodic_stall_that_is_not_the_loader_names_where_it_waits(cause, kind):
    """Slow steps whose idle is not before the first launch: periodic work, named by its largest cause when that
    is a range or a call (untraced host work has no name to give)."""
    facts = {**STALLS, "stall_cause": cause, "stall_before_launch_share": 0.1, "osrt_captured": 1.0}
    (f,) = [f for f in diagnose([ev(facts=facts, htod_count=1)]) if f.rule == "periodic-stall"]
    assert f.title.endswith(kind) and "asynchronous, rarer" in f.fix


@pytest.mark.parametrize("scope,first", [("step median", True), ("capture", False)])
def test_unexplained_idle_with_kernels_loaded_every_step_says_the_step_keeps_retuning(scope, first):
    """A median steady step that loads kernels (3 module loads) has no steady state: the residual's fix says so first
    (fixed shapes, cudnn.benchmark off); a capture without steps is one window, where loads are expected."""
    e = ev(scope=scope, idle_fraction=0.37, idle_ns=37 * MS, module_load_calls=3, sync_wait_calls=40, alloc_calls=9,
           gap_rows=[("os_wait", "pthread_cond_wait", 35 * MS, 0, 0), ("os_runtime", "write", 2 * MS, 0, 0)])
    (f,) = [f for f in diagnose([e]) if f.rule == "gpu-idle-unexplained"]
    assert f.fix.startswith("Kernels are loaded in every steady step (3 module loads, 40 syncs and 9 allocations") == first


def test_a_frameworks_op_ranges_are_not_data_loading():
    """XLA opens a range per op of a compiled program ('Thunk:#hlo_op=input_reduce_fusion...#': 'input' is a fusion
    kind); such names are not evidence of a loader, the program's own 'get batch' is."""
    from dataclasses import replace

    from nsysanalyze.rules.input_pipeline import loads_data
    e = ev(framework="jax", htod_count=0)
    ops = {"Thunk:#hlo_op=input_reduce_fusion,unique_hlo_op_id={n}#": (1e4, 0.01),
           "XlaModule:#hlo_module=jit_load_step,program_id={n}#": (1e5, 0.1), "train step": (3e5, 0.9)}
    assert not loads_data(replace(e, subranges=ops))
    assert loads_data(replace(e, subranges={**ops, "get batch": (1e5, 0.1)}))


@pytest.mark.parametrize("dispatch_ns, kernels, framework, named", [
    (36 * MS, 200, "jax", True),       # all the idle in gaps < 1 ms between 200 kernels: the host's work per op
    (36 * MS, 200, "pytorch", True),
    (10 * MS, 200, "jax", False),      # most of it in longer gaps (one block of host work): move it
    (36 * MS, 10, "jax", False),       # too few kernels to speak of per-op work
])
def test_unexplained_idle_tells_the_hosts_work_per_op_from_one_block(dispatch_ns, kernels, framework, named):
    """The residual finding's fix when its first cause is host work in a range: the host's work per operation
    (compile the step) when at least half of the idle lies in gaps < 1 ms between 20 or more kernels that the host
    issues slower than the GPU runs them; otherwise take the work off the critical path."""
    e = ev(framework=framework, idle_fraction=0.37, idle_ns=37 * MS, kernel_count=kernels, kernel_sum_ns=10 * MS,
           idle_dispatch_gap_ns=dispatch_ns, gap_rows=[("nvtx_range", "train step", 37 * MS, 0, 0)])
    (f,) = diagnose([e])
    assert ("the host's work per operation" in f.fix) is named
    assert ("background thread" in f.fix) is not named
    if named:
        assert ("jax.jit" if framework == "jax" else "torch.compile") in f.fix + f.snippet


@pytest.mark.parametrize("framework, named", [("pytorch", True), ("python", True), ("cuda", False)])
def test_a_timed_wait_of_a_python_main_thread_is_the_gil(framework, named):
    """pthread_cond_timedwait on the primary thread is CPython's GIL wait only in a Python program."""
    e = ev(framework=framework, idle_fraction=0.37, idle_ns=37 * MS,
           gap_rows=[("os_wait", "pthread_cond_timedwait", 37 * MS, 0, 0)])
    (f,) = diagnose([e])
    assert ("GIL" in f.fix) is named and ("multiprocessing" in f.fix + f.snippet) is named


@pytest.mark.parametrize("framework, gain_ms", [("jax", 20), ("cupy", 13)])
def test_a_host_callback_claims_its_range_and_in_jax_the_steps_dispatch(framework, gain_ms):
    """host-callback: the idle in XLA's callback range (13 ms) and, in JAX only, the step's own range before its
    first launch (7 ms: a jitted function with effects is dispatched on the Python path); a loader's range before
    the launch ('get batch', 5 ms) stays the loader's."""
    callback = "Thunk:#name=jit(step)/debug_callback,hlo_op=debug_callback.{n},unique_hlo_op_id={n}#"
    e = ev(framework=framework, idle_fraction=0.25, idle_ns=25 * MS, htod_count=1,
           gap_rows=[("nvtx_range", callback, 13 * MS, 0, 13 * MS), ("nvtx_range", "train step", 7 * MS, 7 * MS, 0),
                     ("nvtx_range", "get batch", 5 * MS, 5 * MS, 0)])
    found = {f.rule: f for f in diagnose([e])}
    f = found["host-callback"]
    assert f.gain_ns == gain_ms * MS and f.evidence["callback"] == callback
    assert ("jax.debug" in f.fix) is (framework == "jax")
