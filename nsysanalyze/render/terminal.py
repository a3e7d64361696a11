"""Terminal renderer (rich): the verdict first, then findings with fixes, then the tables.

Layout: one line naming the trace; per process/GPU a headline (step time, GPU idle) and its
``Next:`` line (the top finding); notes; the findings (fix, snippet whole, evidence); then, when
asked, the summary, per-step and CPU sub-range tables.

Nothing is ever cropped: when stdout is not a terminal (CI logs, ``| tee``, ``> file``) the page is
rendered at full width (:func:`stdout_console`); in a narrow terminal text wraps, snippets are
printed as soft-wrapped lines (the terminal wraps them), and the per-step table drops its least
important columns (named in a line under it) until it fits, folding rather than cutting the rest.
"""
from __future__ import annotations

import os
import sys

from rich.console import Console
from rich.measure import Measurement
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from .format import (STEP_COLUMNS, device_label, evidence_pairs, gain_text, headlines, keeping_snippets, ms, pct,
                     step_cells, subrange_table, summary_cells, trace_line)
from .sanitize import for_text, printable

SEVERITY_STYLE = {"high": "bold red", "medium": "yellow", "low": "cyan", "info": "green"}
# Width used when stdout is not a terminal: lines are as long as their content, never folded.
FULL_WIDTH = 10_000
# Per-step columns dropped first when a terminal is too narrow (least important first).
STEP_DROP_ORDER = ["munmap", "NCCL exp. ms", "DtoD", "HtoD hidden", "CPU ms", "HtoD ms", "NCCL ms", "GPU"]


class StdoutConsole(Console):
    """A console whose broken pipe (``| head``) is a BrokenPipeError for the CLI to end quietly with exit 0
    (rich's default exits 1, the code of a tripped gate)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # nothing more reaches the closed pipe, not even at exit
        raise BrokenPipeError


def stdout_console() -> Console:
    """A console for stdout: the terminal's width on a terminal, else full width with no wrapping."""
    console = StdoutConsole(highlight=False)
    if console.is_terminal:
        return console
    return StdoutConsole(highlight=False, width=FULL_WIDTH, soft_wrap=True)


def fits(console: Console, table: Table) -> bool:
    """Whether ``table`` at its natural width (no cell wrapped) fits the console."""
    return Measurement.get(console, console.options.update_width(FULL_WIDTH), table).maximum <= console.width


def table_of(title: str, headers: list[str], rows: list[list[str]], left: tuple[int, ...] = (0,)) -> Table:
    """A table whose cells fold (never crop with '…') when the terminal is narrower than them; the
    columns numbered in ``left`` are left-aligned, the others (numbers) right-aligned."""
    table = Table(title=Text(printable(title)), title_justify="left")  # Text: never read as rich markup
    for i, head in enumerate(headers):
        table.add_column(Text(printable(head)), justify="left" if i in left else "right", overflow="fold")
    for row in rows:
        table.add_row(*[Text(printable(c)) for c in row])
    return table


def summary_table(report: dict) -> Table | None:
    devices = report["summary"]["devices"]
    if not devices:
        return None
    headers = ["metric"] + [device_label(d, report["trace"]["processes"]) for d in devices]
    return table_of("Summary (whole capture; step medians where marked)", headers, summary_cells(devices))


def steps_table(report: dict, console: Console) -> tuple[Table | None, list[str]]:
    """The per-step table fitted to the console, and the headers of the columns it had to drop."""
    if not report["steps"]:
        return None, []
    headers = [h for h, _, _ in STEP_COLUMNS]
    cells = [step_cells(s) for s in report["steps"]]
    dropped: list[str] = []
    title = "Per step (* first step: its window starts at its own GPU work; medians skip it)"
    while True:
        keep = [i for i, h in enumerate(headers) if h not in dropped]
        table = table_of(title, [headers[i] for i in keep], [[r[i] for i in keep] for r in cells])
        left = [h for h in STEP_DROP_ORDER if h not in dropped]
        if fits(console, table) or not left:
            return table, dropped
        dropped.append(left[0])


def subranges_table(report: dict) -> Table | None:
    rows = subrange_table(report)
    if not rows:
        return None
    return table_of("CPU sub-ranges (median per step)", ["range", "time", "share of step"],
                    [[name, ms(ns), pct(share)] for name, ns, share in rows])


def gaps_table(report: dict) -> Table | None:
    """Where the GPU waited: the top idle causes per device (attribution)."""
    rows = report.get("gaps") or []
    if not rows:
        return None
    labels = {(d["globalPid"], d["deviceId"]): device_label(d, report["trace"]["processes"])
              for d in report["summary"]["devices"]}
    shown: dict = {}
    cells = []
    for r in rows:
        key = (r["globalPid"], r["deviceId"])
        shown[key] = shown.get(key, 0) + 1
        if shown[key] <= GAP_ROWS:
            cells.append([labels.get(key, ""), str(r["cause"]), r["cause_kind"], ms(r["ns"]), ms(r["before_launch_ns"]),
                          ms(r["after_sync_ns"])])
    return table_of("Where the GPU waited (idle per step median, or whole capture)",
                    ["device", "cause", "kind", "idle", "before 1st launch", "after sync"], cells, left=(0, 1, 2))


GAP_ROWS = 5  # idle causes shown per device
SNIPPET_LEXER = {"cuda": "c", "openmp": "c"}


def snippet_text(code: str, lexer: str = "python") -> Text:
    """The snippet, highlighted, indented; printed soft-wrapped so no line is ever cut."""
    text = Syntax(code, lexer, theme="ansi_dark", background_color="default").highlight(code)
    text.rstrip()
    indented = Text()
    for i, line in enumerate(text.split("\n")):
        indented.append("\n" if i else "")
        indented.append("     ")
        indented.append_text(line)
    return indented


def print_finding(console: Console, index: int, f: dict, where: str = "", lexer: str = "python") -> None:
    """Heading, title, fix, snippet (whole), evidence as labelled values with units."""
    console.print(Text.assemble((f"{index}. ", "bold"), (f["rule"], SEVERITY_STYLE.get(f["severity"], "")),
                                f" · {f['severity']} · confidence {f['confidence']:.0%} · {gain_text(f)}{where}"))
    console.print(Text("   " + f["title"], style="bold"))
    console.print(Text.assemble(("   Fix: ", "bold"), f["fix"]))
    if f["snippet"]:
        console.print(snippet_text(f["snippet"], lexer), soft_wrap=True)
    pairs = evidence_pairs(f)
    if pairs:
        console.print(Text.assemble(("   evidence: ", "dim"), " · ".join(f"{k} {v}" for k, v in pairs)))


def print_findings(console: Console, findings: list[dict], top: int | None, where=lambda f: "",
                   framework: str | None = None) -> None:
    """The findings (the first ``top`` of them), largest possible gain first; snippets in the framework's language."""
    lexer = SNIPPET_LEXER.get(framework or "", "python")
    console.print(Text("Findings (largest possible gain first)", style="bold underline"))
    if not findings:
        console.print("No finding: no rule matched this trace.")
    shown = findings if top is None else findings[:top]
    for i, f in enumerate(shown, 1):
        if i > 1:
            console.print()
        print_finding(console, i, f, where(f), lexer)
    if len(shown) < len(findings):
        console.print(Text(f"{len(findings) - len(shown)} more finding(s) not shown (--top {top}).", style="dim"))


def print_headline(report: dict, console: Console) -> None:
    """The trace line, then per process/GPU its headline and its Next: line, then the notes."""
    console.print(Text(trace_line(report), style="bold"))
    for head, nxt in headlines(report):
        console.print(Text("  " + head))
        console.print(Text("    " + nxt, style="bold"))
    for note in report["notes"]:
        console.print(Text("note: ", style="yellow") + Text(note))


def print_tables(report: dict, console: Console, sections) -> None:
    """The summary table, then the per-step table (fitted to the width) and the CPU sub-ranges."""
    table = summary_table(report) if "summary" in sections else None
    if table is not None:
        console.print(table)
    if "steps" not in sections:
        return
    table, dropped = steps_table(report, console)
    if table is not None:
        console.print(table)
    if dropped:
        console.print(Text(f"columns left out at this width: {', '.join(dropped)} (widen the terminal, "
                           "or --format csv)", style="dim"))
    table = subranges_table(report)
    if table is not None:
        console.print(table)


def render(report: dict, console: Console, sections=("summary", "steps", "findings"), top: int | None = None,
           details: bool = True) -> None:
    """One report: headline, findings (with ``"findings"`` in sections), then the tables when ``details``."""
    report = keeping_snippets(report, for_text)  # trace strings printed, never obeyed
    print_headline(report, console)
    if "findings" in sections:
        console.print()
        print_findings(console, report["findings"], top, framework=report["trace"].get("framework"))
        table = gaps_table(report)  # the evidence behind the verdict: shown with it, not behind --details
        if table is not None:
            console.print()
            console.print(table)
    tables = [s for s in sections if s != "findings"]
    if tables and details:
        console.print()
        print_tables(report, console, sections)
    elif tables:
        console.print(Text("Summary and per-step tables: --details.", style="dim"))
