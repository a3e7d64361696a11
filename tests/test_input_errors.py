"""Bad input: one line on stderr, exit code 2, never a traceback; inputs are never modified."""
import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys


from conftest import shared_trace

import nsysanalyze
from nsysanalyze.render.contract import report as contract_report


def run_cli(*args):
    """Run the CLI as a user would, in a subprocess."""
    return subprocess.run([sys.executable, "-m", "nsysanalyze", *map(str, args)], capture_output=True, text=True,
                          timeout=120)


def assert_one_line_error(proc):
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert lines[0].startswith("nsysanalyze: error:")
    return lines[0]


def test_missing_file(tmp_path):
    assert "no such file" in assert_one_line_error(run_cli("diagnose", tmp_path / "nope.sqlite"))


def test_directory_without_exports(tmp_path):
    assert "no .sqlite" in assert_one_line_error(run_cli("diagnose", tmp_path))


def test_empty_file(tmp_path):
    p = tmp_path / "empty.sqlite"
    p.write_bytes(b"")
    assert "empty file" in assert_one_line_error(run_cli("summary", p))


def test_not_sqlite(tmp_path):
    p = tmp_path / "notes.sqlite"
    p.write_text("hello, this is text\n" * 100)
    assert "not an SQLite file" in assert_one_line_error(run_cli("diagnose", p))


def test_sqlite_but_not_nsys(tmp_path):
    p = tmp_path / "other.sqlite"
    with sqlite3.connect(p) as c:
        c.execute("CREATE TABLE t (x INTEGER)")
    assert "not an Nsight Systems export" in assert_one_line_error(run_cli("diagnose", p))


def test_truncated_export(tmp_path):
    src = shared_trace("h200/resnet18-baseline-nvtx.sqlite")
    p = tmp_path / "truncated.sqlite"
    p.write_bytes(src.read_bytes()[: src.stat().st_size // 3])
    assert_one_line_error(run_cli("diagnose", "--format", "json", p))


def test_nsys_rep_without_nsys(tmp_path, monkeypatch):
    p = tmp_path / "run.nsys-rep"
    p.write_bytes(b"\0" * 64)
    env = dict(os.environ, PATH="/nonexistent")
    proc = subprocess.run([sys.executable, "-m", "nsysanalyze", "diagnose", str(p)], capture_output=True, text=True,
                          env=env, timeout=60)
    line = assert_one_line_error(proc)
    assert "nsys export --type sqlite" in line


def test_bad_option_is_one_line():
    assert "--nope" in assert_one_line_error(run_cli("diagnose", "--nope"))


def test_malformed_step_regex(tmp_path):
    src = shared_trace("h200/resnet18-baseline-nvtx.sqlite")
    assert_one_line_error(run_cli("steps", "--step-range", "(", src))


def test_export_without_gpu_work_gets_a_note():
    src = shared_trace("h200/cpu-nvtx0.2.11-recorded.sqlite")
    proc = run_cli("diagnose", src)
    assert proc.returncode == 0, proc.stderr
    assert "No GPU activity" in proc.stdout


def digest(p):
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_inputs_are_opened_read_only(tmp_path):
    src = shared_trace("h200/resnet18-baseline-nvtx.sqlite")
    p = tmp_path / "run.sqlite"
    shutil.copyfile(src, p)
    os.utime(p, (1_000_000_000, 1_000_000_000))
    before = (digest(p), p.stat().st_mtime_ns, sorted(os.listdir(tmp_path)))
    with nsysanalyze.open(p) as a:
        contract_report(a)
    assert run_cli("diagnose", "--format", "json", p).returncode == 0
    assert (digest(p), p.stat().st_mtime_ns, sorted(os.listdir(tmp_path))) == before  # no journal/WAL/lock files


def test_read_only_file_on_read_only_dir(tmp_path):
    src = shared_trace("h200/resnet18-baseline-nvtx.sqlite")
    d = tmp_path / "ro"
    d.mkdir()
    p = d / "run.sqlite"
    shutil.copyfile(src, p)
    p.chmod(0o444)
    d.chmod(0o555)
    try:
        assert run_cli("summary", p).returncode == 0
    finally:
        d.chmod(0o755)


def test_nsys_rep_is_exported_with_nsys_on_path_into_a_cache(tmp_path):
    """A stand-in `nsys` on PATH (it copies a real export to the -o path) checks the export plumbing."""
    src = shared_trace("h200/resnet18-baseline-nvtx.sqlite")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "nsys"
    fake.write_text(f'#!/bin/sh\n# args: export --type sqlite --force-overwrite true -o OUT IN\ncp "{src}" "$7"\n')
    fake.chmod(0o755)
    reports = tmp_path / "reports"
    reports.mkdir()
    rep = reports / "run.nsys-rep"
    rep.write_bytes(b"\0" * 64)
    reports.chmod(0o555)  # the export must not be written beside the report
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}", XDG_CACHE_HOME=str(tmp_path / "cache"))
    try:
        proc = subprocess.run([sys.executable, "-m", "nsysanalyze", "summary", "--format", "json", str(rep)],
                              capture_output=True, text=True, env=env, timeout=120)
    finally:
        reports.chmod(0o755)
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(reports)) == ["run.nsys-rep"]
    assert len(list((tmp_path / "cache" / "nsysanalyze").glob("run-*.sqlite"))) == 1
