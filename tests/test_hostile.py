"""Hostile-input suite: special files, unreadable paths, odd file names, pending writes, impersonating views.

Every case runs the CLI in a subprocess as a user would, with a timeout (a hang fails the test), and
expects one line on stderr and exit code 2 — or, for odd but valid names, a normal analysis.
Inputs are ``tiny_path`` (a synthetic unit-test trace on the real nsys schema, conftest.py) or the
real trace bundled with the package.
"""
import json
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from hostile import MARKDOWN_PAYLOAD, TERMINAL_PAYLOAD, hostile_copy
from markdown_it import MarkdownIt
from tiny import TinyTrace

from nsysanalyze.cli import example_path
from nsysanalyze.render.sanitize import code_span, markdown_text, printable

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 60


def run_cli(*args, prefix=(), **kw):
    """The CLI in a subprocess (``args`` may be bytes: file names that are not UTF-8)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([*prefix, sys.executable, "-m", "nsysanalyze", *args], capture_output=True,
                          timeout=TIMEOUT, env=env, **kw)


def one_line_error(proc) -> str:
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 2, err
    assert "Traceback" not in err and err.count("\n") == 1 and err.startswith("nsysanalyze: error:"), err
    return err


@pytest.fixture
def fifo(tmp_path) -> Path:
    p = tmp_path / "pipe.sqlite"
    os.mkfifo(p)
    return p


@pytest.mark.parametrize("command", ["summary", "diagnose", "steps"])
def test_fifo_input_is_refused_at_once(command, fifo):
    assert "is a FIFO" in one_line_error(run_cli(command, str(fifo)))


def test_fifo_inside_a_directory_is_refused_at_once(fifo, tiny_path):
    assert "is a FIFO" in one_line_error(run_cli("diagnose", "--jobs", "2", str(fifo.parent)))


def test_fifo_as_saved_report_and_rep(tmp_path, tiny_path):
    report, rep = tmp_path / "r.json", tmp_path / "r.nsys-rep"
    os.mkfifo(report)
    os.mkfifo(rep)
    assert "is a FIFO" in one_line_error(run_cli("compare", str(report), str(tiny_path)))
    assert "is a FIFO" in one_line_error(run_cli("summary", str(rep)))
    assert "is a FIFO" in one_line_error(run_cli("redact", str(report), str(tmp_path / "o.sqlite")))


def test_devices_and_sockets_are_refused(tmp_path):
    sock_path = tmp_path / "s.sqlite"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(sock_path))
        assert "is a socket" in one_line_error(run_cli("summary", str(sock_path)))
    assert "is a character device" in one_line_error(run_cli("summary", os.devnull))
    assert "is a character device" in one_line_error(run_cli("summary", "/dev/zero"))


def test_unreadable_path_component(tmp_path, tiny_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    shutil.copyfile(tiny_path, locked / "t.sqlite")
    locked.chmod(0)
    # root ignores permissions unless it drops its capabilities (setpriv, util-linux)
    prefix = ()
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("root without setpriv: permissions are not enforced")
        prefix = ("setpriv", "--inh-caps=-all", "--bounding-set=-all", "--ambient-caps=-all")
    try:
        for target in (locked / "t.sqlite", locked):
            assert "Permission denied" in one_line_error(run_cli("summary", str(target), prefix=prefix))
    finally:
        locked.chmod(0o755)


def test_name_too_long_and_link_loop(tmp_path):
    assert "too long" in one_line_error(run_cli("summary", str(tmp_path / ("x" * 300 + ".sqlite"))))
    (tmp_path / "a.sqlite").symlink_to(tmp_path / "b.sqlite")
    (tmp_path / "b.sqlite").symlink_to(tmp_path / "a.sqlite")
    assert "symbolic links" in one_line_error(run_cli("summary", str(tmp_path / "a.sqlite")))


def test_non_utf8_file_name_is_analyzed(tmp_path):
    name = os.fsencode(tmp_path) + b"/run-\xff\xfe.sqlite"
    shutil.copyfile(example_path(), name)
    proc = run_cli(b"summary", b"--format", b"json", name)
    assert proc.returncode == 0, proc.stderr
    assert b"run-" in proc.stdout


@pytest.mark.parametrize("name", ["a\nb.sqlite", "a\rb\x1b]0;owned\x07\x1b[2J.sqlite"])
def test_control_characters_in_a_path_stay_on_one_line(name, tmp_path):
    line = one_line_error(run_cli("summary", str(tmp_path / name)))
    assert "\x1b" not in line and "\r" not in line and "\x07" not in line
    assert ("a\\nb" in line) if "\n" in name else ("\\x1b]0;owned\\x07" in line)


def test_write_ahead_log_with_changes_is_refused(tiny_path):
    con = sqlite3.connect(tiny_path)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA wal_autocheckpoint=0")
    con.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL")
    con.commit()
    try:
        assert Path(f"{tiny_path}-wal").stat().st_size > 32
        assert "write-ahead log" in one_line_error(run_cli("summary", str(tiny_path)))
    finally:
        con.close()
    assert run_cli("summary", str(tiny_path)).returncode == 0  # checkpointed on close: the log is gone


def test_hot_journal_is_refused(tiny_path):
    """A writer killed inside a transaction leaves a hot journal (the child spills pages, then dies)."""
    script = ("import os, sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('PRAGMA cache_size=1'); "
              "c.execute('BEGIN'); c.execute(\"UPDATE StringIds SET value = value || printf('%0500d', 0)\"); "
              "os._exit(0)")
    subprocess.run([sys.executable, "-c", script, str(tiny_path)], check=True, timeout=TIMEOUT)
    assert Path(f"{tiny_path}-journal").exists()
    assert "hot journal" in one_line_error(run_cli("summary", str(tiny_path)))


def test_view_named_like_an_nsys_table_is_reported(tiny_path):
    con = sqlite3.connect(tiny_path)
    con.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL RENAME TO kernels_backup")
    con.execute("CREATE VIEW CUPTI_ACTIVITY_KIND_KERNEL AS SELECT * FROM kernels_backup")
    con.commit()
    con.close()
    assert "CUPTI_ACTIVITY_KIND_KERNEL is a view" in one_line_error(run_cli("summary", str(tiny_path)))


# --- hostile strings: trace names reach the terminal and PR comments as inert text ---

CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")  # all but newline


@pytest.fixture(scope="module")
def hostile_trace(tmp_path_factory):
    """The bundled real trace with terminal and markdown payloads in NVTX, kernel and process names
    and in the file name."""
    payload = TERMINAL_PAYLOAD + MARKDOWN_PAYLOAD
    return hostile_copy(example_path(), tmp_path_factory.mktemp("hostile"), payload, payload, payload,
                        name="run\x1b]0;t\x07 # [x](e.example) @me.sqlite")


@pytest.mark.parametrize("command", ["diagnose", "summary", "steps"])
def test_trace_strings_cannot_drive_the_terminal(command, hostile_trace):
    proc = run_cli(command, str(hostile_trace), *(["--details"] if command == "diagnose" else []))
    out = proc.stdout.decode()
    assert proc.returncode == 0, proc.stderr
    assert not CONTROL.search(out), repr(CONTROL.search(out))
    assert "\\x1b]0;pwned\\x07" in out or command == "summary"  # shown, not obeyed (steps carry the NVTX name)
    assert "\\x1b]0;t\\x07" in out                                  # the file name too


def markdown_tokens(text: str) -> list:
    md = MarkdownIt("commonmark").enable("table")
    flat = []
    for tok in md.parse(text):
        flat += [tok, *(tok.children or [])]
    return flat


def test_markdown_output_renders_trace_strings_literally(hostile_trace):
    proc = run_cli("diagnose", "--format", "markdown", str(hostile_trace))
    out = proc.stdout.decode()
    assert proc.returncode == 0, proc.stderr
    assert not CONTROL.search(out)
    tokens = markdown_tokens(out)
    kinds = {t.type for t in tokens}
    assert not kinds & {"link_open", "image", "html_inline", "html_block", "em_open"}, kinds
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    assert headings[0].startswith("nsysanalyze: ") and all(
        h.startswith("nsysanalyze: ") or h in ("Summary", "Steps", "Findings") for h in headings), headings
    text = "".join(t.content for t in tokens if t.type == "text")  # outside code spans (never linked)
    assert "@octocat" not in text and "@\u200boctocat" in text        # no mention
    assert "://evil" not in text and ":\u200b//evil" in text           # no autolink
    assert "$x^2$" not in out                                          # no math
    assert "[link](http:\u200b//evil.example)" in text and "`code`" in text  # shown as written
    widths, row = [], 0
    for t in tokens:  # every table row has its header's cell count: pipes in names stay in their cell
        if t.type == "tr_open":
            row = 0
        elif t.type in ("th_open", "td_open"):
            row += 1
        elif t.type == "tr_close":
            widths.append(row)
        elif t.type == "table_close":
            assert len(set(widths)) == 1, widths
            widths = []


def test_compare_and_ranks_markdown_are_literal(hostile_trace, tmp_path):
    other = tmp_path / "other.sqlite"
    shutil.copyfile(hostile_trace, other)
    for args in (["compare", str(hostile_trace), str(other), "--format", "markdown"],
                 ["diagnose", "--jobs", "1", str(hostile_trace), str(other), "--format", "markdown"]):
        proc = run_cli(*args)
        out = proc.stdout.decode()
        assert proc.returncode == 0, proc.stderr
        assert not CONTROL.search(out)
        assert not {t.type for t in markdown_tokens(out)} & {"link_open", "image", "html_inline", "html_block"}
    text = run_cli("compare", str(hostile_trace), str(other)).stdout.decode()
    assert not CONTROL.search(text) and "\\x1b]0;t\\x07" in text


def test_sanitizer_units():
    assert printable("a\nb\x1b[2J\x9b\u202e\udcff") == "a\\nb\\x1b[2J\\x9b\\u202e\\xff"
    assert markdown_text("# [a](b) @me `c` x_y") == "\\# \\[a\\](b) @\u200bme \\`c\\` x\\_y"
    assert code_span("a`b") == "``a`b``" and code_span("`a") == "`` `a ``"


# --- values: gate numbers are bounded floats; int64 sums never wrap silently ---

@pytest.mark.parametrize("expr", ["step_time>1e999ms", "step_time>1e99999999ms", "step_time>+1e99999999%",
                                  "step_time>" + "9" * 400 + "ms", "step_time>-1e19ns", "htod_bytes>1e30GB"])
def test_absurd_gate_values_are_one_line(expr, tiny_path):
    line = one_line_error(run_cli("compare", str(tiny_path), str(tiny_path), "--fail-on", expr))
    assert "out of range" in line


def test_large_but_sane_gate_values_work(tiny_path):
    proc = run_cli("compare", str(tiny_path), str(tiny_path), "--fail-on", "step_time>1e6s", "--fail-on",
                   "htod_bytes<1e-3B")
    assert proc.returncode == 1 and b"TRIPPED" in proc.stdout  # 1 kB is not below 0.001 B: tripped


def int64_edge_trace(path: Path, **memcpy) -> Path:
    """A synthetic unit-test trace (real nsys schema) with one process, one kernel and two HtoD copies."""
    t = TinyTrace(path)
    t.process(100)
    t.kernel(0, 1000, 1, 100)
    for corr in (2, 3):
        t.memcpy(**{"start": 100, "end": 200, "corr": corr, "pid": 100, "nbytes": 1000, "copy_kind": 1, **memcpy})
    return t.close()


@pytest.mark.parametrize("memcpy, why", [({"nbytes": 1 << 62}, "byte counts add up"),
                                         ({"start": -(1 << 63) + 1}, "timestamps beyond"),
                                         ({"end": (1 << 63) - 1}, "timestamps beyond")])
def test_values_that_would_wrap_int64_sums_are_refused(memcpy, why, tmp_path):
    p = int64_edge_trace(tmp_path / "edge.sqlite", **memcpy)
    assert why in one_line_error(run_cli("summary", "--format", "json", str(p)))


def test_largest_exact_sums_are_computed(tmp_path):
    p = int64_edge_trace(tmp_path / "edge.sqlite", nbytes=(1 << 61) - 1)
    proc = run_cli("summary", "--format", "json", str(p))
    assert proc.returncode == 0, proc.stderr
    device = json.loads(proc.stdout)["summary"]["devices"][0]
    assert device["htod_bytes"] == 2 * ((1 << 61) - 1)
