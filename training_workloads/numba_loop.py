"""A Numba CUDA program (no torch): ``programs --variant numba-tinyops`` and ``numba-fused``.

``tinyops``: each iteration launches one ``@cuda.jit`` kernel (x = tanh(x * a + b), elementwise) ``ROUNDS`` times
on a ``SIZE``-element float32 device array: µs of GPU work per launch against Numba's dispatch from Python per
launch. ``fused``: the same ``ROUNDS`` rounds in one launch of a kernel that loops over them. No sync inside the
loop. The capture window is opened with ``cuProfilerStart`` (``numba.cuda.profile_start``).
NVTX: ``Step {i}`` ⊃ ``compute``.
"""

from __future__ import annotations

import math
import sys
from typing import Optional

from .annotate import get_annotator
from .schedule import StepSchedule

SIZE, ROUNDS, THREADS = 1 << 16, 48, 256


def run(mode: str, *, steps: int = 3, warmup: int = 10, cooldown: int = 1, profiler_range: bool = True,
        nvtx_backend: Optional[str] = None) -> StepSchedule:
    import numpy as np

    if not hasattr(np, "row_stack"):  # numba-cuda still registers np.row_stack, which NumPy 2.4 removed
        np.row_stack = np.vstack
    import numba
    from numba import cuda

    annotate, nvtx_desc = get_annotator(nvtx_backend)
    print(f"INFO workload=programs variant=numba-{mode} numba={numba.__version__} nvtx={nvtx_desc!r}", file=sys.stderr)

    @cuda.jit
    def round_once(x, a, b):
        i = cuda.grid(1)
        if i < x.size:
            x[i] = math.tanh(x[i] * a + b)

    @cuda.jit
    def all_rounds(x, a, b, rounds):
        i = cuda.grid(1)
        if i < x.size:
            v = x[i]
            for k in range(rounds):
                v = math.tanh(v * a + b * k)
            x[i] = v

    x = cuda.to_device(np.random.default_rng(0).standard_normal(SIZE).astype(np.float32))
    blocks = (SIZE + THREADS - 1) // THREADS
    sched = StepSchedule(warmup, steps, cooldown, cuda=True, profiler_range=profiler_range, sync=cuda.synchronize,
                         profiler=(cuda.profile_start, cuda.profile_stop))
    for i in range(sched.total):
        sched.before_step(i)
        with annotate(f"Step {i}", color="blue"):
            with annotate("compute", color="green"):
                if mode == "fused":
                    all_rounds[blocks, THREADS](x, 0.999, 0.001, ROUNDS)
                else:
                    for k in range(ROUNDS):
                        round_once[blocks, THREADS](x, 0.999, 0.001 * k)
    sched.finish()
    print(sched.report(workload="programs", variant=f"numba-{mode}", world_size=1), flush=True)
    return sched
