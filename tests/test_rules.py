"""Rules are pure functions of Evidence: each fires on its pattern and stays quiet otherwise."""
import pytest

from nsysanalyze.rules import Evidence, diagnose

MS = 1_000_000


def ev(subranges=None, facts=None, **m):
    base = {"window_ns": 100 * MS, "cpu_ns": 100 * MS, "idle_fraction": 0.0, "idle_ns": 0.0}
    base.update(m)
    return Evidence(globalPid=1, deviceId=0, scope="step median", m=base, subranges=subranges or {},
                    facts={"gpu_devices": 1, **(facts or {})})


def rules(e):
    return [f.rule for f in diagnose([e])]


def test_starved_gpu_with_slow_loader_and_pageable_copies():
    e = ev(idle_fraction=0.8, idle_ns=80 * MS, htod_bytes=200e6, htod_pageable_bytes=200e6, htod_pageable_ns=30 * MS,
           htod_ns=30 * MS, subranges={"get batch": (85 * MS, 0.85), "Compute": (5 * MS, 0.05)})
    found = diagnose([e])
    assert [f.rule for f in found] == ["dataloader-workers", "pin-memory"]
    assert found[0].gain_ns == 80 * MS and found[0].gain_pct == 80.0 and found[0].severity == "high"
    assert found[1].gain_ns == 30 * MS


def test_munmap_idle_adds_to_pin_memory_gain():
    e = ev(idle_fraction=0.3, idle_ns=30 * MS, htod_bytes=1e8, htod_pageable_bytes=1e8, htod_pageable_ns=10 * MS,
           htod_ns=10 * MS, munmap_gpu_idle_ns=25 * MS, munmap_count=3)
    (f,) = diagnose([e])
    assert f.rule == "pin-memory" and f.gain_ns == 35 * MS and f.confidence == 0.9


def test_pinned_but_serialized_copies():
    e = ev(idle_fraction=0.05, idle_ns=5 * MS, htod_bytes=1e8, htod_pinned_bytes=1e8, htod_ns=10 * MS, htod_hidden_ns=0)
    (f,) = diagnose([e])
    assert f.rule == "copy-compute-overlap" and f.gain_ns == 10 * MS


def test_hidden_copies_and_busy_gpu_is_ok():
    e = ev(idle_fraction=0.02, idle_ns=2 * MS, htod_bytes=1e8, htod_pinned_bytes=1e8, htod_ns=10 * MS,
           htod_hidden_ns=10 * MS)
    (f,) = diagnose([e])
    assert f.rule == "input-pipeline-ok" and f.gain_ns == 0 and f.severity == "info"


def test_ddp_world_size_one():
    e = ev(dtod_bytes=2.4e9, dtod_count=600, dtod_ns=8 * MS, nccl_count=0, facts={"nccl_nvtx_ranges": 3})
    (f,) = diagnose([e])
    assert f.rule == "ddp-single-gpu" and f.confidence == 0.85 and f.gain_ns == 8 * MS


def test_ddp_on_several_gpus_copies_and_one_exposed_bucket():
    e = ev(dtod_bytes=2.4e9, dtod_ns=8 * MS, nccl_count=1, nccl_ns=40 * MS, nccl_exposed_ns=38 * MS, nccl_share=0.4)
    found = rules(e)
    assert found[0] == "ddp-bucket-overlap"
    assert set(found) == {"ddp-bucket-overlap", "gradient-as-bucket-view", "grad-compression"}
    assert "ddp-single-gpu" not in found


def test_many_buckets_still_exposed_suggests_static_graph():
    e = ev(nccl_count=11, nccl_ns=20 * MS, nccl_exposed_ns=18 * MS, nccl_share=0.2)
    assert rules(e) == ["ddp-static-graph"]


def test_fast_nccl_is_not_a_compression_case():
    # 2.4 GB DtoD -> 1.2 GB payload in 10 ms = 120 GB/s: NVLink-class
    e = ev(dtod_bytes=2.4e9, dtod_ns=1 * MS, nccl_count=11, nccl_ns=10 * MS, nccl_exposed_ns=1 * MS, nccl_share=0.35)
    assert "grad-compression" not in rules(e)


def test_launch_bound():
    e = ev(idle_fraction=0.5, idle_ns=50 * MS, kernel_count=2000, kernel_sum_ns=20 * MS, launch_ns=70 * MS,
           launch_calls=2000)
    (f,) = diagnose([e])
    assert f.rule == "launch-bound" and f.gain_ns == 50 * MS


@pytest.mark.parametrize("m", [
    {},                                                         # nothing going on
    {"idle_fraction": 0.8, "idle_ns": 80 * MS},                 # idle, but no loader range and no copies
    {"htod_bytes": 1e3, "htod_pageable_bytes": 1e3, "htod_pageable_ns": 1000, "htod_ns": 1000},  # tiny pageable copy
])
def test_quiet_when_nothing_matches(m):
    assert rules(ev(**m)) == []


def test_pin_memory_shows_munmap_evidence_only_when_osrt_was_captured():
    m = dict(htod_bytes=1e8, htod_pageable_bytes=1e8, htod_pageable_ns=10 * MS, htod_ns=10 * MS)
    (without,) = diagnose([ev(facts={"osrt_captured": 0.0}, **m)])
    (with_osrt,) = diagnose([ev(facts={"osrt_captured": 1.0}, **m)])
    assert "munmap_count" not in without.evidence
    assert with_osrt.evidence["munmap_count"] == 0
