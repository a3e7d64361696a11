"""An MPI program with host-staged all-reduces (mpi4py + CuPy, no torch): ``programs --variant
mpi-hoststaged`` under ``mpirun -np 2`` (both ranks on GPU 0).

Each step: a 4096 × 4096 fp32 matmul on the GPU, its 64 MiB result copied to a pageable NumPy array,
``MPI.Allreduce`` on the host, the sum copied back. Rank ``SLOW_RANK`` does ``SLOW_HOST_S`` of CPU work
before the all-reduce, so the other rank waits inside ``MPI_Allreduce``. Capture window:
``cudaProfilerStart`` (``cupy.cuda.runtime.profilerStart``). NVTX: ``Step {i}`` ⊃ ``compute``,
``copy to host``, ``host work`` (slow rank), ``allreduce``, ``copy to device``.
"""

from __future__ import annotations

import sys
import time
from typing import Optional

from .annotate import get_annotator
from .schedule import StepSchedule

WIDTH = 4096
SLOW_RANK, SLOW_HOST_S = 1, 0.050


def run(*, steps: int = 3, warmup: int = 10, cooldown: int = 1, profiler_range: bool = True,
        nvtx_backend: Optional[str] = None) -> StepSchedule:
    import cupy as cp
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    device = cp.cuda.Device(0)
    device.use()
    annotate, nvtx_desc = get_annotator(nvtx_backend)
    print(f"INFO workload=programs variant=mpi-hoststaged rank={rank}/{comm.Get_size()} "
          f"mpi={MPI.Get_library_version().split(',')[0]!r} nvtx={nvtx_desc!r}", file=sys.stderr)
    x = cp.random.standard_normal((WIDTH, WIDTH), dtype=cp.float32)
    w = cp.random.standard_normal((WIDTH, WIDTH), dtype=cp.float32) / WIDTH
    host = np.empty(WIDTH * WIDTH, dtype=np.float32)
    summed = np.empty_like(host)
    sched = StepSchedule(warmup, steps, cooldown, cuda=True, profiler_range=profiler_range, sync=device.synchronize,
                         profiler=(cp.cuda.runtime.profilerStart, cp.cuda.runtime.profilerStop))
    for i in range(sched.total):
        sched.before_step(i)
        with annotate(f"Step {i}", color="blue"):
            with annotate("compute", color="green"):
                g = cp.tanh(x @ w)
            with annotate("copy to host", color="yellow"):
                g.ravel().get(out=host)
            if rank == SLOW_RANK:
                with annotate("host work", color="red"):
                    until = time.perf_counter() + SLOW_HOST_S
                    while time.perf_counter() < until:
                        pass
            with annotate("allreduce", color="red"):
                comm.Allreduce(host, summed, op=MPI.SUM)
            with annotate("copy to device", color="yellow"):
                x.ravel().set(summed / comm.Get_size())
    sched.finish()
    print(sched.report(workload="programs", variant="mpi-hoststaged", rank=rank, world_size=comm.Get_size()),
          flush=True)
    return sched
