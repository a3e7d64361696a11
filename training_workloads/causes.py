"""PyTorch workloads for bad→fixed pairs and for host causes beyond the articles (issues 18 and 22).

Pairs (``bad`` → ``fixed``; the same program except for the fix):

* ``optimizer-unfused`` → ``optimizer-fused``: a residual MLP of 64 tiny blocks (258 parameter
  tensors), AdamW with ``foreach=False`` (a dozen kernels per parameter) → ``fused=True``.
* ``recompile-static`` → ``recompile-dynamic``: the compiled MLP of ``compile-*`` fed a different batch size every
  step (``COMPILE_BATCH`` down to half of it), with Dynamo's automatic dynamic shapes off (every new size compiled
  again) → on (one dynamic graph after the second size).
* ``accumulate-unfused`` → ``accumulate-fused``: the same MLP with gradient accumulation: each ``Step i`` is one
  micro-batch, every ``ACCUMULATE``-th also steps AdamW (``foreach=False`` → ``fused=True``).
  ``anomaly-mlp``: the same MLP stepping a fused AdamW every step under anomaly detection (a verdict check).
* ``copy-pinned-blocking`` → ``copy-pinned-nonblocking``: 100 MB pinned batches (a ring of 4, filled
  once) into a launch-bound net; ``.to(device)`` (the host waits for every copy) → ``non_blocking=True``.
* ``clip-item`` → ``clip-noitem``: ResNet-18 at batch 32 with ``clip_grad_norm_``; the norm logged with
  ``.item()`` every step (one host sync) → kept on the GPU and read every ``LOG_EVERY`` steps.
* ``workers-nonpersistent`` → ``workers-persistent``: a 4-worker pinned DataLoader whose epoch is
  ``EPOCH_BATCHES`` batches, ``persistent_workers=False`` (workers restarted at each epoch) → ``True``.
* ``launchbound-b`` → ``launchbound-4b``: the launch-bound tiny MLP of ``tinyops`` at batch 16 → 64
  (the fix is more samples per launch: compare per-sample time).
* ``hook-sync`` → ``hook-nosync``: ResNet-18 at batch 32 with ``torch.cuda.synchronize()`` in a forward
  hook on every conv, batch-norm, block and the head (49 per step) → no hooks.
* ``amp-scaler-foreach`` → ``amp-scaler-fused``: ResNet-18 at batch ``AMP_BATCH`` under fp16 autocast with a
  ``GradScaler``; ``Adam(foreach=True)`` makes ``scaler.step`` read the found-inf flag with ``.item()`` (a host
  sync per step) → ``Adam(fused=True)``, which takes the scale and the flag on the GPU (no sync).
* ``loader-2workers`` → ``loader-12workers``: ResNet-18 at batch 32 fed by a persistent, pinned DataLoader whose
  samples cost ``TRANSFORM_S`` of CPU each (a Python transform): 2 workers make a batch every ~64 ms, more than
  the step's GPU work; 12 workers keep up.
* ``masked-loss-index`` → ``masked-loss-ignore``: ResNet-18 at batch ``AMP_BATCH`` whose labels mark a quarter
  of the samples -100 (not to be learned); the loss keeps the others by boolean indexing
  (``logits[valid]``, ``y[valid]``: a ``nonzero`` and a host sync each) → ``cross_entropy(...,
  ignore_index=-100)``, the same value without indexing.
* ``gil-thread`` → ``gil-process``: ResNet-18 at batch 32 on a resident batch while a background Python thread
  alternates ``STATS_BUSY_S`` of pure-Python CPU work with ``STATS_PAUSE_S`` of sleep (a metrics or logging
  thread): the training thread waits for the GIL whenever it releases it (every op) during the busy part → the
  same work in a separate process (spawned), which holds no lock the training loop needs.
* ``launch-blocking``, ``anomaly-mode``, ``no-caching-allocator`` → ``debug-off``: ResNet-18 at batch 32 on a
  resident batch with a debugging setting left on: ``CUDA_LAUNCH_BLOCKING=1`` (each launch returns once its kernel
  ran), ``torch.autograd.set_detect_anomaly(True)`` (a NaN check, read on the host, per backward node) or
  ``PYTORCH_NO_CUDA_MEMORY_CACHING=1`` (``cudaMalloc``/``cudaFree`` per tensor) → none of them. ``emit-nvtx`` and
  ``emit-nvtx-only`` run the plain loop under ``torch.autograd.profiler.emit_nvtx()`` (an NVTX range per op), with
  and without the program's own ranges: checks of the step detection.

* ``vit-fp32`` → ``vit-tf32`` (and ``vit-bf16``), ``lm-fp32`` → ``lm-tf32``, ``conv-fp32`` → ``conv-tf32``: GPU-bound
  models whose matmuls (convolutions for ``conv``) run in full fp32 on the FMA units → TF32 tensor cores (bf16
  autocast); see ``_precision``.

Host causes (no fixed twin): ``checkpoint-per-step`` (``torch.save`` of model and optimizer state
every step), ``empty-cache-per-step`` (``torch.cuda.empty_cache()`` every step, image size alternating
224/256, so the allocator returns and re-allocates its blocks), ``compile-warmup`` (``torch.compile``
of an MLP, captured from its first iteration: compilation, module load; ``compile-steady`` → ``compile-graphs``:
the same after warm-up, default mode → ``mode="reduce-overhead"`` (CUDA graphs), a pair), ``link-bound`` (1 GiB of
pinned host memory copied per step in 32 MiB chunks on 4 streams, one tiny kernel per chunk).

Also ``eval-every-4`` (every 4th step evaluates 8 batches under no_grad, accuracy read with ``.item()``, range
'evaluate'), ``checkpoint-every-5`` (``torch.save`` every 5th step), ``cudnn-benchmark`` → ``cudnn-default``
(a new image size every step with ``torch.backends.cudnn.benchmark`` on → off) and ``small-copies`` (a dict
batch of 64 pageable 8 KB tensors, each ``.to(device)``, range 'copy batch'), ``disk-loader`` (a DataLoader in the
main process reading every sample from disk, page cache dropped per file) and ``host-metrics`` (15 ms of Python
work after each step's optimizer, range 'metrics', no sync).

Multi-rank (``gloo`` workload, under ``torchrun --nproc_per_node=8``, all ranks on GPU 0): DDP with the
gloo backend around a 6.3M-parameter MLP; ``8rank-slow`` makes rank ``SLOW_RANK``'s loader spend
``SLOW_LOADER_S`` of CPU work per step.

NVTX: ``Step {i}`` ⊃ the step's parts (``copy batch``, ``forward``, ``backward``, ``clip grads``, ``log``,
``optimizer``, ...); ``Batch {i}`` ⊃ ``get batch`` first for the loader workloads.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from typing import Optional

from .annotate import get_annotator
from .schedule import StepSchedule
from .variants import CAUSE_VARIANTS, GLOO_VARIANTS

RESNET_BATCH, RESNET_IMAGE = 32, 224
OPT_BLOCKS = 64                       # optimizer-*: 64 blocks x 4 tensors + head = 258 parameter tensors
ACCUMULATE = 4                        # accumulate-*: micro-batches per optimizer step
COPY_SHAPE = (32, 3, 512, 512)        # copy-pinned-*: 100 MB fp32 per batch
COPY_RING = 4
LOG_EVERY = 10                        # clip-noitem: steps between reads of the logged norms
EPOCH_BATCHES, LOADER_WORKERS = 3, 4  # workers-*: an epoch boundary every 3 steps
LAUNCH_BATCH = 16                     # launchbound-b; launchbound-4b uses 4x
LINK_BYTES, LINK_CHUNK, LINK_STREAMS = 1 << 30, 32 << 20, 4
COMPILE_WIDTH, COMPILE_BATCH, COMPILE_BLOCKS = 1024, 256, 8
GLOO_IN, GLOO_HIDDEN, GLOO_BATCH = 1024, 2048, 64
SLOW_RANK, SLOW_LOADER_S = 3, 0.200
TRANSFORM_S, LONG_EPOCH = 0.004, 10_000  # loader-*: CPU seconds per sample; batches per epoch (none ends)
AMP_BATCH, IGNORED_EVERY = 16, 4       # amp-scaler-*, masked-loss-*, cudnn-*: batch; masked-loss-*: 4th label -100
EVAL_EVERY, EVAL_BATCHES = 4, 8        # eval-every-4: every 4th step also evaluates 8 batches
CHECKPOINT_EVERY = 5                   # checkpoint-every-5: torch.save every 5th step
SHAPE_BASE, SHAPE_STEP = 160, 8        # cudnn-*: step i's images are (SHAPE_BASE + SHAPE_STEP * i) px square
SMALL_TENSORS, SMALL_SHAPE = 64, (32, 64)  # small-copies: a dict batch of 64 pageable 8 KB tensors
DISK_FILES = 64                        # disk-loader: sample files (3x224x224 fp32, 602 KB each), read from disk
METRICS_S = 0.015                      # host-metrics: CPU seconds of per-step metric work after the optimizer
LM_WIDTH, LM_SEQ, LM_BATCH, LM_VOCAB = 1024, 512, 8, 8192  # precision lm-*: the transformer encoder's shape
CONV_BATCH = 64                        # precision conv-*: ResNet-50's batch
STATS_BUSY_S, STATS_PAUSE_S = 0.003, 0.003  # gil-*: the background loop's pure-Python work, then its sleep


def run(variant: str, *, steps: int = 3, warmup: int = 10, cooldown: int = 1, profiler_range: bool = True,
        nvtx_backend: Optional[str] = None, seed: Optional[int] = 0) -> StepSchedule:
    import torch

    v = CAUSE_VARIANTS[variant]
    os.environ.update(dict(v.env))  # read when CUDA (and its caching allocator) starts, below
    if not torch.cuda.is_available():
        raise RuntimeError("the cause workloads need a CUDA device")
    dev = torch.device("cuda")
    if seed is not None:
        torch.manual_seed(seed)
    annotate, nvtx_desc = get_annotator(nvtx_backend)
    print(f"INFO workload=causes variant={variant} family={v.family} mode={v.mode} nvtx={nvtx_desc!r} "
          f"torch={torch.__version__}", file=sys.stderr)
    sched = StepSchedule(warmup, steps, cooldown, cuda=True, profiler_range=profiler_range)
    batch = FAMILIES[v.family](v.mode, sched, annotate, dev)
    sched.finish()
    print(sched.report(workload="causes", variant=variant, world_size=1, batch=batch), flush=True)
    return sched


def _resident_steps(model, optimizer, x, y, sched, annotate, loss_of=None, after=None) -> None:
    """The schedule's steps on one resident batch (``Step i`` ranges around _train_step, then ``after(i)``, the
    step's extra work, inside the range)."""
    for i in range(sched.total):
        sched.before_step(i)
        with annotate(f"Step {i}", color="blue"):
            _train_step(model, optimizer, x, y, annotate, loss_of)
            if after is not None:
                after(i)


def _train_step(model, optimizer, x, y, annotate, loss_of=None):
    """forward / backward / optimizer ranges of one classification step; returns the loss tensor.
    ``loss_of(logits, y)``: the loss (default cross-entropy), computed inside 'forward'."""
    import torch

    with annotate("forward", color="green"):
        loss = (loss_of or torch.nn.functional.cross_entropy)(model(x), y)
    with annotate("backward", color="green"):
        loss.backward()
    with annotate("optimizer", color="green"):
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return loss


def _resnet18(dev, batch: int = RESNET_BATCH, image: int = RESNET_IMAGE):
    """ResNet-18, Adam, one resident batch of random images."""
    import torch
    import torchvision

    model = torchvision.models.resnet18().to(dev).train()
    optimizer = torch.optim.Adam(model.parameters())
    x = torch.randn(batch, 3, image, image, device=dev)
    y = torch.randint(0, 1000, (batch,), device=dev)
    return model, optimizer, x, y


def _optimizer(mode, sched, annotate, dev) -> int:
    import torch

    from .scenarios import TINY_BATCH, TINY_WIDTH, _tiny_mlp

    model = _tiny_mlp(dev, blocks=OPT_BLOCKS)
    kind = {"fused": True} if mode == "fused" else {"foreach": False}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, **kind)
    x = torch.randn(TINY_BATCH, TINY_WIDTH, device=dev)
    y = torch.randint(0, 10, (TINY_BATCH,), device=dev)
    _resident_steps(model, optimizer, x, y, sched, annotate)
    return TINY_BATCH


def _accumulate(mode, sched, annotate, dev) -> int:
    """The optimizer-* MLP with gradient accumulation: each 'Step i' range is one micro-batch (forward, backward);
    every ACCUMULATE-th also runs AdamW (foreach=False for ``unfused``, fused=True for ``fused``) and zero_grad.
    ``anomaly``: fused AdamW every step, under autograd's anomaly detection."""
    import torch

    from .scenarios import TINY_BATCH, TINY_WIDTH, _tiny_mlp

    torch.autograd.set_detect_anomaly(mode == "anomaly")
    every = 1 if mode == "anomaly" else ACCUMULATE
    model = _tiny_mlp(dev, blocks=OPT_BLOCKS)
    kind = {"foreach": False} if mode == "unfused" else {"fused": True}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, **kind)
    x = torch.randn(TINY_BATCH, TINY_WIDTH, device=dev)
    y = torch.randint(0, 10, (TINY_BATCH,), device=dev)
    for i in range(sched.total):
        sched.before_step(i)
        with annotate(f"Step {i}", color="blue"):
            with annotate("forward", color="green"):
                loss = torch.nn.functional.cross_entropy(model(x), y) / every
            with annotate("backward", color="green"):
                loss.backward()
            if (i + 1) % every == 0:
                with annotate("optimizer", color="green"):
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
    return TINY_BATCH


def _copy(mode, sched, annotate, dev) -> int:
    import torch
    from torch import nn

    from .scenarios import TINY_WIDTH, _tiny_mlp

    pooled = COPY_SHAPE[1] * (COPY_SHAPE[2] // 16) * (COPY_SHAPE[3] // 16)
    model = nn.Sequential(nn.AvgPool2d(16), nn.Flatten(), nn.Linear(pooled, TINY_WIDTH), _tiny_mlp(dev)).to(dev)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
    images = [torch.randn(COPY_SHAPE).pin_memory() for _ in range(COPY_RING)]
    labels = [torch.randint(0, 10, (COPY_SHAPE[0],)).pin_memory() for _ in range(COPY_RING)]
    non_blocking = mode == "nonblocking"
    for i in range(sched.total):
        sched.before_step(i)
        with annotate(f"Step {i}", color="blue"):
            with annotate("copy batch", color="yellow"):
                x = images[i % COPY_RING].to(dev, non_blocking=non_blocking)
                y = labels[i % COPY_RING].to(dev, non_blocking=non_blocking)
            _train_step(model, optimizer, x, y, annotate)
    return COPY_SHAPE[0]


def _clip(mode, sched, annotate, dev) -> int:
    import torch

    model, optimizer, x, y = _resnet18(dev)
    norms: list[float] = []
    pending: list = []  # noitem: norms still on the GPU
    for i in range(sched.total):
        sched.before_step(i)
        with annotate(f"Step {i}", color="blue"):
            with annotate("forward", color="green"):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            with annotate("backward", color="green"):
                loss.backward()
            with annotate("clip grads", color="green"):
                norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            with annotate("log", color="yellow"):
                if mode == "item":
                    norms.append(norm.item())
                else:
                    pending.append(norm.detach())
                    if (i + 1) % LOG_EVERY == 0:
                        norms += torch.stack(pending).tolist()
                        pending.clear()
            with annotate("optimizer", color="green"):
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
    return RESNET_BATCH


class BankDataset:
    """``length`` samples cycling over a small bank of random 3xSxS images (cheap ``__getitem__``)."""

    def __init__(self, length: int, image: int, bank: int = 8) -> None:
        import torch

        self.length = length
        self.images = torch.randn(bank, 3, image, image)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        if not 0 <= index < self.length:
            raise IndexError(index)
        return self.images[index % len(self.images)].clone(), index % 10


class TransformedDataset(BankDataset):
    """:class:`BankDataset` whose every sample first costs ``seconds`` of CPU (a pure-Python transform)."""

    def __init__(self, length: int, image: int, seconds: float) -> None:
        super().__init__(length, image)
        self.seconds = seconds

    def __getitem__(self, index: int):
        until = time.perf_counter() + self.seconds
        while time.perf_counter() < until:
            pass
        return super().__getitem__(index)


def _loader(mode, sched, annotate, dev) -> int:
    from torch.utils.data import DataLoader

    workers = {"2workers": 2, "12workers": 12}[mode]

    def batches():
        return iter(DataLoader(TransformedDataset(LONG_EPOCH * RESNET_BATCH, RESNET_IMAGE, TRANSFORM_S),
                               batch_size=RESNET_BATCH, num_workers=workers, pin_memory=True, drop_last=True,
                               persistent_workers=True))
    return _loader_steps(batches, sched, annotate, dev)


def _loader_steps(make_batches, sched, annotate, dev) -> int:
    """ResNet-18 (10 classes) and Adam, then the batches (``make_batches()``, an iterator), then the steps:
    ``Batch i`` ⊃ get batch, copy batch (non_blocking), the step's ranges."""
    import torch
    import torchvision

    model = torchvision.models.resnet18(num_classes=10).to(dev).train()
    optimizer = torch.optim.Adam(model.parameters())
    batches = make_batches()
    for i in range(sched.total):
        sched.before_step(i)
        with annotate(f"Batch {i}", color="blue"):
            with annotate("get batch", color="red"):
                x, y = next(batches)
            with annotate("copy batch", color="yellow"):
                x = x.to(dev, non_blocking=True)
                y = y.to(dev, non_blocking=True)
            _train_step(model, optimizer, x, y, annotate)
    return RESNET_BATCH


def _workers(mode, sched, annotate, dev) -> int:
    from torch.utils.data import DataLoader

    def epochs():
        loader = DataLoader(BankDataset(EPOCH_BATCHES * RESNET_BATCH, RESNET_IMAGE), batch_size=RESNET_BATCH,
                            num_workers=LOADER_WORKERS, pin_memory=True, drop_last=True,
                            persistent_workers=mode == "persistent")
        while True:
            yield from loader

    return _loader_steps(epochs, sched, annotate, dev)


def _launchbound(mode, sched, annotate, dev) -> int:
    import torch

    from .scenarios import TINY_WIDTH, _tiny_mlp

    batch = LAUNCH_BATCH * (4 if mode == "4b" else 1)
    model = _tiny_mlp(dev)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
    x = torch.randn(batch, TINY_WIDTH, device=dev)
    y = torch.randint(0, 10, (batch,), device=dev)
    _resident_steps(model, optimizer, x, y, sched, annotate)
    return batch


def _hook(mode, sched, annotate, dev) -> int:
    import torch
    from torch import nn
    from torchvision.models.resnet import BasicBlock

    model, optimizer, x, y = _resnet18(dev)
    if mode == "sync":
        hooked = [m for m in model.modules() if isinstance(m, (nn.Conv2d, nn.BatchNorm2d, nn.Linear, BasicBlock))]
        for m in hooked:
            m.register_forward_hook(lambda *_: torch.cuda.synchronize())
        print(f"INFO hook-sync: {len(hooked)} forward hooks with torch.cuda.synchronize()", file=sys.stderr)
    _resident_steps(model, optimizer, x, y, sched, annotate)
    return RESNET_BATCH


def _host_cause(mode, sched, annotate, dev) -> int:
    import torch

    model, optimizer, x, y = _resnet18(dev)
    images = [x, torch.randn(RESNET_BATCH, 3, 256, 256, device=dev)]
    path = os.path.join(tempfile.gettempdir(), f"checkpoint_{os.getpid()}.pt")
    try:
        for i in range(sched.total):
            sched.before_step(i)
            with annotate(f"Step {i}", color="blue"):
                if mode == "checkpoint":
                    _train_step(model, optimizer, x, y, annotate)
                    with annotate("save checkpoint", color="yellow"):
                        torch.save({"step": i, "model": model.state_dict(), "optimizer": optimizer.state_dict()},
                                   path)
                else:  # empty-cache
                    _train_step(model, optimizer, images[i % 2], y, annotate)
                    with annotate("empty cache", color="yellow"):
                        torch.cuda.empty_cache()
    finally:
        if os.path.exists(path):
            os.remove(path)
    return RESNET_BATCH


def _compile(mode, sched, annotate, dev) -> int:
    import torch
    import torch._inductor.config as inductor_config
    from torch import nn

    inductor_config.compile_threads = 1  # compile in this process (no worker pool under nsys)
    layers = []
    for _ in range(COMPILE_BLOCKS):
        layers += [nn.Linear(COMPILE_WIDTH, COMPILE_WIDTH), nn.LayerNorm(COMPILE_WIDTH), nn.GELU()]
    model = nn.Sequential(*layers, nn.Linear(COMPILE_WIDTH, 10)).to(dev)
    if mode.startswith("recompile"):  # a new batch size every step; static: every size compiled again
        import torch._dynamo.config as dynamo_config

        dynamo_config.automatic_dynamic_shapes = mode == "recompile-dynamic"
        for limit in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit"):  # names across versions
            if hasattr(dynamo_config, limit):
                setattr(dynamo_config, limit, 1024)
    compiled = torch.compile(model, mode="reduce-overhead") if mode == "graphs" else torch.compile(model)
    optimizer = torch.optim.Adam(model.parameters())
    x = torch.randn(COMPILE_BATCH, COMPILE_WIDTH, device=dev)
    y = torch.randint(0, 10, (COMPILE_BATCH,), device=dev)
    for i in range(sched.total):
        sched.before_step(i)
        rows = COMPILE_BATCH - i % (COMPILE_BATCH // 2) if mode.startswith("recompile") else COMPILE_BATCH
        with annotate(f"Step {i}", color="blue"):
            _train_step(compiled, optimizer, x[:rows], y[:rows], annotate)
    return COMPILE_BATCH


def _link(mode, sched, annotate, dev) -> int:
    import torch

    chunks = LINK_BYTES // LINK_CHUNK
    host = torch.empty(chunks, LINK_CHUNK // 4, dtype=torch.float32).pin_memory()
    host.uniform_()
    device_buf = torch.empty(chunks, LINK_CHUNK // 4, dtype=torch.float32, device=dev)
    sums = torch.zeros(chunks, device=dev)
    streams = [torch.cuda.Stream(device=dev) for _ in range(LINK_STREAMS)]
    main = torch.cuda.current_stream(dev)
    for i in range(sched.total):
        sched.before_step(i)
        with annotate(f"Step {i}", color="blue"):
            with annotate("copy chunks", color="yellow"):
                for s in streams:
                    s.wait_stream(main)
                for k in range(chunks):
                    with torch.cuda.stream(streams[k % LINK_STREAMS]):
                        device_buf[k].copy_(host[k], non_blocking=True)
                        sums[k] = device_buf[k].sum()
                for s in streams:
                    main.wait_stream(s)
            with annotate("sync", color="red"):
                torch.cuda.synchronize()
    return 1


def _amp(mode, sched, annotate, dev) -> int:
    import torch

    model, _, x, y = _resnet18(dev, batch=AMP_BATCH)
    optimizer = torch.optim.Adam(model.parameters(), **({"fused": True} if mode == "fused" else {"foreach": True}))
    scaler = torch.amp.GradScaler("cuda")
    for i in range(sched.total):
        sched.before_step(i)
        with annotate(f"Step {i}", color="blue"):
            with annotate("forward", color="green"), torch.autocast("cuda", dtype=torch.float16):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            with annotate("backward", color="green"):
                scaler.scale(loss).backward()
            with annotate("optimizer", color="green"):
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad(set_to_none=True)
    return AMP_BATCH


def _masked(mode, sched, annotate, dev) -> int:
    import torch

    model, optimizer, x, y = _resnet18(dev, batch=AMP_BATCH)
    y = torch.where(torch.arange(AMP_BATCH, device=dev) % IGNORED_EVERY == 0, -100, y)

    def indexed(logits, y):  # the valid samples by boolean mask: a nonzero (and a host sync) per index
        valid = y != -100
        return torch.nn.functional.cross_entropy(logits[valid], y[valid])

    def ignoring(logits, y):
        return torch.nn.functional.cross_entropy(logits, y, ignore_index=-100)

    _resident_steps(model, optimizer, x, y, sched, annotate, indexed if mode == "index" else ignoring)
    return AMP_BATCH


def _eval(mode, sched, annotate, dev) -> int:
    import torch

    model, optimizer, x, y = _resnet18(dev)

    def evaluate(i: int) -> None:
        if i % EVAL_EVERY == EVAL_EVERY - 1:
            with annotate("evaluate", color="yellow"), torch.no_grad():
                model.eval()
                correct = sum(int((model(x).argmax(1) == y).sum().item()) for _ in range(EVAL_BATCHES))
                model.train()
            print(f"INFO step {i}: {correct} correct", file=sys.stderr)
    _resident_steps(model, optimizer, x, y, sched, annotate, after=evaluate)
    return RESNET_BATCH


def _checkpoint_every(mode, sched, annotate, dev) -> int:
    import torch

    model, optimizer, x, y = _resnet18(dev)
    path = os.path.join(tempfile.gettempdir(), f"checkpoint_{os.getpid()}.pt")

    def save(i: int) -> None:
        if i % CHECKPOINT_EVERY == CHECKPOINT_EVERY - 1:
            with annotate("save checkpoint", color="yellow"):
                torch.save({"step": i, "model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
    try:
        _resident_steps(model, optimizer, x, y, sched, annotate, after=save)
    finally:
        if os.path.exists(path):
            os.remove(path)
    return RESNET_BATCH


def _cudnn(mode, sched, annotate, dev) -> int:
    import torch

    torch.backends.cudnn.benchmark = mode == "benchmark"
    model, optimizer, _, y = _resnet18(dev, batch=AMP_BATCH)
    for i in range(sched.total):  # every step a new image size, as variable-resolution training has
        x = torch.randn(AMP_BATCH, 3, SHAPE_BASE + SHAPE_STEP * i, SHAPE_BASE + SHAPE_STEP * i, device=dev)
        sched.before_step(i)
        with annotate(f"Step {i}", color="blue"):
            _train_step(model, optimizer, x, y, annotate)
    return AMP_BATCH


class DiskDataset:
    """``DISK_FILES`` .npy samples written to a temporary folder once; each read evicts its file from the page
    cache first (posix_fadvise DONTNEED), so every sample comes from the disk, as a dataset larger than memory's."""

    def __init__(self, folder: str, image: int) -> None:
        import numpy as np

        self.paths = [os.path.join(folder, f"sample_{k}.npy") for k in range(DISK_FILES)]
        for k, path in enumerate(self.paths):
            np.save(path, np.random.default_rng(k).standard_normal((3, image, image), dtype=np.float32))

    def __len__(self) -> int:
        return LONG_EPOCH * RESNET_BATCH

    def __getitem__(self, index: int):
        import numpy as np
        import torch

        path = self.paths[index % len(self.paths)]
        with open(path, "rb") as f:
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            return torch.from_numpy(np.load(f)), index % 10


def _disk_loader(mode, sched, annotate, dev) -> int:
    from torch.utils.data import DataLoader

    with tempfile.TemporaryDirectory() as folder:
        dataset = DiskDataset(folder, RESNET_IMAGE)
        return _loader_steps(lambda: iter(DataLoader(dataset, batch_size=RESNET_BATCH, num_workers=0)),
                             sched, annotate, dev)


def _host_metrics(mode, sched, annotate, dev) -> int:
    def metrics(i: int) -> None:
        with annotate("metrics", color="yellow"):  # Python work on the host, no sync: the GPU runs dry
            until = time.perf_counter() + METRICS_S
            while time.perf_counter() < until:
                pass
    _resident_steps(*_resnet18(dev), sched, annotate, after=metrics)
    return RESNET_BATCH


def _small_copies(mode, sched, annotate, dev) -> int:
    import torch

    model, optimizer, x, y = _resnet18(dev)
    features = {f"feature_{k}": torch.randn(*SMALL_SHAPE) for k in range(SMALL_TENSORS)}  # pageable
    for i in range(sched.total):
        sched.before_step(i)
        with annotate(f"Step {i}", color="blue"):
            with annotate("copy batch", color="yellow"):
                on_gpu = {name: t.to(dev) for name, t in features.items()}
            with annotate("features", color="green"):
                torch.stack([t.mean() for t in on_gpu.values()]).sum()
            _train_step(model, optimizer, x, y, annotate)
    return RESNET_BATCH


def busy_python(stop) -> None:
    """Until ``stop`` (a threading or multiprocessing Event) is set: STATS_BUSY_S of pure-Python CPU work (it gives
    the GIL up only at the interpreter's switch interval), then STATS_PAUSE_S asleep (module level: a spawned
    process imports it)."""
    total = 0
    while not stop.is_set():
        until = time.perf_counter() + STATS_BUSY_S
        while time.perf_counter() < until:
            total += sum(i * i % 7 for i in range(200))
        stop.wait(STATS_PAUSE_S)


def _gil(mode, sched, annotate, dev) -> int:
    import multiprocessing
    import threading

    if mode == "thread":
        stop = threading.Event()
        worker = threading.Thread(target=busy_python, args=(stop,), name="stats", daemon=True)
    else:
        ctx = multiprocessing.get_context("spawn")
        stop = ctx.Event()
        worker = ctx.Process(target=busy_python, args=(stop,), name="stats", daemon=True)
    worker.start()
    try:
        _resident_steps(*_resnet18(dev), sched, annotate)
    finally:
        stop.set()
        worker.join()
    return RESNET_BATCH


def _precision(mode, sched, annotate, dev) -> int:
    """GPU-bound models in fp32 on a resident batch, by mode ``MODEL-PRECISION``: ``vit`` is the DDP article's
    ViT-L/32 (batch 32, SGD), ``lm`` a 6-layer transformer encoder over token embeddings (width ``LM_WIDTH``,
    sequence ``LM_SEQ``, batch ``LM_BATCH``, AdamW(fused=True), a vocabulary head), ``conv`` ResNet-50 (batch
    ``CONV_BATCH``, SGD). ``fp32``: PyTorch's defaults, where matmuls run in full fp32 on the FMA units
    (``torch.backends.cuda.matmul.allow_tf32`` is off; cuDNN's convolutions use TF32 already); ``conv-fp32`` also
    turns cuDNN's TF32 off, as a reproducibility setting does; ``tf32``: ``set_float32_matmul_precision("high")``
    (TF32 tensor cores for matmuls; cuDNN's default); ``bf16``: the fp32 defaults under bf16 autocast."""
    import contextlib

    import torch

    model_name, precision = mode.split("-")
    torch.backends.cudnn.allow_tf32 = not (model_name == "conv" and precision == "fp32")
    if precision == "tf32":
        torch.set_float32_matmul_precision("high")
    if model_name == "vit":
        from torchvision.models import vit_l_32

        model, batch = vit_l_32(weights=None).to(dev).train(), 32
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
        x, y = torch.randn(batch, 3, 224, 224, device=dev), torch.randint(0, 1000, (batch,), device=dev)
    elif model_name == "conv":
        import torchvision

        model, batch = torchvision.models.resnet50().to(dev).train(), CONV_BATCH
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
        x, y = torch.randn(batch, 3, 224, 224, device=dev), torch.randint(0, 1000, (batch,), device=dev)
    else:
        batch = LM_BATCH
        layer = torch.nn.TransformerEncoderLayer(LM_WIDTH, LM_WIDTH // 64, 4 * LM_WIDTH, batch_first=True)
        model = torch.nn.Sequential(torch.nn.Embedding(LM_VOCAB, LM_WIDTH), torch.nn.TransformerEncoder(layer, 6),
                                    torch.nn.Linear(LM_WIDTH, LM_VOCAB)).to(dev).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        x = torch.randint(0, LM_VOCAB, (batch, LM_SEQ), device=dev)
        y = torch.randint(0, LM_VOCAB, (batch, LM_SEQ), device=dev)
    print(f"INFO precision: model={model_name} precision={precision} "
          f"matmul.allow_tf32={torch.backends.cuda.matmul.allow_tf32} cudnn.allow_tf32={torch.backends.cudnn.allow_tf32}",
          file=sys.stderr)

    def loss_of(logits, target):
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), target.reshape(-1))

    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()
    with autocast:
        _resident_steps(model, optimizer, x, y, sched, annotate, loss_of)
    return batch


def _debug(mode, sched, annotate, dev) -> int:
    """ResNet-18 b32 on a resident batch; ``launch-blocking`` and ``no-caching`` set their variable through
    ``CauseVariant.env``, ``anomaly`` turns on autograd's anomaly detection, ``emit-nvtx`` runs the loop under
    ``torch.autograd.profiler.emit_nvtx()``, ``off`` is the plain loop."""
    import contextlib

    import torch

    torch.autograd.set_detect_anomaly(mode == "anomaly")
    print(f"INFO debug: mode={mode} CUDA_LAUNCH_BLOCKING={os.environ.get('CUDA_LAUNCH_BLOCKING')} "
          f"PYTORCH_NO_CUDA_MEMORY_CACHING={os.environ.get('PYTORCH_NO_CUDA_MEMORY_CACHING')} "
          f"anomaly={torch.is_anomaly_enabled()}", file=sys.stderr)
    per_op = torch.autograd.profiler.emit_nvtx() if mode == "emit-nvtx" else contextlib.nullcontext()
    with per_op:
        _resident_steps(*_resnet18(dev), sched, annotate)
    return RESNET_BATCH


FAMILIES = {"optimizer": _optimizer, "accumulate": _accumulate, "copy": _copy, "clip": _clip, "workers": _workers,
            "launchbound": _launchbound, "hook": _hook, "host-cause": _host_cause, "compile": _compile,
            "link": _link, "amp": _amp, "masked": _masked, "loader": _loader,
            "eval": _eval, "small-copies": _small_copies, "checkpoint-every": _checkpoint_every,
            "cudnn": _cudnn, "disk-loader": _disk_loader, "host-metrics": _host_metrics,
            "gil": _gil, "debug": _debug, "precision": _precision}


def run_gloo(variant: str, *, steps: int = 5, warmup: int = 15, cooldown: int = 1, profiler_range: bool = True,
             nvtx_backend: Optional[str] = None) -> StepSchedule:
    """One rank of the 8-rank DDP job (gloo backend, every rank on GPU 0); launch under torchrun."""
    from .ddp import apply_safe_env, dist_env

    apply_safe_env()
    rank, _, world_size = dist_env(True)
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    v = GLOO_VARIANTS[variant]
    if not torch.cuda.is_available():
        raise RuntimeError("the gloo job needs a CUDA device")
    torch.cuda.set_device(0)
    dev = torch.device("cuda", 0)
    dist.init_process_group("gloo")
    torch.manual_seed(rank)
    annotate, nvtx_desc = get_annotator(nvtx_backend)
    slow = v.mode == "slow" and rank == SLOW_RANK
    print(f"INFO workload=gloo variant={variant} rank={rank}/{world_size} slow_loader={slow} nvtx={nvtx_desc!r}",
          file=sys.stderr)
    model = nn.Sequential(nn.Linear(GLOO_IN, GLOO_HIDDEN), nn.ReLU(), nn.Linear(GLOO_HIDDEN, GLOO_HIDDEN), nn.ReLU(),
                          nn.Linear(GLOO_HIDDEN, 10)).to(dev)
    ddp_model = DDP(model, device_ids=[0])
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.01)
    sched = StepSchedule(warmup, steps, cooldown, cuda=True, profiler_range=profiler_range)
    for i in range(sched.total):
        sched.before_step(i)
        with annotate(f"Batch {i}", color="blue"):
            with annotate("get batch", color="red"):
                x = torch.randn(GLOO_BATCH, GLOO_IN)
                y = torch.randint(0, 10, (GLOO_BATCH,))
                if slow:  # CPU work in the loader (decoding, augmentation) on this rank only
                    until = time.perf_counter() + SLOW_LOADER_S
                    while time.perf_counter() < until:
                        pass
                x, y = x.to(dev), y.to(dev)
            _train_step(ddp_model, optimizer, x, y, annotate)
    sched.finish()
    print(sched.report(workload="gloo", variant=variant, rank=rank, world_size=world_size, batch=GLOO_BATCH),
          flush=True)
    dist.destroy_process_group()
    return sched
