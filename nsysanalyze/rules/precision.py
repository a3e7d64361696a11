"""Matrix work in full fp32 on GPUs whose tensor cores run it in TF32 several times faster.

The cause: the GPU is busy, not idle, in GEMMs and convolutions that run on the FMA units
(``kernels.fp32_fma_matmul``: cuBLAS' ``sgemm``/``_ffma`` kernels, cuDNN's ``implicit_convolve_sgemm``)
because the program asked for full fp32 — PyTorch's default for matmuls
(``torch.backends.cuda.matmul.allow_tf32`` is off), ``torch.backends.cudnn.allow_tf32 = False``, JAX's
``"highest"`` precision, ``NVIDIA_TF32_OVERRIDE=0``. The fix removes the part of their time that the tensor
cores do not need: at most their time × (1 − FP32 rate / TF32 rate), the dense peak rates of the GPU's
datasheet (:data:`TF32_TIME_RATIO`); the step cannot become shorter than the host's work (the ledger's
two-resource bound), launches included at their own cost (:func:`host_with_launches`). GPUs outside the table
(pre-Ampere ones without TF32, GeForce parts whose TF32 rate is their FP32 rate, unknown names) get no finding: there is no model of what the fix would remove there.
"""
from __future__ import annotations

import re

from ..units import ms
from . import Evidence, Finding, make_finding
from .fixes import pick

# fp32 FMA time / TF32 tensor-core time at the datasheets' dense peaks (FP32 TFLOPS / TF32 TFLOPS), by GPU name
TF32_TIME_RATIO = [
    (re.compile(r"A100|A800|A30\b"), 19.5 / 156),            # GA100: 19.5 / 156 (A30: 10.3 / 82)
    (re.compile(r"H100|H800|H200|GH200|H20\b"), 67 / 495),   # GH100 SXM (PCIe: 51 / 378, the same ratio)
    (re.compile(r"L40S|\bL4\b|\bA10\b|\bA40\b"), 0.5),       # L40S 91.6 / 183, L4 30.3 / 60, A10 31.2 / 62.5, A40 37.4 / 74.8
]
MIN_GAIN_SHARE = 0.05  # the bound must reach this share of the step, as the other rules' 5%

FP32_FIX = {
    "pytorch": ("Let matmuls (and convolutions) use TF32 tensor cores; for about twice that again, train under bf16 "
                "autocast. TF32 keeps fp32's range with a 10-bit mantissa, which training tolerates in nearly every "
                "model; compare a few hundred steps' loss curve once.", """
torch.backends.cuda.matmul.allow_tf32 = True   # or torch.set_float32_matmul_precision("high"); PyTorch's default is off
torch.backends.cudnn.allow_tf32 = True         # cuDNN's default; something set it False (a reproducibility switch?)
# further: with torch.autocast("cuda", dtype=torch.bfloat16): loss = loss_fn(model(x), y)
"""),
    "jax": ("Let XLA run fp32 matmuls in TF32 (drop 'highest' precision, globally or per dot), or compute in "
            "bfloat16; check the loss curve once.", """
jax.config.update("jax_default_matmul_precision", "tensorfloat32")  # instead of "highest" / "float32"
# or per op: jnp.dot(a, b, precision=jax.lax.Precision.DEFAULT)
"""),
    "cupy": ("Let cuBLAS use TF32 tensor cores for CuPy's fp32 matmuls (CUPY_TF32=1 before CuPy starts), or "
             "compute in float16/bfloat16.", """
CUPY_TF32=1 python train.py        # or os.environ["CUPY_TF32"] = "1" before importing cupy
"""),
    "cuda": ("Let cuBLAS/cuDNN use TF32 tensor cores for the fp32 GEMMs and convolutions.", """
cublasSetMathMode(handle, CUBLAS_TF32_TENSOR_OP_MATH);        // or computeType CUBLAS_COMPUTE_32F_FAST_TF32
cudnnSetConvolutionMathType(convDesc, CUDNN_TENSOR_OP_MATH);  // not CUDNN_FMA_MATH
// and leave NVIDIA_TF32_OVERRIDE unset (0 forces fp32 FMA everywhere)
"""),
    "default": ("Let the fp32 GEMMs and convolutions use TF32 tensor cores (the framework's matmul-precision setting, "
                "cuBLAS' TF32 math mode, NVIDIA_TF32_OVERRIDE unset), or compute in bf16/fp16.", ""),
}


def tf32_time_ratio(gpu_name: str) -> float | None:
    """TF32 tensor-core time per fp32 FMA time of the same matrix work on this GPU (TF32_TIME_RATIO), or None."""
    for pattern, ratio in TF32_TIME_RATIO:
        if pattern.search(gpu_name or ""):
            return ratio
    return None


def host_with_launches(ev: Evidence) -> float:
    """The host's work left after a fix that only shortens kernels (ns): its own work (ledger.host_work_ns, which
    counts launch calls as waits) plus the launches' own cost — each launch call at the process's median
    (metrics.median_launch_ns; the longer calls waited for a slot in a full launch queue, which a faster GPU
    frees sooner), at most the launch time measured. Without a median (no launch seen), the launch time whole."""
    launch_ns, median = ev.get("launch_ns"), float(ev.facts.get("launch_median_ns", float("nan")))
    own = launch_ns if median != median else min(launch_ns, ev.get("launch_calls") * median)
    return ev.ledger.host_work_ns + own


def fp32_matmul(ev: Evidence) -> Finding | None:
    """The fp32 FMA matrix kernels' time, on a GPU with a TF32 model: the fix removes up to (1 − ratio) of it
    from the GPU's work; claims the compute rows."""
    ratio = tf32_time_ratio(ev.gpu_name)
    fp32_ns = float(ev.facts.get("fp32_matmul_ns") or 0.0)
    if ratio is None or not fp32_ns or not ev.window_ns:
        return None
    ledger = ev.ledger
    compute = ledger.busy("compute")
    removable = min(fp32_ns, ledger.ns(compute) if len(ledger) else fp32_ns) * (1 - ratio)
    what_if = ledger.what_if(removable, busy_removed_ns=removable,
                             caps={"host with its launches": ev.window_ns - host_with_launches(ev)})
    if what_if.gain_ns < MIN_GAIN_SHARE * ev.window_ns:
        return None
    fix, snippet = pick(FP32_FIX, ev.framework)
    host_cap = what_if.caps["host with its launches"]
    if what_if.gain_ns == host_cap < removable:
        fix += (f" Here the host's own work under the profiler ({ms(ev.window_ns - host_cap)} a {ev.per}) caps the gain; "
                f"the GPU loses up to {ms(removable)}, and without nsys the host is faster: time the loop without it.")
    share = float(ev.facts.get("fp32_matmul_share") or 0.0)
    return make_finding(
        ev, "fp32-matmul",
        f"Matrix kernels compute in full fp32 on the FMA units: {ms(fp32_ns)} per {ev.per} ({share:.0%} of the "
        f"kernel time), which {ev.gpu_name}'s TF32 tensor cores run at {1 / ratio:.1f}x the rate",
        confidence=0.7, gain_ns=what_if.gain_ns, claim=compute, what_if=what_if,
        evidence={"fp32_matmul_ns": fp32_ns, "fp32_matmul_share": share, "tf32_time_ratio": ratio,
                  "top_kernel": str(ev.facts.get("fp32_matmul_top", "")), "gpu_idle_fraction": ev.get("idle_fraction")},
        fix=fix, snippet=snippet)


RULES = [fp32_matmul]
