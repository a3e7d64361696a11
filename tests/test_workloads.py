"""CPU tests of training_workloads (the GPU runs themselves need an NVIDIA device and nsys).

The variant tables, CLI parsing, NVTX fallback and the .qdstrm patcher need no torch; the
dataset, prefetcher, schedule and loop tests skip without it.
"""

from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path

import pytest
from click.testing import CliRunner

from training_workloads import (
    DDP_VARIANTS,
    INPUT_PIPELINE_VARIANTS,
    capture_name,
    parse_capture_name,
)
from training_workloads.annotate import get_annotator, noop_annotate
from training_workloads.cli import main
from training_workloads.variants import ALL_CAPTURES


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


EXPECTED_CAPTURES = [
    "resnet18_baseline", "resnet18_workers", "resnet18_pinned", "resnet18_streams",
    "resnet18_prefetch", "resnet18_loader_unnamed", "resnet18_loader_noranges",
    "vit_l32_single", "vit_l32_ddp", "vit_l32_static_graph",
    "vit_l32_bucket_view", "vit_l32_bf16", "vit_l32_powersgd",
    "dtoh_pageable", "dtoh_pinned_async", "dtoh_deferred", "tinyops_eager", "tinyops_graphs", "tinyops_graphs_blocking", "gpu_bound",
    "sync_per_param", "sync_timing", "io_midstep",
    "optimizer_unfused", "optimizer_fused", "accumulate_unfused", "accumulate_fused", "copy_pinned_blocking", "copy_pinned_nonblocking", "clip_item",
    "clip_noitem", "workers_nonpersistent", "workers_persistent", "launchbound_b", "launchbound_4b", "hook_sync",
    "hook_nosync", "checkpoint_per_step", "empty_cache_per_step", "compile_warmup", "compile_steady",
    "compile_graphs", "recompile_static", "recompile_dynamic", "link_bound",
    "loader_2workers", "loader_12workers", "eval_every_4", "checkpoint_every_5", "cudnn_benchmark", "cudnn_default",
    "disk_loader", "host_metrics", "small_copies", "amp_scaler_foreach", "amp_scaler_fused", "masked_loss_index",
    "masked_loss_ignore", "gil_thread", "gil_process", "launch_blocking", "anomaly_mode", "no_caching_allocator",
    "debug_off", "anomaly_mlp", "vit_fp32", "vit_tf32", "vit_bf16", "lm_fp32", "lm_tf32", "conv_fp32", "conv_tf32",
    "emit_nvtx", "emit_nvtx_only",
    "gloo_8rank", "gloo_8rank_slow", "jax_pageable", "jax_eager", "jax_jit", "jax_callback", "jax_highest", "jax_default",
    "numba_tinyops",
    "numba_fused", "cupy_tinyops", "cupy_fused", "jax_eager_platform", "cupy_tinyops_nopool", "cupy_tinyops_blocking",
    "jax_eager_blocking",
    "cupy_pageable", "cupy_managed", "mpi_hoststaged",
]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


# ---------------------------------------------------------------- variant table / names
def test_capture_names_are_the_fixture_names():
    assert list(ALL_CAPTURES) == EXPECTED_CAPTURES


@pytest.mark.parametrize("name", EXPECTED_CAPTURES)
def test_capture_name_round_trip(name):
    workload, variant = parse_capture_name(name)
    assert capture_name(workload, variant) == name


def _capture_files(name: str) -> list[Path]:
    """The fixture files of one capture: NAME.sqlite, or NAME_<rank>.sqlite for a torchrun job."""
    from training_workloads.variants import launch_nproc

    nproc = launch_nproc(*parse_capture_name(name))
    stems = [f"{name}_{r}" for r in range(nproc)] if nproc > 1 else [name]
    return [FIXTURES / f"{s}.sqlite" for s in stems]


@pytest.mark.parametrize("name", EXPECTED_CAPTURES[EXPECTED_CAPTURES.index("optimizer_unfused"):])
def test_new_captures_have_their_fixtures(name):
    files = _capture_files(name)
    assert len(files) == {"gloo": 8, "mpi": 2}.get(name.split("_")[0], 1)
    missing = [f.name for f in files if not f.exists()]
    assert not missing, missing


def test_capture_args_and_process_counts():
    from training_workloads.variants import capture_args, launch_nproc, launcher

    assert capture_args("causes", "compile-warmup") == "--warmup 0 --steps 3"
    assert capture_args("causes", "workers-persistent") == "--steps 6"
    assert capture_args("input-pipeline", "baseline") == ""
    assert launch_nproc("gloo", "8rank-slow") == 8
    assert launch_nproc("ddp", "single", 2) == 0 and launch_nproc("ddp", "ddp", 2) == 2
    assert launch_nproc("causes", "hook-sync", 4) == 0
    assert launcher("programs", "mpi-hoststaged") == "mpirun" and launch_nproc("programs", "mpi-hoststaged") == 2
    assert launcher("gloo", "8rank") == "torchrun"


FIX_PAIRS = json.loads((FIXTURES / "fix_pairs.json").read_text())


def test_fix_pairs_table_fields():
    assert len(FIX_PAIRS) == 31
    assert [r["bad"] for r in FIX_PAIRS if r.get("ranks")] == ["gloo_8rank_slow_{rank}.sqlite"]  # a job's pair
    for row in FIX_PAIRS:
        assert {"bad", "fixed", "fix", "rule", "bad_steps_per_s", "fixed_steps_per_s", "bad_step_ms",
                "fixed_step_ms", "per"} <= set(row), row
        assert row["per"] in ("step", "sample")
        assert row["bad_steps_per_s"] > 0 and row["fixed_steps_per_s"] > 0
        assert row["bad_step_ms"] > 0 and row["fixed_step_ms"] > 0
    per_sample = [r for r in FIX_PAIRS if r["per"] == "sample"]
    assert [r["bad"] for r in per_sample] == ["launchbound_b.sqlite"]
    assert per_sample[0]["bad_sample_ms"] == pytest.approx(per_sample[0]["bad_step_ms"] / 16, abs=1e-4)


@pytest.mark.parametrize("name", sorted({r[k].format(rank=i) for r in FIX_PAIRS for k in ("bad", "fixed")
                                          for i in range(r.get("ranks", 1))}))
def test_fix_pair_fixtures_exist_and_open(name):
    from nsysanalyze.trace import open_trace

    path = FIXTURES / name
    assert path.exists(), name
    with open_trace(path) as t:
        assert len(t.kernels) > 0
        assert len(t.nvtx) > 0


def test_parse_bare_variant_names():
    assert parse_capture_name("bucket-view") == ("ddp", "bucket-view")
    assert parse_capture_name("static_graph") == ("ddp", "static-graph")
    assert parse_capture_name("pinned") == ("input-pipeline", "pinned")
    assert parse_capture_name("dtoh-pageable") == ("scenarios", "dtoh-pageable")
    with pytest.raises(KeyError):
        parse_capture_name("resnet18_nope")
    with pytest.raises(KeyError):
        capture_name("ddp", "pinned")


def test_input_pipeline_variant_table_follows_the_article():
    t = INPUT_PIPELINE_VARIANTS
    assert t["baseline"].num_workers == 0 and not t["baseline"].pin_memory
    assert t["workers"].num_workers == 8 and not t["workers"].pin_memory
    assert not t["workers"].non_blocking
    for name in ("pinned", "streams", "prefetch"):
        assert t[name].num_workers == 8 and t[name].pin_memory and t[name].non_blocking
    assert [t[n].copy_mode for n in ("pinned", "streams", "prefetch")] == [
        "inline", "streams", "prefetch"]


def test_ddp_variants_are_cumulative():
    t = DDP_VARIANTS
    assert not t["single"].use_ddp
    assert t["ddp"].use_ddp and not t["ddp"].static_graph and not t["ddp"].gradient_as_bucket_view
    assert t["static-graph"].static_graph and not t["static-graph"].gradient_as_bucket_view
    for name in ("bucket-view", "bf16", "powersgd"):
        assert t[name].static_graph and t[name].gradient_as_bucket_view
    assert (t["bucket-view"].comm_hook, t["bf16"].comm_hook, t["powersgd"].comm_hook) == (
        None, "bf16", "powersgd")


# ---------------------------------------------------------------- CLI parsing
def test_cli_lists_variants():
    r = CliRunner().invoke(main, ["variants", "--names"])
    assert r.exit_code == 0, r.output
    assert r.output.split() == EXPECTED_CAPTURES


def test_cli_rejects_unknown_variant():
    r = CliRunner().invoke(main, ["input-pipeline", "--variant", "nope"])
    assert r.exit_code == 2
    r = CliRunner().invoke(main, ["ddp", "--variant", "pinned"])
    assert r.exit_code == 2


def test_cli_passes_options_to_input_pipeline(monkeypatch):
    import training_workloads.input_pipeline as ip

    seen = {}
    monkeypatch.setattr(ip, "run", lambda variant, **kw: seen.update(variant=variant, **kw))
    r = CliRunner().invoke(main, ["input-pipeline", "--variant", "pinned", "--steps", "5",
                                  "--warmup", "2", "--no-profiler-range"])
    assert r.exit_code == 0, r.output
    assert seen["variant"] == "pinned"
    assert (seen["steps"], seen["warmup"], seen["cooldown"]) == (5, 2, 1)
    assert seen["profiler_range"] is False
    assert (seen["batch_size"], seen["image_size"], seen["num_workers"]) == (64, 512, None)


def test_cli_passes_options_to_ddp(monkeypatch):
    import training_workloads.ddp as ddp

    seen = {}
    monkeypatch.setattr(ddp, "run", lambda variant, **kw: seen.update(variant=variant, **kw))
    r = CliRunner().invoke(main, ["ddp", "--variant", "bucket-view", "--bucket-cap-mb", "100"])
    assert r.exit_code == 0, r.output
    assert seen["variant"] == "bucket-view" and seen["bucket_cap_mb"] == 100
    assert (seen["steps"], seen["warmup"], seen["batch_size"], seen["image_size"]) == (3, 10, 32, 224)
    assert seen["num_workers"] == 8 and seen["profiler_range"] is True


def test_cli_rejects_bad_numbers():
    assert CliRunner().invoke(main, ["ddp", "--steps", "0"]).exit_code == 2
    assert CliRunner().invoke(main, ["ddp", "--bucket-cap-mb", "0"]).exit_code == 2
    assert CliRunner().invoke(main, ["ddp", "--powersgd-start-iter", "1"]).exit_code == 2


def test_single_refuses_world_size_above_one(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"):
        monkeypatch.delenv(k, raising=False)
    r = CliRunner().invoke(main, ["ddp", "--variant", "single"])
    assert r.exit_code == 1
    assert "without DDP" in r.output

    assert os.environ["NCCL_NVLS_ENABLE"] == "0"


def test_ddp_world_of_one_without_torchrun(monkeypatch):
    from training_workloads.ddp import dist_env

    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)
    assert dist_env(use_ddp=True) == (0, 0, 1)

    assert os.environ["MASTER_ADDR"] and os.environ["MASTER_PORT"]
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert dist_env(use_ddp=True) == (3, 1, 4)


# ---------------------------------------------------------------- NVTX fallback
def test_nvtx_fallback_without_the_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "nvtx", None)  # makes `import nvtx` raise ImportError
    monkeypatch.delenv("TRAINING_WORKLOADS_NVTX", raising=False)
    annotate, desc = get_annotator()
    assert annotate is noop_annotate and desc.startswith("none")
    with annotate("Batch 0", color="blue"):
        with annotate("get batch"):
            pass

    @annotate("decorated")
    def f(x):
        return x + 1

    assert f(1) == 2
    with pytest.raises(ImportError):
        get_annotator("nvtx")


def test_nvtx_backend_selection(monkeypatch, capsys):
    calls = []

    class _Range:
        def __init__(self, msg, color=None):
            calls.append((msg, color))

        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

    fake = types.ModuleType("nvtx")
    fake.annotate = _Range
    fake.__version__ = "0.2.11"
    monkeypatch.setitem(sys.modules, "nvtx", fake)
    annotate, desc = get_annotator("auto")
    assert desc == "nvtx 0.2.11"
    with annotate("Batch 3", color="blue"):
        pass
    assert calls == [("Batch 3", "blue")]
    assert "WARNING" not in capsys.readouterr().err

    fake.__version__ = "0.2.17"
    get_annotator("nvtx")
    assert "not record" in capsys.readouterr().err

    monkeypatch.setenv("TRAINING_WORKLOADS_NVTX", "none")
    assert get_annotator()[0] is noop_annotate
    with pytest.raises(ValueError):
        get_annotator("bogus")


# ---------------------------------------------------------------- data
def test_fake_dataset_shapes_input_pipeline(torch):
    from training_workloads.data import FakeDataset

    ds = FakeDataset(14 * 4, 64, label_mode="index")
    assert len(ds) == 56
    img, label = ds[13]
    assert img.shape == (3, 64, 64) and img.dtype == torch.float32
    assert label.item() == 3 and label.dtype == torch.int64
    with pytest.raises(IndexError):
        ds[56]
    loader = torch.utils.data.DataLoader(ds, batch_size=4)
    data, targets = next(iter(loader))
    assert data.shape == (4, 3, 64, 64) and targets.shape == (4,)


def test_fake_dataset_shapes_ddp(torch):
    from training_workloads.data import FakeDataset

    ds = FakeDataset(8, 32, label_mode="random", num_classes=1000)
    img, label = ds[0]
    assert img.shape == (3, 32, 32)
    assert isinstance(label, int) and 0 <= label < 1000
    data, targets = next(iter(torch.utils.data.DataLoader(ds, batch_size=8)))
    assert data.shape == (8, 3, 32, 32) and targets.dtype == torch.int64
    with pytest.raises(ValueError):
        FakeDataset(1, 8, label_mode="other")


# ---------------------------------------------------------------- prefetcher
def test_prefetcher_on_cpu_tensors(torch):
    from training_workloads.prefetch import DataPrefetcher

    batches = [(torch.full((2, 3), float(i)), torch.tensor([i, i])) for i in range(4)]
    seen = []

    def annotate(msg, color=None):
        seen.append(msg)
        return noop_annotate()

    pf = DataPrefetcher(batches, "cpu", annotate=annotate)
    assert pf.stream is None
    assert seen == ["copy batch"]  # the first batch is preloaded at construction
    out = list(pf)
    assert len(out) == 4
    for i, (data, target) in enumerate(out):
        assert torch.equal(data, batches[i][0]) and torch.equal(target, batches[i][1])
        assert data.device.type == "cpu"
    assert seen == ["copy batch"] * 4
    with pytest.raises(StopIteration):
        next(pf)


def test_prefetcher_empty_loader_and_nested_batches(torch):
    from training_workloads.prefetch import DataPrefetcher

    assert list(DataPrefetcher([], "cpu")) == []
    batch = {"x": torch.ones(2), "y": [torch.zeros(1), 7]}
    (out,) = list(DataPrefetcher([batch], "cpu"))
    assert torch.equal(out["x"], batch["x"]) and out["y"][1] == 7


# ---------------------------------------------------------------- schedule
def test_step_schedule_on_cpu():
    from training_workloads.schedule import StepSchedule

    s = StepSchedule(2, 3, 1, cuda=False)
    assert s.total == 6 and s.profiler_range is False
    for i in range(s.total):
        s.before_step(i)
    s.finish()
    assert s.elapsed >= 0
    line = s.report(workload="x", variant="y")
    assert line.startswith("THROUGHPUT workload=x variant=y steps=3 ")
    assert "steps_per_s=" in line and "step_ms=" in line
    assert " pre_steps=1 pre_steps_per_s=" in line  # second half of the 2 warm-up steps

    s = StepSchedule(1, 1, 0, cuda=False)
    for i in range(s.total):
        s.before_step(i)
    s.finish()  # no cool-down step: finish() closes the window
    assert s.end_time is not None
    with pytest.raises(ValueError):
        StepSchedule(0, 0)


# ---------------------------------------------------------------- CPU smoke of the loops
@pytest.fixture
def tiny_torchvision(monkeypatch, torch):
    """A stand-in torchvision whose resnet18 is a tiny CNN (the loop, not the model, is tested)."""
    tv = types.ModuleType("torchvision")
    models = types.ModuleType("torchvision.models")

    def resnet18():
        return torch.nn.Sequential(
            torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
            torch.nn.Linear(4, 10))

    models.resnet18 = resnet18
    tv.models = models
    monkeypatch.setitem(sys.modules, "torchvision", tv)
    monkeypatch.setitem(sys.modules, "torchvision.models", models)
    return tv


@pytest.mark.parametrize("variant", ["baseline", "pinned", "prefetch"])
def test_input_pipeline_cpu_smoke(tiny_torchvision, variant):
    r = CliRunner().invoke(main, [
        "input-pipeline", "--variant", variant, "--device", "cpu", "--batch-size", "2",
        "--image-size", "32", "--warmup", "1", "--steps", "2", "--num-workers", "0",
        "--nvtx-backend", "none"])
    assert r.exit_code == 0, r.output
    line = [ln for ln in r.output.splitlines() if ln.startswith("THROUGHPUT")]
    assert len(line) == 1
    assert f"variant={variant}" in line[0] and "steps=2" in line[0]
    assert "profiler_range=0" in line[0]


def test_streams_variant_needs_cuda(tiny_torchvision):
    r = CliRunner().invoke(main, ["input-pipeline", "--variant", "streams", "--device", "cpu",
                                  "--image-size", "32", "--batch-size", "2"])
    assert r.exit_code == 1 and "CUDA" in r.output


# ---------------------------------------------------------------- .qdstrm API-name patch
def _v(n):
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _len(field, payload):
    return _v(field << 3 | 2) + _v(len(payload)) + payload


def _fake_qdstrm(n_runtime=468, n_driver=754):
    """The layout of an nsys 2023.4 .qdstrm, with made-up contents."""
    magic = b"U3w[END]"
    lists = _v(1 << 3) + _v(2)
    lists += b"".join(_len(2, b"INVALID" if i == 0 else f"cudaApi{i}_v3020".encode())
                      for i in range(n_runtime))
    lists += b"".join(_len(3, [b"INVALID", b"cuInit"][i] if i < 2 else f"cuApi{i}".encode())
                      for i in range(n_driver))
    dev_props = _len(1, _len(1, b"header")) + _len(2, _len(1, lists) + _len(3, b"gpu metrics"))
    head = magic + b"NVIDIA Nsight Systems Stream 2023.4.4.54-234433681190v0!"
    tconv = _len(1, b"time conversion")
    raw = b"\x08\x08\x01compressed event blocks"
    sections = [(b"Device Properties", dev_props), (b"Time Conversion Factors", tconv),
                (b"Raw Events", raw)]
    body, table = head, []
    for name, data in sections:
        table.append((name, len(body), len(data)))
        body += data
    footer = b"".join(_len(1, _len(1, n) + _v(2 << 3) + _v(o) + _v(3 << 3) + _v(z))
                      for n, o, z in table)
    return body + footer + len(body).to_bytes(8, "little") + magic, sections


def _sections(data):
    from training_workloads.qdstrm_patch import _fields

    at = int.from_bytes(data[-16:-8], "little")
    out = {}
    for _, _, entry in _fields(data[at:-16]):
        e = {f: v for f, _, v in _fields(entry)}
        out[e[1].decode()] = data[e[2]:e[2] + e[3]]
    return out


def test_qdstrm_patch_extends_api_names_and_keeps_sections():
    from training_workloads.qdstrm_patch import (
        DRIVER_NAMES_FROM_754,
        RUNTIME_NAMES_FROM_468,
        _fields,
        patch,
    )

    data, sections = _fake_qdstrm()
    out, msg = patch(data)
    assert "added 55 runtime and 53 driver" in msg
    assert out.startswith(data[:64]) and out.endswith(b"U3w[END]")
    got = _sections(out)
    assert got["Time Conversion Factors"] == sections[1][1]
    assert got["Raw Events"] == sections[2][1]
    top = _fields(got["Device Properties"])
    assert top[0] == _fields(sections[0][1])[0]
    inner = _fields(top[1][2])
    lists = _fields(inner[0][2])
    rt = [v.decode() for f, _, v in lists if f == 2]
    dr = [v.decode() for f, _, v in lists if f == 3]
    assert len(rt) == 523 and len(dr) == 807
    assert rt[486] == "cudaEventElapsedTime_v12080" == RUNTIME_NAMES_FROM_468[486 - 468]
    assert rt[467] == "cudaApi467_v3020" and dr[753] == "cuApi753"
    assert dr[754] == DRIVER_NAMES_FROM_754[0] == "cuKernelGetLibrary"
    assert inner[1] == (3, 2, b"gpu metrics")
    again, msg = patch(out)
    assert again == out and "nothing to do" in msg


def test_qdstrm_patch_cli_and_refusals(tmp_path):
    from training_workloads.qdstrm_patch import main as patch_main, patch

    data, _ = _fake_qdstrm()
    src = tmp_path / "a.qdstrm"
    src.write_bytes(data)
    assert patch_main([str(src), str(tmp_path / "b.qdstrm")]) == 0
    assert src.read_bytes() == data  # source untouched when a destination is given
    assert (tmp_path / "b.qdstrm").read_bytes() == patch(data)[0]
    assert patch_main([str(src)]) == 0 and src.read_bytes() == patch(data)[0]  # in place
    bad = tmp_path / "bad.qdstrm"
    bad.write_bytes(b"not a stream")
    assert patch_main([str(bad)]) == 1
    with pytest.raises(ValueError):
        patch(_fake_qdstrm(n_runtime=300)[0])
