"""Single-GPU scenarios for the rules beyond the host-to-device ladder (all data resident on the GPU).

* ``dtoh-*`` — the GPU-to-CPU part of the articles' series: a conv net whose 100 MB outputs
  (32x3x512x512 fp32) go back to the host every step, plus the loss as a Python float.
  ``pageable``: ``out.cpu()`` and ``loss.item()`` (blocking, pageable memory);
  ``pinned-async``: two preallocated pinned buffers, ``copy_(non_blocking=True)`` on a side
  stream, the event waited one step later, only where the values are read;
  ``deferred``: loss summed on the GPU, outputs and loss synced every ``SYNC_EVERY`` steps.
* ``tinyops-*`` — a residual MLP of many tiny blocks: ``eager`` launches hundreds of ~2 us
  kernels per step from Python (launch-bound); ``graphs`` captures the whole step once in a
  CUDA graph and replays it (the fix). Profile with ``--cuda-graph-trace=node`` to see the
  graph's kernels.
* ``gpu-bound`` — ResNet-18 at batch 128 on resident data: a healthy GPU-bound loop; at batch 32 with
  ``sync-per-param`` (each parameter's gradient norm read with ``.item()``: 62 host syncs per step)
  and ``io-midstep`` (64 MB of logs written to a file inside the step, range ``write log``); at batch 128
  with ``sync-timing`` (``torch.cuda.synchronize()`` after every step to time it, range ``timing``).

NVTX: ``Step {i}`` ⊃ ``forward``/``backward``/``optimizer``/``log outputs`` (dtoh),
``iter {i}`` (tinyops), ``Batch {i}`` ⊃ ``Compute`` (gpu-bound).
"""

from __future__ import annotations

import sys
from typing import Optional

from .annotate import get_annotator
from .schedule import StepSchedule
from .variants import SCENARIO_VARIANTS

SYNC_EVERY = 10          # dtoh-deferred: steps between host syncs (none falls in a 3-step capture)
DTOH_BATCH, DTOH_IMAGE, DTOH_WIDTH = 32, 512, 64
TINY_BLOCKS, TINY_WIDTH, TINY_BATCH = 24, 256, 16
GPU_BOUND_BATCH, GPU_BOUND_IMAGE = 128, 224
SMALL_BATCH = 32             # sync-per-param, io-midstep: a shorter GPU step, so the host's extra work shows
LOG_BYTES = 64 << 20         # io-midstep: bytes written per step


def run(variant: str, *, steps: int = 3, warmup: int = 10, cooldown: int = 1, device: str = "cuda",
        profiler_range: bool = True, nvtx_backend: Optional[str] = None, seed: Optional[int] = 0) -> StepSchedule:
    import torch

    v = SCENARIO_VARIANTS[variant]
    dev = torch.device(device)
    if dev.type != "cuda" or not torch.cuda.is_available():
        raise RuntimeError("the scenarios need a CUDA device")
    if seed is not None:
        torch.manual_seed(seed)
    annotate, nvtx_desc = get_annotator(nvtx_backend)
    print(f"INFO workload=scenarios variant={variant} mode={v.mode} device={dev} nvtx={nvtx_desc!r} "
          f"torch={torch.__version__}", file=sys.stderr)
    sched = StepSchedule(warmup, steps, cooldown, cuda=True, profiler_range=profiler_range)
    {"dtoh": _dtoh, "tinyops": _tinyops, "gpu-bound": _gpu_bound}[v.family](v.mode, sched, annotate, dev)
    sched.finish()
    print(sched.report(workload="scenarios", variant=variant, world_size=1), flush=True)
    return sched


def _dtoh(mode: str, sched: StepSchedule, annotate, dev) -> None:
    import torch
    from torch import nn

    w = DTOH_WIDTH
    model = nn.Sequential(nn.Conv2d(3, w, 3, padding=1), nn.ReLU(), nn.Conv2d(w, w, 3, padding=1), nn.ReLU(),
                          nn.Conv2d(w, 3, 3, padding=1)).to(dev)
    optimizer = torch.optim.Adam(model.parameters())
    shape = (DTOH_BATCH, 3, DTOH_IMAGE, DTOH_IMAGE)
    inputs = [torch.randn(shape, device=dev) for _ in range(2)]
    target = torch.randn(shape, device=dev)
    copy_stream = torch.cuda.Stream(device=dev)
    pinned = [torch.empty(shape, pin_memory=True) for _ in range(2)] if mode == "pinned-async" else []
    loss_pinned = [torch.empty((), pin_memory=True) for _ in range(2)] if mode == "pinned-async" else []
    ready = [None, None]
    loss_sum = torch.zeros((), device=dev)
    history: list[float] = []
    predictions: list = []  # host copies of the outputs (the last one kept, as a logger would)
    for i in range(sched.total):
        sched.before_step(i)
        with annotate(f"Step {i}", color="blue"):
            with annotate("forward", color="green"):
                out = model(inputs[i % 2])
                loss = nn.functional.mse_loss(out, target)
            with annotate("backward", color="green"):
                loss.backward()
            with annotate("optimizer", color="green"):
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            with annotate("log outputs", color="yellow"):
                if mode == "pageable":
                    predictions.append(out.detach().cpu())
                    history.append(loss.item())
                elif mode == "pinned-async":
                    slot = i % 2
                    prev = ready[1 - slot]
                    if prev is not None:  # read last step's values only now, when they are needed
                        prev.synchronize()
                        history.append(float(loss_pinned[1 - slot]))
                    copy_stream.wait_stream(torch.cuda.current_stream(dev))
                    with torch.cuda.stream(copy_stream):
                        pinned[slot].copy_(out.detach(), non_blocking=True)
                        loss_pinned[slot].copy_(loss.detach(), non_blocking=True)
                        out.record_stream(copy_stream)
                        loss.record_stream(copy_stream)
                        ready[slot] = torch.cuda.Event()
                        ready[slot].record(copy_stream)
                else:  # deferred
                    loss_sum += loss.detach()
                    if (i + 1) % SYNC_EVERY == 0:
                        predictions.append(out.detach().cpu())
                        history.append(loss_sum.item())
                        loss_sum.zero_()
                del predictions[:-1]


def _tiny_mlp(dev, blocks: int = TINY_BLOCKS, width: int = TINY_WIDTH):
    """A residual MLP of ``blocks`` LayerNorm → Linear → GELU blocks: every kernel is tiny."""
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = nn.LayerNorm(width)
            self.fc = nn.Linear(width, width)

        def forward(self, x):
            return x + nn.functional.gelu(self.fc(self.norm(x)))

    return nn.Sequential(*[Block() for _ in range(blocks)], nn.Linear(width, 10)).to(dev)


def _tinyops(mode: str, sched: StepSchedule, annotate, dev) -> None:
    import torch
    from torch import nn

    model = _tiny_mlp(dev)
    graphs = mode == "graphs"
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False, capturable=graphs)
    batches = [(torch.randn(TINY_BATCH, TINY_WIDTH, device=dev), torch.randint(0, 10, (TINY_BATCH,), device=dev))
               for _ in range(4)]

    def step(x, y):
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    if graphs:
        static_x, static_y = (t.clone() for t in batches[0])
        side = torch.cuda.Stream(device=dev)
        side.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(side):  # warm up on a side stream before capture, as PyTorch asks
            for _ in range(3):
                optimizer.zero_grad(set_to_none=True)
                step(static_x, static_y)
        torch.cuda.current_stream(dev).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        optimizer.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            step(static_x, static_y)
    for i in range(sched.total):
        sched.before_step(i)
        x, y = batches[i % len(batches)]
        with annotate(f"iter {i}", color="blue"):
            if graphs:
                static_x.copy_(x)
                static_y.copy_(y)
                graph.replay()
            else:
                optimizer.zero_grad(set_to_none=True)
                step(x, y)


def _gpu_bound(mode: str, sched: StepSchedule, annotate, dev) -> None:
    import os
    import tempfile
    import time

    import torch
    import torchvision

    batch = GPU_BOUND_BATCH if mode in ("resident", "sync-timing") else SMALL_BATCH
    model = torchvision.models.resnet18().to(dev).train()
    optimizer = torch.optim.Adam(model.parameters())
    data = torch.randn(batch, 3, GPU_BOUND_IMAGE, GPU_BOUND_IMAGE, device=dev)
    target = torch.randint(0, 1000, (batch,), device=dev)
    log_payload = os.urandom(LOG_BYTES) if mode == "write-log" else b""
    log_path = os.path.join(tempfile.gettempdir(), f"io_midstep_{os.getpid()}.log")
    grad_norms: list[float] = []
    step_ends: list[float] = []
    for i in range(sched.total):
        sched.before_step(i)
        with annotate(f"Batch {i}", color="blue"):
            with annotate("Compute", color="green"):
                loss = torch.nn.functional.cross_entropy(model(data), target)
                loss.backward()
            if mode == "grad-norm-items":
                with annotate("grad norms", color="yellow"):
                    grad_norms = [p.grad.norm().item() for p in model.parameters()]  # one sync per parameter
            if mode == "write-log":
                with annotate("write log", color="yellow"):
                    with open(log_path, "wb") as f:
                        f.write(log_payload)
                        f.flush()
                        os.fsync(f.fileno())
            with annotate("optimizer", color="green"):
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            if mode == "sync-timing":
                with annotate("timing", color="yellow"):
                    torch.cuda.synchronize()  # the step's wall time, as a hand-rolled timer takes it
                    step_ends.append(time.perf_counter())
    if os.path.exists(log_path):
        os.remove(log_path)
    del grad_norms
