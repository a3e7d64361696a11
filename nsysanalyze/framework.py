"""What produced the trace — so that fixes are written in the program's own language (pure function).

Clues, strongest first: kernel names in the export's string table (``at::native::`` → PyTorch,
``tensorflow::``/``Eigen::`` → TensorFlow, ``__omp_offloading_``/``nvkernel_`` → OpenMP/OpenACC
offload, TensorRT's ``trt_``/``myelin``/``nvinfer``, XLA's ``*_fusion`` kernels → JAX/XLA), NVTX
domains (``NCCL`` says a collective library, not a language), the profiled processes' names and
commands (``python``, ``torchrun``, ``mpirun``/``srun``). MPI is reported beside the framework
(``mpi``), since it combines with any of them.

Frameworks: ``pytorch``, ``tensorflow``, ``jax``, ``tensorrt``, ``openmp`` (OpenMP/OpenACC target
offload), ``python`` (a Python program on CUDA without those: CuPy, Numba, …), ``cuda`` (a native
CUDA C/C++/Fortran program), ``unknown`` (no GPU work, not Python). Rules give a code snippet only
for a framework they have one for; otherwise the fix is plain words.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

KERNEL_CLUES = [  # (framework, SQL LIKE pattern on the string table; '_' matches any one character)
    ("pytorch", "%at::native::%"),
    ("pytorch", "%at_cuda_detail%"),
    ("tensorflow", "%tensorflow::%"),
    ("tensorflow", "%Eigen::TensorEvaluator%"),
    ("tensorrt", "%myelin%"),
    ("tensorrt", "trt_%"),
    ("tensorrt", "%nvinfer1%"),
    ("openmp", "%__omp_offloading_%"),
    ("openmp", "nvkernel_%"),
    ("jax", "%xla::%"),
    ("jax", "loop_%_fusion%"),    # XLA:GPU kernel names (loop_add_fusion, input_reduce_fusion)
    ("jax", "input_%_fusion%"),
]
PYTHON = re.compile(r"(^|[/\s])(python[\d.]*|ipython|jupyter\S*|torchrun|accelerate|deepspeed)(\s|$)", re.IGNORECASE)
MPI = re.compile(r"(^|[/\s])(mpirun|mpiexec|srun|orterun|prterun|jsrun|aprun)(\s|$)", re.IGNORECASE)


@dataclass
class Framework:
    """The program behind a trace: ``name`` (see module doc), ``mpi`` and the clues that decided it."""

    name: str
    mpi: bool = False
    clues: list[str] = field(default_factory=list)

    @property
    def is_python(self) -> bool:
        return self.name in ("pytorch", "tensorflow", "jax", "python")


def detect(has_string: Callable[[str], bool], commands: list[str], gpu_work: bool) -> Framework:
    """Framework of the profiled program: ``has_string(pattern)`` asks the export's strings (SQL LIKE),
    ``commands`` are the profiled processes' names and command lines, ``gpu_work`` whether it ran any."""
    clues, found = [], None
    for name, pattern in KERNEL_CLUES:
        if has_string(pattern):
            found = name
            clues.append(f"strings like {pattern!r}")
            break
    python = [c for c in commands if PYTHON.search(c)]
    mpi = any(MPI.search(c) for c in commands)
    if python:
        clues.append(f"python process {python[0]!r}")
    if mpi:
        clues.append("MPI launcher")
    if found is None:
        found = "python" if python else "cuda" if gpu_work else "unknown"
    return Framework(found, mpi, clues)
