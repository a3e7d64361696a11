"""The CLI as a user runs it: the bundled example, the three formats, several files."""
import json
import os
import subprocess
import sys

import pytest
from conftest import fixture_trace


def run(*args):
    return subprocess.run([sys.executable, "-m", "nsysanalyze", *map(str, args)], capture_output=True, text=True,
                          timeout=300)


def test_example_is_a_real_trace_with_the_first_rung_of_the_ladder():
    proc = run("diagnose", "--example", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert d["trace"]["nsys_version"] == "2023.4.4.54" and d["trace"]["step_family"] == "Batch {n}"
    assert d["trace"]["devices"][0]["name"] == "NVIDIA H200"
    assert [f["rule"] for f in d["findings"]] == ["dataloader-workers", "pin-memory"]


def test_text_and_markdown_carry_findings_and_fixes():
    text = run("diagnose", "--example")
    md = run("diagnose", "--example", "--format", "markdown", "--details")
    assert text.returncode == md.returncode == 0
    for out in (text.stdout, md.stdout):
        assert "dataloader-workers" in out and "num_workers=8" in out and "get batch" in out
    assert md.stdout.startswith("## nsysanalyze:") and "| step |" in md.stdout


def test_summary_and_steps_sections():
    summary = run("summary", "--example", "--format", "markdown").stdout
    steps = run("steps", "--example", "--format", "markdown").stdout
    assert "### Summary" in summary and "### Per step" not in summary and "### Findings" not in summary
    assert "### Per step" in steps and "Batch 11" in steps and "### Summary" not in steps


def test_several_rank_files_give_a_cross_rank_view():
    files = [fixture_trace(f"vit_l32_2gpu_ddp_{r}.sqlite") for r in (0, 1)]
    proc = run("diagnose", "--format", "json", "--jobs", "2", *files)
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert len(d["traces"]) == 2 and "ranks" in d


@pytest.mark.parametrize("args", [("diagnose", "--example", "--format", "json"), ("diagnose", "--example"),
                                  ("summary", "no-such-export.sqlite"),
                                  ("diagnose", "--format", "json", "--jobs", "2",
                                   fixture_trace("vit_l32_2gpu_ddp_0.sqlite"), fixture_trace("vit_l32_2gpu_ddp_1.sqlite"))])
def test_the_command_ends_at_once_with_everything_written(args):
    """``python -m nsysanalyze`` ends its process as soon as its output is flushed (``cli.program``: no
    interpreter teardown): the same stdout, stderr and status as ``main()`` ending through the interpreter's
    normal exit — a report, the terminal view, a bad input, and two jobs' worker processes."""
    fast = run(*args)
    normal = subprocess.run([sys.executable, "-c", "import sys; from nsysanalyze.cli import main; main(sys.argv[1:])",
                             *map(str, args)], capture_output=True, text=True, timeout=300)
    assert fast.stdout + fast.stderr and (fast.returncode, fast.stdout, fast.stderr) == (normal.returncode, normal.stdout,
                                                                                         normal.stderr)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize("fmt", ["json", "text", "markdown"])
def test_an_output_that_cannot_be_written_is_one_line_and_status_2(fmt):
    """stdout on a full disk (/dev/full): one line on stderr and status 2, never a traceback nor a success."""
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "nsysanalyze", "diagnose", "--example", "--format", fmt],
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("nsysanalyze: error:") and "No space left" in proc.stderr


@pytest.mark.parametrize("args, closed, status", [(("summary", "no-such-export.sqlite"), 2, 2),
                                                  (("diagnose", "--example", "--format", "json"), 1, 0)])
def test_a_stream_closed_before_the_start_keeps_the_status(args, closed, status):
    """stderr closed (``2>&-``): a bad input still exits 2 (its line has nowhere to go), not 1 from a
    traceback that cannot be printed; stdout closed (``>&-``): the report goes nowhere and the run succeeds,
    never a traceback about the closed stream."""
    proc = subprocess.run([sys.executable, "-m", "nsysanalyze", *args], stdout=subprocess.PIPE if closed == 2 else None,
                          stderr=subprocess.PIPE if closed == 1 else None, timeout=300,
                          preexec_fn=lambda: os.close(closed))
    assert proc.returncode == status
    assert b"Traceback" not in (proc.stdout or b"") + (proc.stderr or b"")


def test_nsys_timeout_lasts_for_its_command_only(tiny_path, monkeypatch):
    """--nsys-timeout reaches --jobs workers through the environment and is put back when the command ends:
    a later command in the same process uses the default again."""
    from click.testing import CliRunner
    from nsysanalyze.cli import cli
    from nsysanalyze.trace.open import NSYS_TIMEOUT_ENV

    monkeypatch.delenv(NSYS_TIMEOUT_ENV, raising=False)
    assert CliRunner().invoke(cli, ["summary", "--nsys-timeout", "7", str(tiny_path)]).exit_code == 0
    assert NSYS_TIMEOUT_ENV not in os.environ
    monkeypatch.setenv(NSYS_TIMEOUT_ENV, "30")
    assert CliRunner().invoke(cli, ["summary", "--nsys-timeout", "7", str(tiny_path)]).exit_code == 0
    assert os.environ[NSYS_TIMEOUT_ENV] == "30"
