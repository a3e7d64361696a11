"""DDP rules (second article): single-GPU DDP, gradient copies, bucket overlap, static graph, compression.

Only all-reduce kernels count here (metrics' nccl_allreduce_*): point-to-point, all-gather and
reduce-scatter traffic is pipeline or FSDP communication (rules/collectives.py). The rules give
DDP advice only to PyTorch programs (framework.detect); other all-reduce users get plain words
from collectives.py.

A gloo (or host-staged MPI) all-reduce leaves no NCCL kernel: gradients go to the host and back each
step while the host waits (``host_allreduce``), in any framework (plain words outside PyTorch).

DDP leaves two marks in a trace: device-to-device copies of the gradients into its
communication buckets (copyKind 8, the same GPU; +1.23 GB per step for ViT-L/32), and NCCL all-reduce kernels (``ncclKernel_*``/
``ncclDevKernel_*``) — at world size 1 NCCL launches no all-reduce kernel, so only the copies
(and NCCL's own NVTX ranges, when recorded) remain.
"""
from __future__ import annotations

from ..units import ms, size
from . import Evidence, Finding, make_finding
from .collectives import one_collective
from .fixes import pick

GRAD_COPY_BYTES = 64e6      # DtoD bytes per step that look like DDP's gradient bucket copies
GRAD_COPY_SHARE = 0.02      # ...when they also take this share of the step
EXPOSED_MIN_SHARE = 0.02    # exposed NCCL time, as a share of the step, worth hiding
EXPOSED_HIGH = 0.7          # share of NCCL time not hidden under compute: "after the backward"
FEW_BUCKETS = 2             # all-reduce kernels per step meaning one (or two) buckets
NCCL_DOMINANT = 0.30        # exposed NCCL share of the step that calls for compression
NVLINK_CLASS_BPS = 100e9    # achieved all-reduce bandwidth below this is not NVLink-class


def pytorch(rule):
    """Run ``rule`` only on PyTorch traces (DDP knobs mean nothing elsewhere) that hold more than one
    collective (a capture of one call is not a training step: collectives.single_collective_capture)."""
    def guarded(ev: Evidence) -> Finding | None:
        return rule(ev) if ev.framework == "pytorch" and not one_collective(ev) else None
    guarded.__name__, guarded.__doc__ = rule.__name__, rule.__doc__
    return guarded


def grad_copies(ev: Evidence) -> bool:
    """Large same-GPU copies per step: DDP's bucket copies (or the model's own)."""
    return ev.get("dtod_bytes") >= GRAD_COPY_BYTES and ev.get("dtod_ns") >= GRAD_COPY_SHARE * ev.window_ns


def ddp_single_gpu(ev: Evidence) -> Finding | None:
    """DDP at world size 1: gradient copies every step, no NCCL all-reduce, one GPU in the file."""
    if ev.get("nccl_count") > 0 or ev.facts.get("gpu_devices", 1) > 1 or ev.get("ptop_bytes") > 0:
        return None
    nccl_ranges = ev.facts.get("nccl_nvtx_ranges", 0)
    if not grad_copies(ev) and not (nccl_ranges and ev.get("dtod_bytes") > 0):
        return None
    return make_finding(
        ev, "ddp-single-gpu",
        f"DDP on a single GPU: {size(ev.get('dtod_bytes'))} of device-to-device gradient copies per step "
        f"({ms(ev.get('dtod_ns'))}) and no NCCL all-reduce kernel",
        confidence=0.85 if nccl_ranges else 0.6,
        gain_ns=ev.get("dtod_ns"),
        evidence={"dtod_bytes": ev.get("dtod_bytes"), "dtod_count": ev.get("dtod_count"), "dtod_ns": ev.get("dtod_ns"),
                  "dtod_share_of_step": ev.get("dtod_ns") / ev.window_ns if ev.window_ns else 0.0,
                  "nccl_kernels_per_step": ev.get("nccl_count"), "nccl_nvtx_ranges": nccl_ranges,
                  "gpus_in_trace": ev.facts.get("gpu_devices", 1)},
        fix="Run single-GPU training without the DistributedDataParallel wrapper: with one rank DDP only adds "
            "bucket copies and hooks (the article measured 3-7% lower throughput).",
        snippet="""
model = model.to(device)
if int(os.environ.get("WORLD_SIZE", "1")) > 1:
    model = DDP(model, device_ids=[local_rank])
""",
        busy=("dtod",))


def gradient_as_bucket_view(ev: Evidence) -> Finding | None:
    """Gradient copies into/out of DDP buckets around the all-reduce: let grads alias the buckets."""
    if ev.get("nccl_allreduce_count") == 0 or not grad_copies(ev):
        return None
    return make_finding(
        ev, "gradient-as-bucket-view",
        f"{size(ev.get('dtod_bytes'))} of device-to-device copies per step ({ms(ev.get('dtod_ns'))}) "
        "around the all-reduce",
        confidence=0.7, gain_ns=ev.get("dtod_ns"),
        evidence={"dtod_bytes": ev.get("dtod_bytes"), "dtod_count": ev.get("dtod_count"), "dtod_ns": ev.get("dtod_ns"),
                  "nccl_allreduce_ns": ev.get("nccl_allreduce_ns")},
        fix="Let parameter gradients be views into DDP's communication buckets, so they are not copied "
            "in and out around the all-reduce (also saves the gradients' memory).",
        snippet="""
model = DDP(model, device_ids=[local_rank], gradient_as_bucket_view=True)
""",
        busy=("dtod",))


def _nccl_exposure(ev: Evidence) -> tuple[float, float]:
    nccl = ev.get("nccl_allreduce_ns")
    return nccl, (ev.get("nccl_allreduce_exposed_ns") / nccl if nccl else 0.0)


def ddp_bucket_overlap(ev: Evidence) -> Finding | None:
    """One all-reduce after the whole backward, barely overlapped: smaller buckets overlap it."""
    nccl, exposed = _nccl_exposure(ev)
    if not nccl or exposed < EXPOSED_HIGH or ev.get("nccl_allreduce_count") > FEW_BUCKETS:
        return None
    if ev.get("nccl_allreduce_exposed_ns") < EXPOSED_MIN_SHARE * ev.window_ns:
        return None
    return make_finding(
        ev, "ddp-bucket-overlap",
        f"{ev.get('nccl_allreduce_count'):.0f} all-reduce kernel(s) per step, {exposed:.0%} of NCCL time exposed "
        f"({ms(ev.get('nccl_allreduce_exposed_ns'))}): gradients are reduced after the backward, not during it",
        confidence=0.75, gain_ns=ev.get("nccl_allreduce_exposed_ns"),
        evidence={"nccl_kernels_per_step": ev.get("nccl_allreduce_count"), "nccl_allreduce_ns": nccl,
                  "nccl_allreduce_exposed_ns": ev.get("nccl_allreduce_exposed_ns"), "nccl_exposed_fraction": exposed,
                  "nccl_share": ev.get("nccl_share")},
        fix="Use several smaller DDP buckets so each bucket's all-reduce starts while the backward is still "
            "computing the rest (tune bucket_cap_mb; the default is 25).",
        snippet="""
model = DDP(model, device_ids=[local_rank], bucket_cap_mb=100)   # try 25..200
""",
        busy=("nccl",))


def ddp_static_graph(ev: Evidence) -> Finding | None:
    """Several buckets whose all-reduces still run after the backward: declare the graph static.

    A rank waiting for a slower one looks the same in its own trace; the cross-rank view of
    ``diagnose rank_*.sqlite`` tells the two apart (hence the low confidence)."""
    nccl, exposed = _nccl_exposure(ev)
    if not nccl or ev.get("nccl_allreduce_count") <= FEW_BUCKETS or exposed < EXPOSED_HIGH:
        return None
    if ev.get("nccl_allreduce_exposed_ns") < EXPOSED_MIN_SHARE * ev.window_ns:
        return None
    return make_finding(
        ev, "ddp-static-graph",
        f"{ev.get('nccl_allreduce_count'):.0f} all-reduce kernels per step but {exposed:.0%} of NCCL time is still exposed",
        confidence=0.4, gain_ns=ev.get("nccl_allreduce_exposed_ns") * 0.5,
        evidence={"nccl_kernels_per_step": ev.get("nccl_allreduce_count"), "nccl_exposed_fraction": exposed,
                  "nccl_allreduce_exposed_ns": ev.get("nccl_allreduce_exposed_ns")},
        fix="If every parameter gets a gradient every step, declare the graph static so DDP skips the "
            "unused-parameter search and can reorder buckets to match gradient readiness. If another rank "
            "is slower, this NCCL time is waiting: compare the ranks first.",
        snippet="""
model = DDP(model, device_ids=[local_rank], static_graph=True)
""",
        busy=("nccl",))


def grad_compression(ev: Evidence) -> Finding | None:
    """Exposed NCCL dominates the step at low bandwidth: compress gradients (bf16 hook; PowerSGD is lossy).

    NCCL kernel time includes waiting for slower ranks; the bandwidth estimate is therefore a lower
    bound, and only exposed NCCL time counts (NCCL hidden under the backward costs nothing)."""
    nccl, exposed = _nccl_exposure(ev)
    if not nccl or ev.get("nccl_allreduce_exposed_ns") < NCCL_DOMINANT * ev.window_ns:
        return None
    # DDP copies each gradient into its bucket (+1.23 GB/step for ViT-L/32 on the H200 fixtures): the DtoD
    # bytes per step over-estimate the all-reduce payload, so the bandwidth estimate errs high, never low
    payload = ev.get("dtod_bytes")
    algbw = payload / (nccl / 1e9) if payload else float("nan")
    if algbw == algbw and algbw >= NVLINK_CLASS_BPS:
        return None
    return make_finding(
        ev, "grad-compression",
        f"NCCL all-reduce takes {nccl / ev.window_ns:.0%} of the {ev.per}"
        + (f" at ~{algbw / 1e9:.1f} GB/s (not NVLink-class)" if algbw == algbw else ""),
        confidence=0.6, gain_ns=ev.get("nccl_allreduce_exposed_ns") * 0.5,
        evidence={"nccl_share": ev.get("nccl_share"), "nccl_allreduce_ns": nccl, "nccl_allreduce_exposed_ns": ev.get("nccl_allreduce_exposed_ns"),
                  "allreduce_payload_estimate_bytes": payload, "algbw_estimate_bps": algbw},
        fix="Halve the all-reduce bytes with the bf16 compression hook; PowerSGD compresses far more but is "
            "LOSSY (check convergence). Worth it on PCIe-linked GPUs; on NVLink the compression kernels can cost more.",
        snippet="""
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
model.register_comm_hook(state=None, hook=default_hooks.bf16_compress_hook)
# lossy alternative:
# from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
# model.register_comm_hook(powerSGD_hook.PowerSGDState(process_group=None), powerSGD_hook.powerSGD_hook)
""",
        busy=("nccl",))


HOST_ALLREDUCE_BYTES = 1e6   # bytes per step copied each way that look like gradients reduced on the host
HOST_ALLREDUCE_RATIO = 2.0   # ...out (DtoH) and back (HtoD) within this factor of each other
HOST_WAIT_SHARE = 0.05       # GPU idle in host waits, as a share of the step, worth naming
HOST_ALLREDUCE_FIX = {
    "pytorch": ("The gradients are reduced through host memory (the gloo backend, or a host-staged MPI): copied "
                "to the host, summed by the CPU over the network stack and copied back, while this rank waits. "
                "Use the NCCL backend (one GPU per rank) so the all-reduce runs GPU to GPU and overlaps the "
                "backward; with MPI, a CUDA-aware MPI.", """
dist.init_process_group("nccl")            # instead of "gloo"; one GPU per rank:
torch.cuda.set_device(local_rank)
model = DDP(model.to(local_rank), device_ids=[local_rank])
"""),
    "default": ("The collective goes through host memory (gloo, or a host-staged MPI): the data is copied to the "
                "host, reduced by the CPU and copied back while the GPU waits. Use NCCL or a CUDA-aware MPI so it "
                "runs GPU to GPU.", ""),
}


def host_allreduce(ev: Evidence) -> Finding | None:
    """An all-reduce through host memory: no NCCL kernel, as many bytes copied to the host as back each
    step, and the host waiting (OS waits, MPI calls) while the GPU idles — gloo's CUDA all-reduce, or a
    host-staged MPI. Claims those waits and the copies: GPU to GPU, both go (the copies' time off the GPU,
    the waits off the host), as far as the two-resource bound allows."""
    out, back = ev.get("dtoh_bytes"), ev.get("htod_bytes")
    if ev.get("nccl_count") or ev.per != "step" or min(out, back) < HOST_ALLREDUCE_BYTES:
        return None
    ledger = ev.ledger
    waits = ledger.idle(("os_wait",), causes=r"P?MPI_\w+")  # OS waits and MPI calls
    wait = ledger.ns(waits)
    if max(out, back) > HOST_ALLREDUCE_RATIO * min(out, back) or wait < HOST_WAIT_SHARE * ev.window_ns:
        return None
    copies = ledger.busy("dtoh_pageable", "dtoh_pinned", "htod_pageable", "htod_pinned")
    copied = ledger.ns(copies)
    fix, snippet = pick(HOST_ALLREDUCE_FIX, ev.framework)
    return make_finding(
        ev, "allreduce-through-host",
        f"All-reduce through host memory: {size(out)} copied to the host and {size(back)} back per step, "
        f"no NCCL kernel, and the GPU idles {ms(wait)} per step while the host waits",
        confidence=0.6 if ev.framework == "pytorch" else 0.5, gain_ns=wait + copied, claim=waits | copies,
        what_if=ledger.what_if(wait + copied, busy_removed_ns=copied, host_removed_ns=wait),
        evidence={"dtoh_bytes": out, "htod_bytes": back, "dtoh_ns": ev.get("dtoh_ns"), "htod_ns": ev.get("htod_ns"),
                  "host_wait_idle_ns": wait, "nccl_kernels_per_step": 0.0},
        fix=fix, snippet=snippet)


RULES = [pytorch(r) for r in (ddp_single_gpu, gradient_as_bucket_view, ddp_bucket_overlap, ddp_static_graph,
                              grad_compression)]
