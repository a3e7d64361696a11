"""CuPy programs (no torch): ``programs --variant cupy-pageable``, ``cupy-managed``, ``cupy-tinyops``, ``cupy-fused``.

* ``pageable``: each iteration copies a 64 MiB pageable NumPy array to the GPU with
  ``ndarray.set()`` (``cupy.asarray`` would stage through CuPy's own pinned buffer), multiplies it
  by a 2048 × 2048 matrix (cuBLAS), reduces it, synchronizes and reads the sum back.
* ``managed``: a 256 MiB array in CUDA managed memory (``cupy.cuda.malloc_managed``), written by the
  host through a NumPy view, then read and written by a kernel, then read by the host every
  iteration, so its pages migrate both ways (unified-memory HtoD / DtoH transfers). Small on purpose:
  never more managed memory than the card has free (device README).
* ``tinyops`` → ``fused``: each iteration applies ``ROUNDS`` rounds of multiply, add and tanh to a
  ``TINY``-element float32 array, one kernel per op (72) (µs of GPU work each, more of host dispatch)
  → the same chain as one kernel with ``@cupy.fuse()``. No sync inside the loop.

All open the capture window with ``cudaProfilerStart`` (``cupy.cuda.runtime.profilerStart``).
NVTX: ``Step {i}`` ⊃ ``copy in`` or ``host writes``, ``compute``, ``sync``, ``host reads``.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Optional

from .annotate import get_annotator
from .schedule import StepSchedule

PAGEABLE_BYTES, WIDTH = 64 << 20, 2048
MANAGED_BYTES = 256 << 20
HOST_TOUCH = 16  # managed: the host writes every HOST_TOUCH-th 4 KiB page ... and reads them back
TINY, ROUNDS = 1 << 16, 24  # tinyops/fused: array elements; rounds of (multiply, add, tanh) per iteration


def run(mode: str, *, steps: int = 3, warmup: int = 10, cooldown: int = 1, profiler_range: bool = True,
        nvtx_backend: Optional[str] = None) -> StepSchedule:
    import cupy as cp
    import numpy as np

    annotate, nvtx_desc = get_annotator(nvtx_backend)
    print(f"INFO workload=programs variant=cupy-{mode} cupy={cp.__version__} nvtx={nvtx_desc!r}", file=sys.stderr)
    device = cp.cuda.Device(0)
    sched = StepSchedule(warmup, steps, cooldown, cuda=True, profiler_range=profiler_range,
                         sync=device.synchronize,
                         profiler=(cp.cuda.runtime.profilerStart, cp.cuda.runtime.profilerStop))
    if mode == "pageable":
        _pageable(sched, annotate, cp, np)
    elif mode == "managed":
        _managed(sched, annotate, cp, np)
    else:  # tinyops, fused, tinyops-nopool (the memory pool off: an allocation and a free per array)
        if mode == "tinyops-nopool":
            cp.cuda.set_allocator(None)
        _chain(mode == "fused", sched, annotate, cp)
    sched.finish()
    print(sched.report(workload="programs", variant=f"cupy-{mode}", world_size=1), flush=True)
    return sched


def _pageable(sched, annotate, cp, np) -> None:
    n = PAGEABLE_BYTES // 4
    rng = np.random.default_rng(0)
    host = [rng.standard_normal(n, dtype=np.float32) for _ in range(2)]
    data = cp.empty(n, dtype=cp.float32)
    weight = cp.random.standard_normal((WIDTH, WIDTH), dtype=cp.float32) / WIDTH
    sums = []
    for i in range(sched.total):
        sched.before_step(i)
        with annotate(f"Step {i}", color="blue"):
            with annotate("copy in", color="yellow"):
                data.set(host[i % 2])
            with annotate("compute", color="green"):
                total = cp.tanh(data.reshape(-1, WIDTH) @ weight).sum()
            with annotate("sync", color="red"):
                cp.cuda.Device(0).synchronize()
                sums.append(float(total))


def _managed(sched, annotate, cp, np) -> None:
    n = MANAGED_BYTES // 4
    mem = cp.cuda.malloc_managed(MANAGED_BYTES)
    data = cp.ndarray((n,), dtype=cp.float32, memptr=mem)
    host = np.frombuffer((ctypes.c_char * MANAGED_BYTES).from_address(mem.ptr), dtype=np.float32)
    pages = host.reshape(-1, 1024)[::HOST_TOUCH]  # one float row per 4 KiB page, every HOST_TOUCH-th page
    data.fill(1.0)
    cp.cuda.Device(0).synchronize()
    checks = []
    for i in range(sched.total):
        sched.before_step(i)
        with annotate(f"Step {i}", color="blue"):
            with annotate("host writes", color="yellow"):
                pages[:, 0] = float(i)
            with annotate("compute", color="green"):
                cp.multiply(data, 1.0001, out=data)
                total = data.sum()
            with annotate("sync", color="red"):
                cp.cuda.Device(0).synchronize()
            with annotate("host reads", color="yellow"):
                checks.append(float(pages[:, 1].sum()) + float(total))


def _chain(fused: bool, sched, annotate, cp) -> None:
    def chain(x):
        for k in range(ROUNDS):
            x = cp.tanh(x * 0.999 + 0.001 * k)  # a multiply, an add and a tanh kernel (all one kernel fused)
        return x

    step = cp.fuse()(chain) if fused else chain
    x = cp.random.standard_normal(TINY, dtype=cp.float32)
    for i in range(sched.total):
        sched.before_step(i)
        with annotate(f"Step {i}", color="blue"):
            with annotate("compute", color="green"):
                x = step(x)
