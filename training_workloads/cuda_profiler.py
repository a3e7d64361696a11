"""``cuProfilerStart``/``cuProfilerStop`` through the CUDA driver (``libcuda.so.1``, ctypes), for
programs without torch: opens and closes an ``nsys --capture-range=cudaProfilerApi`` window on the
primary context of device 0 (the one JAX and CuPy use)."""

from __future__ import annotations

import ctypes
import sys
from typing import Callable


def _check(name: str, rc: int) -> None:
    if rc != 0:
        print(f"WARNING: {name} returned CUDA driver error {rc}", file=sys.stderr)


def driver_profiler(device: int = 0) -> tuple[Callable[[], None], Callable[[], None]]:
    """(start, stop) callables; each pushes the device's primary context around the call."""
    cuda = ctypes.CDLL("libcuda.so.1")
    _check("cuInit", cuda.cuInit(0))
    dev = ctypes.c_int()
    _check("cuDeviceGet", cuda.cuDeviceGet(ctypes.byref(dev), device))
    ctx = ctypes.c_void_p()
    _check("cuDevicePrimaryCtxRetain", cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))

    def call(name: str) -> None:
        _check("cuCtxPushCurrent", cuda.cuCtxPushCurrent_v2(ctx))
        _check(name, getattr(cuda, name)())
        popped = ctypes.c_void_p()
        _check("cuCtxPopCurrent", cuda.cuCtxPopCurrent_v2(ctypes.byref(popped)))

    return (lambda: call("cuProfilerStart")), (lambda: call("cuProfilerStop"))
