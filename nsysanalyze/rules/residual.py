"""The residual finding, ``gpu-idle-unexplained``: the GPU idle no rule claimed, shown by where the attribution
says the GPU waited, with a fix that follows its first cause.

- launch overhead: launch less (it cannot move to another thread);
- host work inside the step that is spread over the gaps between many kernels (at least SHORT_GAP_SHARE of the
  idle in gaps < DISPATCH_GAP_NS, the host spending more per kernel than the GPU): the host's work per operation
  (such as an eager framework's dispatch), which compiling or fusing the step removes, not one block of work to move;
- in a Python program, the primary thread's ``pthread_cond_timedwait``: CPython's wait for the GIL (``take_gil``;
  Python-level locks and queues wait in ``sem_*wait``), held by another Python thread of the process;
- anything else: take the work off the GPU's critical path.

When the median steady step loads kernels (module loads: compilation or autotuning that never ends) that is the
fix, in place of the first cause's (the host's waits are the compiler's or autotuner's): torch.compile recompiling
when the step runs Triton kernels, else compilation or autotuning on new shapes. PyTorch's anomaly detection
(``host_sync.per_node_checks``: one-byte flag reads per backward node) comes before the fix: it also records a
traceback per forward op, host work per operation. A one-shot capture is told to profile a loop instead.
"""
from __future__ import annotations

import re

from ..attribution import DISPATCH_GAP_NS
from ..framework import PYTHON_FRAMEWORKS
from ..units import ms
from . import Evidence, Finding, make_finding
from .fixes import pick
from .host_sync import flag_reads, per_node_checks
from .launch import CUPY_FUSE, MIN_KERNELS, SHORT_GAP_SHARE

ONE_SHOT_REPEATS = 2     # median launches per kernel name at most this: the capture is one first run
UNEXPLAINED_IDLE = 0.20   # GPU idle share of the step that must be explained
EXPLAINED_SHARE = 0.5     # ...at least this share of it by the idle rules' findings
GIL_WAIT = re.compile(r"^pthread_cond_timedwait$")  # CPython's take_gil (a timed wait of the switch interval)

OFF_CRITICAL_PATH = ("take that work off the GPU's critical path (run it ahead of or beside the GPU work, in a "
                     "background thread/process, or on the GPU).")
LAUNCH_REMEDY = {  # launch overhead cannot move to another thread: the step must launch less
    "pytorch": ("launch less per step — replay it as a CUDA graph (torch.compile(mode='reduce-overhead'), also for "
                "a model compiled already), fuse small ops, or give each launch more work (a larger batch).", ""),
    "jax": ("launch less per step — let XLA replay the jitted step as CUDA graphs (command buffers), run several "
            "steps per jitted call (jax.lax.scan), or give each launch more work (a larger batch).", ""),
    "cupy": ("launch less per step — fuse elementwise chains (@cupy.fuse(), cupy.ElementwiseKernel), replay the "
             "iteration as a CUDA graph (Stream.begin_capture()/end_capture()), or give each launch more work.", ""),
    "default": ("launch less per step — replay its launches as a CUDA graph, fuse small kernels, or give each launch "
                "more work.", ""),
}

DISPATCH_REMEDY = {  # the host's work per operation: fewer, larger operations per step
    "pytorch": ("compile the step: torch.compile the model (mode='reduce-overhead' also replays it as a CUDA graph) "
                "and the optimizer step (or use an optimizer with fused=True), and keep Python work out of the "
                "per-op path.", """
model = torch.compile(model, mode="reduce-overhead")   # fused kernels, replayed as a CUDA graph

@torch.compile(fullgraph=False)
def optimizer_step():                                  # the per-parameter update fused too
    optimizer.step()
"""),
    "jax": ("run the whole step as one compiled program: jax.jit the function that computes the loss, the gradients "
            "and the update (run op by op, every primitive is dispatched from Python as a program of its own).", """
train_step = jax.jit(train_step)   # loss, gradients and update: one XLA program per step
params, loss = train_step(params, x, y)
"""),
    "tensorflow": ("run the step as a compiled graph: tf.function(jit_compile=True) around the training step (eager "
                   "mode dispatches every op from Python).", """
@tf.function(jit_compile=True)
def train_step(x, y):
    ...
"""),
    "cupy": ("fuse the elementwise chains into single kernels (@cupy.fuse(), cupy.ElementwiseKernel) and keep Python "
             "logic out of the loop over arrays.", CUPY_FUSE),
    "default": ("issue fewer, larger operations: compile or fuse the step, or give each operation more work (a larger "
                "batch).", ""),
}

GIL_REMEDY = {  # Python programs only (GIL_WAIT names CPython's lock)
    "default": ("find the Python thread that holds it (a metrics, logging or monitoring thread, a prefetch or "
                "pin-memory thread doing Python work) and move that work to a process (multiprocessing), make it "
                "lighter or less frequent, or keep it in calls that release the GIL (NumPy, I/O).", """
ctx = multiprocessing.get_context("spawn")
worker = ctx.Process(target=collect_stats, args=(stop,), daemon=True)   # not threading.Thread: its own GIL
worker.start()
"""),
}

RETUNING = {  # kernels loaded in every steady step: compilation or autotuning that never ends
    "pytorch": ("Kernels are loaded in every steady step ({loads:.0f} module loads, {syncs:.0f} syncs and "
                "{allocs:.0f} allocations per step): the step keeps compiling or autotuning. With changing input "
                "shapes torch.backends.cudnn.benchmark=True autotunes every new shape: keep the shapes fixed (pad or "
                "bucket them) or turn cudnn.benchmark off.", ""),
    "default": ("Kernels are loaded in every steady step ({loads:.0f} module loads per step): something keeps "
                "compiling or autotuning (JIT, autotuning on new shapes): keep it out of the loop.", ""),
}
RECOMPILING = ("Kernels are loaded in every steady step ({loads:.0f} module loads per step) and the step runs "
               "torch.compile's Triton kernels: it recompiles, most often because an input shape (a batch or "
               "sequence length) changes every step. Mark the changing dimension dynamic, or pad or bucket the "
               "shapes to a few sizes; TORCH_LOGS=recompiles names the guard that fails.", """
torch._dynamo.mark_dynamic(x, 0)            # dimension 0 changes every step: one dynamic graph
model = torch.compile(model, dynamic=True)  # or compile dynamic shapes from the start
# TORCH_LOGS=recompiles python train.py     # why each recompilation happened
""")


def dispatch_bound(ev: Evidence) -> bool:
    """Whether the idle is the host's work per operation: at least MIN_KERNELS kernels, SHORT_GAP_SHARE of the
    idle in gaps < DISPATCH_GAP_NS between them, and the host issuing a kernel less often than the GPU runs one
    (window / kernels > kernel time / kernels, i.e. the window is longer than the kernels' summed time, ns)."""
    idle_ns = ev.get("idle_ns")
    return (ev.get("kernel_count") >= MIN_KERNELS and idle_ns > 0
            and ev.get("idle_dispatch_gap_ns") >= SHORT_GAP_SHARE * idle_ns and ev.window_ns > ev.get("kernel_sum_ns"))


def _remedy(ev: Evidence, first: dict) -> tuple[str, str, str]:
    """(what the GPU waited on, the fix, its snippet) for the first cause (module docstring)."""
    kind, cause = first["cause_kind"], first["cause"]
    what = {"warmup": f"warm-up ({cause})", "nvtx_range": f"the host work inside '{cause}'",
            "untraced": "host work that no traced call covers (Python/CPU code between GPU calls)",
            "cuda_blocking": f"the blocking {cause} calls", "os_runtime": f"the {cause} calls",
            "os_wait": f"what the host waits for in {cause}", "launch": "kernel launch overhead"}[kind]
    if kind == "launch":
        return what, pick(LAUNCH_REMEDY, ev.framework)[0], ""
    if kind == "os_wait" and GIL_WAIT.match(cause) and ev.framework in PYTHON_FRAMEWORKS:
        fix, snippet = pick(GIL_REMEDY, ev.framework)
        return (f"the main thread waiting for Python's GIL ({cause}: CPython's lock wait) while another Python "
                "thread of the process holds it", fix, snippet)
    if kind in ("nvtx_range", "untraced") and dispatch_bound(ev):
        kernels = ev.get("kernel_count")
        fix, snippet = pick(DISPATCH_REMEDY, ev.framework)
        return (f"{what}, spread over the gaps between the {ev.per}'s {kernels:.0f} kernels "
                f"({ev.get('idle_dispatch_gap_ns') / ev.get('idle_ns'):.0%} of the idle in gaps < "
                f"{DISPATCH_GAP_NS / 1e6:.0f} ms; the host takes {ev.window_ns / kernels / 1e3:.0f} us per kernel, "
                f"the GPU {ev.get('kernel_sum_ns') / kernels / 1e3:.1f} us): that is the host's work per operation "
                "(such as an eager framework's dispatch), not one block of work to move elsewhere", fix, snippet)
    return what, OFF_CRITICAL_PATH, ""


def unexplained_idle(ev: Evidence, findings: list[Finding]) -> Finding | None:
    """GPU idle that no finding claimed: show where the attribution says the GPU waited. Its gain is that
    idle, bounded as if the host work it waited on moved off the critical path. Its fix follows the first cause
    (module docstring)."""
    idle_ns, idle = ev.get("idle_ns"), ev.get("idle_fraction")
    free = ev.ledger.idle()
    unclaimed = ev.ledger.ns(free)
    explained = max(0.0, idle_ns - unclaimed) if len(ev.ledger) else 0.0
    if idle < UNEXPLAINED_IDLE or explained >= EXPLAINED_SHARE * idle_ns or ev.gaps.empty or not unclaimed:
        return None
    top = [{"cause_kind": kind, "cause": cause, "ns": float(ns)}  # the largest unclaimed causes
           for (kind, cause), ns in ev.ledger.causes(free)[:3]]
    causes = "; ".join(f"{r['cause']} ({r['cause_kind']}, {ms(r['ns'])})" for r in top)
    what, remedy, snippet = _remedy(ev, top[0])
    fix = f"Most of the GPU idle comes from {what}: {remedy}"
    if ev.per == "step" and ev.get("module_load_calls") >= 1:  # a median step loads kernels: that is the host's work
        recompiling = ev.framework == "pytorch" and ev.facts.get("triton_kernels", 0) > 0
        words, snippet = RECOMPILING if recompiling else pick(RETUNING, ev.framework)
        fix = words.format(loads=ev.get("module_load_calls"), syncs=ev.get("sync_wait_calls"),
                           allocs=ev.get("alloc_calls"))
    if ev.framework == "pytorch" and per_node_checks(ev):  # anomaly detection's host work per op goes first
        fix = (f"The copies back are one-byte flag reads ({flag_reads(ev):.0f} per {ev.per}), a check per operation: "
               "torch.autograd.set_detect_anomaly(True) checks every backward node this way and records a Python "
               "traceback for every forward op, host work per operation. Turn it off first, then judge what "
               "remains. " + fix)
    if ev.get("um_count") > 0:
        fix += (" With unified memory, host accesses to managed pages fault them back one by one: prefetch them "
                "(cudaMemPrefetchAsync) or copy explicitly before the host reads.")
    if ev.per == "capture" and ev.facts.get("kernel_repeats", 99) <= ONE_SHOT_REPEATS:
        fix, snippet = ("This capture is one first run (its kernels run about once each): its host time is setup, "
                        "compilation and first launches, not a steady state. Profile a loop of iterations after "
                        "warm-up (--capture-range=cudaProfilerApi) before optimizing it."), ""
    return make_finding(
        ev, "gpu-idle-unexplained",
        f"GPU idle {idle:.0%} of the {ev.per}; the GPU waited on: {causes}",
        confidence=0.5, gain_ns=unclaimed, claim=free,
        what_if=ev.ledger.what_if(unclaimed, host_removed_ns=unclaimed),
        evidence={"gpu_idle_fraction": idle, "gpu_idle_ns": idle_ns, "explained_by_findings_ns": explained,
                  "launches_per_kernel_name": ev.facts.get("kernel_repeats", float("nan")),
                  **{f"cause_{i + 1}": f"{r['cause_kind']}: {r['cause']}" for i, r in enumerate(top)},
                  **{f"cause_{i + 1}_ns": float(r["ns"]) for i, r in enumerate(top)}},
        fix=fix, snippet=snippet)
