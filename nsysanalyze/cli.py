"""Command line: a thin layer over :mod:`nsysanalyze.analysis` and the renderers.

Exit codes: 0 success, 1 a ``compare --fail-on`` gate tripped, 2 bad input or usage.
"""
from __future__ import annotations

import os
import sqlite3
import sys
from importlib import resources
from pathlib import Path

import click
from rich.console import Console

from .analysis import Analysis
from .errors import InputError
from .render import json as json_render
from .render import markdown as md_render
from .render import terminal as term_render

FORMATS = click.Choice(["text", "json", "markdown"])
EXAMPLE_TRACE = "resnet18_workers.sqlite"


def example_path() -> Path:
    """The real trace bundled with the package (made by this project's training_workloads)."""
    return Path(str(resources.files("nsysanalyze") / "data" / EXAMPLE_TRACE))


def analyze(path: str | os.PathLike, step_range: str | None) -> dict:
    """Run the whole pipeline on one file; any failure becomes a one-line InputError naming the file."""
    try:
        with Analysis(path, step_range=step_range) as a:
            return a.to_dict()
    except InputError:
        raise
    except sqlite3.DatabaseError as e:
        raise InputError(f"{path}: corrupted or unreadable SQLite export ({e})") from None
    except MemoryError:
        raise InputError(f"{path}: out of memory while analyzing") from None
    except Exception as e:  # never a traceback for a bad file; NSYSANALYZE_DEBUG=1 shows it
        if os.environ.get("NSYSANALYZE_DEBUG"):
            raise
        raise InputError(f"{path}: cannot analyze this export ({type(e).__name__}: {e})") from None


def expand_inputs(files: tuple[str, ...], example: bool) -> list[Path]:
    """FILE arguments → SQLite files: a directory stands for the *.sqlite files inside it."""
    paths = [example_path()] if example else []
    for f in files:
        p = Path(f)
        if p.is_dir():
            inside = sorted(p.glob("*.sqlite"))
            if not inside:
                raise InputError(f"{p}: is a directory with no .sqlite exports in it")
            paths += inside
        else:
            paths.append(p)
    if not paths:
        raise click.UsageError("give at least one nsys SQLite export (or --example)")
    return paths


def emit(reports: list[dict], fmt: str, sections: tuple[str, ...]) -> None:
    if fmt == "json":
        doc = reports[0] if len(reports) == 1 else {"format_version": reports[0]["format_version"], "traces": reports}
        click.echo(json_render.render(doc))
    elif fmt == "markdown":
        click.echo("\n\n".join(md_render.render(r, sections) for r in reports))
    else:
        console = Console(highlight=False)
        for r in reports:
            term_render.render(r, console, sections)


def common_options(f):
    f = click.option("--step-range", metavar="REGEX", help="NVTX range name regex that marks a step (default: auto).")(f)
    f = click.option("--format", "fmt", type=FORMATS, default="text", show_default=True, help="Output format.")(f)
    f = click.option("--example", is_flag=True, help="Analyze the real trace bundled with nsysanalyze.")(f)
    return click.argument("files", nargs=-1)(f)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="nsysanalyze")
def cli():
    """Analyze Nsight Systems SQLite exports (nsys export --type sqlite) of training runs."""


@cli.command()
@common_options
def diagnose(files, fmt, step_range, example):
    """Summary, per-step table and ranked findings with fixes."""
    emit([analyze(p, step_range) for p in expand_inputs(files, example)], fmt, ("summary", "steps", "findings"))


@cli.command()
@common_options
def summary(files, fmt, step_range, example):
    """Whole-capture metrics per device (and per-step medians)."""
    emit([analyze(p, step_range) for p in expand_inputs(files, example)], fmt, ("summary",))


@cli.command()
@common_options
def steps(files, fmt, step_range, example):
    """Per-step table: GPU window, idle, copies, NCCL, CPU sub-ranges."""
    emit([analyze(p, step_range) for p in expand_inputs(files, example)], fmt, ("steps",))


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
        click.echo(f"nsysanalyze: error: {e.format_message()} (see --help)", err=True)
        rc = 2
    except InputError as e:
        click.echo(f"nsysanalyze: error: {e}", err=True)
        rc = 2
    except BrokenPipeError:
        sys.stderr.close()
        rc = 0
    sys.exit(rc or 0)
