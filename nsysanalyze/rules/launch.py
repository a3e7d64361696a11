"""Launch-overhead rule: many short kernels, GPU gaps, CPU busy launching → CUDA graphs / torch.compile."""
from __future__ import annotations

from . import Evidence, Finding, make_finding

IDLE_HIGH = 0.20              # GPU idle fraction worth attacking
SHORT_KERNEL_NS = 20_000      # mean kernel duration under which launch cost dominates
LAUNCH_CPU_SHARE = 0.5        # share of the CPU step spent inside launch APIs
MIN_KERNELS = 100             # kernels per step for the pattern to matter


def launch_bound(ev: Evidence) -> Finding | None:
    kernels = ev.get("kernel_count")
    cpu_ns = ev.get("cpu_ns")
    if kernels < MIN_KERNELS or not cpu_ns:
        return None
    mean_kernel = ev.get("kernel_sum_ns") / kernels
    launch_share = ev.get("launch_ns") / cpu_ns
    idle = ev.get("idle_fraction")
    if idle < IDLE_HIGH or mean_kernel > SHORT_KERNEL_NS or launch_share < LAUNCH_CPU_SHARE:
        return None
    return make_finding(
        ev, "launch-bound",
        f"Launch-bound: {kernels:.0f} kernels/step averaging {mean_kernel / 1e3:.1f} us, "
        f"CPU {launch_share:.0%} inside launch calls, GPU idle {idle:.0%}",
        confidence=0.75, gain_ns=ev.get("idle_ns"),
        evidence={"kernels_per_step": kernels, "mean_kernel_ns": mean_kernel, "launch_cpu_share": launch_share,
                  "gpu_idle_fraction": idle, "launch_calls": ev.get("launch_calls")},
        fix="Cut per-kernel launch cost: capture the step in a CUDA graph or compile it "
            "(torch.compile(mode='reduce-overhead') uses CUDA graphs).",
        snippet="""
model = torch.compile(model, mode="reduce-overhead")   # CUDA graphs under the hood
""",
    )


RULES = [launch_bound]
