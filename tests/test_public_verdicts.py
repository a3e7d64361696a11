"""Verdicts on real exports of other projects (../shared/traces/public; skipped when absent): each gets a
diagnosis that fits its program — its framework, its collectives, its own steps — never PyTorch code
for a program that is not PyTorch."""
import pytest

from nsysanalyze.render.contract import report_of as analyze_file

from conftest import shared_trace

PYTORCH_WORDS = ("torch", "DataLoader", "DDP(")
FRAMEWORK = {
    "sc23-openmp-tutorial__report3.sqlite": "openmp",
    "pipit__perlmutter-cloverleaf-cuda.sqlite": "cuda",
    "nsightful__power_iteration__baseline.sqlite": "cupy",   # cupy_* kernels, CuPy's modules in the strings
    "nsys-ai__mfu_2gpu_after.sqlite": "pytorch",
    "casio__nerf_output-file.sqlite": "tensorflow",
    "MohanadOdema__w_Relu_nsys_profile.sqlite": "pytorch",
    "Lyrics-WangKL__darknet1img.sqlite": "cuda",
    "YoonKyonghwan__poolformer.sqlite": "tensorrt",
    "nvfuser__report1.sqlite": "pytorch",
    "unschlagbar__prof.sqlite": "cuda",
    "kamalchowdhury326__report1.sqlite": "cuda",
    "quasiben__multiprocessing.sqlite": "python",  # no PROCESSES table: its threads are named python
    "bwyogatama__report1.sqlite": "cuda",
    "ayush__vecadd_launchbound_v3.sqlite": "cuda",
    "gartangh__flux_darknet19.sqlite": "julia",          # CUDA.jl's ptxcall_* kernels
    "abacus__resnet101_streams_report1.sqlite": "pytorch",
    "stellawava__wsl_report1.sqlite": "unknown",          # no CUDA tables at all
}


def report(name):
    return analyze_file(shared_trace(f"public/{name}"))


@pytest.mark.parametrize("name", sorted(FRAMEWORK))
def test_framework_and_fix_language(name):
    d = report(name)
    assert d["trace"]["framework"] == FRAMEWORK[name]
    if FRAMEWORK[name] != "pytorch":
        for f in d["findings"]:
            assert not any(w in f["snippet"] or w in f["fix"] for w in PYTORCH_WORDS), (f["rule"], f["snippet"])


def test_openmp_heat_is_told_to_keep_data_on_the_device():
    d = report("sc23-openmp-tutorial__report3.sqlite")
    assert {"pin-memory", "dtoh-sync"} <= {f["rule"] for f in d["findings"]}
    assert all("#pragma omp target" in f["snippet"] for f in d["findings"] if f["rule"] in ("pin-memory", "dtoh-sync"))


def test_pipeline_parallel_sendrecv_is_named_and_gets_no_ddp_advice():
    d = report("nsys-ai__mfu_2gpu_after.sqlite")
    for dev in d["summary"]["devices"]:
        assert dev["nccl_sendrecv_count"] == 31 and dev["nccl_allreduce_count"] == 0
    rules = {f["rule"] for f in d["findings"]}
    assert not rules & {"ddp-single-gpu", "gradient-as-bucket-view", "ddp-bucket-overlap", "ddp-static-graph",
                        "grad-compression"}
    assert d["trace"]["step_source"] == "inferred"  # its NVTX ranges are ops (aten::*), not steps


def test_power_iteration_idle_is_blamed_on_its_io_range():
    """36% GPU idle: after each step's host syncs the host works in its 'IO N' ranges while the GPU waits."""
    d = report("nsightful__power_iteration__baseline.sqlite")
    top = d["findings"][0]
    assert top["rule"] == "host-sync" and "'IO {n}'" in top["title"]
    assert any(s["name"] == "IO {n}" for s in d["subranges"])  # numbered sub-ranges grouped by family


def test_cloverleaf_gets_no_python_nvtx_note():
    d = report("pipit__perlmutter-cloverleaf-cuda.sqlite")
    assert not any("python" in n.lower() for n in d["notes"])


@pytest.mark.parametrize("name", ["YoonKyonghwan__poolformer.sqlite", "MohanadOdema__w_Relu_nsys_profile.sqlite",
                                  "nvfuser__report1.sqlite"])
def test_layer_and_op_ranges_are_not_steps(name):
    d = report(name)
    assert d["trace"]["step_source"] != "nvtx"


def test_steps_inferred_without_nvtx_give_the_nvtx_twins_verdict():
    """The ResNet-18 baseline captured without NVTX: steps come from the kernel sequence (389 kernels per step,
    split where the GPU waits for the next batch) and the verdict is the NVTX capture's."""
    d = analyze_file(shared_trace("h200/resnet18-baseline-cudaonly.sqlite"))
    assert d["trace"]["step_family"] == "kernel sequence (period 389 kernels)"
    top = d["findings"][0]
    assert top["rule"] == "dataloader-workers" and top["evidence"]["top_cause_kind"] == "untraced"
    pin = next(f for f in d["findings"] if f["rule"] == "pin-memory")
    assert pin["evidence"]["htod_pageable_bytes"] == 201326592 + 512  # one batch (64x3x512x512 fp32) + its labels per step


# Every export gets a verdict that fits its program: the findings it must show (the program's own bottleneck)
# and those it must not (advice for a program it is not); None: no GPU work, so no finding at all.
VERDICTS = {
    "sc23-openmp-tutorial__report3.sqlite": ({"dtoh-sync", "pin-memory"}, {"dataloader-workers"}),
    "pipit__perlmutter-cloverleaf-cuda.sqlite": ({"pin-memory"}, {"dataloader-workers", "launch-bound"}),
    "nsightful__power_iteration__baseline.sqlite": ({"host-sync"}, {"dataloader-workers"}),
    "nsys-ai__mfu_2gpu_after.sqlite": ({"pipeline-p2p"}, {"fsdp-collectives", "ddp-bucket-overlap", "ddp-single-gpu"}),
    # 0.13 ms of DtoH and 0.29 ms of HtoD copies: the idle after its syncs is host-sync's, counted once
    "casio__nerf_output-file.sqlite": ({"host-sync"}, {"dtoh-sync", "pin-memory", "dataloader-workers"}),
    "MohanadOdema__w_Relu_nsys_profile.sqlite": (set(), {"dataloader-workers", "launch-bound"}),
    "Lyrics-WangKL__darknet1img.sqlite": (set(), {"dataloader-workers", "launch-bound"}),
    "YoonKyonghwan__poolformer.sqlite": None,
    "nvfuser__report1.sqlite": (set(), {"dataloader-workers", "pin-memory", "input-pipeline-ok"}),
    "unschlagbar__prof.sqlite": (set(), {"dataloader-workers"}),
    "kamalchowdhury326__report1.sqlite": ({"dtoh-sync"}, {"dataloader-workers"}),
    "quasiben__multiprocessing.sqlite": None,
    "bwyogatama__report1.sqlite": ({"dtoh-sync"}, {"dataloader-workers"}),
    "ayush__vecadd_launchbound_v3.sqlite": ({"launch-bound"}, {"dataloader-workers", "pin-memory"}),
    "gartangh__flux_darknet19.sqlite": ({"input-pipeline-ok"}, {"dataloader-workers", "pin-memory"}),
    "abacus__resnet101_streams_report1.sqlite": ({"launch-bound"}, {"dataloader-workers", "pin-memory"}),
    "stellawava__wsl_report1.sqlite": None,
}
H200_VERDICTS = {
    "resnet18-baseline-nvtx.sqlite": ({"dataloader-workers", "pin-memory"}, {"launch-bound"}),
    "resnet18-baseline-cudaonly.sqlite": ({"dataloader-workers", "pin-memory"}, {"launch-bound"}),
    "resnet18-bs8-nvtx0.2.17-dropped.sqlite": ({"pin-memory"}, {"ddp-single-gpu"}),
    "cpu-nvtx0.2.11-recorded.sqlite": None,
    "cpu-nvtx0.2.12-dropped.sqlite": None,
}


def test_every_shared_export_has_a_verdict_listed():
    from conftest import SHARED_TRACES

    if not SHARED_TRACES.exists():
        pytest.skip("../shared/traces not available")
    assert {p.name for p in (SHARED_TRACES / "public").glob("*.sqlite")} == set(VERDICTS) == set(FRAMEWORK)
    assert {p.name for p in (SHARED_TRACES / "h200").glob("*.sqlite")} == set(H200_VERDICTS)


@pytest.mark.parametrize("rel", [f"public/{n}" for n in sorted(VERDICTS)] + [f"h200/{n}" for n in sorted(H200_VERDICTS)])
def test_verdict_fits_the_program(rel):
    from nsysanalyze.render.format import trace_line

    d = analyze_file(shared_trace(rel))
    expected = (VERDICTS if rel.startswith("public/") else H200_VERDICTS)[rel.split("/", 1)[1]]
    rules = {f["rule"] for f in d["findings"]}
    if expected is None:
        assert not d["summary"]["devices"] and not rules
        assert "no GPU activity" in trace_line(d) and any(n.startswith("No GPU activity") for n in d["notes"])
        return
    must, must_not = expected
    assert must <= rules and not rules & must_not, sorted(rules)
    assert d["findings"], "a program with GPU work gets a verdict"
    assert "no GPU activity" not in trace_line(d) and not any(n.startswith("No GPU activity") for n in d["notes"])
