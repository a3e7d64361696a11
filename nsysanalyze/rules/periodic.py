"""Periodic stalls: steady steps far longer than the median one (steps.STALL_FACTOR×), recurring — an epoch
boundary where DataLoader workers restart, a checkpoint or an evaluation every N steps.

The median step hides them, so they are not in the median step's ledger: the gain is what they add to
every step on average (mean − median step window), spent in the slow steps themselves; its share is of
the mean step. When their idle
is mostly before the step's first launch and the step loads data, the step waits for its batch. Which loader
problem that is follows from the OS calls (when captured): worker processes started in the slow steps (fork,
clone, posix_spawn: ``stall_process_start_ns``) are the loader starting over at an epoch boundary
(``persistent_workers=True``); workers seen handing batches over (munmap in the step) and none started are workers
that make batches slower than the steps use them, so a step waits whenever the next batch is not ready (more
workers, cheaper samples; a deeper prefetch only delays the wait). Without that evidence the fix names both.
When the stalls' time is mostly in the optimizer step's range, the slow steps are the ones that step the optimizer
(gradient accumulation, or a schedule that steps it every few micro-batches): that work is not optional, so the fix
is the optimizer's own (fused, multi-tensor), not "rarer". Otherwise the stalls are periodic work itself (make it
asynchronous or rarer).
"""
from __future__ import annotations

import re
from dataclasses import replace

from ..units import ms
from . import Evidence, Finding, make_finding
from .fixes import pick
from .input_pipeline import SLOW_WORKERS_FIX, loads_data
from .launch import OPTIMIZER_FIX, OPTIMIZER_RANGE

MIN_SHARE = 0.05          # what the stalls add per step on average, as a share of the median step
LOADER_SHARE = 0.5        # share of the stalls' idle before the first launch that points at the loader

RESTART_FIX = {
    "pytorch": ("Every epoch the DataLoader starts its workers again and refills its prefetch queue while the GPU "
                "waits: keep them (persistent_workers=True) and prefetch deeper.", """
train_loader = DataLoader(dataset, batch_size=BATCH_SIZE, num_workers=8,
                          persistent_workers=True,   # workers survive the epoch boundary
                          prefetch_factor=4, pin_memory=True)
"""),
    "default": ("Every few steps the input pipeline starts over (an epoch boundary) while the GPU waits: keep its "
                "workers alive across epochs and prefetch across the boundary.", ""),
}
BEHIND_FIX = {  # the workers' own fix (more of them, cheaper samples), framed by the slow steps
    "pytorch": ("The DataLoader's workers run (none is started in the slow steps) but make batches slower than the "
                "steps use them: a step waits whenever the next batch is not ready. More workers (up to the free "
                "cores), a cheaper __getitem__ (decode/resize once, cache), augmentation on the GPU on whole batches; "
                "a deeper prefetch alone only delays the wait.", SLOW_WORKERS_FIX["pytorch"][1]),
    "default": ("The input pipeline's workers run but make batches slower than the steps use them: a step waits "
                "whenever the next batch is not ready. Add workers or make each sample cheaper.", ""),
}
LOADER_FIX = {
    "pytorch": ("Every few steps a step waits for its batch. If the DataLoader starts its workers again at each epoch "
                "(persistent_workers=False, the default), keep them; if they run already, they make batches slower "
                "than the steps use them: more workers, a cheaper __getitem__.", """
train_loader = DataLoader(dataset, batch_size=BATCH_SIZE, num_workers=16,   # enough to keep up
                          persistent_workers=True,   # workers survive the epoch boundary
                          prefetch_factor=4, pin_memory=True)
"""),
    "default": ("Every few steps a step waits for its input: keep the pipeline's workers alive across epochs and give "
                "it enough workers to keep up.", ""),
}
OPTIMIZER_STALL_FIX = {  # the optimizer's own fix, framed by the slow steps
    k: ("The slow steps are the ones that step the optimizer (every few micro-batches: gradient accumulation), which "
        "is not work to make rarer: " + fix[0].lower() + fix[1:], snippet) for k, (fix, snippet) in OPTIMIZER_FIX.items()}
PERIODIC_FIX = {
    "default": ("Every few steps one step takes much longer (periodic work: evaluation, checkpointing, logging, "
                "data reshuffling): make that work asynchronous, rarer, or overlap it with the next steps.", ""),
}


def periodic_stall(ev: Evidence) -> Finding | None:
    f = ev.facts
    excess, stalls = f.get("stall_excess_ns", 0.0), f.get("stall_steps", 0.0)
    if ev.per != "step" or not stalls or excess <= 0 or excess < MIN_SHARE * ev.window_ns:
        return None
    loader = f.get("stall_before_launch_share", 0.0) >= LOADER_SHARE and loads_data(ev)
    if not loader:
        cause_kind, _, cause = f.get("stall_cause", "").partition(": ")
        kind = (f" (mostly while the host works in '{cause}')" if cause_kind == "nvtx_range" else
                f" (mostly in {cause} calls)" if cause_kind in ("cuda_blocking", "os_runtime", "os_wait") else "")
        optimizer = cause_kind == "nvtx_range" and re.fullmatch(OPTIMIZER_RANGE, cause)
        table = OPTIMIZER_STALL_FIX if optimizer else PERIODIC_FIX
    elif f.get("stall_process_start_ns", 0.0) > 0:
        kind, table = " (the loader starting over)", RESTART_FIX
    elif ev.get("munmap_count") >= 1:  # workers hand batches over shared memory; none was started
        kind, table = " (waiting for the loader's workers)", BEHIND_FIX
    else:
        kind, table = " (waiting for the loader)", LOADER_FIX
    fix, snippet = pick(table, ev.framework)
    if table is LOADER_FIX and not ev.facts.get("osrt_captured"):
        fix += " A capture with --trace=osrt tells the two apart (workers started again show as fork or clone calls)."
    median = ev.window_ns
    mean_step = replace(ev, m={**ev.m, "window_ns": median + excess})  # the gain's share is of the mean step
    return make_finding(
        mean_step, "periodic-stall",
        f"{stalls:.0f} of {f.get('steady_step_count', 0):.0f} steady steps take {ms(f.get('stall_step_ns', 0))} against "
        f"{ms(median)} for the median step, adding {ms(excess)} to every step on average"
        + kind,
        confidence=0.75 if loader else 0.6, gain_ns=excess,
        evidence={"stall_steps": stalls, "steady_steps": f.get("steady_step_count", 0.0),
                  "stall_step_ns": f.get("stall_step_ns", 0.0), "amortized_gain_ns": excess,
                  "stall_top_cause": f.get("stall_cause", ""),
                  "stall_idle_before_first_launch_share": f.get("stall_before_launch_share", 0.0),
                  "stall_process_start_ns": f.get("stall_process_start_ns", 0.0)},
        fix=fix, snippet=snippet)


RULES = [periodic_stall]
