"""The articles' ladders on this project's own H200 captures (fixtures/): the diagnosis holds.

Each fixture is a real nsys 2023.4 export of `training_workloads` (see fixtures/README.md).
Numbers asserted here are what the traces contain (bytes are exact, times with a tolerance).
"""
import pytest

import nsysanalyze
from conftest import fixture_trace

GB = 1e9
MS = 1e6


def analyze(name):
    with nsysanalyze.open(fixture_trace(f"{name}.sqlite")) as a:
        return a.summary().iloc[0], [f.rule for f in a.findings()], a


@pytest.mark.parametrize("name,top", [
    ("resnet18_baseline", "dataloader-workers"),
    ("resnet18_workers", "pin-memory"),
    ("resnet18_pinned", "copy-compute-overlap"),
    ("resnet18_streams", "input-pipeline-ok"),
    ("resnet18_prefetch", "input-pipeline-ok"),
])
def test_top_finding(name, top):
    _, rules, _ = analyze(name)
    assert rules and rules[0] == top, rules


def test_single_gpu_ddp_in_fp32_is_told_both_causes_the_larger_first():
    """vit_l32_ddp: DDP on one GPU (the article's first fix) in fp32, with 84% of the kernel time in FMA GEMMs on
    an H200: TF32 removes far more (32 ms of 86.5) than dropping the wrapper (1.3 ms), so it leads."""
    _, rules, _ = analyze("vit_l32_ddp")
    assert rules == ["fp32-matmul", "ddp-single-gpu"]


def test_input_pipeline_metrics_move_as_in_the_article():
    base, _, _ = analyze("resnet18_baseline")
    workers, _, _ = analyze("resnet18_workers")
    pinned, _, _ = analyze("resnet18_pinned")
    streams, _, _ = analyze("resnet18_streams")
    # three 64x3x512x512 float32 batches (+ labels) per capture, all pageable until pin_memory
    assert base.htod_pageable_bytes == workers.htod_pageable_bytes == 3 * (64 * 3 * 512 * 512 * 4 + 64 * 8)
    assert pinned.htod_pageable_bytes == 0 and pinned.htod_pinned_bytes == base.htod_bytes
    # GPU idle per step falls down the ladder; copies get hidden only with a side stream
    assert base.step_median_idle_fraction > 0.7
    assert 0.15 < workers.step_median_idle_fraction < base.step_median_idle_fraction
    assert pinned.step_median_idle_fraction < 0.05 and streams.step_median_idle_fraction < 0.05
    assert pinned.step_median_htod_kernel_overlap == 0.0
    assert streams.htod_kernel_overlap > 0.8   # whole capture: with a side stream the CPU runs ahead
    # step time (GPU completion to completion) shrinks: 1 worker -> 8 workers -> pinned
    assert base.step_median_window_ns > 3 * workers.step_median_window_ns > 3 * pinned.step_median_window_ns


def test_ddp_knobs_show_in_dtod_and_nccl():
    single, single_rules, _ = analyze("vit_l32_single")
    ddp, _, _ = analyze("vit_l32_ddp")
    static, _, _ = analyze("vit_l32_static_graph")
    view, _, _ = analyze("vit_l32_bucket_view")
    # DDP copies every gradient into its bucket: +1.23 GB of DtoD per step over no DDP (ViT-L/32: 306.5M fp32)
    assert ddp.step_median_dtod_bytes - single.step_median_dtod_bytes == pytest.approx(306.5e6 * 4, rel=0.01)
    assert static.step_median_dtod_bytes == ddp.step_median_dtod_bytes       # static_graph: no copy change
    assert view.step_median_dtod_bytes == single.step_median_dtod_bytes      # bucket views: the copies are gone
    # world size 1: NCCL launches no all-reduce kernel
    assert ddp.nccl_count == 0
    assert "ddp-single-gpu" not in single_rules


def two_gpu(name):
    out = []
    for rank in (0, 1):
        with nsysanalyze.open(fixture_trace(f"vit_l32_2gpu_{name}_{rank}.sqlite")) as a:
            out.append((a.summary().iloc[0], [f.rule for f in a.findings()]))
    return out


def test_two_gpu_all_reduce_sizes_and_buckets():
    ddp = two_gpu("ddp")
    bucket100 = two_gpu("bucket100")
    bf16 = two_gpu("bf16")
    powersgd = two_gpu("powersgd")
    for (s, _), (b, _) in zip(ddp, bucket100):
        assert s.step_median_nccl_count == 1          # bucket_cap_mb=2000: one bucket, one all-reduce per step
        assert b.step_median_nccl_count >= 10         # bucket_cap_mb=100: ~1.22 GB / 100 MB buckets
    # the bf16 hook halves the bytes, so about half the time (the faster rank: the other one also waits)
    assert min(h.step_median_nccl_ns for h, _ in bf16) < 0.65 * min(s.step_median_nccl_ns for s, _ in ddp)
    # PowerSGD: tiny all-reduces of low-rank factors
    assert min(p.step_median_nccl_ns for p, _ in powersgd) < 0.1 * min(s.step_median_nccl_ns for s, _ in ddp)
    # one bucket, all-reduced after the backward: exposed -> smaller buckets
    assert all("ddp-bucket-overlap" in rules for _, rules in ddp)
    assert not any("ddp-bucket-overlap" in rules for _, rules in bucket100)
    # NVLink-class all-reduce: no compression advice
    assert not any("grad-compression" in rules for _, rules in ddp + bucket100)
