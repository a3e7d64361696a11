"""Command line: a thin layer over :mod:`nsysanalyze.analysis` and the renderers.

Exit codes: 0 success, 1 a ``compare --fail-on`` gate tripped, 2 bad input or usage.
Only click is imported up front: the analysis (pandas, numpy, SQLAlchemy) and the renderers
(rich, matplotlib) are imported by the commands that use them, so ``--help`` starts at once.
"""
from __future__ import annotations

import os
import re
import sqlite3
import stat
import sys
from importlib import resources
from pathlib import Path

import click

from . import batch
from .errors import InputError
from .outputs import atomic_output, check_output, exit_on_sigterm, release_claims
from .render import json as json_render
from .render.sanitize import markdown_text, printable
from .steplimit import DEFAULT_MAX_STEPS, binned, capped
from .trace.open import NSYS_TIMEOUT_ENV, NSYS_TIMEOUT_S, read_head, stat_input

FORMATS = click.Choice(["text", "json", "markdown"])
TABLE_FORMATS = click.Choice(["text", "json", "markdown", "csv"])
EXAMPLE_TRACE = "resnet18_baseline.sqlite"


def example_path() -> Path:
    """The real trace bundled with the package (made by this project's training_workloads)."""
    return Path(str(resources.files("nsysanalyze") / "data" / EXAMPLE_TRACE))


def analyze(path: str | os.PathLike, step_range: str | None) -> dict:
    """The whole pipeline on one file (render.contract.report_of, imported on use: the CLI starts without pandas)."""
    from .render.contract import report_of as report

    return report(path, step_range)


def run_analysis(path: str | os.PathLike, work, step_range: str | None):
    """``work(Analysis)`` on one file (analysis.run: one-line errors naming the file)."""
    from .analysis import run

    return run(path, work, step_range)


def reject_non_export(p: Path) -> None:
    """Files that are not an export but are often given as one: say what to do with them."""
    if p.suffix.lower() == ".qdstrm":
        raise InputError(f"{p}: is an nsys capture stream, not a report: import it with QdstrmImporter (in nsys' "
                         f"host directory: QdstrmImporter -i {p.name}), then export the .nsys-rep it writes with "
                         f"`nsys export --type sqlite -o {p.stem}.sqlite {p.stem}.nsys-rep`")
    if stat.S_ISDIR(stat_input(p).st_mode):
        return
    head = read_head(p, 64).lstrip()
    if p.suffix.lower() == ".json" or head.startswith(b"{"):
        raise InputError(f"{p}: is a JSON file (a saved report?); this command needs the nsys SQLite export "
                         "(nsys export --type sqlite); compare, plot and report also read saved JSON reports")


def expand_inputs(files: tuple[str, ...], example: bool, saved_reports: bool = False) -> list[Path]:
    """FILE arguments → SQLite files: a directory stands for the *.sqlite files inside it; saved JSON
    reports are accepted only with ``saved_reports`` (plot)."""
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
            if not (saved_reports and p.suffix == ".json"):
                reject_non_export(p)
            paths.append(p)
    if not paths:
        raise click.UsageError("give at least one nsys SQLite export (or --example)")
    return paths


def emit(reports: list[dict], fmt: str, sections: tuple[str, ...], max_steps: int = DEFAULT_MAX_STEPS,
         top: int | None = None, details: bool = True, per_rank: bool = False) -> None:
    """Print the reports. With "ranks" in ``sections``, files form jobs (``ranks.jobs``); a job of several
    ranks (several files, or one file holding several processes/GPUs) is led by its cross-rank view
    (JSON: key "ranks", and "jobs" for several files), its per-rank reports follow only with ``per_rank``;
    a file that belongs to no job is printed alone after its note. Text and markdown show at most
    ``max_steps`` step rows per report (JSON and CSV: every step)."""
    from . import ranks
    from .siblings import with_job_hint

    groups = ranks.jobs(reports) if "ranks" in sections else [{"traces": list(range(len(reports))), "note": None}]
    for job in groups:
        mine = [reports[i] for i in job["traces"]]
        several = len(mine) > 1 or ranks.rank_count(mine[0]) > 1
        job["view"] = ranks.cross_rank(mine) if "ranks" in sections and several else None
    reports = [with_job_hint(r) if any(j["view"] is None and j["traces"] == [i] for j in groups) else r
               for i, r in enumerate(reports)]  # one rank of a job given alone: say so, and how to see the job
    if fmt in ("text", "markdown"):
        reports = [capped(r, max_steps) for r in reports]
    if fmt == "json":
        click.echo(json_render.render(json_doc(reports, groups)))
    elif fmt == "csv":
        from .render import csv as csv_render

        key = "steps" if "steps" in sections else "summary"
        rows = [{"trace": r["trace"]["path"], **row} for r in reports
                for row in (r["steps"] if key == "steps" else r["summary"]["devices"])]
        click.echo(csv_render.render(rows), nl=False)
    elif fmt == "markdown":
        from .render import markdown as md_render
        from .render import ranks as ranks_render

        parts = []
        for job in groups:
            mine = [reports[i] for i in job["traces"]]
            parts += [f"> {markdown_text(job['note'])}"] if job["note"] else []
            parts += [ranks_render.render_markdown(job["view"], mine, top, details)] if job["view"] is not None else []
            parts += [md_render.render(r, sections, top, details) for r in mine if job["view"] is None or per_rank]
        click.echo("\n\n".join(parts))
    else:
        from rich.text import Text

        from .render import ranks as ranks_render
        from .render import terminal as term_render

        console = term_render.stdout_console()
        for n, job in enumerate(groups):
            mine, view = [reports[i] for i in job["traces"]], job["view"]
            if n:
                console.print()
            if job["note"]:
                console.print(Text("note: ", style="yellow") + Text(printable(job["note"])))
            if view is not None:
                ranks_render.render_text(view, console, mine, top, details)
                if not per_rank:
                    console.print(Text("Each rank's own headline, findings and tables: --per-rank.", style="dim"))
            for i, r in enumerate(mine if view is None or per_rank else []):
                if i or view is not None:
                    console.print()
                term_render.render(r, console, sections, top, details)


def json_doc(reports: list[dict], groups: list[dict]) -> dict:
    """One report as is (with "ranks" when it holds several ranks); several: "traces", "jobs", and
    "ranks" when they all form one job."""
    if len(reports) == 1:
        view = groups[0]["view"]
        return reports[0] if view is None else {**reports[0], "ranks": view}
    doc = {"format_version": reports[0]["format_version"], "traces": reports}
    if len(groups) == 1 and groups[0]["view"] is not None:
        doc["ranks"] = groups[0]["view"]
    doc["jobs"] = [{"traces": j["traces"], "ranks": j["view"], "note": j["note"]} for j in groups]
    return doc


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


def _regex(ctx, param, value: str | None) -> str | None:
    """--step-range: a valid Python regex (re.search on NVTX range names), else a usage error naming it."""
    if value is not None:
        try:
            re.compile(value)
        except re.error as e:
            raise click.BadParameter(f"{value!r} is not a valid regular expression ({e})") from None
    return value


STEP_RANGE = click.option("--step-range", metavar="REGEX", callback=_regex,
                          help="NVTX range name regex that marks a step (default: auto).")


def check_step_range(reports: list[dict], step_range: str | None) -> list[dict]:
    """An explicit --step-range must select steps: else one error line naming the regex and the file."""
    if step_range is not None:
        for r in reports:
            if not r["steps"]:
                raise InputError(f"{r['trace']['path']}: --step-range {step_range!r} selects no step: no NVTX range "
                                 "name matches it (re.search), or the matching ranges launched no GPU work")
    return reports


MAX_STEPS = click.option("--max-steps", type=click.IntRange(min=1), default=DEFAULT_MAX_STEPS, show_default=True,
                         help="Step rows shown in tables (first and last) and bars in charts (means of "
                              "consecutive steps) beyond this many; JSON keeps every step.")


def _set_nsys_timeout(ctx, param, value):
    """Through the environment, so --jobs workers see it too; put back when the command ends (a later
    command in the same process, e.g. cli.main called twice, does not inherit it)."""
    if value is None:
        return
    before = os.environ.get(NSYS_TIMEOUT_ENV)
    os.environ[NSYS_TIMEOUT_ENV] = repr(value)

    def put_back():
        if before is None:
            os.environ.pop(NSYS_TIMEOUT_ENV, None)
        else:
            os.environ[NSYS_TIMEOUT_ENV] = before
    ctx.call_on_close(put_back)


NSYS_TIMEOUT = click.option("--nsys-timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
                            envvar=NSYS_TIMEOUT_ENV, callback=_set_nsys_timeout, expose_value=False,
                            help=f"Longest a .nsys-rep export by nsys may take (default {NSYS_TIMEOUT_S:g}).")


def common_options(f, formats=FORMATS):
    f = MAX_STEPS(f)
    f = NSYS_TIMEOUT(STEP_RANGE(f))
    f = click.option("--format", "fmt", type=formats, default="text", show_default=True, help="Output format.")(f)
    f = click.option("--example", is_flag=True, help="Analyze the real trace bundled with nsysanalyze.")(f)
    return click.argument("files", nargs=-1)(f)


def table_options(f):
    """common_options with --format csv too (one row per device or step, a ``trace`` column first)."""
    return common_options(f, TABLE_FORMATS)


PIPE_STATUS = "nsysanalyze.status_if_the_pipe_closes"  # ctx.meta key: the exit status a command has decided


class ClosedPipe(Exception):
    """stdout's reader went away (``| head``): end quietly with ``status``, the exit status the command had
    decided before printing (1 for a tripped gate: ``set -o pipefail`` still sees it), else 0."""

    def __init__(self, status: int):
        super().__init__(status)
        self.status = status


class Commands(click.Group):
    """The command group: a broken pipe while parsing (--help) or running becomes :class:`ClosedPipe`, never
    click's own handling of it (exit 1, the code of a tripped gate)."""

    def make_context(self, *args, **kwargs):
        try:
            return super().make_context(*args, **kwargs)
        except BrokenPipeError:
            raise ClosedPipe(0) from None

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            raise ClosedPipe(ctx.meta.get(PIPE_STATUS, 0)) from None


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
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
@click.option("--top", type=click.IntRange(min=1), default=None, metavar="N", help="Show the first N findings only.")
@click.option("--details", is_flag=True, help="Also print the summary, per-step, CPU sub-range and idle-cause tables.")
@click.option("--per-rank", is_flag=True, help="With several ranks: also each rank's own full output.")
def diagnose(files, fmt, step_range, max_steps, example, jobs, dask_address, top, details, per_rank):
    """Headline and next step per GPU, ranked findings with fixes; tables with --details.

    Several FILES (or a directory of them: one export per rank) are analyzed in parallel; files that
    belong to one job are led by a cross-rank view: step time per rank, spread, slowest rank, NCCL
    imbalance, likely straggler. A file holding several processes (torchrun under one nsys) gets the
    same view, one rank per GPU.
    """
    reports = check_step_range(analyze_paths(expand_inputs(files, example), step_range, jobs, dask_address), step_range)
    emit(reports, fmt, ("summary", "steps", "findings", "ranks"), max_steps, top, details, per_rank)


@cli.command()
@table_options
def summary(files, fmt, step_range, max_steps, example):
    """Whole-capture metrics per device (and per-step medians)."""
    reports = check_step_range([analyze(p, step_range) for p in expand_inputs(files, example)], step_range)
    emit(reports, fmt, ("summary",), max_steps)


@cli.command()
@table_options
def steps(files, fmt, step_range, max_steps, example):
    """Per-step table: GPU window, idle, copies, NCCL, CPU sub-ranges."""
    reports = check_step_range([analyze(p, step_range) for p in expand_inputs(files, example)], step_range)
    emit(reports, fmt, ("steps",), max_steps)


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


def kernel_doc(a, base: bool, top: int | None) -> dict:
    """The kernel view of one analysis as plain data (docs/json.md, ``kernels``)."""
    from .kernels import kernel_table
    from .kernels import top as top_kernels
    from .render.contract import FORMAT_VERSION, records
    from .trace.tables import kernel_name_column

    table = kernel_table(a, base)
    procs = [{"globalPid": int(p.globalPid), "pid": int(p.pid), "name": str(p.name)}
             for p in a.trace.processes.itertuples() if p.globalPid in set(table["globalPid"])]
    devices = table.groupby(["globalPid", "deviceId"], sort=False).agg(kernel_ns=("total_ns", "sum"),
                                                                      kernel_names=("name", "size"))
    return {"format_version": FORMAT_VERSION, "trace": {"path": str(a.trace.source), "processes": procs},
            "name_column": kernel_name_column(a.trace.schema, base),
            "devices": records(devices.reset_index()), "kernels": records(top_kernels(table, top))}


@cli.command("kernels")
@click.argument("files", nargs=-1)
@click.option("--format", "fmt", type=TABLE_FORMATS, default="text", show_default=True, help="Output format.")
@click.option("--top", type=click.IntRange(min=0), default=20, show_default=True, metavar="N",
              help="Kernels shown per process/GPU (0: all).")
@click.option("--base", is_flag=True, help="Short kernel names (as nsys stats --base) instead of demangled ones.")
@click.option("--example", is_flag=True, help="Analyze the real trace bundled with nsysanalyze.")
@STEP_RANGE
def kernels_cmd(files, fmt, top, base, example, step_range):
    """Top kernels per process/GPU by total time: count, total/mean/median/min/max, share, per step.

    Names as `nsys stats -r cuda_gpu_kern_sum` shows them (demangled; --base for short names).
    """
    from .render import csv as csv_render
    from .render import kernels as kernels_render
    from .render import terminal as term_render

    docs = [run_analysis(p, lambda a: kernel_doc(a, base, top), step_range) for p in expand_inputs(files, example)]
    if fmt == "json":
        out = docs[0] if len(docs) == 1 else {"format_version": docs[0]["format_version"], "traces": docs}
        click.echo(json_render.render(out))
    elif fmt == "csv":
        click.echo(csv_render.render([{"trace": d["trace"]["path"], **k} for d in docs for k in d["kernels"]]), nl=False)
    elif fmt == "markdown":
        click.echo("\n".join(kernels_render.render_markdown(d) for d in docs))
    else:
        console = term_render.stdout_console()
        for d in docs:
            kernels_render.render_text(d, console)


def load_report(path: str, step_range: str | None) -> dict:
    """A report dict from an nsys export, or from a saved ``--format json`` report (*.json, checked)."""
    if not str(path).endswith(".json"):
        reject_non_export(Path(path))
        return check_step_range([analyze(path, step_range)], step_range)[0]
    from .saved_report import read_report

    return read_report(path)


def _gate_names_epilog() -> str:
    from .compare import METRICS

    names = ", ".join(m.name for m in METRICS)
    return ("\b\nGate EXPR: NAME OP VALUE, OP one of > >= < <=. Signed VALUE = change from BASE to NEW "
            "(+5% relative, +0.03 or +2ms absolute); unsigned VALUE = NEW's own level (0.3, 40%, 120ms, 1GB). "
            "Step medians when both traces have steps, else whole-capture values. "
            "'kernel:TEXT' gates the time of the kernels whose name contains TEXT, e.g. 'kernel:gemm>+10%'.\n\b\n"
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
@click.option("--allow-missing", is_flag=True,
              help="A gate on a metric not captured in a trace (null: n/a) does not fail the comparison.")
@click.option("--format", "fmt", type=FORMATS, default="text", show_default=True, help="Output format.")
@STEP_RANGE
@NSYS_TIMEOUT
@click.pass_context
def compare_cmd(ctx, base, new, fail_on, allow_missing, fmt, step_range):
    """Compare BASE and NEW (nsys exports or saved JSON reports): per-metric deltas, gates, kernel movers,
    findings.

    Exit status: 0 no gate tripped, 1 a gate tripped (or is n/a: its metric was not captured, unless
    --allow-missing), 2 bad input or a malformed gate.
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
    result = compare(*reports, gates, allow_missing)
    ctx.meta[PIPE_STATUS] = 1 if result["tripped"] else 0  # kept when the output's reader goes away
    if fmt == "json":
        click.echo(json_render.render(result))
    elif fmt == "markdown":
        click.echo(compare_render.render_markdown(result), nl=False)
    else:
        from .render import terminal as term_render

        compare_render.render_text(result, term_render.stdout_console())
    if result["tripped"]:
        ctx.exit(1)


@cli.command("plot")
@click.argument("files", nargs=-1, required=True)
@click.option("-o", "--output", "out", required=True, metavar="OUT.png|OUT.svg", help="Image file to write.")
@click.option("--label", "labels", multiple=True, metavar="TEXT",
              help="Name of each FILE's panel, in order (repeat once per file: --label before --label after).")
@FORCE
@STEP_RANGE
@MAX_STEPS
@NSYS_TIMEOUT
def plot_cmd(files, out, labels, force, step_range, max_steps):
    """Stacked bars per step (compute, copies hidden/exposed, NCCL overlapped/exposed, idle; ms), the
    median step as a dashed line; segments too small to see get a line in their colour.

    Several FILES are drawn side by side (before/after). A trace without steps is drawn as its
    whole capture, one bar per GPU. FILES may be nsys exports or saved JSON reports.
    """
    from .render import plot

    if not out.lower().endswith(plot.FORMATS):
        raise InputError(f"{out}: the plot is written as .png or .svg; give -o with one of those suffixes")
    paths = expand_inputs(files, False, saved_reports=True)
    if labels and len(labels) != len(paths):
        raise click.UsageError(f"--label given {len(labels)} time(s) for {len(paths)} file(s): give one per file")
    target = check_output(out, paths, force)
    reports = [binned(load_report(str(p), step_range), max_steps) for p in paths]
    with atomic_output(target) as tmp:
        plot.save(reports, tmp, list(labels) or None)
    click.echo(f"wrote {out}")


@cli.command("report")
@click.argument("files", metavar="FILE...", nargs=-1, required=True)
@click.option("--baseline", metavar="BASE", help="Compare with this trace (or saved JSON report).")
@click.option("-o", "--output", "out", required=True, metavar="OUT.html", help="HTML file to write.")
@FORCE
@STEP_RANGE
@MAX_STEPS
@NSYS_TIMEOUT
def report_cmd(files, baseline, out, force, step_range, max_steps):
    """One self-contained HTML page: verdict, findings, a timeline of one steady step, per-step chart,
    comparison, tables. Several FILEs (ranks of one job) give one page led by the cross-rank view."""
    from . import ranks
    from .compare import compare
    from .render import html as html_render
    from .render import plot

    target = check_output(out, [*files, baseline] if baseline else list(files), force)
    reports = [load_report(f, step_range) for f in files]
    timelines = [step_timeline_of(f, r, step_range) for f, r in zip(files, reports)]
    if len(reports) == 1:
        from .siblings import with_job_hint

        reports = [with_job_hint(reports[0])]
        base = load_report(baseline, step_range) if baseline else None
        chart = plot.svg([binned(r, max_steps) for r in ([base, reports[0]] if base else reports)])
        view = ranks.cross_rank(reports) if ranks.rank_count(reports[0]) > 1 else None  # several processes/GPUs
        page = html_render.render(capped(reports[0], max_steps), chart, compare(base, reports[0]) if base else None,
                                  timelines[0], view)
    else:
        if baseline:
            raise click.UsageError("--baseline compares one FILE with BASE; give one FILE")
        page = html_render.render_ranks([capped(r, max_steps) for r in reports], ranks.cross_rank(reports),
                                        [plot.svg([binned(r, max_steps)]) for r in reports], timelines)
    with atomic_output(target) as tmp:
        tmp.write_text(page, encoding="utf-8")
    click.echo(f"wrote {out}")


def step_timeline_of(path: str, report: dict, step_range: str | None) -> dict | None:
    """The lanes of one steady step (``nsysanalyze.timeline``), or None for a saved JSON report."""
    from .timeline import step_timeline

    if str(path).endswith(".json"):
        return None
    return run_analysis(path, lambda a: step_timeline(a.trace, report), step_range)


# ---- timeline: the Perfetto export (issue 21) ---------------------------------------------------------
@cli.command("timeline")
@click.argument("files", metavar="FILE...", nargs=-1, required=True)
@click.option("-o", "--output", "out", required=True, metavar="OUT.json",
              help="Trace file to write (Chrome trace event JSON: open it in ui.perfetto.dev).")
@click.option("--steps", "step_count", type=click.IntRange(min=1), default=5, show_default=True, metavar="N",
              help="Steady steps around the median step in the window.")
@click.option("--all", "whole", is_flag=True, help="The whole capture instead (large captures give large files).")
@FORCE
@STEP_RANGE
@NSYS_TIMEOUT
def timeline_cmd(files, out, step_count, whole, force, step_range):
    """Write a timeline of FILE's steps for ui.perfetto.dev: GPU streams, CPU threads (NVTX, blocking CUDA and
    OS calls), GPU idle by cause, the steps with the median marked, and the findings (docs/timeline.md).

    Several FILEs (ranks of one job) are placed on one time axis, one process per rank.
    """
    from . import ranks
    from . import trace_events as T
    from .render import perfetto

    paths = expand_inputs(files, False)
    target = check_output(out, paths, force)
    reports: list[dict] = []
    collected: list = []
    numbers = None
    for i in ranks.path_order(paths):  # in rank order: the first rank chooses the window's steps

        def work(a):
            from .render.contract import report as report_of_analysis

            a.keep_attribution_inputs = True
            report = check_step_range([report_of_analysis(a)], step_range)[0]
            return report, T.file_events(len(collected), a, report, None if whole else step_count, numbers)
        report, events = run_analysis(paths[i], work, step_range)
        reports.append(report)
        collected.append(events)
        numbers = numbers or events.steps
    groups = ranks.jobs(reports)
    if len(groups) > 1:
        note = next(g["note"] for g in groups if g["note"])
        raise InputError(f"the files are not one job, so they share no time axis: {note}")
    count = T.event_count(collected)
    if count >= T.LARGE_EVENTS:
        click.echo(f"nsysanalyze: warning: {out}: {count:,} events; ui.perfetto.dev loads this many slowly "
                   "(fewer with --steps N)", err=True)
    shifts, aligned = T.align(collected)
    with atomic_output(target) as tmp:
        perfetto.write(tmp, collected, reports, shifts, aligned)
    click.echo(f"wrote {out}: {count:,} events; open it in ui.perfetto.dev")
# ---- end of timeline ------------------------------------------------------------------------------------


@cli.command("explain")
@click.argument("term", nargs=-1)
def explain_cmd(term):
    """What a word of the output means (TERM: e.g. exposed, cuda_blocking, 'after sync', MAD, pp); without
    TERM, every word."""
    from .glossary import GLOSSARY, close_terms, explain

    if not term:
        for t, text in GLOSSARY.items():
            click.echo(f"{t}: {text}")
        return
    found = explain(" ".join(term))
    if found is None:
        near = close_terms(" ".join(term))
        raise click.UsageError(f"no glossary entry for {' '.join(term)!r}"
                               + (f"; did you mean: {', '.join(near)}" if near else
                                  "; `nsysanalyze explain` lists every term"))
    click.echo(f"{found[0]}: {found[1]}")


def main(argv: list[str] | None = None) -> None:
    """Entry point: turns every expected failure into one stderr line and exit code 2."""
    try:
        with exit_on_sigterm():  # SIGTERM unwinds like Ctrl-C: partial files removed, nsys children stopped
            rc = cli.main(args=argv, prog_name="nsysanalyze", standalone_mode=False)
    except click.exceptions.Exit as e:
        rc = e.exit_code
    except click.exceptions.Abort:
        say("nsysanalyze: aborted")
        rc = 130
    except click.UsageError as e:
        say(f"nsysanalyze: error: {printable(e.format_message())} (see --help)")
        rc = 2
    except (InputError, OSError) as e:  # OSError: what the command read or wrote failed at the OS (a full disk)
        say(f"nsysanalyze: error: {printable(e)}")
        rc = 2
    except ClosedPipe as e:  # the reader (| head) went away: quiet, with the status the command had decided
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more reaches it, not even at exit
        rc = e.status
    except SystemExit as e:
        rc = e.code
    finally:
        release_claims()  # outputs claimed at the start but never written
    sys.exit(rc or 0)


def program() -> None:
    """The ``nsysanalyze`` command and ``python -m nsysanalyze``: :func:`main`, then the process ends as soon as
    its output is flushed. The interpreter's own teardown (every module's and object's memory handed back one
    by one: pandas and SQLAlchemy alone ~0.07 s) costs ~0.1 s of every run and changes nothing anyone sees:
    each command closes its files and joins its pools and processes before it returns, and the outputs it
    claimed but never wrote are released in :func:`main`. A status that is not a number is printed, status 1,
    as ``sys.exit`` does."""
    try:
        main()
        status = 0
    except SystemExit as e:
        status = e.code
    if status is None:
        status = 0
    elif not isinstance(status, int):
        print(status, file=sys.stderr)
        status = 1
    for stream in (sys.stdout, sys.stderr):  # None: closed when the process started (>&-): nothing to flush
        try:
            if stream is not None:
                stream.flush()
        except BrokenPipeError:  # the reader went away after the last write: quiet, as main's ClosedPipe
            pass
        except OSError as e:  # what was left could not be written (a full disk): not a success
            say(f"nsysanalyze: error: the output could not be written: {printable(e)}")
            status = status or 2
        except ValueError:  # a closed stream: nothing left to write
            pass
    os._exit(status)


def say(line: str) -> None:
    """One line on stderr; nothing when stderr cannot be written (closed, on a full disk): the exit status still
    tells."""
    try:
        click.echo(line, err=True)
    except (OSError, ValueError):
        pass
