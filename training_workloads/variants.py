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

WORKLOAD_PREFIX = {"input-pipeline": "resnet18", "ddp": "vit_l32"}


def capture_name(workload: str, variant: str) -> str:
    """File stem of a capture: ``capture_name('ddp', 'bucket-view') == 'vit_l32_bucket_view'``."""
    table = INPUT_PIPELINE_VARIANTS if workload == "input-pipeline" else DDP_VARIANTS
    if workload not in WORKLOAD_PREFIX:
        raise KeyError(f"unknown workload {workload!r}")
    if variant not in table:
        raise KeyError(f"unknown {workload} variant {variant!r}")
    return f"{WORKLOAD_PREFIX[workload]}_{variant.replace('-', '_')}"


def parse_capture_name(name: str) -> tuple[str, str]:
    """Inverse of :func:`capture_name`; also accepts a bare variant name."""
    for workload, prefix in WORKLOAD_PREFIX.items():
        if name.startswith(prefix + "_"):
            variant = name[len(prefix) + 1:].replace("_", "-")
            capture_name(workload, variant)  # validates
            return workload, variant
    bare = name.replace("_", "-")
    if bare in INPUT_PIPELINE_VARIANTS:
        return "input-pipeline", bare
    if bare in DDP_VARIANTS:
        return "ddp", bare
    raise KeyError(f"unknown capture or variant name {name!r}")


ALL_CAPTURES: tuple[str, ...] = tuple(
    [capture_name("input-pipeline", v) for v in INPUT_PIPELINE_VARIANTS]
    + [capture_name("ddp", v) for v in DDP_VARIANTS]
)
