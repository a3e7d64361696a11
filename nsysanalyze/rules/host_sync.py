"""GPU-to-CPU rules (the articles' series, device-to-host part): copies back and host syncs every step.

A host sync (``.item()``, ``.cpu()``, ``cudaStreamSynchronize``) drains the GPU's queue: until the
host launches again the GPU waits (the attribution's after-sync idle, Evidence.after_sync_idle_ns).
A device-to-host copy on the compute stream also stops compute while it runs (dtoh_ns - dtoh_hidden_ns).
Pageable host-to-device copies sync too (PyTorch's blocking .to()): that idle is pin-memory's.
"""
from __future__ import annotations

from ..units import ms, size
from . import Evidence, Finding, make_finding
from .fixes import pick

MIN_SHARE = 0.05       # stall (exposed copy + post-sync idle) worth fixing, as a share of the step
MIN_DTOH_BYTES = 1e6   # bytes copied back per step that make the copies, not the syncs, the subject
SYNC_API = r"cu(da)?(Stream|Device|Ctx|Event)Synchronize"

DTOH_FIX = {
    "pytorch": ("Keep per-step values on the GPU and sync every N steps; copy outputs into a preallocated pinned "
                "buffer with non_blocking=True on a side stream, and wait on an event only where the values are read.", """
loss_sum += loss.detach()                      # no .item() every step
if step % 50 == 0:
    print(loss_sum.item() / 50); loss_sum.zero_()
copy_stream.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(copy_stream):
    host_buf.copy_(out.detach(), non_blocking=True)   # host_buf = torch.empty(..., pin_memory=True)
    out.record_stream(copy_stream)
    ready = torch.cuda.Event(); ready.record(copy_stream)
# ... later, where the values are needed:  ready.synchronize()
"""),
    "cuda": ("Copy results back asynchronously into pinned memory on a second stream and synchronize on an event "
             "only when the host needs them (every N iterations if possible).", """
cudaMallocHost(&h_out, bytes);                                   // once
cudaEventRecord(done, compute_stream);
cudaStreamWaitEvent(copy_stream, done, 0);
cudaMemcpyAsync(h_out, d_out, bytes, cudaMemcpyDeviceToHost, copy_stream);
cudaEventRecord(copied, copy_stream);
// ... launch the next iteration; cudaEventSynchronize(copied) only where h_out is read
"""),
    "openmp": ("Bring results back less often and without stalling: keep arrays mapped with a target data region "
               "and use 'target update from(...)' every N iterations, with nowait/depend where possible.", """
#pragma omp target data map(tofrom: u[0:n])
for (int it = 0; it < iters; ++it) {
    /* ... target kernels ... */
    if (it % 100 == 0) {
        #pragma omp target update from(u[0:n])
    }
}
"""),
    "default": ("Copy results back less often and asynchronously (pinned buffers, a side stream, wait only where "
                "the values are read); keep per-step metrics on the device.", ""),
}

SYNC_FIX = {
    "pytorch": ("Remove per-step host synchronizations (.item(), .cpu(), torch.cuda.synchronize(), printing "
                "tensors): accumulate on the GPU and read every N steps, so the host can run ahead.", """
# instead of  if loss.item() > thresh: ...   or torch.cuda.synchronize() each step
if step % 50 == 0:
    print(loss.detach().float().item())
"""),
    "cuda": ("Remove per-iteration cudaDeviceSynchronize/cudaStreamSynchronize: order work with streams and "
             "events and synchronize only where the host needs results.", """
cudaEventRecord(done, stream);          // instead of cudaDeviceSynchronize() every iteration
// ... keep launching; cudaEventSynchronize(done) only where results are read
"""),
    "default": ("The host waits for the GPU every step and the GPU then waits for the host: synchronize only where "
                "results are needed, and order work with streams/events instead.", ""),
}


def in_sync_idle(ev: Evidence) -> float:
    """GPU idle while the host sits in a synchronize call, not already counted as after an earlier sync."""
    return ev.idle_by(causes=(SYNC_API,)) - ev.idle_by(causes=(SYNC_API,), tag="after_sync_ns")


def dtoh_sync(ev: Evidence) -> Finding | None:
    """Per-step device-to-host copies and the syncs after them stall the GPU."""
    if ev.get("dtoh_bytes") < MIN_DTOH_BYTES:
        return None
    exposed = max(0.0, ev.get("dtoh_ns") - ev.get("dtoh_hidden_ns"))
    post_sync = ev.after_sync_idle_ns
    in_sync = in_sync_idle(ev)
    stall = exposed + post_sync + in_sync
    if stall < MIN_SHARE * ev.window_ns:
        return None
    fix, snippet = pick(DTOH_FIX, ev.framework)
    return make_finding(
        ev, "dtoh-sync",
        f"Device-to-host copies stall {'every step' if ev.per == 'step' else 'the capture'}: {size(ev.get('dtoh_bytes'))} copied back ({ms(exposed)} not hidden "
        f"under compute), then the GPU waits {ms(post_sync)} after host syncs",
        confidence=0.85 if ev.get("dtoh_pageable_bytes") > 0 or post_sync > 0 else 0.7,
        gain_ns=stall,
        evidence={"dtoh_bytes": ev.get("dtoh_bytes"), "dtoh_pageable_bytes": ev.get("dtoh_pageable_bytes"),
                  "dtoh_count": ev.get("dtoh_count"), "dtoh_ns": ev.get("dtoh_ns"), "dtoh_exposed_ns": exposed,
                  "post_sync_idle_ns": post_sync, "gpu_idle_in_sync_calls_ns": in_sync,
                  "sync_wait_calls": ev.get("sync_wait_calls"), "async_copy_calls": ev.get("async_copy_calls")},
        fix=fix, snippet=snippet,
    )


def host_sync(ev: Evidence) -> Finding | None:
    """Explicit synchronizations that leave the GPU waiting, with no device-to-host copy to explain them."""
    if ev.get("dtoh_bytes") >= MIN_DTOH_BYTES or ev.get("htod_pageable_bytes") > 0 or ev.get("sync_wait_calls") < 1:
        return None
    stall = ev.after_sync_idle_ns + in_sync_idle(ev)
    if stall < MIN_SHARE * ev.window_ns:
        return None
    fix, snippet = pick(SYNC_FIX, ev.framework)
    after = ev.gaps.sort_values("after_sync_ns", ascending=False).iloc[0]
    where = f" (mostly while the host works in '{after['cause']}')" if after["cause_kind"] == "nvtx_range" else ""
    return make_finding(
        ev, "host-sync",
        f"{ev.get('sync_wait_calls'):.0f} host synchronization(s) per {ev.per} leave the GPU waiting "
        f"{ms(stall)} for the host to launch again{where}",
        confidence=0.7, gain_ns=stall,
        evidence={"sync_wait_calls": ev.get("sync_wait_calls"), "sync_wait_ns": ev.get("sync_wait_ns"),
                  "post_sync_idle_ns": ev.after_sync_idle_ns, "gpu_idle_fraction": ev.get("idle_fraction")},
        fix=fix, snippet=snippet,
    )


RULES = [dtoh_sync, host_sync]
