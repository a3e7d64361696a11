"""Input-pipeline rules (first article's ladder): workers → pinned memory → copy overlap → done."""
from __future__ import annotations

import re

from . import Evidence, Finding, make_finding

LOADER_RANGE = re.compile(r"get.?batch|data.?load|load.?batch|next.?batch|fetch|dataloader|input", re.IGNORECASE)

IDLE_HIGH = 0.25           # GPU idle fraction that makes starvation worth fixing
LOADER_SHARE_HIGH = 0.30   # loader sub-range share of the CPU step that marks it as the cause
PAGEABLE_SHARE = 0.5       # share of HtoD bytes from pageable memory that calls for pinning
HIDDEN_OVERLAP = 0.8       # HtoD/kernel overlap counted as hidden
IDLE_OK = 0.10             # GPU idle fraction counted as saturated
MIN_GAIN_SHARE = 0.01      # a fix must be able to save at least this share of the step


def loader_time(ev: Evidence) -> tuple[str, float, float]:
    """The loader-like CPU sub-range with the largest share: (name, median ns, median share)."""
    best = ("", 0.0, 0.0)
    for name, (ns, share) in ev.subranges.items():
        if LOADER_RANGE.search(name) and share > best[2]:
            best = (name, ns, share)
    return best


def pageable_share(ev: Evidence) -> float:
    htod = ev.get("htod_bytes")
    return ev.get("htod_pageable_bytes") / htod if htod else 0.0


def dataloader_workers(ev: Evidence) -> Finding | None:
    """GPU idle while the step's CPU time goes to fetching the batch: load in worker processes."""
    idle = ev.get("idle_fraction")
    name, loader_ns, share = loader_time(ev)
    if idle < IDLE_HIGH or share < LOADER_SHARE_HIGH:
        return None
    return make_finding(
        ev, "dataloader-workers", f"GPU idle {idle:.0%} of the step while '{name}' takes {share:.0%} of the CPU step",
        confidence=0.9 if share >= 0.5 else 0.7,
        gain_ns=min(ev.get("idle_ns"), loader_ns),
        evidence={"gpu_idle_fraction": idle, "gpu_idle_ns": ev.get("idle_ns"), "loader_range": name,
                  "loader_ns": loader_ns, "loader_share_of_cpu_step": share},
        fix="Load batches in background worker processes (DataLoader num_workers > 0), "
            "so the next batch is ready when the GPU finishes the current one.",
        snippet="""
train_loader = DataLoader(dataset, batch_size=BATCH_SIZE,
                          num_workers=8,            # ~ CPU cores available per GPU; tune
                          persistent_workers=True,
                          prefetch_factor=2)
""",
    )


def pin_memory(ev: Evidence) -> Finding | None:
    """Host-to-device copies from pageable memory block the CPU (and munmap follows): pin + non_blocking."""
    share = pageable_share(ev)
    copy_ns, idle_mm = ev.get("htod_pageable_ns"), ev.get("munmap_gpu_idle_ns")
    if share < PAGEABLE_SHARE or copy_ns + idle_mm < MIN_GAIN_SHARE * ev.window_ns:
        return None
    evidence = {"htod_pageable_bytes": ev.get("htod_pageable_bytes"), "htod_pageable_share": share,
                "htod_pageable_ns": copy_ns, "sync_copy_calls": ev.get("sync_copy_calls"),
                "sync_wait_calls": ev.get("sync_wait_calls"), "gpu_idle_fraction": ev.get("idle_fraction")}
    if ev.facts.get("osrt_captured", 1.0):  # without OS runtime data there is no munmap evidence either way
        evidence.update({"munmap_count": ev.get("munmap_count"), "munmap_ns": ev.get("munmap_ns"),
                         "munmap_gpu_idle_ns": idle_mm})
    title = f"{share:.0%} of host-to-device bytes come from pageable memory (synchronous copies)"
    if idle_mm > 0:
        title += f"; GPU idles {idle_mm / 1e6:.1f} ms during munmap after them"
    return make_finding(
        ev, "pin-memory", title,
        confidence=0.9 if idle_mm > 0 or ev.get("sync_wait_calls") > 0 else 0.75,
        gain_ns=copy_ns + idle_mm,
        evidence=evidence,
        fix="Use pinned host memory and asynchronous copies: DataLoader(pin_memory=True) and "
            ".to(device, non_blocking=True), so the CPU launches compute without waiting for the copy.",
        snippet="""
train_loader = DataLoader(dataset, batch_size=BATCH_SIZE, num_workers=8,
                          pin_memory=True)
data = data.to(device, non_blocking=True)
target = target.to(device, non_blocking=True)
""",
    )


def copy_compute_overlap(ev: Evidence) -> Finding | None:
    """Pinned copies that still run serialized with kernels: copy on a side stream / prefetch."""
    htod_ns, hidden = ev.get("htod_ns"), ev.get("htod_hidden_ns")
    exposed = htod_ns - hidden
    if not htod_ns or pageable_share(ev) >= PAGEABLE_SHARE or ev.window_ns == 0:
        return None
    overlap = hidden / htod_ns
    if overlap >= HIDDEN_OVERLAP or exposed < MIN_GAIN_SHARE * ev.window_ns:
        return None
    return make_finding(
        ev, "copy-compute-overlap",
        f"Host-to-device copies are {1 - overlap:.0%} exposed ({exposed / 1e6:.1f} ms per step not hidden under compute)",
        confidence=0.8,
        gain_ns=exposed,
        evidence={"htod_kernel_overlap": overlap, "htod_ns": htod_ns, "htod_exposed_ns": exposed,
                  "htod_exposed_share_of_step": exposed / ev.window_ns,
                  "htod_on_kernel_streams_fraction": ev.facts.get("htod_on_kernel_streams_fraction", float("nan"))},
        fix="Copy batch N+1 on a side CUDA stream while the compute stream runs batch N "
            "(or wrap the loader in a CUDA prefetcher).",
        snippet="""
copy_stream = torch.cuda.Stream()
with torch.cuda.stream(copy_stream):
    next_batch = [t.to(device, non_blocking=True) for t in next(loader_iter)]
# ... compute on the current batch ...
torch.cuda.current_stream().wait_stream(copy_stream)
batch = next_batch
""",
    )


def input_pipeline_ok(ev: Evidence) -> Finding | None:
    """Copies hidden and the GPU saturated: the input pipeline is not the bottleneck."""
    htod_ns = ev.get("htod_ns")
    idle = ev.get("idle_fraction")
    if not htod_ns or idle > IDLE_OK or pageable_share(ev) >= PAGEABLE_SHARE or ev.window_ns == 0:
        return None
    exposed = htod_ns - ev.get("htod_hidden_ns")
    overlap = ev.get("htod_hidden_ns") / htod_ns
    if overlap < HIDDEN_OVERLAP and exposed >= MIN_GAIN_SHARE * ev.window_ns:
        return None
    how = (f"copies {overlap:.0%} hidden under compute" if overlap >= HIDDEN_OVERLAP
           else f"exposed copies only {exposed / ev.window_ns:.1%} of the step")
    return make_finding(
        ev, "input-pipeline-ok",
        f"Input pipeline is not the bottleneck: GPU busy {1 - idle:.0%}, {how}",
        confidence=0.85, gain_ns=0.0, severity="info",
        evidence={"gpu_idle_fraction": idle, "htod_kernel_overlap": overlap, "htod_exposed_ns": exposed},
        fix="Stop tuning data loading; the step is bound by GPU compute: look at the kernels "
            "(mixed precision, torch.compile, larger batch).",
        snippet="",
    )


RULES = [dataloader_workers, pin_memory, copy_compute_overlap, input_pipeline_ok]
