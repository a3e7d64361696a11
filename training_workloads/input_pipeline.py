"""Host-to-device article: ResNet-18 trained on random 3x512x512 images, batch 64, Adam.

NVTX per step, as in the article: ``Batch {i}`` containing ``get batch``, ``copy batch`` and
``Compute`` (in the ``prefetch`` variant ``copy batch`` sits inside ``get batch``, issued by
the prefetcher). ``loader-unnamed`` names the sub-ranges ``prep``/``move``/``fwd_bwd``;
``loader-noranges`` keeps only ``Batch {i}``: the diagnosis must not depend on range names.
"""

from __future__ import annotations

import sys
from typing import Optional

from .annotate import get_annotator, noop_annotate
from .schedule import StepSchedule
from .variants import INPUT_PIPELINE_VARIANTS


def run(
    variant: str,
    *,
    steps: int = 3,
    warmup: int = 10,
    cooldown: int = 1,
    batch_size: int = 64,
    image_size: int = 512,
    num_workers: Optional[int] = None,
    device: str = "cuda",
    profiler_range: bool = True,
    nvtx_backend: Optional[str] = None,
    seed: Optional[int] = None,
) -> StepSchedule:
    import torch
    import torchvision
    from torch.utils.data import DataLoader

    from .data import FakeDataset
    from .prefetch import DataPrefetcher

    v = INPUT_PIPELINE_VARIANTS[variant]
    dev = torch.device(device)
    cuda = dev.type == "cuda"
    if cuda and not torch.cuda.is_available():
        raise RuntimeError("CUDA is not available; pass --device cpu for a CPU smoke run")
    if v.copy_mode == "streams" and not cuda:
        raise RuntimeError("the streams variant needs a CUDA device")
    if seed is not None:
        torch.manual_seed(seed)

    annotate, nvtx_desc = get_annotator(nvtx_backend)
    sub = _subrange_annotator(annotate, v.ranges)
    workers = v.num_workers if num_workers is None else num_workers
    pin = v.pin_memory and cuda
    non_blocking = v.non_blocking and cuda
    print(
        f"INFO workload=input-pipeline variant={variant} num_workers={workers} pin_memory={pin} "
        f"non_blocking={non_blocking} copy_mode={v.copy_mode} batch={batch_size} "
        f"image={image_size} device={dev} nvtx={nvtx_desc!r} torch={torch.__version__}",
        file=sys.stderr,
    )

    model = torchvision.models.resnet18().to(dev).train()
    optimizer = torch.optim.Adam(model.parameters())

    sched = StepSchedule(warmup, steps, cooldown, cuda=cuda, profiler_range=profiler_range)
    loader = DataLoader(
        FakeDataset(sched.total * batch_size, image_size, label_mode="index"),
        batch_size=batch_size,
        num_workers=workers,
        pin_memory=pin,
    )

    def copy_data(batch):
        data, targets = batch
        return data.to(dev, non_blocking=non_blocking), targets.to(dev, non_blocking=non_blocking)

    def compute_step(batch):
        data, targets = batch
        output = model(data)
        loss = torch.nn.functional.cross_entropy(output, targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss

    if v.copy_mode == "inline":
        data_iter = iter(loader)
        for i in range(sched.total):
            sched.before_step(i)
            with annotate(f"Batch {i}", color="blue"):
                with sub("get batch", color="red"):
                    batch = next(data_iter)
                with sub("copy batch", color="yellow"):
                    batch = copy_data(batch)
                with sub("Compute", color="green"):
                    compute_step(batch)

    elif v.copy_mode == "streams":
        compute_stream = torch.cuda.Stream(device=dev)
        copy_stream = torch.cuda.Stream(device=dev)
        data_iter = iter(loader)
        next_batch = next(data_iter)
        with torch.cuda.stream(copy_stream):
            next_batch = copy_data(next_batch)
        for i in range(sched.total):
            sched.before_step(i)
            with annotate(f"Batch {i}", color="blue"):
                # wait for the copy stream to finish batch N
                compute_stream.wait_stream(copy_stream)
                batch = next_batch
                for t in batch:
                    t.record_stream(compute_stream)
                # copy batch N+1 on the copy stream
                try:
                    with annotate("get batch", color="red"):
                        next_batch = next(data_iter)
                    with torch.cuda.stream(copy_stream):
                        with annotate("copy batch", color="yellow"):
                            next_batch = copy_data(next_batch)
                except StopIteration:  # end of the dataset
                    next_batch = None
                # compute batch N on the compute stream
                with torch.cuda.stream(compute_stream):
                    with annotate("Compute", color="green"):
                        compute_step(batch)

    elif v.copy_mode == "prefetch":
        data_iter = DataPrefetcher(loader, dev, non_blocking=non_blocking, annotate=annotate)
        for i in range(sched.total):
            sched.before_step(i)
            with annotate(f"Batch {i}", color="blue"):
                with annotate("get batch", color="red"):
                    batch = next(data_iter)
                with annotate("Compute", color="green"):
                    compute_step(batch)
    else:  # pragma: no cover - table is closed
        raise AssertionError(v.copy_mode)

    sched.finish()
    print(sched.report(workload="input-pipeline", variant=variant, world_size=1), flush=True)
    return sched


UNNAMED_SUBRANGES = {"get batch": "prep", "copy batch": "move", "Compute": "fwd_bwd"}


def _subrange_annotator(annotate, ranges: str):
    """The annotator for a step's sub-ranges: the article's names, renamed ones, or none."""
    if ranges == "step-only":
        return noop_annotate
    if ranges == "unnamed":
        return lambda message, **kw: annotate(UNNAMED_SUBRANGES[message], **kw)
    return annotate
