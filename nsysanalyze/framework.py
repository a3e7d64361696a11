"""What produced the trace — so that fixes are written in the program's own language (pure function).

Clues, strongest first:

1. kernel names in the export's string table (``at::native::`` → PyTorch, ``tensorflow::``/``Eigen::``
   → TensorFlow, ``__omp_offloading_``/``nvkernel_`` → OpenMP/OpenACC offload, TensorRT's
   ``trt_``/``myelin``/``nvinfer``, XLA's ``*_fusion`` kernels → JAX/XLA, ``cupy_*`` → CuPy, Numba's
   ``cudapy`` mangling or numba-cuda's ``[abi:v1,...]`` tag, Julia's ``ptxcall_*``);
2. NVTX domains (``TensorRT``, ``pyprof``; ``NCCL`` and ``CCCL`` name a library, not a language;
   an ``MPI`` domain, like nsys' MPI trace tables, says MPI);
3. library paths in the string table (OS-runtime callchains and loaded modules: ``libtorch``,
   ``jaxlib``, ``libtensorflow``, ``cupy/_core``, ``numba/``, ``libjulia``, ``libmpi``);
4. the profiled processes' names and commands and their threads' names (``python``, ``torchrun``,
   PyTorch's ``pt_autograd_*`` threads, JAX's ``XlaLauncher``/``py_xla_*`` threads, ``julia``; ``mpirun``/``srun``), then CPython's own modules in
   the string table (``libpython3.*``, ``*.cpython-3*.so``): a Python program whose process name is
   missing is still Python.

MPI is reported beside the framework (``mpi``), since it combines with any of them.

Frameworks: ``pytorch``, ``tensorflow``, ``jax``, ``cupy``, ``numba``, ``tensorrt``, ``openmp``
(OpenMP/OpenACC target offload), ``julia``, ``python`` (a Python program on CUDA without those),
``cuda`` (a native CUDA C/C++/Fortran program), ``unknown`` (no GPU work, not Python). Rules give a
code snippet only for a framework they have one for; otherwise the fix is plain words.
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
    ("jax", "gemm_fusion_dot%"),  # XLA:GPU's cuBLAS/Triton GEMM fusions
    ("cupy", "cupy_%"),           # CuPy's elementwise/reduction kernels (cupy_multiply__float64_...)
    ("numba", "%cudapy%"),        # Numba's kernel mangling (_ZN6cudapy8__main__...)
    ("numba", "%[abi:v_,%"),      # numba-cuda's ABI tag on demangled kernels (round_once[abi:v1,cw51c...](Array<...>))
    ("julia", "ptxcall_%"),       # CUDA.jl kernels
]
NVTX_DOMAIN_CLUES = {"TensorRT": "tensorrt", "myelin-exec": "tensorrt", "pyprof": "pytorch"}
LIBRARY_CLUES = [  # (framework, SQL LIKE pattern): loaded modules named in the string table
    ("pytorch", "%/libtorch_cuda%"),
    ("pytorch", "%/torch/_C%"),
    ("jax", "%/jaxlib/%"),
    ("tensorflow", "%/libtensorflow%"),
    ("cupy", "%/cupy/_core/%"),
    ("numba", "%/numba/%"),
    ("julia", "%/libjulia%"),
]
CPYTHON_CLUES = ["%/libpython3%", "%.cpython-3%.so%"]  # CPython's own modules
MPI_LIBRARY_CLUES = ["%/libmpi.so%", "%/libmpi_%", "%/libmpich%"]
PYTHON = re.compile(r"(^|[/\s])(python[\d.]*|ipython|jupyter\S*|torchrun|accelerate|deepspeed)(\s|$)", re.IGNORECASE)
PYTORCH_THREAD = re.compile(r"^pt_(autograd|data|main)", re.IGNORECASE)  # pt_autograd_0, pt_data_pin
XLA_THREAD = re.compile(r"^(XlaLauncher|py_xla_)")  # JAX's XLA runtime threads (XlaLauncher:#global=0..., py_xla_callback)
JULIA = re.compile(r"(^|[/\s])julia(\s|$)", re.IGNORECASE)
MPI = re.compile(r"(^|[/\s])(mpirun|mpiexec|srun|orterun|prterun|jsrun|aprun)(\s|$)", re.IGNORECASE)
MPI_DOMAIN = re.compile(r"^MPI\b", re.IGNORECASE)
# every string pattern detect() may ask about (the caller can look them all up in one scan)
STRING_PATTERNS = [p for _, p in KERNEL_CLUES + LIBRARY_CLUES] + CPYTHON_CLUES + MPI_LIBRARY_CLUES
PYTHON_FRAMEWORKS = ("pytorch", "tensorflow", "jax", "cupy", "numba", "python")


@dataclass
class Framework:
    """The program behind a trace: ``name`` (see module doc), ``mpi`` and the clues that decided it."""

    name: str
    mpi: bool = False
    clues: list[str] = field(default_factory=list)

    @property
    def is_python(self) -> bool:
        return self.name in PYTHON_FRAMEWORKS


def _first(has_string: Callable[[str], bool], clues: list[tuple[str, str]], what: str) -> tuple[str, str] | None:
    """(framework, clue text) of the first clue whose pattern matches a string of the export."""
    return next(((name, f"{what} like {pattern!r}") for name, pattern in clues if has_string(pattern)), None)


def detect(has_string: Callable[[str], bool], commands: list[str], gpu_work: bool,
           threads: list[str] = (), domains: list[str] = (), mpi_traced: bool = False) -> Framework:
    """Framework of the profiled program: ``has_string(pattern)`` asks the export's strings (SQL LIKE),
    ``commands`` are the profiled processes' names and command lines, ``threads`` their threads' names,
    ``domains`` the NVTX domains they used, ``gpu_work`` whether they ran any, ``mpi_traced`` whether
    the export holds nsys' MPI trace tables (``--trace=mpi``)."""
    found = _first(has_string, KERNEL_CLUES, "strings")
    if found is None:
        found = next(((NVTX_DOMAIN_CLUES[d], f"NVTX domain {d!r}") for d in domains if d in NVTX_DOMAIN_CLUES), None)
    if found is None:
        found = _first(has_string, LIBRARY_CLUES, "library")
    clues = [found[1]] if found else []
    python = [c for c in commands if PYTHON.search(c)] or [t for t in threads if PYTHON.search(t)]
    if python:
        clues.append(f"python process {python[0]!r}")
    pytorch_threads = [t for t in threads if PYTORCH_THREAD.match(t)]
    xla_threads = [t for t in threads if XLA_THREAD.match(t)]
    if found is None and (pytorch_threads or xla_threads):
        found = (("pytorch", f"PyTorch thread {pytorch_threads[0]!r}") if pytorch_threads
                 else ("jax", f"XLA thread {xla_threads[0]!r}"))
        clues.append(found[1])
    if found is None and not python:
        cpython = next((p for p in CPYTHON_CLUES if has_string(p)), None)
        if cpython:
            python = [cpython]
            clues.append(f"CPython modules like {cpython!r}")
    if found is None and any(JULIA.search(c) for c in [*commands, *threads]):
        found = ("julia", "julia process")
        clues.append(found[1])
    mpi_clue = ("MPI launcher" if any(MPI.search(c) for c in commands) else "MPI trace" if mpi_traced else
                next((f"NVTX domain {d!r}" for d in domains if MPI_DOMAIN.match(d)), None) or
                next((f"library like {p!r}" for p in MPI_LIBRARY_CLUES if has_string(p)), None))
    if mpi_clue:
        clues.append(mpi_clue)
    name = found[0] if found else "python" if python else "cuda" if gpu_work else "unknown"
    return Framework(name, bool(mpi_clue), clues)
