"""Terminal renderer (rich): header, notes, summary table, per-step table, findings with fixes."""
from __future__ import annotations

from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from .sanitize import for_text
from .format import STEP_COLUMNS, summary_cells, device_label, evidence_value, ms, pct, step_cells, subrange_table

SEVERITY_STYLE = {"high": "bold red", "medium": "yellow", "low": "cyan", "info": "green"}


def header(report: dict) -> Panel:
    t = report["trace"]
    procs = ", ".join(f"{p['name']} (pid {p['pid']})" for p in t["processes"]) or "-"
    gpus = ", ".join(sorted({d["name"] or f"GPU {d['deviceId']}" for d in t["devices"]})) or "-"
    body = Text.assemble(
        ("nsys ", "dim"), f"{t['nsys_version'] or '?'}", ("  schema ", "dim"), f"{t['schema_version'] or '?'}",
        ("\nprocesses ", "dim"), procs, ("\nGPUs ", "dim"), f"{gpus} ({len(t['devices'])} in use)",
        ("\nsteps ", "dim"), t.get("step_family") or "none found (one window per device)",
        ("\nprogram ", "dim"), t.get("framework", "unknown") + (" + MPI" if t.get("mpi") else ""),
    )
    return Panel(body, title=Text(t["path"]), title_align="left")


def summary_table(report: dict) -> Table | None:
    devices = report["summary"]["devices"]
    if not devices:
        return None
    table = Table(title="Summary (whole capture; step medians where marked)", title_justify="left")
    table.add_column("metric", style="dim")
    for d in devices:
        table.add_column(device_label(d, report["trace"]["processes"]), justify="right")
    for row in summary_cells(devices):
        table.add_row(*row)
    return table


def steps_table(report: dict) -> Table | None:
    if not report["steps"]:
        return None
    table = Table(title="Per step (* first step: its window starts at its own GPU work; medians skip it)", title_justify="left")
    for i, (h, _, _) in enumerate(STEP_COLUMNS):
        table.add_column(h, justify="left" if i == 0 else "right", no_wrap=i == 0)
    for s in report["steps"]:
        table.add_row(*[Text(c) for c in step_cells(s)])
    return table


def subranges_table(report: dict) -> Table | None:
    rows = subrange_table(report)
    if not rows:
        return None
    table = Table(title="CPU sub-ranges (median per step)", title_justify="left")
    table.add_column("range")
    table.add_column("time", justify="right")
    table.add_column("share of step", justify="right")
    for name, ns, share in rows:
        table.add_row(Text(name), ms(ns), pct(share))
    return table


def gaps_table(report: dict) -> Table | None:
    """Where the GPU waited: the top idle causes per device (attribution)."""
    rows = report.get("gaps") or []
    if not rows:
        return None
    table = Table(title="Where the GPU waited (idle per step median, or whole capture)", title_justify="left")
    for c in ("device", "cause", "kind", "idle", "before 1st launch", "after sync"):
        table.add_column(c, justify="left" if c in ("device", "cause", "kind") else "right", overflow="fold")
    labels = {(d["globalPid"], d.get("deviceId", d.get("device"))): device_label(d, report["trace"]["processes"]) for d in report["summary"]["devices"]}
    shown: dict = {}
    for r in rows:
        key = (r["globalPid"], r["deviceId"])
        shown[key] = shown.get(key, 0) + 1
        if shown[key] <= 5:
            table.add_row(labels.get(key, ""), Text(str(r["cause"])), r["cause_kind"], ms(r["ns"]),
                          ms(r["before_launch_ns"]), ms(r["after_sync_ns"]))
    return table


SNIPPET_LEXER = {"cuda": "c", "openmp": "c"}


def findings_panels(report: dict) -> list[Panel]:
    panels = []
    lexer = SNIPPET_LEXER.get(report["trace"].get("framework", ""), "python")
    for i, f in enumerate(report["findings"], 1):
        per = "step" if f["scope"] == "step median" else "capture"
        gain = f"up to {ms(f['gain_ns'])} ({f['gain_pct']:.1f}% of the {per})" if f["gain_ns"] else "no gain expected"
        lines: list = [Text(f["title"], style="bold")]
        lines += [Text.assemble((f"  {k}: ", "dim"), evidence_value(k, v)) for k, v in f["evidence"].items()]
        lines.append(Text.assemble(("Fix: ", "bold"), f["fix"]))
        if f["snippet"]:
            lines.append(Syntax(f["snippet"], lexer, theme="ansi_dark", background_color="default"))
        title = (f"{i}. [{SEVERITY_STYLE[f['severity']]}]{escape(f['rule'])}[/] · {f['severity']} · "
                 f"confidence {f['confidence']:.0%} · {gain}")
        panels.append(Panel(Group(*lines), title=title, title_align="left"))
    return panels


def render(report: dict, console: Console, sections=("summary", "steps", "findings")) -> None:
    report = for_text(report)  # trace strings printed, never obeyed
    console.print(header(report))
    for note in report["notes"]:
        console.print(Text("note: ", style="yellow") + Text(note))
    parts = []
    if "summary" in sections:
        parts.append(summary_table(report))
    if "steps" in sections:
        parts += [steps_table(report), subranges_table(report)]
    if "findings" in sections:
        parts.append(gaps_table(report))
    for part in parts:
        if part is not None:
            console.print(part)
    if "findings" in sections:
        console.print(Text("Findings (largest possible gain first)", style="bold underline"))
        if not report["findings"]:
            console.print("No finding: no rule matched this trace.")
        for p in findings_panels(report):
            console.print(p)
