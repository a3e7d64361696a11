"""Rules are pure functions of Evidence (metrics + idle-gap attribution + framework): each fires on its
cause and stays quiet otherwise. Evidence here is hand-built; expected gains are worked out in comments."""
import pandas as pd
import pytest

from nsysanalyze.rules import Evidence, diagnose

MS = 1_000_000


GAP_VALUES = ["ns", "before_launch_ns", "after_sync_ns", "short_gap_ns", "short_after_sync_ns"]


def gaps(*rows):
    """Attribution rows: (cause_kind, cause, ns, before_launch_ns, after_sync_ns[, short_gap_ns, short_after_sync_ns])."""
    rows = [tuple(r) + (0,) * (7 - len(r)) for r in rows]
    return pd.DataFrame(rows, columns=["cause_kind", "cause", *GAP_VALUES]).astype({c: float for c in GAP_VALUES})


def ev(facts=None, gap_rows=(), framework="pytorch", gpu="NVIDIA H200", scope="step median", **m):
    base = {"window_ns": 100 * MS, "cpu_ns": 100 * MS, "idle_fraction": 0.0, "idle_ns": 0.0}
    base.update(m)
    return Evidence(globalPid=1, deviceId=0, scope=scope, m=base, facts={"gpu_devices": 1, **(facts or {})},
                    gaps=gaps(*gap_rows), framework=framework, gpu_name=gpu)


def rules(e):
    return [f.rule for f in diagnose([e])]


PAGEABLE = dict(htod_bytes=200e6, htod_pageable_bytes=200e6, htod_pageable_ns=30 * MS, htod_ns=30 * MS)


def test_host_work_before_the_first_launch_is_the_loader_whatever_its_name():
    # 75 ms of idle before the step's first launch inside 'IO {n}'; pinning 200 MB on an H200 (PCIe Gen5 class,
    # 40 GB/s assumed: 5 ms) saves 30 - 5 = 25 ms
    e = ev(idle_fraction=0.8, idle_ns=80 * MS, **PAGEABLE,
           gap_rows=[("nvtx_range", "IO {n}", 75 * MS, 75 * MS, 0), ("untraced", "host work outside traced calls", 5 * MS, 0, 0)])
    found = diagnose([e])
    assert [f.rule for f in found] == ["dataloader-workers", "pin-memory"]
    assert found[0].gain_ns == 75 * MS and found[0].severity == "high" and "'IO {n}'" in found[0].title
    assert "num_workers" in found[0].snippet
    assert found[1].gain_ns == 25 * MS
    assert found[1].evidence["pinned_bandwidth_basis"].startswith("PCIe Gen5 x16 class of NVIDIA H200")


def test_pin_memory_gain_is_what_pinning_removes():
    # 100 MB pageable in 10 ms; the trace's own pinned copies ran at 50 GB/s -> 2 ms pinned: 8 ms faster;
    # + GPU idle 4 ms inside cudaMemcpyAsync and 6 ms after its sync + 25 ms idle during munmap = 43 ms
    e = ev(idle_fraction=0.3, idle_ns=30 * MS, htod_bytes=2e8, htod_pageable_bytes=1e8, htod_pageable_ns=10 * MS,
           htod_pinned_bytes=1e8, htod_pinned_ns=2 * MS, htod_ns=12 * MS, munmap_gpu_idle_ns=25 * MS, munmap_count=3,
           munmap_ns=30 * MS, gap_rows=[("cuda_blocking", "cudaMemcpyAsync", 4 * MS, 0, 0),
                                        ("untraced", "host work outside traced calls", 6 * MS, 0, 6 * MS)])
    (f,) = [f for f in diagnose([e]) if f.rule == "pin-memory"]
    assert f.gain_ns == 43 * MS and f.confidence == 0.9
    assert f.evidence["pinned_bandwidth_basis"] == "pinned host-to-device copies in this trace"
    assert "3 munmap calls (30.0 ms)" in f.title


def test_pinned_but_serialized_copies():
    e = ev(idle_fraction=0.05, idle_ns=5 * MS, htod_bytes=1e8, htod_pinned_bytes=1e8, htod_ns=10 * MS, htod_hidden_ns=0,
           kernel_ns=85 * MS)
    (f,) = diagnose([e])
    assert f.rule == "copy-compute-overlap" and f.gain_ns == 10 * MS


@pytest.mark.parametrize("copies", [dict(htod_bytes=1e8, htod_pinned_bytes=1e8, htod_ns=10 * MS, htod_hidden_ns=10 * MS), {}])
def test_busy_gpu_with_hidden_or_no_copies_is_ok(copies):
    (f,) = diagnose([ev(idle_fraction=0.02, idle_ns=2 * MS, kernel_ns=98 * MS, **copies)])
    assert f.rule == "input-pipeline-ok" and f.gain_ns == 0 and f.severity == "info"


def test_ddp_world_size_one():
    e = ev(dtod_bytes=2.4e9, dtod_count=600, dtod_ns=8 * MS, nccl_count=0, facts={"nccl_nvtx_ranges": 3})
    (f,) = diagnose([e])
    assert f.rule == "ddp-single-gpu" and f.confidence == 0.85 and f.gain_ns == 8 * MS


ALLREDUCE = dict(nccl_count=1, nccl_allreduce_count=1, nccl_allreduce_ns=40 * MS, nccl_allreduce_exposed_ns=38 * MS,
                 nccl_ns=40 * MS, nccl_exposed_ns=38 * MS, nccl_share=0.4)


def test_ddp_on_several_gpus_copies_and_one_exposed_bucket():
    found = rules(ev(dtod_bytes=2.4e9, dtod_ns=8 * MS, **ALLREDUCE))
    assert found[0] == "ddp-bucket-overlap"
    assert set(found) == {"ddp-bucket-overlap", "gradient-as-bucket-view", "grad-compression"}


def test_ddp_advice_only_for_pytorch():
    found = diagnose([ev(dtod_bytes=2.4e9, dtod_ns=8 * MS, framework="cuda", **ALLREDUCE)])
    assert [f.rule for f in found] == ["allreduce-exposed"]
    assert found[0].snippet == "" and "DDP" not in found[0].fix


def test_many_buckets_still_exposed_suggests_static_graph():
    e = ev(nccl_count=11, nccl_allreduce_count=11, nccl_allreduce_ns=20 * MS, nccl_allreduce_exposed_ns=18 * MS)
    assert rules(e) == ["ddp-static-graph"]


def test_fast_nccl_is_not_a_compression_case():
    # 2.4 GB DtoD -> payload estimate 2.4 GB in 10 ms = 240 GB/s: NVLink-class
    e = ev(dtod_bytes=2.4e9, dtod_ns=1 * MS, nccl_allreduce_count=11, nccl_allreduce_ns=10 * MS,
           nccl_allreduce_exposed_ns=1 * MS)
    assert "grad-compression" not in rules(e)


def test_point_to_point_is_pipeline_advice_not_ddp():
    e = ev(nccl_count=4, nccl_ns=12 * MS, nccl_exposed_ns=10 * MS, nccl_sendrecv_count=4, nccl_sendrecv_ns=12 * MS,
           nccl_sendrecv_exposed_ns=10 * MS)
    (f,) = diagnose([e])
    assert f.rule == "pipeline-p2p" and f.gain_ns == 5 * MS and "micro-batches" in f.fix


def test_fsdp_collectives():
    e = ev(nccl_allgather_count=24, nccl_allgather_exposed_ns=6 * MS, nccl_reducescatter_count=24,
           nccl_reducescatter_exposed_ns=4 * MS)
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
    (c,) = diagnose([ev(framework="cuda", gap_rows=LAUNCH_GAPS, **LAUNCH)])
    assert "cudaStreamBeginCapture" in c.snippet


def test_long_idle_gaps_are_not_launch_bound():
    e = ev(gap_rows=[("untraced", "host work outside traced calls", 50 * MS, 0, 0, 5 * MS, 0)], **LAUNCH)
    assert "launch-bound" not in rules(e)


def test_short_gaps_after_syncs_are_the_syncs():
    # the same short gaps, all right after host syncs: host-sync's, not launch overhead
    synced = [("untraced", "host work outside traced calls", 30 * MS, 0, 30 * MS, 25 * MS, 25 * MS),
              ("launch", "kernel launch", 20 * MS, 0, 20 * MS, 15 * MS, 15 * MS)]
    assert rules(ev(gap_rows=synced, sync_wait_calls=60, **LAUNCH)) == ["host-sync"]


def test_dtoh_copies_and_syncs():
    # 100 MB back, 20 ms on the compute stream (not hidden) + 10 ms idle after the sync = 30 ms
    e = ev(idle_fraction=0.1, idle_ns=10 * MS, dtoh_bytes=100e6, dtoh_pageable_bytes=100e6, dtoh_count=1,
           dtoh_ns=20 * MS, dtoh_hidden_ns=0, sync_wait_calls=1,
           gap_rows=[("untraced", "host work outside traced calls", 10 * MS, 0, 10 * MS)])
    (f,) = diagnose([e])
    assert f.rule == "dtoh-sync" and f.gain_ns == 30 * MS and "pin_memory=True" in f.snippet


def test_dtoh_hidden_on_a_side_stream_is_quiet():
    e = ev(dtoh_bytes=100e6, dtoh_count=1, dtoh_ns=20 * MS, dtoh_hidden_ns=20 * MS, kernel_ns=95 * MS)
    assert "dtoh-sync" not in rules(e)


def test_host_sync_without_copies():
    e = ev(idle_fraction=0.1, idle_ns=10 * MS, sync_wait_calls=3,
           gap_rows=[("launch", "kernel launch", 2 * MS, 0, 2 * MS), ("untraced", "host work outside traced calls", 6 * MS, 0, 6 * MS),
                     ("nvtx_range", "log", 2 * MS, 0, 2 * MS), ("os_runtime", "write", 3 * MS, 0, 3 * MS)])
    (f,) = diagnose([e])
    # all 10 ms follow the syncs: without them the host's work (in 'log' too) would overlap queued GPU work
    assert f.rule == "host-sync" and f.gain_ns == 10 * MS


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
