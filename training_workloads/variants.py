"""Variant tables of the two workloads (no torch needed)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class InputPipelineVariant:
    """One step of the host-to-device article (ResNet-18, batch 64, 3x512x512)."""

    name: str
    num_workers: int
    pin_memory: bool
    non_blocking: bool
    copy_mode: str  # "inline" | "streams" | "prefetch"
    description: str
    ranges: str = "article"  # NVTX: "article" (Batch i > get batch/copy batch/Compute), "unnamed", "step-only"


@dataclass(frozen=True)
class DDPVariant:
    """One step of the DDP article (ViT-L/32, batch 32, 224x224, SGD)."""

    name: str
    use_ddp: bool
    static_graph: bool = False
    gradient_as_bucket_view: bool = False
    comm_hook: Optional[str] = None  # None | "bf16" | "powersgd"
    description: str = ""


INPUT_PIPELINE_VARIANTS: dict[str, InputPipelineVariant] = {
    v.name: v
    for v in (
        InputPipelineVariant(
            "baseline", 0, False, False, "inline",
            "DataLoader in the main process, pageable memory, blocking .to(device)",
        ),
        InputPipelineVariant(
            "workers", 8, False, False, "inline",
            "num_workers=8; pageable memory, blocking copy (the munmap pattern)",
        ),
        InputPipelineVariant(
            "pinned", 8, True, True, "inline",
            "num_workers=8, pin_memory=True, .to(device, non_blocking=True)",
        ),
        InputPipelineVariant(
            "streams", 8, True, True, "streams",
            "pinned + copy batch N+1 on a side CUDA stream while batch N computes",
        ),
        InputPipelineVariant(
            "prefetch", 8, True, True, "prefetch",
            "pinned + DataPrefetcher iterator (copy issued on a side stream inside get batch)",
        ),
        InputPipelineVariant(
            "loader-unnamed", 0, False, False, "inline",
            "baseline, but the sub-ranges are named 'prep', 'move', 'fwd_bwd' (nothing loader-like)",
            ranges="unnamed",
        ),
        InputPipelineVariant(
            "loader-noranges", 0, False, False, "inline",
            "baseline with only the 'Batch i' step range (no sub-ranges at all)",
            ranges="step-only",
        ),
    )
}


@dataclass(frozen=True)
class ScenarioVariant:
    """One single-GPU scenario for a rule beyond the articles' host-to-device ladder."""

    name: str
    family: str  # "dtoh" | "tinyops" | "gpu-bound" (ResNet-18 on resident data, with the mode's extra per step)
    mode: str
    description: str
    env: tuple[tuple[str, str], ...] = ()  # environment set before torch starts CUDA (a setting left on)


SCENARIO_VARIANTS: dict[str, ScenarioVariant] = {
    v.name: v
    for v in (
        ScenarioVariant("dtoh-pageable", "dtoh", "pageable",
                        "conv net, 100 MB outputs copied back with .cpu() and loss.item() every step"),
        ScenarioVariant("dtoh-pinned-async", "dtoh", "pinned-async",
                        "outputs copied into preallocated pinned buffers on a side stream (non_blocking), "
                        "read one step later after an event wait"),
        ScenarioVariant("dtoh-deferred", "dtoh", "deferred",
                        "loss kept on the GPU, outputs and loss synced every 10 steps"),
        ScenarioVariant("tinyops-eager", "tinyops", "eager",
                        "residual MLP of 24 tiny blocks (batch 16, width 256), Adam(foreach=False): "
                        "hundreds of ~2 us kernels per step"),
        ScenarioVariant("tinyops-graphs", "tinyops", "graphs",
                        "the same step captured once in a CUDA graph and replayed (Adam(capturable=True))"),
        ScenarioVariant("tinyops-graphs-blocking", "tinyops", "graphs",
                        "tinyops-graphs with CUDA_LAUNCH_BLOCKING=1 (each graph launch waits for its kernels)",
                        env=(("CUDA_LAUNCH_BLOCKING", "1"),)),
        ScenarioVariant("gpu-bound", "gpu-bound", "resident",
                        "ResNet-18, batch 128 at 224x224, data resident on the GPU: nothing to fix on the input side"),
        ScenarioVariant("sync-per-param", "gpu-bound", "grad-norm-items",
                        "gpu-bound at batch 32, logging each parameter's gradient norm with .item() every step "
                        "(62 host syncs per step)"),
        ScenarioVariant("sync-timing", "gpu-bound", "sync-timing",
                        "gpu-bound (batch 128) with torch.cuda.synchronize() after every step to time it (range 'timing')"),
        ScenarioVariant("io-midstep", "gpu-bound", "write-log",
                        "gpu-bound at batch 32, writing 64 MB of logs to a file inside the step (range 'write log')"),
    )
}



@dataclass(frozen=True)
class CauseVariant:
    """One workload of ``causes`` (PyTorch), ``gloo`` (8 DDP ranks) or ``programs`` (JAX, CuPy).

    ``capture_args``: extra workload arguments for its capture only (after the defaults, so they win),
    e.g. more profiled steps so an epoch boundary falls inside, or no warm-up to capture compilation.
    ``nproc``: processes under ``launcher`` (0: launched directly); ``launcher``: torchrun or mpirun.
    """

    name: str
    family: str
    mode: str
    description: str
    capture_args: str = ""
    nproc: int = 0
    launcher: str = "torchrun"
    env: tuple[tuple[str, str], ...] = ()  # environment set before torch starts CUDA (a setting left on)


CAUSE_VARIANTS: dict[str, CauseVariant] = {
    v.name: v
    for v in (
        CauseVariant("optimizer-unfused", "optimizer", "unfused",
                     "residual MLP of 64 tiny blocks (258 parameter tensors), AdamW(foreach=False)"),
        CauseVariant("optimizer-fused", "optimizer", "fused", "the same with AdamW(fused=True)"),
        CauseVariant("accumulate-unfused", "accumulate", "unfused",
                     "optimizer-unfused with gradient accumulation: AdamW(foreach=False) every 4th micro-batch step",
                     capture_args="--steps 12"),
        CauseVariant("accumulate-fused", "accumulate", "fused", "the same with AdamW(fused=True)",
                     capture_args="--steps 12"),
        CauseVariant("copy-pinned-blocking", "copy", "blocking",
                     "100 MB pinned batches into a launch-bound net, blocking .to(device)"),
        CauseVariant("copy-pinned-nonblocking", "copy", "nonblocking", "the same with .to(device, non_blocking=True)"),
        CauseVariant("clip-item", "clip", "item",
                     "ResNet-18 b32, clip_grad_norm_ and the norm logged with .item() every step",
                     capture_args="--steps 8"),
        CauseVariant("clip-noitem", "clip", "noitem", "the same, norms kept on the GPU and read every 10 steps",
                     capture_args="--steps 8"),
        CauseVariant("workers-nonpersistent", "workers", "nonpersistent",
                     "ResNet-18 b32, 4 pinned DataLoader workers, 3-batch epochs, persistent_workers=False",
                     capture_args="--steps 6"),
        CauseVariant("workers-persistent", "workers", "persistent", "the same with persistent_workers=True",
                     capture_args="--steps 6"),
        CauseVariant("launchbound-b", "launchbound", "b", "tinyops MLP (24 blocks), Adam(foreach=False), batch 16"),
        CauseVariant("launchbound-4b", "launchbound", "4b", "the same at batch 64"),
        CauseVariant("hook-sync", "hook", "sync",
                     "ResNet-18 b32, torch.cuda.synchronize() in 49 forward hooks (convs, batch norms, blocks, head)"),
        CauseVariant("hook-nosync", "hook", "nosync", "the same without the hooks"),
        CauseVariant("checkpoint-per-step", "host-cause", "checkpoint",
                     "ResNet-18 b32, torch.save of model + Adam state every step (range 'save checkpoint')"),
        CauseVariant("empty-cache-per-step", "host-cause", "empty-cache",
                     "ResNet-18 b32 at 224/256 alternating, torch.cuda.empty_cache() every step"),
        CauseVariant("compile-warmup", "compile", "warmup",
                     "torch.compile'd MLP (8 x 1024), captured from its first iteration (compilation inside)",
                     capture_args="--warmup 0 --steps 3"),
        CauseVariant("compile-steady", "compile", "steady",
                     "the same torch.compile'd MLP after 10 warm-up steps, default mode (Triton kernels, eager Adam)",
                     capture_args="--steps 6"),
        CauseVariant("compile-graphs", "compile", "graphs", "the same with mode='reduce-overhead' (CUDA graphs)",
                     capture_args="--steps 6"),
        CauseVariant("recompile-static", "compile", "recompile-static",
                     "compile-steady's MLP with a new batch size every step, automatic dynamic shapes off: a "
                     "recompilation per step", capture_args="--warmup 2 --steps 4"),
        CauseVariant("recompile-dynamic", "compile", "recompile-dynamic",
                     "the same with automatic dynamic shapes on (one dynamic graph)", capture_args="--warmup 2 --steps 4"),
        CauseVariant("link-bound", "link", "bound",
                     "1 GiB pinned host memory per step copied in 32 MiB chunks on 4 streams, one tiny kernel each"),
        CauseVariant("loader-2workers", "loader", "2workers",
                     "ResNet-18 b32, a persistent pinned DataLoader with 2 workers, 4 ms of Python CPU work per sample",
                     capture_args="--steps 12"),
        CauseVariant("loader-12workers", "loader", "12workers", "the same with 12 workers", capture_args="--steps 12"),
        CauseVariant("eval-every-4", "eval", "every-4",
                     "ResNet-18 b32, every 4th step also evaluates 8 batches (no_grad, .item() per batch)",
                     capture_args="--steps 12"),
        CauseVariant("checkpoint-every-5", "checkpoint-every", "5",
                     "ResNet-18 b32, torch.save of model + Adam state every 5th step (range 'save checkpoint')",
                     capture_args="--steps 12"),
        CauseVariant("cudnn-benchmark", "cudnn", "benchmark",
                     "ResNet-18 b16, a new image size every step (160 + 8 i px), torch.backends.cudnn.benchmark=True",
                     capture_args="--steps 6"),
        CauseVariant("cudnn-default", "cudnn", "default", "the same with cudnn.benchmark=False (the default)",
                     capture_args="--steps 6"),
        CauseVariant("disk-loader", "disk-loader", "main",
                     "ResNet-18 b32, a DataLoader in the main process (num_workers=0) reading each sample from disk",
                     capture_args="--steps 6"),
        CauseVariant("host-metrics", "host-metrics", "python",
                     "ResNet-18 b32, 15 ms of Python work after each optimizer step (range 'metrics'), no sync",
                     capture_args="--steps 6"),
        CauseVariant("small-copies", "small-copies", "pageable",
                     "ResNet-18 b32 plus a dict batch of 64 pageable 8 KB tensors, each .to(device)",
                     capture_args="--steps 6"),
        CauseVariant("amp-scaler-foreach", "amp", "foreach",
                     "ResNet-18 b16, fp16 autocast + GradScaler, Adam(foreach=True): found_inf read with .item() "
                     "in scaler.step", capture_args="--steps 6"),
        CauseVariant("amp-scaler-fused", "amp", "fused", "the same with Adam(fused=True): no host sync in scaler.step",
                     capture_args="--steps 6"),
        CauseVariant("masked-loss-index", "masked", "index",
                     "ResNet-18 b16, a quarter of the labels -100, loss on logits[valid], y[valid] (two nonzero syncs)",
                     capture_args="--steps 6"),
        CauseVariant("masked-loss-ignore", "masked", "ignore", "the same with cross_entropy(ignore_index=-100)",
                     capture_args="--steps 6"),
        CauseVariant("gil-thread", "gil", "thread",
                     "ResNet-18 b32, a background Python thread alternating 3 ms of pure-Python CPU work with "
                     "3 ms of sleep (a metrics thread): the training thread waits for the GIL", capture_args="--steps 6"),
        CauseVariant("gil-process", "gil", "process", "the same work in a separate process (multiprocessing, spawn)",
                     capture_args="--steps 6"),
        CauseVariant("launch-blocking", "debug", "launch-blocking",
                     "ResNet-18 b32 on a resident batch with CUDA_LAUNCH_BLOCKING=1 left set (every launch waits "
                     "for its kernel)", capture_args="--steps 6", env=(("CUDA_LAUNCH_BLOCKING", "1"),)),
        CauseVariant("anomaly-mode", "debug", "anomaly",
                     "the same with torch.autograd.set_detect_anomaly(True) left on", capture_args="--steps 6"),
        CauseVariant("no-caching-allocator", "debug", "no-caching",
                     "the same with PYTORCH_NO_CUDA_MEMORY_CACHING=1 left set (cudaMalloc/cudaFree per tensor)",
                     capture_args="--steps 6", env=(("PYTORCH_NO_CUDA_MEMORY_CACHING", "1"),)),
        CauseVariant("debug-off", "debug", "off", "the same with no debug setting (the fixed twin of the three)",
                     capture_args="--steps 6"),
        CauseVariant("anomaly-mlp", "accumulate", "anomaly",
                     "the optimizer-* MLP (AdamW fused=True every step) with torch.autograd.set_detect_anomaly(True)",
                     capture_args="--steps 6"),
        CauseVariant("vit-fp32", "precision", "vit-fp32",
                     "ViT-L/32 batch 32 on a resident batch in fp32 with PyTorch's defaults (matmuls on the FMA units)",
                     capture_args="--steps 6"),
        CauseVariant("vit-tf32", "precision", "vit-tf32", "the same with torch.set_float32_matmul_precision('high')",
                     capture_args="--steps 6"),
        CauseVariant("vit-bf16", "precision", "vit-bf16", "vit-fp32 under bf16 autocast", capture_args="--steps 6"),
        CauseVariant("lm-fp32", "precision", "lm-fp32",
                     "a 6-layer transformer encoder LM (width 1024, seq 512, batch 8, vocab 8192) in fp32, defaults",
                     capture_args="--steps 6"),
        CauseVariant("lm-tf32", "precision", "lm-tf32", "the same with torch.set_float32_matmul_precision('high')",
                     capture_args="--steps 6"),
        CauseVariant("conv-fp32", "precision", "conv-fp32",
                     "ResNet-50 batch 64 on a resident batch with torch.backends.cudnn.allow_tf32=False",
                     capture_args="--steps 6"),
        CauseVariant("conv-tf32", "precision", "conv-tf32", "the same with cuDNN's default (TF32 convolutions)",
                     capture_args="--steps 6"),
        CauseVariant("emit-nvtx", "debug", "emit-nvtx",
                     "the same under torch.autograd.profiler.emit_nvtx() (an NVTX range per op), 'Step i' ranges kept",
                     capture_args="--steps 6"),
        CauseVariant("emit-nvtx-only", "debug", "emit-nvtx",
                     "emit-nvtx without the program's own ranges: only the per-op ranges", capture_args="--steps 6 "
                     "--nvtx-backend none"),
    )
}

GLOO_VARIANTS: dict[str, CauseVariant] = {
    v.name: v
    for v in (
        CauseVariant("8rank", "gloo", "balanced", "8 DDP ranks on GPU 0, gloo backend, 6.3M-parameter MLP",
                     capture_args="--warmup 15 --steps 5", nproc=8),
        CauseVariant("8rank-slow", "gloo", "slow", "the same, rank 3's loader spends 200 ms of CPU work per step",
                     capture_args="--warmup 15 --steps 5", nproc=8),
    )
}

PROGRAM_VARIANTS: dict[str, CauseVariant] = {
    v.name: v
    for v in (
        CauseVariant("jax-pageable", "jax", "pageable",
                     "JAX MLP training loop, a pageable NumPy batch (12.6 MB) device_put every step, loss read back"),
        CauseVariant("jax-eager", "jax", "eager",
                     "JAX MLP (6 x 512, batch 64) on a resident batch, the training step run op by op (no jax.jit)",
                     capture_args="--steps 6"),
        CauseVariant("jax-jit", "jax", "jit", "the same step under jax.jit", capture_args="--steps 6"),
        CauseVariant("jax-callback", "jax", "callback",
                     "jax-jit with a jax.debug.callback in the step logging the loss (1 ms of Python on the host)",
                     capture_args="--steps 6"),
        CauseVariant("jax-highest", "jax", "highest",
                     "JAX MLP (4 x 4096, batch 2048) on a resident batch under jax.jit with "
                     "jax_default_matmul_precision='highest' (full fp32 matmuls)", capture_args="--steps 6"),
        CauseVariant("jax-default", "jax", "default", "the same with JAX's default matmul precision",
                     capture_args="--steps 6"),
        CauseVariant("numba-tinyops", "numba", "tinyops",
                     "Numba: a @cuda.jit multiply-add-tanh kernel launched 48 times per iteration on a 64K array",
                     capture_args="--steps 6"),
        CauseVariant("numba-fused", "numba", "fused", "the same 48 rounds in one kernel launch (a loop in the kernel)",
                     capture_args="--steps 6"),
        CauseVariant("cupy-tinyops", "cupy", "tinyops",
                     "CuPy: 24 rounds of multiply, add, tanh on a 64K-element array per iteration, one kernel per op (72)",
                     capture_args="--steps 6"),
        CauseVariant("cupy-fused", "cupy", "fused", "the same chain as one @cupy.fuse kernel", capture_args="--steps 6"),
        CauseVariant("jax-eager-platform", "jax", "eager",
                     "jax-eager with XLA_PYTHON_CLIENT_ALLOCATOR=platform (a device buffer allocated and freed per op)",
                     capture_args="--steps 6", env=(("XLA_PYTHON_CLIENT_ALLOCATOR", "platform"),)),
        CauseVariant("cupy-tinyops-nopool", "cupy", "tinyops-nopool",
                     "cupy-tinyops with CuPy's memory pool off (cupy.cuda.set_allocator(None))", capture_args="--steps 6"),
        CauseVariant("cupy-tinyops-blocking", "cupy", "tinyops", "cupy-tinyops with CUDA_LAUNCH_BLOCKING=1",
                     capture_args="--steps 6", env=(("CUDA_LAUNCH_BLOCKING", "1"),)),
        CauseVariant("jax-eager-blocking", "jax", "eager", "jax-eager with CUDA_LAUNCH_BLOCKING=1",
                     capture_args="--steps 6", env=(("CUDA_LAUNCH_BLOCKING", "1"),)),
        CauseVariant("cupy-pageable", "cupy", "pageable",
                     "CuPy: 64 MiB pageable ndarray.set() per iteration, matmul + reduction, sync"),
        CauseVariant("cupy-managed", "cupy", "managed",
                     "CuPy: 256 MiB managed array touched by host and device every iteration (UM migrations)"),
        CauseVariant("mpi-hoststaged", "mpi", "hoststaged",
                     "mpi4py + CuPy, 2 ranks on GPU 0: 64 MiB result copied to the host and MPI.Allreduce'd "
                     "every step; rank 1 does 50 ms of CPU work first", nproc=2, launcher="mpirun"),
    )
}

# The DDP article's optimizations are cumulative: each one keeps the previous settings.
DDP_VARIANTS: dict[str, DDPVariant] = {
    v.name: v
    for v in (
        DDPVariant("single", use_ddp=False, description="one GPU, no DDP wrapper"),
        DDPVariant("ddp", use_ddp=True, description="DDP, bucket_cap_mb=2000 (one bucket)"),
        DDPVariant("static-graph", use_ddp=True, static_graph=True,
                   description="ddp + static_graph=True"),
        DDPVariant("bucket-view", use_ddp=True, static_graph=True, gradient_as_bucket_view=True,
                   description="static-graph + gradient_as_bucket_view=True"),
        DDPVariant("bf16", use_ddp=True, static_graph=True, gradient_as_bucket_view=True,
                   comm_hook="bf16", description="bucket-view + bf16_compress_hook"),
        DDPVariant("powersgd", use_ddp=True, static_graph=True, gradient_as_bucket_view=True,
                   comm_hook="powersgd", description="bucket-view + PowerSGD hook"),
    )
}

WORKLOAD_PREFIX = {"input-pipeline": "resnet18", "ddp": "vit_l32", "scenarios": "", "causes": "", "gloo": "gloo",
                   "programs": ""}
VARIANT_TABLES = {"input-pipeline": INPUT_PIPELINE_VARIANTS, "ddp": DDP_VARIANTS, "scenarios": SCENARIO_VARIANTS,
                  "causes": CAUSE_VARIANTS, "gloo": GLOO_VARIANTS, "programs": PROGRAM_VARIANTS}


def capture_name(workload: str, variant: str) -> str:
    """File stem of a capture: ``capture_name('ddp', 'bucket-view') == 'vit_l32_bucket_view'``;
    scenarios have no prefix (``capture_name('scenarios', 'dtoh-pageable') == 'dtoh_pageable'``)."""
    if workload not in WORKLOAD_PREFIX:
        raise KeyError(f"unknown workload {workload!r}")
    if variant not in VARIANT_TABLES[workload]:
        raise KeyError(f"unknown {workload} variant {variant!r}")
    stem = variant.replace('-', '_')
    return f"{WORKLOAD_PREFIX[workload]}_{stem}" if WORKLOAD_PREFIX[workload] else stem


def parse_capture_name(name: str) -> tuple[str, str]:
    """Inverse of :func:`capture_name`; also accepts a bare variant name."""
    for workload, prefix in WORKLOAD_PREFIX.items():
        if prefix and name.startswith(prefix + "_"):
            variant = name[len(prefix) + 1:].replace("_", "-")
            capture_name(workload, variant)  # validates
            return workload, variant
    bare = name.replace("_", "-")
    for workload, table in VARIANT_TABLES.items():
        if bare in table:
            return workload, bare
    raise KeyError(f"unknown capture or variant name {name!r}")


def capture_args(workload: str, variant: str) -> str:
    """Extra workload arguments of this variant's capture ('' for most)."""
    return getattr(VARIANT_TABLES[workload][variant], "capture_args", "")


def launch_nproc(workload: str, variant: str, default: int = 1) -> int:
    """Processes under torchrun for this variant: 0 = run directly; DDP variants use ``default``."""
    if workload == "ddp":
        return 0 if variant == "single" else default
    return getattr(VARIANT_TABLES[workload][variant], "nproc", 0)


def launcher(workload: str, variant: str) -> str:
    """The multi-process launcher of this variant: ``torchrun`` or ``mpirun``."""
    return getattr(VARIANT_TABLES[workload][variant], "launcher", "torchrun")


ALL_CAPTURES: tuple[str, ...] = tuple(
    capture_name(workload, v) for workload, table in VARIANT_TABLES.items() for v in table
)
