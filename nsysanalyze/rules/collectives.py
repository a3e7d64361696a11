"""NCCL collectives by kind (from kernel names, metrics.nccl_kind): advice that fits the communication.

- point-to-point (SendRecv/Send/Recv) exposed → pipeline parallelism: communication on its own
  stream, more micro-batches;
- all-gather / reduce-scatter exposed → FSDP/ZeRO: prefetch the next all-gather, limit in-flight
  all-gathers, reshard less;
- all-to-all → expert parallelism (note);
- all-reduce exposed in a non-PyTorch program → overlap in plain words (PyTorch gets the DDP rules).
"""
from __future__ import annotations

from ..units import ms
from . import Evidence, Finding, make_finding
from .fixes import pick

EXPOSED_SHARE = 0.05  # exposed communication of one kind worth acting on, as a share of the step

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
ALLREDUCE_FIX = {
    "default": ("All-reduces run after the computation instead of during it: start reducing each buffer as soon as "
                "it is ready (non-blocking collectives on a communication stream) and reduce fewer bytes "
                "(lower precision) where accuracy allows.", ""),
}


def _exposed(ev: Evidence, *kinds: str) -> tuple[float, float, float]:
    """(count, ns, exposed ns) per step of the NCCL kernels of these kinds."""
    return tuple(sum(ev.get(f"nccl_{k}_{what}") for k in kinds) for what in ("count", "ns", "exposed_ns"))


def pipeline_p2p(ev: Evidence) -> Finding | None:
    count, ns, exposed = _exposed(ev, "sendrecv")
    if not count or exposed < EXPOSED_SHARE * ev.window_ns:
        return None
    fix, snippet = pick(P2P_FIX, ev.framework)
    return make_finding(
        ev, "pipeline-p2p",
        f"{count:.0f} NCCL send/recv kernels per {ev.per}, {ms(exposed)} of them exposed: pipeline "
        "transfers are on the critical path",
        confidence=0.6, gain_ns=exposed * 0.5,
        evidence={"nccl_sendrecv_count": count, "nccl_sendrecv_ns": ns, "nccl_sendrecv_exposed_ns": exposed},
        fix=fix, snippet=snippet)


def fsdp_collectives(ev: Evidence) -> Finding | None:
    count, ns, exposed = _exposed(ev, "allgather", "reducescatter")
    if not count or exposed < EXPOSED_SHARE * ev.window_ns:
        return None
    fix, snippet = pick(FSDP_FIX, ev.framework)
    return make_finding(
        ev, "fsdp-collectives",
        f"{count:.0f} all-gather/reduce-scatter kernels per {ev.per}, {ms(exposed)} exposed",
        confidence=0.6, gain_ns=exposed * 0.5,
        evidence={"nccl_allgather_count": ev.get("nccl_allgather_count"),
                  "nccl_reducescatter_count": ev.get("nccl_reducescatter_count"),
                  "nccl_allgather_exposed_ns": ev.get("nccl_allgather_exposed_ns"),
                  "nccl_reducescatter_exposed_ns": ev.get("nccl_reducescatter_exposed_ns")},
        fix=fix, snippet=snippet)


def alltoall_note(ev: Evidence) -> Finding | None:
    count, ns, exposed = _exposed(ev, "alltoall")
    if not count:
        return None
    return make_finding(
        ev, "alltoall", f"{count:.0f} all-to-all kernels per {ev.per} ({ms(exposed)} exposed): expert-parallel "
        "token exchange", confidence=0.5, gain_ns=0.0, severity="info",
        evidence={"nccl_alltoall_count": count, "nccl_alltoall_ns": ns, "nccl_alltoall_exposed_ns": exposed},
        fix="All-to-all is the expert-parallel (MoE) token exchange: balance tokens per expert (capacity factor, "
            "auxiliary load-balancing loss) and overlap the dispatch with the shared/dense computation.", snippet="")


def allreduce_exposed(ev: Evidence) -> Finding | None:
    """All-reduce on the critical path in a program that is not PyTorch (which gets the DDP rules)."""
    count, ns, exposed = _exposed(ev, "allreduce")
    if ev.framework == "pytorch" or not count or exposed < EXPOSED_SHARE * ev.window_ns:
        return None
    fix, snippet = pick(ALLREDUCE_FIX, ev.framework)
    return make_finding(
        ev, "allreduce-exposed", f"{count:.0f} all-reduce kernels per {ev.per}, {ms(exposed)} not hidden under compute",
        confidence=0.6, gain_ns=exposed * 0.5,
        evidence={"nccl_allreduce_count": count, "nccl_allreduce_ns": ns, "nccl_allreduce_exposed_ns": exposed},
        fix=fix, snippet=snippet)


RULES = [pipeline_p2p, fsdp_collectives, alltoall_note, allreduce_exposed]
