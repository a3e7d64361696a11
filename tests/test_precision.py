"""fp32-matmul: matrix kernels in full fp32 on the FMA units, on real exports (fixtures and ../shared traces)."""
from __future__ import annotations

import pandas as pd
import pytest

import nsysanalyze
from nsysanalyze import kernels as K
from nsysanalyze.rules.precision import TF32_TIME_RATIO, host_with_launches, tf32_time_ratio

from conftest import FIXTURES, shared_trace


def findings_of(path):
    with nsysanalyze.open(path) as a:
        return a.findings(), a.evidence()


def test_kernel_names_are_classified_by_their_math_unit():
    """Names as the real H200 exports spell them: cuBLAS/CUTLASS fp32 FMA GEMMs count; TF32 tensor-core
    convolutions, bf16/fp16 kernels, GEMVs and small-N GEMMs do not."""
    names = pd.Series([
        "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas",
        "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x256_8x4_nt_align1>(T1::Params)",
        "void sgemm_largek_lds64<(bool)1, (bool)0, (int)5, (int)5, (int)4, (int)4, (int)4, (int)34>(float *, const float *)",
        "sm90_xmma_wgrad_indexed_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x32_warpgroupsize1x1x1_g1",
        "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x64x32_stage5_warpsize2x2x1_g1_tensor",
        "void gemmSN_TN_kernel<float, (int)128, (int)16, (int)2, (int)4, (int)8, (int)9, (bool)0>",
        "void gemv2T_kernel_val<int, int, float, float, float, float, (int)128>",
        "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_nn",
        "void at::native::elementwise_kernel<(int)128, (int)2>",
        "void cudnn::detail::dgrad_engine<float, (int)512, (int)6, (int)5, (int)3, (int)3, (int)3, (bool)0>(int, int)",
        "void wgrad_alg0_engine<float, (int)128, (int)5, (int)5, (int)3, (int)3, (int)3, (bool)0, (int)512>(int, int)",
        "void wgrad_alg0_engine<__half, (int)128, (int)5, (int)5, (int)3, (int)3, (int)3, (bool)0, (int)512>(int)",
        "void cudnn::engines_precompiled::nchwToNhwcKernel<float, float, float, (bool)0, (bool)1>(int)",
        "ampere_fp16_sgemm_fp16_128x64_tn",  # casio__nerf (A100, public): fp16 data on the FMA units, not fp32 work
        "volta_sgemm_64x64_nn",  # abacus__resnet101 (TITAN RTX, public)
    ])
    assert K.fp32_fma_matmul(names).tolist() == [True, True, True, False, False, False, False, False, False,
                                                 True, True, False, False, False, True]


def test_tf32_ratio_follows_the_datasheet_and_leaves_unknown_gpus_out():
    assert tf32_time_ratio("NVIDIA H200") == pytest.approx(67 / 495)
    assert tf32_time_ratio("NVIDIA A100-SXM4-40GB") == pytest.approx(0.125)
    assert tf32_time_ratio("NVIDIA L40S") == 0.5
    for name in ("GeForce GTX 1650", "Tesla T4", "NVIDIA GeForce RTX 3070 Ti", "TITAN RTX", "NVIDIA L40", ""):
        assert tf32_time_ratio(name) is None, name
    assert all(0 < r < 1 for _, r in TF32_TIME_RATIO)


def test_fp32_vit_on_h200_is_told_to_use_tf32_with_a_bound_from_both_resources():
    """vit_l32_single: ViT-L/32 in fp32 on an H200, 86% of the kernel time in FMA GEMMs (69.1 ms per step). The
    bound: their time x (1 - 67/495), capped by the window less the host's work with its launches."""
    with nsysanalyze.open(FIXTURES / "vit_l32_single.sqlite") as a:
        per = K.fp32_matmul_time(a.kernel_table())
        findings, evidence = a.findings(), a.evidence()
    assert per["fp32_matmul_ns"].iloc[0] == pytest.approx(69_105_827, rel=1e-6)
    assert per["fp32_matmul_share"].iloc[0] == pytest.approx(0.855, abs=0.001)
    top, ev = findings[0], evidence[0]
    assert top.rule == "fp32-matmul"
    assert "allow_tf32 = True" in top.snippet and "bfloat16" in top.snippet
    removable = 69_105_827 * (1 - 67 / 495)
    host_cap = ev.window_ns - host_with_launches(ev)
    gpu_cap = ev.window_ns - max(ev.ledger.busy_ns - removable, ev.ledger.host_work_ns)
    assert top.gain_ns == pytest.approx(min(removable, host_cap, gpu_cap), rel=1e-6)
    assert top.gain_ns == pytest.approx(host_cap) and 0.35 * ev.window_ns < top.gain_ns < 0.42 * ev.window_ns  # 32.5 of 84.4 ms


def test_the_host_floor_counts_each_launch_at_the_median_call():
    """vit_fp32 (H100, ViT-L/32 in fp32): the launches did not wait for queue slots (median call 7.6 us, 1,392 a
    step), so the host's floor is its own work plus launch_calls x median: 8.9 ms of gain left, where counting the
    launches as waits left 19.4 ms; the fix realized 4.6 ms under the profiler (vit_tf32). The median is checked
    against the export's own launch calls."""
    import sqlite3

    import numpy as np

    path = FIXTURES / "vit_fp32.sqlite"
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        ns = np.array([d for (d,) in conn.execute(
            "SELECT r.end - r.start FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
            "WHERE s.value LIKE 'cudaLaunchKernel%' OR s.value LIKE 'cuLaunchKernel%'")])
    findings, evidence = findings_of(path)
    ev = evidence[0]
    assert ev.facts["launch_median_ns"] == float(np.median(ns))
    own = ev.get("launch_calls") * ev.facts["launch_median_ns"]
    assert own < ev.get("launch_ns")
    assert host_with_launches(ev) == pytest.approx(ev.ledger.host_work_ns + own)
    top = findings[0]
    assert top.rule == "fp32-matmul" and 8e6 < top.gain_ns < 10e6


def test_launch_bound_loop_with_fp32_gemms_keeps_its_launch_verdict():
    """compile_steady: 64% of a small kernel time in fp32 GEMMs, but the GPU idles 81% waiting for launches:
    faster kernels would only lengthen the gaps, so no fp32-matmul finding and the launch overhead leads."""
    findings, _ = findings_of(FIXTURES / "compile_steady.sqlite")
    assert "fp32-matmul" not in [f.rule for f in findings]
    assert findings[0].rule == "gpu-idle-unexplained"


def test_cupy_gets_its_own_setting():
    findings, _ = findings_of(FIXTURES / "cupy_pageable.sqlite")
    fp32 = [f for f in findings if f.rule == "fp32-matmul"]
    assert fp32 and "CUPY_TF32=1" in fp32[0].snippet and "torch" not in fp32[0].snippet
    assert findings[0].rule == "pin-memory"  # the pageable copies stay the larger cause


@pytest.mark.parametrize("name", ["public/gartangh__flux_darknet19.sqlite", "public/casio__nerf_output-file.sqlite"])
def test_gpus_without_a_tf32_gain_or_without_fp32_gemms_get_none(name):
    """Flux Darknet-19 on a GTX 1650 (73% of its kernel time in fp32 FMA convolutions, no tensor cores) and a
    NeRF on an A100 (0.5% of its kernel time in fp32 GEMMs)."""
    findings, _ = findings_of(shared_trace(name))
    assert "fp32-matmul" not in [f.rule for f in findings]
