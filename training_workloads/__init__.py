"""Training workloads that reproduce the two Nsight Systems articles this project analyzes.

* ``input-pipeline``: ResNet-18 fed by a synthetic DataLoader (host-to-device copy article).
* ``ddp``: ViT-L/32 under DistributedDataParallel (GPU-to-GPU / DDP article).

Run ``python -m training_workloads --help``.  Everything that needs torch is imported lazily,
so the variant tables and the NVTX helpers import without it; the analyzer core
(``nsysanalyze``) never imports this package.
"""

from .variants import (  # noqa: F401
    DDP_VARIANTS,
    INPUT_PIPELINE_VARIANTS,
    DDPVariant,
    InputPipelineVariant,
    capture_name,
    parse_capture_name,
)

__all__ = [
    "DDP_VARIANTS",
    "INPUT_PIPELINE_VARIANTS",
    "DDPVariant",
    "InputPipelineVariant",
    "capture_name",
    "parse_capture_name",
]
