"""The timeline export as Chrome trace event JSON (docs/timeline.md), for ui.perfetto.dev and chrome://tracing.

One JSON object: ``displayTimeUnit``, ``metadata`` (``nsysanalyze``: the verdict, each file's window and
clock shift) and ``traceEvents``: per process its ``process_name``/``process_sort_index`` and per track
its ``thread_name``/``thread_sort_index`` metadata events (``ph`` M), complete slices (``ph`` X, ``ts``
and ``dur`` in µs written with three decimals: the ns are kept exactly) and instants (``ph`` i). Every
string is JSON-escaped (``json.dumps``: ASCII only, control characters as \\u escapes). Events are
written a block of rows at a time, each block's lines built column-wise, straight to the file.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from .contract import FORMAT_VERSION
from ..intervals import row_blocks
from ..trace_events import FileEvents, event_count
from .format import headlines

BLOCK = 200_000  # events formatted at a time


def quoted(values) -> np.ndarray:
    """JSON string literals of ``values`` (object array), each distinct value escaped once; None/NaN → None."""
    codes, uniques = pd.factorize(pd.Series(values, dtype=object), use_na_sentinel=True)
    literals = np.array([json.dumps(str(u)) for u in uniques] + [None], dtype=object)
    return literals[codes]


def microseconds(ns: np.ndarray) -> np.ndarray:
    """ns (int, >= 0) as µs with three decimals ('1234.567'), exact."""
    whole, part = np.divmod(np.asarray(ns, np.int64), 1000)
    frac = (part + 1000).astype("U4").view("U1").reshape(-1, 4)[:, 1:].copy().view("U3").ravel()
    return np.char.add(np.char.add(whole.astype("U"), "."), frac).astype(object)


def json_values(col: pd.Series) -> np.ndarray:
    """A column as JSON literals (object array; None where the value is missing)."""
    if col.dtype == bool:
        return np.where(col.to_numpy(), "true", "false").astype(object)
    if pd.api.types.is_integer_dtype(col.dtype) and not col.isna().any():
        return col.to_numpy(np.int64).astype("U").astype(object)
    if pd.api.types.is_numeric_dtype(col.dtype) and not pd.api.types.is_bool_dtype(col.dtype):
        values = pd.to_numeric(col, errors="coerce").astype(float).to_numpy()
        whole = np.isfinite(values) & (values == np.round(values)) & (np.abs(values) < 2 ** 53)
        text = np.where(whole, np.round(np.where(whole, values, 0)).astype(np.int64).astype("U"), values.astype("U"))
        return np.where(np.isfinite(values), text, None).astype(object)
    return quoted(col.to_numpy(object))


def args_json(events: pd.DataFrame, args: list[str]) -> np.ndarray:
    """'{"key":value,...}' per event from the ``args`` columns present (missing values left out)."""
    body = np.full(len(events), "{", dtype=object)
    started = np.zeros(len(events), bool)
    for key in args:
        if key not in events:
            continue
        values = json_values(events[key])
        present = ~pd.isna(values)
        if not present.any():
            continue
        label = json.dumps(key) + ":"
        body[present] = body[present] + np.where(started[present], "," + label, label) + values[present]
        started |= present
    return body + "}"


def event_lines(events: pd.DataFrame, pid: int, tid: int, args: list[str]) -> np.ndarray:
    """The JSON line of each event of one track (object array)."""
    dur = events["dur"].to_numpy(np.int64)
    head = f'{{"pid":{pid},"tid":{tid},"ts":'
    kind = np.where(dur >= 0, ',"ph":"X","dur":' + microseconds(np.maximum(dur, 0)), ',"ph":"i","s":"t"')
    return (head + microseconds(events["start"].to_numpy(np.int64)) + kind + ',"name":' + quoted(events["name"].to_numpy(object))
            + ',"cat":' + quoted(events["cat"].to_numpy(object)) + ',"args":' + args_json(events, args) + "}")


def meta_line(pid: int, tid: int, what: str, args: dict) -> str:
    return json.dumps({"ph": "M", "pid": pid, "tid": tid, "ts": 0, "name": what, "args": args})


def metadata(files: list[FileEvents], reports: list[dict], shifts: list[int], aligned: bool) -> dict:
    """The ``metadata.nsysanalyze`` block: the verdict per (process, GPU), each file's window (ns on its
    clock, null: the whole capture), steps, median step and clock shift (ts µs × 1000 = file ns + shift)."""
    verdict = [{"trace": r["trace"]["path"], "headline": head, "next": nxt} for r in reports for head, nxt in headlines(r)]
    traces = [{"path": f.path, "session_start_utc_ns": f.session_start_utc_ns,
               "window_start_ns": f.window[0] if f.window else None, "window_end_ns": f.window[1] if f.window else None,
               "steps": f.steps, "median_step": f.median_step, "clock_shift_ns": shift,
               "findings": len(r["findings"])}
              for f, r, shift in zip(files, reports, shifts)]
    return {"nsysanalyze": {"format_version": FORMAT_VERSION, "aligned_on_utc_clock": aligned,
                            "events": event_count(files), "verdict": verdict, "traces": traces}}


def write(path: Path, files: list[FileEvents], reports: list[dict], shifts: list[int], aligned: bool) -> None:
    """Write the trace of ``files`` (aligned: :func:`nsysanalyze.trace_events.align`) to ``path``."""
    meta = metadata(files, reports, shifts, aligned)
    chrome_pid = {}
    for f in files:
        for t in f.tracks:
            chrome_pid.setdefault(t.process, len(chrome_pid) + 1)
    with open(path, "w", encoding="ascii") as out:
        out.write('{"displayTimeUnit":"ns","metadata":' + json.dumps(meta) + ',\n"traceEvents":[\n')
        sep = ""

        def emit(lines) -> None:
            nonlocal sep
            if len(lines):
                out.write(sep + ",\n".join(lines))
                sep = ",\n"
        for i, f in enumerate(files):
            for gpid, label in f.processes.items():
                if (i, gpid) in chrome_pid:
                    pid = chrome_pid[(i, gpid)]
                    emit([meta_line(pid, 0, "process_name", {"name": label}),
                          meta_line(pid, 0, "process_sort_index", {"sort_index": pid})])
        first = files[0].tracks[0] if files and files[0].tracks else None
        if first is not None:  # the verdict, also as an event: the UI shows it at the start of the axis
            emit([json.dumps({"ph": "i", "s": "g", "pid": chrome_pid[first.process], "tid": 1, "ts": 0,
                              "name": "nsysanalyze verdict", "cat": "verdict",
                              "args": {"verdict": [v["headline"] + " · " + v["next"]
                                                   for v in meta["nsysanalyze"]["verdict"]]}})])
        tids: dict[tuple[int, int], int] = {}
        for f in files:
            for t in f.tracks:
                pid = chrome_pid[t.process]
                tid = tids[t.process] = tids.get(t.process, 0) + 1
                emit([meta_line(pid, tid, "thread_name", {"name": t.name}),
                      meta_line(pid, tid, "thread_sort_index", {"sort_index": tid})])
                for r in row_blocks(len(t.events), size=BLOCK):
                    emit(event_lines(t.events.iloc[r], pid, tid, t.args).tolist())
        out.write("\n]}\n")
