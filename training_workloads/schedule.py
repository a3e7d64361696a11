"""Warm-up / profiled / cool-down step schedule shared by both workloads.

As in the articles: at step ``warmup`` synchronize, start the clock and call
``torch.cuda.profiler.start()`` (``cudaProfilerStart``, which opens an
``nsys profile --capture-range=cudaProfilerApi`` window); at step ``warmup + steps``
synchronize, call ``profiler.stop()`` and stop the clock; then ``cooldown`` more steps.
Without nsys attached the profiler calls are no-ops, so the same run measures the
unprofiled throughput.

The second half of the warm-up (steps ``warmup - warmup//2`` .. ``warmup - 1``) is timed too
(``pre_steps_per_s``): under ``nsys --capture-range=cudaProfilerApi`` those steps run before
collection starts, which gives a near-unprofiled rate from the profiled process itself.
"""

from __future__ import annotations

import time
from typing import Callable, Optional


class StepSchedule:
    def __init__(self, warmup: int, steps: int, cooldown: int = 1, *,
                 cuda: bool = True, profiler_range: bool = True,
                 sync: Optional[Callable[[], None]] = None,
                 profiler: Optional[tuple[Callable[[], None], Callable[[], None]]] = None) -> None:
        """``sync`` and ``profiler`` (start, stop) replace torch's device synchronize and
        ``torch.cuda.profiler`` for programs without torch (JAX, CuPy)."""
        if warmup < 0 or steps < 1 or cooldown < 0:
            raise ValueError("need warmup >= 0, steps >= 1, cooldown >= 0")
        self.warmup = warmup
        self.steps = steps
        self.cooldown = cooldown
        self.cuda = cuda
        self.profiler_range = profiler_range and cuda
        self.start_time: Optional[float] = None
        self.end_time: Optional[float] = None
        self._profiling = False
        self.pre_steps = warmup // 2
        self.pre_start: Optional[float] = None
        self._sync_fn = sync
        self._profiler = profiler

    @property
    def total(self) -> int:
        return self.warmup + self.steps + self.cooldown

    def _sync(self) -> None:
        if self._sync_fn is not None:
            self._sync_fn()
        elif self.cuda:
            import torch

            torch.cuda.synchronize()

    def _start(self) -> None:
        self._sync()
        self.start_time = time.perf_counter()
        if self.profiler_range:
            if self._profiler is not None:
                self._profiler[0]()
            else:
                import torch

                torch.cuda.profiler.start()
            self._profiling = True

    def _stop(self) -> None:
        self._sync()
        if self._profiling:
            if self._profiler is not None:
                self._profiler[1]()
            else:
                import torch

                torch.cuda.profiler.stop()
            self._profiling = False
        self.end_time = time.perf_counter()

    def before_step(self, i: int) -> None:
        """Call at the top of loop iteration ``i`` (before its ``Batch i`` range opens)."""
        if self.pre_steps and i == self.warmup - self.pre_steps:
            self._sync()
            self.pre_start = time.perf_counter()
        if i == self.warmup:
            self._start()
        elif i == self.warmup + self.steps:
            self._stop()

    def finish(self) -> None:
        """Call after the loop; closes the window when there was no cool-down step."""
        if self.start_time is not None and self.end_time is None:
            self._stop()

    @property
    def elapsed(self) -> float:
        if self.start_time is None or self.end_time is None:
            raise RuntimeError("the measured window did not complete")
        return self.end_time - self.start_time

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.elapsed

    @property
    def pre_steps_per_s(self) -> Optional[float]:
        if self.pre_start is None or self.start_time is None:
            return None
        return self.pre_steps / (self.start_time - self.pre_start)

    def report(self, **fields: object) -> str:
        parts = [f"{k}={v}" for k, v in fields.items()]
        parts += [
            f"steps={self.steps}",
            f"seconds={self.elapsed:.4f}",
            f"steps_per_s={self.steps_per_s:.3f}",
            f"step_ms={1000.0 * self.elapsed / self.steps:.2f}",
            f"profiler_range={int(self.profiler_range)}",
        ]
        if self.pre_steps_per_s is not None:
            parts.append(f"pre_steps={self.pre_steps}")
            parts.append(f"pre_steps_per_s={self.pre_steps_per_s:.3f}")
        return "THROUGHPUT " + " ".join(parts)
