"""Kernel view renderers (``nsysanalyze kernels``): text (rich), markdown; JSON and CSV are the records as is."""
from __future__ import annotations

from rich.console import Console
from rich.text import Text

from .format import count, ms, pct
from .markdown import _table as md_table
from .sanitize import code_span, for_markdown, for_text
from .terminal import table_of

HEADERS = ["total", "share", "count", "mean", "median", "min", "max", "per step", "name"]


def us(ns) -> str:
    return "-" if ns is None else f"{ns / 1e3:,.1f} µs"


def cells(k: dict) -> list[str]:
    per_step = "-" if k["per_step_ns"] is None else f"{ms(k['per_step_ns'])} ({k['launches_per_step']:,.1f}×)"
    return [ms(k["total_ns"]), pct(k["share"]), count(k["count"]), us(k["mean_ns"]), us(k["median_ns"]),
            us(k["min_ns"]), us(k["max_ns"]), per_step, k["name"]]


def by_device(kernels: list[dict]) -> dict[tuple[int, int], list[dict]]:
    out: dict[tuple[int, int], list[dict]] = {}
    for k in kernels:
        out.setdefault((k["globalPid"], k["deviceId"]), []).append(k)
    return out


def title(doc: dict, device: dict, shown: int) -> str:
    """'run.sqlite · GPU 0 (pid 517) · kernel time 178.5 ms · top 20 of 64 kernel names by total time'."""
    pid = next((p["pid"] for p in doc["trace"]["processes"] if p["globalPid"] == device["globalPid"]), None)
    n = device["kernel_names"]
    what = f"top {shown} of {n}" if shown < n else f"all {n}"
    return (f"{doc['trace']['path']} · GPU {device['deviceId']}" + (f" (pid {pid})" if pid is not None else "")
            + f" · kernel time {ms(device['kernel_ns'])} · {what} kernel names by total time")


def render_text(doc: dict, console: Console) -> None:
    """One table per (process, GPU); the name comes last and wraps, never cut (printable: shown, never obeyed)."""
    doc = for_text(doc)
    rows = by_device(doc["kernels"])
    for i, d in enumerate(doc["devices"]):
        shown = rows.get((d["globalPid"], d["deviceId"]), [])
        if i:
            console.print()
        console.print(table_of(title(doc, d, len(shown)), HEADERS, [cells(k) for k in shown], left=(len(HEADERS) - 1,)))
    if not doc["devices"]:
        console.print(Text(f"{doc['trace']['path']}: no kernel in this export."))


def render_markdown(doc: dict) -> str:
    """Kernel names as code spans (a fence longer than any backtick run in them), other strings inert markdown."""
    doc = for_markdown(doc, frozenset({"name"}))
    out = []
    rows = by_device(doc["kernels"])
    for d in doc["devices"]:
        shown = rows.get((d["globalPid"], d["deviceId"]), [])
        out += [f"### {title(doc, d, len(shown))}", ""]
        out += md_table(HEADERS, [cells(k)[:-1] + [code_span(k['name'])] for k in shown]) + [""]
    return "\n".join(out or [f"{doc['trace']['path']}: no kernel in this export.", ""])
