"""GPU-to-CPU rules (the articles' series, device-to-host part): copies back and host syncs every step.

A host sync (``.item()``, ``.cpu()``, ``cudaStreamSynchronize``) drains the GPU's queue: until the
host launches again the GPU waits (the ledger's after-sync idle rows, and the idle while the host is
still in the sync call). A device-to-host copy on the compute stream also stops compute while it runs
(the ledger's DtoH busy rows). Pageable host-to-device copies sync too (PyTorch's blocking .to()): that
idle is pin-memory's, which claims it first.

When the step's host-to-device copies are at least half as many as its syncs (and copies back are not), the
syncs are the host waiting for its own copies (``.to(device)`` without ``non_blocking``): the fix names them.
When nearly every copy back is one byte (FLAG_BYTES), the host reads boolean flags (``if t.any():``, ``bool(t)``);
from PER_NODE_READS per step, with the GPU waiting after them mostly on another thread's launches (autograd's), that
is PyTorch's anomaly detection checking every backward node (it also records a Python traceback for every forward
op, host work this bound does not price): the fix names it.

What removing a sync can gain: at most the idle it causes — in and right after the sync, and the short
launch gaps of the host catching up after it, as far as the bound allows — no more than the GPU work that
could have been queued meanwhile (the window's GPU busy time), and the step still lasts the host's own
work (host work between syncs stays): window − max(GPU work, host work).
"""
from __future__ import annotations

from ..attribution import OTHER_THREAD_LAUNCHES
from ..units import ms, size
from . import Evidence, Finding, make_finding
from .fixes import pick
from .input_pipeline import AFTER_SYNC_WORK, pinned_bandwidth, significant

MIN_SHARE = 0.05       # stall (exposed copy + post-sync idle) worth fixing, as a share of the step
MIN_DTOH_BYTES = 1e6   # bytes copied back per step that make the copies, not the syncs, the subject
SYNC_API = r"cu(da)?(Stream|Device|Ctx|Event)Synchronize"
PER_NODE_READS = 10    # one-byte reads per step from which they are a per-operation check, not the step's own
FLAG_BYTES = 1.25      # bytes per copy back, on average, of flag reads (one byte each; a 4-byte scalar in 13 allowed)

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


COPY_SYNC_FIX = {  # the syncs are the host waiting for its own host-to-device copies
    "pytorch": ("The syncs come with the {per}'s {copies:.0f} host-to-device copies: .to(device) without "
                "non_blocking=True waits for each copy ({pageable}). Pin the batch (DataLoader(pin_memory=True) or "
                ".pin_memory()) and copy with non_blocking=True, so the host runs ahead; many small tensors: put "
                "them in one buffer and copy it once.", """
batch = {k: v.pin_memory() for k, v in batch.items()}        # or DataLoader(..., pin_memory=True)
batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
# many small tensors: one pinned buffer, one copy, views on the GPU
flat = torch.cat([v.flatten() for v in batch.values()]).pin_memory().to(device, non_blocking=True)
"""),
    "cuda": ("The syncs come with the {per}'s {copies:.0f} host-to-device copies ({pageable}): a copy from "
             "pageable memory, or cudaMemcpy, blocks the host. Copy from cudaMallocHost buffers with "
             "cudaMemcpyAsync on a stream, and batch small copies into one.", ""),
    "default": ("The syncs come with the {per}'s {copies:.0f} host-to-device copies ({pageable}): copy from pinned "
                "memory asynchronously, and batch small copies into one.", ""),
}


FLAG_SYNC_FIX = {  # the syncs read one byte each: boolean flags checked on the host
    "pytorch": ("The syncs read one byte back: the host checks a boolean flag ({reads:.0f} per {per}: "
                "if t.any():, bool(t), torch.isnan(x).any()), and waits for the GPU each time.{anomaly} Keep such "
                "checks off the per-step path: check every N steps, or on the GPU (torch.nan_to_num, "
                "torch._assert_async).", """
torch.autograd.set_detect_anomaly(False)   # the default: only while hunting a NaN
found_nan = torch.zeros((), dtype=torch.bool, device="cuda")   # once, before the loop
found_nan |= torch.isnan(loss).any()       # every step, on the GPU
if step % 100 == 0 and found_nan.item(): ...   # read every N steps
"""),
    "default": ("The syncs read one byte back: the host checks a boolean flag ({reads:.0f} per {per}) and waits for "
                "the GPU each time; check it every N steps, or keep the check on the device.", ""),
}
ANOMALY = {  # {anomaly} above, from PER_NODE_READS reads per step
    "pytorch": (" So many per {per} is a check per operation: torch.autograd.set_detect_anomaly(True) (or "
                "torch.autograd.detect_anomaly()) checks every backward node's output for NaN this way, and records "
                "a Python traceback for every forward op, host work this bound does not count; turn it off "
                "outside debugging."),
}


def flag_reads(ev: Evidence) -> float:
    """The window's copies back when nearly every one is a single byte (the host reading boolean flags: at most
    FLAG_BYTES per copy on average, so a loss read now and then beside them still counts), else 0."""
    reads = ev.get("dtoh_count")
    return reads if reads >= 1 and ev.get("dtoh_bytes") <= FLAG_BYTES * reads else 0.0


def per_node_checks(ev: Evidence) -> bool:
    """Whether the flag reads are anomaly detection's check of every backward node: PER_NODE_READS or more per
    step, with the GPU waiting after them mostly on another thread's launches (the autograd engine's thread, which
    runs the check; a loop reading a flag per iteration on the main thread waits on that thread's own work)."""
    if ev.per != "step" or flag_reads(ev) < PER_NODE_READS:
        return False
    top = ev.ledger.causes(ev.ledger.idle(after_sync=True, free=False))
    return bool(top) and top[0][0][1].startswith(OTHER_THREAD_LAUNCHES)


def sync_idle(ev: Evidence):
    """Ledger mask of the unclaimed idle a host sync causes: while the host is in a synchronize call (not
    already after an earlier sync), and after syncs while the host works (not in an OS call: those are
    causes of their own)."""
    ledger = ev.ledger
    return ledger.idle(causes=SYNC_API, after_sync=False) | ledger.idle(AFTER_SYNC_WORK, after_sync=True)


def dtoh_sync(ev: Evidence) -> Finding | None:
    """Per-step device-to-host copies and the syncs after them stall the GPU."""
    if ev.get("dtoh_bytes") < MIN_DTOH_BYTES or not significant(ev, ev.get("dtoh_ns")):
        return None
    ledger = ev.ledger
    copies, waits = ledger.busy("dtoh_pageable", "dtoh_pinned"), sync_idle(ev)
    exposed, waited = ledger.ns(copies), ledger.ns(waits)
    queued = ledger.busy_ns  # GPU work the host could have queued while it waited
    stall = exposed + min(waited, queued)
    if stall < MIN_SHARE * ev.window_ns:
        return None
    fix, snippet = pick(DTOH_FIX, ev.framework)
    # a pinned copy is faster (the same bytes at the link's pinned rate); an asynchronous one hides at most
    # under the compute not already under copies
    bw, basis = pinned_bandwidth(ev)
    faster = max(0.0, ledger.busy_ns_of("dtoh_pageable") - ev.get("dtoh_pageable_bytes") / bw)
    compute_free = max(0.0, ev.get("kernel_ns") - ev.get("memcpy_hidden_ns"))
    hidden = faster + min(exposed - faster, compute_free)
    return make_finding(
        ev, "dtoh-sync",
        f"Device-to-host copies stall {'every step' if ev.per == 'step' else 'the capture'}: {size(ev.get('dtoh_bytes'))} copied back "
        f"({ms(exposed)} not hidden under compute), then the GPU waits {ms(waited)} in and after host syncs",
        confidence=0.85 if ev.get("dtoh_pageable_bytes") > 0 or waited > 0 else 0.7,
        gain_ns=stall, claim=copies | waits,
        what_if=ledger.what_if(hidden + min(waited, queued), busy_removed_ns=hidden,
                               caps={"GPU work that could be queued + copies hidden": queued + hidden}),
        evidence={"dtoh_bytes": ev.get("dtoh_bytes"), "dtoh_pageable_bytes": ev.get("dtoh_pageable_bytes"),
                  "dtoh_count": ev.get("dtoh_count"), "dtoh_ns": ev.get("dtoh_ns"), "dtoh_exposed_ns": exposed,
                  "pinned_copy_saving_ns": faster, "pinned_bandwidth_gbps": bw, "pinned_bandwidth_basis": basis,
                  "gpu_idle_in_and_after_syncs_ns": waited,
                  "sync_wait_calls": ev.get("sync_wait_calls"), "async_copy_calls": ev.get("async_copy_calls")},
        fix=fix, snippet=snippet,
    )


def catch_up_gaps(ev: Evidence, need_ns: float):
    """Ledger mask of unclaimed short launch gaps (no sync before them), smallest first, adding up to at least
    ``need_ns`` (none when it is not positive): the gaps a loop drained by syncs shows while the host catches up."""
    return ev.ledger.smallest_rows(ev.ledger.idle(short_gap=True, after_sync=False), need_ns)


def host_sync(ev: Evidence) -> Finding | None:
    """Explicit synchronizations that leave the GPU waiting, with no device-to-host copy to explain them."""
    if ev.get("sync_wait_calls") < 1:
        return None
    ledger = ev.ledger
    waits = sync_idle(ev)
    stall = ledger.ns(waits)
    if stall < MIN_SHARE * ev.window_ns:
        return None
    fix, snippet = pick(SYNC_FIX, ev.framework)
    syncs, copies = ev.get("sync_wait_calls"), ev.get("htod_count")
    if copies >= 0.5 * syncs and ev.get("dtoh_count") < 0.5 * syncs:  # the waits follow copies to the GPU
        bytes_in, pageable = ev.get("htod_bytes"), ev.get("htod_pageable_bytes")
        amount = (f"{size(bytes_in)}, {pageable / bytes_in:.0%} of it from pageable memory" if bytes_in
                  else "no bytes counted")
        fix, snippet = pick(COPY_SYNC_FIX, ev.framework)
        fix = fix.format(copies=copies, pageable=amount, per=ev.per)
    elif reads := flag_reads(ev):
        fix, snippet = pick(FLAG_SYNC_FIX, ev.framework)
        anomaly = ANOMALY.get(ev.framework, "").format(per=ev.per) if per_node_checks(ev) else ""
        fix = fix.format(reads=reads, per=ev.per, anomaly=anomaly)
    top = ledger.causes(waits & ledger.idle(after_sync=True))
    where = f" (mostly while the host works in '{top[0][0][1]}')" if top and top[0][0][0] == "nvtx_range" else ""
    queued = ledger.busy_ns
    # without the syncs the host queues work ahead: the launch gaps between syncs close too, as far as the
    # two-resource bound allows (the rest stays launch overhead, launch-bound's)
    reach = min(queued, ev.window_ns - max(ledger.busy_ns, ledger.host_work_ns))
    claim = waits | catch_up_gaps(ev, reach - stall)
    removable = ledger.ns(claim)
    return make_finding(
        ev, "host-sync",
        f"{ev.get('sync_wait_calls'):.0f} host synchronization(s) per {ev.per} leave the GPU waiting "
        f"{ms(stall)} for the host to launch again{where}",
        confidence=0.7, gain_ns=removable, claim=claim,
        what_if=ledger.what_if(removable, caps={"GPU work that could be queued": queued}),
        evidence={"sync_wait_calls": ev.get("sync_wait_calls"), "sync_wait_ns": ev.get("sync_wait_ns"),
                  "gpu_idle_in_and_after_syncs_ns": stall, "launch_gaps_closed_ns": removable - stall,
                  "gpu_idle_fraction": ev.get("idle_fraction")},
        fix=fix, snippet=snippet,
    )


RULES = [dtoh_sync, host_sync]
