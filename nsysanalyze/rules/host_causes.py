"""Host causes beyond the loader, from one table of cause classes (name pattern → title, fix per framework).

Each class claims the ledger rows of its cause — idle rows whose cause kind and name match its
pattern, busy rows of its classes — when they take at least MIN_SHARE of the window. Its fix removes
that idle from the host's critical path (and that busy time from the GPU's), so the bound is the usual
one: at most the rows, at most the window less the GPU and host work left.

- ``warmup-capture``: compilation, JIT, autotuning or module loading (the attribution's ``warmup``
  cause kind): the capture is warm-up, not steady state; profile after it.
- ``file-io``: writes, syncs and file opens inside the step (a checkpoint or log written every step).
- ``allocator-churn``: device or pinned memory allocated and freed while the GPU waits
  (``torch.cuda.empty_cache()`` every step, shapes that change, a pinned buffer made per step). A caching
  allocator serves a steady step from its cache and calls the driver per cache segment, far fewer times than it
  launches kernels (``empty_cache`` every step: 0.16 allocation calls per launch); with none, each operation's
  output is a ``cudaMalloc`` and later a ``cudaFree``, about two calls per launch (``PYTORCH_NO_CUDA_MEMORY_CACHING=1``:
  1.9). From PER_OP_ALLOCS calls per launch the finding says the allocator is bypassed, and how to turn it back on.
- ``unified-memory``: unified-memory migrations (copyKind 11–13) on the critical path.
- ``mpi-wait``: the host inside MPI calls while the GPU idles.
- ``host-callback``: a host callback inside a compiled step (XLA's range around its callback op): the device
  stops until the host has run it; in JAX a jitted function with callbacks (effects) also loses the C++ fast
  dispatch path, so the step's host work before its first launch is the callback's too.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..units import ms
from . import Evidence, Finding, make_finding
from .fixes import Fix, pick, unset_variable
from .input_pipeline import LOADER_RANGE

MIN_SHARE = 0.05   # a host cause worth its own finding, as a share of the window
PER_OP_ALLOCS = 0.5  # allocation calls per kernel launch from which memory is allocated per operation (no cache)
WRITE_CALLS = r"(f?write\w*|writev|pwritev?\d*|fsync|fdatasync|sync_file_range|fflush|msync)"
FILE_CALLS = r"(f?open(64|at|at64)?|fclose|close|creat\w*|rename\w*|unlink\w*|f?truncate\w*)"
ALLOC_CALLS = (r"cu(da)?(Malloc\w*|Free\w*|HostAlloc|Host(Un)?[Rr]egister|MemAlloc\w*|MemFree\w*|MemHostAlloc|"
               r"MemHost(Un)?[Rr]egister|MemPool\w*|Mem(Create|Release|Map|Unmap|SetAccess|AddressReserve|AddressFree))")

WARMUP_FIX = {
    "pytorch": ("The capture holds warm-up, not steady state: compilation, autotuning and module loading run once. "
                "Profile steps after warm-up: start the capture after N iterations (nsys "
                "--capture-range=cudaProfilerApi with torch.cuda.profiler.start()/stop() around the steps to measure), "
                "and judge the steady steps only.", """
for step, batch in enumerate(loader):
    if step == WARMUP_STEPS: torch.cuda.profiler.start()     # nsys profile --capture-range=cudaProfilerApi
    train_step(batch)
    if step == WARMUP_STEPS + 5: torch.cuda.profiler.stop(); break
"""),
    "cuda": ("The capture holds warm-up (module loading / JIT compilation on first launch): run a few iterations "
             "first and start the capture after them (cudaProfilerStart with nsys --capture-range=cudaProfilerApi), "
             "or load modules eagerly (CUDA_MODULE_LOADING=EAGER) so the steady state is what you measure.", """
for (int it = 0; it < warmup + iters; ++it) {
    if (it == warmup) cudaProfilerStart();     // nsys profile --capture-range=cudaProfilerApi
    step();
}
cudaProfilerStop();
"""),
    "default": ("The capture holds warm-up (compilation, autotuning or module loading, which run once): start the "
                "capture after warm-up (nsys --capture-range=cudaProfilerApi, or --delay) and judge the steady state.",
                ""),
}
FILE_IO_FIX = {
    "pytorch": ("Write checkpoints and logs less often and off the training thread: save every N steps, and "
                "asynchronously (torch.distributed.checkpoint.async_save, or a background thread writing a CPU copy).",
                """
if step % 1000 == 0:                                       # not every step
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    threading.Thread(target=torch.save, args=(state, path)).start()
# or: torch.distributed.checkpoint.async_save(model.state_dict(), checkpoint_id=path)
"""),
    "default": ("Files are written (and synced) inside the step while the GPU waits: write less often, "
                "asynchronously, from another thread or process than the one launching GPU work.", ""),
}
ALLOC_FIX = {
    "pytorch": ("Device (or pinned) memory is allocated and freed every step while the GPU waits: drop "
                "torch.cuda.empty_cache() from the loop, keep shapes static (pad to a few sizes) so the caching "
                "allocator reuses its blocks, and allocate pinned buffers once.", """
# remove: torch.cuda.empty_cache()   (it returns cached blocks, so the next step allocates them again)
host_buf = torch.empty(shape, pin_memory=True)            # once, outside the loop
"""),
    "cuda": ("cudaMalloc/cudaFree (or cudaHostAlloc) run every iteration and synchronize the device: allocate once "
             "before the loop and reuse, or use the stream-ordered allocator (cudaMallocAsync/cudaFreeAsync).", """
cudaMalloc(&d_buf, bytes);                 // once, before the loop
for (int it = 0; it < iters; ++it) { /* reuse d_buf */ }
// or per iteration: cudaMallocAsync(&d_tmp, bytes, stream); ...; cudaFreeAsync(d_tmp, stream);
"""),
    "default": ("Memory is allocated and freed every iteration while the GPU waits: allocate once and reuse, or use "
                "a stream-ordered/caching allocator.", ""),
}
ALLOC_PER_OP_FIX = {
    "pytorch": ("The caching allocator is off: every tensor is a cudaMalloc and every free a cudaFree, which waits "
                "for the device. PYTORCH_NO_CUDA_MEMORY_CACHING=1 is set (a debugging setting, e.g. for "
                "compute-sanitizer); unset it so the allocator reuses its blocks.",
                unset_variable("PYTORCH_NO_CUDA_MEMORY_CACHING", before="torch allocates on the GPU")),
    "jax": ("Device buffers are allocated and freed per operation: XLA_PYTHON_CLIENT_ALLOCATOR=platform is set (it "
            "allocates on demand and frees at once); unset it so the default BFC allocator serves the step from its "
            "preallocated pool.", unset_variable("XLA_PYTHON_CLIENT_ALLOCATOR", before="jax starts")),
    "cupy": ("Device memory is allocated and freed per operation: CuPy's memory pool is off "
             "(cupy.cuda.set_allocator(None)); use the default pool so freed blocks are reused.", """
cupy.cuda.set_allocator(cupy.get_default_memory_pool().malloc)   # the default: a caching pool
"""),
    "cuda": ALLOC_FIX["cuda"],
    "default": ("Memory is allocated and freed per operation while the GPU waits: use a caching or pool allocator "
                "(or allocate the buffers once and reuse them).", ""),
}
UNIFIED_FIX = {
    "cuda": ("Unified-memory pages migrate on demand while the GPU works: prefetch them before the kernels "
             "(cudaMemPrefetchAsync to the device, and back only what the host reads), or use explicit copies.", """
cudaMemPrefetchAsync(data, bytes, device, stream);        // before the kernels that touch it
kernel<<<grid, block, 0, stream>>>(data);
cudaMemPrefetchAsync(data, bytes, cudaCpuDeviceId, stream); // only if the host reads it next
"""),
    "default": ("Unified-memory pages migrate on demand on the critical path: prefetch them to the device before use "
                "(cudaMemPrefetchAsync; cupy: explicit device arrays) or copy explicitly.", ""),
}
MPI_FIX = {
    "default": ("The host waits in MPI while the GPU idles: use CUDA-aware MPI on device buffers (no staging "
                "through the host), and overlap communication with compute (non-blocking MPI_Isend/MPI_Irecv, wait "
                "only where the data is needed).", ""),
}


@dataclass(frozen=True)
class CauseClass:
    """One host cause: the ledger rows it claims (idle rows of ``kinds`` whose cause fully matches ``causes``,
    optionally only those not before the step's first launch; busy rows of ``busy``) and its words."""

    rule: str
    title: str                    # '... {ms} ... per {per} ({top})': the claimed time, the window's unit, top causes
    fixes: dict[str, Fix]
    kinds: tuple[str, ...] = ()
    causes: str | None = None
    busy: tuple[str, ...] = ()
    after_launch_only: bool = False
    confidence: float = 0.8
    metrics: tuple[str, ...] = field(default_factory=tuple)  # Evidence.m keys shown as evidence
    per_op_calls: str = ""        # an Evidence.m count that, from PER_OP_ALLOCS per launch, means per operation:
    per_op_title: str = ""        # then this title ('{calls}': the count, '{launches}': the launches) ...
    per_op_fixes: dict[str, Fix] | None = None  # ... and these fixes


CLASSES = [
    CauseClass("warmup-capture", "The capture holds warm-up: {ms} of GPU idle per {per} in compilation, "
               "autotuning or module loading ({top})", WARMUP_FIX, kinds=("warmup",), confidence=0.85,
               metrics=("module_load_calls", "module_load_ns")),
    CauseClass("file-io", "Files written inside the {per}: the GPU waits {ms} in {top}", FILE_IO_FIX,
               kinds=("os_runtime",), causes=WRITE_CALLS),
    CauseClass("file-io", "", FILE_IO_FIX, kinds=("os_runtime",), causes=FILE_CALLS, after_launch_only=True),
    CauseClass("allocator-churn", "Memory allocated and freed every {per}: the GPU waits {ms} in {top}",
               ALLOC_FIX, kinds=("cuda_blocking",), causes=ALLOC_CALLS, metrics=("alloc_calls", "alloc_ns"),
               per_op_calls="alloc_calls", per_op_fixes=ALLOC_PER_OP_FIX,
               per_op_title="Memory allocated and freed per operation ({calls:.0f} allocation calls for {launches:.0f} "
                            "launches per {per}): the GPU waits {ms} in {top}"),
    CauseClass("unified-memory", "Unified-memory migrations take {ms} of the GPU's {per}", UNIFIED_FIX,
               busy=("unified",), confidence=0.75, metrics=("um_count", "um_bytes", "um_ns")),
    CauseClass("mpi-wait", "The host waits in MPI while the GPU idles {ms} per {per} ({top})", MPI_FIX,
               causes=r"P?MPI_\w+", confidence=0.75),
]


def claim_of(ev: Evidence, cls: CauseClass) -> np.ndarray:
    """The unclaimed ledger rows of one cause class."""
    ledger = ev.ledger
    mask = ledger.busy(*cls.busy) if cls.busy else np.zeros(len(ledger), dtype=bool)
    before_launch = False if cls.after_launch_only else None
    if cls.kinds or cls.causes:  # rows of those kinds whose cause matches (Ledger.idle alone takes either)
        idle = ledger.idle(cls.kinds, before_launch=before_launch) if cls.kinds else ledger.idle(before_launch=before_launch)
        mask = mask | (idle & ledger.idle(causes=cls.causes) if cls.causes else idle)
    return mask


def host_cause(rule: str) -> "callable":
    """The rule of one cause (its classes of CLASSES together: file-io is writes anywhere and file opens after
    the first launch — before it they are the loader's)."""
    classes = [c for c in CLASSES if c.rule == rule]
    first = classes[0]

    def check(ev: Evidence) -> Finding | None:
        ledger = ev.ledger
        claim = np.zeros(len(ledger), dtype=bool)
        for c in classes:
            claim |= claim_of(ev, c)
        ns = ledger.ns(claim)
        if not ev.window_ns or ns < MIN_SHARE * ev.window_ns:
            return None
        busy_ns = ledger.ns(claim & ledger.arrays.is_busy)
        top = ledger.names(claim)[:3]
        calls, launches = (ev.get(first.per_op_calls), ev.get("launch_calls")) if first.per_op_calls else (0, 0)
        per_op = first.per_op_fixes is not None and launches > 0 and calls >= PER_OP_ALLOCS * launches
        title = first.per_op_title if per_op else first.title
        fix, snippet = pick(first.per_op_fixes if per_op else first.fixes, ev.framework)
        return make_finding(
            ev, rule,
            title.format(ms=ms(ns), per=ev.per, top=", ".join(f"{n} {ms(v)}" for n, v in top), calls=calls,
                         launches=launches),
            confidence=first.confidence, gain_ns=ns, claim=claim,
            what_if=ledger.what_if(ns, busy_removed_ns=busy_ns, host_removed_ns=ns - busy_ns),
            evidence={"claimed_ns": ns, **{f"cause_{i + 1}": n for i, (n, _) in enumerate(top)},
                      **{f"cause_{i + 1}_ns": v for i, (_, v) in enumerate(top)},
                      **{k: ev.get(k) for k in first.metrics}},
            fix=fix, snippet=snippet)

    check.__name__ = rule.replace("-", "_")
    check.__doc__ = f"Host cause {rule!r} (host_causes.CLASSES)."
    return check


FIRST_STEP_WARMUP = 10.0  # a first step this many times the steady median is warm-up (compile, autotune, load)

_warmup_idle = host_cause("warmup-capture")


def warmup_capture(ev: Evidence) -> Finding | None:
    """Warm-up on the critical path of the steady steps (the ``warmup`` idle rows), or, when the steady steps
    are clean, a first step (left out of the medians) far longer than them: the capture is mostly warm-up.
    The second has nothing to gain in the steady state (info); it says so instead of steady-state advice."""
    found = _warmup_idle(ev)
    first, capture = ev.facts.get("first_step_ns", 0.0), ev.facts.get("capture_ns", 0.0)
    if found is not None or not ev.window_ns or first < FIRST_STEP_WARMUP * ev.window_ns:
        return found
    fix, snippet = pick(WARMUP_FIX, ev.framework)
    return make_finding(
        ev, "warmup-capture",
        f"The first step took {ms(first)} against {ms(ev.window_ns)} for the steady steps: warm-up (compilation, "
        f"autotuning, module loading), {first / capture:.0%} of the capture; the findings are about the "
        f"{ev.facts.get('steady_steps', 0):.0f} steady step(s) after it",
        confidence=0.8, gain_ns=0.0, severity="info",
        evidence={"first_step_ns": first, "steady_step_ns": ev.window_ns, "capture_ns": capture,
                  "warmup_share_of_capture": first / capture if capture else float("nan")},
        fix=fix, snippet=snippet)
# XLA's range around a host-callback op of a compiled program ('Thunk:#name=jit(step)/debug_callback,hlo_op=...#')
CALLBACK_RANGE = r"Thunk:#.*\b(debug_callback|io_callback|pure_callback|host_callback)\b.*"
CALLBACK_FIX = {
    "jax": ("Take host callbacks (jax.debug.print, jax.debug.callback, io_callback, pure_callback) out of the training "
            "step: return the values and read or log them outside the jitted step every N steps. A callback stops the "
            "device until Python has run it, and a jitted function with callbacks (effects) is dispatched on JAX's "
            "slower Python path instead of its C++ one.", """
params, loss = train_step(params, x, y)        # no jax.debug.print / jax.debug.callback inside
if step % 100 == 0:
    print(f"step {step}: loss {float(loss):.4f}")   # read on the host, outside the step, every N steps
"""),
    "default": ("A host callback inside the compiled step stops the device until the host has run it: take it out of "
                "the step (return the values, read them every N steps).", ""),
}


def host_callback(ev: Evidence) -> Finding | None:
    """GPU idle while the host runs a callback of the compiled step (CALLBACK_RANGE's idle rows) and, in JAX, the
    step's host work before its first launch in its own ranges, not loader-like ones (its dispatch, on the Python
    path because of the callback's effect).
    Taking the callback out removes that host work: claimed and bounded as host work removed."""
    ledger = ev.ledger
    inside = ledger.idle(("nvtx_range",)) & ledger.idle(causes=CALLBACK_RANGE)
    inside_ns = ledger.ns(inside)
    if not ev.window_ns or inside_ns < MIN_SHARE * ev.window_ns:
        return None
    # the step's own ranges before its first launch, not a loader's ('get batch' is the loader's however it runs)
    dispatch = (ledger.idle(("nvtx_range",), before_launch=True) & ~inside & ~ledger.idle(causes=LOADER_RANGE.pattern)
                if ev.framework == "jax" and ev.per == "step" else np.zeros(len(ledger), dtype=bool))
    dispatch_ns = ledger.ns(dispatch)
    claim, ns = inside | dispatch, inside_ns + dispatch_ns
    (name, _), = ledger.names(inside)[:1]
    fix, snippet = pick(CALLBACK_FIX, ev.framework)
    extra = f"; the {ev.per}'s dispatch before its first launch adds {ms(dispatch_ns)}" if dispatch_ns else ""
    return make_finding(
        ev, "host-callback",
        f"A host callback inside the compiled {ev.per} stops the GPU {ms(inside_ns)} per {ev.per} ({name}){extra}",
        confidence=0.8, gain_ns=ns, claim=claim, what_if=ledger.what_if(ns, host_removed_ns=ns),
        evidence={"callback_idle_ns": inside_ns, "dispatch_idle_ns": dispatch_ns, "callback": name},
        fix=fix, snippet=snippet)


RULES = [host_cause(r) for r in ("file-io", "allocator-churn", "unified-memory", "mpi-wait")] + [host_callback]
