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

Cost: one sort of the merged boundaries per device and a searchsorted per precedence level:
linear in events after the sort.
"""
from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pandas as pd

from .intervals import Coverage, group_indices, is_sorted, isin_blocks, row_blocks, unique_sorted
from .steps import group_name, rows_by_process
from .trace.tables import PROCESS_MASK, pid_of

LEVELS = ["warmup", "cuda_blocking", "os_runtime", "launch", "os_wait", "nvtx_range", "untraced"]
WARMUP, BLOCKING, OS_ACTIVE, LAUNCH, WAIT, RANGE = range(6)  # LEVELS' indices (untraced: the rest)
UNTRACED = "host work outside traced calls"
OS_WAIT = re.compile(r"^(pthread_cond_(timed|clock)?wait|pthread_(mutex|rwlock|spin)_\w*lock|pthread_join|"
                     r"pthread_barrier_wait|sem_(timed|clock)?wait|futex|poll|ppoll|select|pselect6?|"
                     r"epoll_p?wait\d?|(clock_)?nanosleep|usleep|sleep|sched_yield|wait(pid|id|4)?|"
                     r"accept4?|recv(from|msg|mmsg)?|msgrcv|sigwait\w*|sigtimedwait|pause)$")
SHORT_GAP_NS = 100_000  # idle gaps shorter than this (µs-scale) are launch/dispatch gaps
LONG_LAUNCH_NS = 1_000_000  # a launch call this long while the GPU idles is loading its module (1000x a launch)
LONG_INIT_NS = 10_000_000   # an allocation call this long while the GPU idles is creating the CUDA context
WARMUP_RANGE = re.compile(r"(?i).*(compil|\bjit\b|nvrtc|autotun|\btuning|warm.?up|codegen|lowering|"
                          r"dynamo|inductor|Torch-Compiled Region).*")
IDLE_CHUNK = 1 << 17    # idle intervals attributed at a time (bounds the per-segment temporaries)
GAP_COLUMNS = ["globalPid", "deviceId", "step", "cause_kind", "cause", "before_launch", "after_sync", "short_gap", "ns"]
SYNC_APIS = ("sync_wait", "sync_copy", "async_copy")  # calls that return when the GPU work they wait for is done


def api_base_name(name: str) -> str:
    """CUDA API name without nsys' version suffix: 'cudaMemcpy_v3020' -> 'cudaMemcpy'."""
    return re.sub(r"(_v\d+)?(_ptsz|_ptds)?$", "", name)


def sync_ends(runtime: pd.DataFrame) -> pd.DataFrame:
    """End times (ns) of the calls that wait for the GPU (SYNC_APIS), with their globalPid."""
    sync = api_is(runtime, SYNC_APIS)
    return pd.DataFrame({"globalPid": pid_of(runtime["globalTid"].to_numpy()[sync]),
                         "end": runtime["end"].to_numpy(np.int64)[sync]})


def api_is(runtime: pd.DataFrame, categories) -> np.ndarray:
    """Mask of the calls whose ``api`` (:func:`metrics.classify_runtime`) is one of ``categories``, on the
    categorical's codes (1 byte a call; ``Series.isin`` on a categorical takes 10 bytes a call)."""
    api = runtime["api"].array
    return np.isin(api.codes, [api.categories.get_loc(c) for c in categories if c in api.categories])


def idle_by_process(capture: pd.DataFrame, idle: dict[tuple[int, int], tuple]) -> dict[int, list[tuple]]:
    """Per process: the GPU idle intervals (starts, ends) of each of its devices inside its capture window
    (``idle``: :func:`idle_by_device`)."""
    out: dict[int, list[tuple]] = {}
    for row in capture.itertuples(index=False):
        key = (int(row.globalPid), int(row.deviceId))
        if key in idle:
            out.setdefault(key[0], []).append(_idle_within(idle[key], int(row.window_start), int(row.window_end)))
    return out


def _during_idle(frame, devices: dict[int, list[tuple]]) -> np.ndarray:
    """Rows of ``frame`` (start, end, globalTid: a frame or a dict of arrays) that overlap the GPU idle of one
    of their process's devices — only those can be causes: [start, end) is not empty and the first idle
    interval ending after start begins before end. Taken a block of rows at a time (bounded temporaries)."""
    start, end = np.asarray(frame["start"], dtype=np.int64), np.asarray(frame["end"], dtype=np.int64)
    keep = np.zeros(start.size, dtype=bool)
    for pid, idx in rows_by_process(np.asarray(frame["globalTid"]), of_tid=True):
        for r in row_blocks(start.size, idx):
            s, e = start[r], end[r]
            for idle_s, idle_e in devices.get(int(pid), []):
                if idle_s.size == 0:
                    continue
                j = np.minimum(np.searchsorted(idle_e, s, side="right"), idle_s.size - 1)
                keep[r] |= (e > s) & (idle_e[j] > s) & (idle_s[j] < e)
    return keep


def host_intervals(runtime: pd.DataFrame, api_names: dict[int, str], os_calls: Callable[..., pd.DataFrame],
                   nvtx: pd.DataFrame, step_ranges: pd.DataFrame, devices: dict[int, list[tuple]],
                   mpi: pd.DataFrame | None = None) -> pd.DataFrame:
    """Labelled host intervals (start, end, globalPid, level, cause) of every process (level: index in LEVELS),
    only those that overlap the GPU idle of their process's devices (``devices``: :func:`idle_by_process`) —
    most launches run while the GPU is busy, so this keeps the attribution small. Sorted by (globalPid,
    start), ties in the order of the levels' parts below (the attribution takes each process's rows by start).

    ``runtime``: CUDA calls (start, end, globalTid, nameId, api in launch/sync_copy/sync_wait/async_copy/alloc,
    NaN for calls of no category, which are skipped: :func:`metrics.classify_runtime`); a caller that hands
    over its only reference lets the whole table go before the OS calls are read. ``os_calls(threads,
    keep)``: the OS runtime calls (start, end, globalTid, name) on those threads (globalTids) that ``keep``
    (a chunk's start, end, globalTid arrays -> row mask) selects — asked only for the threads whose calls can
    be causes (primary and launching threads of processes with GPU idle) and the calls overlapping that
    idle, so the rest are never held; ``nvtx``: NVTX ranges (start, end, globalTid, name); ``step_ranges``: the NVTX step rows (globalTid, cpu_start, cpu_end), may be empty;
    ``mpi``: MPI calls (start, end, globalTid, name) of nsys' MPI trace: blocking calls (the host held by the
    library: Open MPI busy-polls, so no OS wait shows), cause = the call's name.
    """
    launching = (runtime["api"] == "launch").to_numpy()  # on the categorical's codes, not per-row strings
    launches_per_thread = _count_per_thread(runtime["globalTid"].to_numpy(), launching)
    primary = _primary_threads(launches_per_thread, step_ranges)
    launch_tids = set(launches_per_thread.index.tolist())
    cause_threads = np.array(sorted(set(primary.values()) | launch_tids), dtype=np.int64)
    cause_threads = cause_threads[np.isin(pid_of(cause_threads), list(devices))]
    helper_gaps = _launch_gaps_of_other_threads(runtime, launching, primary)
    if len(helper_gaps):
        helper_gaps = helper_gaps[_during_idle(helper_gaps, devices)]
    during = _during_idle(runtime, devices) & runtime["api"].notna().to_numpy()  # classified calls only
    runtime, launching = runtime[during], launching[during]  # the whole table is done with here
    osrt = os_calls(cause_threads, lambda chunk: _during_idle(chunk, devices))
    os_part = _os_part(osrt, runtime, primary, launch_tids)
    waiting_primaries = np.intersect1d(os_part.pop("waiting"), list(primary.values()))
    if len(helper_gaps):  # only where the primary thread waits in the OS during GPU idle (nothing to reassign otherwise)
        helper_gaps = helper_gaps[np.isin(pid_of(helper_gaps["globalTid"].to_numpy()), pid_of(waiting_primaries))]
    del osrt
    rt_pid = pid_of(runtime["globalTid"].to_numpy())
    if len(nvtx):
        nvtx = nvtx[_during_idle(nvtx, devices)]
    base_names = {i: api_base_name(n) for i, n in api_names.items()}  # once per distinct name, not per call
    parts = []
    warming = nvtx["name"].astype(str).str.fullmatch(WARMUP_RANGE).to_numpy() if len(nvtx) else np.zeros(0, bool)
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
                                                         ["kernel launch loading its module"])))
    for rows, label in ((runtime[launching & ~long_launch], "kernel launch"),
                        (helper_gaps, "between launches on another thread")):
        if len(rows):
            pids = pid_of(rows["globalTid"].to_numpy())
            parts.append(_labelled(rows, pids, LAUNCH, _in_range(label, rows["start"].to_numpy(), pids, ranges)))
    if len(os_part["start"]):
        parts.append(os_part)
    return _sorted_concat(parts)


HOST_COLUMNS = {"start": np.int64, "end": np.int64, "globalPid": np.int64, "level": np.int8}


def _sorted_concat(parts: list) -> pd.DataFrame:
    """One frame (start, end, globalPid, level, cause: categorical) of the host-interval ``parts`` (frames or
    dicts of those arrays), sorted by (globalPid, start), ties in part order. Made a column at a time, each
    part's column released once copied (the OS calls' part is most of the rows: never held twice)."""
    if not parts:
        return pd.DataFrame({c: np.empty(0, t) for c, t in HOST_COLUMNS.items()}).assign(cause=pd.Categorical([]))
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


def _os_part(osrt: pd.DataFrame, runtime: pd.DataFrame, primary: dict[int, int], launch_tids: set) -> dict:
    """The OS runtime calls' host intervals as arrays (start, end, globalPid, level, cause: categorical), plus
    ``waiting``: the threads among them that made an OS wait (kept calls, before any is dropped). A call
    made inside a CUDA call of its thread is that call's (dropped); a wait is a cause on the primary thread
    only (level WAIT), any other call on the primary or a launching thread (level OS_ACTIVE). ``osrt``'s
    columns are taken out of it one at a time, each released once its kept rows are copied."""
    if not len(osrt):
        return {"start": np.empty(0, np.int64), "end": np.empty(0, np.int64), "globalPid": np.empty(0, np.int64),
                "level": np.empty(0, np.int8), "cause": pd.Categorical([]), "waiting": np.empty(0, np.int64)}
    tid, names = osrt["globalTid"].to_numpy(), osrt.pop("name").array
    wait = np.asarray(names.categories.str.fullmatch(OS_WAIT), dtype=bool)[names.codes]
    waiting = np.unique(tid[wait])
    is_primary = isin_blocks(tid, list(primary.values()))
    keep = np.where(wait, is_primary, is_primary | isin_blocks(tid, launch_tids)) & ~_inside_cuda_calls(osrt, runtime)
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
    used = np.bincount(values.codes[values.codes >= 0], minlength=len(values.categories)) > 0
    if used.all():
        return values
    new_code = (np.cumsum(used) - 1).astype(values.codes.dtype)
    return pd.Categorical.from_codes(np.where(values.codes >= 0, new_code[values.codes], -1).astype(values.codes.dtype),
                                     values.categories[used])


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
    lookup per process."""
    names = pd.Categorical(ranges["cause"]) if len(ranges) else pd.Categorical([])
    code = np.full(t.size, -1, dtype=np.int64)
    if len(ranges):
        r_pid = pid_of(ranges["globalTid"].to_numpy())
        r_s, r_e, r_code = ranges["start"].to_numpy(), ranges["end"].to_numpy(), names.codes.astype(np.int64)
        for (pid,), rows in group_indices(pids):
            mine = r_pid == pid
            if mine.any():
                at = slice(None) if rows is None else rows
                code[at] = _active_label(r_s[mine], r_e[mine], r_code[mine], t[at])
    labels = [label] + [f"{label} in '{n}'" for n in names.categories]
    return pd.Categorical.from_codes(code + 1, labels)


def _launch_gaps_of_other_threads(runtime: pd.DataFrame, launching: np.ndarray, primary: dict[int, int]) -> pd.DataFrame:
    """The gaps (start, end, globalTid) shorter than SHORT_GAP_NS between consecutive launch calls of the
    launching threads that are not their process's primary thread (PyTorch's autograd threads launching the
    backward): while one runs, the primary thread's OS wait is a wait for that thread's work (the caller keeps
    them only for processes whose primary thread makes OS waits during GPU idle)."""
    cols = ["start", "end", "globalTid"]
    if not primary or not launching.any():
        return pd.DataFrame({c: np.empty(0, np.int64) for c in cols})
    mains = np.array(sorted(primary.values()), dtype=np.int64)
    tid = runtime["globalTid"].to_numpy()
    other, threads = np.empty(tid.size, dtype=bool), set()
    for r in row_blocks(tid.size):  # bounded temporaries: the table is all launches and syncs
        other[r] = launching[r] & np.isin(pid_of(tid[r]), pid_of(mains)) & ~np.isin(tid[r], mains)
        threads.update(np.unique(tid[r][other[r]]).tolist())
    rows = np.flatnonzero(other)
    del other
    starts, ends = runtime["start"].to_numpy(), runtime["end"].to_numpy()
    parts = []
    for (thread,), mine in ([((threads.pop(),), None)] if len(threads) == 1 else group_indices(tid[rows])):
        at = rows if mine is None else rows[mine]
        s, e = starts[at], ends[at]
        if not is_sorted(s):
            order = np.argsort(s, kind="stable")
            s, e = s[order], e[order]
        gap_start, gap_end = e[:-1], s[1:]
        keep = (gap_end > gap_start) & (gap_end - gap_start < SHORT_GAP_NS)
        parts.append({"start": gap_start[keep], "end": gap_end[keep]})
        parts[-1]["globalTid"] = np.full(parts[-1]["start"].size, thread, dtype=np.int64)
    if len(parts) == 1:
        return pd.DataFrame(parts[0], copy=False)
    return pd.DataFrame({c: np.concatenate([p[c] for p in parts]) if parts else np.empty(0, np.int64) for c in cols},
                        copy=False)


def _inside_cuda_calls(osrt: pd.DataFrame, runtime: pd.DataFrame) -> np.ndarray:
    """Mask of the OS calls made inside a CUDA call of their own thread (the call's work, e.g. a launch's
    ioctl): the last call of that thread to start at or before the OS call ends at or after it (a thread's
    CUDA calls do not overlap). One sorted lookup per thread, a block of OS calls at a time."""
    inside = np.zeros(len(osrt), dtype=bool)
    if not len(runtime):
        return inside
    r_start, r_end = runtime["start"].to_numpy(), runtime["end"].to_numpy()
    calls = {}  # per thread: its CUDA calls' starts, sorted, and the furthest end so far
    for (tid,), rows in group_indices(runtime["globalTid"].to_numpy()):
        s, e = (r_start, r_end) if rows is None else (r_start[rows], r_end[rows])
        order = np.argsort(s, kind="stable")
        calls[tid] = (s[order], np.maximum.accumulate(e[order]))
    o_tid, o_start, o_end = (osrt[c].to_numpy() for c in ("globalTid", "start", "end"))
    for r in row_blocks(len(osrt)):
        for (tid,), rows in group_indices(o_tid[r]):
            if tid in calls:
                s, reach = calls[tid]
                at = r if rows is None else r.start + rows
                k = np.searchsorted(s, o_start[at], side="right") - 1
                inside[at] = (k >= 0) & (reach[np.maximum(k, 0)] >= o_end[at])
    return inside


def _count_per_thread(tid: np.ndarray, mask: np.ndarray) -> pd.Series:
    """Rows per globalTid among the ``mask``ed ones, most first (ties in order of first appearance),
    counted a block of rows at a time (no copy of the masked tids)."""
    blocks = [pd.Series(tid[b][mask[b]]).value_counts(sort=False) for b in row_blocks(tid.size)]
    counts = pd.concat(blocks).groupby(level=0, sort=False).sum() if blocks else pd.Series([], dtype=np.int64)
    return counts.sort_values(ascending=False, kind="stable")


def _labelled(rows, pids: np.ndarray, level: int, cause) -> pd.DataFrame:
    """Host intervals of one level (``rows``: start, end, a frame or a dict of arrays); ``cause`` a label per
    row, kept categorical (few distinct labels)."""
    starts = np.asarray(rows["start"], dtype=np.int64)
    return pd.DataFrame({"start": starts, "end": np.asarray(rows["end"], dtype=np.int64), "globalPid": pids,
                         "level": np.full(starts.size, level, np.int8), "cause": pd.Categorical(cause)})


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
    cause, before_launch, after_sync) with the idle ns (step -1: idle outside every step window).

    ``capture``: one window per (globalPid, deviceId) (window_start, window_end ns); ``steps``: step
    windows (globalPid, deviceId, step, window_start, window_end, cpu_start, cpu_end, first_launch ns);
    ``idle``: :func:`idle_by_device`; ``host``: :func:`host_intervals`; ``syncs``: :func:`sync_ends`.
    """
    out = [_device_gaps(*part) for part in _idle_parts(capture, steps, idle, host, syncs)]
    gaps = pd.concat(out, ignore_index=True) if out else pd.DataFrame({c: [] for c in GAP_COLUMNS})
    if len(out) > 1:  # slices of one device share groups
        gaps = gaps.groupby([c for c in GAP_COLUMNS if c != "ns"], as_index=False, sort=False)["ns"].sum()[GAP_COLUMNS]
    return gaps.astype({"ns": np.int64, "step": np.int64})


SEGMENT_COLUMNS = ["globalPid", "deviceId", "start", "end", "cause_kind", "cause", "step"]


def idle_segments(capture: pd.DataFrame, steps: pd.DataFrame, idle: dict[tuple[int, int], tuple],
                  host: pd.DataFrame, syncs: pd.DataFrame, t0: int, t1: int) -> pd.DataFrame:
    """The elementary idle segments :func:`attribute` sums, cut to [t0, t1) (ns): one row per segment
    (globalPid, deviceId, start, end, cause_kind, cause, step; step -1 outside every step window), by
    device then start. Arguments as :func:`attribute`; the attributed idle of [t0, t1) is their sum."""
    out = []
    for key, idle_s, idle_e, mine, near, ends in _idle_parts(capture, steps, idle, host, syncs, (t0, t1)):
        seg = _segments(idle_s, idle_e, mine, near, ends)
        start, end = np.maximum(seg["start"], t0), np.minimum(seg["end"], t1)
        keep = end > start
        out.append(pd.DataFrame({
            "globalPid": key[0], "deviceId": key[1], "start": start[keep], "end": end[keep],
            "cause_kind": np.array(LEVELS, dtype=object)[seg["level"][keep]],
            "cause": _cause_names(seg["cause"][keep], seg["causes"]), "step": seg["step"][keep]}))
    if not out:
        return pd.DataFrame({c: [] for c in SEGMENT_COLUMNS}).astype(
            {c: np.int64 for c in ("globalPid", "deviceId", "start", "end", "step")})
    return pd.concat(out, ignore_index=True)[SEGMENT_COLUMNS]


def _idle_parts(capture: pd.DataFrame, steps: pd.DataFrame, idle: dict[tuple[int, int], tuple], host: pd.DataFrame,
                syncs: pd.DataFrame, window: tuple[int, int] | None = None):
    """Per device of ``capture``, a slice of IDLE_CHUNK idle intervals at a time (bounded temporaries): (key,
    idle starts, idle ends, the device's steps by window_start, the host intervals that can reach those
    intervals, the process's sync ends sorted). ``window`` (t0, t1 ns): only the idle intervals overlapping it."""
    host_groups = dict(group_indices(host["globalPid"].to_numpy())) if len(host) else {}
    sync_groups = dict(group_indices(syncs["globalPid"].to_numpy())) if len(syncs) else {}
    step_groups = ({k: steps.iloc[i] for k, i in steps.groupby(["globalPid", "deviceId"]).indices.items()}
                   if len(steps) else {})
    by_process: dict[int, tuple] = {}  # per process, made once: host calls sorted by start, their reach, sync ends

    def of_process(pid: int) -> tuple:
        if pid not in by_process:
            idx = host_groups.get((pid,), False)
            h = host.iloc[:0] if idx is False else host if idx is None else host.iloc[idx]
            if not is_sorted(h["start"].to_numpy()):  # host_intervals' rows are: no copy then
                h = h.iloc[np.argsort(h["start"].to_numpy(), kind="stable")]  # by start: each slice's calls are a range
            he = h["end"].to_numpy()
            reach = np.maximum.accumulate(he) if he.size else he  # furthest end of the calls started so far
            idx = sync_groups.get((pid,), False)
            ends = (np.empty(0, np.int64) if idx is False else
                    np.sort(syncs["end"].to_numpy() if idx is None else syncs["end"].to_numpy()[idx], kind="stable"))
            by_process[pid] = (h, h["start"].to_numpy(), reach, ends)
        return by_process[pid]

    no_steps = steps.iloc[:0]
    for row in capture.itertuples(index=False):
        key = (int(row.globalPid), int(row.deviceId))
        idle_s, idle_e = _idle_within(idle[key], int(row.window_start), int(row.window_end))
        if window is not None:
            i, j = int(np.searchsorted(idle_e, window[0], side="right")), int(np.searchsorted(idle_s, window[1]))
            idle_s, idle_e = idle_s[i:j], idle_e[i:j]
        if idle_s.size == 0:
            continue
        mine = step_groups.get(key, no_steps).sort_values("window_start")
        h, hs, reach, ends = of_process(key[0])
        for lo in range(0, idle_s.size, IDLE_CHUNK):
            a, b = idle_s[lo:lo + IDLE_CHUNK], idle_e[lo:lo + IDLE_CHUNK]
            first, last = int(np.searchsorted(reach, a[0], side="right")), int(np.searchsorted(hs, b[-1], side="left"))
            near = h.iloc[first:max(first, last)]
            near = near[near["end"].to_numpy() > a[0]]
            yield key, a, b, mine, near, ends


def interval_causes(key: tuple[int, int], idle_s: np.ndarray, idle_e: np.ndarray, host: pd.DataFrame,
                    syncs: pd.DataFrame) -> np.ndarray:
    """The cause kind (LEVELS) holding most of each of one device's idle intervals (sorted, disjoint; ns),
    by the same precedence as :func:`attribute` (``host``: :func:`host_intervals`; ``syncs``: :func:`sync_ends`):
    each interval is its own window. For the timeline of one step."""
    out = np.full(idle_s.size, LEVELS[-1], dtype=object)
    if idle_s.size == 0:
        return out
    mine = host[host["globalPid"].to_numpy() == key[0]] if len(host) else host
    mine = mine.iloc[np.argsort(mine["start"].to_numpy(), kind="stable")] if len(mine) else mine
    ends = np.sort(syncs["end"].to_numpy(np.int64)[syncs["globalPid"].to_numpy() == key[0]]) if len(syncs) else \
        np.empty(0, np.int64)
    windows = pd.DataFrame({"step": np.arange(idle_s.size), "window_start": idle_s, "window_end": idle_e,
                            "cpu_start": idle_s, "first_launch": idle_s})
    rows = _device_gaps(key, idle_s, idle_e, windows, mine, ends)
    rows = rows[rows["step"] >= 0].groupby(["step", "cause_kind"], as_index=False)["ns"].sum()
    top = rows.sort_values(["step", "ns"], kind="stable").drop_duplicates("step", keep="last")
    out[top["step"].to_numpy()] = top["cause_kind"].to_numpy()
    return out


def idle_gap_metrics(windows: pd.DataFrame, idle: dict[tuple[int, int], tuple]) -> pd.DataFrame:
    """Per window row (globalPid, deviceId, window_start, window_end; disjoint per device): idle_gap_count
    (GPU idle intervals starting in it) and idle_short_gap_ns (their idle ns in gaps shorter than
    SHORT_GAP_NS: the µs-scale gaps between launches of a launch-bound loop); ``idle``: :func:`idle_by_device`."""
    count = np.zeros(len(windows), np.int64)
    short = np.zeros(len(windows), np.int64)
    for (pid, dev), idx in windows.groupby(["globalPid", "deviceId"]).indices.items():
        ws, we = windows["window_start"].to_numpy(np.int64)[idx], windows["window_end"].to_numpy(np.int64)[idx]
        idle_s, idle_e = _idle_within(idle[(int(pid), int(dev))], int(ws.min()), int(we.max()))
        length = idle_e - idle_s
        short_cum = np.concatenate(([0], np.cumsum(np.where(length < SHORT_GAP_NS, length, 0))))
        first, end = np.searchsorted(idle_s, ws, side="left"), np.searchsorted(idle_s, we, side="left")
        count[idx] = end - first  # idle intervals starting in [window_start, window_end): idle_s is sorted
        short[idx] = short_cum[end] - short_cum[first]
    return pd.DataFrame({"idle_gap_count": count, "idle_short_gap_ns": short}, index=windows.index)


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


def _window_of(t: np.ndarray, windows: pd.DataFrame) -> np.ndarray:
    """Row position in ``windows`` (sorted, disjoint [window_start, window_end)) holding each time, or -1."""
    ws, we = windows["window_start"].to_numpy(np.int64), windows["window_end"].to_numpy(np.int64)
    k = np.searchsorted(ws, t, side="right") - 1
    inside = (k >= 0) & (t < we[np.maximum(k, 0)])
    return np.where(inside, k, -1)


def _active_label(starts: np.ndarray, ends: np.ndarray, labels: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per time t: the label of an interval holding t — the latest-starting one when it still holds t,
    else the one reaching furthest among those started before — or -1."""
    if starts.size == 0:
        return np.full(t.shape, -1, dtype=np.int64)
    if is_sorted(starts):
        s, e, lab = starts, ends, labels
    else:
        order = np.argsort(starts, kind="stable")
        s, e, lab = starts[order], ends[order], labels[order]
    reach = np.maximum.accumulate(e)
    furthest = _running_argmax(e)
    k = np.searchsorted(s, t, side="right") - 1
    kk = np.maximum(k, 0)
    latest = (k >= 0) & (e[kk] > t)
    outer = (k >= 0) & ~latest & (reach[kk] > t)
    return np.where(latest, lab[kk], np.where(outer, lab[furthest[kk]], -1))


def _running_argmax(x: np.ndarray) -> np.ndarray:
    """Index of the running maximum of ``x`` (first index of each new maximum)."""
    idx = np.arange(x.size)
    is_new = np.concatenate(([True], x[1:] > np.maximum.accumulate(x)[:-1]))
    return np.maximum.accumulate(np.where(is_new, idx, 0))


def _segments(idle_s: np.ndarray, idle_e: np.ndarray, steps: pd.DataFrame, host: pd.DataFrame,
              sync_end: np.ndarray) -> dict:
    """The elementary segments (ns) between all boundaries of one device's idle intervals, each given its
    cause: arrays start, end, level (index in LEVELS), cause (code into ``causes``, -1: untraced), step (-1:
    outside every step window), before_launch, after_sync, short_gap; and ``causes``. Only host intervals
    that overlap this device's idle take part."""
    hs, he = host["start"].to_numpy(np.int64), host["end"].to_numpy(np.int64)
    overlaps_idle = Coverage(idle_s, idle_e, disjoint=True).within(hs, he) > 0
    if not overlaps_idle.all():  # the process's other devices' idle
        host, hs, he = host[overlaps_idle], hs[overlaps_idle], he[overlaps_idle]
    lo, hi = idle_s[0], idle_e[-1]
    first_sync = np.full(idle_s.shape, np.iinfo(np.int64).max)  # earliest sync return inside each idle interval
    if sync_end.size:
        j = np.searchsorted(sync_end, idle_s, side="left")
        inside = (j < sync_end.size) & (sync_end[np.minimum(j, sync_end.size - 1)] < idle_e)
        first_sync[inside] = sync_end[j[inside]]
    points = [idle_s, idle_e, np.clip(hs, lo, hi), np.clip(he, lo, hi), np.clip(first_sync, lo, hi)]
    if len(steps):
        points += [steps["window_start"].to_numpy(np.int64), steps["first_launch"].to_numpy(np.int64)]
    p = unique_sorted(np.concatenate(points))
    seg_s, seg_e = p[:-1], p[1:]
    starts_here = np.zeros(seg_s.size, dtype=np.int64)  # idle starts are among the points: mark them,
    starts_here[np.searchsorted(p, idle_s)] = 1          # and each segment's idle interval is a running count
    k = np.cumsum(starts_here) - 1
    del starts_here
    idle = (k >= 0) & (seg_s < idle_e[np.maximum(k, 0)])
    seg_s, seg_e, after = seg_s[idle], seg_e[idle], seg_s[idle] >= first_sync[k[idle]]
    short = (idle_e - idle_s)[k[idle]] < SHORT_GAP_NS
    if len(host):
        cause_codes, causes = host["cause"].cat.codes.to_numpy(np.int64), host["cause"].cat.categories
    else:
        cause_codes, causes = np.empty(0, np.int64), pd.Index([])
    level = np.full(seg_s.shape, len(LEVELS) - 1, dtype=np.int8)
    cause = np.full(seg_s.shape, -1, dtype=np.int64)
    host_level = host["level"].to_numpy()
    for lv in range(len(LEVELS) - 2, -1, -1):  # lowest precedence first, so higher levels overwrite
        m = host_level == lv
        if not m.any():
            continue
        lab = _active_label(hs[m], he[m], np.asarray(cause_codes)[m], seg_s)
        hit = lab >= 0
        level[hit], cause[hit] = lv, lab[hit]
    step = np.full(seg_s.shape, -1, dtype=np.int64)
    before = np.zeros(seg_s.shape, dtype=bool)
    if len(steps):
        w = _window_of(seg_s, steps)
        hit = w >= 0
        step[hit] = steps["step"].to_numpy()[w[hit]]
        cpu_s, first = steps["cpu_start"].to_numpy()[w[hit]], steps["first_launch"].to_numpy()[w[hit]]
        before[hit] = (seg_s[hit] >= cpu_s) & (seg_s[hit] < first)
    return {"start": seg_s, "end": seg_e, "level": level, "cause": cause, "step": step, "before_launch": before,
            "after_sync": after, "short_gap": short, "causes": causes}


def _cause_names(codes: np.ndarray, causes: pd.Index) -> np.ndarray:
    """Cause label per code into ``causes`` (-1: UNTRACED)."""
    names = np.asarray(causes, dtype=object)
    return np.where(codes >= 0, names[np.maximum(codes, 0)] if names.size else "", UNTRACED)


def _device_gaps(key: tuple[int, int], idle_s: np.ndarray, idle_e: np.ndarray, steps: pd.DataFrame,
                 host: pd.DataFrame, sync_end: np.ndarray) -> pd.DataFrame:
    """Attributed idle of one device: its :func:`_segments` summed per (step, cause_kind, cause, before_launch,
    after_sync, short_gap)."""
    seg = _segments(idle_s, idle_e, steps, host, sync_end)
    causes = seg["causes"]
    # one integer per (step, level, cause, before_launch, after_sync, short_gap), in that sort order
    n_causes = len(causes) + 1
    group = ((((seg["step"] + 1) * len(LEVELS) + seg["level"]) * n_causes + (seg["cause"] + 1)) * 8
             + seg["before_launch"].astype(np.int64) * 4 + seg["after_sync"].astype(np.int64) * 2
             + seg["short_gap"].astype(np.int64))
    which, groups = pd.factorize(group, sort=True)
    # float sums of integer ns are exact: every partial sum is at most the slice's idle time (< 2^53 ns)
    ns = np.bincount(which, weights=seg["end"] - seg["start"], minlength=len(groups)).astype(np.int64)
    rest, flags = np.divmod(np.asarray(groups, dtype=np.int64), 8)
    rest, cause_code = np.divmod(rest, n_causes)
    step_of, level_of = np.divmod(rest, len(LEVELS))
    return pd.DataFrame({"globalPid": key[0], "deviceId": key[1], "step": step_of - 1,
                         "cause_kind": np.array(LEVELS, dtype=object)[level_of],
                         "cause": _cause_names(cause_code - 1, causes),
                         "before_launch": flags >= 4, "after_sync": (flags & 2) > 0, "short_gap": (flags & 1) > 0,
                         "ns": ns})[GAP_COLUMNS]


def first_launch_times(steps: pd.DataFrame, runtime: pd.DataFrame) -> np.ndarray:
    """Per step row: start (ns) of the first call of its process that puts work on the GPU (a launch or a
    copy) inside the step's CPU range [cpu_start, cpu_end), or cpu_end when there is none."""
    out = steps["cpu_end"].to_numpy(np.int64).copy()
    puts_work = api_is(runtime, ["launch", "sync_copy", "async_copy"])
    if not puts_work.any() or steps.empty:
        return out
    starts = runtime["start"].to_numpy()
    calls = dict(rows_by_process(runtime["globalTid"].to_numpy(), of_tid=True))  # every call: no copy of the tids
    for (pid,), idx in group_indices(steps["globalPid"].to_numpy()):
        if pid not in calls:
            continue
        mine = calls[pid]
        t = starts[puts_work] if mine is None else starts[mine[puts_work[mine]]]
        if t.size == 0:
            continue
        t.sort(kind="stable")  # its own copy: sorted in place
        rows = np.arange(len(steps)) if idx is None else idx
        a = steps["cpu_start"].to_numpy(np.int64)[rows]
        k = np.minimum(np.searchsorted(t, a, side="left"), t.size - 1)
        found = (t[k] >= a) & (t[k] < out[rows])
        out[rows] = np.where(found, t[k], out[rows])
    return out


SUMMARY_COLUMNS = ["cause_kind", "cause", "ns", "before_launch_ns", "after_sync_ns", "short_gap_ns", "short_after_sync_ns"]


DEVICE = ["globalPid", "deviceId"]
CAUSE = [*DEVICE, "cause_kind", "cause"]


def summarize(gaps: pd.DataFrame, steady_steps: dict[tuple[int, int], list[int]]) -> dict[tuple[int, int], pd.DataFrame]:
    """Per device: idle ns per (cause_kind, cause) — the median per steady step when the device has
    steps (``steady_steps`` lists them), else the whole capture's — sorted by ns, largest first; plus
    ``before_launch_ns``, ``after_sync_ns``, ``short_gap_ns`` and ``short_after_sync_ns`` (short gaps after a
    sync), the same statistic restricted to those tags. Every device is grouped in one pass, then split."""
    if gaps.empty:
        return {}
    ns = gaps["ns"].to_numpy()
    tagged = gaps.assign(before_launch_ns=np.where(gaps["before_launch"], ns, 0),
                         after_sync_ns=np.where(gaps["after_sync"], ns, 0), short_gap_ns=np.where(gaps["short_gap"], ns, 0),
                         short_after_sync_ns=np.where(gaps["short_gap"] & gaps["after_sync"], ns, 0))
    chosen = pd.DataFrame([(p, d, s) for (p, d), steps in steady_steps.items() for s in steps],
                          columns=[*DEVICE, "step"], dtype=np.int64)
    has_steps = set(zip(chosen["globalPid"].tolist(), chosen["deviceId"].tolist()))  # devices with chosen steps
    device = pd.MultiIndex.from_frame(gaps[DEVICE])
    stepped = device.isin(pd.MultiIndex.from_frame(chosen[DEVICE]))
    in_steps = pd.MultiIndex.from_frame(gaps[[*DEVICE, "step"]]).isin(pd.MultiIndex.from_frame(chosen))
    parts = {True: _step_medians(tagged[in_steps], chosen), False: _capture_sums(tagged[~stepped])}
    rows_of = {}
    for key, part in parts.items():
        part = part[part["ns"] > 0].sort_values([*DEVICE, "ns"], ascending=[True, True, False], kind="stable")
        parts[key] = part.reset_index(drop=True)[SUMMARY_COLUMNS]
        rows_of[key] = part.groupby(DEVICE, sort=False).indices if len(part) else {}
    out = {}
    for pid, dev in sorted(set(device.tolist())):
        key = (int(pid), int(dev))
        part, rows = parts[key in has_steps], rows_of[key in has_steps]
        out[key] = part.iloc[rows[(pid, dev)]].reset_index(drop=True) if (pid, dev) in rows else part.iloc[:0]
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
    sums = rows.groupby([*CAUSE, "step"])[values].sum().reset_index()  # sorted by cause, then step
    group = sums.groupby(CAUSE, sort=False).ngroup().to_numpy()
    keys = sums.drop_duplicates(CAUSE)[CAUSE].reset_index(drop=True)
    steps_of = chosen.groupby(DEVICE).size()
    n = steps_of.reindex(pd.MultiIndex.from_frame(keys[DEVICE])).to_numpy(np.int64)
    return keys.assign(**{v: _median_padded_with_zeros(group, sums[v].to_numpy(), n) for v in values})


def _median_padded_with_zeros(group: np.ndarray, values: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Per group 0..G-1: the median of its ``values`` (>= 0) padded with zeros to n[g] values (n[g] at least
    its count): the zeros sort first, so the k-th smallest is 0 below the padding, else the group's own."""
    order = np.lexsort((values, group))
    ordered = values[order]
    count = np.bincount(group, minlength=n.size)
    first = np.concatenate(([0], np.cumsum(count)[:-1]))
    zeros = n - count

    def smallest(k: np.ndarray) -> np.ndarray:
        j = k - zeros
        return np.where(j >= 0, ordered[first + np.maximum(j, 0)], 0)
    return (smallest((n - 1) // 2) + smallest(n // 2)) / 2
