"""Input-pipeline rules (first article's ladder): workers → pinned memory → copy overlap → done.

Rules follow causes, not range names: ``dataloader-workers`` reads the idle-gap attribution (host
work before a step's first launch while the GPU idles, whatever its NVTX range is called);
``pin-memory`` claims only what pinning removes (the copy time beyond a pinned copy of the same
bytes, plus the GPU idle the host spends in blocking copy calls and munmap).
"""
from __future__ import annotations

import re

from ..units import ms, size
from . import Evidence, Finding, make_finding
from .fixes import pick

IDLE_HIGH = 0.20           # GPU idle fraction that makes starvation worth fixing
PRE_LAUNCH_SHARE = 0.15    # host-work idle before the step's first launch, as a share of the step
PAGEABLE_SHARE = 0.5       # share of HtoD bytes from pageable memory that calls for pinning
HIDDEN_OVERLAP = 0.8       # HtoD/kernel overlap counted as hidden
IDLE_OK = 0.10             # GPU idle fraction counted as saturated
MIN_GAIN_SHARE = 0.01      # a fix must be able to save at least this share of the step
HOST_WORK = ("nvtx_range", "untraced", "os_wait", "os_runtime")  # the host busy (or waiting) on its own work
COPY_API = r"cu(da)?Memcpy\w*"

# Achieved pinned host-to-device bandwidth (bytes/ns = GB/s) by PCIe generation, used when the trace has no
# pinned copies of its own to measure: conservative figures for a x16 link.
PCIE_CLASS = [(re.compile(r"H100|H200|H20\b|GH200|B100|B200|GB200|RTX 50|RTX PRO", re.I), "PCIe Gen5 x16", 40.0),
              (re.compile(r"A100|A30|A40|A10|A16|A2\b|L40|L4\b|L20|RTX 30|RTX 40|RTX A|RTX 6000", re.I), "PCIe Gen4 x16", 20.0)]
PCIE_DEFAULT = ("PCIe Gen3 x16", 10.0)

WORKERS_FIX = {
    "pytorch": ("Load batches in background worker processes (DataLoader num_workers > 0), so the next batch is "
                "ready when the GPU finishes the current one.", """
train_loader = DataLoader(dataset, batch_size=BATCH_SIZE,
                          num_workers=8,            # ~ CPU cores available per GPU; tune
                          persistent_workers=True,
                          prefetch_factor=2)
"""),
    "tensorflow": ("Prepare input in parallel and ahead of the step: tf.data with num_parallel_calls and prefetch.", """
dataset = dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
"""),
    "default": ("The GPU waits while the host prepares each step's input. Prepare step N+1's input in a background "
                "thread or process (double buffering) while the GPU runs step N, or move that work to the GPU.", ""),
}

PIN_FIX = {
    "pytorch": ("Use pinned host memory and asynchronous copies: DataLoader(pin_memory=True) and "
                ".to(device, non_blocking=True), so the CPU launches compute without waiting for the copy.", """
train_loader = DataLoader(dataset, batch_size=BATCH_SIZE, num_workers=8,
                          pin_memory=True)
data = data.to(device, non_blocking=True)
target = target.to(device, non_blocking=True)
"""),
    "cuda": ("Copy from page-locked host memory: allocate the host buffers with cudaMallocHost (or pin existing ones "
             "with cudaHostRegister) and copy with cudaMemcpyAsync on a stream, so the copy runs at full link "
             "speed without staging and the host does not block.", """
float *h_buf;
cudaMallocHost(&h_buf, bytes);                 // once, instead of malloc/new
cudaMemcpyAsync(d_buf, h_buf, bytes, cudaMemcpyHostToDevice, stream);
"""),
    "openmp": ("The same host arrays are copied every iteration from pageable memory. Keep them on the device "
               "across iterations with a target data region (or enter/exit data), and update only what changes.", """
#pragma omp target data map(tofrom: u[0:n], u_tmp[0:n])
for (int it = 0; it < iters; ++it) {
    #pragma omp target teams distribute parallel for
    for (int i = 0; i < n; ++i) { /* ... */ }
}
"""),
    "default": ("Host-to-device copies come from pageable memory: copy from page-locked (pinned) host buffers "
                "asynchronously, and keep data that does not change on the device between iterations.", ""),
}

OVERLAP_FIX = {
    "pytorch": ("Copy batch N+1 on a side CUDA stream while the compute stream runs batch N "
                "(or wrap the loader in a CUDA prefetcher).", """
copy_stream = torch.cuda.Stream()
with torch.cuda.stream(copy_stream):
    next_batch = [t.to(device, non_blocking=True) for t in next(loader_iter)]
# ... compute on the current batch ...
torch.cuda.current_stream().wait_stream(copy_stream)
batch = next_batch
"""),
    "cuda": ("Overlap copies with kernels: issue the next chunk's cudaMemcpyAsync on a second stream while the "
             "current chunk's kernels run, and order them with events.", """
cudaMemcpyAsync(d_next, h_next, bytes, cudaMemcpyHostToDevice, copy_stream);
cudaEventRecord(copied, copy_stream);
kernel<<<grid, block, 0, compute_stream>>>(d_cur);
cudaStreamWaitEvent(compute_stream, copied, 0);
"""),
    "default": ("Copies run serialized with the kernels: issue the next input's copy on a second stream while the "
                "current one computes (double buffering).", ""),
}

OK_FIX = {
    "pytorch": ("Stop tuning data loading; the step is bound by GPU compute: look at the kernels "
                "(`nsysanalyze kernels`; mixed precision, torch.compile, larger batch).", ""),
    "default": ("Stop tuning data transfer; the step is bound by GPU compute: look at the kernels "
                "(`nsysanalyze kernels`).", ""),
}


def dataloader_workers(ev: Evidence) -> Finding | None:
    """GPU idle while the host prepares the step before launching it (loading the batch on the critical path)."""
    idle = ev.get("idle_fraction")
    if ev.per != "step" or idle < IDLE_HIGH or ev.gaps.empty:  # the cheap tests first: this runs per device
        return None
    pre = ev.gaps[ev.gaps["cause_kind"].isin(HOST_WORK)]
    pre_ns = float(pre["before_launch_ns"].sum()) if len(pre) else 0.0
    if not pre_ns or pre_ns < PRE_LAUNCH_SHARE * ev.window_ns:
        return None
    top = pre.sort_values("before_launch_ns", ascending=False).iloc[0]
    where = {"nvtx_range": f"'{top['cause']}'", "untraced": "code no traced call covers (Python/CPU work)"}.get(
        top["cause_kind"], str(top["cause"]))
    fix, snippet = pick(WORKERS_FIX, ev.framework)
    return make_finding(
        ev, "dataloader-workers",
        f"GPU idle {idle:.0%} of the step; {ms(pre_ns)} of it before the step's first launch while the "
        f"host works in {where}",
        confidence=0.9 if pre_ns >= 0.5 * ev.get("idle_ns") else 0.7,
        gain_ns=pre_ns,
        evidence={"gpu_idle_fraction": idle, "gpu_idle_ns": ev.get("idle_ns"), "idle_before_first_launch_ns": pre_ns,
                  "top_cause": str(top["cause"]), "top_cause_kind": str(top["cause_kind"]),
                  "top_cause_idle_ns": float(top["before_launch_ns"])},
        fix=fix, snippet=snippet,
    )


def pageable_share(ev: Evidence) -> float:
    htod = ev.get("htod_bytes")
    return ev.get("htod_pageable_bytes") / htod if htod else 0.0


def pinned_bandwidth(ev: Evidence) -> tuple[float, str]:
    """Pinned host-to-device bandwidth (bytes/ns) and its basis: this trace's own pinned copies when it has
    some (≥ 1 MB per step), else the GPU's PCIe class."""
    pinned_bytes, pinned_ns = ev.get("htod_pinned_bytes"), ev.get("htod_pinned_ns")
    if pinned_bytes >= 1e6 and pinned_ns > 0:
        return pinned_bytes / pinned_ns, "pinned host-to-device copies in this trace"
    for pattern, link, bw in PCIE_CLASS:
        if pattern.search(ev.gpu_name):
            return bw, f"{link} class of {ev.gpu_name} (assumed {bw:.0f} GB/s)"
    return PCIE_DEFAULT[1], f"{PCIE_DEFAULT[0]} (assumed {PCIE_DEFAULT[1]:.0f} GB/s; GPU {ev.gpu_name or 'unknown'})"


def pin_memory(ev: Evidence) -> Finding | None:
    """Host-to-device copies from pageable memory: slower than pinned and blocking the host (munmap may follow).

    Gain = pageable copy time beyond a pinned copy of the same bytes + the GPU idle while the host is in
    copy calls and after their syncs (its host-to-device part, by bytes) + the GPU idle during munmap."""
    share = pageable_share(ev)
    copy_ns, pageable_bytes = ev.get("htod_pageable_ns"), ev.get("htod_pageable_bytes")
    if share < PAGEABLE_SHARE or not pageable_bytes:
        return None
    bw, basis = pinned_bandwidth(ev)
    faster_ns = max(0.0, copy_ns - pageable_bytes / bw)
    htod_part = pageable_bytes / (pageable_bytes + ev.get("dtoh_pageable_bytes"))
    blocked_ns = (ev.idle_by(causes=(COPY_API,)) + ev.after_sync_idle_ns) * htod_part
    idle_mm = ev.get("munmap_gpu_idle_ns")
    gain = faster_ns + blocked_ns + idle_mm
    if gain < MIN_GAIN_SHARE * ev.window_ns:
        return None
    evidence = {"htod_pageable_bytes": pageable_bytes, "htod_pageable_share": share, "htod_pageable_ns": copy_ns,
                "pinned_copy_estimate_ns": pageable_bytes / bw, "pinned_bandwidth_gbps": bw,
                "pinned_bandwidth_basis": basis, "gpu_idle_in_and_after_copy_calls_ns": blocked_ns,
                "sync_copy_calls": ev.get("sync_copy_calls"), "gpu_idle_fraction": ev.get("idle_fraction")}
    if ev.facts.get("osrt_captured", 1.0):  # without OS runtime data there is no munmap evidence either way
        evidence.update({"munmap_count": ev.get("munmap_count"), "munmap_ns": ev.get("munmap_ns"),
                         "munmap_gpu_idle_ns": idle_mm})
    title = f"{share:.0%} of host-to-device bytes come from pageable memory ({size(pageable_bytes)} per {ev.per})"
    if idle_mm > 0:
        title += (f"; {ev.get('munmap_count'):.0f} munmap calls ({ms(ev.get('munmap_ns'))}) leave the GPU "
                  f"idle {ms(idle_mm)}")
    fix, snippet = pick(PIN_FIX, ev.framework)
    return make_finding(ev, "pin-memory", title,
                        confidence=0.9 if idle_mm > 0 or blocked_ns > 0 else 0.75,
                        gain_ns=gain, evidence=evidence, fix=fix, snippet=snippet)


def copy_compute_overlap(ev: Evidence) -> Finding | None:
    """Pinned copies that still run serialized with kernels: copy on a side stream / prefetch."""
    htod_ns, hidden = ev.get("htod_ns"), ev.get("htod_hidden_ns")
    exposed = htod_ns - hidden
    if not htod_ns or pageable_share(ev) >= PAGEABLE_SHARE or ev.window_ns == 0:
        return None
    overlap = hidden / htod_ns
    if overlap >= HIDDEN_OVERLAP or exposed < MIN_GAIN_SHARE * ev.window_ns:
        return None
    fix, snippet = pick(OVERLAP_FIX, ev.framework)
    return make_finding(
        ev, "copy-compute-overlap",
        f"Host-to-device copies are {1 - overlap:.0%} exposed ({ms(exposed)} per {ev.per} not hidden under compute)",
        confidence=0.8,
        gain_ns=exposed,
        evidence={"htod_kernel_overlap": overlap, "htod_ns": htod_ns, "htod_exposed_ns": exposed,
                  "htod_exposed_share": exposed / ev.window_ns,
                  "htod_on_kernel_streams_fraction": ev.facts.get("htod_on_kernel_streams_fraction", float("nan"))},
        fix=fix, snippet=snippet,
    )


def input_pipeline_ok(ev: Evidence) -> Finding | None:
    """Copies hidden (or none) and the GPU saturated: the input pipeline is not the bottleneck."""
    htod_ns = ev.get("htod_ns")
    idle = ev.get("idle_fraction")
    if idle > IDLE_OK or pageable_share(ev) >= PAGEABLE_SHARE or ev.window_ns == 0 or not ev.get("kernel_ns"):
        return None
    exposed = htod_ns - ev.get("htod_hidden_ns")
    overlap = ev.get("htod_hidden_ns") / htod_ns if htod_ns else 1.0
    if overlap < HIDDEN_OVERLAP and exposed >= MIN_GAIN_SHARE * ev.window_ns:
        return None
    how = ("no host-to-device copies" if not htod_ns else f"copies {overlap:.0%} hidden under compute"
           if overlap >= HIDDEN_OVERLAP else f"exposed copies only {exposed / ev.window_ns:.1%} of the {ev.per}")
    fix, snippet = pick(OK_FIX, ev.framework)
    return make_finding(
        ev, "input-pipeline-ok",
        f"Input pipeline is not the bottleneck: GPU busy {1 - idle:.0%}, {how}",
        confidence=0.85, gain_ns=0.0, severity="info",
        evidence={"gpu_idle_fraction": idle, "htod_kernel_overlap": overlap, "htod_exposed_ns": exposed},
        fix=fix, snippet=snippet,
    )


RULES = [dataloader_workers, pin_memory, copy_compute_overlap, input_pipeline_ok]
