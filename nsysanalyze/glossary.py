"""The words nsysanalyze's output uses, each explained in a sentence or two (``nsysanalyze explain TERM``
and the README's Glossary section print the same text)."""
from __future__ import annotations

import re

# term -> explanation; the order is the README's.
GLOSSARY: dict[str, str] = {
    "step": "One iteration of the training loop: an NVTX range of the step family (Batch 12, ProfilerStep#3), "
            "or, without one, a period of the repeating kernel sequence, named step 1 … step N per GPU (inferred).",
    "window": "A step's GPU window: from the previous step's GPU completion to its own, so the idle time before "
              "a step's first kernel belongs to that step. Times per step are measured in it.",
    "steady step": "A step whose window is closed (not the first, *-marked step, whose window starts at its own "
                   "first GPU work). Medians are over steady steps.",
    "median": "The middle value over the steady steps (of one GPU): robust to one slow step.",
    "idle": "Time in the window with no kernel, memcpy or memset on the GPU.",
    "exposed": "Copy or NCCL time with no compute kernel running at the same time: it adds to the step.",
    "hidden": "Copy time under compute kernels (overlapped): it costs nothing on its own.",
    "HtoD": "Host-to-device copy (CPU memory to the GPU). DtoH: device to host; DtoD: within one GPU; "
            "PtoP: between GPUs (peer to peer).",
    "pageable": "Host memory that is not pinned: a copy from it is staged by the driver and cannot overlap "
                "compute (pin_memory=True makes it pinned).",
    "pinned": "Page-locked host memory: copies from it run asynchronously at full PCIe/NVLink speed.",
    "NCCL": "NVIDIA's collective communication library (all-reduce, all-gather …): its kernels are the GPU "
            "side of DDP/FSDP communication. NCCL share: NCCL kernel time / window.",
    "munmap": "An OS call that releases memory; many of them during a step (a DataLoader freeing batches) stall "
              "the host. Captured only with --trace=osrt.",
    "warmup": "Idle cause kind: the program warming up, on any thread: compilation, JIT or autotuning (NVTX ranges "
              "named so), module loading, a launch call of a millisecond or more (lazy module loading), CUDA "
              "context creation. A capture full of it is warm-up, not steady state.",
    "cuda_blocking": "Idle cause kind: a CUDA call holding the host while the GPU idles (a synchronous memcpy, "
                     "cuda*Synchronize, cudaMalloc/cudaFree, cudaMemcpyAsync from pageable memory).",
    "os_runtime": "Idle cause kind: an OS call doing work (munmap, mmap, read, write, ioctl …) on the "
                  "launching or primary thread.",
    "launch": "Idle cause kind: time inside kernel or graph launch calls (the host is too slow to feed the GPU), "
              "and the gaps between another thread's launches while the primary thread waits for it.",
    "os_wait": "Idle cause kind: the primary thread waits in the OS (futex, poll, pthread_cond_wait, sleep …) "
               "for something else: a loader worker, a lock.",
    "nvtx_range": "Idle cause kind: host work inside an NVTX sub-range (its name is the cause: 'get batch').",
    "untraced": "Idle cause kind: host work that no traced call covers (Python, CPU work).",
    "before 1st launch": "GPU idle inside a step's CPU range before the step's first kernel launch: the host "
                         "was still preparing the step (data loading, Python).",
    "after sync": "GPU idle right after a host synchronization (cudaDeviceSynchronize, .item(), .cpu()): the "
                  "GPU drained and waits for the host to launch again.",
    "gain": "What fixing a finding could save at most, in ms per step (of the capture without steps) and as a "
            "share of the step: its what-if bound, at most the ledger rows it claims and at most the window less "
            "the larger of the GPU work and the host work the fix leaves.",
    "ledger": "Every ns of a window on one GPU, accounted once: GPU busy by class (compute, NCCL, copies by kind "
              "and host memory, memsets) or GPU idle by cause. Each finding claims the rows its fix removes; no "
              "row is claimed twice.",
    "host work": "The host's own work in the window: its CPU range less the time it waits for the GPU in syncs, "
                 "blocking copies and launches, at most the window. A step cannot get shorter than it.",
    "all fixes together": "The window after every finding's fix at once (gpu-idle-unexplained, the idle no fix "
                          "names, aside): the window less their gains, never below the GPU or host work they leave.",
    "confidence": "How sure the rule is that its cause is the right one (direct evidence: high; inferred: lower).",
    "severity": "The finding's gain as a share of the step: high ≥ 20%, medium ≥ 5%, low below; info: no gain.",
    "pp": "Percentage points: the difference of two percentages (12.0% → 15.0% is +3.0 pp).",
    "MAD": "Median absolute deviation: the median distance of the steps from their median; a rank's "
           "step-to-step noise.",
    "spread": "Slowest minus fastest (step time across ranks, or per step across ranks).",
    "straggler": "The rank that holds the others back; in synchronous data-parallel training usually the one "
                 "with the least NCCL time (the others wait for it inside their collectives).",
    "offset": "When a rank's first GPU activity happened, relative to the earliest rank (on the UTC clock).",
    "start skew": "How far apart the ranks started one step.",
    "rank": "One (process, GPU) of a job: a file per rank (run_%q{RANK}.sqlite), or each process/GPU of a file.",
    "gate": "A compare --fail-on expression: exit 1 when it trips (see docs/ci.md).",
}


def _key(term: str) -> str:
    return re.sub(r"[\s_-]+", " ", term.strip().lower())


def explain(term: str) -> tuple[str, str] | None:
    """(term, explanation) of ``term`` (case, '_' and '-' ignored; DtoH, DtoD, PtoP find HtoD), else None."""
    aliases = {"dtoh": "HtoD", "dtod": "HtoD", "ptop": "HtoD", "before first launch": "before 1st launch",
               "closed": "steady step", "open step": "steady step", "inferred": "step", "percentage points": "pp"}
    wanted = _key(term)
    wanted = _key(aliases.get(wanted, wanted))
    return next(((t, text) for t, text in GLOSSARY.items() if _key(t) == wanted), None)


def close_terms(term: str) -> list[str]:
    """Glossary terms that contain ``term`` or that it contains (for a 'did you mean')."""
    wanted = _key(term)
    return [t for t in GLOSSARY if wanted and (wanted in _key(t) or _key(t) in wanted)]


def markdown() -> str:
    """The glossary as the README's list."""
    return "\n".join(f"- **{t}**: {text}" for t, text in GLOSSARY.items())
