"""NCCL collectives by kind (from kernel names, metrics.nccl_kind) and by pattern: advice that fits the
communication the step shows, not the name of one kernel.

- a capture holding exactly one collective (a capture range around one call) is not a step: plain words;
- point-to-point (SendRecv/Send/Recv) exposed → pipeline parallelism: communication on its own stream,
  more micro-batches; on the compute stream itself (metrics.nccl_on_compute_streams) it is named with its
  stream, even when small, as is a host sync per step that drains the queue;
- FSDP/ZeRO only on its pattern: several all-gathers (before each layer's compute) and several
  reduce-scatters (after its backward) per step → prefetch the next all-gather, limit in-flight
  all-gathers, reshard less; a lone all-gather (or reduce-scatter) exposed gets plain words;
- all-to-all → expert parallelism (note);
- all-reduce exposed in a non-PyTorch program → overlap in plain words (PyTorch gets the DDP rules).
"""
from __future__ import annotations

from ..units import ms
from . import Evidence, Finding, make_finding
from .fixes import pick

EXPOSED_SHARE = 0.05  # exposed communication of one kind worth acting on, as a share of the step
ON_COMPUTE_STREAM = 0.9   # share of NCCL time on a compute stream that means "shares the compute stream"
FULLY_EXPOSED = 0.9       # share of a kind's NCCL time not hidden under compute
FSDP_PER_STEP = 2         # all-gathers and reduce-scatters per step that make FSDP's per-layer pattern
KINDS = ("allreduce", "reducescatter", "allgather", "broadcast", "reduce", "sendrecv", "alltoall")

P2P_FIX = {
    "pytorch": ("Point-to-point transfers (pipeline stages) sit on the critical path: run send/recv on their own "
                "stream so they overlap compute, and use more micro-batches per step (1F1B or interleaved "
                "schedules) to shrink the pipeline bubble.", """
from torch.distributed.pipelining import ScheduleInterleaved1F1B   # or Schedule1F1B
schedule = ScheduleInterleaved1F1B(stages, n_microbatches=4 * world_size, loss_fn=loss_fn)
"""),
    "default": ("Point-to-point transfers sit on the critical path: issue them on a communication stream that "
                "overlaps compute, and split the work into more micro-batches so transfers hide behind compute.", ""),
}
FSDP_FIX = {
    "pytorch": ("FSDP's all-gathers/reduce-scatters are exposed: prefetch the next layer's all-gather, cap "
                "in-flight all-gathers, and avoid resharding the last layers after forward.", """
model = FSDP(model, forward_prefetch=True, backward_prefetch=BackwardPrefetch.BACKWARD_PRE,
             limit_all_gathers=True)
# FSDP2: fully_shard(layer, reshard_after_forward=False) for the last blocks; layer.set_modules_to_forward_prefetch([...])
"""),
    "default": ("Sharded-parameter collectives (all-gather/reduce-scatter) are exposed: prefetch the next shard while "
                "the current one computes, and reshard less often.", ""),
}
SHARD_FIX = {
    "default": ("A collective that gathers or scatters shards sits on the critical path: issue it earlier (before "
                "the computation that needs it) on a communication stream so it overlaps compute, or move fewer "
                "bytes (lower precision).", ""),
}
ALLREDUCE_FIX = {
    "default": ("All-reduces run after the computation instead of during it: start reducing each buffer as soon as "
                "it is ready (non-blocking collectives on a communication stream) and reduce fewer bytes "
                "(lower precision) where accuracy allows.", ""),
}


def _exposed(ev: Evidence, *kinds: str) -> tuple[float, float, float]:
    """(count, ns, exposed ns) per step of the NCCL kernels of these kinds."""
    return tuple(sum(ev.get(f"nccl_{k}_{what}") for k in kinds) for what in ("count", "ns", "exposed_ns"))


def one_collective(ev: Evidence) -> bool:
    """A capture (no steps) holding exactly one NCCL kernel: a capture range around one call, not a step."""
    return ev.scope == "capture" and ev.get("nccl_count") == 1


def single_collective_capture(ev: Evidence) -> Finding | None:
    if not one_collective(ev):
        return None
    kind = next((k for k in KINDS if ev.get(f"nccl_{k}_count")), "collective")
    return make_finding(
        ev, "single-collective",
        f"The capture holds one NCCL {kind} kernel ({ev.get('nccl_ns') / 1e6:.2f} ms in a "
        f"{ms(ev.window_ns)} capture): a capture of one call, not a training step",
        confidence=0.8, gain_ns=0.0, severity="info",
        evidence={"nccl_count": 1.0, "nccl_ns": ev.get("nccl_ns"), "nccl_exposed_ns": ev.get("nccl_exposed_ns")},
        fix="One collective says little about a training step: profile several steps (e.g. nsys profile "
            "--capture-range=cudaProfilerApi around steps 10-20) to see how communication overlaps compute.",
        snippet="")


def _stream_words(ev: Evidence) -> tuple[bool, str]:
    """Whether the NCCL kernels share a compute stream (metrics.nccl_on_compute_streams), and words naming it."""
    shared = ev.facts.get("nccl_on_compute_stream_fraction", float("nan"))
    stream = int(ev.facts.get("nccl_compute_stream", -1))
    on = shared == shared and shared >= ON_COMPUTE_STREAM
    return on, (f" on the compute stream (stream {stream})" if on else "")


def _queue_drain(ev: Evidence) -> tuple[str, dict]:
    """Words and evidence for host syncs that wait for the GPU every step (cuda*Synchronize, event waits)."""
    wait, calls = ev.get("sync_wait_ns"), ev.get("sync_wait_calls")
    if ev.per != "step" or not calls or wait < EXPOSED_SHARE * ev.window_ns:
        return "", {}
    return (f"; a host sync waits {ms(wait)} per step ({calls:.0f} call(s)) for the queue to drain",
            {"sync_wait_ns": wait, "sync_wait_calls": calls})


def pipeline_p2p(ev: Evidence) -> Finding | None:
    count, ns, exposed = _exposed(ev, "sendrecv")
    on_compute, stream = _stream_words(ev)
    significant = exposed >= EXPOSED_SHARE * ev.window_ns or (on_compute and ns and exposed >= FULLY_EXPOSED * ns)
    if not count or one_collective(ev) or not significant:
        return None
    fix, snippet = pick(P2P_FIX, ev.framework)
    drain, drain_evidence = _queue_drain(ev)
    return make_finding(
        ev, "pipeline-p2p",
        f"{count:.0f} NCCL send/recv kernels per {ev.per}{stream}, {ms(exposed)} of them exposed "
        f"({exposed / ns if ns else 0:.0%}): pipeline transfers are on the critical path{drain}",
        confidence=0.6, gain_ns=exposed * 0.5,
        evidence={"nccl_sendrecv_count": count, "nccl_sendrecv_ns": ns, "nccl_sendrecv_exposed_ns": exposed,
                  "nccl_on_compute_stream_fraction": ev.facts.get("nccl_on_compute_stream_fraction", float("nan")),
                  "nccl_compute_stream": ev.facts.get("nccl_compute_stream", -1), **drain_evidence},
        fix=fix + (" They run on the compute stream itself, so they cannot overlap it: give them their own stream."
                   if on_compute else ""),
        snippet=snippet, busy=("nccl",))


def fsdp_pattern(ev: Evidence) -> bool:
    """FSDP's per-layer pattern: several all-gathers and several reduce-scatters per step."""
    return (ev.per == "step" and ev.get("nccl_allgather_count") >= FSDP_PER_STEP
            and ev.get("nccl_reducescatter_count") >= FSDP_PER_STEP)


def fsdp_collectives(ev: Evidence) -> Finding | None:
    count, ns, exposed = _exposed(ev, "allgather", "reducescatter")
    if not count or one_collective(ev) or exposed < EXPOSED_SHARE * ev.window_ns:
        return None
    evidence = {"nccl_allgather_count": ev.get("nccl_allgather_count"),
                "nccl_reducescatter_count": ev.get("nccl_reducescatter_count"),
                "nccl_allgather_exposed_ns": ev.get("nccl_allgather_exposed_ns"),
                "nccl_reducescatter_exposed_ns": ev.get("nccl_reducescatter_exposed_ns")}
    _, stream = _stream_words(ev)
    if fsdp_pattern(ev):
        rule, table, confidence = "fsdp-collectives", FSDP_FIX, 0.6
        title = f"{count:.0f} all-gather/reduce-scatter kernels per {ev.per}{stream} (FSDP's per-layer pattern)"
    else:
        rule, table, confidence = "shard-collective-exposed", SHARD_FIX, 0.5
        title = (f"{ev.get('nccl_allgather_count'):.0f} all-gather and {ev.get('nccl_reducescatter_count'):.0f} "
                 f"reduce-scatter kernel(s) per {ev.per}{stream}")
    fix, snippet = pick(table, ev.framework)
    return make_finding(ev, rule, f"{title}, {ms(exposed)} exposed", confidence=confidence,
                        gain_ns=exposed * 0.5, evidence=evidence, fix=fix, snippet=snippet, busy=("nccl",))


def alltoall_note(ev: Evidence) -> Finding | None:
    count, ns, exposed = _exposed(ev, "alltoall")
    if not count:
        return None
    return make_finding(
        ev, "alltoall", f"{count:.0f} all-to-all kernels per {ev.per} ({ms(exposed)} exposed): expert-parallel "
        "token exchange", confidence=0.5, gain_ns=0.0, severity="info",
        evidence={"nccl_alltoall_count": count, "nccl_alltoall_ns": ns, "nccl_alltoall_exposed_ns": exposed},
        fix="All-to-all is the expert-parallel (MoE) token exchange: balance tokens per expert (capacity factor, "
            "auxiliary load-balancing loss) and overlap the dispatch with the shared/dense computation.", snippet="",
        busy=("nccl",))


def allreduce_exposed(ev: Evidence) -> Finding | None:
    """All-reduce on the critical path in a program that is not PyTorch (which gets the DDP rules)."""
    count, ns, exposed = _exposed(ev, "allreduce")
    if ev.framework == "pytorch" or not count or one_collective(ev) or exposed < EXPOSED_SHARE * ev.window_ns:
        return None
    fix, snippet = pick(ALLREDUCE_FIX, ev.framework)
    return make_finding(
        ev, "allreduce-exposed", f"{count:.0f} all-reduce kernels per {ev.per}, {ms(exposed)} not hidden under compute",
        confidence=0.6, gain_ns=exposed * 0.5,
        evidence={"nccl_allreduce_count": count, "nccl_allreduce_ns": ns, "nccl_allreduce_exposed_ns": exposed},
        fix=fix, snippet=snippet, busy=("nccl",))


RULES = [single_collective_capture, pipeline_p2p, fsdp_collectives, alltoall_note, allreduce_exposed]
