"""Launch rules: launches that wait for their kernel (a debugging setting left on), and launch overhead (the GPU
finishes each kernel before the host issues the next → CUDA graphs / compile).

``launch-blocking``: an asynchronous launch returns once its kernel is queued, so a kernel can end before its
launch call returns only when it is shorter than the call's tail (at most 3% of the kernel time of the 115 real
exports this project checks, launch-bound loops included); when most of the kernel time ends inside the launch
calls, every launch waited for its kernel: CUDA_LAUNCH_BLOCKING=1, or a tool that serializes launches. The GPU
then idles while the host returns from each call and issues the next. Making launches asynchronous again takes
the waits (launch_wait_ns) off the host, so the gain is at most those waits, and at most the launch-path idle. A
blocking launch of many kernels (a CUDA graph) lasts milliseconds without loading a module: the rule comes before
warm-up's and takes those "kernel launch loading its module" rows as the waits' too.

The cause shows in the shape of the idle: a launch-bound loop leaves many µs-scale gaps between
kernels (attribution.SHORT_GAP_NS), not a few long waits — gaps that no host sync explains (a sync
drains the queue and exposes every following launch: that is host-sync's). The rule claims those
gaps; graphs or fusion remove at most them and the host's launch calls, so the step still lasts its
GPU work and the host work the gaps did not wait on. Launches and CPU time
count on every thread of the process (PyTorch launches the backward from autograd threads).

A step that synchronizes with the host (a synchronize call or a blocking copy: ``.item()``, boolean-mask
indexing, GradScaler with an unfused optimizer) cannot be captured whole: a stream that captures may not
synchronize, and torch.compile splits its graph there. Under the profiler such a sync costs the loop little
(the host is behind the GPU anyway), but it blocks the fix: the finding then says so, first.

Under the profiler the host issues each launch more slowly than without it (CUDA API tracing, OS-runtime tracing
more: this project's launch-bound captures ran 1.6-2.5x faster unprofiled), so the bound holds for the
profiled loop and overstates the unprofiled gain; the fix says so.
"""
from __future__ import annotations

import re

from ..attribution import LOADING_LAUNCH, SHORT_GAP_NS
from ..units import ms, size
from . import Evidence, Finding, make_finding
from .fixes import pick, unset_variable

BLOCKING_SHARE = 0.5     # share of the kernel time that ended inside its own launch call: launches are synchronous
IDLE_HIGH = 0.20          # GPU idle fraction worth attacking
OPTIMIZER_SHARE = 0.05    # idle inside the optimizer step, as a share of the step, worth fusing it
# the optimizer step's NVTX range (the user's, or torch.optim's own 'Optimizer.step#AdamW.step'), and the
# launches made inside it
OPTIMIZER_RANGE = r"(?i)((kernel launch|between launches on another thread) in ')?.*(optimi[sz]er|optim\.|adam|sgd|lamb|lion).*"
SHORT_GAP_SHARE = 0.5     # share of the idle spent in short gaps between kernels
MIN_KERNELS = 20          # kernels per step for the pattern to matter ...
LAUNCH_NS = 10_000        # ... unless each runs shorter than a launch costs the host (µs): no host can keep it fed

CUPY_FUSE = """
@cupy.fuse()
def step(x):                       # the whole elementwise chain: one kernel
    return cupy.tanh(x * a + b)"""

FIX = {
    "pytorch": ("Cut per-kernel launch cost: capture the step in a CUDA graph or compile it "
                "(torch.compile(mode='reduce-overhead') uses CUDA graphs); fuse small ops, or use a larger batch.", """
model = torch.compile(model, mode="reduce-overhead")   # CUDA graphs under the hood
# or capture the whole step by hand: torch.cuda.CUDAGraph() + g.replay() (static inputs,
# optimizer with capturable=True)
"""),
    "jax": ("Cut per-kernel launch cost: XLA launches the jitted step's fused kernels one by one, so let it replay them "
            "as CUDA graphs (command buffers: on by default in recent jaxlib unless XLA_FLAGS sets "
            "--xla_gpu_enable_command_buffer= empty), run several steps per jitted call (jax.lax.scan over a stack of "
            "batches), or give each step more work (a larger batch).", """
@jax.jit
def train_steps(params, xs, ys):   # k steps in one call: one dispatch, XLA loops on the GPU
    return jax.lax.scan(lambda p, batch: train_step(p, *batch), params, (xs, ys))
"""),
    "cupy": ("Cut per-kernel launch cost: fuse the elementwise chain into one kernel (@cupy.fuse() or "
             "cupy.ElementwiseKernel), or capture the iteration's launches in a CUDA graph once and replay it.",
             CUPY_FUSE + """
# or: s = cupy.cuda.Stream(non_blocking=True); with s: s.begin_capture(); run(); g = s.end_capture()
#     then g.launch(s) every iteration
"""),
    "numba": ("Cut per-kernel launch cost: each launch from Python goes through Numba's dispatcher (tens of us), so do "
              "the rounds inside one @cuda.jit kernel (a loop in the kernel) or give each launch more elements; an "
              "explicit signature skips part of the per-launch type dispatch.", """
@cuda.jit("void(float32[:], float32, float32, int32)")   # compiled once for these types
def all_rounds(x, a, b, rounds):
    i = cuda.grid(1)
    if i < x.size:
        v = x[i]
        for k in range(rounds):                            # the rounds in one launch
            v = math.tanh(v * a + b * k)
        x[i] = v
"""),
    "cuda": ("Cut per-kernel launch cost: capture the repeated sequence of launches in a CUDA graph once and "
             "launch the graph each iteration; fuse small kernels or give each more work.", """
cudaGraph_t graph; cudaGraphExec_t exec;
cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal);
for (int k = 0; k < n_kernels; ++k) step_kernel<<<grid, block, 0, stream>>>(/* ... */);
cudaStreamEndCapture(stream, &graph);
cudaGraphInstantiate(&exec, graph, 0);
for (int it = 0; it < iters; ++it) cudaGraphLaunch(exec, stream);
"""),
    "default": ("The GPU finishes each small kernel before the host issues the next: launch fewer, larger kernels "
                "(fusion, bigger work per launch) or replay the sequence as a CUDA graph.", ""),
}


# what a step that syncs must do first ({times}: "once" / "N times" per {per}; {back}: what it reads back)
CAPTURE_BLOCKER = {
    "pytorch": ("The {per} synchronizes with the host {times}{back}, and a CUDA graph cannot hold a sync (capture "
                "fails; torch.compile splits the graph there). Take the syncs out of the {per} first: read values "
                "(.item(), .cpu(), print) every N steps instead, make copies to the GPU non_blocking (from pinned "
                "memory), replace boolean-mask indexing (x[mask], nonzero) with torch.where or the loss's "
                "ignore_index, and under a GradScaler use an optimizer with fused=True (it checks found_inf on the "
                "GPU).", """
loss = F.cross_entropy(logits, target, ignore_index=-100)   # not logits[mask]: nonzero syncs
optimizer = torch.optim.AdamW(model.parameters(), fused=True)   # GradScaler.step then does not sync
x = batch.to(device, non_blocking=True)                     # pinned batch: no wait for the copy
running_loss += loss.detach()                                # not loss.item() every step
"""),
    "cuda": ("The iteration synchronizes with the host {times}{back} (cudaStreamSynchronize, "
             "cudaDeviceSynchronize, blocking cudaMemcpy), which a stream that captures may not do: move them out of "
             "the captured sequence first.", ""),
    "default": ("The {per} synchronizes with the host {times}{back}, which a captured graph cannot hold: "
                "take the syncs out of it first.", ""),
}

BLOCKING_WORDS = ("Every kernel launch waited for its kernel to finish, so the host never ran ahead of the GPU: "
                  "CUDA_LAUNCH_BLOCKING=1 is set (a debugging setting), or the program ran under a tool that serializes "
                  "launches (compute-sanitizer, cuda-gdb). Unset it for training and profiling runs.")
BLOCKING_FIX = {
    "pytorch": (BLOCKING_WORDS, unset_variable("CUDA_LAUNCH_BLOCKING", before="torch starts CUDA")),
    "default": (BLOCKING_WORDS, unset_variable("CUDA_LAUNCH_BLOCKING")),
}

OPTIMIZER_FIX = {
    "pytorch": ("The optimizer step launches a few kernels per parameter and the GPU waits between them: use the fused "
                "(or multi-tensor foreach) implementation, one or a few kernels for all parameters.", """
optimizer = torch.optim.AdamW(model.parameters(), lr=lr, fused=True)   # or foreach=True (the default on CUDA)
"""),
    "default": ("The optimizer step launches kernels per parameter and the GPU waits between them: fuse the update into "
                "one multi-tensor kernel for all parameters.", ""),
}


def launch_blocking(ev: Evidence) -> Finding | None:
    """Launches that return only after their kernel ran (see the module docstring). The gain is at most the
    host's waits inside the launch calls and the idle of the launch path (launch gaps and the ranges' host work
    between launches, not after syncs); it claims that idle's rows up to the gain, smallest first, and leaves the
    rest to the launch-overhead rules (the host still issues every kernel once its launches are asynchronous)."""
    kernel_ns, blocked = ev.get("kernel_sum_ns"), ev.get("launch_blocked_kernel_ns")
    if not kernel_ns or blocked < BLOCKING_SHARE * kernel_ns:
        return None
    ledger, wait = ev.ledger, ev.get("launch_wait_ns")
    # a launch that waits for its kernels is long without loading anything: its warm-up rows are the waits' too
    path = ledger.idle(kinds=("launch", "nvtx_range"), after_sync=False) | ledger.idle(causes=re.escape(LOADING_LAUNCH))
    # host work (ledger.host_work_ns) already leaves out the launch calls: the waits bound the gain as a cap
    bound = ledger.what_if(ledger.ns(path), caps={"host waits in launches": wait}).gain_ns
    rows = ledger.smallest_rows(path, bound)
    what_if = ledger.what_if(ledger.ns(rows), caps={"host waits in launches": wait})
    fix, snippet = pick(BLOCKING_FIX, ev.framework)
    return make_finding(
        ev, "launch-blocking",
        f"Launches wait for their kernels: {blocked / kernel_ns:.0%} of the kernel time ends before its launch call "
        f"returns, so the host waits {ms(wait)} per {ev.per} inside launches while the GPU idles between kernels",
        confidence=0.9, gain_ns=what_if.gain_ns, claim=rows, what_if=what_if,
        evidence={"blocked_kernel_ns": blocked, "kernel_sum_ns": kernel_ns, "launch_wait_ns": wait,
                  "launch_calls": ev.get("launch_calls"), "launch_ns": ev.get("launch_ns"),
                  "gpu_idle_fraction": ev.get("idle_fraction")},
        fix=fix, snippet=snippet)


def unfused_optimizer(ev: Evidence) -> Finding | None:
    """Launch gaps inside the optimizer step (its NVTX range, and the launch calls made in it): a per-parameter
    optimizer. Claims that range's idle; fusing removes the host's launch work there, at most those rows."""
    ledger = ev.ledger
    rows = ledger.idle(causes=OPTIMIZER_RANGE)
    ns, short = ledger.ns(rows), ledger.ns(rows & ledger.idle(short_gap=True))
    if not ns or ns < OPTIMIZER_SHARE * ev.window_ns or short < SHORT_GAP_SHARE * ns:
        return None
    fix, snippet = pick(OPTIMIZER_FIX, ev.framework)
    return make_finding(
        ev, "unfused-optimizer",
        f"The optimizer step leaves the GPU idle {ms(ns)} per {ev.per}, {short / ns:.0%} of it in launch gaps "
        f"< {SHORT_GAP_NS / 1e3:.0f} us: it updates the parameters one kernel at a time",
        confidence=0.75, gain_ns=ns, claim=rows, what_if=ledger.what_if(ns, host_removed_ns=ns),
        evidence={"optimizer_idle_ns": ns, "optimizer_short_gap_ns": short, "kernels": ev.get("kernel_count"),
                  "launch_calls": ev.get("launch_calls")},
        fix=fix, snippet=snippet)


def launch_bound(ev: Evidence) -> Finding | None:
    kernels = ev.get("kernel_count")
    idle, idle_ns = ev.get("idle_fraction"), ev.get("idle_ns")
    ledger = ev.ledger
    short = ledger.ns(ledger.idle(short_gap=True, after_sync=False, free=False))  # the pattern: all such gaps
    gaps = ledger.idle(short_gap=True, after_sync=False)  # the claim: those no finding before took
    if not kernels or idle < IDLE_HIGH or short < SHORT_GAP_SHARE * idle_ns:
        return None
    gpu_per_kernel = ev.get("kernel_sum_ns") / kernels
    if kernels < MIN_KERNELS and gpu_per_kernel >= LAUNCH_NS:  # a few kernels: only launch-sized ones say it
        return None
    host_per_kernel = ev.window_ns / kernels  # the host issues one kernel per this many ns
    if host_per_kernel <= gpu_per_kernel:  # the GPU is the slower side: not launch overhead
        return None
    fix, snippet = pick(FIX, ev.framework)
    syncs = ev.get("sync_wait_calls") + ev.get("sync_copy_calls")  # per step: host syncs the graph cannot hold
    if ev.per == "step" and syncs >= 1:
        back = f", reading {size(ev.get('dtoh_bytes'))} back" if ev.get("dtoh_count") >= 1 else ""
        first, before = pick(CAPTURE_BLOCKER, ev.framework)
        times = "once" if round(syncs) == 1 else f"{syncs:.0f} times"
        fix = f"{first.format(per=ev.per, times=times, back=back)} Then: {fix}"
        snippet = before.strip("\n") + "\n" + snippet.strip("\n") if before else snippet
    tracing = "API tracing, OS-runtime tracing more" if ev.facts.get("osrt_captured") else "API tracing"
    fix += (f" Under nsys every CUDA call costs the host more ({tracing}): here a kernel is issued every "
            f"{host_per_kernel / 1e3:.1f} us; without the profiler the host launches faster and the gain is smaller "
            "than this bound, so time the loop without nsys before and after.")
    return make_finding(
        ev, "launch-bound",
        f"Launch-bound: {kernels:.0f} kernel{'s' if round(kernels) != 1 else ''} per {ev.per} averaging {gpu_per_kernel / 1e3:.1f} us on the GPU but "
        f"{host_per_kernel / 1e3:.1f} us apart; {short / idle_ns:.0%} of the GPU idle is in gaps < "
        f"{SHORT_GAP_NS / 1e3:.0f} us that no sync explains",
        confidence=0.8, gain_ns=ledger.ns(gaps), claim=gaps,
        what_if=ledger.what_if(ledger.ns(gaps), host_removed_ns=ledger.ns(gaps)),
        evidence={"kernels": kernels, "gpu_ns_per_kernel": gpu_per_kernel, "host_ns_per_kernel": host_per_kernel,
                  "gpu_idle_fraction": idle, "idle_in_short_gaps_without_sync_ns": short, "idle_gap_count": ev.get("idle_gap_count"),
                  "launch_calls": ev.get("launch_calls"), "launch_ns": ev.get("launch_ns"),
                  "host_syncs": syncs},
        fix=fix, snippet=snippet,
    )


RULES = [unfused_optimizer, launch_bound]
