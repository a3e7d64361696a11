"""Per-kernel view: per (process, GPU), every kernel name with its launches and time, largest total first.

Names are as ``nsys stats -r cuda_gpu_kern_sum`` shows them: the demangled name (``base``: the short
name). Times are ns of kernel execution (end - start); ``share`` is the kernel's part of the
device's summed kernel time (as the report's ``Time (%)``, per device). With steps, ``per_step_ns``
and ``launches_per_step`` are the kernel's time and launches in the steady steps (see
``metrics.steady_steps``: kernels starting inside a step window) divided by their number; without
steps they are null. ``aggregate`` is pure (frame in, frame out; the names from a mapping or a lookup it is
given); ``kernel_table`` ties it to an analysis, ``from_trace`` to a read of its own.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

from .blocks import Blocks, frame_blocks, order_statistics
from .intervals import group_codes, group_indices, row_blocks, search_sorted
from .metrics import steady_steps

# Matrix kernels (GEMMs, convolutions) that compute in full fp32 on the FMA units: cuBLAS' ``*sgemm*`` and
# ``xmma_gemm_f32f32_f32f32_f32_*_ffma_*``, CUTLASS' ``simt_sgemm``, cuDNN's ``implicit_convolve_sgemm``,
# ``xmma_*_implicit_gemm_f32f32_f32f32_*_ffma`` and its older float engines (``dgrad_engine<float, ...>``,
# ``wgrad_alg0_engine<float, ...>``, ``dgrad2d_alg1_1<float, ...>``: their demangled names carry the type).
# Not counted: tensor-core kernels, which name their MMA or input type (``tf32``, ``s1688``/``s16816``,
# ``tensorop``, ``hmma``, ``gmma``, ``bf16``, ``f16``); fp16 GEMMs on the FMA units (``ampere_fp16_sgemm_fp16_*``,
# ``hgemm``: half inputs computed off the tensor cores), which are no fp32 work; GEMVs and small-N GEMMs
# (``gemv``, ``gemmSN``), which are memory-bound.
FP32_FMA_MATMUL = r"(?i)sgemm|(?:gemm|conv|fprop|dgrad|wgrad).*_ffma(?:_|$)|(?:dgrad|wgrad)\w*<float\b"
NOT_FP32_FMA_MATMUL = r"(?i)tf32|tensorop|s1688|s16816|hmma|gmma|bf16|f16|fp16|hgemm|half|int8|gemv|gemmSN"
MATMUL_COLUMNS = ["globalPid", "deviceId", "fp32_matmul_ns", "fp32_matmul_share", "fp32_matmul_top"]


def fp32_fma_matmul(names: pd.Series) -> np.ndarray:
    """Whether each kernel name is a matrix kernel computing in full fp32 on the FMA units (FP32_FMA_MATMUL)."""
    names = names.astype(str)
    return (names.str.contains(FP32_FMA_MATMUL) & ~names.str.contains(NOT_FP32_FMA_MATMUL)).to_numpy(bool)


def fp32_matmul_time(table: pd.DataFrame) -> pd.DataFrame:
    """Per (globalPid, deviceId) of a per-kernel table (:func:`aggregate`): the fp32 FMA matrix kernels' time
    (``fp32_matmul_ns``: ns per steady step when the table has steps, else over the capture), their share of the
    device's kernel time, and the largest one's name (``fp32_matmul_top``). Devices without one are left out."""
    chosen = table[fp32_fma_matmul(table["name"])] if len(table) else table
    if chosen.empty:
        return pd.DataFrame(columns=MATMUL_COLUMNS)
    per_step = pd.to_numeric(chosen["per_step_ns"], errors="coerce").to_numpy(np.float64)
    ns = np.where(np.isnan(per_step), chosen["total_ns"].to_numpy(np.float64), per_step)
    grouped = chosen.assign(ns=ns).groupby(["globalPid", "deviceId"], sort=False)
    out = grouped.agg(fp32_matmul_ns=("ns", "sum"), fp32_matmul_share=("share", "sum"), fp32_matmul_top=("name", "first"))
    return out.reset_index()[MATMUL_COLUMNS]


KERNEL_COLUMNS = ["globalPid", "deviceId", "name", "count", "total_ns", "mean_ns", "median_ns", "min_ns", "max_ns",
                  "share", "steps", "per_step_ns", "launches_per_step"]
UNNAMED = "(unnamed kernel)"


def aggregate(kernels: Blocks, names: dict[int, str] | Callable[[np.ndarray], dict[int, str]],
              steps: pd.DataFrame | None = None, name_column: str = "nameId") -> pd.DataFrame:
    """One row per (globalPid, deviceId, name id) of ``kernels`` (blocks, nsysanalyze.blocks, of rows with
    globalPid, deviceId, start, end ns and ``name_column``), sorted by device then total time (desc);
    ``names``: id -> name, or a function that gives that mapping for the distinct ids (a trace's ``strings``);
    ``steps``: step windows (globalPid, deviceId, window_start, window_end) that the per-step columns count in.
    One block: one grouping pass and one sort of (group, duration) keys. Several: a walk for the counts,
    sums, extremes and step sums, then the medians' walks (blocks.order_statistics). No per-kernel Python
    work, and no block is copied."""
    windows = steps if steps is not None and not steps.empty else None
    per_block = [_block_sums(b, name_column, windows) for b in kernels if len(b)]
    if not per_block:
        return pd.DataFrame(columns=KERNEL_COLUMNS)
    if len(per_block) == 1:
        out, median = per_block[0][0], per_block[0][1]
    else:
        out = _merged_sums([p[0] for p in per_block])
        median = _medians(kernels, out, name_column)
    out["name"] = out["nameId"].map(names(np.unique(out["nameId"].to_numpy())) if callable(names) else names).fillna(UNNAMED)
    count, total = out["count"].to_numpy(), out["total_ns"].to_numpy()
    out = out.assign(mean_ns=total / count, median_ns=median)
    out["share"] = out["total_ns"] / out.groupby(["globalPid", "deviceId"])["total_ns"].transform("sum")
    out["steps"], out["per_step_ns"], out["launches_per_step"] = None, None, None
    if windows is not None:
        n_steps = windows.groupby(["globalPid", "deviceId"]).size()
        n = n_steps.reindex(pd.MultiIndex.from_frame(out[["globalPid", "deviceId"]])).to_numpy(dtype=float)
        out["steps"] = pd.array(np.where(np.isnan(n), 0, n).astype(np.int64), dtype="Int64")
        with np.errstate(invalid="ignore", divide="ignore"):
            out["per_step_ns"] = out["step_ns"].to_numpy() / n
            out["launches_per_step"] = out["step_launches"].to_numpy() / n
    out = out.sort_values(["globalPid", "deviceId", "total_ns"], ascending=[True, True, False], kind="stable")
    return out[KERNEL_COLUMNS].reset_index(drop=True)


GROUP_KEYS = ["globalPid", "deviceId", "nameId"]


def _block_sums(block: pd.DataFrame, name_column: str, steps: pd.DataFrame | None) -> tuple[pd.DataFrame, np.ndarray]:
    """Per (globalPid, deviceId, name id) group of one block, in sorted key order: count, total_ns, min_ns,
    max_ns (int64) and, with ``steps``, step_ns and step_launches (floats) of the kernels starting in a step
    window; and the groups' medians (ns: the mean of the middle pair)."""
    pid, dev = block["globalPid"].to_numpy(), block["deviceId"].to_numpy()
    code, (g_pid, g_dev, g_name) = group_codes(pid, dev, block[name_column].to_numpy())
    start, end = block["start"].to_numpy(np.int64), block["end"].to_numpy(np.int64)
    count = np.bincount(code)
    first = np.concatenate(([0], np.cumsum(count)[:-1]))
    sorted_dur = _durations_by_group(code, end - start, count.size)
    median = (sorted_dur[first + (count - 1) // 2] + sorted_dur[first + count // 2]) / 2  # mean of the middle pair
    out = pd.DataFrame({"globalPid": g_pid, "deviceId": g_dev, "nameId": g_name}).astype(np.int64)
    out = out.assign(count=count, total_ns=np.add.reduceat(sorted_dur, first), min_ns=sorted_dur[first],
                     max_ns=sorted_dur[first + count - 1])
    if steps is not None:
        out["step_ns"], out["step_launches"] = _sums_in_steps(code, start, end, in_windows(block, steps), count.size)
    return out, median


def _merged_sums(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """The blocks' group sums (:func:`_block_sums`) added per group: counts and sums added, extremes kept."""
    how = {"count": "sum", "total_ns": "sum", "min_ns": "min", "max_ns": "max", "step_ns": "sum", "step_launches": "sum"}
    every = pd.concat(parts, ignore_index=True)
    return every.groupby(GROUP_KEYS, sort=True).agg({c: f for c, f in how.items() if c in every}).reset_index()


def _medians(kernels: Blocks, groups: pd.DataFrame, name_column: str) -> np.ndarray:
    """Per group of ``groups`` (sorted key order, with count, min_ns, max_ns): the median duration (ns, the
    mean of the middle pair) over every block, exact (blocks.order_statistics)."""
    keys = pd.MultiIndex.from_frame(groups[GROUP_KEYS])

    def durations():
        for block in kernels:
            code, values = group_codes(*(block[c].to_numpy() for c in ("globalPid", "deviceId", name_column)))
            local = pd.MultiIndex.from_arrays([np.asarray(v, np.int64) for v in values], names=GROUP_KEYS)
            yield keys.get_indexer(local)[code], block["end"].to_numpy(np.int64) - block["start"].to_numpy(np.int64)
    count = groups["count"].to_numpy(np.int64)
    g = np.arange(count.size)
    low, high = (count - 1) // 2, count // 2
    query = np.concatenate((g, g[high > low]))
    rank = np.concatenate((low, high[high > low]))
    values = order_statistics(durations, query, rank, groups["min_ns"].to_numpy()[query],
                              groups["max_ns"].to_numpy()[query], count)
    second = values[:count.size].copy()
    second[high > low] = values[count.size:]
    return (values[:count.size] + second) / 2


def _sums_in_steps(code: np.ndarray, start: np.ndarray, end: np.ndarray, in_step: np.ndarray,
                   groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Per group code: kernel ns (end - start) and launches of the kernels ``in_step``, as floats, summed
    a block of kernels at a time (bounded temporaries; exact while a group's ns stay below 2**53)."""
    ns, launches = np.zeros(groups), np.zeros(groups)
    for block in row_blocks(code.size):
        inside = in_step[block]
        ns += np.bincount(code[block], weights=np.where(inside, end[block] - start[block], 0), minlength=groups)
        launches += np.bincount(code[block], weights=inside, minlength=groups)
    return ns, launches


def _durations_by_group(code: np.ndarray, dur: np.ndarray, groups: int) -> np.ndarray:
    """``dur`` (consumed: sorted in place) ordered by (code, duration): one sort of code x span + duration
    when that fits in int64, else a lexsort. The keys are plain values in no particular order (kernels by
    name interleave), so numpy's default sort, not a stable one: equal keys are the same value either way,
    and timsort is ~10x slower on unordered int64 (7.6M keys: 0.66 -> 0.06 s)."""
    low = int(dur.min())
    span = int(dur.max()) - low + 1
    if groups * span < 1 << 62:  # in place: no array of the kernels' size besides code and dur
        keyed = dur
        keyed -= low
        for block in row_blocks(keyed.size):
            keyed[block] += code[block] * span
        keyed.sort()
        np.remainder(keyed, span, out=keyed)
        keyed += low
        return keyed
    return dur[np.lexsort((dur, code))]


def in_windows(kernels: pd.DataFrame, steps: pd.DataFrame) -> np.ndarray:
    """Whether each kernel (globalPid, deviceId, start) starts inside a step window [window_start, window_end)
    of its device (the kernels are grouped by device once; a block of kernels in start order, as nearly every
    export keeps them, is merged with the windows: :func:`intervals.search_sorted`)."""
    inside = np.zeros(len(kernels), dtype=bool)
    windows = dict(list(steps.groupby(["globalPid", "deviceId"])))
    start = kernels["start"].to_numpy()
    for key, rows in group_indices(kernels["globalPid"].to_numpy(), kernels["deviceId"].to_numpy()):
        w = windows.get(key)
        if w is None:
            continue
        w = w.sort_values("window_start")
        starts, ends = w["window_start"].to_numpy(), w["window_end"].to_numpy()
        for at in row_blocks(start.size, rows):  # a block of kernels at a time: bounded temporaries
            t = start[at]
            i = search_sorted(starts, t, side="right") - 1
            inside[at] = (i >= 0) & (t < ends[np.clip(i, 0, None)])
    return inside


def kernel_table(analysis, base: bool = False) -> pd.DataFrame:
    """The per-kernel table of one :class:`~nsysanalyze.analysis.Analysis` (its steady steps for the per-step
    columns): demangled names from the kernels the metrics read, short names (``base``) from a read of its own."""
    if not base:
        return analysis.kernel_table()
    return from_trace(analysis.trace, analysis.steps(), base)


def from_trace(trace, steps: pd.DataFrame, base: bool = False) -> pd.DataFrame:
    """The per-kernel table from a read of the kernel table by name (see ``tables.kernel_name_column``)."""
    return aggregate(frame_blocks(trace.kernel_names(base)), trace.strings, step_windows(steps))


def step_windows(steps: pd.DataFrame) -> pd.DataFrame | None:
    """The steady step windows (globalPid, deviceId, window_start, window_end) the per-step columns count in."""
    return steady_steps(steps)[["globalPid", "deviceId", "window_start", "window_end"]] if not steps.empty else None


def top(table: pd.DataFrame, n: int | None) -> pd.DataFrame:
    """The first ``n`` kernels of each (process, device) (all when ``n`` is None or 0)."""
    return table if not n else table.groupby(["globalPid", "deviceId"], sort=False).head(n)
