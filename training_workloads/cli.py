"""``python -m training_workloads``: the two article workloads, ready for nsys."""

from __future__ import annotations

import os

import sys

import click

from .annotate import BACKENDS
from .variants import (ALL_CAPTURES, CAUSE_VARIANTS, DDP_VARIANTS, GLOO_VARIANTS, INPUT_PIPELINE_VARIANTS,
                       PROGRAM_VARIANTS, SCENARIO_VARIANTS, VARIANT_TABLES)


def _common(f):
    f = click.option("--nvtx-backend", type=click.Choice(BACKENDS), default=None,
                     help="NVTX ranges: python nvtx (auto when importable), torch, or none. "
                          "Default: $TRAINING_WORKLOADS_NVTX or auto.")(f)
    f = click.option("--no-profiler-range", "no_profiler_range", is_flag=True,
                     help="Do not call torch.cuda.profiler.start/stop around the measured steps.")(f)
    f = click.option("--cooldown", type=click.IntRange(min=0), default=1, show_default=True,
                     help="Steps after the measured window.")(f)
    f = click.option("--steps", type=click.IntRange(min=1), default=3, show_default=True,
                     help="Measured (profiled) steps.")(f)
    f = click.option("--warmup", type=click.IntRange(min=0), default=10, show_default=True,
                     help="Warm-up steps before the measured window.")(f)
    return f


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Training workloads of the Nsight Systems data-transfer articles, and scenarios beyond them.

    Each run does --warmup steps, then synchronizes and calls torch.cuda.profiler.start()
    (profile with nsys --capture-range=cudaProfilerApi), runs --steps steps, synchronizes,
    calls profiler.stop(), runs --cooldown steps and prints one line
    "THROUGHPUT ... steps_per_s=X step_ms=Y".
    """


@main.command("input-pipeline")
@click.option("--variant", type=click.Choice(list(INPUT_PIPELINE_VARIANTS)), default="baseline",
              show_default=True)
@_common
@click.option("--batch-size", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--image-size", type=click.IntRange(min=32), default=512, show_default=True)
@click.option("--num-workers", type=click.IntRange(min=0), default=None,
              help="Override the variant's DataLoader workers (baseline 0, others 8).")
@click.option("--device", default="cuda", show_default=True,
              help="'cuda', 'cuda:N', or 'cpu' for a smoke run (not the streams variant).")
@click.option("--seed", type=int, default=None)
def input_pipeline_cmd(variant, warmup, steps, cooldown, no_profiler_range, nvtx_backend,
                       batch_size, image_size, num_workers, device, seed):
    """ResNet-18, batch 64, random 3x512x512 images, Adam (host-to-device article)."""
    from . import input_pipeline

    try:
        input_pipeline.run(variant, steps=steps, warmup=warmup, cooldown=cooldown,
                           batch_size=batch_size, image_size=image_size,
                           num_workers=num_workers, device=device,
                           profiler_range=not no_profiler_range, nvtx_backend=nvtx_backend,
                           seed=seed)
    except RuntimeError as e:
        raise click.ClickException(str(e)) from e


@main.command("ddp")
@click.option("--variant", type=click.Choice(list(DDP_VARIANTS)), default="ddp",
              show_default=True)
@_common
@click.option("--bucket-cap-mb", type=click.FloatRange(min=0, min_open=True), default=2000,
              show_default=True, help="DDP bucket capacity (2000 = one bucket for ViT-L/32).")
@click.option("--batch-size", type=click.IntRange(min=1), default=32, show_default=True)
@click.option("--image-size", type=click.IntRange(min=32), default=224, show_default=True)
@click.option("--num-workers", type=click.IntRange(min=0), default=8, show_default=True)
@click.option("--powersgd-start-iter", type=click.IntRange(min=2), default=2, show_default=True,
              help="PowerSGDState.start_powerSGD_iter (torch's default, 1000, never compresses "
                   "in a short run).")
@click.option("--powersgd-rank", type=click.IntRange(min=1), default=1, show_default=True,
              help="PowerSGDState.matrix_approximation_rank.")
def ddp_cmd(variant, warmup, steps, cooldown, no_profiler_range, nvtx_backend, bucket_cap_mb,
            batch_size, image_size, num_workers, powersgd_start_iter, powersgd_rank):
    """ViT-L/32, batch 32, 224x224, SGD, DDP variants (run under torchrun at any world size)."""
    from . import ddp

    try:
        ddp.run(variant, steps=steps, warmup=warmup, cooldown=cooldown, batch_size=batch_size,
                image_size=image_size, num_workers=num_workers, bucket_cap_mb=bucket_cap_mb,
                powersgd_start_iter=powersgd_start_iter, powersgd_rank=powersgd_rank,
                profiler_range=not no_profiler_range, nvtx_backend=nvtx_backend)
    except RuntimeError as e:
        raise click.ClickException(str(e)) from e


@main.command("scenarios")
@click.option("--variant", type=click.Choice(list(SCENARIO_VARIANTS)), required=True)
@_common
def scenarios_cmd(variant, warmup, steps, cooldown, no_profiler_range, nvtx_backend):
    """Single-GPU scenarios for rules beyond the articles: per-step device-to-host copies and syncs
    (dtoh-*), launch-bound tiny ops and their CUDA-graph fix (tinyops-*), a healthy GPU-bound loop."""
    from . import scenarios

    os.environ.update(dict(SCENARIO_VARIANTS[variant].env))  # before torch starts CUDA
    try:
        scenarios.run(variant, steps=steps, warmup=warmup, cooldown=cooldown,
                      profiler_range=not no_profiler_range, nvtx_backend=nvtx_backend)
    except RuntimeError as e:
        raise click.ClickException(str(e)) from e


@main.command("causes")
@click.option("--variant", type=click.Choice(list(CAUSE_VARIANTS)), required=True)
@_common
def causes_cmd(variant, warmup, steps, cooldown, no_profiler_range, nvtx_backend):
    """PyTorch bad/fixed pairs (optimizer, pinned copies, clipping, workers, batch size, hooks) and host
    causes (per-step checkpoint, empty_cache, torch.compile warm-up, a link-bound copy loop)."""
    from . import causes

    try:
        causes.run(variant, steps=steps, warmup=warmup, cooldown=cooldown,
                   profiler_range=not no_profiler_range, nvtx_backend=nvtx_backend)
    except RuntimeError as e:
        raise click.ClickException(str(e)) from e


@main.command("gloo")
@click.option("--variant", type=click.Choice(list(GLOO_VARIANTS)), required=True)
@_common
def gloo_cmd(variant, warmup, steps, cooldown, no_profiler_range, nvtx_backend):
    """One rank of an 8-rank DDP job on one GPU with the gloo backend (run under torchrun)."""
    from . import causes

    try:
        causes.run_gloo(variant, steps=steps, warmup=warmup, cooldown=cooldown,
                        profiler_range=not no_profiler_range, nvtx_backend=nvtx_backend)
    except RuntimeError as e:
        raise click.ClickException(str(e)) from e


@main.command("programs")
@click.option("--variant", type=click.Choice(list(PROGRAM_VARIANTS)), required=True)
@_common
def programs_cmd(variant, warmup, steps, cooldown, no_profiler_range, nvtx_backend):
    """Programs without torch: a JAX training loop, CuPy with pageable copies or managed memory, an mpi4py
    program with host-staged all-reduces (under mpirun)."""
    v = PROGRAM_VARIANTS[variant]
    os.environ.update(dict(v.env))  # before the program's framework starts CUDA
    kw = dict(steps=steps, warmup=warmup, cooldown=cooldown, profiler_range=not no_profiler_range,
              nvtx_backend=nvtx_backend)
    if v.family == "jax":
        from . import jax_loop

        jax_loop.run(v.mode, **kw)
    elif v.family == "numba":
        from . import numba_loop

        numba_loop.run(v.mode, **kw)
    elif v.family == "mpi":
        from . import mpi_loop

        mpi_loop.run(**kw)
    else:
        from . import cupy_loop

        cupy_loop.run(v.mode, **kw)


@main.command("variants")
@click.option("--names", is_flag=True, help="Print only the capture names, one a line.")
def variants_cmd(names):
    """List the variants and their capture names."""
    if names:
        click.echo("\n".join(ALL_CAPTURES))
        return
    from .variants import capture_name

    for workload, table in VARIANT_TABLES.items():
        for name, v in table.items():
            click.echo(f"{workload:14s} {name:23s} {capture_name(workload, name):24s} {v.description}")


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv[1:])
