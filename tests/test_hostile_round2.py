"""Issue 19, the second adversarial pass: one test (or a few) per numbered defect, each failing on the code
before its fix. CLI runs are subprocesses with a timeout (a hang fails the test), as in test_hostile.py.

Inputs: the real trace bundled with the package; ``tiny_path`` and TinyTrace files are synthetic unit-test
traces on the real nsys schema (conftest.py, tiny.py) whose expected values are exact by construction.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hostile import MARKDOWN_PAYLOAD, TERMINAL_PAYLOAD, hostile_copy
from test_hostile import (COPY_NAMED, CONTROL, ROOT, TIMEOUT, _gone, cached, fake_nsys, int64_edge_trace,
                          markdown_tokens, one_line_error, rep_naming, run_cli)

from nsysanalyze.cli import example_path


# --- 1: compare and report never open a FIFO (the one input gate stats first) ---

@pytest.mark.parametrize("where", ["base", "new", "file", "baseline", "baseline.json"])
def test_1_compare_and_report_refuse_a_fifo_at_once(where, tmp_path):
    fifo = tmp_path / ("p.json" if where.endswith(".json") else "p.sqlite")
    os.mkfifo(fifo)
    real = str(example_path())
    argv = {"base": ["compare", str(fifo), real], "new": ["compare", real, str(fifo)],
            "file": ["report", str(fifo), "-o", str(tmp_path / "r.html")],
            "baseline": ["report", real, "--baseline", str(fifo), "-o", str(tmp_path / "r.html")],
            "baseline.json": ["report", real, "--baseline", str(fifo), "-o", str(tmp_path / "r.html")]}[where]
    assert "is a FIFO" in one_line_error(run_cli(*argv))
    assert not (tmp_path / "r.html").exists()  # the claimed output is released


# --- 2: kernel names reach the terminal and markdown as inert text ---

@pytest.fixture(scope="module")
def hostile_kernels(tmp_path_factory):
    payload = TERMINAL_PAYLOAD + MARKDOWN_PAYLOAD
    return hostile_copy(example_path(), tmp_path_factory.mktemp("hk"), payload, payload, payload,
                        name="k[link=http:x]c[bold]b.sqlite")


def test_2_kernels_text_shows_escapes_and_no_markup(hostile_kernels):
    proc = run_cli("kernels", "--top", "3", str(hostile_kernels), env_extra={"COLUMNS": "400"})
    out = proc.stdout.decode()
    assert proc.returncode == 0, proc.stderr
    assert not CONTROL.search(out), repr(CONTROL.search(out))
    assert "\\x1b]0;pwned\\x07" in out               # shown, not obeyed
    assert "k[link=http:x]c[bold]b.sqlite" in out   # the path in the title is not rich markup


def test_2_kernels_markdown_keeps_names_in_their_code_spans(hostile_kernels):
    proc = run_cli("kernels", "--top", "3", "--format", "markdown", str(hostile_kernels))
    out = proc.stdout.decode()
    assert proc.returncode == 0, proc.stderr
    assert not CONTROL.search(out)
    tokens = markdown_tokens(out)
    assert not {t.type for t in tokens} & {"link_open", "image", "html_inline", "html_block", "em_open"}
    text = "".join(t.content for t in tokens if t.type == "text")
    assert "@octocat" not in text and "://evil" not in text  # no mention or autolink outside code
    spans = [t.content for t in tokens if t.type == "code_inline"]
    assert sum("`code`" in s and "@octocat" in s for s in spans) == 3  # each name whole in one code span


# --- 9: concurrent writers of one new OUT: exactly one wins, the others are told ---

def test_9_concurrent_reports_to_the_same_new_file(tmp_path, tiny_path):
    (tmp_path / "out").mkdir()
    out = tmp_path / "out" / "same.html"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    procs = [subprocess.Popen([sys.executable, "-m", "nsysanalyze", "report", str(tiny_path), "-o", str(out)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) for _ in range(4)]
    results = [(p.wait(timeout=TIMEOUT), p.stderr.read().decode()) for p in procs]
    assert sorted(rc for rc, _ in results) == [0, 2, 2, 2], results
    assert all("already exists; pass --force" in err for rc, err in results if rc == 2)
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert os.listdir(out.parent) == ["same.html"]


def test_9_a_failed_run_releases_its_claim(tmp_path):
    out = tmp_path / "new.html"
    one_line_error(run_cli("report", str(tmp_path / "missing.sqlite"), "-o", str(out)))
    assert not out.exists()


# --- 10: SIGTERM removes partial files and the nsys child's process group ---

SIGTERM_WHILE_WRITING = """
import os, pathlib, signal, sys, time
from nsysanalyze.render import plot
def stopped(path, *a, **k):
    pathlib.Path(path).write_bytes(b'half')
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)
plot.save = lambda reports, tmp, labels=None: stopped(tmp)
pathlib.Path.write_text = lambda self, *a, **k: stopped(self)
from nsysanalyze.cli import main
main(sys.argv[1:])
"""


@pytest.mark.parametrize("command", ["plot", "report"])
def test_10_sigterm_while_writing_leaves_nothing(command, tmp_path, tiny_path):
    (tmp_path / "out").mkdir()
    out = tmp_path / "out" / ("o.png" if command == "plot" else "o.html")
    proc = subprocess.run([sys.executable, "-c", SIGTERM_WHILE_WRITING, command, str(tiny_path), "-o", str(out)],
                          capture_output=True, timeout=TIMEOUT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 143, proc.stderr
    assert b"Traceback" not in proc.stderr
    assert os.listdir(out.parent) == []  # no .o.*.partial.* file, no placeholder


def test_10_sigterm_during_an_nsys_export_stops_its_group(tmp_path):
    env = fake_nsys(tmp_path, f'cp "$(tr -d " " < "$9")" "$7"; sleep 300 & echo $! > "{tmp_path}/child"; wait')
    rep = rep_naming(tmp_path, example_path())
    proc = subprocess.Popen([sys.executable, "-m", "nsysanalyze", "summary", str(rep)], stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, env=dict(os.environ, PYTHONPATH=str(ROOT), **env))
    deadline = time.monotonic() + TIMEOUT
    while not (tmp_path / "child").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=TIMEOUT) == 143
    assert _gone([int((tmp_path / "child").read_text())], within_s=5)
    assert cached(tmp_path) == []  # the partial export is gone


# --- 11: the .nsys-rep cache uses only the entry this user's run wrote for this report ---

def _summary(rep, env) -> bytes:
    proc = run_cli("summary", "--format", "json", str(rep), env_extra=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _calls(tmp_path) -> int:
    return len((tmp_path / "nsys-calls").read_text().splitlines())


@pytest.mark.parametrize("tamper", ["planted", "truncated", "symlink", "no manifest"])
def test_11_a_tampered_cache_entry_is_exported_afresh(tamper, tmp_path):
    env = fake_nsys(tmp_path, COPY_NAMED)
    rep = rep_naming(tmp_path, example_path())
    first = _summary(rep, env)
    entry = tmp_path / "cache" / "nsysanalyze" / cached(tmp_path)[0]
    other = int64_edge_trace(tmp_path / "other.sqlite")
    other_bytes = other.read_bytes()
    if tamper == "planted":
        entry.unlink()
        shutil.copyfile(other, entry)
    elif tamper == "truncated":
        with open(entry, "r+b") as f:
            f.truncate(entry.stat().st_size // 2)
    elif tamper == "symlink":
        entry.unlink()
        entry.symlink_to(other)
    else:
        Path(f"{str(entry)[:-len('.sqlite')]}.manifest.json").unlink()
    assert _summary(rep, env) == first and _calls(tmp_path) == 2   # exported again, the same report
    assert other.read_bytes() == other_bytes and not entry.is_symlink()
    assert _summary(rep, env) == first and _calls(tmp_path) == 2   # and that entry is then reused


def test_11_an_nsys_whose_child_holds_its_pipes(tmp_path):
    env = fake_nsys(tmp_path, f'{COPY_NAMED}; sleep 300 & echo $! > "{tmp_path}/child"; exit 0')
    rep = rep_naming(tmp_path, example_path())
    began = time.monotonic()
    proc = run_cli("summary", "--nsys-timeout", "20", str(rep), env_extra=env)
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - began < 15          # not held until the timeout
    assert _gone([int((tmp_path / "child").read_text())], within_s=5)
