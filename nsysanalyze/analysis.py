"""The pipeline in one object: Trace → steps → metrics → findings (the CLI is a thin layer over it).

    >>> import nsysanalyze
    >>> a = nsysanalyze.open("run.sqlite")
    >>> a.summary()      # one row per (process, device): whole-capture metrics + per-step medians
    >>> a.steps()        # one row per (step, device)
    >>> a.findings()     # ranked list of Finding
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd

from . import metrics as M
from . import steps as S
from .rules import Evidence, Finding, diagnose
from .trace import Trace
from .trace.schema import NVTX_DOMAIN_CREATE, NVTX_DOMAIN_DESTROY
from .trace.tables import pid_of

FORMAT_VERSION = 1


@dataclass
class TraceInfo:
    """Header facts of one export."""

    path: str
    nsys_version: str | None
    schema_version: str | None
    session_start_utc_ns: int | None
    processes: list[dict] = field(default_factory=list)  # globalPid, pid, name
    devices: list[dict] = field(default_factory=list)    # globalPid, deviceId, name
    step_family: str | None = None


class Analysis:
    """Analysis of one nsys SQLite export; every result is computed once, on first use."""

    def __init__(self, path: str | os.PathLike, step_range: str | None = None):
        self.trace = Trace(path)
        self.step_range = step_range

    def close(self) -> None:
        self.trace.close()

    def __enter__(self) -> "Analysis":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- stage 1: steps -------------------------------------------------------------
    @cached_property
    def _activities(self) -> pd.DataFrame:
        t = self.trace
        return S.gpu_activities(t.kernels, t.memcpys, t.memsets)

    @cached_property
    def _step_ranges(self) -> tuple[pd.DataFrame, str | None]:
        return S.find_steps(self.trace.nvtx, self.step_range)

    @cached_property
    def _step_windows(self) -> pd.DataFrame:
        ranges, _ = self._step_ranges
        return S.project_steps(ranges, self.trace.runtime, self._activities)

    # ---- stage 2: metrics -----------------------------------------------------------
    def _metrics(self, windows: pd.DataFrame) -> pd.DataFrame:
        t = self.trace
        api_calls = M.classify_runtime(t.runtime, t.runtime_names)
        return M.window_metrics(windows, t.kernels, t.memcpys, t.memsets, t.nccl_kernel_name_ids,
                                api_calls, self._munmap)

    @cached_property
    def _munmap(self) -> pd.DataFrame:
        return self.trace.osrt(("munmap",))

    def steps(self) -> pd.DataFrame:
        """Per (step, device) metrics; empty when no step range was found."""
        return self._steps_metrics.copy()

    @cached_property
    def _steps_metrics(self) -> pd.DataFrame:
        if self._step_windows.empty:
            return self._step_windows
        return self._metrics(self._step_windows)

    def summary(self) -> pd.DataFrame:
        """Per (process, device): whole-capture metrics, then ``step_median_*`` columns when steps exist."""
        return self._summary.copy()

    @cached_property
    def _summary(self) -> pd.DataFrame:
        windows = S.capture_windows(self._activities)
        if windows.empty:
            return windows
        windows = windows.assign(globalTid=-1, cpu_start=windows["window_start"], cpu_end=windows["window_end"])
        out = self._metrics(windows)
        if not self._steps_metrics.empty:
            out = out.merge(M.step_medians(self._steps_metrics), on=["globalPid", "deviceId"], how="left")
        return out

    def subranges(self) -> pd.DataFrame:
        """CPU time of the NVTX sub-ranges of each step (globalPid, step, name, ns, count, share)."""
        return S.subranges(self.trace.nvtx, self._step_ranges[0])

    # ---- stage 3: findings ----------------------------------------------------------
    def evidence(self) -> list[Evidence]:
        """What the rules see, one entry per (process, device)."""
        summary, steps = self._summary, self._steps_metrics
        if summary.empty:
            return []
        sub = self.subranges()
        facts_all = self._facts()
        out = []
        for _, row in summary.iterrows():
            pid, dev = int(row["globalPid"]), int(row["deviceId"])
            mine = steps[(steps["globalPid"] == pid) & (steps["deviceId"] == dev)] if not steps.empty else steps
            if not mine.empty:
                use = mine[mine["closed"]] if mine["closed"].any() else mine
                m = use.select_dtypes("number").median().to_dict()
                scope = "step median"
            else:
                m, scope = row.to_dict(), "capture"
            sr = sub[sub["globalPid"] == pid]
            per_name = sr.groupby("name").agg(ns=("ns", "median"), share=("share", "median"))
            subr = {n: (float(r["ns"]), float(r["share"])) for n, r in per_name.iterrows()}
            facts = dict(facts_all)
            facts.update(self._device_facts(pid, dev))
            out.append(Evidence(globalPid=pid, deviceId=dev, scope=scope, m=m, subranges=subr, facts=facts))
        return out

    def _facts(self) -> dict[str, float]:
        """Trace-wide facts the rules use (process/device counts, NCCL NVTX ranges)."""
        act = self._activities
        nvtx = self.trace.nvtx
        return {
            "gpu_processes": float(act["globalPid"].nunique()),
            "gpu_devices": float(act[["globalPid", "deviceId"]].drop_duplicates().shape[0]),
            "physical_devices": float(act["deviceId"].nunique()),
            "nccl_nvtx_ranges": float((nvtx["domain"] == "NCCL").sum()) if not nvtx.empty else 0.0,
        }

    def _device_facts(self, pid: int, dev: int) -> dict[str, float]:
        """Per-device facts: the share of HtoD copies issued on streams that also run kernels."""
        k, m = self.trace.kernels, self.trace.memcpys
        k = k[(k["globalPid"] == pid) & (k["deviceId"] == dev)]
        htod = m[(m["globalPid"] == pid) & (m["deviceId"] == dev) & (m["copyKind"] == 1)]
        frac = float(np.isin(htod["streamId"], k["streamId"].unique()).mean()) if len(htod) else float("nan")
        return {"htod_on_kernel_streams_fraction": frac}

    def findings(self) -> list[Finding]:
        return list(self._findings)

    @cached_property
    def _findings(self) -> list[Finding]:
        return diagnose(self.evidence())

    # ---- header and notes -----------------------------------------------------------
    @cached_property
    def info(self) -> TraceInfo:
        t = self.trace
        procs = t.processes
        act_keys = self._activities[["globalPid", "deviceId"]].drop_duplicates().sort_values(["globalPid", "deviceId"])
        gpu_names = dict(zip(t.gpus["deviceId"], t.gpus["name"])) if not t.gpus.empty else {}
        gpu_pids = set(act_keys["globalPid"])
        nvtx_pids = set(pid_of(t.nvtx["globalTid"])) if not t.nvtx.empty else set()
        return TraceInfo(
            path=str(t.source), nsys_version=t.schema.nsys_version, schema_version=t.schema.schema_version,
            session_start_utc_ns=t.session_start_utc_ns,
            processes=[{"globalPid": int(r.globalPid), "pid": int(r.pid), "name": str(r.name)}
                       for r in procs.itertuples() if r.globalPid in gpu_pids | nvtx_pids],
            devices=[{"globalPid": int(p), "deviceId": int(d), "name": str(gpu_names.get(d, ""))}
                     for p, d in act_keys.itertuples(index=False)],
            step_family=self._step_ranges[1],
        )

    @cached_property
    def notes(self) -> list[str]:
        """Plain-language caveats about what the trace can and cannot show."""
        t, notes = self.trace, []
        if self._activities.empty:
            notes.append("No GPU activity (kernels, memcpys, memsets) in this export: capture with --trace=cuda "
                         "and make sure the profiled range includes GPU work.")
        if t.nvtx.empty:
            counts = t.nvtx_event_type_counts
            only_domains = bool(counts) and set(counts) <= {NVTX_DOMAIN_CREATE, NVTX_DOMAIN_DESTROY}
            if t.schema.nvtx_trace_requested and (only_domains or not counts) and self._profiled_python:
                notes.append(
                    "NVTX tracing was on but no NVTX range was recorded: the python `nvtx` package is likely newer "
                    "than the nsys that recorded it (nvtx >= 0.2.12 is not recorded by nsys 2023.4): pin "
                    "nvtx==0.2.11 or use a newer nsys. The capture is analyzed as one window per device.")
            elif t.schema.nvtx_trace_requested:
                notes.append("NVTX tracing was on but the program recorded no NVTX range: the capture is analyzed "
                             "as one window per device (annotate steps with NVTX for per-step results).")
            else:
                notes.append("No NVTX ranges: the capture is analyzed as one window per device "
                             "(annotate steps with NVTX and capture with --trace=cuda,nvtx for per-step results).")
        elif self._step_ranges[0].empty:
            notes.append("No repeating step range found among the NVTX ranges; the capture is analyzed as one window "
                         "per device (pass --step-range REGEX to choose the step range).")
        elif self._step_windows.empty and not self._activities.empty:
            notes.append("Step ranges were found but none launched GPU work that could be correlated "
                         "(runtime API not traced?); per-step GPU metrics are unavailable.")
        if not t.schema.has("OSRT_API"):
            notes.append("No OS runtime data: munmap evidence is unavailable (capture with --trace=cuda,nvtx,osrt).")
        if not self._steps_metrics.empty and not self._steps_metrics["closed"].all():
            notes.append("The last step's GPU window ends at its last GPU activity (the idle after it is not in the "
                         "capture); step medians use the other steps.")
        return notes

    @property
    def _profiled_python(self) -> bool:
        """Whether the profiled command (or a traced process) is a Python interpreter."""
        commands = [v for k, vs in self.trace.schema.capture.items() if k.endswith(":COMMAND") for v in vs]
        names = commands + list(self.trace.processes["name"].astype(str))
        return any("python" in n.lower() for n in names)

    # ---- everything, as plain data --------------------------------------------------
    def to_dict(self) -> dict:
        """The JSON contract (see README): format_version, trace, notes, summary, steps, subranges, findings."""
        return {
            "format_version": FORMAT_VERSION,
            "trace": asdict(self.info),
            "notes": self.notes,
            "summary": {"devices": _records(self._summary_for_json())},
            "steps": _records(self._steps_metrics),
            "subranges": _records(self.subranges()),
            "findings": [f.to_dict() for f in self.findings()],
        }

    def _summary_for_json(self) -> pd.DataFrame:
        """Summary with the contract's names: device, gpu_idle_fraction (whole capture)."""
        s = self._summary
        if s.empty:
            return s
        return s.rename(columns={"deviceId": "device", "idle_fraction": "gpu_idle_fraction"})


def _records(frame: pd.DataFrame) -> list[dict]:
    """DataFrame rows as JSON-safe dicts (NaN → None, numpy scalars → Python)."""
    if frame.empty:
        return []
    clean = frame.astype(object).where(frame.notna(), None)
    return [{k: (v.item() if isinstance(v, np.generic) else v) for k, v in row.items()}
            for row in clean.to_dict(orient="records")]


def open(path: str | os.PathLike, step_range: str | None = None) -> Analysis:  # noqa: A001 (mirrors builtins.open)
    """Open an nsys SQLite export (or .nsys-rep, exported with nsys on PATH) for analysis."""
    return Analysis(path, step_range=step_range)
