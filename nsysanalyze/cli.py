"""Command line: a thin layer over :mod:`nsysanalyze.analysis` and the renderers.

Exit codes: 0 success, 1 a ``compare --fail-on`` gate tripped, 2 bad input or usage.
Only click is imported up front: the analysis (pandas, numpy, SQLAlchemy) and the renderers
(rich, matplotlib) are imported by the commands that use them, so ``--help`` starts at once.
"""
from __future__ import annotations

import os
import sqlite3
import stat
import sys
from importlib import resources
from pathlib import Path

import click

from . import batch
from .errors import InputError
from .outputs import atomic_output, check_output
from .render import json as json_render
from .render.sanitize import printable
from .steplimit import DEFAULT_MAX_STEPS, binned, capped
from .trace.open import NSYS_TIMEOUT_ENV, NSYS_TIMEOUT_S, stat_input

FORMATS = click.Choice(["text", "json", "markdown"])
EXAMPLE_TRACE = "resnet18_baseline.sqlite"


def example_path() -> Path:
    """The real trace bundled with the package (made by this project's training_workloads)."""
    return Path(str(resources.files("nsysanalyze") / "data" / EXAMPLE_TRACE))


def analyze(path: str | os.PathLike, step_range: str | None) -> dict:
    """The whole pipeline on one file (analysis.report, imported on use: the CLI starts without pandas)."""
    from .analysis import report

    return report(path, step_range)


def expand_inputs(files: tuple[str, ...], example: bool) -> list[Path]:
    """FILE arguments → SQLite files: a directory stands for the *.sqlite files inside it."""
    paths = [example_path()] if example else []
    for f in files:
        p = Path(f)
        if stat.S_ISDIR(stat_input(p).st_mode):
            try:
                inside = sorted(p / n for n in os.listdir(p) if n.endswith(".sqlite") and not n.startswith("."))
            except OSError as e:
                raise InputError(f"{p}: cannot list this directory ({e.strerror})") from None
            if not inside:
                raise InputError(f"{p}: is a directory with no .sqlite exports in it")
            for q in inside:
                stat_input(q)  # a FIFO or device among them: refused now, never opened
            paths += inside
        else:
            paths.append(p)
    if not paths:
        raise click.UsageError("give at least one nsys SQLite export (or --example)")
    return paths


def emit(reports: list[dict], fmt: str, sections: tuple[str, ...], max_steps: int = DEFAULT_MAX_STEPS) -> None:
    """Print the reports; with "ranks" in ``sections`` and several ranks (several files, or one file
    holding several processes/GPUs), the cross-rank view follows (JSON: key "ranks"). Text and
    markdown show at most ``max_steps`` step rows per report (JSON: every step)."""
    from . import ranks
    from .render import markdown as md_render
    from .render import ranks as ranks_render

    view = None
    if "ranks" in sections and (len(reports) > 1 or (reports and ranks.rank_count(reports[0]) > 1)):
        view = ranks.cross_rank(reports)
    if fmt != "json":
        reports = [capped(r, max_steps) for r in reports]
    if fmt == "json":
        doc = reports[0] if len(reports) == 1 else {"format_version": reports[0]["format_version"], "traces": reports}
        if view is not None:
            doc = {**doc, "ranks": view}
        click.echo(json_render.render(doc))
    elif fmt == "markdown":
        text = "\n\n".join(md_render.render(r, sections) for r in reports)
        click.echo(text + ("\n\n" + ranks_render.render_markdown(view) if view is not None else ""))
    else:
        from rich.console import Console

        from .render import terminal as term_render

        console = Console(highlight=False)
        for r in reports:
            term_render.render(r, console, sections)
        if view is not None:
            ranks_render.render_text(view, console)


def analyze_paths(paths: list[Path], step_range: str | None, jobs: int | None = None,
                  dask_address: str | None = None) -> list[dict]:
    """Reports of ``paths``, several at a time (batch.analyze_many); a progress bar on stderr when it is a
    terminal and there is more than one file."""
    if len(paths) < 2 or not sys.stderr.isatty():
        return batch.analyze_many(paths, step_range, jobs, dask_address)
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("analyzing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task("analyzing", total=len(paths))
        return batch.analyze_many(paths, step_range, jobs, dask_address,
                                  on_done=lambda _p: progress.advance(task))


STEP_RANGE = click.option("--step-range", metavar="REGEX",
                          help="NVTX range name regex that marks a step (default: auto).")
MAX_STEPS = click.option("--max-steps", type=click.IntRange(min=1), default=DEFAULT_MAX_STEPS, show_default=True,
                         help="Step rows shown in tables (first and last) and bars in charts (means of "
                              "consecutive steps) beyond this many; JSON keeps every step.")


def _set_nsys_timeout(ctx, param, value):
    if value is not None:  # through the environment, so --jobs workers see it too
        os.environ[NSYS_TIMEOUT_ENV] = repr(value)


NSYS_TIMEOUT = click.option("--nsys-timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
                            envvar=NSYS_TIMEOUT_ENV, callback=_set_nsys_timeout, expose_value=False,
                            help=f"Longest a .nsys-rep export by nsys may take (default {NSYS_TIMEOUT_S:g}).")


def common_options(f):
    f = MAX_STEPS(f)
    f = NSYS_TIMEOUT(STEP_RANGE(f))
    f = click.option("--format", "fmt", type=FORMATS, default="text", show_default=True, help="Output format.")(f)
    f = click.option("--example", is_flag=True, help="Analyze the real trace bundled with nsysanalyze.")(f)
    return click.argument("files", nargs=-1)(f)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="nsysanalyze")
def cli():
    """Analyze Nsight Systems SQLite exports (nsys export --type sqlite) of training runs."""


@cli.command()
@common_options
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None,
              help="Exports analyzed in parallel, one process each (default: the number of cores).")
@click.option("--dask", "dask_address", metavar="SCHEDULER_ADDRESS",
              help="Analyze the exports on this Dask cluster instead (pip install 'nsysanalyze[dask]'; "
                   "the workers must see the files at the same paths).")
def diagnose(files, fmt, step_range, max_steps, example, jobs, dask_address):
    """Summary, per-step table and ranked findings with fixes.

    Several FILES (or a directory of them: one export per rank) are analyzed in parallel and followed
    by a cross-rank view: step time per rank, spread, slowest rank, NCCL imbalance, likely straggler.
    A file holding several processes (torchrun under one nsys) gets the same view, one rank per GPU.
    """
    reports = analyze_paths(expand_inputs(files, example), step_range, jobs, dask_address)
    emit(reports, fmt, ("summary", "steps", "findings", "ranks"), max_steps)


@cli.command()
@common_options
def summary(files, fmt, step_range, max_steps, example):
    """Whole-capture metrics per device (and per-step medians)."""
    emit([analyze(p, step_range) for p in expand_inputs(files, example)], fmt, ("summary",), max_steps)


@cli.command()
@common_options
def steps(files, fmt, step_range, max_steps, example):
    """Per-step table: GPU window, idle, copies, NCCL, CPU sub-ranges."""
    emit([analyze(p, step_range) for p in expand_inputs(files, example)], fmt, ("steps",), max_steps)


FORCE = click.option("--force", is_flag=True, help="Replace OUT if it exists (never an input file).")


@cli.command("redact")
@click.argument("src", metavar="IN")
@click.argument("dst", metavar="OUT", required=False)
@FORCE
@click.option("--check", is_flag=True, help="Write nothing: list what in IN still looks identifying "
                                            "(exit 1 when something does).")
@click.pass_context
def redact_cmd(ctx, src, dst, force, check):
    """Copy IN to OUT without environment, paths, user and host names, IPs, FQDNs, UUIDs, PCI ids, the kernel
    release, the time zone and unprofiled processes (IN is never modified); metrics are unchanged."""
    from .trace.redact import identifying, redact

    if check:
        count, found = identifying(src)
        for where, kind, value, kept in found:
            kept_note = " (kept: the analysis reads it)" if kept else ""
            click.echo(f"{where}: {kind}: {printable(value)[:120]}{kept_note}")
        click.echo(f"{src}: {count} value(s) still look identifying" + (f" ({len(found)} shown)" if count > len(found)
                                                                         else "") if count else
                   f"{src}: nothing identifying found")
        ctx.exit(1 if count else 0)
    if dst is None:
        raise click.UsageError("give OUT (or --check)")
    try:
        removed = redact(src, dst, force=force)
    except sqlite3.DatabaseError as e:
        raise InputError(f"{src}: corrupted or unreadable SQLite export ({e})") from None
    what = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in removed.items() if n) or "nothing to remove"
    click.echo(f"wrote {dst}: removed {what}")


def load_report(path: str, step_range: str | None) -> dict:
    """A report dict from an nsys export, or from a saved ``--format json`` report (*.json, checked)."""
    if not str(path).endswith(".json"):
        return analyze(path, step_range)
    from .saved_report import read_report

    return read_report(path)


def _gate_names_epilog() -> str:
    from .compare import METRICS

    names = ", ".join(m.name for m in METRICS)
    return ("\b\nGate EXPR: NAME OP VALUE, OP one of > >= < <=. Signed VALUE = change from BASE to NEW "
            "(+5% relative, +0.03 or +2ms absolute); unsigned VALUE = NEW's own level (0.3, 40%, 120ms, 1GB). "
            "Step medians when both traces have steps, else whole-capture values.\n\b\n"
            f"Gate metric names: {names}")


class GateNamesCommand(click.Command):
    """A command whose epilog lists the gate metric names, built only when help is shown (imports pandas)."""

    def format_epilog(self, ctx, formatter):
        self.epilog = _gate_names_epilog()
        super().format_epilog(ctx, formatter)


@cli.command("compare", cls=GateNamesCommand)
@click.argument("base")
@click.argument("new")
@click.option("--fail-on", "fail_on", multiple=True, metavar="EXPR",
              help="Exit 1 when this gate trips, e.g. 'step_time>+5%' (repeatable).")
@click.option("--format", "fmt", type=FORMATS, default="text", show_default=True, help="Output format.")
@STEP_RANGE
@NSYS_TIMEOUT
@click.pass_context
def compare_cmd(ctx, base, new, fail_on, fmt, step_range):
    """Compare BASE and NEW (nsys exports or saved JSON reports): per-metric deltas, gates, findings.

    Exit status: 0 no gate tripped, 1 a gate tripped, 2 bad input or a malformed gate.
    """
    from .compare import GateError, compare, parse_gate
    from .render import compare as compare_render

    try:
        gates = [parse_gate(e) for e in fail_on]
    except GateError as e:
        raise click.BadParameter(str(e), param_hint="--fail-on") from None
    reports = [load_report(base, step_range), load_report(new, step_range)]
    for path, r in zip((base, new), reports):
        if gates and not r["summary"]["devices"]:
            raise InputError(f"{path}: no GPU activity in this export, nothing to gate on")
    result = compare(*reports, gates)
    if fmt == "json":
        click.echo(json_render.render(result))
    elif fmt == "markdown":
        click.echo(compare_render.render_markdown(result), nl=False)
    else:
        from rich.console import Console

        compare_render.render_text(result, Console(highlight=False))
    if result["tripped"]:
        ctx.exit(1)


@cli.command("plot")
@click.argument("files", nargs=-1, required=True)
@click.option("-o", "--output", "out", required=True, metavar="OUT.png|OUT.svg", help="Image file to write.")
@FORCE
@STEP_RANGE
@MAX_STEPS
@NSYS_TIMEOUT
def plot_cmd(files, out, force, step_range, max_steps):
    """Stacked bars per step (compute, copies hidden/exposed, NCCL overlapped/exposed, idle; ms).

    Several FILES are drawn side by side (before/after). A trace without steps is drawn as its
    whole capture, one bar per GPU. FILES may be nsys exports or saved JSON reports.
    """
    from .render import plot

    if not out.lower().endswith(plot.FORMATS):
        raise InputError(f"{out}: the plot is written as .png or .svg; give -o with one of those suffixes")
    paths = expand_inputs(files, False)
    target = check_output(out, paths, force)
    reports = [binned(load_report(str(p), step_range), max_steps) for p in paths]
    with atomic_output(target) as tmp:
        plot.save(reports, tmp)
    click.echo(f"wrote {out}")


@cli.command("report")
@click.argument("file")
@click.option("--baseline", metavar="BASE", help="Compare with this trace (or saved JSON report).")
@click.option("-o", "--output", "out", required=True, metavar="OUT.html", help="HTML file to write.")
@FORCE
@STEP_RANGE
@MAX_STEPS
@NSYS_TIMEOUT
def report_cmd(file, baseline, out, force, step_range, max_steps):
    """One self-contained HTML page: header, notes, summary, per-step chart, findings, comparison."""
    from .compare import compare
    from .render import html as html_render
    from .render import plot

    target = check_output(out, [file, baseline] if baseline else [file], force)
    new = load_report(file, step_range)
    base = load_report(baseline, step_range) if baseline else None
    chart = plot.svg([binned(r, max_steps) for r in ([base, new] if base else [new])])
    page = html_render.render(capped(new, max_steps), chart, compare(base, new) if base else None)
    with atomic_output(target) as tmp:
        tmp.write_text(page, encoding="utf-8")
    click.echo(f"wrote {out}")


def main(argv: list[str] | None = None) -> None:
    """Entry point: turns every expected failure into one stderr line and exit code 2."""
    try:
        rc = cli.main(args=argv, prog_name="nsysanalyze", standalone_mode=False)
    except click.exceptions.Exit as e:
        rc = e.exit_code
    except click.exceptions.Abort:
        click.echo("nsysanalyze: aborted", err=True)
        rc = 130
    except click.UsageError as e:
        click.echo(f"nsysanalyze: error: {printable(e.format_message())} (see --help)", err=True)
        rc = 2
    except InputError as e:
        click.echo(f"nsysanalyze: error: {printable(e)}", err=True)
        rc = 2
    except BrokenPipeError:
        sys.stderr.close()
        rc = 0
    sys.exit(rc or 0)
