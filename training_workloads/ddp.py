"""DDP article: ViT-L/32 (torchvision, weights=None), batch 32, 224x224, SGD.

Launch the DDP variants with torchrun at any world size (``RANK``/``LOCAL_RANK``/``WORLD_SIZE``
are read from the environment; without torchrun a world of one is set up).  ``single`` runs
without the DDP wrapper and refuses a world size above one.

NVTX per step, as in the article: ``Batch {i}`` containing ``get batch`` (which includes the
``non_blocking`` host-to-device copy), ``forward``, ``backward`` and ``optimizer step``.
"""

from __future__ import annotations

import os
import sys
from typing import Optional

from .annotate import get_annotator
from .schedule import StepSchedule
from .variants import DDP_VARIANTS

# NVLink multicast (NVLS) stays off: on shared multi-GPU hosts it can take GPUs out of service.
SAFE_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


def apply_safe_env() -> None:
    for k, val in SAFE_ENV.items():
        os.environ.setdefault(k, val)


def dist_env(use_ddp: bool) -> tuple[int, int, int]:
    """(rank, local_rank, world_size) from torchrun's variables; a world of one without them."""
    if use_ddp and "RANK" not in os.environ:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29500")
        os.environ["RANK"] = "0"
        os.environ.setdefault("LOCAL_RANK", "0")
        os.environ.setdefault("WORLD_SIZE", "1")
    rank = int(os.environ.get("RANK", 0))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    return rank, local_rank, world_size


def run(
    variant: str,
    *,
    steps: int = 3,
    warmup: int = 10,
    cooldown: int = 1,
    batch_size: int = 32,
    image_size: int = 224,
    num_workers: int = 8,
    bucket_cap_mb: float = 2000,
    powersgd_start_iter: int = 2,
    powersgd_rank: int = 1,
    profiler_range: bool = True,
    nvtx_backend: Optional[str] = None,
) -> Optional[StepSchedule]:
    v = DDP_VARIANTS[variant]
    apply_safe_env()
    rank, local_rank, world_size = dist_env(v.use_ddp)
    if not v.use_ddp and world_size > 1:
        raise RuntimeError(
            f"variant 'single' runs without DDP; WORLD_SIZE={world_size} (launch it without "
            "torchrun, or with --nproc_per_node=1)"
        )

    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler
    from torchvision.models import vit_l_32

    from .data import FakeDataset

    if not torch.cuda.is_available():
        raise RuntimeError("the ddp workload needs CUDA (NCCL)")
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    annotate, nvtx_desc = get_annotator(nvtx_backend)
    if rank == 0:
        print(
            f"INFO workload=ddp variant={variant} world_size={world_size} ddp={v.use_ddp} "
            f"static_graph={v.static_graph} gradient_as_bucket_view={v.gradient_as_bucket_view} "
            f"comm_hook={v.comm_hook} bucket_cap_mb={bucket_cap_mb} batch={batch_size} "
            f"image={image_size} workers={num_workers} nvtx={nvtx_desc!r} "
            f"torch={torch.__version__} NCCL_NVLS_ENABLE={os.environ['NCCL_NVLS_ENABLE']}",
            file=sys.stderr,
        )

    model = vit_l_32(weights=None, image_size=image_size).to(device)
    criterion = nn.CrossEntropyLoss().to(device)

    if v.use_ddp:
        try:
            dist.init_process_group("nccl", device_id=device)
        except TypeError:  # torch < 2.3 has no device_id
            dist.init_process_group("nccl")
        model = DDP(
            model,
            device_ids=[local_rank],
            bucket_cap_mb=bucket_cap_mb,
            static_graph=v.static_graph,
            gradient_as_bucket_view=v.gradient_as_bucket_view,
        )
        if v.comm_hook == "bf16":
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

            model.register_comm_hook(state=None, hook=default_hooks.bf16_compress_hook)
        elif v.comm_hook == "powersgd":
            from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook

            # The article keeps PowerSGDState's defaults, whose start_powerSGD_iter=1000 means
            # plain all-reduce for its 14 steps; start early so the profiled steps compress.
            state = powerSGD_hook.PowerSGDState(
                process_group=None,
                matrix_approximation_rank=powersgd_rank,
                start_powerSGD_iter=powersgd_start_iter,
            )
            model.register_comm_hook(state, hook=powerSGD_hook.powerSGD_hook)

    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)

    sched = StepSchedule(warmup, steps, cooldown, cuda=True, profiler_range=profiler_range)
    dataset = FakeDataset(sched.total * batch_size * world_size, image_size,
                          label_mode="random", num_classes=1000)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True)
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler,
                        num_workers=num_workers, pin_memory=True)
    data_iter = iter(loader)

    model.train()
    for i in range(sched.total):
        sched.before_step(i)
        with annotate(f"Batch {i}", color="blue"):
            with annotate("get batch", color="red"):
                data, target = next(data_iter)
                data = data.to(device, non_blocking=True)
                target = target.to(device, non_blocking=True)
            with annotate("forward", color="green"):
                output = model(data)
                loss = criterion(output, target)
            with annotate("backward", color="purple"):
                optimizer.zero_grad()
                loss.backward()
            with annotate("optimizer step", color="yellow"):
                optimizer.step()
    sched.finish()

    if v.use_ddp:
        dist.destroy_process_group()
    if rank == 0:
        print(sched.report(workload="ddp", variant=variant, world_size=world_size,
                           bucket_cap_mb=bucket_cap_mb), flush=True)
    return sched
