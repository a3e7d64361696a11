"""Messages: one stderr line and exit 2 naming what is wrong; a broken pipe is quiet and exits 0."""
import os
import subprocess
import sys

import pytest

from conftest import fixture_trace
from nsysanalyze.cli import main

BASELINE = fixture_trace("resnet18_baseline.sqlite")


def fails(capsys, *args):
    with pytest.raises(SystemExit) as e:
        main([*map(str, args)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1, err
    return err


def test_an_invalid_regex_is_named(capsys):
    err = fails(capsys, "diagnose", BASELINE, "--step-range", "Batch (")
    assert "'Batch (' is not a valid regular expression" in err and "export" not in err
    assert "'[' is not a valid" in fails(capsys, "kernels", BASELINE, "--step-range", "[")


@pytest.mark.parametrize("command", ["diagnose", "summary", "steps"])
def test_a_step_range_that_selects_nothing_is_exit_2(capsys, command):
    err = fails(capsys, command, BASELINE, "--step-range", "^no such range$")
    assert "--step-range '^no such range$' matches no NVTX range" in err


def test_an_explicit_step_range_that_matches_is_fine(capsys):
    with pytest.raises(SystemExit) as e:
        main(["steps", str(BASELINE), "--step-range", "^Batch", "--format", "csv"])
    assert e.value.code == 0 and capsys.readouterr().out.count("Batch 1") == 3


def test_qdstrm_says_how_to_import(tmp_path, capsys):
    stream = tmp_path / "run.qdstrm"
    stream.write_bytes(b"\x00" * 64)
    err = fails(capsys, "diagnose", stream)
    assert "QdstrmImporter -i run.qdstrm" in err and "nsys export --type sqlite -o run.sqlite run.nsys-rep" in err


def test_a_json_report_where_an_export_is_needed(tmp_path, capsys):
    saved = tmp_path / "report.json"
    saved.write_text('{"format_version": 3}')
    err = fails(capsys, "kernels", saved)
    assert "is a JSON file" in err and "needs the nsys SQLite export" in err
    renamed = tmp_path / "report.sqlite"  # a saved report under the wrong suffix
    renamed.write_text('  {"format_version": 3}')
    assert "is a JSON file" in fails(capsys, "diagnose", renamed)


@pytest.mark.parametrize("args", [["kernels", "--top", "0"], ["diagnose", "--details", "--per-rank"]])
def test_broken_pipe_is_quiet_and_exit_0(args):
    files = [str(fixture_trace(f"vit_l32_2gpu_ddp_{r}.sqlite")) for r in (0, 1)]
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.Popen([sys.executable, "-m", "nsysanalyze", *args, *files], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    proc.stdout.readline()
    proc.stdout.close()  # the reader goes away, as `| head -1` does
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0 and err == ""
