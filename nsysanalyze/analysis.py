"""The pipeline in one object: Trace → steps → metrics → findings (the CLI is a thin layer over it).

    >>> import nsysanalyze
    >>> a = nsysanalyze.open("run.sqlite")
    >>> a.summary()      # one row per (process, device): whole-capture metrics + per-step medians
    >>> a.steps()        # one row per (step, device)
    >>> a.findings()     # ranked list of Finding
    >>> a.ledger()       # every window's ns by busy class and idle cause

The report dict (the JSON contract) is the renderers' business: ``nsysanalyze.render.contract.report(a)``.
"""
from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property, partial

import numpy as np
import pandas as pd

from . import attribution as A
from . import blocks as B
from . import framework as F
from . import kernels as K
from . import ledger as L
from . import metrics as M
from . import segmented as SEG
from . import steps as S
from . import threads as T
from .errors import InputError
from .intervals import group_codes, median_per_group
from .memory import release_freed_memory, tune_allocator
from .rules import Diagnosis, Evidence, Finding, diagnose_devices, order
from .trace import Trace
from .trace.schema import NVTX_DOMAIN_CREATE, NVTX_DOMAIN_DESTROY
from .trace.tables import pid_of

# OS runtime calls that start a process (DataLoader workers, started again at each epoch without persistent_workers)
PROCESS_START = r"(__)?(fork|vfork|clone3?|posix_spawnp?|exec[lv]\w*)"
# python nvtx >= 0.2.12 (2024) is not recorded by nsys 2023.4; a recorder older than this predates that package
PYTHON_NVTX_FIRST_AFFECTED = "2023.4"
# The kernel columns the pass reads, and their bytes a row as held (two int64 times, an int64 process id, five
# ids as int32)
KERNEL_COLUMNS = ["start", "end", "deviceId", "globalPid", "nameId", "demangledId", "streamId", "correlationId"]
KERNEL_ROW_BYTES = 44
# The runtime calls' bytes a row as held (two int64 times, an int64 thread id, correlationId and nameId as int32)
RUNTIME_ROW_BYTES = 32
# The bytes the kernels and the runtime calls may take held whole, together (issue 20 item 2): above it, the larger
# table is never held whole, then the other if it still does not fit; every stage walks such a table a block of
# blocks.ROWS rowids at a time, read from the export at each walk (:func:`tables_in_blocks`).
# NSYSANALYZE_TABLE_BUDGET_MB sets it. Three quarters of the 1 GiB peak that issue 20 targets: the rest of the pass
# held 123-282 MiB beside the tables at 10M activities (bench/RESULTS.md, session 31: OSRT 10M 820 MiB peak for
# 697 MiB of tables, DDP 10M 907 MiB for 625 MiB). The bench's 10M exports hold both tables whole.
TABLE_BUDGET_BYTES = 768 << 20


@dataclass
class TraceInfo:
    """Header facts of one export."""

    path: str
    nsys_version: str | None           # the exporter's (META_DATA_EXPORT)
    recorder_nsys_version: str | None  # the recorder's when the capture names it (trace.schema.recorder_version)
    schema_version: str | None
    session_start_utc_ns: int | None
    processes: list[dict] = field(default_factory=list)  # globalPid, pid, name
    devices: list[dict] = field(default_factory=list)    # globalPid, deviceId, name
    step_family: str | None = None
    step_source: str | None = None  # 'nvtx', 'inferred' (from the kernel sequence) or None
    framework: str = "unknown"      # framework.Framework.name
    framework_clues: list[str] = field(default_factory=list)
    mpi: bool = False


class Analysis:
    """Analysis of one nsys SQLite export; every result is computed once, on first use.

    ``keep_attribution_inputs`` (set before the first result): keep the idle intervals and host intervals the
    attribution used, for :meth:`idle_segments` and :meth:`attribution_host` (the timeline export)."""

    keep_attribution_inputs = False

    def __init__(self, path: str | os.PathLike, step_range: str | None = None):
        self.trace = Trace(path)
        self.step_range = step_range
        self._kernel_columns = list(KERNEL_COLUMNS)  # those a later stage still needs
        self._fetched_calls: list[pd.DataFrame] | None = None  # calls fetched by correlationId (see _project)

    def close(self) -> None:
        self.trace.close()

    def __enter__(self) -> "Analysis":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- stage 1: steps -------------------------------------------------------------
    # Only what the pipeline uses is loaded: kernels with the columns the metrics, the step projection and the
    # launches' waits (correlationId) and the per-kernel table (demangledId) need, each
    # dropped once used; runtime calls by API name (see _runtime_calls and _project).
    @cached_property
    def _kernels(self) -> pd.DataFrame:
        """The kernels held whole (only while their bytes are within the budget: see _kernel_blocks)."""
        return self.trace.gpu_table("kernels", self._kernel_columns)

    @cached_property
    def _kernel_rowids(self) -> tuple[int, int] | None:
        return self.trace.kernel_rowids()

    @property
    def _kernel_blocks(self) -> B.Blocks:
        """The kernels, with the columns a later stage still needs, as blocks (:meth:`_blocks`)."""
        return self._blocks("kernels", lambda: self._kernels,
                            partial(self.trace.kernel_rows, list(self._kernel_columns)), self._kernel_rowids)

    @cached_property
    def _tables_read_in_blocks(self) -> set[str]:
        """Which of "kernels" and "runtime" are read from the export a block at a time, never whole
        (:func:`tables_in_blocks`, over the bytes each takes held whole: every kernel row, the runtime calls of
        _runtime_name_ids; their share of the table is sampled only when the whole table would not fit)."""
        def span(rowids):
            return 0 if rowids is None else rowids[1] - rowids[0]
        held = {"kernels": span(self._kernel_rowids) * KERNEL_ROW_BYTES,
                "runtime": span(self._runtime_rowids) * RUNTIME_ROW_BYTES}
        if not tables_in_blocks(held):
            return set()
        held["runtime"] = round(held["runtime"] * self.trace.runtime_named_share(self._runtime_name_ids,
                                                                                 self._runtime_rowids))
        return tables_in_blocks(held)

    def _blocks(self, table: str, held: Callable[[], pd.DataFrame], read: Callable[[tuple[int, int]], pd.DataFrame],
                rowids: tuple[int, int] | None) -> B.Blocks:
        """A table as blocks (nsysanalyze.blocks): ``held()``, the table held whole, as one block, or, when
        _tables_read_in_blocks names it, blocks of ``rowids`` read from the export by ``read`` at each walk."""
        return B.ReadBlocks(read, rowids) if table in self._tables_read_in_blocks else [held()]

    def _drop_kernel_columns(self, columns: list[str]) -> None:
        """Kernel columns no later stage needs: released from the table held whole, or no longer read."""
        self._kernel_columns = [c for c in self._kernel_columns if c not in columns]
        if "_kernels" in self.__dict__:
            self.__dict__["_kernels"] = self.__dict__["_kernels"].drop(columns=columns, errors="ignore")

    @cached_property
    def _memcpys(self) -> pd.DataFrame:
        return self.trace.gpu_table("memcpys")

    @cached_property
    def _memsets(self) -> pd.DataFrame:
        return self.trace.gpu_table("memsets", ["start", "end", "deviceId", "globalPid", "correlationId"])

    @property
    def _gpu_parts(self) -> B.Chained:
        """GPU activity frames (the kernels' blocks, memcpys, memsets): used side by side, never concatenated."""
        return B.Chained(self._kernel_blocks, [self._memcpys], [self._memsets])

    @cached_property
    def _step_candidates(self) -> list[str]:
        """NVTX families that may be the step range, best first (none when --step-range is given)."""
        return [] if self.step_range is not None else S.step_family_candidates(self.trace.nvtx)

    @cached_property
    def _projects_steps(self) -> bool:
        return self.step_range is not None or bool(self._step_candidates)

    @cached_property
    def _step_choice(self) -> S.StepChoice:
        """The steps (steps.choose_steps), once the tables are loaded (side by side, see _load_tables)."""
        self._load_tables()
        return S.choose_steps(self.trace.nvtx, self.step_range, self._step_candidates, self._project,
                              lambda: self._kernel_blocks)

    @property
    def _step_ranges(self) -> tuple[pd.DataFrame, str | None]:
        """NVTX step rows (empty for inferred steps) and the steps' label."""
        return self._step_choice.ranges, self._step_choice.label

    @cached_property
    def _api_names(self) -> dict[int, str]:
        return self.trace.api_names()

    @cached_property
    def _runtime_name_ids(self) -> set[int]:
        """The runtime calls read, by API name (selected in SQL): those the metrics classify (launches, sync
        copies, sync waits, allocations) and, when steps are projected, the other calls that can launch GPU
        work (async copies, memsets, ...)."""
        ids = set(M.api_categories(self._api_names))
        if self._projects_steps:
            ids |= {i for i, n in self._api_names.items() if S.LAUNCHES_GPU_WORK.match(n)}
        return ids

    @cached_property
    def _runtime_calls(self) -> pd.DataFrame:
        """The runtime calls of _runtime_name_ids held whole, in one scan (only while within the budget: see
        _runtime_blocks)."""
        return self.trace.runtime_named(self._runtime_name_ids)

    @cached_property
    def _runtime_rowids(self) -> tuple[int, int] | None:
        return self.trace.runtime_rowids()

    @property
    def _runtime_blocks(self) -> B.Blocks:
        """The runtime calls (start, end, globalTid, correlationId, nameId) as blocks (:meth:`_blocks`)."""
        return self._blocks("runtime", lambda: self._runtime_calls,
                            partial(self.trace.runtime_named, self._runtime_name_ids), self._runtime_rowids)

    @property
    def _projection_runtime(self) -> B.Chained:
        """Runtime frames steps are projected with: the loaded calls (and, once _project found GPU work no
        loaded call launched, those activities' calls by correlationId)."""
        return B.Chained(self._runtime_blocks, self._fetched_calls or [])

    def _project(self, ranges: pd.DataFrame) -> pd.DataFrame:
        """Step windows of NVTX step rows (steps.project_steps) from one join of activities to their calls.
        Calls were loaded by API name; should an activity have no loaded call, its call is fetched by
        correlationId — so no launching call is missed whatever its name — and the steps projected again."""
        if ranges.empty:
            return S.project_steps(ranges, [], [])
        windows, missing = S.project_steps_checked(ranges, self._projection_runtime, self._gpu_parts)
        if len(missing) and self._fetched_calls is None:
            loaded = set(M.api_categories(self._api_names))
            loaded |= {i for i, n in self._api_names.items() if S.LAUNCHES_GPU_WORK.match(n)}
            extra = self.trace.runtime_by_correlation(missing["correlationId"].to_numpy(), loaded)
            key = pd.MultiIndex.from_arrays([pid_of(extra["globalTid"]), extra["correlationId"].to_numpy()])
            self._fetched_calls = [extra[key.isin(pd.MultiIndex.from_frame(missing))].reset_index(drop=True)]
            if len(self._fetched_calls[0]):  # fetched once, even when empty
                windows = S.project_steps(ranges, self._projection_runtime, self._gpu_parts)
        return windows

    def _load_tables(self) -> None:
        """Read the tables the pipeline uses side by side, threads.THREADS at a time (SQLite scans and the page
        decoder's numpy release the GIL; ``diagnose --jobs`` lowers THREADS where each job has one core)."""
        tune_allocator()  # from here on, large arrays are unmapped when freed, every thread on one arena
        self._step_candidates, self._api_names  # noqa: B018 (small: read first, in this thread)
        in_blocks = self._tables_read_in_blocks
        names = (["_memcpys", "_memsets"] + ([] if "runtime" in in_blocks else ["_runtime_calls"])
                 + ([] if "kernels" in in_blocks else ["_kernels"]))
        names = [n for n in names if n not in self.__dict__]
        if len(names) < 2:
            return
        with ThreadPoolExecutor(T.THREADS) as pool:
            futures = {n: pool.submit(getattr(type(self), n).func, self) for n in names}
        for n, f in futures.items():
            self.__dict__.setdefault(n, f.result())
        release_freed_memory()  # the readers' chunk buffers, kept by the heap

    @cached_property
    def _step_windows(self) -> pd.DataFrame:
        return self._step_choice.windows

    @cached_property
    def _capture_windows(self) -> pd.DataFrame:
        """One window per (process, device) with GPU work: first activity start to last activity end."""
        self._load_tables()
        return S.capture_windows(self._gpu_parts)

    # ---- stage 2: metrics -----------------------------------------------------------
    WINDOW_KEYS = ["globalPid", "deviceId", "window_start", "window_end", "globalTid", "cpu_start", "cpu_end"]

    @cached_property
    def _window_metric_columns(self) -> pd.DataFrame:
        """Metric columns of every step window, then every capture window, as ``metrics.window_metrics``
        computes them, in one pass over the trace's rows (a window's metrics depend on that window only),
        plus the idle-gap metrics; the idle-gap attribution (``_gaps``) is made in the same pass.

        CPU metrics count the calls of every thread of the window's process (PyTorch launches the
        backward pass from autograd threads). The GPU side goes first (per-kernel table, GPU metrics,
        busy unions) so the kernels are released before the host side (CPU metrics, host intervals,
        attribution) adds its arrays; each loaded table is released once its last use is done. The OS
        runtime calls are scanned once: the attribution's candidate causes and every munmap call (the munmap
        metrics, measured against the GPU idle intervals) come from the same read.
        """
        steps, capture = self._step_windows, self._capture_windows
        capture = capture.assign(globalTid=-1, cpu_start=capture["window_start"], cpu_end=capture["window_end"])
        parts = [w[self.WINDOW_KEYS].assign(globalTid=-1) for w in (steps, capture) if len(w)]
        windows = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=self.WINDOW_KEYS)
        if windows.empty:
            self.__dict__["_gaps"] = pd.DataFrame({c: [] for c in A.GAP_COLUMNS})
            self.__dict__["_busy_classes"] = pd.DataFrame({c: [] for c in L.BUSY_COLUMNS})
            self.__dict__["_kernel_table"] = self._aggregate_kernels(steps)
            return windows
        windows = windows.astype(np.int64)
        t = self.trace
        self._htod_on_kernel_streams, self._nccl_streams  # noqa: B018 (the kernels' streams: then they are dropped)
        self._launch_medians  # noqa: B018 (the runtime calls are dropped below)
        waits = M.launch_waits(windows, self._kernel_blocks, self._runtime_blocks)
        # streams and correlationIds are done with (the steps are projected, the launches joined)
        self._drop_kernel_columns(["streamId", "correlationId"])
        runtime = self._classified_runtime()
        self.__dict__.pop("_runtime_calls", None)
        self._fetched_calls = None
        release_freed_memory()  # each stage's temporaries are handed back before the next one's peak
        self.__dict__["_kernel_table"] = self._aggregate_kernels(steps)
        self._drop_kernel_columns(["demangledId"])
        gpu = M.gpu_metrics(windows, self._kernel_blocks, self._memcpys, self._memsets, t.nccl_kernel_name_ids,
                            self._nccl_kinds)
        self._drop_kernel_columns(["nameId"])
        release_freed_memory()
        busy = M.busy_coverage(self._kernel_blocks, self._memcpys, self._memsets)
        self.__dict__.pop("_kernels", None)
        self.__dict__.pop("_memsets", None)
        release_freed_memory()
        cpu = M.cpu_metrics(windows, B.as_blocks(runtime))
        idle = A.idle_by_device([steps, capture], busy)
        del busy  # the unions are done with: the attribution works on the idle intervals
        steps_at = steps.assign(first_launch=A.first_launch_times(steps, runtime)) if len(steps) else steps
        syncs = A.sync_ends(runtime)
        handed_over = [runtime]
        del runtime  # the host intervals hold the runtime calls' last reference: released before the OS calls are read
        devices = A.idle_by_process(capture, idle)
        sources = A.host_sources(handed_over.pop(), self._api_names, t.nvtx, self._step_ranges[0], devices, t.mpi,
                                 os_calls_captured=t.schema.has("OSRT_API"))
        # os_calls(rowids): one scan of the OS calls of those rowids (None: all), every munmap call and the kept ones
        os_calls = partial(t.osrt_and_named, ("munmap",), sources.cause_threads, sources.keep, sources.keep_time)
        if self.keep_attribution_inputs:  # the timeline export weighs the host intervals of its window
            self.__dict__["_gaps"], munmap, host = SEG.attribute_in_one_pass(capture, steps_at, idle, sources, syncs,
                                                                             os_calls, windows)
            self.__dict__["_attribution_inputs"] = (capture, steps_at, idle, host, syncs)
            del host
        else:  # the OS calls read and attributed a block at a time (nsysanalyze.segmented)
            self.__dict__["_gaps"], munmap = SEG.attribute_in_segments(capture, steps_at, idle, sources, syncs,
                                                                       os_calls, t.osrt_rowids(), windows)
        del sources, os_calls
        cpu = pd.concat([cpu, waits, munmap], axis=1)
        gaps = pd.concat(A.idle_gap_metrics([w.reset_index(drop=True) for w in (steps, capture) if len(w)], idle),
                         ignore_index=True)
        del idle
        self.__dict__["_busy_classes"] = gpu[L.BUSY_COLUMNS]  # the ledger's busy rows (not step/summary columns)
        return pd.concat([gpu.drop(columns=L.BUSY_COLUMNS), cpu, gaps], axis=1)

    def _classified_runtime(self) -> pd.DataFrame | B.Blocks:
        """The runtime calls without correlationId, classified (metrics.classify_runtime): the frame held whole, or
        blocks classified as each is read."""
        def classify(calls: pd.DataFrame) -> pd.DataFrame:
            return M.classify_runtime(calls.drop(columns="correlationId"), self._api_names)
        return B.Mapped(self._runtime_blocks, classify) if "runtime" in self._tables_read_in_blocks else classify(self._runtime_calls)

    def _aggregate_kernels(self, steps: pd.DataFrame) -> pd.DataFrame:
        """The per-kernel table (nsysanalyze.kernels) of the kernels, by demangled name."""
        return K.aggregate(self._kernel_blocks, self.trace.strings, K.step_windows(steps), name_column="demangledId")

    def kernel_table(self) -> pd.DataFrame:
        """Per (process, GPU, demangled kernel name): launches and time (see nsysanalyze.kernels)."""
        self._window_metric_columns  # noqa: B018 (made in the same pass)
        return self._kernel_table.copy()

    def _metrics_of(self, windows: pd.DataFrame, first: int) -> pd.DataFrame:
        """``windows`` with their metric columns (rows ``first``.. of _window_metric_columns)."""
        cols = self._window_metric_columns.iloc[first:first + len(windows)].set_axis(windows.index)
        return pd.concat([windows, cols], axis=1)

    @cached_property
    def _nccl_kinds(self) -> dict[int, str]:
        """NCCL kernel nameId -> collective kind (metrics.nccl_kind)."""
        return {i: M.nccl_kind(n) for i, n in self.trace.strings(self.trace.nccl_kernel_name_ids).items()}

    def os_calls(self, window: tuple[int, int]) -> pd.DataFrame:
        """The OS runtime calls (start, end, globalTid, name: categorical) overlapping ``window`` [t0, t1) ns,
        read a chunk at a time; empty without OSRT."""
        t0, t1 = window
        return self.trace.osrt(None, keep=lambda chunk: (chunk["start"] < t1) & (chunk["end"] > t0))

    @cached_property
    def _ledger_rows(self) -> pd.DataFrame:
        """Every window's ledger (nsysanalyze.ledger.window_rows): steps first, then the capture windows."""
        self._window_metric_columns  # noqa: B018 (made in the same pass as _busy_classes and _gaps)
        n = len(self._step_windows)
        busy = self._busy_classes.reset_index(drop=True)
        steps = pd.concat([self._step_windows.reset_index(drop=True), busy.iloc[:n]], axis=1) if n else self._step_windows
        capture = pd.concat([self._capture_windows.reset_index(drop=True), busy.iloc[n:].reset_index(drop=True)], axis=1)
        return L.window_rows(steps, capture if len(self._capture_windows) else capture.iloc[:0], self._gaps)

    def ledger(self) -> pd.DataFrame:
        """The ledger of every window: per (globalPid, deviceId, window 'step'/'capture', step) its busy rows
        by class and idle rows by cause, summing to the window's length (nsysanalyze.ledger)."""
        return self._ledger_rows.copy()

    def gaps(self) -> pd.DataFrame:
        """Idle-gap attribution: GPU idle ns per (globalPid, deviceId, step, cause_kind, cause, before_launch)
        (step -1: idle outside every step window; see nsysanalyze.attribution)."""
        self._window_metric_columns  # noqa: B018 (made in the same pass)
        return self._gaps.copy()

    def _kept_attribution(self) -> tuple | None:
        if not self.keep_attribution_inputs:
            raise ValueError("set keep_attribution_inputs before the analysis runs")
        self._window_metric_columns  # noqa: B018 (made in the same pass)
        return self.__dict__.get("_attribution_inputs")  # None: no GPU window

    def idle_segments(self, t0: int, t1: int) -> pd.DataFrame:
        """The attribution's elementary GPU idle segments inside [t0, t1) ns (attribution.idle_segments): their
        ns sum per step are :meth:`gaps`' ns of that step."""
        none = pd.DataFrame()
        return A.idle_segments(*(self._kept_attribution() or (none, none, {}, none, none)), t0, t1)

    def attribution_host(self) -> pd.DataFrame:
        """The host intervals the attribution weighed (attribution.host_intervals: start, end, globalPid, level,
        cause; only those overlapping GPU idle)."""
        kept = self._kept_attribution()
        return kept[3] if kept else pd.DataFrame({c: [] for c in ["start", "end", "globalPid", "level", "cause"]})

    def steps(self) -> pd.DataFrame:
        """Per (step, device) metrics; empty when no step range was found."""
        return self._steps_metrics.copy()

    @cached_property
    def _steps_metrics(self) -> pd.DataFrame:
        if self._step_windows.empty:
            return self._step_windows
        return self._metrics_of(self._step_windows, 0)

    def summary(self) -> pd.DataFrame:
        """Per (process, device): whole-capture metrics, then ``step_median_*`` columns when steps exist."""
        return self._summary.copy()

    @cached_property
    def _summary(self) -> pd.DataFrame:
        windows = self._capture_windows
        if windows.empty:
            return windows
        windows = windows.assign(globalTid=-1, cpu_start=windows["window_start"], cpu_end=windows["window_end"])
        out = self._metrics_of(windows, len(self._step_windows))
        if not self._steps_metrics.empty:
            out = out.merge(M.step_medians(self._steps_metrics), on=["globalPid", "deviceId"], how="left")
        return out

    def subranges(self) -> pd.DataFrame:
        """CPU time of the NVTX sub-ranges of each step (globalPid, step, name, ns, count, share)."""
        return S.subranges(self.trace.nvtx, self._step_ranges[0])

    # ---- stage 3: findings ----------------------------------------------------------
    def evidence(self) -> list[Evidence]:
        """What the rules see, one entry per (process, device)."""
        return list(self._evidence)

    @cached_property
    def _evidence(self) -> list[Evidence]:
        summary = self._summary
        if summary.empty:
            return []
        facts_all = self._facts()
        steady_ids = self._steady_ids
        gaps = A.by_device(self._gap_summary)
        ledgers = L.scope_rows(self._ledger_rows, steady_ids)
        coverage = self._step_coverage
        gpu_names = self._gpu_names
        # every device's step medians, first steps and stalls from one grouping (not one mask per device)
        medians, step_counts, first_steps = self._step_evidence
        stalls = self._stall_facts
        per_name = self.subranges().groupby(["globalPid", "name"]).agg(ns=("ns", "median"), share=("share", "median"))
        subranges_of: dict[int, dict[str, tuple[float, float]]] = {}
        for (p, name), ns, share in zip(per_name.index, per_name["ns"], per_name["share"]):
            subranges_of.setdefault(int(p), {})[name] = (float(ns), float(share))
        out = []
        columns = list(summary.columns)
        for values in summary.to_numpy().tolist():  # one common dtype per row, as iterrows gives (all numeric)
            row = dict(zip(columns, values))
            pid, dev = int(row["globalPid"]), int(row["deviceId"])
            if (pid, dev) in medians:
                m = dict(medians[(pid, dev)])
                if self._step_choice.source == "nvtx":  # windows of inferred steps partition the copies already
                    m.update(copies_per_step(row, step_counts[(pid, dev)]))
                scope = "step median"
            else:
                m, scope = row, "capture"
            facts = dict(facts_all)
            facts.update(self._device_facts(pid, dev))
            facts["confidence_factor"] = confidence_factor(self._step_choice.source, len(steady_ids.get((pid, dev), [])),
                                                           coverage.get((pid, dev), 0.0), scope)
            facts["steady_steps"] = float(len(steady_ids.get((pid, dev), [])))
            facts.update(stalls.get((pid, dev), {}))
            if (pid, dev) in first_steps:  # the first step, left out of the medians
                facts["first_step_ns"] = first_steps[(pid, dev)]
                facts["capture_ns"] = float(row["window_ns"])
            out.append(Evidence(globalPid=pid, deviceId=dev, scope=scope, m=m, subranges=dict(subranges_of.get(pid, {})),
                                facts=facts, gaps=gaps.get((pid, dev), pd.DataFrame({c: [] for c in A.SUMMARY_COLUMNS})),
                                framework=self.framework.name, gpu_name=gpu_names.get(dev, ""),
                                ledger=L.Ledger.of(ledgers.get((pid, dev), L.EMPTY_LEDGER_ROWS), m)))
        return out

    @cached_property
    def _gap_summary(self) -> dict[bool, tuple]:
        """Every device's idle per cause at the evidence's scope (attribution.summary_parts)."""
        return A.summary_parts(self.gaps(), self._steady_ids)

    @cached_property
    def _steady_ids(self) -> dict[tuple[int, int], list[int]]:
        """(globalPid, deviceId) -> its steady steps (metrics.steady_steps), sorted."""
        steps = self._steps_metrics
        if steps.empty:
            return {}
        steady = M.steady_steps(steps)
        pid, dev, step = (steady[c].to_numpy(np.int64) for c in ("globalPid", "deviceId", "step"))
        order = np.lexsort((step, dev, pid))
        pid, dev, step = pid[order], dev[order], step[order]
        first = np.flatnonzero(np.concatenate(([True], (pid[1:] != pid[:-1]) | (dev[1:] != dev[:-1])))) if pid.size else []
        return {(int(pid[a]), int(dev[a])): s.tolist() for a, s in zip(first, np.split(step, first[1:]))}

    @cached_property
    def _step_evidence(self) -> tuple[dict, dict, dict]:
        """Per (globalPid, deviceId) with steps: the medians over its steady steps of every numeric step metric,
        its number of steps, and the window (ns) of its first step when that one is not closed (left out of
        the medians) — every device in one grouping."""
        steps = self._steps_metrics
        if steps.empty:
            return {}, {}, {}
        code, (pids, devs) = group_codes(steps["globalPid"].to_numpy(np.int64), steps["deviceId"].to_numpy(np.int64))
        keys = list(zip(pids.tolist(), devs.tolist()))
        steady = M.steady_steps(steps.assign(_device=code))
        numeric = steps.select_dtypes("number").columns
        medians = steady[numeric].groupby(steady["_device"].to_numpy()).median()
        counts = np.bincount(code, minlength=len(keys))
        closed = steps["closed"].to_numpy(bool) if "closed" in steps else np.ones(len(steps), bool)
        open_rows = np.flatnonzero(~closed)
        first = open_rows[np.unique(code[open_rows], return_index=True)[1]]  # each device's first step not closed
        window = steps["window_ns"].to_numpy()
        return ({keys[g]: m for g, m in zip(medians.index.tolist(), medians.to_dict("records"))},
                {k: int(n) for k, n in zip(keys, counts)},
                {keys[code[r]]: float(window[r]) for r in first.tolist()})

    @cached_property
    def _stall_facts(self) -> dict[tuple[int, int], dict]:
        """Per (globalPid, deviceId) with closed steps far longer than their median (S.STALL_FACTOR×: an epoch
        boundary, a periodic checkpoint or evaluation): stall_steps, steady_step_count, stall_excess_ns (mean −
        median step window, ns: what the stalls add to every step on average), stall_step_ns, stall_cause ('kind:
        cause' of their largest idle), stall_before_launch_share (of their idle, the share before the step's
        first launch) and stall_process_start_ns (their idle in OS calls that start a process: DataLoader workers
        started again, PROCESS_START). Every device's steps and the ledger's rows are grouped once."""
        steps = self._steps_metrics
        if steps.empty or "closed" not in steps:
            return {}
        closed = steps[steps["closed"].to_numpy(bool)]
        code, (pids, devs) = group_codes(closed["globalPid"].to_numpy(np.int64), closed["deviceId"].to_numpy(np.int64))
        w = closed["window_ns"].to_numpy(np.float64)
        count = np.bincount(code, minlength=pids.size)
        median = median_per_group(code, w, count)
        stall = (count[code] >= 2) & (w > S.STALL_FACTOR * median[code])
        if not stall.any():
            return {}
        stall_code = code[stall]
        n_stalls = np.bincount(stall_code, minlength=pids.size)
        stall_median = median_per_group(stall_code, w[stall], n_stalls)
        mean = np.bincount(code, weights=w, minlength=pids.size) / np.maximum(count, 1)
        rows = self._ledger_rows
        rows = rows[(rows["window"] == "step").to_numpy() & (rows["kind"] == "idle").to_numpy()]
        stalled = closed[stall][["globalPid", "deviceId", "step"]].astype(np.int64)
        rows = rows[pd.MultiIndex.from_frame(rows[["globalPid", "deviceId", "step"]].astype(np.int64)).isin(
            pd.MultiIndex.from_frame(stalled))]
        device = ["globalPid", "deviceId"]
        idle = rows.groupby(device)["ns"].sum()
        before = rows[rows["before_launch"].to_numpy(bool)].groupby(device)["ns"].sum()
        causes = rows.groupby([*device, "what", "cause"], sort=False)["ns"].sum().reset_index()
        starting = causes[causes["cause"].astype(str).str.fullmatch(PROCESS_START).to_numpy(bool)]
        starts = starting.groupby(device)["ns"].sum()
        top = causes.sort_values("ns", ascending=False, kind="stable").drop_duplicates(device)  # ties: first seen
        top = {(int(p), int(d)): f"{w_}: {c}" for p, d, w_, c in zip(top["globalPid"], top["deviceId"], top["what"],
                                                                    top["cause"])}
        out = {}
        for g in np.flatnonzero(n_stalls).tolist():
            key = (int(pids[g]), int(devs[g]))
            idle_ns = float(idle.get(key, 0))
            out[key] = {"stall_steps": float(n_stalls[g]), "steady_step_count": float(count[g]),
                        "stall_excess_ns": float(mean[g]) - float(median[g]), "stall_step_ns": float(stall_median[g]),
                        "stall_cause": top.get(key, ""),
                        "stall_before_launch_share": float(before.get(key, 0)) / idle_ns if idle_ns else 0.0,
                        "stall_process_start_ns": float(starts.get(key, 0))}
        return out

    @cached_property
    def _step_coverage(self) -> dict[tuple[int, int], float]:
        """(globalPid, deviceId) -> share of its capture window that its step windows cover."""
        steps, capture = self._step_windows, self._capture_windows
        if steps.empty or capture.empty:
            return {}
        covered = (steps["window_end"] - steps["window_start"]).groupby([steps["globalPid"], steps["deviceId"]]).sum()
        whole = (capture["window_end"] - capture["window_start"]).groupby([capture["globalPid"], capture["deviceId"]]).sum()
        share = (covered / whole).dropna()
        return {(int(p), int(d)): float(v) for (p, d), v in share.items()}

    def _facts(self) -> dict[str, float]:
        """Trace-wide facts the rules use (process/device counts, NCCL NVTX ranges, OSRT captured or not)."""
        keys = self._capture_windows  # one row per (process, device) with GPU work
        nvtx = self.trace.nvtx
        return {
            "gpu_processes": float(keys["globalPid"].nunique()),
            "gpu_devices": float(len(keys)),
            "physical_devices": float(keys["deviceId"].nunique()),
            "nccl_nvtx_ranges": float((nvtx["domain"] == "NCCL").sum()) if not nvtx.empty else 0.0,
            "osrt_captured": float(self.trace.schema.has("OSRT_API")),
        }

    @cached_property
    def _htod_on_kernel_streams(self) -> dict[tuple[int, int], float]:
        """(globalPid, deviceId) -> share of its HtoD copies issued on streams that also run kernels."""
        per = M.htod_on_kernel_streams(self._kernel_blocks, self._memcpys)
        return dict(zip(zip(per["globalPid"].astype(int), per["deviceId"].astype(int)), per["htod_on_kernel_streams_fraction"]))

    @cached_property
    def _kernel_repeats(self) -> dict[tuple[int, int], float]:
        """(globalPid, deviceId) -> median launches per distinct kernel name (about 1: a one-shot program)."""
        t = self.kernel_table()
        if t.empty:
            return {}
        med = t.groupby(["globalPid", "deviceId"])["count"].median()
        return {(int(p), int(d)): float(v) for (p, d), v in med.items()}

    @cached_property
    def _triton_kernels(self) -> dict[tuple[int, int], float]:
        """(globalPid, deviceId) -> kernel names that are Triton's (``triton_*``: torch.compile's Inductor, or Triton
        kernels of the program's own)."""
        t = self.kernel_table()
        if t.empty:
            return {}
        per = t["name"].str.startswith("triton").groupby([t["globalPid"], t["deviceId"]]).sum()
        return {(int(p), int(d)): float(v) for (p, d), v in per.items()}

    @cached_property
    def _fp32_matmul(self) -> dict[tuple[int, int], dict]:
        """(globalPid, deviceId) -> fp32_matmul_ns, fp32_matmul_share and fp32_matmul_top (kernels.fp32_matmul_time)."""
        per = K.fp32_matmul_time(self.kernel_table())
        return {(int(r.pop("globalPid")), int(r.pop("deviceId"))): r for r in per.to_dict("records")}

    @cached_property
    def _launch_medians(self) -> dict[int, float]:
        """globalPid -> its median kernel launch call (ns; metrics.median_launch_ns)."""
        return M.median_launch_ns(self._runtime_blocks, self._api_names)

    @cached_property
    def _nccl_streams(self) -> dict[tuple[int, int], tuple[float, int]]:
        """(globalPid, deviceId) -> (share of its NCCL kernel time on compute streams, that stream; -1: none)."""
        per = M.nccl_on_compute_streams(self._kernel_blocks, self.trace.nccl_kernel_name_ids)
        return {(int(p), int(d)): (float(f), int(s)) for p, d, f, s in
                zip(per["globalPid"], per["deviceId"], per["nccl_on_compute_stream_fraction"], per["nccl_compute_stream"])}

    def _device_facts(self, pid: int, dev: int) -> dict[str, float]:
        """Per-device facts: the share of HtoD copies issued on streams that also run kernels (NaN: no HtoD copy);
        the share of NCCL kernel time on streams that also run compute kernels, and that stream (NaN, -1: none);
        the median launches per kernel name (kernel_repeats); the Triton kernel names (triton_kernels); the fp32
        FMA matrix kernels' time per step (or capture), share and largest name (kernels.fp32_matmul_time); the
        process's median launch call (launch_median_ns, NaN: no launch)."""
        nccl_share, nccl_stream = self._nccl_streams.get((pid, dev), (float("nan"), -1))
        return {"htod_on_kernel_streams_fraction": float(self._htod_on_kernel_streams.get((pid, dev), float("nan"))),
                "nccl_on_compute_stream_fraction": nccl_share, "nccl_compute_stream": float(nccl_stream),
                "kernel_repeats": self._kernel_repeats.get((pid, dev), float("nan")),
                "triton_kernels": self._triton_kernels.get((pid, dev), 0.0),
                "launch_median_ns": self._launch_medians.get(pid, float("nan")),
                **self._fp32_matmul.get((pid, dev), {})}

    def findings(self) -> list[Finding]:
        """Every device's findings, largest gain first."""
        return order([f for d in self._diagnoses for f in d.findings])

    def diagnoses(self) -> list[Diagnosis]:
        """Per device: its findings, its ledger with the rows each finding claimed, and the window after all
        proposed fixes together (rules.Diagnosis)."""
        return list(self._diagnoses)

    @cached_property
    def _diagnoses(self) -> list[Diagnosis]:
        return diagnose_devices(self.evidence())

    # ---- header and notes -----------------------------------------------------------
    @cached_property
    def info(self) -> TraceInfo:
        t = self.trace
        procs = t.processes
        act_keys = self._capture_windows[["globalPid", "deviceId"]]
        gpu_names = self._gpu_names
        gpu_pids = set(act_keys["globalPid"])
        nvtx_pids = set(pid_of(t.nvtx["globalTid"])) if not t.nvtx.empty else set()
        return TraceInfo(
            path=str(t.source), nsys_version=t.schema.nsys_version, recorder_nsys_version=t.schema.recorder_nsys_version,
            schema_version=t.schema.schema_version,
            session_start_utc_ns=t.session_start_utc_ns,
            processes=[{"globalPid": int(r.globalPid), "pid": int(r.pid), "name": str(r.name)}
                       for r in procs.itertuples() if r.globalPid in gpu_pids | nvtx_pids],
            devices=[{"globalPid": int(p), "deviceId": int(d), "name": str(gpu_names.get(d, ""))}
                     for p, d in act_keys.itertuples(index=False)],
            step_family=self._step_ranges[1],
            step_source=self._step_choice.source,
            framework=self.framework.name,
            framework_clues=self.framework.clues,
            mpi=self.framework.mpi,
        )

    @cached_property
    def _gpu_names(self) -> dict[int, str]:
        """deviceId -> GPU name; a lone GPU listed without its id (nsys 2019/2020) names the one device with work."""
        gpus = self.trace.gpus
        names = {int(d): str(n) for d, n in zip(gpus["deviceId"], gpus["name"]) if d is not None and d == d}
        used = self._capture_windows["deviceId"].unique()
        if not names and len(gpus) == 1 and len(used) == 1:
            names = {int(used[0]): str(gpus["name"].iloc[0])}
        return names

    @cached_property
    def framework(self) -> F.Framework:
        """What produced the trace (framework.detect), from the profiled processes and the export's strings."""
        t = self.trace
        commands = [v for k, vs in t.schema.capture.items() if k.endswith(":COMMAND") for v in vs]
        pids = set(self._capture_windows["globalPid"]) | (set(pid_of(t.nvtx["globalTid"])) if not t.nvtx.empty else set())
        names = [str(r.name) for r in t.processes.itertuples() if r.globalPid in pids]
        threads = t.thread_names
        # the profiled processes' threads (a capture may list every thread of the host); all when no process is known
        mine = threads[pd.Series(pid_of(threads["globalTid"])).isin(pids).to_numpy()] if pids else threads
        present = t.patterns_present(F.STRING_PATTERNS)
        mpi_traced = any(t.schema.has(table) for table in ("MPI_RANKS", "MPI_COLLECTIVES_EVENTS", "MPI_P2P_EVENTS"))
        return F.detect(present.__contains__, commands + names, not self._capture_windows.empty,
                        threads=sorted(set(mine["name"].astype(str))), domains=t.nvtx_domain_names, mpi_traced=mpi_traced)

    @cached_property
    def notes(self) -> list[str]:
        """Plain-language caveats about what the trace can and cannot show."""
        t, notes = self.trace, []
        if self._capture_windows.empty:
            notes.append("No GPU activity (kernels, memcpys, memsets) in this export: capture with --trace=cuda "
                         "and make sure the profiled range includes GPU work.")
        choice = self._step_choice
        if t.nvtx.empty:
            counts = t.nvtx_event_type_counts
            only_domains = bool(counts) and set(counts) <= {NVTX_DOMAIN_CREATE, NVTX_DOMAIN_DESTROY}
            recorder = t.schema.recorder_known_or_assumed  # the python-nvtx issue is the recorder's, not the exporter's
            if (t.schema.nvtx_trace_requested and (only_domains or not counts) and self.framework.is_python
                    and recorder is not None and recorder >= PYTHON_NVTX_FIRST_AFFECTED):
                known = (" (nsys 2023.4 does not record python nvtx >= 0.2.12: pin nvtx==0.2.11 or use a newer nsys)"
                         if recorder.startswith("2023.4") else " (check that this nsys records your nvtx version)")
                notes.append(f"NVTX tracing was on but this Python program recorded no NVTX range with nsys {recorder}: "
                             f"the python `nvtx` package may be one this nsys does not record{known}.")
            elif t.schema.nvtx_trace_requested:
                notes.append("NVTX tracing was on but the program recorded no NVTX range (annotate steps with NVTX "
                             "for per-step results).")
            else:
                notes.append("No NVTX ranges (annotate steps with NVTX and capture with --trace=cuda,nvtx for "
                             "per-step results).")
        if choice.rejected:
            notes.append("NVTX families " + ", ".join(repr(f) for f in choice.rejected) + " were not taken as steps: "
                         "their ranges hold only part of one iteration of the repeating GPU work (op- or layer-level).")
        if choice.source == "inferred":
            notes.append(f"Steps inferred from the GPU work itself: {choice.label}, named step 1…N per GPU (no NVTX "
                         "step range); pass --step-range REGEX to choose one.")
        elif choice.source is None and not self._capture_windows.empty:
            notes.append("No steps: no NVTX step range and no repeating kernel sequence; the capture is analyzed as one "
                         "window per device (pass --step-range REGEX to choose the step range).")
        elif self._step_windows.empty and not self._capture_windows.empty:
            notes.append("Step ranges were found but none launched GPU work that could be correlated "
                         "(runtime API not traced?); per-step GPU metrics are unavailable.")
        if t.schema.converted_qdrep and not t.schema.recorder_nsys_version:
            notes.append(f"Exported with nsys {t.schema.nsys_version or '?'} from a .qdrep report: an older nsys recorded "
                         "it (its version is not in the capture).")
        if not t.schema.has("OSRT_API"):
            notes.append("No OS runtime data: munmap and OS-call evidence is unavailable (capture with "
                         "--trace=cuda,nvtx,osrt).")
        return notes

    def where_gpu_waited(self) -> pd.DataFrame:
        """Per (process, device): the idle-gap attribution the rules read — GPU idle ns per cause (median per
        steady step, or whole capture without steps), with the parts before the step's first launch, after
        host syncs, in short gaps and in short gaps after syncs: globalPid, deviceId, scope, then
        attribution.SUMMARY_COLUMNS (cause_kind, cause, ns, before_launch_ns, after_sync_ns, short_gap_ns,
        short_after_sync_ns). Devices in the evidence's order, every device's rows taken at once."""
        cols = ["globalPid", "deviceId", "scope", *A.SUMMARY_COLUMNS]
        evidence = self.evidence()
        if not evidence:
            return pd.DataFrame(columns=cols)
        parts = self._gap_summary
        runs = {key: (stepped, lo, hi) for stepped, (_, r) in parts.items() for key, (lo, hi) in r.items()}
        order = {(ev.globalPid, ev.deviceId): i for i, ev in enumerate(evidence)}
        frames, empty = [], {}  # the rows of each part, and one empty frame per kind of device without rows
        for stepped, (part, _) in parts.items():
            if len(part):
                frames.append(part.assign(scope="step median" if stepped else "capture", _order=[
                    order[k] for k in zip(part["globalPid"].tolist(), part["deviceId"].tolist())]))
        for ev in evidence:  # as each device's own frame would join the others (its dtypes count, rows or not)
            stepped, lo, hi = runs.get((ev.globalPid, ev.deviceId), (None, 0, 0))
            if hi == lo and stepped not in empty:
                rows = parts[stepped][0].iloc[:0][A.SUMMARY_COLUMNS] if stepped is not None else ev.gaps
                empty[stepped] = rows.assign(globalPid=ev.globalPid, deviceId=ev.deviceId, scope=ev.scope, _order=0)
        every = pd.concat(frames + list(empty.values()), ignore_index=True)
        return every.sort_values("_order", kind="stable").reset_index(drop=True)[cols]


def table_budget_bytes() -> int:
    """TABLE_BUDGET_BYTES, or NSYSANALYZE_TABLE_BUDGET_MB (MiB, a number >= 0) when set."""
    mb = os.environ.get("NSYSANALYZE_TABLE_BUDGET_MB")
    if not mb:
        return TABLE_BUDGET_BYTES
    try:
        value = float(mb)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise InputError(f"NSYSANALYZE_TABLE_BUDGET_MB={mb!r}: give the memory budget of the tables held whole in MiB "
                         "(a number >= 0)")
    return int(value * 2**20)


def tables_in_blocks(held_bytes: dict[str, int]) -> set[str]:
    """The tables to read in blocks, given the bytes each takes held whole: none while they fit
    :func:`table_budget_bytes` together; above, the largest first, then the next, until those left fit."""
    budget, left = table_budget_bytes(), dict(held_bytes)
    while sum(left.values()) > budget:
        del left[max(left, key=left.get)]
    return set(held_bytes) - set(left)


def confidence_factor(step_source: str | None, steady: int, coverage: float, scope: str) -> float:
    """How far a device's window can be trusted (multiplies each finding's confidence; rules/__init__.py):
    ×0.8 for inferred steps, ×0.8 for a capture without steps, ×0.85 with 2 steady steps, ×0.7 with one,
    ×max(0.4, coverage / 0.5) when the steps cover less than half of the capture."""
    factor = 0.8 if step_source == "inferred" else 1.0
    if scope == "capture":
        return factor * 0.8
    factor *= 0.7 if steady <= 1 else 0.85 if steady == 2 else 1.0
    return factor * (max(0.4, coverage / 0.5) if coverage < 0.5 else 1.0)


# Host<->device copy metrics the rules read per step from the whole capture (total / steps):
# a step's copies can run in another step's window when the CPU runs ahead (side-stream prefetch).
CAPTURE_COPY_TOTALS = ["htod_ns", "htod_hidden_ns", "htod_bytes", "htod_count", "htod_pageable_bytes",
                       "htod_pinned_bytes", "htod_pageable_ns", "htod_pinned_ns", "dtoh_bytes", "dtoh_ns"]


def copies_per_step(capture: pd.Series, steps: int) -> dict[str, float]:
    """Mean per step of the capture's host<->device copy totals, and the capture's HtoD overlap ratio."""
    out = {k: float(capture[k]) / steps for k in CAPTURE_COPY_TOTALS}
    out["htod_kernel_overlap"] = capture["htod_kernel_overlap"]
    return out


def run(path: str | os.PathLike, work, step_range: str | None = None):
    """``work(Analysis)`` on one export; any failure becomes a one-line InputError naming the file
    (NSYSANALYZE_DEBUG=1 re-raises unexpected errors)."""
    try:
        with Analysis(path, step_range=step_range) as a:
            return work(a)
    except InputError as e:
        if str(path) in str(e):
            raise
        raise InputError(f"{path}: {e}") from None  # a table's complaint, named by its file
    except sqlite3.DatabaseError as e:
        raise InputError(f"{path}: corrupted or unreadable SQLite export ({e})") from None
    except MemoryError:
        raise InputError(f"{path}: out of memory while analyzing") from None
    except Exception as e:  # never a traceback for a bad file
        if os.environ.get("NSYSANALYZE_DEBUG"):
            raise
        raise InputError(f"{path}: cannot analyze this export ({type(e).__name__}: {e})") from None


def open(path: str | os.PathLike, step_range: str | None = None) -> Analysis:  # noqa: A001 (mirrors builtins.open)
    """Open an nsys SQLite export (or .nsys-rep, exported with nsys on PATH) for analysis."""
    return Analysis(path, step_range=step_range)
