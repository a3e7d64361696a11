"""Idle-gap attribution: for every ns the GPU sat idle, what the host process was doing (pure functions).

The stage between metrics and rules. On each device (globalPid, deviceId) the idle intervals are
the complement of kernels ∪ memcpys ∪ memsets inside the capture window. Each idle ns is given to
the first of these host states that holds at that instant (precedence, highest first):

0. ``warmup`` — the program warming up, on any thread of the process: an NVTX range named like
   compilation, JIT or autotuning (WARMUP_RANGE: nvFuser's ``…::compile``, ``NVRTC``, torch.compile's
   ``Torch-Compiled Region``…), a module-loading CUDA call (``cuModuleLoad*``, ``cuLibraryLoad*``), or a
   launch call of at least LONG_LAUNCH_NS (a launch costs µs; one that holds the host for a millisecond
   while the GPU idles is loading or JIT-compiling its module: lazy loading on first launch), or an
   allocation call of at least LONG_INIT_NS while the GPU idles (``cudaFree(0)``, the first
   ``cudaMalloc``: CUDA context creation);
1. ``cuda_blocking`` — a CUDA call (or an MPI call of nsys' MPI trace) that holds the host while the GPU idles: synchronous memcpy,
   ``cuda*Synchronize``, ``cudaMalloc``/``cudaFree``/``cudaHostAlloc`` …, and ``cudaMemcpyAsync``
   (which blocks when the host memory is pageable; cause = API name);
2. ``os_runtime`` — an OS runtime call that does work (munmap, mmap, read, write, ioctl, …) on such
   a thread or the primary thread (only when OSRT was captured; cause = call name); an OS call made
   inside a CUDA call of its thread belongs to that call (the ``ioctl`` of a launch is the launch);
3. ``launch`` — time inside kernel/graph launch APIs on a launching thread;
4. ``os_wait`` — an OS wait (pthread_cond_wait, futex, poll, select, sem_wait, sleep, recv …) on the
   primary thread: the host waits on something else (a loader worker, a lock) — except while another
   thread of the process is launching (between its launch calls less than SHORT_GAP_NS apart: cause
   ``between launches on another thread``, at the launch level): then the wait is for that thread's work. Waits of helper
   threads are not causes: CUDA's event thread sits in poll and PyTorch's autograd threads in
   pthread_cond_wait for whole steps;
5. ``nvtx_range`` — host work inside the innermost NVTX sub-range open on the primary thread
   (cause = the range's name, numbered ranges by family: ``IO {n}``; after a nested range has
   closed, its outermost enclosing sub-range is named);
6. ``untraced`` — none of the above: Python or other CPU work that no traced call covers.

The primary thread of a process is the one holding its NVTX step ranges, else the one that made
the most launch calls. Launching threads are those that made any launch call.

Each idle ns is also tagged ``before_launch`` when it lies inside a step's CPU range before the
step's first call that puts work on the GPU (preparing the step — e.g. loading the batch — while
the GPU waits), and ``after_sync`` when it lies in an idle interval after a host synchronization
returned in it (a sync drains the GPU's queue: until the host launches again the GPU waits), and
``short_gap`` when its idle interval is shorter than SHORT_GAP_NS (the µs gaps between the kernels
of a loop the host cannot feed fast enough).

The host state at an instant is a property of the process: its host intervals (those overlapping the idle
of any of its devices) define one cause timeline per process, shared by its devices.

Cost: every device and process in one pass, side by side on one time axis (:func:`_idle_pieces`): one sort of
the host-interval edges and, per precedence level, a searchsorted of the bounds no higher level holds for the
cause timeline, then per device its idle cut where its step or tags change, each piece's ns per cause from the
timeline (prefix sums per cause over long pieces): linear in events after the sorts, a device costing its own
idle intervals and steps. The OS calls that overlap no other call up to their level (``os_runtime``: the short
calls an OSRT capture holds by the million) are left out of the timeline, their ns added on top of its sums
(:func:`_isolated_os_calls`): the same rows from a fraction of its bounds.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property, partial

import numpy as np
import pandas as pd

from .blocks import Blocks, as_blocks
from .intervals import (BLOCK, Coverage, dense_codes, group_indices, is_sorted, isin_blocks, key_groups,
                        lanes_per_batch, median_per_group, overlapping, row_blocks, search_sorted, searchsorted_sorted,
                        union, union_of, unique_sorted)
from .steps import group_name, per_distinct, rows_by_process, steady_frame
from .threads import for_blocks, ordered_map
from .trace.tables import PROCESS_MASK, pid_of

LEVELS = ["warmup", "cuda_blocking", "os_runtime", "launch", "os_wait", "nvtx_range", "untraced"]
WARMUP, BLOCKING, OS_ACTIVE, LAUNCH, WAIT, RANGE = range(6)  # LEVELS' indices (untraced: the rest)
UNTRACED = "host work outside traced calls"
OS_WAIT = re.compile(r"^(pthread_cond_(timed|clock)?wait|pthread_(mutex|rwlock|spin)_\w*lock|pthread_join|"
                     r"pthread_barrier_wait|sem_(timed|clock)?wait|futex|poll|ppoll|select|pselect6?|"
                     r"epoll_p?wait\d?|(clock_)?nanosleep|usleep|sleep|sched_yield|wait(pid|id|4)?|"
                     r"accept4?|recv(from|msg|mmsg)?|msgrcv|sigwait\w*|sigtimedwait|pause)$")
SHORT_GAP_NS = 100_000  # idle gaps shorter than this (µs-scale) are launch gaps
DISPATCH_GAP_NS = 1_000_000  # ... and than this, the host's work per operation (e.g. an eager framework's dispatch)
GAP_LIMITS = {"idle_short_gap_ns": SHORT_GAP_NS, "idle_dispatch_gap_ns": DISPATCH_GAP_NS}
LONG_LAUNCH_NS = 1_000_000  # a launch call this long while the GPU idles is loading its module (1000x a launch)
LOADING_LAUNCH = "kernel launch loading its module"  # such a launch's cause (warm-up kind)
OTHER_THREAD_LAUNCHES = "between launches on another thread"  # the launch gaps of a thread other than the primary one
LONG_INIT_NS = 10_000_000   # an allocation call this long while the GPU idles is creating the CUDA context
# 'jit' as a word, not as the name of a jitted function run in steady state: XLA names the ranges of a compiled
# program's execution 'XlaModule:#hlo_module=jit_step...#' and 'Thunk:#name=jit(step)/...#'
WARMUP_RANGE = re.compile(r"(?i).*(compil|\bjit\b(?!\()|nvrtc|autotun|\btuning|warm.?up|codegen|lowering|"
                          r"dynamo|inductor|Torch-Compiled Region).*")
IDLE_CHUNK = 1 << 17    # idle intervals attributed at a time (bounds the per-segment temporaries)
HOST_CHUNK = 1 << 18    # host-interval starts in one chunk's cause timeline at most (bounds its temporaries)
DEVICE = ["globalPid", "deviceId"]
GAP_COLUMNS = ["globalPid", "deviceId", "step", "cause_kind", "cause", "before_launch", "after_sync", "short_gap", "ns"]
SYNC_APIS = ("sync_wait", "sync_copy", "async_copy")  # calls that return when the GPU work they wait for is done
NEVER = np.iinfo(np.int64).max  # a time after every other (no sync return in an idle interval, no point left)


def api_base_name(name: str) -> str:
    """CUDA API name without nsys' version suffix: 'cudaMemcpy_v3020' -> 'cudaMemcpy'."""
    return re.sub(r"(_v\d+)?(_ptsz|_ptds)?$", "", name)


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    """The arrays of ``parts`` one after the other: the array itself when there is one (no copy), int64 when none."""
    return parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else np.empty(0, np.int64)


def sync_ends(runtime: pd.DataFrame | Blocks) -> pd.DataFrame:
    """End times (ns) of the calls that wait for the GPU (SYNC_APIS), with their globalPid, in row order.
    ``runtime``: a frame or blocks of it (:func:`as_blocks`), walked once: each block's sync rows are kept (the
    result)."""
    pids, ends = [], []
    for block in as_blocks(runtime):
        sync = api_is(block, SYNC_APIS)
        pids.append(pid_of(block["globalTid"].to_numpy()[sync]))
        ends.append(block["end"].to_numpy(np.int64)[sync])
    return pd.DataFrame({"globalPid": _joined(pids), "end": _joined(ends)})


def api_is(runtime: pd.DataFrame, categories) -> np.ndarray:
    """Mask of the calls whose ``api`` (:func:`metrics.classify_runtime`) is one of ``categories``, on the
    categorical's codes (1 byte a call; ``Series.isin`` on a categorical takes 10 bytes a call)."""
    api = runtime["api"].array
    return np.isin(api.codes, [api.categories.get_loc(c) for c in categories if c in api.categories])


def idle_by_process(capture: pd.DataFrame, idle: dict[tuple[int, int], tuple]) -> dict[int, list[tuple]]:
    """Per process: the GPU idle intervals (starts, ends) inside the capture windows of its devices, as one
    list entry — the union of its devices' (``idle``: :func:`idle_by_device`): a host interval overlaps the
    idle of one of them exactly when it overlaps that union."""
    parts: dict[int, list[tuple]] = {}
    for pid, dev, a, b in capture[[*DEVICE, "window_start", "window_end"]].to_numpy(np.int64):
        key = (int(pid), int(dev))
        if key in idle:
            parts.setdefault(key[0], []).append(_idle_within(idle[key], int(a), int(b)))
    return {pid: p if len(p) == 1 else [union_of(*p)] for pid, p in parts.items()}


def _during_idle(frame, devices: dict[int, list[tuple]]) -> np.ndarray:
    """Rows of ``frame`` (start, end, globalTid: a frame or a dict of arrays) that overlap the GPU idle of one
    of their process's devices — only those can be causes: [start, end) is not empty and the first idle
    interval ending after start begins before end (:func:`intervals.overlapping`). Taken a block of rows at a
    time (bounded temporaries; a block of nearby calls searches only the idle near them), blocks side by side
    (threads.in_blocks)."""
    start, end = np.asarray(frame["start"], dtype=np.int64), np.asarray(frame["end"], dtype=np.int64)
    keep = np.zeros(start.size, dtype=bool)
    for pid, idx in rows_by_process(np.asarray(frame["globalTid"]), of_tid=True):
        idle = devices.get(int(pid), [])

        def test(r) -> None:  # each block writes its own rows
            s, e = start[r], end[r]
            for idle_s, idle_e in idle:
                keep[r] |= overlapping(s, e, idle_s, idle_e)
        for_blocks(test, row_blocks(start.size, idx))
    return keep


@per_distinct
def _warmup_range(names: pd.Series) -> pd.Series:
    """Per NVTX range name: whether it names compilation, JIT, autotuning or warm-up work (WARMUP_RANGE)."""
    return names.astype(str).str.fullmatch(WARMUP_RANGE)


def _idle_of_any(devices: dict[int, list[tuple]]) -> tuple[np.ndarray, np.ndarray]:
    """The union of every process's GPU idle (``devices``: :func:`idle_by_process`): (starts, ends) ns. One
    process's idle is already sorted and disjoint: it is its own union."""
    parts = [part for per in devices.values() for part in per]
    return parts[0] if len(parts) == 1 else union_of(*parts)


@dataclass
class HostSources:
    """What the host intervals are made of before the OS runtime calls are read (:func:`host_sources`).

    ``parts``: the labelled parts that are not OS calls (frames, in the part order of :func:`host_frame`);
    ``helper``: the labelled launch gaps of other threads during GPU idle (a process keeps them only when its
    primary thread makes an OS wait during GPU idle); ``cause_threads``: the globalTids whose OS calls can be
    causes; ``primary``: globalPid -> primary thread; ``launch_tids``: launching threads; ``runtime``: the
    classified CUDA calls during GPU idle (in the runtime's row order, index kept; an OS call inside one is that
    call's); ``keep``/``keep_time``: the
    OS-call tests of :func:`host_intervals`' ``os_calls`` (``keep`` None: none beyond ``keep_time``)."""

    parts: list
    helper: pd.DataFrame
    cause_threads: np.ndarray
    primary: dict
    launch_tids: set
    runtime: pd.DataFrame
    keep: Callable | None
    keep_time: Callable

    @cached_property
    def cuda_calls(self) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Per thread: its CUDA calls' starts (``runtime``), sorted, and the furthest end so far (made once,
        for every block of OS calls)."""
        r_start, r_end = self.runtime["start"].to_numpy(), self.runtime["end"].to_numpy()
        calls = {}
        for (tid,), rows in group_indices(self.runtime["globalTid"].to_numpy()):
            s, e = (r_start, r_end) if rows is None else (r_start[rows], r_end[rows])
            order = np.argsort(s, kind="stable")
            calls[tid] = (s[order], np.maximum.accumulate(e[order]))
        return calls

    def waiting_processes(self, waiting: np.ndarray) -> np.ndarray:
        """The globalPids whose primary thread is among ``waiting`` (threads that made an OS wait during idle)."""
        return pid_of(np.intersect1d(waiting, np.array(list(self.primary.values()), dtype=np.int64)))


def host_intervals(runtime: pd.DataFrame | Blocks, api_names: dict[int, str], os_calls: Callable[..., pd.DataFrame],
                   nvtx: pd.DataFrame, step_ranges: pd.DataFrame, devices: dict[int, list[tuple]],
                   mpi: pd.DataFrame | None = None) -> pd.DataFrame:
    """Labelled host intervals (start, end, globalPid, level, cause) of every process (level: index in LEVELS),
    only those that overlap the GPU idle of their process's devices (``devices``: :func:`idle_by_process`) —
    most launches run while the GPU is busy, so this keeps the attribution small. Sorted by (globalPid,
    start), ties in the order of the levels' parts (:func:`host_frame`; the attribution takes each process's
    rows by start).

    ``runtime``: CUDA calls (start, end, globalTid, nameId, api in launch/sync_copy/sync_wait/async_copy/alloc,
    NaN for calls of no category, which are skipped: :func:`metrics.classify_runtime`), a frame or blocks of it
    (:func:`host_sources`); a caller that hands over its only reference lets the whole table go before the OS
    calls are read. ``os_calls(threads, keep, keep_time)`` (called once): the OS runtime calls (start, end,
    globalTid, name) on those threads (globalTids) that ``keep_time`` (start, end -> mask: overlap with any
    process's GPU idle; a reader may test it before it reads a call's thread) and then ``keep`` (a chunk's start,
    end, globalTid arrays -> row mask; None: every call) select — asked only for the threads whose calls can be
    causes (primary and launching threads of processes with GPU idle) and the calls overlapping that idle, so the
    rest are never held;
    ``nvtx``: NVTX ranges (start, end, globalTid, name); ``step_ranges``: the NVTX step rows (globalTid,
    cpu_start, cpu_end), may be empty;
    ``mpi``: MPI calls (start, end, globalTid, name) of nsys' MPI trace: blocking calls (the host held by the
    library: Open MPI busy-polls, so no OS wait shows), cause = the call's name.
    """
    sources = host_sources(runtime, api_names, nvtx, step_ranges, devices, mpi)
    del runtime
    return host_frame(sources, os_calls(sources.cause_threads, sources.keep, sources.keep_time))


def host_sources(runtime: pd.DataFrame | Blocks, api_names: dict[int, str], nvtx: pd.DataFrame,
                 step_ranges: pd.DataFrame, devices: dict[int, list[tuple]], mpi: pd.DataFrame | None = None,
                 os_calls_captured: bool = True) -> HostSources:
    """The host intervals' parts that are not OS calls, and what the OS calls are read and labelled by
    (arguments as :func:`host_intervals`). Without ``os_calls_captured`` no primary thread can be seen waiting
    in the OS, so the launch gaps of other threads (``helper``) are not made: no process would keep them.

    ``runtime``: a frame or blocks of it (:func:`as_blocks`; at least one block), walked once for the launch counts
    and the calls during GPU idle (:func:`_calls_during_idle`), and once more for the launch gaps of other
    threads (:func:`_launch_gaps_of_other_threads`) when a process has a launching thread besides its primary
    one; what is kept between blocks is their result (counts, calls, gaps) and one launch per such thread."""
    blocks = as_blocks(runtime)
    del runtime  # a frame handed over: the whole table is released with ``blocks``
    runtime, launching, launches_per_thread, unordered = _calls_during_idle(blocks, devices)
    primary = _primary_threads(launches_per_thread, step_ranges)
    launch_tids = set(launches_per_thread.index.tolist())
    cause_threads = np.array(sorted(set(primary.values()) | launch_tids), dtype=np.int64)
    cause_threads = cause_threads[np.isin(pid_of(cause_threads), list(devices))]
    # the launch gaps of other threads count only where a primary thread waits in the OS: no primary asks for
    # them when no OS call was captured (the function returns no gaps without primary threads)
    helper_gaps = _launch_gaps_of_other_threads(blocks, launches_per_thread.index.to_numpy(),
                                                primary if os_calls_captured else {}, unordered, devices)
    del blocks  # the whole table is done with here
    any_idle = _idle_of_any(devices)  # a call during its own process's idle is during this union's
    rt_pid = pid_of(runtime["globalTid"].to_numpy())
    if len(nvtx):
        nvtx = nvtx[_during_idle(nvtx, devices)]
    base_names = {i: api_base_name(n) for i, n in api_names.items()}  # once per distinct name, not per call
    parts = []
    warming = _warmup_range(nvtx["name"]).to_numpy(bool) if len(nvtx) else np.zeros(0, bool)
    if warming.any():  # on any thread: nvFuser and torch.compile compile on worker threads
        rows = nvtx[warming]
        parts.append(_labelled(rows, pid_of(rows["globalTid"].to_numpy()), WARMUP, group_name(rows["name"]).to_numpy()))
    took = (runtime["end"] - runtime["start"]).to_numpy()
    loading = (runtime["api"] == "module_load").to_numpy() | (runtime["api"] == "alloc").to_numpy() & (took >= LONG_INIT_NS)
    long_launch = launching & (took >= LONG_LAUNCH_NS)
    blocking = ~launching & ~loading  # sync copies and waits, async copies (blocking when pageable), allocations
    for mask, level in ((blocking, BLOCKING), (loading, WARMUP)):
        if mask.any():
            rows = runtime[mask]
            parts.append(_labelled(rows, rt_pid[mask], level, rows["nameId"].map(base_names).fillna("cuda call").to_numpy()))
    if mpi is not None and len(mpi):
        mpi = mpi[_during_idle(mpi, devices)]
        if len(mpi):
            parts.append(_labelled(mpi, pid_of(mpi["globalTid"].to_numpy()), BLOCKING, mpi["name"].to_numpy()))
    ranges = _primary_ranges(nvtx, primary, step_ranges, warming)
    if len(ranges):
        parts.append(_labelled(ranges, pid_of(ranges["globalTid"].to_numpy()), RANGE, ranges["cause"].to_numpy()))
    long_rows = runtime[long_launch]
    if len(long_rows):
        parts.append(_labelled(long_rows, rt_pid[long_launch], WARMUP,
                               pd.Categorical.from_codes(np.zeros(len(long_rows), np.int8),
                                                         [LOADING_LAUNCH])))
    labelled = []
    launches = np.flatnonzero(launching & ~long_launch)
    for rows, label in (({c: runtime[c].to_numpy()[launches] for c in ("start", "end", "globalTid")}, "kernel launch"),
                        (helper_gaps, OTHER_THREAD_LAUNCHES)):
        pids = pid_of(np.asarray(rows["globalTid"]))
        labelled.append(_labelled(rows, pids, LAUNCH, _in_range(label, np.asarray(rows["start"]), pids, ranges)))
    if len(labelled[0]):
        parts.append(labelled[0])
    # a call overlapping the union is during its own process's idle when there is one process: nothing to ask then
    keep = None if len(devices) == 1 else partial(_during_idle, devices=devices)
    return HostSources(parts, labelled[1], cause_threads, primary, launch_tids, runtime, keep,
                       lambda s, e: overlapping(s, e, *any_idle))


def host_frame(sources: HostSources, osrt: pd.DataFrame) -> pd.DataFrame:
    """The host intervals (:func:`host_intervals`) of ``sources`` and the OS calls ``osrt`` read for them (start,
    end, globalTid, name), in part order: warm-up ranges, blocking CUDA calls, loading calls, MPI calls, NVTX
    sub-ranges, long launches, launches, launch gaps of other threads (kept only for processes whose primary
    thread waits in the OS during GPU idle: nothing to reassign otherwise), OS calls."""
    os_part = os_host_part(osrt, sources)
    del osrt
    helper = sources.helper
    if len(helper):
        helper = helper[np.isin(helper["globalPid"].to_numpy(), sources.waiting_processes(os_part.pop("waiting")))]
    parts = [*sources.parts, *([helper] if len(helper) else []), *([os_part] if len(os_part["start"]) else [])]
    return concat_host_parts(parts)


HOST_COLUMNS = {"start": np.int64, "end": np.int64, "globalPid": np.int64, "level": np.int8}


def no_causes() -> pd.Categorical:
    """An empty cause column whose categories have the dtype of cause names (a union with named causes works:
    object in pandas 2, str in pandas 3)."""
    return pd.Categorical([], categories=pd.Index([], dtype=str))


def concat_host_parts(parts: list) -> pd.DataFrame:
    """One frame (start, end, globalPid, level, cause: categorical) of the host-interval ``parts`` (frames or
    dicts of those arrays), sorted by (globalPid, start), ties in part order. Made a column at a time, each
    part's column released once copied (the OS calls' part is most of the rows: never held twice)."""
    if not parts:
        return pd.DataFrame({c: np.empty(0, t) for c, t in HOST_COLUMNS.items()}).assign(cause=no_causes())
    cause = pd.api.types.union_categoricals([pd.Categorical(p["cause"]) for p in parts])
    parts = [p if isinstance(p, dict) else {c: p[c].to_numpy() for c in HOST_COLUMNS} for p in parts]

    def column(name: str) -> np.ndarray:
        return np.concatenate([p.pop(name) for p in parts]).astype(HOST_COLUMNS[name], copy=False)

    start, pid = column("start"), column("globalPid")
    one_process = pid.size == 0 or pid.min() == pid.max()
    if is_sorted(start) if one_process else is_sorted(pid) and _sorted_within(pid, start):
        order = None
    else:
        order = np.argsort(start, kind="stable") if one_process else np.lexsort((start, pid))

    def arranged(values: np.ndarray) -> np.ndarray:
        return values if order is None else values[order]

    columns = {"start": arranged(start)}
    del start
    columns["globalPid"] = pid if one_process else arranged(pid)  # one value: no reordering copy
    del pid
    for name in ("end", "level"):
        columns[name] = arranged(column(name))
    frame = pd.DataFrame({c: columns.pop(c) for c in HOST_COLUMNS}, copy=False)
    frame["cause"] = pd.Categorical.from_codes(arranged(cause.codes), cause.categories)
    return frame


def _sorted_within(pid: np.ndarray, start: np.ndarray) -> bool:
    """Whether ``start`` is sorted within each run of equal ``pid`` (``pid`` sorted)."""
    return bool(((start[1:] >= start[:-1]) | (pid[1:] != pid[:-1])).all())


def os_host_part(osrt: pd.DataFrame, sources: HostSources) -> dict:
    """The OS runtime calls' host intervals as arrays (start, end, globalPid, level, cause: categorical), plus
    ``waiting``: the threads among them that made an OS wait (kept calls, before any is dropped). A call
    made inside a CUDA call of its thread is that call's (dropped); a wait is a cause on the primary thread
    only (level WAIT), any other call on the primary or a launching thread (level OS_ACTIVE). ``osrt``'s
    columns are taken out of it one at a time, each released once its kept rows are copied."""
    if not len(osrt):
        return {"start": np.empty(0, np.int64), "end": np.empty(0, np.int64), "globalPid": np.empty(0, np.int64),
                "level": np.empty(0, np.int8), "cause": no_causes(), "waiting": np.empty(0, np.int64)}
    tid, names = osrt["globalTid"].to_numpy(), osrt.pop("name").array
    wait = np.asarray(names.categories.str.fullmatch(OS_WAIT), dtype=bool)[names.codes]
    waiting = np.unique(tid[wait])
    is_primary = isin_blocks(tid, list(sources.primary.values()))
    keep = np.where(wait, is_primary, is_primary | isin_blocks(tid, sources.launch_tids))
    keep &= ~_inside_cuda_calls(osrt, sources.cuda_calls)
    level = np.where(wait, np.int8(WAIT), np.int8(OS_ACTIVE)).astype(np.int8)
    del wait, is_primary, tid
    everything = bool(keep.all())

    def kept(values):
        return values if everything else values[keep]

    out = {"level": kept(level), "cause": _used_categories(kept(names)), "waiting": waiting}
    for column in ("start", "end"):
        out[column] = kept(osrt.pop(column).to_numpy())
    tid = osrt.pop("globalTid").to_numpy()
    if everything:
        out["globalPid"] = pid_of(tid)
    else:  # the kept copy is made a process id in place
        pid = tid[keep]
        out["globalPid"] = np.bitwise_and(pid, PROCESS_MASK, out=pid)
    return out


def _used_categories(values: pd.Categorical) -> pd.Categorical:
    """``values.remove_unused_categories()`` without its int64 inverse of every row (96 MB per 12M calls)."""
    used, codes = dense_codes(values.codes, len(values.categories))
    return values if used.size == len(values.categories) else pd.Categorical.from_codes(codes, values.categories[used])


def _primary_ranges(nvtx: pd.DataFrame, primary: dict[int, int], step_ranges: pd.DataFrame,
                    warming: np.ndarray) -> pd.DataFrame:
    """The NVTX sub-ranges on the primary threads (start, end, globalTid, cause: the range's family name), not
    the step ranges themselves (they are the windows) nor warm-up ranges (a cause of their own)."""
    if not len(nvtx) or not primary:
        return pd.DataFrame({"start": [], "end": [], "globalTid": [], "cause": []})
    on_primary = np.isin(nvtx["globalTid"].to_numpy(), list(primary.values())) & ~warming
    if len(step_ranges):
        step_key = pd.MultiIndex.from_frame(step_ranges[["globalTid", "cpu_start", "cpu_end"]])
        on_primary &= ~pd.MultiIndex.from_arrays([nvtx["globalTid"], nvtx["start"], nvtx["end"]]).isin(step_key)
    rows = nvtx[on_primary]
    return pd.DataFrame({"start": rows["start"].to_numpy(np.int64), "end": rows["end"].to_numpy(np.int64),
                         "globalTid": rows["globalTid"].to_numpy(), "cause": group_name(rows["name"]).to_numpy()})


def _in_range(label: str, t: np.ndarray, pids: np.ndarray, ranges: pd.DataFrame) -> pd.Categorical:
    """``label`` for calls starting at ``t`` (ns) in processes ``pids``, as "label in 'range'" where a primary
    thread's NVTX sub-range of the same process holds the start (the innermost: _active_label). One sorted
    lookup per process, a block of calls at a time (bounded temporaries), blocks side by side (for_blocks)."""
    names = pd.Categorical(ranges["cause"]) if len(ranges) else pd.Categorical([])
    code = np.zeros(t.size, dtype=np.int32)  # 0: in no sub-range; else 1 + the range name's code
    if len(ranges):
        r_pid = pid_of(ranges["globalTid"].to_numpy())
        r_s, r_e, r_code = ranges["start"].to_numpy(), ranges["end"].to_numpy(), names.codes.astype(np.int64)
        for (pid,), rows in group_indices(pids):
            mine = r_pid == pid
            if mine.any():
                s, e, c = r_s[mine], r_e[mine], r_code[mine]

                def label_block(at) -> None:  # each block writes its own rows
                    code[at] = _active_label(s, e, c, t[at]) + 1
                for_blocks(label_block, row_blocks(t.size, rows))
    labels = [label] + [f"{label} in '{n}'" for n in names.categories]
    return pd.Categorical.from_codes(code, labels)


def _calls_during_idle(runtime: Blocks, devices: dict[int, list[tuple]]) -> tuple[pd.DataFrame, np.ndarray,
                                                                                   pd.Series, set[int]]:
    """One walk over the runtime blocks, for: the classified calls during GPU idle (:func:`_during_idle`; every
    block's, in row order, index kept) and their launch mask; the launch calls per globalTid, most first (ties in
    order of first appearance over the blocks); with several blocks, the launching threads out of start order
    across them (:func:`_launch_order`). Kept between blocks: those calls, the counts, each thread's latest launch."""
    during_idle, launching_during, counts, latest, unordered = [], [], None, {}, set()
    for block in runtime:
        launching = (block["api"] == "launch").to_numpy()  # on the categorical's codes, not per-row strings
        tid = block["globalTid"].to_numpy()
        counts = _count_per_thread(tid, launching, counts)
        if len(runtime) > 1:
            unordered |= _launch_order(tid, block["start"].to_numpy(), launching, latest)
        during = _during_idle(block, devices) & block["api"].notna().to_numpy()  # classified calls only
        during_idle.append(block[during])
        launching_during.append(launching[during])
        del block, launching, tid, during
    counts = counts.sort_values(ascending=False, kind="stable")
    calls = during_idle[0] if len(during_idle) == 1 else pd.concat(during_idle)
    return calls, _joined(launching_during), counts, unordered


def _launch_order(tid: np.ndarray, start: np.ndarray, launching: np.ndarray, latest: dict[int, int]) -> set[int]:
    """The threads of one block's launch calls (``launching``) whose first launch here starts before ``latest``
    (globalTid -> its latest launch start in earlier blocks, ns; updated with this block's)."""
    starts, unordered = start[launching], set()
    for (thread,), rows in group_indices(tid[launching]):
        mine = starts if rows is None else starts[rows]
        first, last = int(mine.min()), int(mine.max())
        if first < latest.get(thread, first):
            unordered.add(thread)
        latest[thread] = max(last, latest.get(thread, last))
    return unordered


def _launch_gaps_of_other_threads(runtime: Blocks, launch_tids: np.ndarray, primary: dict[int, int],
                                  unordered: set[int], devices: dict[int, list[tuple]]) -> pd.DataFrame:
    """The gaps (start, end, globalTid) shorter than SHORT_GAP_NS between consecutive launch calls of the
    launching threads (among ``launch_tids``) that are not their process's primary thread (PyTorch's autograd
    threads launching the backward), those overlapping the GPU idle of their process's devices (``devices``:
    :func:`idle_by_process`; tested a thread at a time, so the other gaps are never gathered): while one runs, the
    primary thread's OS wait is a wait for that thread's work (the caller keeps them only for processes whose
    primary thread makes OS waits during GPU idle). By thread (globalTid order), then start.

    One walk over the runtime blocks (none without such threads), a thread's launches of a block in start order
    (stable): its gap across a cut starts at its last launch of the earlier blocks (carried: one launch per thread).
    The launches of a thread among ``unordered`` (out of start order across blocks: :func:`_calls_during_idle`) are
    gathered over the walk and sorted at its end, as one block's."""
    cols = ["start", "end", "globalTid"]
    mains = np.array(sorted(primary.values()), dtype=np.int64)
    others = launch_tids[np.isin(pid_of(launch_tids), pid_of(mains)) & ~np.isin(launch_tids, mains)]
    if not others.size:
        return pd.DataFrame({c: np.empty(0, np.int64) for c in cols})
    others.sort()
    gaps: dict[int, list[dict]] = {int(t): [] for t in others}  # per thread, its gaps during idle block by block
    carried: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # per thread, its latest launch (start, end) so far
    gathered = {t: [] for t in gaps if t in unordered}
    for block in runtime:
        starts, ends = block["start"].to_numpy(), block["end"].to_numpy()
        for thread, at in _launch_rows(block, others):
            s, e = starts[at], ends[at]
            if thread in gathered:
                gathered[thread].append((s, e))
                continue
            s, e = _by_start(s, e)
            if thread in carried:
                s, e = (np.concatenate((c, v)) for c, v in zip(carried[thread], (s, e)))
            carried[thread] = (s[-1:].copy(), e[-1:].copy())
            start, end = _short_gaps(s, e)
            del s, e  # the thread's launches are done with before the idle test
            gaps[thread].append(_thread_gaps_during_idle(start, end, thread, devices))
        del block, starts, ends
    for thread in list(gathered):
        s, e = (_joined(list(c)) for c in zip(*gathered.pop(thread)))
        start, end = _short_gaps(*_by_start(s, e))
        del s, e
        gaps[thread] = [_thread_gaps_during_idle(start, end, thread, devices)]
    parts = [part for per_thread in gaps.values() for part in per_thread]
    if len(parts) == 1:
        return pd.DataFrame(parts[0], copy=False)
    return pd.DataFrame({c: np.concatenate([p[c] for p in parts]) for c in cols}, copy=False)


def _launch_rows(runtime: pd.DataFrame, threads: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """Per thread of ``threads`` (sorted globalTids) with launch calls in ``runtime``: (globalTid, the rows of those
    calls, in row order); the launch mask a block of rows at a time, blocks side by side."""
    tid = runtime["globalTid"].to_numpy()
    launching = (runtime["api"] == "launch").to_numpy()
    of_threads = np.empty(tid.size, dtype=bool)

    def mark(r: slice) -> None:  # each block writes its own rows
        of_threads[r] = launching[r] & np.isin(tid[r], threads)
    for_blocks(mark, row_blocks(tid.size))
    rows = np.flatnonzero(of_threads)
    if threads.size == 1:  # one thread: no grouping
        return [(int(threads[0]), rows)] if rows.size else []
    return [(thread, rows if mine is None else rows[mine]) for (thread,), mine in group_indices(tid[rows])]


def _by_start(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Calls (start, end ns) in start order (stable; as they are when they already are)."""
    if is_sorted(s):
        return s, e
    order = np.argsort(s, kind="stable")
    return s[order], e[order]


def _short_gaps(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The gaps (start, end ns) shorter than SHORT_GAP_NS between consecutive calls (start ``s``, end ``e`` ns, in
    start order) of one thread."""
    gap_start, gap_end = e[:-1], s[1:]
    keep = (gap_end > gap_start) & (gap_end - gap_start < SHORT_GAP_NS)
    return gap_start[keep], gap_end[keep]


def _thread_gaps_during_idle(start: np.ndarray, end: np.ndarray, thread: int,
                             devices: dict[int, list[tuple]]) -> dict[str, np.ndarray]:
    """One thread's gaps (start, end ns) that overlap the GPU idle of its process's devices (:func:`_during_idle`),
    as :func:`_thread_gaps`' columns."""
    gaps = _thread_gaps(start, end, thread)
    during = _during_idle(gaps, devices)
    return gaps if during.all() else _thread_gaps(start[during], end[during], thread)


def _thread_gaps(start: np.ndarray, end: np.ndarray, thread: int) -> dict[str, np.ndarray]:
    """One thread's gaps as columns start, end (ns), globalTid: its one value as a broadcast view (no array)."""
    return {"start": start, "end": end, "globalTid": np.broadcast_to(np.int64(thread), start.shape)}


def _inside_cuda_calls(osrt: pd.DataFrame, calls: dict[int, tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Mask of the OS calls made inside a CUDA call of their own thread (the call's work, e.g. a launch's
    ioctl): the last call of that thread to start at or before the OS call ends at or after it (a thread's
    CUDA calls do not overlap; ``calls``: :attr:`HostSources.cuda_calls`). One sorted lookup per thread, a
    block of OS calls at a time."""
    inside = np.zeros(len(osrt), dtype=bool)
    if not calls:
        return inside
    o_tid, o_start, o_end = (osrt[c].to_numpy() for c in ("globalTid", "start", "end"))
    for r in row_blocks(len(osrt)):
        for (tid,), rows in group_indices(o_tid[r]):
            if tid in calls:
                s, reach = calls[tid]
                at = r if rows is None else r.start + rows
                k = search_sorted(s, o_start[at], side="right") - 1  # the thread's calls by rowid: in start order
                inside[at] = (k >= 0) & (reach[np.maximum(k, 0)] >= o_end[at])
    return inside


def _count_per_thread(tid: np.ndarray, mask: np.ndarray, earlier: pd.Series | None = None) -> pd.Series:
    """Rows per globalTid among the ``mask``ed ones, added to ``earlier`` (the counts of earlier blocks, whose
    threads come first), in order of first appearance, counted a block of rows at a time (no copy of the masked
    tids)."""
    parts = [pd.Series(tid[b][mask[b]]).value_counts(sort=False) for b in row_blocks(tid.size)]
    parts = parts if earlier is None else [earlier, *parts]
    return pd.concat(parts).groupby(level=0, sort=False).sum() if parts else pd.Series([], dtype=np.int64)


def _labelled(rows, pids: np.ndarray, level: int, cause) -> pd.DataFrame:
    """Host intervals of one level (``rows``: start, end, a frame or a dict of arrays); ``cause`` a label per
    row, kept categorical (few distinct labels)."""
    starts = np.asarray(rows["start"], dtype=np.int64)
    return pd.DataFrame({"start": starts, "end": np.asarray(rows["end"], dtype=np.int64), "globalPid": pids,
                         "level": np.full(starts.size, level, np.int8), "cause": pd.Categorical(cause)},
                        copy=False)  # the columns as they are: not gathered into one block again


def _primary_threads(launches_per_thread: pd.Series, step_ranges: pd.DataFrame) -> dict[int, int]:
    """globalPid -> its primary thread: the thread of its step ranges, else its most-launching thread
    (``launches_per_thread``: launch calls per globalTid, most first)."""
    out = {}
    if len(launches_per_thread):
        for tid in launches_per_thread.index[::-1]:  # most launches last, so it wins
            out[int(pid_of(np.array([tid]))[0])] = int(tid)
    if len(step_ranges):
        for pid, tid in step_ranges.groupby("globalPid")["globalTid"].agg(lambda t: t.mode().iloc[0]).items():
            if tid >= 0:
                out[int(pid)] = int(tid)
    return out


def idle_by_device(windows: list[pd.DataFrame], busy: dict[tuple[int, int], Coverage]) -> dict[tuple[int, int], tuple]:
    """Per (globalPid, deviceId): the GPU idle intervals (starts, ends ns; sorted, disjoint) — the complement of
    ``busy`` over the span of all of that device's ``windows`` (frames with globalPid, deviceId,
    window_start, window_end), made once for the attribution and the idle-gap metrics."""
    frames = [w[["globalPid", "deviceId", "window_start", "window_end"]] for w in windows if len(w)]
    if not frames:
        return {}
    spans = pd.concat(frames).groupby(["globalPid", "deviceId"]).agg(lo=("window_start", "min"),
                                                                       hi=("window_end", "max"))
    return {(int(p), int(d)): _idle(busy.get((int(p), int(d))), int(lo), int(hi))
            for (p, d), lo, hi in zip(spans.index, spans["lo"], spans["hi"])}


def _idle_within(idle: tuple[np.ndarray, np.ndarray], a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
    """The idle intervals inside [a, b) (views of ``idle``; the two at the edges cut when they cross them)."""
    starts, ends = idle
    i, j = int(np.searchsorted(ends, a, side="right")), int(np.searchsorted(starts, b, side="left"))
    s, e = starts[i:j], ends[i:j]
    if s.size and (s[0] < a or e[-1] > b):
        s, e = s.copy(), e.copy()
        s[0], e[-1] = max(s[0], a), min(e[-1], b)
    return s, e


def attribute(capture: pd.DataFrame, steps: pd.DataFrame, idle: dict[tuple[int, int], tuple],
              host: pd.DataFrame, syncs: pd.DataFrame) -> pd.DataFrame:
    """Attribution of each device's GPU idle time: one row per (globalPid, deviceId, step, cause_kind,
    cause, before_launch, after_sync, short_gap) with the idle ns (step -1: idle outside every step window),
    by device (in ``capture``'s order), then step, cause kind (LEVELS' order), cause code and tags.

    ``capture``: one window per (globalPid, deviceId) (window_start, window_end ns); ``steps``: step
    windows (globalPid, deviceId, step, window_start, window_end, cpu_start, first_launch ns);
    ``idle``: :func:`idle_by_device`; ``host``: :func:`host_intervals`; ``syncs``: :func:`sync_ends`.
    Every device in one pass (:func:`_idle_pieces`): a piece's idle ns per cause come from its process's
    cause timeline, so a device costs its own idle intervals and steps, not its process's host calls.
    """
    return gap_frame(capture, *attributed(capture, steps, idle, host, syncs), host_causes(host))


def attributed(capture: pd.DataFrame, steps: pd.DataFrame, idle: dict[tuple[int, int], tuple], host: pd.DataFrame,
               syncs: pd.DataFrame, clip: dict[int, tuple[int, int]] | None = None) -> tuple[np.ndarray, ...]:
    """:func:`attribute`'s sums as arrays: (device row in ``capture``, group, ns) by device then group (group:
    :func:`gap_frame`'s code, causes coded as ``host``'s categories). ``clip`` (globalPid -> [t0, t1) ns):
    only those processes' devices, and only their idle inside that span (an idle interval cut there keeps
    its whole length and first sync return for its tags)."""
    causes = host_causes(host)

    def sums(pieces: dict, timeline: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        x, y = pieces["proc_start"], pieces["proc_end"]
        which, label, ns = _label_sums(x, y, timeline["bounds"], timeline["label"], timeline["level"].size)
        level, cause = timeline["level"][label], timeline["cause"][label]
        if timeline["isolated"][0].size:
            which, level, cause, ns = (np.concatenate(v) for v in zip(
                (which, level, cause, ns), _isolated_overlay(x, y, pieces["device"], timeline)))
        flags = pieces["before_launch"][which] * 4 + pieces["after_sync"][which] * 2 + pieces["short_gap"][which]
        group = (((pieces["step"][which] + 1) * len(LEVELS) + level) * (len(causes) + 1) + cause + 1) * 8 + flags
        return _nonzero(*sum_by_group(pieces["device"][which], group, ns))

    parts = list(_idle_pieces(capture, steps, idle, host, syncs, clip=clip, then=sums, split_isolated=True))
    if not parts:
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int64)
    return sum_by_group(*(np.concatenate(c) for c in zip(*parts)))  # a device's chunks share groups


def _nonzero(device: np.ndarray, group: np.ndarray, ns: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The (device, group, ns) rows with ns != 0 (a piece's overlay takes ns from a label and may leave 0)."""
    keep = ns != 0
    return device[keep], group[keep], ns[keep]


def _isolated_overlay(x: np.ndarray, y: np.ndarray, device: np.ndarray, timeline: dict) -> tuple[np.ndarray, ...]:
    """What the isolated OS calls (``timeline["isolated"]``: start, end, cause code; sorted, disjoint; see
    :func:`_isolated_os_calls`) change in the label sums of the pieces [x, y) (their process's lane; sorted and
    disjoint per ``device``, whose rows come in runs) over the timeline without them: each call's ns inside a
    piece are taken from the label under them and given to (OS_ACTIVE, its cause). Rows (piece, level, cause,
    ns) summed per piece and label, ns negative where taken. Each call is cut at the timeline's bounds and at
    the pieces' edges (a merge of sorted arrays: most calls lie inside one timeline piece and one idle piece)."""
    s, e, codes = timeline["isolated"]
    call, j, part_s, part_e = _cut_at(s, e, timeline["bounds"])
    under, cause = timeline["label"][j], codes[call].astype(np.int64)
    runs = np.flatnonzero(np.concatenate(([True], device[1:] != device[:-1]))).tolist() + [device.size]
    taken, given = [], []
    for r0, r1 in zip(runs[:-1], runs[1:]):  # a device's pieces: [x, y) at the odd intervals of its edges
        edges = np.empty(2 * (r1 - r0) + 1, np.int64)
        edges[0], edges[1::2], edges[2::2] = np.iinfo(np.int64).min, x[r0:r1], y[r0:r1]
        part, q, q_s, q_e = _cut_at(part_s, part_e, edges)
        inside = np.flatnonzero(q % 2 == 1)
        piece, part, ns = r0 + q[inside] // 2, part[inside], (q_e - q_s)[inside]
        taken.append(_summed_runs(piece, under[part], ns))
        given.append(_summed_runs(piece, cause[part], ns))
    t_piece, t_label, t_ns = (np.concatenate(v) for v in zip(*taken))
    g_piece, g_cause, g_ns = (np.concatenate(v) for v in zip(*given))
    return (np.concatenate((t_piece, g_piece)),
            np.concatenate((timeline["level"][t_label], np.full(g_piece.size, OS_ACTIVE, np.int64))),
            np.concatenate((timeline["cause"][t_label], g_cause)), np.concatenate((-t_ns, g_ns)))


def _cut_at(starts: np.ndarray, ends: np.ndarray, bounds: np.ndarray) -> tuple[np.ndarray, ...]:
    """Intervals [starts, ends) (sorted) cut at the sorted ``bounds`` (bounds[0] = -inf): (interval index, j: the
    bound interval [bounds[j], bounds[j + 1]) the part lies in, part start, part end); the intervals that hold
    no bound are their own part, the others' parts (:func:`_timeline_pieces`) follow them."""
    j = search_sorted(bounds, starts, side="right") - 1
    cut = (j + 1 < bounds.size) & (bounds[np.minimum(j + 1, bounds.size - 1)] < ends)
    if not bool(cut.any()):
        return np.arange(starts.size), j, starts, ends
    whole, cut = np.flatnonzero(~cut), np.flatnonzero(cut)
    which, j_cut, cut_s, cut_e = _timeline_pieces(starts[cut], ends[cut], bounds)
    return (np.concatenate((whole, cut[which])), np.concatenate((j[whole], j_cut)),
            np.concatenate((starts[whole], cut_s)), np.concatenate((ends[whole], cut_e)))


def _summed_runs(which: np.ndarray, label: np.ndarray, ns: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ns summed over each run of rows with the same (which, label) (rows by piece: a piece's calls mostly share
    their labels, so this leaves about a row per piece and label)."""
    if not ns.size:
        return which, label, ns
    first = np.flatnonzero(np.concatenate(([True], (which[1:] != which[:-1]) | (label[1:] != label[:-1]))))
    return which[first], label[first], np.add.reduceat(ns, first)


def recoded(group: np.ndarray, codes: np.ndarray, n_causes: int) -> np.ndarray:
    """Groups (:func:`attributed`) whose cause code c (into categories of ``codes.size`` causes) becomes
    ``codes[c]`` (into ``n_causes`` categories); untraced stays untraced."""
    rest, flags = np.divmod(group, 8)
    rest, cause = np.divmod(rest, codes.size + 1)
    cause = np.concatenate(([0], codes + 1))[cause]
    return (rest * (n_causes + 1) + cause) * 8 + flags


def gap_frame(capture: pd.DataFrame, device: np.ndarray, group: np.ndarray, ns: np.ndarray,
              causes: pd.Index) -> pd.DataFrame:
    """:func:`attribute`'s rows from :func:`attributed`'s arrays (cause codes into ``causes``)."""
    if not ns.size:
        return pd.DataFrame({c: [] for c in GAP_COLUMNS}).astype({"ns": np.int64, "step": np.int64})
    rest, flags = np.divmod(group, 8)
    rest, cause = np.divmod(rest, len(causes) + 1)
    step, level = np.divmod(rest, len(LEVELS))
    keys = capture[DEVICE].to_numpy(np.int64)[device]
    return pd.DataFrame({"globalPid": keys[:, 0], "deviceId": keys[:, 1], "step": step - 1,
                         "cause_kind": np.array(LEVELS, dtype=object)[level], "cause": _cause_names(cause - 1, causes),
                         "before_launch": flags >= 4, "after_sync": (flags & 2) > 0, "short_gap": (flags & 1) > 0,
                         "ns": ns})


def sum_by_group(device: np.ndarray, group: np.ndarray, ns: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ns (int64) summed per (device, group): (device, group, ns) of each, by device then group."""
    order = np.lexsort((group, device))
    device, group, ns = device[order], group[order], ns[order].astype(np.int64)
    if not ns.size:
        return device, group, ns
    first = np.flatnonzero(np.concatenate(([True], (device[1:] != device[:-1]) | (group[1:] != group[:-1]))))
    return device[first], group[first], np.add.reduceat(ns, first)


SEGMENT_COLUMNS = ["globalPid", "deviceId", "start", "end", "cause_kind", "cause", "step"]


def idle_segments(capture: pd.DataFrame, steps: pd.DataFrame, idle: dict[tuple[int, int], tuple],
                  host: pd.DataFrame, syncs: pd.DataFrame, t0: int, t1: int) -> pd.DataFrame:
    """The elementary idle segments :func:`attribute` sums, cut to [t0, t1) (ns): one row per segment
    (globalPid, deviceId, start, end, cause_kind, cause, step; step -1 outside every step window), by
    device then start. Arguments as :func:`attribute`; the attributed idle of [t0, t1) is their sum."""
    def segments(pieces: dict, timeline: dict) -> pd.DataFrame:
        which, j, start, end = _timeline_pieces(pieces["proc_start"], pieces["proc_end"], timeline["bounds"])
        back = (pieces["start"] - pieces["proc_start"])[which]  # from the process's lane to the device's times
        start, end = np.maximum(start + back, t0), np.minimum(end + back, t1)
        keep = end > start
        which, label = which[keep], timeline["label"][j[keep]]
        keys = capture[DEVICE].to_numpy(np.int64)[pieces["device"][which]]
        return pd.DataFrame({
            "globalPid": keys[:, 0], "deviceId": keys[:, 1], "start": start[keep], "end": end[keep],
            "cause_kind": np.array(LEVELS, dtype=object)[timeline["level"][label]],
            "cause": _cause_names(timeline["cause"][label], host_causes(host)), "step": pieces["step"][which]})

    out = list(_idle_pieces(capture, steps, idle, host, syncs, (t0, t1), then=segments))
    if not out:
        return pd.DataFrame({c: [] for c in SEGMENT_COLUMNS}).astype(
            {c: np.int64 for c in ("globalPid", "deviceId", "start", "end", "step")})
    return pd.concat(out, ignore_index=True)[SEGMENT_COLUMNS]


def host_causes(host: pd.DataFrame) -> pd.Index:
    """The host intervals' cause names (their categories: codes index them)."""
    return host["cause"].cat.categories if len(host) else pd.Index([])


def _idle_pieces(capture: pd.DataFrame, steps: pd.DataFrame, idle: dict[tuple[int, int], tuple], host: pd.DataFrame,
                 syncs: pd.DataFrame, window: tuple[int, int] | None = None, *, then: Callable[[dict, dict], object],
                 clip: dict[int, tuple[int, int]] | None = None, split_isolated: bool = False):
    """``then(pieces, timeline)`` of every chunk of every device's idle cut where its attributes change, with
    each process's cause timeline; chunks are cut and ``then`` applied on threads (threads.ordered_map), the
    results yielded in chunk order.

    Devices (rows of ``capture`` with idle in their window; with ``window`` (t0, t1 ns) only the idle
    intervals overlapping it; with ``clip`` (globalPid -> (t0, t1) ns) only those processes' devices and their
    idle cut to that span, each interval keeping its whole extent for its tags) are laid side by side, one lane per device (lane d shifted by d x stride,
    as in metrics), and their processes one lane each, in batches that fit STACK_LIMIT. Then, a block of
    idle intervals at a time (:func:`_idle_chunks`: at most IDLE_CHUNK of them and HOST_CHUNK host-interval
    starts, so bounded temporaries), the cause timeline of their processes
    (:func:`_cause_timeline`) and the *pieces*: the idle cut at every point where a device attribute
    changes — idle edges, the first sync return in each idle interval, step window starts and first
    launches, and where a step's CPU start and window end take effect (the first point at or after them:
    an elementary segment takes the attributes of its start).
    ``then`` gets pieces' arrays device (row in ``capture``), start, end (ns), proc_start,
    proc_end (the same on the process's lane), step (-1: none), before_launch, after_sync, short_gap;
    timeline as :func:`_cause_timeline`, plus ``isolated``: with ``split_isolated``, the isolated OS calls
    (:func:`_isolated_os_calls`) of the chunk's span, left out of the timeline's bounds and labels (start, end,
    cause code; else empty arrays).
    """
    devices = []
    if capture.empty:
        return
    for pos, (pid, dev, a, b) in enumerate(capture[[*DEVICE, "window_start", "window_end"]].to_numpy(np.int64)):
        if clip is not None and int(pid) not in clip:
            continue
        s, e = _idle_within(idle[(int(pid), int(dev))], int(a), int(b))
        span = window if clip is None else clip[int(pid)]
        if span is not None:
            i, j = int(np.searchsorted(e, span[0], side="right")), int(np.searchsorted(s, span[1]))
            s, e = s[i:j], e[i:j]
        whole_s, whole_e = s, e
        if clip is not None and s.size and (s[0] < span[0] or e[-1] > span[1]):
            s, e = np.maximum(s, span[0]), np.minimum(e, span[1])
        if s.size:
            devices.append((pos, int(pid), int(dev), s, e, whole_s, whole_e))
    if not devices:
        return
    step_cols = ["window_start", "window_end", "cpu_start", "first_launch"]
    times = [np.array([min(d[3][0] for d in devices), max(d[4][-1] for d in devices)], np.int64)]
    times += [steps[c].to_numpy(np.int64) for c in step_cols] if len(steps) else []
    times += [host[c].to_numpy(np.int64) for c in ("start", "end")] + [syncs["end"].to_numpy(np.int64)]
    lo, hi = min(int(t.min()) for t in times if t.size), max(int(t.max()) for t in times if t.size)
    stride = hi - lo + 1
    per_batch = lanes_per_batch(stride)
    for first in range(0, len(devices), per_batch):
        yield from _batch_pieces(devices[first:first + per_batch], steps, host, syncs, lo, stride, then, split_isolated)


def _batch_pieces(devices: list[tuple], steps: pd.DataFrame, host: pd.DataFrame, syncs: pd.DataFrame, lo: int,
                  stride: int, then: Callable[[dict, dict], object], split_isolated: bool):
    """:func:`_idle_pieces` of one batch of devices ((row, globalPid, deviceId, idle starts, idle ends) each)."""
    rows, pid = (np.array([d[i] for d in devices], np.int64) for i in (0, 1))
    pids = np.unique(pid)
    device_shift = np.arange(len(devices), dtype=np.int64) * stride - lo
    # process j's lane: its times - lo + j x stride; a lone process keeps its own times (its calls need no copy)
    process_shift = np.zeros(1, np.int64) if pids.size == 1 else np.arange(pids.size, dtype=np.int64) * stride - lo
    to_process = process_shift[np.searchsorted(pids, pid)] - device_shift  # device lane -> its process's lane
    calls = _lane_calls(host, pids, process_shift, split_isolated)
    ends = syncs["end"].to_numpy(np.int64)
    mine = np.isin(syncs["globalPid"].to_numpy(np.int64), pids)
    ends = np.sort(ends[mine] + process_shift[np.searchsorted(pids, syncs["globalPid"].to_numpy(np.int64)[mine])])
    win = _lane_steps(steps, [(d[1], d[2]) for d in devices], device_shift)
    step_points = unique_sorted(np.concatenate([win["window_start"], win["first_launch"]]))
    edges = np.sort(np.concatenate([win["cpu_start"], win["window_end"]]))  # where a step's tests on a time change

    def chunk(idle_chunk: tuple[np.ndarray, ...]):
        d, s, e, whole_s, whole_e = idle_chunk
        to_proc = to_process[d]  # each piece's device lane -> its process's lane
        fs = np.full(s.size, NEVER)  # earliest sync return inside each (whole) idle interval
        if ends.size:
            j = np.searchsorted(ends, whole_s + to_proc, side="left")
            inside = (j < ends.size) & (ends[np.minimum(j, ends.size - 1)] < whole_e + to_proc)
            fs[inside] = ends[j[inside]] - to_proc[inside]
        a, b = int((s + to_proc).min()), int((e + to_proc).max())
        timeline = _cause_timeline(calls, a, b, len(host_causes(host)))
        iso_s, iso_e, iso_c = calls["isolated"]
        first, stop = int(np.searchsorted(iso_e, a, side="right")), int(np.searchsorted(iso_s, b, side="left"))
        timeline["isolated"] = (iso_s[first:stop], iso_e[first:stop], iso_c[first:stop])
        inner = step_points[np.searchsorted(step_points, s[0]):np.searchsorted(step_points, e[-1], side="right")]
        p = unique_sorted(np.concatenate([s, e, fs[(fs >= s) & (fs < e)], inner]))
        # a step's CPU start or window end inside an idle interval takes effect at the first point at or after
        # it (a segment has the attributes of its start): no idle edge, host edge or step point lies between them
        t = edges[np.searchsorted(edges, s[0]):np.searchsorted(edges, e[-1])]
        k = np.searchsorted(s, t, side="right") - 1
        inside = (k >= 0) & (t < e[np.maximum(k, 0)])
        t, k = t[inside], k[inside]
        if t.size:
            shift = to_proc[k]
            at = p[np.searchsorted(p, t, side="left")]
            # the host edges: the timeline's bounds, and the isolated calls' (each one's start, end: sorted)
            for host_edges in (timeline["bounds"], np.column_stack(timeline["isolated"][:2]).ravel()):
                if host_edges.size:
                    i = np.minimum(np.searchsorted(host_edges, t + shift, side="left"), host_edges.size - 1)
                    host_at = host_edges[i] - shift
                    at = np.minimum(at, np.where(host_at >= t, host_at, NEVER))
            p = unique_sorted(np.concatenate([p, at]))
        start, end = p[:-1], p[1:]
        k = searchsorted_sorted(s, start, side="right") - 1  # p is sorted
        in_idle = (k >= 0) & (start < e[np.maximum(k, 0)])
        start, end, k = start[in_idle], end[in_idle], k[in_idle]
        lane, shift = d[k], to_proc[k]
        step, before = np.full(start.size, -1, dtype=np.int64), np.zeros(start.size, dtype=bool)
        if win["step"].size:  # each piece's step window: the last starting at or before it, if it still holds it
            w = searchsorted_sorted(win["window_start"], start, side="right") - 1  # start is sorted
            hit = np.flatnonzero((w >= 0) & (start < win["window_end"][np.maximum(w, 0)]))
            step[hit] = win["step"][w[hit]]
            before[hit] = (start[hit] >= win["cpu_start"][w[hit]]) & (start[hit] < win["first_launch"][w[hit]])
        return then({"device": rows[lane], "start": start - device_shift[lane], "end": end - device_shift[lane],
                     "proc_start": start + shift, "proc_end": end + shift, "step": step,
                     "before_launch": before, "after_sync": start >= fs[k],
                     "short_gap": (whole_e - whole_s)[k] < SHORT_GAP_NS}, timeline)

    yield from ordered_map(chunk, _idle_chunks(devices, device_shift, to_process, calls["start"]))


def _idle_chunks(devices: list[tuple], device_shift: np.ndarray, to_process: np.ndarray, host_starts: np.ndarray):
    """The devices' idle intervals on their lanes in chunks (a chunk may span devices) of at most IDLE_CHUNK
    intervals whose span on the process lanes holds at most HOST_CHUNK host-interval starts (``host_starts``,
    sorted, on the process lanes), so a chunk's cause timeline is bounded however many calls one idle interval
    spans: such an interval is cut at a host-interval start (a timeline bound: the attribution is unchanged).
    Each chunk: (device lane of each piece, starts, ends, and the whole idle interval's start and end; ns on
    the device lanes). ``to_process``: per device, its lane -> its process's lane."""
    pending, count, base, top = [], 0, 0, 0  # the chunk's pieces, intervals, host starts spanned [base, top)

    def flush():
        lanes, sizes = [p[0] for p in pending], [p[1].size for p in pending]
        s, e = (np.concatenate([p[i] for p in pending]) for i in (1, 2))
        cut = any(p[1] is not p[3] or p[2] is not p[4] for p in pending)
        whole = tuple(np.concatenate([p[i] for p in pending]) for i in (3, 4)) if cut else (s, e)
        pending.clear()
        return np.repeat(np.array(lanes, np.int64), sizes), s, e, *whole

    for j, (_, _, _, starts, ends, whole_starts, whole_ends) in enumerate(devices):  # the device's own times
        to_lane, shift = int(device_shift[j] + to_process[j]), device_shift[j]  # own time -> process, device lane
        i, rest = 0, None  # the next interval, and where its part after a cut starts (None: uncut)
        while i < starts.size:
            begin = int(starts[i]) if rest is None else rest
            at = int(np.searchsorted(host_starts, begin + to_lane))  # host starts before it
            if pending and at < top:  # a lane before the chunk's (another device of its process)
                yield flush()
            if not pending:
                base, count = at, 0
            # intervals ending by the host start HOST_CHUNK after the chunk's first fit its timeline
            limit = int(host_starts[base + HOST_CHUNK]) - to_lane if base + HOST_CHUNK < host_starts.size else NEVER
            stop = min(i + IDLE_CHUNK - count, int(np.searchsorted(ends, limit, side="right")))
            if stop > i:
                s, e = starts[i:stop] + shift, ends[i:stop] + shift
                whole_s = s if whole_starts is starts else whole_starts[i:stop] + shift
                whole_e = e if whole_ends is ends else whole_ends[i:stop] + shift
                if rest is not None:
                    s = np.concatenate(([rest + shift], s[1:]))
                pending.append((j, s, e, whole_s, whole_e))
                count, i, rest = count + stop - i, stop, None
                top = int(np.searchsorted(host_starts, int(ends[stop - 1]) + to_lane))
                if count == IDLE_CHUNK or (i < starts.size and ends[i] > limit):
                    yield flush()
            elif pending:  # the next interval does not fit the chunk's timeline
                yield flush()
            else:  # it alone holds more host starts: its part up to the host start HOST_CHUNK on (or the next later)
                later = max(base + HOST_CHUNK, int(np.searchsorted(host_starts, begin + to_lane, side="right")))
                cut = min(int(host_starts[later]) - to_lane, int(ends[i])) if later < host_starts.size else int(ends[i])
                whole = (np.array([whole_starts[i] + shift]), np.array([whole_ends[i] + shift]))
                pending.append((j, np.array([begin + shift]), np.array([cut + shift]), *whole))
                yield flush()
                i, rest = (i, cut) if cut < ends[i] else (i + 1, None)
    if pending:
        yield flush()


def _lane_steps(steps: pd.DataFrame, keys: list[tuple[int, int]], device_shift: np.ndarray) -> dict[str, np.ndarray]:
    """The step windows of the devices ``keys`` on their lanes (device j's times + device_shift[j]), sorted by
    window start: window_start, window_end, cpu_start, first_launch (ns), step, lane."""
    cols = ["window_start", "window_end", "cpu_start", "first_launch"]
    if not len(steps):
        return {c: np.empty(0, np.int64) for c in [*cols, "step", "lane"]}
    lane = pd.MultiIndex.from_tuples(keys).get_indexer(
        pd.MultiIndex.from_arrays([steps["globalPid"].to_numpy(np.int64), steps["deviceId"].to_numpy(np.int64)]))
    rows = np.flatnonzero(lane >= 0)
    lane = lane[rows]
    out = {c: steps[c].to_numpy(np.int64)[rows] + device_shift[lane] for c in cols}
    out.update(step=steps["step"].to_numpy(np.int64)[rows], lane=lane)
    order = np.argsort(out["window_start"], kind="stable")
    return {c: v[order] for c, v in out.items()}


def _lane_calls(host: pd.DataFrame, pids: np.ndarray, process_shift: np.ndarray, split_isolated: bool = False) -> dict:
    """The host intervals of the processes ``pids`` on their lanes (process j's times + process_shift[j]), sorted
    by start: start, end, cause (codes into the categories), and ``by_level``: per level present, the
    positions of its calls in those arrays and their reach (the furthest end so far among that level's calls);
    ``isolated``: with ``split_isolated``, the isolated OS calls (:func:`_isolated_os_calls`: start, end, cause
    code), left out of ``by_level`` (else empty arrays)."""
    pid = host["globalPid"].to_numpy(np.int64) if len(host) else np.empty(0, np.int64)
    start, end = host["start"].to_numpy(np.int64), host["end"].to_numpy(np.int64)
    level, cause = host["level"].to_numpy(), host["cause"].cat.codes.to_numpy() if len(host) else np.empty(0, np.int8)
    if pids.size == 1 and pid.size and bool((pid == pids[0]).all()):  # one process: no row selection
        if process_shift[0]:
            start, end = start + process_shift[0], end + process_shift[0]
    else:
        rows = np.flatnonzero(np.isin(pid, pids))
        shift = process_shift[np.searchsorted(pids, pid[rows])]
        start, end, level, cause = start[rows] + shift, end[rows] + shift, level[rows], cause[rows]
    if not is_sorted(start):  # a process's calls by start (its lane's order)
        order = np.argsort(start, kind="stable")
        start, end, level, cause = start[order], end[order], level[order], cause[order]
    isolated = _isolated_os_calls(start, end, level) if split_isolated else np.empty(0, np.int64)
    by_level = {}
    position_type = np.int32 if start.size < np.iinfo(np.int32).max else np.int64
    for lv in np.flatnonzero(np.bincount(level, minlength=len(LEVELS))).tolist():
        mine = level == lv
        if lv == OS_ACTIVE and isolated.size:
            mine[isolated] = False
        positions = np.flatnonzero(mine).astype(position_type)
        if positions.size:
            reach = end[positions]
            by_level[lv] = (positions, np.maximum.accumulate(reach, out=reach))
    return {"start": start, "end": end, "cause": cause, "by_level": by_level,
            "isolated": (start[isolated], end[isolated], cause[isolated])}


def _isolated_os_calls(start: np.ndarray, end: np.ndarray, level: np.ndarray) -> np.ndarray:
    """Positions (sorted) of the OS_ACTIVE host intervals (``start`` sorted, on the lanes) that overlap no other
    interval of a level up to OS_ACTIVE and are not empty: the short calls an OSRT capture holds by the million
    (pthread_cond_signal on the step's thread). At each of their instants their own label holds, and everywhere
    else the cause timeline without them is the same: a level-OS_ACTIVE call that holds an instant after one of
    them would overlap it (:func:`_active_label`'s latest-starting or furthest-reaching call), and no higher
    level meets them. So :func:`attributed` leaves them out of the timeline and gives each its ns on top
    (:func:`_isolated_overlay`): the same sums from far fewer timeline bounds."""
    upto = np.flatnonzero(level <= OS_ACTIVE)
    if not upto.size:
        return upto
    s, e = start[upto], end[upto]
    reach_before = np.concatenate(([np.iinfo(np.int64).min], np.maximum.accumulate(e)[:-1]))
    next_start = np.concatenate((s[1:], [NEVER]))
    alone = (level[upto] == OS_ACTIVE) & (reach_before <= s) & (next_start >= e) & (e > s)
    return upto[alone]


def _cause_timeline(calls: dict, a: int, b: int, n_causes: int) -> dict[str, np.ndarray]:
    """The cause of every instant of [a, b) on the processes' lanes (``calls``: :func:`_lane_calls`), piecewise
    constant between host-interval edges: ``bounds`` (sorted piece starts; bounds[0] = -inf), ``label`` per piece
    (index into ``level`` and ``cause``: the LEVELS index and cause code, -1 untraced, of each distinct label).
    An instant gets the host interval :func:`_active_label` picks there in the highest-precedence level that
    has one (levels in LEVELS' order; a level is asked only about the bounds no higher one holds). Of each
    level, only its calls from the first reaching past a to the last starting before b take part: the earlier
    ones end by a (never latest-starting while one after them has started), the later ones start after b. Per
    level, so one long interval (a warm-up range open across a compile) keeps only its own level's later calls,
    not every call after it."""
    last = int(np.searchsorted(calls["start"], b, side="left"))
    taking = []
    for lv in range(len(LEVELS) - 1):  # highest precedence first
        if lv in calls["by_level"]:
            positions, reach = calls["by_level"][lv]
            upto = int(np.searchsorted(positions, positions.dtype.type(last)))  # same dtype: no copy of positions
            rows = positions[int(np.searchsorted(reach, a, side="right")):upto]
            if rows.size:
                taking.append((lv, calls["start"][rows], calls["end"][rows], calls["cause"][rows]))
    edges = unique_sorted(np.concatenate([t for _, starts, ends, _ in taking for t in (starts, ends)]
                                         or [np.empty(0, np.int64)]))
    bounds = np.concatenate(([np.iinfo(np.int64).min], edges)).astype(np.int64, copy=False)
    level = np.full(bounds.size, len(LEVELS) - 1, dtype=np.int64)
    cause = np.full(bounds.size, -1, dtype=np.int64)
    todo = None  # the bounds no level has claimed yet (None: every bound)
    for lv, starts, ends, codes in taking:  # a bound keeps the first level that claims it
        asking = bounds.size if todo is None else todo.size
        inside = _bounds_inside(bounds, starts, ends, asking // 4)
        if inside is None:  # the level is asked about every unclaimed bound
            lab = _active_label(starts, ends, codes, bounds if todo is None else bounds[todo])
            hit = lab >= 0
            claimed = np.flatnonzero(hit) if todo is None else todo[hit]
            todo = np.flatnonzero(~hit) if todo is None else todo[~hit]
        else:  # only about the unclaimed bounds inside its intervals: elsewhere it has no label
            at = None
            if todo is not None:
                at = np.minimum(np.searchsorted(todo, inside), todo.size - 1)
                unclaimed = todo[at] == inside
                inside, at = inside[unclaimed], at[unclaimed]
            lab = _active_label(starts, ends, codes, bounds[inside])
            hit = lab >= 0
            claimed = inside[hit]
            todo = np.delete(np.arange(bounds.size) if todo is None else todo, claimed if at is None else at[hit])
        level[claimed], cause[claimed] = lv, lab[hit]
        if not todo.size:
            break
    labels, label = dense_codes(level * (n_causes + 2) + cause + 1, len(LEVELS) * (n_causes + 2))
    level_of, cause_of = np.divmod(labels, n_causes + 2)
    return {"bounds": bounds, "label": label, "level": level_of, "cause": cause_of - 1}


def _bounds_inside(bounds: np.ndarray, starts: np.ndarray, ends: np.ndarray, limit: int) -> np.ndarray | None:
    """Positions (sorted) of the ``bounds`` (sorted, ns) inside one of the intervals [starts, ends) (starts
    sorted), the only bounds where :func:`_active_label` can find a label; None when the intervals are not few
    (more than ``limit`` / 4 of them) or hold more than ``limit`` bounds (then asking every bound is cheaper)."""
    if 4 * starts.size > limit:
        return None
    span_starts, span_ends = union(starts, ends)
    first, stop = np.searchsorted(bounds, span_starts), np.searchsorted(bounds, span_ends)
    if int((stop - first).sum()) > limit:
        return None
    return _expand(np.arange(first.size), first, stop - first)[1]


def _label_sums(x: np.ndarray, y: np.ndarray, bounds: np.ndarray, label: np.ndarray,
                n_labels: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per range [x, y) on the timeline (``bounds``, ``label``: :func:`_cause_timeline`): the ns of each label
    it covers, as (range index, label, ns) rows with ns > 0. The two pieces at a range's ends are cut; the
    whole pieces between are listed one by one when they are at most ``n_labels``, else summed per label
    from per-label prefix sums (a range costs at most its pieces or the labels, whichever is fewer)."""
    j1 = search_sorted(bounds, x, side="right") - 1  # the piece holding x
    j2 = search_sorted(bounds, y, side="left") - 1   # the piece holding y - 1
    two = j2 > j1
    which, labels, ns = [np.arange(x.size), np.flatnonzero(two)], [label[j1], label[j2[two]]], []
    ns += [np.where(two, bounds[np.minimum(j1 + 1, bounds.size - 1)], y) - x, (y - bounds[j2])[two]]
    inner = np.where(two, j2 - j1 - 1, 0)  # whole pieces j1 + 1 .. j2 - 1
    few = np.flatnonzero((inner > 0) & (inner <= n_labels))
    if few.size:
        r, j = _expand(few, j1[few] + 1, inner[few])
        which.append(r), labels.append(label[j]), ns.append(bounds[j + 1] - bounds[j])
    many = np.flatnonzero(inner > n_labels)
    if many.size:
        length = np.zeros(bounds.size, dtype=np.int64)
        length[1:-1] = np.diff(bounds[1:])  # the first (from -inf) and last (to +inf) pieces are never whole
        # the pieces by (label, position): a stable sort of the labels, a radix sort when they fit 16 bits
        order = np.argsort(label.astype(np.int16) if n_labels <= 1 << 15 else label, kind="stable")
        key = label[order].astype(np.int64) * bounds.size + order
        cum = np.concatenate(([0], np.cumsum(length[order])))
        per_block = max(1, BLOCK // n_labels)
        for lo_r in range(0, many.size, per_block):  # (range, label) pairs a block at a time
            r = np.repeat(many[lo_r:lo_r + per_block], n_labels)
            c = np.tile(np.arange(n_labels, dtype=np.int64), r.size // n_labels)
            total = (cum[np.searchsorted(key, c * bounds.size + j2[r])]
                     - cum[np.searchsorted(key, c * bounds.size + j1[r] + 1)])
            hit = total > 0
            which.append(r[hit]), labels.append(c[hit]), ns.append(total[hit])
    which, labels, ns = (np.concatenate(v) for v in (which, labels, ns))
    keep = ns > 0
    return which[keep], labels[keep], ns[keep]


def _expand(rows: np.ndarray, first: np.ndarray, count: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row repeated count times with the consecutive indices first, first + 1, ...: (rows, indices)."""
    r = np.repeat(np.arange(rows.size), count)
    j = np.arange(r.size) - np.repeat(np.cumsum(count) - count, count) + first[r]
    return rows[r], j


def _timeline_pieces(x: np.ndarray, y: np.ndarray, bounds: np.ndarray) -> tuple[np.ndarray, ...]:
    """Every timeline piece (``bounds``: :func:`_cause_timeline`) each range [x, y) overlaps, cut to the range:
    (range index, piece, start, end), by range then start."""
    j1 = np.searchsorted(bounds, x, side="right") - 1
    j2 = np.searchsorted(bounds, y, side="left") - 1
    which, j = _expand(np.arange(x.size), j1, j2 - j1 + 1)
    after = np.where(j + 1 < bounds.size, bounds[np.minimum(j + 1, bounds.size - 1)], y[which])
    return which, j, np.maximum(x[which], bounds[j]), np.minimum(y[which], after)


def interval_causes(key: tuple[int, int], idle_s: np.ndarray, idle_e: np.ndarray, host: pd.DataFrame,
                    syncs: pd.DataFrame) -> np.ndarray:
    """The cause kind (LEVELS) holding most of each of one device's idle intervals (sorted, disjoint; ns),
    by the same precedence as :func:`attribute` (``host``: :func:`host_intervals`; ``syncs``: :func:`sync_ends`):
    each interval is its own window. For the timeline of one step."""
    out = np.full(idle_s.size, LEVELS[-1], dtype=object)
    if idle_s.size == 0:
        return out
    capture = pd.DataFrame({"globalPid": [key[0]], "deviceId": [key[1]], "window_start": [idle_s[0]],
                            "window_end": [idle_e[-1]]})
    windows = pd.DataFrame({"globalPid": key[0], "deviceId": key[1], "step": np.arange(idle_s.size),
                            "window_start": idle_s, "window_end": idle_e, "cpu_start": idle_s, "first_launch": idle_s})
    rows = attribute(capture, windows, {key: (idle_s, idle_e)}, host, syncs)
    rows = rows[rows["step"] >= 0].groupby(["step", "cause_kind"], as_index=False)["ns"].sum()
    top = rows.sort_values(["step", "ns"], kind="stable").drop_duplicates("step", keep="last")
    out[top["step"].to_numpy()] = top["cause_kind"].to_numpy()
    return out


def idle_gap_metrics(frames: list[pd.DataFrame], idle: dict[tuple[int, int], tuple]) -> list[pd.DataFrame]:
    """Per window row of each frame (globalPid, deviceId, window_start, window_end; disjoint per device):
    idle_gap_count (GPU idle intervals starting in it), idle_short_gap_ns (their idle ns in gaps shorter than
    SHORT_GAP_NS: the µs-scale gaps between launches of a launch-bound loop) and idle_dispatch_gap_ns (in gaps
    shorter than DISPATCH_GAP_NS: the host's work per operation between launches, e.g. eager dispatch), of the
    device's idle (``idle``: :func:`idle_by_device`) cut to the span of the frame's windows on it
    (:func:`_idle_within`). A device's prefix sums are made once per gap class for every frame, in one array, on
    its idle as it is (no cut copy): the two intervals cut at the span's edges are corrected on their own."""
    out = [(np.zeros(len(w), np.int64), {c: np.zeros(len(w), np.int64) for c in GAP_LIMITS}) for w in frames]
    groups = [w.groupby(["globalPid", "deviceId"]).indices for w in frames]
    for key in dict.fromkeys(k for g in groups for k in g):
        starts, ends = idle[(int(key[0]), int(key[1]))]
        spans = []  # per frame with windows on this device: its rows and their first/end interval (after i)
        for w, g, (count, below) in zip(frames, groups, out):
            if key not in g:
                continue
            idx = g[key]
            ws, we = w["window_start"].to_numpy(np.int64)[idx], w["window_end"].to_numpy(np.int64)[idx]
            a, b = int(ws.min()), int(we.max())
            i, j = int(np.searchsorted(ends, a, side="right")), int(np.searchsorted(starts, b, side="left"))
            first, end = np.searchsorted(starts[i:j], ws, side="left"), np.searchsorted(starts[i:j], we, side="left")
            if j > i:  # the span cuts its first interval's start to a, its last's end to b
                cut_start = max(int(starts[i]), a)
                first[ws <= cut_start], end[we <= cut_start] = 0, 0
            count[idx] = end - first  # idle intervals starting in [window_start, window_end)
            spans.append((below, idx, a, b, i, j, first, end))
        lengths = ends - starts
        cum = np.zeros(lengths.size + 1, dtype=np.int64)  # one gap class's ns before each interval, reused
        for c, limit in GAP_LIMITS.items():
            np.cumsum(np.multiply(lengths, lengths < limit, out=cum[1:]), out=cum[1:])
            for below, idx, a, b, i, j, first, end in spans:
                below[c][idx] = cum[i + end] - cum[i + first]
                for k in {i, j - 1} if j > i else ():  # the cut intervals' ns, where a window counts them
                    cut = min(int(ends[k]), b) - max(int(starts[k]), a)
                    fix = int(_below(cut, limit) - _below(int(lengths[k]), limit))
                    if fix:
                        below[c][idx] += np.where((first <= k - i) & (k - i < end), fix, 0)
    return [pd.DataFrame({"idle_gap_count": c, **below}, index=w.index) for w, (c, below) in zip(frames, out)]


def _below(lengths, limit: int):
    """Each idle length (ns; an array or one value) when it is below ``limit`` ns, else 0 (the prefix sums of
    idle_gap_metrics compute the same in place)."""
    return np.where(lengths < limit, lengths, 0)


def _idle(busy: Coverage | None, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
    """Complement of ``busy`` inside [a, b): the gaps between its disjoint intervals that reach into [a, b),
    plus the idle before its first and after its last interval there (views of ``busy``'s arrays when
    there is none, else one array each, written once; read-only for callers)."""
    if busy is None or len(busy) == 0:
        return np.array([a], np.int64), np.array([b], np.int64)
    i = int(np.searchsorted(busy.ends, a, side="right"))  # first busy interval ending after a
    j = int(np.searchsorted(busy.starts, b, side="left"))  # busy intervals starting before b: [.., j)
    if i >= j:  # nothing busy inside [a, b)
        return np.array([a], np.int64), np.array([b], np.int64)
    lead, trail = int(busy.starts[i] > a), int(busy.ends[j - 1] < b)
    inner = j - i - 1  # gaps between busy intervals i..j-1: never empty (touching intervals are merged)
    if not lead and not trail:  # [a, b) opens and closes busy (a capture window): views of busy, no copy
        return busy.ends[i:j - 1], busy.starts[i + 1:j]
    starts, ends = np.empty(lead + inner + trail, np.int64), np.empty(lead + inner + trail, np.int64)
    starts[lead:lead + inner], ends[lead:lead + inner] = busy.ends[i:j - 1], busy.starts[i + 1:j]
    if lead:
        starts[0], ends[0] = a, busy.starts[i]
    if trail:
        starts[-1], ends[-1] = busy.ends[j - 1], b
    return starts, ends


def _active_label(starts: np.ndarray, ends: np.ndarray, labels: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per time t: the label of an interval holding t — the latest-starting one when it still holds t,
    else the one reaching furthest among those started before — or -1 (times t in ns, as the intervals;
    sorted t, such as a cause timeline's bounds, are merged with the starts: :func:`intervals.search_sorted`)."""
    if starts.size == 0:
        return np.full(t.shape, -1, dtype=np.int64)
    if is_sorted(starts):
        s, e, lab = starts, ends, labels
    else:
        order = np.argsort(starts, kind="stable")
        s, e, lab = starts[order], ends[order], labels[order]
    k = search_sorted(s, t, side="right") - 1
    kk = np.maximum(k, 0)
    reach = np.maximum.accumulate(e)
    if np.array_equal(reach, e):  # no interval ends before an earlier-starting one: the latest reaches furthest
        return np.where((k >= 0) & (e[kk] > t), lab[kk], -1)
    furthest = _running_argmax(e, reach)
    latest = (k >= 0) & (e[kk] > t)
    outer = (k >= 0) & ~latest & (reach[kk] > t)
    return np.where(latest, lab[kk], np.where(outer, lab[furthest[kk]], -1))


def _running_argmax(x: np.ndarray, running_max: np.ndarray) -> np.ndarray:
    """Index of the running maximum of ``x`` (first index of each new maximum; ``running_max``: its
    ``np.maximum.accumulate``)."""
    is_new = np.concatenate(([True], x[1:] > running_max[:-1]))
    return np.maximum.accumulate(np.where(is_new, np.arange(x.size), 0))


def _cause_names(codes: np.ndarray, causes: pd.Index) -> np.ndarray:
    """Cause label per code into ``causes`` (-1: UNTRACED)."""
    names = np.asarray(causes, dtype=object)
    return np.where(codes >= 0, names[np.maximum(codes, 0)] if names.size else "", UNTRACED)


def first_launch_times(steps: pd.DataFrame, runtime: pd.DataFrame | Blocks) -> np.ndarray:
    """Per step row: start (ns) of the first call of its process that puts work on the GPU (a launch or a
    copy) inside the step's CPU range [cpu_start, cpu_end), or cpu_end when there is none. ``runtime``: a frame
    or blocks of it (:func:`as_blocks`), walked once: each block's first call lowers the time found so far (the
    state between blocks: one int64 per step row, the result)."""
    out = steps["cpu_end"].to_numpy(np.int64).copy()
    if steps.empty:
        return out
    cpu_start = steps["cpu_start"].to_numpy(np.int64)
    steps_of = [(pid, np.arange(len(steps)) if idx is None else idx)
                for (pid,), idx in group_indices(steps["globalPid"].to_numpy())]
    for block in as_blocks(runtime):
        _lower_to_first_launch(out, block, cpu_start, steps_of)
    return out


def _lower_to_first_launch(out: np.ndarray, runtime: pd.DataFrame, cpu_start: np.ndarray,
                           steps_of: list[tuple[int, np.ndarray]]) -> None:
    """Set each step row's ``out`` (ns) to the first call of ``runtime`` that puts work on the GPU and starts in
    [cpu_start, out) of that row, where there is one (``steps_of``: per globalPid, its step rows)."""
    puts_work = api_is(runtime, ["launch", "sync_copy", "async_copy"])
    if not puts_work.any():
        return
    starts = runtime["start"].to_numpy()
    calls = dict(rows_by_process(runtime["globalTid"].to_numpy(), of_tid=True))  # every call: no copy of the tids
    for pid, rows in steps_of:
        if pid not in calls:
            continue
        mine = calls[pid]
        t = starts[puts_work] if mine is None else starts[mine[puts_work[mine]]]
        if t.size == 0:
            continue
        t.sort(kind="stable")  # its own copy: sorted in place
        a = cpu_start[rows]
        k = np.minimum(np.searchsorted(t, a, side="left"), t.size - 1)
        found = (t[k] >= a) & (t[k] < out[rows])
        out[rows] = np.where(found, t[k], out[rows])


SUMMARY_COLUMNS = ["cause_kind", "cause", "ns", "before_launch_ns", "after_sync_ns", "short_gap_ns", "short_after_sync_ns"]


CAUSE = [*DEVICE, "cause_kind", "cause"]


def summarize(gaps: pd.DataFrame, steady_steps: dict[tuple[int, int], list[int]]) -> dict[tuple[int, int], pd.DataFrame]:
    """Per device: idle ns per (cause_kind, cause) — the median per steady step when the device has
    steps (``steady_steps`` lists them), else the whole capture's — sorted by ns, largest first; plus
    ``before_launch_ns``, ``after_sync_ns``, ``short_gap_ns`` and ``short_after_sync_ns`` (short gaps after a
    sync), the same statistic restricted to those tags: its rows of :func:`summary_parts` (SUMMARY_COLUMNS)."""
    return by_device(summary_parts(gaps, steady_steps))


def by_device(parts: dict[bool, tuple]) -> dict[tuple[int, int], pd.DataFrame]:
    """:func:`summary_parts` split per device (its rows, SUMMARY_COLUMNS), devices in sorted order."""
    out = {}
    for part, runs in parts.values():
        rows = part[SUMMARY_COLUMNS]
        for key, (lo, hi) in runs.items():
            out[key] = rows.iloc[lo:hi].reset_index(drop=True)
    return dict(sorted(out.items()))


def summary_parts(gaps: pd.DataFrame, steady_steps: dict[tuple[int, int], list[int]]) -> dict[bool, tuple]:
    """Every device's summary rows (see :func:`summarize`) grouped in one pass: {True: the devices with steady
    steps (medians, float64), False: the others (capture sums, int64)} -> (rows: globalPid, deviceId and
    SUMMARY_COLUMNS, by device then ns, largest first; {(globalPid, deviceId): (first row, end row)} of every
    device of ``gaps`` in that part, (0, 0) when none of its rows is left)."""
    if gaps.empty:
        return {}
    ns = gaps["ns"].to_numpy()
    tagged = gaps.assign(before_launch_ns=np.where(gaps["before_launch"], ns, 0),
                         after_sync_ns=np.where(gaps["after_sync"], ns, 0), short_gap_ns=np.where(gaps["short_gap"], ns, 0),
                         short_after_sync_ns=np.where(gaps["short_gap"] & gaps["after_sync"], ns, 0))
    chosen = steady_frame(steady_steps)
    device = pd.MultiIndex.from_frame(gaps[DEVICE])
    stepped = device.isin(pd.MultiIndex.from_frame(chosen[DEVICE]))
    in_steps = pd.MultiIndex.from_frame(gaps[[*DEVICE, "step"]]).isin(pd.MultiIndex.from_frame(chosen))
    parts = {True: _step_medians(tagged[in_steps], chosen), False: _capture_sums(tagged[~stepped])}
    devices = {True: set(device[stepped].unique().tolist()), False: set(device[~stepped].unique().tolist())}
    out = {}
    for key, part in parts.items():
        part = part[part["ns"] > 0].sort_values([*DEVICE, "ns"], ascending=[True, True, False], kind="stable")
        part = part.reset_index(drop=True)[[*DEVICE, *SUMMARY_COLUMNS]]
        runs = dict.fromkeys(((int(p), int(d)) for p, d in devices[key]), (0, 0))
        pid, dev = part["globalPid"].to_numpy(), part["deviceId"].to_numpy()
        first = np.flatnonzero(np.concatenate(([True], (pid[1:] != pid[:-1]) | (dev[1:] != dev[:-1])))) if len(part) else []
        bounds = np.append(first, len(part)).tolist()
        runs.update({(int(pid[a]), int(dev[a])): (a, b) for a, b in zip(bounds[:-1], bounds[1:])})
        out[key] = (part, runs)
    return out


def _capture_sums(rows: pd.DataFrame) -> pd.DataFrame:
    """Idle ns per (device, cause_kind, cause) over the whole capture (int64)."""
    return rows.groupby(CAUSE)[SUMMARY_COLUMNS[2:]].sum().reset_index()


def _step_medians(rows: pd.DataFrame, chosen: pd.DataFrame) -> pd.DataFrame:
    """Per (device, cause_kind, cause): the median over its device's ``chosen`` steps of the per-step idle ns,
    a step without that cause counting 0 (float64)."""
    values = SUMMARY_COLUMNS[2:]
    if rows.empty:
        return pd.DataFrame({c: pd.Series(dtype=object if c in CAUSE[2:] else np.float64 if c in values else np.int64)
                             for c in CAUSE + values})
    sums = rows.groupby([*CAUSE, "step"])[values].sum().reset_index()  # per (cause, step)
    group, keys = key_groups(sums, CAUSE)
    steps_of = chosen.groupby(DEVICE).size()
    n = steps_of.reindex(pd.MultiIndex.from_frame(keys[DEVICE])).to_numpy(np.int64)
    return keys.assign(**{v: median_per_group(group, sums[v].to_numpy(), n) for v in values})
