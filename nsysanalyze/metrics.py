"""Per-window GPU and CPU metrics: pure functions over the loaded frames (no SQL here).

A *window* is one row with globalPid, deviceId, window_start, window_end (ns) and the CPU
side's key: globalTid (a thread, or -1 for every thread of the process: what the pipeline uses for
steps and captures, since PyTorch launches the backward from autograd threads) with cpu_start/cpu_end. Step windows come from ``steps.project_steps``; the whole-trace window
of a device (first GPU activity start → last GPU activity end) from ``steps.capture_windows``.

Definitions (all times ns, sizes bytes; |X| is the length of the union of intervals X
clipped to the window; counts and bytes are attributed by activity start):

- busy_ns = |kernels ∪ memcpys ∪ memsets|; idle_fraction = 1 - busy_ns / window_ns
- memcpy_kernel_overlap = |memcpys ∩ kernels| / |memcpys| (1.0: every copy hidden under compute);
  htod_kernel_overlap likewise for host-to-device copies only
- nccl_ns = |NCCL kernels|; nccl_share = nccl_ns / window_ns;
  nccl_exposed_ns = |NCCL kernels - non-NCCL kernels| (communication nothing else hides);
  per collective kind K (NCCL_KINDS, from the kernel name): nccl_K_count, nccl_K_ns = |K kernels|,
  nccl_K_exposed_ns = |K kernels - non-NCCL kernels|
- dtod_* (copyKind 8) and ptop_* (copyKind 10): bytes, count, ns
- htod_* / dtoh_*: bytes split by host memory kind (pageable srcKind/dstKind 0, pinned 1);
  dtoh_hidden_ns = |DtoH copies ∩ kernels|
- launch_* / sync_copy_* / sync_wait_* / async_copy_* / module_load_* / alloc_*: CUDA API calls on the window's CPU
  thread(s): kernel launches, synchronous memcpy APIs (no ``Async``), explicit synchronizations,
  ``*Async`` copies (which block the host too when the host memory is pageable), module loads
  (``cuModuleLoad*``, ``cuLibraryLoad*``: warm-up), and
  allocations/frees of device or pinned memory (with the virtual memory management calls that create, map,
  unmap and release physical memory, as XLA's and PyTorch's expandable allocators do)
- munmap_count/munmap_ns: munmap calls in the CPU range; munmap_gpu_idle_ns = GPU idle in the
  window that coincides with them (|munmap - busy| = |munmap ∩ idle|)
- time_* : a partition of the window (they sum to window_ns) over X = non-NCCL kernels,
  N = NCCL kernels, C = memcpys ∪ memsets: time_compute_only_ns = |X - N - C|,
  time_copy_hidden_ns = |C ∩ (X ∪ N)|, time_copy_exposed_ns = |C - X - N|,
  time_nccl_overlapped_ns = |X ∩ N - C|, time_nccl_exposed_ns = |N - X - C|, and idle_ns
- busy_<class>_ns (BUSY_CLASSES): the busy time split by what the GPU did, each ns once, in that order
  of precedence: compute (non-NCCL kernels), NCCL kernels beyond compute, then each copy class beyond
  kernels and the classes before it, then memsets; they sum to busy_ns (the ledger's busy rows)
- um_* (copyKind 11-13, unified-memory migrations): bytes, count, ns
- launch_blocked_kernel_ns: the summed durations of the window's kernels (by start, as kernel_sum_ns) that ended
  before their launch call returned; launch_wait_ns: the host ns those calls spent from their first such kernel's
  start (or their own, when later) to their return, once per call (a graph launch's kernels share one call), by
  that kernel's start. An asynchronous launch returns once its kernel is queued, so only a kernel shorter than the
  call's tail can end first; a launch that returns after its kernel ran waited for it (CUDA_LAUNCH_BLOCKING=1, or
  a tool that serializes launches)
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .blocks import Blocks, frame_blocks, in_start_order, order_statistics
from .intervals import (Coverage, count_in_windows, durations_in_windows, group_indices,
                        intersection_within, is_sorted, isin_blocks, lanes_per_batch, row_blocks, sum_in_windows,
                        union, union_of)
from .steps import rows_by_process
from .threads import in_blocks
from .trace.schema import COPY_DTOD, COPY_DTOH, COPY_HTOD, COPY_PTOP, COPY_UNIFIED, MEM_PAGEABLE, MEM_PINNED
from .trace.tables import pid_of

API_PATTERNS = {
    "launch": re.compile(r"^(cudaLaunch\w*|cuLaunch\w*|cudaGraphLaunch|cuGraphLaunch)(_v\d+)?$"),
    "sync_copy": re.compile(r"^(cudaMemcpy(2D|3D|Peer|ToSymbol|FromSymbol|ToArray|FromArray)?|"
                            r"cuMemcpy(HtoD|DtoH|DtoD|HtoA|AtoH|AtoD|DtoA|2D|3D|Peer)?)(_v\d+)?(_ptds)?$"),
    "sync_wait": re.compile(r"^(cudaStreamSynchronize|cudaDeviceSynchronize|cudaEventSynchronize|"
                            r"cuStreamSynchronize|cuCtxSynchronize|cuEventSynchronize)(_v\d+)?(_ptsz)?$"),
    "async_copy": re.compile(r"^(cudaMemcpy\w*Async|cuMemcpy\w*Async)(_v\d+)?(_ptsz)?$"),
    "module_load": re.compile(r"^(cuModuleLoad\w*|cuLibraryLoad\w*|cudaLibraryLoad\w*)(_v\d+)?$"),
    "alloc": re.compile(r"^(cudaMalloc(Host|Managed|Pitch|3D)?|cudaHostAlloc|cudaFree(Host)?|cudaHost(Un)?[Rr]egister|"
                        r"cuMemAlloc(Host|Managed|Pitch)?|cuMemFree(Host)?|cuMemHostAlloc|cuMemHost(Un)?[Rr]egister|"
                        r"cuMem(Create|Release|Map|Unmap|SetAccess|AddressReserve|AddressFree))(_v\d+)?$"),
}


# The ledger's busy classes, in precedence order (metrics' busy_<class>_ns): copy classes name (copyKind, memory)
BUSY_CLASSES = ["compute", "nccl", "htod_pageable", "htod_pinned", "dtoh_pageable", "dtoh_pinned", "dtod", "ptop",
                "unified", "other_copy", "memset"]

NCCL_KINDS = ["allreduce", "reducescatter", "allgather", "broadcast", "reduce", "sendrecv", "alltoall"]


def nccl_kind(kernel_name: str) -> str:
    """Collective kind of an NCCL kernel name ('ncclDevKernel_AllReduce_Sum_f32_RING_LL' -> 'allreduce');
    point-to-point kernels (SendRecv, Send, Recv) are 'sendrecv'; '' when none is named."""
    low = kernel_name.lower()
    for kind in ("allreduce", "reducescatter", "allgather", "broadcast", "alltoall", "sendrecv"):
        if kind in low:
            return kind
    if "send" in low or "recv" in low:
        return "sendrecv"
    return "reduce" if "reduce" in low else ""


def api_categories(names: dict[int, str]) -> dict[int, str]:
    """nameId -> category ('launch', 'sync_copy', 'sync_wait', 'async_copy', 'alloc') of the runtime API names that have one."""
    category = {i: next((k for k, p in API_PATTERNS.items() if p.match(n)), "") for i, n in names.items()}
    return {i: c for i, c in category.items() if c}


def classify_runtime(runtime: pd.DataFrame, names: dict[int, str]) -> pd.DataFrame:
    """``runtime`` with an ``api`` column ('launch', 'sync_copy', 'sync_wait', 'async_copy', 'alloc'; categorical,
    NaN for the calls of no category — kept, not copied out: callers select by category)."""
    category = api_categories(names)
    labels = list(API_PATTERNS)
    ids = np.array(sorted(category), dtype=np.int64)
    codes = np.array([labels.index(category[i]) for i in ids], dtype=np.int8)
    name_ids = runtime["nameId"].to_numpy()
    code = np.full(len(runtime), -1, dtype=np.int8)
    if ids.size and len(runtime):
        lo, hi = int(name_ids.min()), int(name_ids.max())
        if 0 <= lo and hi < 1 << 24:  # StringIds ids: a lookup table, no per-call index arrays
            table = np.full(max(hi, int(ids.max())) + 1, -1, dtype=np.int8)
            table[ids] = codes
            code = table[name_ids]
        else:
            pos = np.minimum(np.searchsorted(ids, name_ids), ids.size - 1)
            hit = ids[pos] == name_ids
            code[hit] = codes[pos[hit]]
    return runtime.assign(api=pd.Categorical.from_codes(code, categories=labels))


def _window_sums(windows: pd.DataFrame, tids: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                 codes: np.ndarray | None, columns: dict[str, tuple[int | None, bool]]) -> dict[str, np.ndarray]:
    """Per window row, for each name -> (code or None, durations): over the events (with ``codes`` equal to
    code; all events for None) starting in the window's CPU range [cpu_start, cpu_end), on the window's
    thread (globalTid) or, for globalTid -1, anywhere in its process: their count, or with ``durations``
    the sum of their end - start (ns).

    Vectorized over windows: each thread (or process) is a lane of its own on one time axis (see
    intervals.STACK_LIMIT), so one sorted pass counts every window. Events are taken a block at a
    time, blocks side by side (threads.in_blocks; the sums add up; masks and durations exist only per block).
    """
    out = {name: np.zeros(len(windows), dtype=np.int64) for name in columns}
    if len(tids) == 0 or windows.empty:
        return out
    cpu_start, cpu_end = windows["cpu_start"].to_numpy(), windows["cpu_end"].to_numpy()
    w_tid, w_pid = windows["globalTid"].to_numpy(), windows["globalPid"].to_numpy()
    for by_thread in (True, False):
        rows = np.flatnonzero((w_tid >= 0) == by_thread)
        if rows.size == 0:
            continue
        lanes, w_lane = np.unique((w_tid if by_thread else w_pid)[rows], return_inverse=True)
        lo = min(int(starts.min()), int(cpu_start[rows].min()))
        stride = max(int(starts.max()), int(cpu_end[rows].max())) - lo + 1
        per_batch = lanes_per_batch(stride)
        for first in range(0, lanes.size, per_batch):
            mine = (w_lane >= first) & (w_lane < first + per_batch)
            w_rows, shift = rows[mine], (w_lane[mine] - first) * stride - lo
            a, b = cpu_start[w_rows] + shift, cpu_end[w_rows] + shift
            batch = lanes[first:first + per_batch]

            def block_sums(block: slice) -> dict[str, np.ndarray]:  # per name: this block's sums per window
                sums = {}
                key = tids[block] if by_thread else pid_of(tids[block])
                lane = np.minimum(np.searchsorted(batch, key), batch.size - 1)
                take = np.flatnonzero(batch[lane] == key)
                t = starts[block][take] + (lane[take] * stride - lo)
                if not is_sorted(t):
                    order = np.argsort(t, kind="stable")
                    t, take = t[order], take[order]
                code = None if codes is None else codes[block][take]
                dur = None
                for name, (want, durations) in columns.items():
                    picked = slice(None) if want is None else code == want
                    if not durations:
                        sums[name] = count_in_windows(t[picked], a, b)
                        continue
                    if dur is None:
                        dur = ends[block][take] - starts[block][take]
                    sums[name] = sum_in_windows(t[picked], dur[picked], a, b)
                return sums
            for sums in in_blocks(block_sums, row_blocks(len(tids))):
                for name, values in sums.items():
                    out[name][w_rows] += values
    return out


EMPTY = Coverage(np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))


def _by_device(frame: pd.DataFrame, columns: list[str]):
    """Function (globalPid, deviceId) -> {column: array} over ``frame``'s rows of that device (no copy
    when every row belongs to it); the rows are grouped once."""
    groups = dict(group_indices(frame["globalPid"].to_numpy(), frame["deviceId"].to_numpy())) if len(frame) else {}
    arrays = {c: frame[c].to_numpy() for c in columns}

    def rows(key) -> dict[str, np.ndarray]:
        if key not in groups:
            return {c: a[:0] for c, a in arrays.items()}
        idx = groups[key]
        return dict(arrays) if idx is None else {c: a[idx] for c, a in arrays.items()}
    return rows


def _masked(cov: Coverage, starts: np.ndarray, ends: np.ndarray, mask: np.ndarray) -> Coverage:
    """Coverage of the masked intervals, reusing ``cov`` (all of them) or EMPTY (none) when possible."""
    n = int(np.count_nonzero(mask))
    return cov if n == mask.size else EMPTY if n == 0 else Coverage(starts[mask], ends[mask])


def _side_by_side(parts: list[dict[str, np.ndarray]], stride: int) -> dict[str, np.ndarray]:
    """Per-device column dicts as one, device j's start/end shifted by j * stride (rows sorted by start
    per device stay sorted)."""
    if len(parts) == 1:
        return parts[0]
    return {c: np.concatenate([p[c] + j * stride if c in ("start", "end") else p[c] for j, p in enumerate(parts)])
            for c in parts[0]}


# Kernels per time tile of the GPU window metrics (gpu_metrics): each tile's unions and their temporaries
# hold the activities overlapping that tile only, not the whole capture's.
TILE_KERNELS = 1 << 21
NEVER_BEFORE, NEVER_AFTER = np.iinfo(np.int64).min, np.iinfo(np.int64).max


def gpu_metrics(windows: pd.DataFrame, kernels: Blocks, memcpys: pd.DataFrame, memsets: pd.DataFrame,
                nccl_name_ids: np.ndarray, nccl_kinds: dict[int, str] | None = None,
                tile_kernels: int | None = None) -> pd.DataFrame:
    """GPU-side metrics per window row (same index as ``windows``); see the module docstring. ``kernels``:
    blocks (nsysanalyze.blocks), walked twice when there are several (their start order checked, then the
    tiles); ``nccl_kinds``: NCCL kernel nameId -> collective kind (:func:`nccl_kind`).

    Computed over time tiles of at most ``tile_kernels`` kernels (default TILE_KERNELS; :func:`time_tiles`):
    every window is cut at the tiles' bounds and each part measured on the activities overlapping its tile.
    Each ns, count and byte sum is additive over a tiling of its window (unions inside a part, counts and
    sums by start), so the parts add up to the one-pass values; the ratios are taken from the sums."""
    others = (memcpys, memsets)
    tiles = time_tiles(kernels, others, tile_kernels or TILE_KERNELS) if len(windows) else None
    if tiles is None:
        out = _gpu_sums(windows, _whole(kernels), *others, nccl_name_ids, nccl_kinds or {})
    else:
        out = {}
        w_start, w_end = windows["window_start"].to_numpy(), windows["window_end"].to_numpy()
        for (t0, t1), tile in tiles:
            parts = np.flatnonzero((w_start < t1) & (w_end > t0))
            if not parts.size:
                continue
            clipped = windows.iloc[parts].assign(window_start=np.maximum(w_start[parts], t0),
                                                 window_end=np.minimum(w_end[parts], t1))
            for name, values in _gpu_sums(clipped, *tile, nccl_name_ids, nccl_kinds or {}).items():
                out.setdefault(name, np.zeros(len(windows), dtype=np.int64))[parts] += values
    frame = pd.DataFrame(out, index=windows.index) if out else pd.DataFrame(index=windows.index)
    if frame.empty and not len(windows):
        return frame
    frame["idle_ns"] = frame["window_ns"] - frame["busy_ns"]
    frame["idle_fraction"] = _ratio(frame["idle_ns"], frame["window_ns"])
    frame["memcpy_kernel_overlap"] = _ratio(frame["memcpy_hidden_ns"], frame["memcpy_ns"])
    frame["htod_kernel_overlap"] = _ratio(frame["htod_hidden_ns"], frame["htod_ns"])
    frame["nccl_share"] = _ratio(frame["nccl_ns"], frame["window_ns"])
    return frame


def _whole(blocks: Blocks) -> pd.DataFrame:
    """The blocks as one frame: the block itself when there is one, else their rows concatenated."""
    return blocks[0] if len(blocks) == 1 else pd.concat(list(blocks), ignore_index=True)


def time_tiles(kernels: Blocks, others: tuple[pd.DataFrame, ...], tile_kernels: int):
    """Time tiles [t0, t1) ns cut at the first start of every piece of at most ``tile_kernels`` kernels of
    each block (walked once), each with the kernels, then the rows of each of ``others``, that overlap it:
    those starting in it and those started before it that end after t0 (carried from tile to tile; a row
    starting exactly at a cut is the later tile's). None: one block of at most ``tile_kernels`` kernels (one
    tile), or the kernels or a frame of ``others`` are not in start order (the tiles' rows are found by start)."""
    if (len(kernels) == 1 and len(kernels[0]) <= tile_kernels) or not in_start_order(kernels):
        return None
    starts = [f["start"].to_numpy() for f in others]
    if not all(is_sorted(s) for s in starts):
        return None
    return _tiles(kernels, others, tile_kernels)


def _tiles(kernels: Blocks, others: tuple[pd.DataFrame, ...], tile_kernels: int):
    """The tiles of :func:`time_tiles` (kernels and others in start order), one held at a time."""
    carried = [np.empty(0, np.int64) for _ in others]
    for (t0, t1), tile in _kernel_pieces(kernels, tile_kernels):
        rows = []
        for j, f in enumerate(others):
            s, e = f["start"].to_numpy(), f["end"].to_numpy()
            a, b = np.searchsorted(s, [t0, t1], side="left")
            mine = np.concatenate((carried[j], np.arange(a, b, dtype=np.int64)))
            carried[j] = mine[e[mine] > t1]
            rows.append(f.iloc[mine])
        yield (t0, t1), (tile, *rows)


def _kernel_pieces(kernels: Blocks, tile_kernels: int):
    """(t0, t1) and the kernels overlapping [t0, t1), tile by tile: a cut at the first start of each piece
    (``tile_kernels`` rows of a block) after the first; the kernels that reach past a cut carried into the
    next tile, and those starting exactly at a cut held for it."""
    t0, held, carried = NEVER_BEFORE, None, None  # held: kernels starting at or after t0 not yet in a tile
    for block in kernels:
        for piece in frame_blocks(block, tile_kernels):
            if not len(piece):
                continue
            if held is not None:
                t1 = int(piece["start"].iloc[0])
                start = held["start"].to_numpy()
                before = int(np.searchsorted(start, t1, side="left"))
                if t1 > t0:
                    tile = _joined(carried, held.iloc[:before])
                    yield (t0, t1), tile
                    carried = tile[tile["end"].to_numpy() > t1]
                    t0 = t1
                piece = _joined(held.iloc[before:], piece)
            held = piece
    if held is not None:
        yield (t0, NEVER_AFTER), _joined(carried, held)


def _joined(first: pd.DataFrame | None, then: pd.DataFrame) -> pd.DataFrame:
    """Rows of ``first`` then of ``then``; ``then`` itself (no copy) when ``first`` has none."""
    return then if first is None or not len(first) else pd.concat([first, then], ignore_index=True)


def _gpu_sums(windows: pd.DataFrame, kernels: pd.DataFrame, memcpys: pd.DataFrame, memsets: pd.DataFrame,
              nccl_name_ids: np.ndarray, nccl_kinds: dict[int, str]) -> dict[str, np.ndarray]:
    """Per window row: every GPU metric that is a sum (ns, counts, bytes) over these activities, devices side
    by side in batches (:func:`_device_metrics`); empty without windows."""
    out = {}
    if not len(windows):
        return out
    k_rows = _by_device(kernels, ["start", "end", "nameId"])
    m_rows = _by_device(memcpys, ["start", "end", "bytes", "copyKind", "srcKind", "dstKind"])
    s_rows = _by_device(memsets, ["start", "end"])
    w_start, w_end = windows["window_start"].to_numpy(), windows["window_end"].to_numpy()
    present = [f for f in (kernels, memcpys, memsets) if len(f)]
    lo = min([int(w_start.min())] + [int(f["start"].min()) for f in present])
    hi = max([int(w_end.max())] + [int(f["end"].max()) for f in present])
    stride = hi - lo + 1
    per_batch = lanes_per_batch(stride, hi)
    groups = list(windows.groupby(["globalPid", "deviceId"]).indices.items())
    for first in range(0, len(groups), per_batch):
        batch = groups[first:first + per_batch]
        idx = np.concatenate([i for _, i in batch])
        shift = np.repeat(np.arange(len(batch), dtype=np.int64) * stride, [len(i) for _, i in batch])
        cols = _device_metrics(w_start[idx] + shift, w_end[idx] + shift,
                               *(_side_by_side([rows(key) for key, _ in batch], stride) for rows in (k_rows, m_rows, s_rows)),
                               nccl_name_ids, nccl_kinds)
        for name, values in cols.items():
            out.setdefault(name, np.zeros(len(windows), dtype=np.int64))[idx] = values
    return out


def _device_metrics(a: np.ndarray, b: np.ndarray, k: dict, m: dict, s: dict, nccl_name_ids: np.ndarray,
                    nccl_kinds: dict[int, str]) -> dict:
    """GPU metrics of one device's windows [a, b) from its kernel, memcpy and memset columns.

    Only the unions K (kernels), X (non-NCCL), N (NCCL), memcpys and memsets are built; every
    overlap comes from :func:`intersection_within` and inclusion-exclusion, e.g. busy = |K| + |C| - |K ∩ C|.
    """
    ks, ke = k["start"], k["end"]
    is_nccl = isin_blocks(k["nameId"], nccl_name_ids)
    ms, me, kind = m["start"], m["end"], m["copyKind"]
    htod, dtoh, dtod, ptop = (kind == COPY_HTOD), (kind == COPY_DTOH), (kind == COPY_DTOD), (kind == COPY_PTOP)
    unified = np.isin(kind, COPY_UNIFIED)
    copies, sets = Coverage(ms, me), Coverage(s["start"], s["end"])
    htod_cov, dtoh_cov = _masked(copies, ms, me, htod), _masked(copies, ms, me, dtoh)
    copy_or_set = Coverage.of(copies, sets)
    # the copy classes' own ns now: only their unions with the kernels are needed later
    copy_side = {"memcpy_ns": copies.within(a, b), "memset_ns": sets.within(a, b), "htod_ns": htod_cov.within(a, b),
                 "dtoh_ns": dtoh_cov.within(a, b), "dtod_ns": _masked(copies, ms, me, dtod).within(a, b),
                 "ptop_ns": _masked(copies, ms, me, ptop).within(a, b),
                 "um_ns": _masked(copies, ms, me, unified).within(a, b)}
    del sets
    m_bytes, m_dur = m["bytes"], me - ms
    src, dst = m["srcKind"], m["dstKind"]

    def copy_sum(mask, values):
        return sum_in_windows(ms[mask], values[mask], a, b)

    ones_m = np.ones(len(ms), dtype=np.int64)
    # K first; its union is released before X's is made (each holds 3 int64 a kernel) unless X or N is K
    kern = Coverage(ks, ke)
    kernel_ns, copy_ns = kern.within(a, b), copy_or_set.within(a, b)
    kernel_copy = intersection_within(kern, copy_or_set, a, b)
    memcpy_hidden, htod_hidden, dtoh_hidden = (intersection_within(c, kern, a, b) for c in (copies, htod_cov, dtoh_cov))
    del copies, htod_cov, dtoh_cov  # released before X's union is made
    busy_ns = kernel_ns + copy_ns - kernel_copy
    busy_of = _busy_partition(kern, ms, me, {
        "htod_pageable": htod & (src == MEM_PAGEABLE), "htod_pinned": htod & (src != MEM_PAGEABLE),
        "dtoh_pageable": dtoh & (dst == MEM_PAGEABLE), "dtoh_pinned": dtoh & (dst != MEM_PAGEABLE),
        "dtod": dtod, "ptop": ptop, "unified": unified, "other_copy": ~(htod | dtoh | dtod | ptop | unified)},
        kernel_ns, busy_ns, a, b)
    no_nccl, all_nccl = not is_nccl.any(), bool(is_nccl.all())
    if not (no_nccl or all_nccl):
        del kern
    compute = kern if no_nccl else EMPTY if all_nccl else Coverage(ks[~is_nccl], ke[~is_nccl], owned=True)
    compute_ns = kernel_ns if no_nccl else compute.within(a, b)
    compute_copy = kernel_copy if no_nccl else intersection_within(compute, copy_or_set, a, b)
    per_kind = {}
    nccl_rows = np.flatnonzero(is_nccl)  # each kind's kernels are NCCL kernels: picked among those
    nccl_names = k["nameId"][nccl_rows]
    for kind in NCCL_KINDS:
        ids = np.array([i for i, kd in nccl_kinds.items() if kd == kind], dtype=np.int64)
        rows = nccl_rows[np.isin(nccl_names, ids)] if ids.size else nccl_rows[:0]
        cov = Coverage(ks[rows], ke[rows], owned=True) if rows.size else EMPTY
        kind_ns = cov.within(a, b)
        per_kind[f"nccl_{kind}_count"] = count_in_windows(ks[rows], a, b)
        per_kind[f"nccl_{kind}_ns"] = kind_ns
        per_kind[f"nccl_{kind}_exposed_ns"] = kind_ns - intersection_within(cov, compute, a, b) if rows.size else kind_ns
        del cov
    del compute, nccl_names
    nccl = kern if all_nccl else EMPTY if no_nccl else Coverage(ks[nccl_rows], ke[nccl_rows], owned=True)
    nccl_ns = kernel_ns if all_nccl else nccl.within(a, b)
    nccl_copy = kernel_copy if all_nccl else intersection_within(nccl, copy_or_set, a, b)
    del nccl
    return {
        "window_ns": b - a,
        "busy_ns": busy_ns,
        "kernel_ns": kernel_ns,
        "kernel_count": count_in_windows(ks, a, b),
        "kernel_sum_ns": durations_in_windows(ks, ke, a, b),
        "memcpy_ns": copy_side["memcpy_ns"],
        "memcpy_hidden_ns": memcpy_hidden,
        "memset_ns": copy_side["memset_ns"],
        "htod_ns": copy_side["htod_ns"],
        "htod_hidden_ns": htod_hidden,
        "htod_count": copy_sum(htod, ones_m),
        "htod_bytes": copy_sum(htod, m_bytes),
        "htod_pageable_bytes": copy_sum(htod & (src == MEM_PAGEABLE), m_bytes),
        "htod_pinned_bytes": copy_sum(htod & (src == MEM_PINNED), m_bytes),
        "htod_pageable_ns": copy_sum(htod & (src == MEM_PAGEABLE), m_dur),
        "htod_pinned_ns": copy_sum(htod & (src == MEM_PINNED), m_dur),
        "dtoh_count": copy_sum(dtoh, ones_m),
        "dtoh_bytes": copy_sum(dtoh, m_bytes),
        "dtoh_pageable_bytes": copy_sum(dtoh & (dst == MEM_PAGEABLE), m_bytes),
        "dtoh_ns": copy_side["dtoh_ns"],
        "dtoh_hidden_ns": dtoh_hidden,
        "dtod_count": copy_sum(dtod, ones_m),
        "dtod_bytes": copy_sum(dtod, m_bytes),
        "dtod_ns": copy_side["dtod_ns"],
        "ptop_count": copy_sum(ptop, ones_m),
        "ptop_bytes": copy_sum(ptop, m_bytes),
        "ptop_ns": copy_side["ptop_ns"],
        "um_count": copy_sum(unified, ones_m),
        "um_bytes": copy_sum(unified, m_bytes),
        "um_ns": copy_side["um_ns"],
        "nccl_count": count_in_windows(ks[nccl_rows], a, b),
        "nccl_ns": nccl_ns,
        # |NCCL - compute| = |kernels| - |compute|, since kernels = NCCL ∪ compute
        "nccl_exposed_ns": kernel_ns - compute_ns,
        # Venn regions of X (compute), N (NCCL), C (copies and memsets); X ∪ N = K, X ∪ N ∪ C = busy
        "time_compute_only_ns": busy_ns - (nccl_ns + copy_ns - nccl_copy),
        "time_copy_hidden_ns": copy_ns - (busy_ns - kernel_ns),
        "time_copy_exposed_ns": busy_ns - kernel_ns,
        "time_nccl_overlapped_ns": (compute_ns + copy_ns - compute_copy) + (nccl_ns + copy_ns - nccl_copy) - copy_ns - busy_ns,
        "time_nccl_exposed_ns": busy_ns - (compute_ns + copy_ns - compute_copy),
        **per_kind,
        "busy_compute_ns": compute_ns,
        "busy_nccl_ns": kernel_ns - compute_ns,
        **busy_of,
    }


def _busy_partition(kern: Coverage, ms: np.ndarray, me: np.ndarray, classes: dict[str, np.ndarray],
                    kernel_ns: np.ndarray, busy_ns: np.ndarray, a: np.ndarray, b: np.ndarray) -> dict[str, np.ndarray]:
    """busy_<class>_ns of each copy class (``classes``: name -> mask of the copies, in precedence order) and
    of memsets: the ns each adds to the union of the kernels and the classes before it, inside [a, b).
    |K ∪ P| = |K| + |P| - |K ∩ P| for each prefix P of the copy classes (copies are few: each prefix's union
    and its intersection with the kernels cost O(copies log kernels))."""
    out, covered, chosen = {}, kernel_ns, np.zeros(ms.size, dtype=bool)
    for name, mask in classes.items():
        if not mask.any():
            out[f"busy_{name}_ns"] = np.zeros_like(kernel_ns)
            continue
        chosen |= mask
        prefix = Coverage(ms[chosen], me[chosen])
        upto = kernel_ns + prefix.within(a, b) - intersection_within(kern, prefix, a, b)
        out[f"busy_{name}_ns"], covered = upto - covered, upto
    out["busy_memset_ns"] = busy_ns - covered
    return out


def cpu_metrics(windows: pd.DataFrame, api_calls: Blocks) -> pd.DataFrame:
    """CPU-side metrics per window row: cpu_ns and the API call counts and ns (int64; see the module docstring).
    ``api_calls``: blocks of classified runtime calls (:func:`classify_runtime`: start, end, globalTid, api), one
    held at a time: each block's sums per window are added (one block: one pass over its calls)."""
    out = pd.DataFrame(index=windows.index)
    out["cpu_ns"] = (windows["cpu_end"] - windows["cpu_start"]).to_numpy()
    totals = {f"{name}_{unit}": np.zeros(len(windows), dtype=np.int64)
              for name in API_PATTERNS for unit in ("calls", "ns")}
    for block in api_calls:
        api = pd.Categorical(block["api"])
        columns = {}
        for name in API_PATTERNS:
            code = api.categories.get_loc(name) if name in api.categories else -2
            columns[f"{name}_calls"] = (code, False)
            columns[f"{name}_ns"] = (code, True)
        sums = _window_sums(windows, block["globalTid"].to_numpy(), block["start"].to_numpy(), block["end"].to_numpy(),
                            api.codes, columns)
        for name, values in sums.items():
            totals[name] += values
    for name, values in totals.items():
        out[name] = values
    return out


def median_launch_ns(runtime: Blocks, names: dict[int, str]) -> dict[int, float]:
    """globalPid -> the median duration (ns) of its kernel launch calls (API_PATTERNS' 'launch'): a launch's own
    host cost. A call that finds the GPU's launch queue full waits for a slot, so the longer calls of a GPU-bound
    loop are mostly waiting; the median stands for the call that did not (fewer than half of a loop's calls
    wait: a queue holds on the order of a thousand launches).

    ``runtime``: blocks of start, end, globalTid, nameId. One block: np.median of each process's durations; several:
    the same values exactly (the mean of the middle pair), from :func:`blocks.order_statistics` (between blocks, per
    process: the count, shortest and longest launch)."""
    ids = np.array([i for i, c in api_categories(names).items() if c == "launch"], dtype=np.int64)
    if ids.size == 0:
        return {}
    return _median_launch_of_frame(runtime[0], ids) if len(runtime) == 1 else _median_launch_of_blocks(runtime, ids)


def _median_launch_of_frame(runtime: pd.DataFrame, ids: np.ndarray) -> dict[int, float]:
    """:func:`median_launch_ns` of one frame: per process, np.median of its launch durations (ns)."""
    if runtime.empty:
        return {}
    start, end = runtime["start"].to_numpy(), runtime["end"].to_numpy()
    launch = isin_blocks(runtime["nameId"].to_numpy(), ids)
    out = {}
    for pid, rows in rows_by_process(runtime["globalTid"].to_numpy(), of_tid=True):
        ns = np.empty(int(launch.sum() if rows is None else launch[rows].sum()), dtype=np.int64)
        filled = 0
        for r in row_blocks(launch.size, rows):  # a block at a time: no frame copy of 10M launches
            block = (end[r] - start[r])[launch[r]]
            ns[filled:filled + block.size] = block
            filled += block.size
        if ns.size:
            out[int(pid)] = float(np.median(ns, overwrite_input=True))
    return out


def _median_launch_of_blocks(runtime: Blocks, ids: np.ndarray) -> dict[int, float]:
    """:func:`median_launch_ns` of several blocks: a walk for each process's launch count, shortest and longest
    (ns), then the walks of :func:`blocks.order_statistics` for the middle pair."""
    extremes: dict[int, tuple[int, int, int]] = {}  # globalPid -> (launches, shortest, longest)
    for block in runtime:
        tid, ns = _launch_durations(block, ids)
        for pid, rows in rows_by_process(tid, of_tid=True):
            mine = ns if rows is None else ns[rows]
            count, shortest, longest = extremes.get(pid, (0, np.iinfo(np.int64).max, np.iinfo(np.int64).min))
            extremes[pid] = (count + mine.size, min(shortest, int(mine.min())), max(longest, int(mine.max())))
    if not extremes:
        return {}
    pids = np.array(sorted(extremes), dtype=np.int64)
    count, shortest, longest = (np.array(v, dtype=np.int64) for v in zip(*(extremes[p] for p in pids.tolist())))

    def process_durations():
        for block in runtime:
            tid, ns = _launch_durations(block, ids)
            yield np.searchsorted(pids, pid_of(tid)), ns
    low, high = (count - 1) // 2, count // 2
    even = high > low
    process = np.arange(pids.size)
    query = np.concatenate((process, process[even]))
    values = order_statistics(process_durations, query, np.concatenate((low, high[even])), shortest[query],
                              longest[query], count)
    upper = values[:pids.size].copy()
    upper[even] = values[pids.size:]
    return dict(zip(pids.tolist(), ((values[:pids.size] + upper) / 2).tolist()))


def _launch_durations(block: pd.DataFrame, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The globalTid and duration (end - start, int64 ns) of the block's launch calls (nameId in ``ids``)."""
    launch = isin_blocks(block["nameId"].to_numpy(), ids)
    ns = block["end"].to_numpy(np.int64)[launch] - block["start"].to_numpy(np.int64)[launch]
    return block["globalTid"].to_numpy()[launch], ns


def launch_waits(windows: pd.DataFrame, kernels: Blocks, runtime: Blocks) -> pd.DataFrame:
    """launch_blocked_kernel_ns and launch_wait_ns per window row (int64 ns; see the module docstring). ``kernels``:
    blocks of start, end, globalPid, deviceId, correlationId; ``runtime``: blocks of the calls' start, end, globalTid,
    correlationId, walked once for each process's calls by correlationId (:func:`_calls_by_correlation`; a kernel's
    launch is the call of its process with its correlationId; other calls have other ids). Only the kernels that ended
    inside their call are kept; a call that launched several kernels (a CUDA graph) waits once, with its
    first kept kernel by start (ties: the first row). Both sums add up over the blocks.

    One pass over the blocks while they are in start order (and each kept kernel ends at or after its start): a
    call's wait is counted once no later kernel can be kept by it (the call ended before the last start so far);
    until then its first kept kernel is carried (the calls open at a cut). A block that breaks that order starts a
    second pass, which carries every call's first kept kernel to the end (one entry per call that kept one)."""
    sums = np.zeros((2, len(windows)), dtype=np.int64)
    calls = _calls_by_correlation(runtime) if len(windows) else {}
    if calls:
        sums = _launch_sums(windows, kernels, calls, in_order=True)
        sums = _launch_sums(windows, kernels, calls, in_order=False) if sums is None else sums
    return pd.DataFrame({"launch_blocked_kernel_ns": sums[0], "launch_wait_ns": sums[1]}, index=windows.index)


def _calls_by_correlation(runtime: Blocks) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per globalPid, its calls' correlationId, start and end (ns), by correlationId (stable: equal ids in row order),
    the blocks taken one at a time. One block: its columns (no copy when one process has every row); several: only
    these three columns of each process's rows are kept, then concatenated in block order."""
    several = len(runtime) > 1
    parts: dict[int, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
    for block in runtime:  # of several blocks, copies: a view would hold the block's other columns
        columns = [block[c].to_numpy(copy=several) for c in ("correlationId", "start", "end")]
        for pid, idx in rows_by_process(block["globalTid"].to_numpy(), of_tid=True):
            parts.setdefault(pid, []).append(tuple(a if idx is None else a[idx] for a in columns))
    out = {}
    for pid in list(parts):
        mine = parts.pop(pid)
        corr, start, end = mine[0] if len(mine) == 1 else (np.concatenate(c) for c in zip(*mine))
        del mine
        if not is_sorted(corr):
            order = np.argsort(corr, kind="stable")
            corr, start, end = corr[order], start[order], end[order]
        out[pid] = (corr, start, end)
    return out


def _launch_sums(windows: pd.DataFrame, kernels: Blocks, calls: dict, in_order: bool) -> np.ndarray | None:
    """launch_blocked_kernel_ns and launch_wait_ns (rows 0 and 1, int64 ns) per window in one pass over the
    blocks (:func:`launch_waits`); ``in_order``: the blocks are taken to be in start order (None at the first
    that is not)."""
    groups = windows.groupby(["globalPid", "deviceId"]).indices
    w_start, w_end = windows["window_start"].to_numpy(), windows["window_end"].to_numpy()
    sums = np.zeros((2, len(windows)), dtype=np.int64)

    def add(row: int, kept: dict[str, np.ndarray], values: np.ndarray) -> None:  # values summed by kernel start
        for (p, d), w_rows in groups.items():
            on = (kept["pid"] == p) & (kept["dev"] == d)
            if on.any():
                sums[row, w_rows] += sum_in_windows(kept["start"][on], values[on], w_start[w_rows], w_end[w_rows])

    def add_waits(first: dict[str, np.ndarray]) -> None:  # each call's first kept kernel: the call's wait
        add(1, first, first["call_end"] - np.maximum(first["call_start"], first["start"]))

    carry, rows, last = None, 0, NEVER_BEFORE  # carry: the first kept kernel of each call not yet counted
    for block in kernels:
        start = block["start"].to_numpy()
        if in_order and start.size and (int(start[0]) < last or not is_sorted(start)):
            return None
        kept = _kept_launches(block, calls)
        if in_order and not (kept["end"] >= kept["start"]).all():
            return None
        add(0, kept, kept["end"] - kept["start"])
        kept["row"] = kept["row"] + rows
        carry = _first_per_call(kept if carry is None else {c: np.concatenate((carry[c], v)) for c, v in kept.items()})
        rows += len(block)
        if in_order and start.size:
            last = int(start[-1])  # later kernels start at or after it: a call ended before it keeps none of them
        counted = carry["call_end"] < last
        add_waits({c: v[counted] for c, v in carry.items()})
        carry = {c: v[~counted] for c, v in carry.items()}
    if carry is not None:
        add_waits(carry)
    return sums


def _kept_launches(block: pd.DataFrame, calls: dict) -> dict[str, np.ndarray]:
    """The block's kernels that ended inside their launch call (:func:`_calls_by_correlation`): per kernel its row
    in the block, globalPid (pid), call's position among its process's (call) and that call's start and end
    (call_start, call_end), its start, end and deviceId (dev); a block of rows at a time, process by process."""
    k_pid, k_corr, k_end = (block[c].to_numpy() for c in ("globalPid", "correlationId", "end"))
    found: dict[str, list[np.ndarray]] = {c: [] for c in ("row", "pid", "call", "call_start", "call_end")}
    for pid, idx in rows_by_process(k_pid, of_tid=False):
        if pid not in calls:
            continue
        corr, c_start, c_end = calls[pid]

        def inside(sel, corr=corr, c_end=c_end) -> tuple[np.ndarray, np.ndarray]:  # (kernel rows, their calls)
            pos = np.searchsorted(corr, k_corr[sel])
            np.minimum(pos, corr.size - 1, out=pos)
            hit = np.flatnonzero((corr[pos] == k_corr[sel]) & (k_end[sel] <= c_end[pos]))
            return (hit + sel.start if isinstance(sel, slice) else sel[hit]), pos[hit]
        for rows, pos in in_blocks(inside, row_blocks(len(block), idx)):
            for c, v in zip(found, (rows, np.full(rows.size, pid, dtype=np.int64), pos, c_start[pos], c_end[pos])):
                found[c].append(v)
    kept = {c: np.concatenate(v) if v else np.empty(0, np.int64) for c, v in found.items()}
    row = kept["row"]
    kept.update(start=block["start"].to_numpy()[row], end=k_end[row], dev=block["deviceId"].to_numpy()[row])
    return kept


def _first_per_call(kept: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Of kept kernels (:func:`_kept_launches`, rows numbered across blocks), each call's first by start (ties: the
    first row)."""
    order = np.lexsort((kept["row"], kept["start"], kept["call"], kept["pid"]))
    pid, call = kept["pid"][order], kept["call"][order]
    first = order[np.concatenate(([True], (pid[1:] != pid[:-1]) | (call[1:] != call[:-1])))] if order.size else order
    return {c: v[first] for c, v in kept.items()}


class CallsOutOfOrder(ValueError):
    """A block's call starts before the latest start of its thread or process in earlier blocks."""


def munmap_metrics(windows: pd.DataFrame, munmap: pd.DataFrame, idle: dict[tuple[int, int], tuple],
                   reach: dict | None = None) -> pd.DataFrame:
    """munmap_count, munmap_ns and munmap_gpu_idle_ns per window row (the module docstring); ``idle``: per
    (globalPid, deviceId) the GPU idle intervals (starts, ends ns), the complement of the busy union over
    a span holding each of that device's windows (attribution.idle_by_device). ``reach``: for the calls given
    a block at a time in start order, the state between blocks (a dict, updated): then the blocks' metrics
    add up to those of every call (CallsOutOfOrder when a call starts before an earlier block's latest call
    of its thread or process)."""
    out = pd.DataFrame(index=windows.index)
    mm = _window_sums(windows, munmap["globalTid"].to_numpy(), munmap["start"].to_numpy(), munmap["end"].to_numpy(),
                      None, {"munmap_count": (None, False), "munmap_ns": (None, True)})
    out["munmap_count"] = mm["munmap_count"]
    out["munmap_ns"] = mm["munmap_ns"]
    out["munmap_gpu_idle_ns"] = _munmap_gpu_idle(windows, munmap, idle, reach)
    return out


def _munmap_gpu_idle(windows: pd.DataFrame, munmap: pd.DataFrame, idle: dict[tuple[int, int], tuple],
                     reach: dict | None = None) -> np.ndarray:
    """GPU idle ns in each GPU window coinciding with munmap calls of the window's thread/process:
    |munmap ∩ idle| inside the window (= |munmap - busy| there: the window lies in the idle's span). With
    ``reach`` (munmap_metrics), only the part of this block's union that no earlier block's call covers."""
    out = np.zeros(len(windows), dtype=np.int64)
    if munmap.empty:
        return out
    mm_tid = munmap["globalTid"].to_numpy()
    starts, ends = munmap["start"].to_numpy(), munmap["end"].to_numpy()
    by_thread, by_process = dict(group_indices(mm_tid)), dict(group_indices(pid_of(mm_tid)))  # grouped once
    w_start, w_end = windows["window_start"].to_numpy(), windows["window_end"].to_numpy()
    unions: dict[tuple, Coverage] = {}  # a process's (or thread's) munmap union, made once for all its devices
    idle_of: dict[tuple, Coverage] = {}  # a device's idle, made once for all its windows' threads
    for (pid, dev, tid), idx in windows.groupby(["globalPid", "deviceId", "globalTid"]).indices.items():
        key = (pid,) if tid < 0 else (tid,)
        groups = by_process if tid < 0 else by_thread
        if (pid, dev) not in idle or key not in groups:
            continue
        if (tid < 0, key) not in unions:
            rows = groups[key]
            s, e = (starts, ends) if rows is None else (starts[rows], ends[rows])
            unions[(tid < 0, key)] = Coverage(s, e) if reach is None else _uncovered_before(s, e, reach, (tid < 0, key))
        if (pid, dev) not in idle_of:
            idle_of[(pid, dev)] = Coverage(*idle[(pid, dev)], disjoint=True)
        out[idx] = intersection_within(unions[(tid < 0, key)], idle_of[(pid, dev)], w_start[idx], w_end[idx])
    return out


def _uncovered_before(starts: np.ndarray, ends: np.ndarray, reach: dict, key: tuple) -> Coverage:
    """The union of one key's calls of this block less what its earlier blocks' calls cover: each call from
    the furthest end of the calls started before it (``reach[key]``: the earlier blocks' latest start and
    furthest end, updated)."""
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    latest, furthest = reach.get(key, (np.iinfo(np.int64).min, np.iinfo(np.int64).min))
    if s[0] < latest:
        raise CallsOutOfOrder(f"a munmap call starts at {s[0]} ns, before an earlier block's at {latest} ns")
    covered = np.maximum.accumulate(e)
    reach[key] = (int(s[-1]), max(furthest, int(covered[-1])))
    s = np.maximum(s, np.concatenate(([furthest], np.maximum(covered[:-1], furthest))))
    new = e > s
    return Coverage(s[new], e[new], disjoint=True)


def busy_coverage(kernels: Blocks, memcpys: pd.DataFrame, memsets: pd.DataFrame) -> dict[tuple[int, int], Coverage]:
    """Union of all GPU work per (globalPid, deviceId) (disjoint [start, end) ns), devices in sorted order. One
    pass over the kernel blocks, one held at a time: per device, the union of each block's kernels is kept
    (the state between blocks: no larger than the result); at the end those unions are joined in one union
    and merged with the copies and the memsets (:func:`intervals.union_of`; a sorted, disjoint union is the
    same whatever the cut). One block: its kernels' columns go to the merge as they are."""
    unions: dict[tuple[int, int], list[tuple[np.ndarray, np.ndarray]]] = {}
    whole = len(kernels) == 1
    for block in kernels:
        for key, part in _device_intervals(block):
            unions.setdefault(key, []).append(part if whole else union_of(part))
    others = [dict(_device_intervals(f)) for f in (memcpys, memsets)]
    out = {}
    for key in sorted(set(unions).union(*others)):
        mine = unions.pop(key, [])
        kernel = mine[0] if len(mine) == 1 else union(*(np.concatenate(c) for c in zip(*mine)), owned=True) if mine else None
        del mine
        out[key] = Coverage(*union_of(*[p for p in (kernel, *(o.get(key) for o in others)) if p is not None]),
                            disjoint=True)
    return out


def _device_intervals(frame: pd.DataFrame) -> list[tuple[tuple[int, int], tuple[np.ndarray, np.ndarray]]]:
    """Per (globalPid, deviceId) of ``frame``: its rows' (start, end) arrays (no copy when one device has them all)."""
    start, end = frame["start"].to_numpy(), frame["end"].to_numpy()
    return [(key, (start, end) if idx is None else (start[idx], end[idx]))
            for key, idx in group_indices(frame["globalPid"].to_numpy(), frame["deviceId"].to_numpy())]


def htod_on_kernel_streams(kernels: Blocks, memcpys: pd.DataFrame) -> pd.DataFrame:
    """Per (globalPid, deviceId) with HtoD copies: htod_on_kernel_streams_fraction, the share of its HtoD
    copies issued on a stream of that device that also runs kernels (kernels need streamId). One pass over the
    kernel blocks (none without HtoD copies); between blocks, the set of (globalPid, deviceId, streamId) seen."""
    cols = ["globalPid", "deviceId", "streamId"]
    htod = memcpys.loc[memcpys["copyKind"].to_numpy() == COPY_HTOD, cols].astype(np.int64)
    if htod.empty:
        return pd.DataFrame({"globalPid": [], "deviceId": [], "htod_on_kernel_streams_fraction": []})
    used: set[tuple[int, int, int]] = set()
    for block in kernels:
        used |= _streams_of(block)
    on_kernel_stream = pd.MultiIndex.from_frame(htod).isin(pd.MultiIndex.from_tuples(list(used), names=cols))
    frac = pd.Series(on_kernel_stream, dtype=float).groupby([htod["globalPid"].to_numpy(), htod["deviceId"].to_numpy()]).mean()
    return frac.rename_axis(["globalPid", "deviceId"]).rename("htod_on_kernel_streams_fraction").reset_index()


def nccl_on_compute_streams(kernels: Blocks, nccl_name_ids: np.ndarray) -> pd.DataFrame:
    """Per (globalPid, deviceId) with NCCL kernels: ``nccl_on_compute_stream_fraction``, the share of its
    NCCL kernel time on streams that also run other (compute) kernels — communication that cannot overlap
    compute, since a stream runs its kernels one after another — and ``nccl_compute_stream``, the stream
    holding most of that time (-1 when none; ties: the lowest); kernels need streamId, start, end, nameId.

    One pass over the kernel blocks; between blocks, per (globalPid, deviceId, streamId) its NCCL kernels' ns
    (int64 sums, exact: as float64 sums they would be too while every partial sum stays below 2^53 ns) and the
    set of streams running other kernels."""
    cols = ["globalPid", "deviceId", "streamId"]
    nccl_ns, others = None, set()  # nccl_ns: int64 ns per (globalPid, deviceId, streamId), sorted
    for block in kernels:
        nccl = np.isin(block["nameId"].to_numpy(), nccl_name_ids)
        others |= _streams_of(block, ~nccl)
        if not nccl.any():
            continue
        rows = np.flatnonzero(nccl)  # the NCCL kernels (the compute kernels are never gathered)
        comm = pd.DataFrame({c: block[c].to_numpy()[rows].astype(np.int64) for c in cols})
        part = comm.assign(ns=block["end"].to_numpy()[rows] - block["start"].to_numpy()[rows]).groupby(cols)["ns"].sum()
        nccl_ns = part if nccl_ns is None else pd.concat([nccl_ns, part]).groupby(level=cols).sum()
    if nccl_ns is None:
        return pd.DataFrame({"globalPid": [], "deviceId": [], "nccl_on_compute_stream_fraction": [],
                             "nccl_compute_stream": []})
    shared = np.array([key in others for key in nccl_ns.index], dtype=bool)  # per stream
    ns = nccl_ns.astype(np.float64)
    comm = pd.DataFrame({"ns": ns, "shared_ns": ns.where(shared, 0.0)})
    per = comm.groupby(level=["globalPid", "deviceId"])[["ns", "shared_ns"]].sum()
    by_stream = comm.loc[shared, "shared_ns"]
    top = (by_stream.groupby(level=[0, 1]).idxmax().map(lambda k: k[2]) if len(by_stream)
           else pd.Series(dtype=np.int64))
    out = pd.DataFrame({"nccl_on_compute_stream_fraction": per["shared_ns"] / per["ns"].where(per["ns"] > 0),
                        "nccl_compute_stream": top.reindex(per.index).fillna(-1).astype(np.int64)})
    return out.reset_index()


def _streams_of(block: pd.DataFrame, mask: np.ndarray | None = None) -> set[tuple[int, int, int]]:
    """The (globalPid, deviceId, streamId) of a block's kernels (those in ``mask`` only): each device's streams
    hashed (no copy of the rows when every row is taken and the device has them all)."""
    pid, dev, stream = (block[c].to_numpy() for c in ("globalPid", "deviceId", "streamId"))
    if mask is not None and not mask.all():
        pid, dev, stream = pid[mask], dev[mask], stream[mask]
    return {(p, d, s) for (p, d), idx in group_indices(pid, dev)
            for s in pd.unique(stream if idx is None else stream[idx]).tolist()}


def _ratio(num: pd.Series, den: pd.Series) -> pd.Series:
    """num / den with NaN where den is 0."""
    return num / den.where(den > 0)


SUMMARY_MEDIAN_COLUMNS = ["window_ns", "cpu_ns", "idle_fraction", "memcpy_kernel_overlap", "htod_kernel_overlap",
                          "nccl_share", "nccl_ns", "nccl_exposed_ns", "dtod_bytes", "dtod_ns", "htod_bytes",
                          "htod_ns", "idle_ns", "munmap_gpu_idle_ns", "kernel_count", "nccl_count"]


def steady_steps(step_metrics: pd.DataFrame) -> pd.DataFrame:
    """The closed steps of each (globalPid, deviceId) that has any; all of its steps otherwise."""
    if step_metrics.empty or "closed" not in step_metrics:
        return step_metrics
    closed = step_metrics["closed"].astype(bool)
    any_closed = closed.groupby([step_metrics["globalPid"], step_metrics["deviceId"]]).transform("any")
    return step_metrics[closed | ~any_closed]


def step_medians(step_metrics: pd.DataFrame) -> pd.DataFrame:
    """Median per (globalPid, deviceId) over its steady steps (see :func:`steady_steps`)."""
    if step_metrics.empty:
        return pd.DataFrame(columns=["globalPid", "deviceId", "steps"])
    use = steady_steps(step_metrics)
    med = use.groupby(["globalPid", "deviceId"])[SUMMARY_MEDIAN_COLUMNS].median()
    med.columns = [f"step_median_{c}" for c in med.columns]
    med.insert(0, "steps", step_metrics.groupby(["globalPid", "deviceId"]).size())
    return med.reset_index()
