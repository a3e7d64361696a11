"""Input-pipeline rules (first article's ladder): workers → pinned memory → copy overlap → done.

Rules follow causes, not range names: ``dataloader-workers`` claims the ledger's idle rows of host
work before a step's first launch (whatever its NVTX range is called); ``pin-memory`` claims only what
pinning removes (the pageable copies' time beyond a pinned copy of the same bytes, the GPU idle while
the host is in blocking copy calls and munmap, and the idle after syncs when the copies are the only
syncs); ``copy-compute-overlap`` the pinned copies not hidden, at most the compute they could hide under.
Copy classes that take less than MIN_GAIN_SHARE of the window are ignored when taking shares (an
8-byte scalar copy does not make a step "100% pageable").
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
MIN_SHARE_LINK = 0.05      # exposed copies at the link's rate worth a finding, as a share of the step
HOST_WORK = ("nvtx_range", "untraced", "os_wait", "os_runtime")  # the host busy (or waiting) on its own work
AFTER_SYNC_WORK = ("untraced", "launch", "cuda_blocking", "nvtx_range")  # host work a sync exposes (not OS calls)
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
    "jax": ("Prepare the next batches while the current step runs: build them in a background thread and put them "
            "on the device ahead (a small prefetch queue of jax.device_put arrays).", """
import queue, threading
def prefetch_to_device(batches, size=2):
    q = queue.Queue(size)
    threading.Thread(target=lambda: [q.put(jax.device_put(b)) for b in batches] + [q.put(None)], daemon=True).start()
    while (b := q.get()) is not None:
        yield b
for batch in prefetch_to_device(make_batches()):
    state = train_step(state, batch)
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
    "cupy": ("Copy from pinned host memory: allocate the host arrays once in page-locked memory and copy them "
             "asynchronously on a stream.", """
host = cupyx.empty_pinned(shape, dtype)          # once, instead of numpy.empty
host[...] = next_batch                           # fill it on the host
dev.set(host, stream=copy_stream)                # asynchronous at full link speed
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

SLOW_WORKERS_FIX = {
    "pytorch": ("The DataLoader already has workers (they hand batches over shared memory: munmap in the step) but "
                "cannot keep up: more workers, a cheaper __getitem__ (decode/resize once, cache), and augmentation "
                "on the GPU on whole batches.", """
train_loader = DataLoader(dataset, batch_size=BATCH_SIZE, num_workers=16,   # more, up to the free cores
                          persistent_workers=True, prefetch_factor=4, pin_memory=True)
# augment on the GPU, per batch: torchvision.transforms.v2 on CUDA tensors (or NVIDIA DALI)
"""),
    "default": ("The loader's workers cannot keep up: more of them, cheaper per-sample work, augmentation on the GPU.",
                ""),
}
BEFORE_LAUNCH_FIX = {
    "default": ("The host works before launching each step while the GPU waits, with no sign of data loading: "
                "prepare step N+1's work while the GPU runs step N (a background thread or process), or move it "
                "to the GPU.", ""),
}
LINK_FIX = {
    "pytorch": ("The copies are pinned, asynchronous and at the link's rate, with too little compute to hide them: "
                "only moving fewer bytes helps — keep the data resident on the GPU, send lower precision "
                "(uint8/bf16, convert on the GPU), or compress.", """
x = batch_uint8.to(device, non_blocking=True).float().div_(255)   # 4x fewer bytes than float32
"""),
    "default": ("The copies are pinned, asynchronous and at the link's rate, with too little compute to hide them: "
                "only moving fewer bytes helps — keep data resident on the device, send lower precision, compress.",
                ""),
}
LOADER_RANGE = re.compile(r"(?i).*(batch|data|load|input|fetch|prefetch|sampl|augment|collat|decode|read).*")
# ranges a framework opens around each op of a compiled program, named after the op, never the program's own step
# parts: XLA's 'XlaModule:#hlo_module=jit_step...#' and 'Thunk:#hlo_op=input_reduce_fusion...#' ('input' is a fusion kind)
OP_RANGE = re.compile(r"^(Thunk|XlaModule):#")
LINK_RATE_SHARE = 0.8      # achieved pinned copy rate, as a share of the link class, counted as at the limit

OK_FIX = {
    "pytorch": ("Stop tuning data loading; the step is bound by GPU compute: look at the kernels "
                "(`nsysanalyze kernels`; mixed precision, torch.compile, larger batch).", ""),
    "default": ("Stop tuning data transfer; the step is bound by GPU compute: look at the kernels "
                "(`nsysanalyze kernels`).", ""),
}


def loads_data(ev: Evidence) -> bool:
    """Evidence of data loading in the step: a host-to-device copy every step, or a loader-like NVTX sub-range of
    the program's own (a copy that happens once in a capture is an upload, not an input pipeline; a framework's
    per-op ranges, OP_RANGE, name ops)."""
    return (ev.per == "step" and ev.get("htod_count") >= 1) or any(
        LOADER_RANGE.fullmatch(n) and not OP_RANGE.match(n) for n in ev.subranges)


def dataloader_workers(ev: Evidence) -> Finding | None:
    """GPU idle while the host prepares the step before launching it (loading the batch on the critical path).

    Claims the idle rows of host work before the step's first launch; the fix takes that work off the
    host's critical path, so the step still lasts at least its GPU work and the rest of the host's work."""
    idle = ev.get("idle_fraction")
    if ev.per != "step" or idle < IDLE_HIGH or ev.gaps.empty:  # the cheap tests first: this runs per device
        return None
    ledger = ev.ledger
    if ledger.ns(ledger.idle(HOST_WORK, before_launch=True, free=False)) < PRE_LAUNCH_SHARE * ev.window_ns:
        return None  # the pattern, on all such idle; the claim, on what no finding before took
    claim = ledger.idle(HOST_WORK, before_launch=True)
    pre_ns = ledger.ns(claim)
    if not pre_ns or not significant(ev, pre_ns):  # the pattern held, but a finding before took nearly all of it
        return None
    top = ledger.causes(claim)
    (top_kind, top_cause), top_ns = top[0]
    loading = loads_data(ev)
    if not loading and ev.get("module_load_calls") >= 1:  # a step that loads kernels compiles before it launches:
        return None  # the residual names the recompilation or autotuning (no batch to prepare ahead)
    # DataLoader workers hand batches over shared memory (munmap), and the main thread waits for them
    workers = ev.get("munmap_count") >= 1 or (top_kind == "os_wait" and loading)
    where = {"nvtx_range": f"works in '{top_cause}'", "untraced": "works in code no traced call covers (Python/CPU work)",
             "os_wait": f"waits in {top_cause}" + (" for the loader's workers" if loading else "")}.get(
        top_kind, f"works in {top_cause}")
    fix, snippet = (pick(SLOW_WORKERS_FIX if workers else WORKERS_FIX, ev.framework) if loading
                    else pick(BEFORE_LAUNCH_FIX, ev.framework))
    return make_finding(
        ev, "dataloader-workers" if loading else "host-before-launch",
        f"GPU idle {idle:.0%} of the step; {ms(pre_ns)} of it before the step's first launch while the "
        f"host {where}",
        confidence=0.9 if pre_ns >= 0.5 * ev.get("idle_ns") else 0.7,
        gain_ns=pre_ns, claim=claim, what_if=ledger.what_if(pre_ns, host_removed_ns=pre_ns),
        evidence={"gpu_idle_fraction": idle, "gpu_idle_ns": ev.get("idle_ns"), "idle_before_first_launch_ns": pre_ns,
                  "top_cause": str(top_cause), "top_cause_kind": str(top_kind), "top_cause_idle_ns": top_ns,
                  "loader_workers_seen": float(workers)},
        fix=fix, snippet=snippet,
    )


def significant(ev: Evidence, ns: float) -> bool:
    """Whether ``ns`` of the window is at least the smallest gain worth reporting (MIN_GAIN_SHARE)."""
    return ns >= MIN_GAIN_SHARE * ev.window_ns if ev.window_ns else ns > 0


def pageable_share(ev: Evidence) -> float:
    """Share of host-to-device bytes copied from pageable memory, 0 when those copies take less than the
    smallest gain worth reporting (no "100% pageable" from a scalar)."""
    htod = ev.get("htod_bytes")
    if not htod or not significant(ev, ev.get("htod_pageable_ns")):
        return 0.0
    return ev.get("htod_pageable_bytes") / htod


def pinned_bandwidth(ev: Evidence) -> tuple[float, str]:
    """Pinned host-to-device bandwidth (bytes/ns) and its basis: this trace's own pinned copies when it has
    some (≥ 1 MB per step), else the GPU's PCIe class."""
    pinned_bytes, pinned_ns = ev.get("htod_pinned_bytes"), ev.get("htod_pinned_ns")
    if pinned_bytes >= 1e6 and pinned_ns > 0:
        return pinned_bytes / pinned_ns, "pinned host-to-device copies in this trace"
    pageable_ns = ev.get("htod_pageable_ns")
    achieved = ev.get("htod_pageable_bytes") / pageable_ns if pageable_ns else 0.0
    for pattern, link, bw in PCIE_CLASS:
        if pattern.search(ev.gpu_name):
            break
    else:
        link, bw = PCIE_DEFAULT
    if achieved > bw:  # the pageable copies already beat the assumed link: pinning cannot be slower
        return achieved, f"the pageable copies' own rate ({achieved:.1f} GB/s, above the assumed {link} rate)"
    return bw, f"{link} class of {ev.gpu_name or 'an unknown GPU'} (assumed {bw:.0f} GB/s)"


def pin_memory(ev: Evidence) -> Finding | None:
    """Host-to-device copies from pageable memory: slower than pinned and blocking the host (munmap may follow).

    Claims the pageable copies' busy time (pinning saves the part beyond a pinned copy of the same bytes),
    the idle while the host is in copy calls or munmap, and the idle after syncs when the copies are the
    program's only syncs (no explicit synchronize call)."""
    share = pageable_share(ev)
    copy_ns, pageable_bytes = ev.get("htod_pageable_ns"), ev.get("htod_pageable_bytes")
    if share < PAGEABLE_SHARE or not pageable_bytes:
        return None
    ledger = ev.ledger
    bw, basis = pinned_bandwidth(ev)
    pinned_ns = pageable_bytes / bw
    copies = ledger.busy("htod_pageable")
    faster_ns = max(0.0, min(ledger.ns(copies), copy_ns - pinned_ns))
    in_calls, munmap = ledger.idle(causes=COPY_API), ledger.idle(causes="munmap")
    after = ledger.idle(AFTER_SYNC_WORK, after_sync=True) & (ev.get("sync_wait_calls") < 1)
    blocked_ns, idle_mm = ledger.ns(in_calls | after), ledger.ns(munmap)
    removable = faster_ns + blocked_ns + idle_mm
    if not significant(ev, removable):
        return None
    evidence = {"htod_pageable_bytes": pageable_bytes, "htod_pageable_share": share, "htod_pageable_ns": copy_ns,
                "pinned_copy_estimate_ns": pinned_ns, "pinned_bandwidth_gbps": bw,
                "pinned_bandwidth_basis": basis, "gpu_idle_in_and_after_copy_calls_ns": blocked_ns,
                "sync_copy_calls": ev.get("sync_copy_calls"), "gpu_idle_fraction": ev.get("idle_fraction")}
    if ev.facts.get("osrt_captured", 1.0):  # without OS runtime data there is no munmap evidence either way
        evidence.update({"munmap_count": ev.get("munmap_count"), "munmap_ns": ev.get("munmap_ns"),
                         "munmap_gpu_idle_ns": idle_mm})
    title = f"{share:.0%} of host-to-device bytes come from pageable memory ({size(pageable_bytes)} per {ev.per})"
    if idle_mm > 0:
        title += (f"; {ev.get('munmap_count'):.0f} munmap calls ({ms(ev.get('munmap_ns'))}) leave the GPU "
                  f"idle {ms(idle_mm)}")
    fix, snippet = pick(PIN_FIX, ev.framework if loads_data(ev) or ev.framework != "pytorch" else "default")
    return make_finding(ev, "pin-memory", title,
                        confidence=0.9 if idle_mm > 0 or blocked_ns > 0 else 0.75,
                        gain_ns=removable, claim=copies | in_calls | after | munmap,
                        what_if=ledger.what_if(removable, busy_removed_ns=faster_ns, host_removed_ns=idle_mm),
                        evidence=evidence, fix=fix, snippet=snippet)


def copy_compute_overlap(ev: Evidence) -> Finding | None:
    """Pinned copies that still run serialized with kernels: copy on a side stream / prefetch.

    Claims the exposed pinned copies; overlapping them hides at most the compute not already under copies."""
    htod_ns, hidden = ev.get("htod_ns"), ev.get("htod_hidden_ns")
    exposed = htod_ns - hidden
    if not htod_ns or pageable_share(ev) >= PAGEABLE_SHARE or ev.window_ns == 0:
        return None
    overlap = hidden / htod_ns
    if overlap >= HIDDEN_OVERLAP or not significant(ev, exposed):
        return None
    ledger = ev.ledger
    claim = ledger.busy("htod_pinned", "htod_pageable")
    compute_free = max(0.0, ev.get("kernel_ns") - ev.get("memcpy_hidden_ns"))
    removable = min(ledger.ns(claim), exposed) if len(ledger) else exposed
    if not significant(ev, min(removable, compute_free)):  # nothing to hide the copies under: link-bound's
        return None
    fix, snippet = pick(OVERLAP_FIX, ev.framework)
    return make_finding(
        ev, "copy-compute-overlap",
        f"Host-to-device copies are {1 - overlap:.0%} exposed ({ms(exposed)} per {ev.per} not hidden under compute)",
        confidence=0.8,
        gain_ns=removable, claim=claim,
        what_if=ledger.what_if(removable, busy_removed_ns=min(removable, compute_free),
                               caps={"compute not under copies": compute_free}),
        evidence={"htod_kernel_overlap": overlap, "htod_ns": htod_ns, "htod_exposed_ns": exposed,
                  "htod_exposed_share": exposed / ev.window_ns,
                  "htod_on_kernel_streams_fraction": ev.facts.get("htod_on_kernel_streams_fraction", float("nan"))},
        fix=fix, snippet=snippet,
    )


def link_bound(ev: Evidence) -> Finding | None:
    """Pinned, asynchronous host-to-device copies at the link's rate with too little compute to hide them:
    bound by the link. Claims the exposed pinned copies left; moving half the bytes (lower precision)
    would save at most half of them."""
    pinned_ns, pinned_bytes = ev.get("htod_pinned_ns"), ev.get("htod_pinned_bytes")
    if not pinned_ns or pageable_share(ev) >= PAGEABLE_SHARE or ev.get("sync_copy_calls") >= 1:
        return None
    ledger = ev.ledger
    claim = ledger.busy("htod_pinned")
    exposed = ledger.ns(claim)
    rate = pinned_bytes / pinned_ns  # bytes/ns = GB/s
    link = next((bw for pattern, _, bw in PCIE_CLASS if pattern.search(ev.gpu_name)), PCIE_DEFAULT[1])
    if rate < LINK_RATE_SHARE * link or not significant(ev, exposed) or exposed < MIN_SHARE_LINK * ev.window_ns:
        return None
    fix, snippet = pick(LINK_FIX, ev.framework)
    return make_finding(
        ev, "link-bound",
        f"Host-to-device copies run at {rate:.1f} GB/s, the link's rate, and {ms(exposed)} of them per "
        f"{ev.per} have no compute to hide under: only fewer bytes help",
        confidence=0.75, gain_ns=exposed / 2, claim=claim,
        what_if=ledger.what_if(exposed / 2, busy_removed_ns=exposed / 2, caps={"half the bytes": exposed / 2}),
        evidence={"htod_pinned_bytes": pinned_bytes, "htod_pinned_ns": pinned_ns, "achieved_gbps": rate,
                  "link_class_gbps": link, "htod_exposed_ns": exposed, "kernel_ns": ev.get("kernel_ns")},
        fix=fix, snippet=snippet)


def input_pipeline_ok(ev: Evidence) -> Finding | None:
    """Copies hidden (or none) and the GPU saturated: the input pipeline is not the bottleneck."""
    htod_ns = ev.get("htod_ns")
    idle = ev.get("idle_fraction")
    if idle > IDLE_OK or pageable_share(ev) >= PAGEABLE_SHARE or ev.window_ns == 0 or not ev.get("kernel_ns"):
        return None
    exposed = htod_ns - ev.get("htod_hidden_ns")
    overlap = ev.get("htod_hidden_ns") / htod_ns if htod_ns else 1.0
    if overlap < HIDDEN_OVERLAP and significant(ev, exposed):
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

