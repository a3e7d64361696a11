"""JAX training loops (no torch): ``programs --variant jax-pageable``, ``jax-eager`` and ``jax-jit``.

``pageable``: an MLP (12288 → 2048 → 2048 → 10, SGD) trained with one jitted step; every step takes a fresh
pageable NumPy batch (256 × 12288 fp32, 12.6 MB, copied from a bank of 4 as a loader would hand it
over), ``jax.device_put`` copies it to the GPU, and the loss is read back as a Python float (a host
sync per step). ``XLA_FLAGS=--xla_gpu_enable_command_buffer=`` makes XLA launch kernels one by one
instead of as command buffers, and preallocation is off. The capture window is opened with
``cuProfilerStart`` (CUDA driver, ``cuda_profiler``). NVTX: ``Step {i}`` ⊃ ``get batch``,
``copy batch``, ``train step``, ``log loss``.

``eager`` → ``jit`` (and ``callback`` → ``jit``): a small MLP (``SMALL_LAYERS`` x ``SMALL_WIDTH``, batch ``SMALL_BATCH``) trained on one
resident batch; ``eager`` runs the training step op by op (each primitive dispatched from Python, a few
kernels per op), ``jit`` compiles the same step with ``jax.jit``, ``callback`` is ``jit`` with a
``jax.debug.callback`` inside the step that logs the loss on the host (``CALLBACK_S`` of Python work, as a
logging hook left in a training step). ``highest`` → ``default``: a wide MLP (``WIDE_LAYERS`` x ``WIDE_WIDTH``,
batch ``WIDE_BATCH``) under ``jax.jit`` with ``jax_default_matmul_precision="highest"`` (full fp32 matmuls) →
JAX's default precision. The loss stays on the GPU (read once at the end). NVTX: ``Step {i}`` ⊃
``train step``.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Optional

from .annotate import get_annotator
from .cuda_profiler import driver_profiler
from .schedule import StepSchedule

BATCH, FEATURES, HIDDEN, CLASSES, BANK = 256, 12288, 2048, 10, 4
SMALL_BATCH, SMALL_WIDTH, SMALL_LAYERS = 64, 512, 6
WIDE_BATCH, WIDE_WIDTH, WIDE_LAYERS = 2048, 4096, 4  # highest/default: a GPU-bound MLP (matmul precision)
CALLBACK_S = 0.001  # callback: Python work of the host callback per step (formatting and keeping a log line)


def run(mode: str = "pageable", *, steps: int = 3, warmup: int = 10, cooldown: int = 1, profiler_range: bool = True,
        nvtx_backend: Optional[str] = None) -> StepSchedule:
    os.environ.setdefault("XLA_FLAGS", "--xla_gpu_enable_command_buffer=")
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import jax
    import jax.numpy as jnp

    annotate, nvtx_desc = get_annotator(nvtx_backend)
    print(f"INFO workload=programs variant=jax-{mode} jax={jax.__version__} devices={jax.devices()} "
          f"nvtx={nvtx_desc!r}", file=sys.stderr)
    if mode == "highest":
        jax.config.update("jax_default_matmul_precision", "highest")
    small, wide = mode != "pageable", mode in ("highest", "default")
    if wide:
        sizes = [WIDE_WIDTH] * WIDE_LAYERS + [CLASSES]
    else:
        sizes = [SMALL_WIDTH] * SMALL_LAYERS + [CLASSES] if small else [FEATURES, HIDDEN, HIDDEN, CLASSES]
    keys = jax.random.split(jax.random.PRNGKey(0), len(sizes) - 1)
    params = [(jax.random.normal(k, (a, b), jnp.float32) * (2.0 / a) ** 0.5, jnp.zeros(b, jnp.float32))
              for k, a, b in zip(keys, sizes[:-1], sizes[1:])]

    def loss_fn(p, x, y):
        h = x
        for w, b in p[:-1]:
            h = jax.nn.relu(h @ w + b)
        logits = h @ p[-1][0] + p[-1][1]
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))

    logged = []

    def log_loss(loss) -> None:  # runs on the host, in the middle of the step
        until = time.perf_counter() + CALLBACK_S
        while time.perf_counter() < until:
            line = f"loss {float(loss):.6f}"
        logged.append(line)

    def train_step(p, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(p, x, y)
        if mode == "callback":
            jax.debug.callback(log_loss, loss)
        return jax.tree_util.tree_map(lambda a, g: a - 0.01 * g, p, grads), loss

    if mode != "eager":
        train_step = jax.jit(train_step)
    state = {"params": params}
    sched = StepSchedule(warmup, steps, cooldown, cuda=True, profiler_range=profiler_range,
                         sync=lambda: jax.block_until_ready(state["params"]),
                         profiler=driver_profiler() if profiler_range else None)
    if small:
        _resident(sched, annotate, train_step, state, jax, jnp, *((WIDE_BATCH, WIDE_WIDTH) if wide else
                                                                   (SMALL_BATCH, SMALL_WIDTH)))
    else:
        _pageable(sched, annotate, train_step, state, jax)
    sched.finish()
    print(sched.report(workload="programs", variant=f"jax-{mode}", world_size=1,
                       batch=WIDE_BATCH if wide else SMALL_BATCH if small else BATCH), flush=True)
    return sched


def _resident(sched, annotate, train_step, state, jax, jnp, batch: int, width: int) -> None:
    x = jax.random.normal(jax.random.PRNGKey(1), (batch, width), jnp.float32)
    y = jax.random.randint(jax.random.PRNGKey(2), (batch,), 0, CLASSES)
    losses = []
    for i in range(sched.total):
        sched.before_step(i)
        with annotate(f"Step {i}", color="blue"):
            with annotate("train step", color="green"):
                state["params"], loss = train_step(state["params"], x, y)
                losses.append(loss)  # kept on the GPU
    jax.block_until_ready(losses)


def _pageable(sched, annotate, train_step, state, jax) -> None:
    import numpy as np

    rng = np.random.default_rng(0)
    bank = [rng.standard_normal((BATCH, FEATURES), dtype=np.float32) for _ in range(BANK)]
    labels = [rng.integers(0, CLASSES, BATCH).astype(np.int32) for _ in range(BANK)]
    losses = []
    for i in range(sched.total):
        sched.before_step(i)
        with annotate(f"Step {i}", color="blue"):
            with annotate("get batch", color="red"):
                x_host = bank[i % BANK].copy()  # a fresh pageable buffer, as a loader hands it over
                y_host = labels[i % BANK].copy()
            with annotate("copy batch", color="yellow"):
                x, y = jax.device_put(x_host), jax.device_put(y_host)
            with annotate("train step", color="green"):
                state["params"], loss = train_step(state["params"], x, y)
            with annotate("log loss", color="yellow"):
                losses.append(float(loss))
