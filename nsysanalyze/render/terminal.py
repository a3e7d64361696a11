"""Terminal renderer (rich): the verdict first, then findings with fixes, then the tables.

Layout: one line naming the trace; per process/GPU a headline (step time, GPU idle) and its
``Next:`` line (the top finding) — with several GPUs one compact line each, so every verdict comes
first; notes; the findings (fix, snippet whole, evidence); then, when asked, the summary, per-step
and CPU sub-range tables.

Nothing is ever cropped: when stdout is not a terminal (CI logs, ``| tee``, ``> file``) the page is
rendered at full width (:func:`stdout_console`); in a narrow terminal prose wraps between words
keeping its indent (a number stays with its unit), snippets are printed as soft-wrapped lines (the
terminal wraps them), and tables (:class:`WordTable`) wrap text cells between words, keep numbers
whole and leave out named columns when even that does not fit.
"""
from __future__ import annotations

import os
import re
import sys

from rich.console import Console
from rich.cells import cell_len
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from .format import (DETAILS_HINT, FINDINGS_TITLE, GAP_HEADERS, LEDGER_HEADERS, STEPS_TITLE, STEP_COLUMNS,
                     SUBRANGES_TITLE, SUMMARY_TITLE, compact_headlines, device_label, evidence_pairs, gain_text,
                     gap_cells, gaps_title, headlines, keeping_snippets, ledger_cells, ledger_title, ms, pct,
                     step_cells, subrange_table, summary_cells, timeline_hint, trace_line)
from .sanitize import for_text, printable

SEVERITY_STYLE = {"high": "bold red", "medium": "yellow", "low": "cyan", "info": "green"}
# Width used when stdout is not a terminal: lines are as long as their content, never folded.
FULL_WIDTH = 10_000
# Per-step columns dropped first when a terminal is too narrow (least important first).
STEP_DROP_ORDER = ["munmap", "NCCL exp. ms", "DtoD", "HtoD hidden", "CPU ms", "HtoD ms", "NCCL ms", "GPU"]


class StdoutConsole(Console):
    """A console whose broken pipe (``| head``) is a BrokenPipeError for the CLI to end quietly with the
    command's own exit status (rich's default exits 1, the code of a tripped gate, whatever happened)."""

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


def column_widths(columns: list[list[str]], wrap: list[bool], room: int) -> list[int] | None:
    """Widths (cells, without padding) of columns (header first, then the cells) that fit ``room`` with every
    cell of a ``wrap`` column wrapped only between words, every other cell whole (its header wrapped between
    words); None when even that does not fit. The widest columns give
    way first (one cap for all, as low as their longest word)."""
    longest = [max((cell_len(line) for c in col for line in c.split("\n")), default=0) for col in columns]
    word = [max((cell_len(w) for w in col[0].split()), default=0) for col in columns]  # headers wrap between words
    shortest = [max((cell_len(w) for c in col for w in c.split()), default=0) if w else
                max([h] + [cell_len(line) for c in col[1:] for line in c.split("\n")])
                for col, w, h in zip(columns, wrap, word)]
    if sum(shortest) > room:
        return None
    capped = lambda cap: [max(lo, min(hi, cap)) for lo, hi in zip(shortest, longest)]  # noqa: E731
    low, high = 0, max(longest, default=0)
    while low < high:  # the largest cap that fits
        mid = (low + high + 1) // 2
        low, high = (mid, high) if sum(capped(mid)) <= room else (low, mid - 1)
    return capped(low)


class WordTable:
    """A table that never splits a word or a number: text columns (``left``) wrap between words, number
    columns never wrap (``wrap=False``: no column wraps); when the console is too narrow even for that, the
    columns of ``drop`` (headers, in order; default: the number columns from the right, then the text
    columns after the first) are left out, and a line under the table names them. Only a single word
    wider than the whole console is folded."""

    def __init__(self, title: str, headers: list[str], rows: list[list], left=(0,), drop: list[str] | None = None,
                 wrap: bool = True):
        self.title, self.headers, self.left, self.wrap = title, list(headers), tuple(left), wrap
        self.rows = [list(r) for r in rows]
        later = list(reversed(range(1, len(headers))))
        self.drop = drop if drop is not None else [headers[i] for i in later if i not in left] + \
            [headers[i] for i in later if i in left]

    def add_row(self, *cells) -> None:
        self.rows.append(list(cells))

    def layout(self, width: int) -> tuple[list[int], list[int] | None, list[str]]:
        """(kept column indices, their widths or None when nothing fits, dropped headers) at ``width``."""
        dropped: list[str] = []
        while True:
            keep = [i for i, h in enumerate(self.headers) if h not in dropped]
            columns = [[self.headers[i]] + [str(getattr(r[i], "plain", r[i])) for r in self.rows] for i in keep]
            wrap = [self.wrap and i in self.left for i in keep]
            widths = column_widths(columns, wrap, width - 3 * len(keep) - 1)  # padding 2 + a border per column
            left = [h for h in self.drop if h not in dropped and h in self.headers]
            if widths is not None or not left or len(keep) == 1:
                return keep, widths, dropped
            dropped.append(left[0])

    def table(self, width: int) -> tuple[Table, list[str]]:
        keep, widths, dropped = self.layout(width)
        table = Table(title=Text(printable(self.title)), title_justify="left")  # Text: never read as rich markup
        for n, i in enumerate(keep):
            table.add_column(Text(printable(self.headers[i])), justify="left" if i in self.left else "right",
                             overflow="fold", width=None if widths is None else widths[n])
        for r in self.rows:
            table.add_row(*[c if isinstance(c, Text) else Text(printable(str(c))) for c in (r[i] for i in keep)])
        return table, dropped

    def __rich_console__(self, console: Console, options):
        table, dropped = self.table(options.max_width)
        yield table
        if dropped:
            yield Text(f"columns left out at this width: {', '.join(dropped)} (widen the terminal, "
                       "or --format csv or json)", style="dim")


def table_of(title: str, headers: list[str], rows: list[list[str]], left: tuple[int, ...] = (0,),
             drop: list[str] | None = None) -> WordTable:
    """A :class:`WordTable`: the columns numbered in ``left`` are text (left-aligned, wrapped between
    words), the others numbers (right-aligned, whole)."""
    return WordTable(title, headers, rows, left, drop)


UNIT_AFTER_NUMBER = re.compile(r"(?<=\d) (?=(?:ns|µs|ms|s|B|kB|MB|GB|GB/s|pp)\b)")
KEEP_TOGETHER = "\ue000"  # stands for a space that must not break while a line is wrapped (one cell wide)


def indented(console: Console, text: Text | str, first: Text | str = "", indent: int = 0) -> Text:
    """``first`` + ``text`` wrapped to the console between words (never between a number and its unit), its
    continuation lines indented by ``indent`` (prose keeps its indent); one line when it fits or the console
    is not a terminal (full width)."""
    whole = (Text(first) if isinstance(first, str) else first) + (Text(text) if isinstance(text, str) else text)
    if console.width >= FULL_WIDTH or cell_len(whole.plain) <= console.width:
        return whole
    glued = Text(UNIT_AFTER_NUMBER.sub(KEEP_TOGETHER, whole.plain), style=whole.style, spans=whole.spans)
    out = Text()
    for n, line in enumerate(glued.wrap(console, max(console.width - indent, 20))):
        line.rstrip()
        out.append("\n" + " " * indent if n else "")
        out.append_text(Text(line.plain.replace(KEEP_TOGETHER, " "), style=line.style, spans=line.spans))
    return out


def summary_table(report: dict) -> Table | None:
    devices = report["summary"]["devices"]
    if not devices:
        return None
    headers = ["metric"] + [device_label(d, report["trace"]["processes"]) for d in devices]
    return table_of(SUMMARY_TITLE, headers, summary_cells(devices))


def steps_table(report: dict) -> WordTable | None:
    """The per-step table: no cell wraps; in a narrow console its least important columns are left out."""
    if not report["steps"]:
        return None
    return WordTable(STEPS_TITLE, [h for h, _, _ in STEP_COLUMNS], [step_cells(s) for s in report["steps"]],
                     drop=STEP_DROP_ORDER, wrap=False)


def subranges_table(report: dict) -> Table | None:
    rows = subrange_table(report)
    if not rows:
        return None
    return table_of(SUBRANGES_TITLE, ["range", "time", "share of step"],
                    [[name, ms(ns), pct(share)] for name, ns, share in rows])


def ledger_table(report: dict) -> Table | None:
    """The ledger at the findings' scope: its largest rows per device and the finding that claimed each."""
    cells = ledger_cells(report)
    return table_of(ledger_title(report), LEDGER_HEADERS, cells, left=(0, 1, 2, 5),
                    drop=["tags", "share", "device"]) if cells else None


def gaps_table(report: dict) -> Table | None:
    """Where the GPU waited: the top idle causes per device (attribution)."""
    cells = gap_cells(report)
    drop = ["after sync", "before 1st launch", "kind", "device"]
    return table_of(gaps_title(report), GAP_HEADERS, cells, left=(0, 1, 2), drop=drop) if cells else None


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
    """Heading, title, fix, snippet (whole), evidence as labelled values with units; wrapped prose keeps
    its indent."""
    console.print(indented(console, Text.assemble(
        (f["rule"], SEVERITY_STYLE.get(f["severity"], "")),
        f" · {f['severity']} · confidence {f['confidence']:.0%} · {gain_text(f)}{where}"),
        Text(f"{index}. ", style="bold"), 3))
    console.print(indented(console, Text(f["title"], style="bold"), "   ", 3))
    console.print(indented(console, Text.assemble(("Fix: ", "bold"), f["fix"]), "   ", 3))
    if f["snippet"]:
        console.print(snippet_text(f["snippet"], lexer), soft_wrap=True)
    pairs = evidence_pairs(f)
    if pairs:
        console.print(indented(console, " · ".join(f"{k} {v}" for k, v in pairs), Text("   evidence: ", style="dim"), 3))


def print_findings(console: Console, findings: list[dict], top: int | None, where=lambda f: "",
                   framework: str | None = None) -> None:
    """The findings (the first ``top`` of them), largest possible gain first; snippets in the framework's language."""
    lexer = SNIPPET_LEXER.get(framework or "", "python")
    console.print(Text(FINDINGS_TITLE, style="bold underline"))
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
    """The trace line, then per process/GPU its headline and its Next: line (several GPUs: one compact
    line each, so every GPU's verdict comes first), then the notes."""
    console.print(indented(console, Text(trace_line(report), style="bold"), indent=2))
    if len(report["summary"]["devices"]) > 1:
        for line in compact_headlines(report):
            console.print(indented(console, line, "  ", 4))
    else:
        for head, nxt in headlines(report):
            console.print(indented(console, head, "  ", 4))
            console.print(indented(console, Text(nxt, style="bold"), "    ", 6))
    for note in report["notes"]:
        console.print(indented(console, note, Text("note: ", style="yellow"), 6))


def print_tables(report: dict, console: Console, sections) -> None:
    """The summary table, then the per-step table (fitted to the width), the CPU sub-ranges and, beside the
    findings (diagnose --details), the ledger."""
    table = summary_table(report) if "summary" in sections else None
    if table is not None:
        console.print(table)
    if "steps" not in sections:
        return
    table = steps_table(report)
    if table is not None:
        console.print(table)
    table = subranges_table(report)
    if table is not None:
        console.print(table)
    table = ledger_table(report) if "findings" in sections else None  # diagnose --details: beside its findings
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
        console.print(Text(timeline_hint([report["trace"]["path"]]), style="dim"))
    tables = [s for s in sections if s != "findings"]
    if tables and details:
        console.print()
        print_tables(report, console, sections)
    elif tables:
        console.print(Text(DETAILS_HINT, style="dim"))
