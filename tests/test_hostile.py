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
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hostile import MARKDOWN_PAYLOAD, TERMINAL_PAYLOAD, hostile_copy
from markdown_it import MarkdownIt
from tiny import TinyTrace

from nsysanalyze.cli import example_path, main
from nsysanalyze.errors import InputError
from nsysanalyze.trace import tables
from nsysanalyze.render.sanitize import code_span, markdown_text, printable

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 60


def run_cli(*args, prefix=(), env_extra=None, **kw):
    """The CLI in a subprocess (``args`` may be bytes: file names that are not UTF-8)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), **(env_extra or {}))
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
    proc = run_cli(command, "--step-range", "Batch", str(hostile_trace), *(["--details"] if command == "diagnose" else []))
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


def literal_markdown(proc) -> tuple[str, list]:
    """A successful run's markdown and its tokens, checked to hold no control character, link, image,
    HTML or emphasis."""
    out = proc.stdout.decode()
    assert proc.returncode == 0, proc.stderr
    assert not CONTROL.search(out)
    tokens = markdown_tokens(out)
    kinds = {t.type for t in tokens}
    assert not kinds & {"link_open", "image", "html_inline", "html_block", "em_open"}, kinds
    return out, tokens


def test_markdown_output_renders_trace_strings_literally(hostile_trace):
    out, tokens = literal_markdown(run_cli("diagnose", "--format", "markdown", "--step-range", "Batch", str(hostile_trace)))
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    assert headings[0].startswith("nsysanalyze: ") and all(
        h.startswith("nsysanalyze: ") or h.split(" (")[0] in ("Summary", "Per step", "Findings", "Where the GPU waited")
        for h in headings), headings
    text = "".join(t.content for t in tokens if t.type == "text")  # outside code spans (never linked)
    assert "@octocat" not in text and "@\u200boctocat" in text        # no mention
    assert "://evil" not in text and ":\u200b//evil" in text           # no autolink
    assert "$x^2$" not in out                                          # no math
    assert "[link](http:\u200b//evil.example)" in text and "`code`" in text  # shown as written
    snippet = out.split("```python\n", 1)[1].split("```", 1)[0]
    assert "DataLoader(" in snippet and "\\n" not in snippet  # the fixes' code snippets stay code
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


# --- saved JSON reports given to compare, plot and report ---

@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """The saved JSON report of the bundled real trace."""
    path = tmp_path_factory.mktemp("saved") / "good.json"
    proc = run_cli("diagnose", "--example", "--format", "json")
    assert proc.returncode == 0
    path.write_bytes(proc.stdout)
    return path


def _edited(doc: dict, edit: str) -> object:
    d = json.loads(json.dumps(doc))
    exec(edit, {"d": d})
    return d.get("_doc", d)


MALFORMED = [  # (python edit of the report d, words of the message); d["_doc"] replaces the whole document
    ("d['_doc'] = []", "expected an object"),
    ("d['_doc'] = None", "expected an object"),
    ("del d['trace']", "trace: missing"),
    ("d['trace'] = 'x'", "trace: expected an object"),
    ("del d['trace']['path']", "trace.path: missing"),
    ("d['trace']['processes'] = {}", "trace.processes: expected a list"),
    ("d['trace']['devices'][0]['deviceId'] = '0'", "trace.devices[0].deviceId: expected an integer"),
    ("d['summary']['devices'][0]['window_end'] = None", "window_end: expected a finite number"),
    ("d['summary']['devices'][0]['idle_ns'] = 'lots'", "idle_ns: expected a finite number"),
    ("del d['summary']['devices'][0]['window_ns']", "window_ns: missing"),
    ("d['steps'][0]['window_ns'] = [1]", "steps[0].window_ns: expected a finite number (at most 2**63 in magnitude), got a list"),
    ("d['steps'][0]['name'] = 3", "steps[0].name: expected a string"),
    ("d['steps'] = 'none'", "steps: expected a list"),
    ("d['findings'][0]['severity'] = 'urgent'", "severity: expected one of"),
    ("d['findings'][0]['evidence'] = []", "evidence: expected an object"),
    ("d['findings'][0]['gain_pct'] = True", "gain_pct: expected a finite number (at most 2**63 in magnitude), got a boolean"),
    ("d['notes'] = [1]", "notes[0]: expected a string"),
    ("d['format_version'] = '1'", "format_version: expected an integer"),
]


@pytest.mark.parametrize("edit, words", MALFORMED)
def test_malformed_saved_report_is_one_line(edit, words, saved, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(_edited(json.loads(saved.read_text()), edit)))
    for argv in (["compare", bad, saved], ["plot", saved, bad, "-o", tmp_path / "p.png"],
                 ["report", saved, "--baseline", bad, "-o", tmp_path / "r.html"]):
        with pytest.raises(SystemExit) as e:  # in-process: anything but SystemExit fails the test
            main([str(a) for a in argv])
        err = capsys.readouterr().err
        assert e.value.code == 2 and err.count("\n") == 1, err
        assert words in err and "not a single-trace nsysanalyze JSON report" in err


@pytest.mark.parametrize("text", ["[" * 100_000, '{"a": NaN', "\xff\xfe", '{"format_version": 1e999}'])
def test_unparsable_saved_report_is_one_line(text, saved, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_bytes(text.encode("latin-1"))
    one_line_error(run_cli("compare", str(bad), str(saved)))


def test_saved_reports_of_real_traces_are_accepted(saved, tmp_path):
    from nsysanalyze.saved_report import read_report

    assert read_report(saved)["trace"]["path"]
    proc = run_cli("compare", str(saved), str(saved), "--fail-on", "step_time>+5%")
    assert proc.returncode == 0, proc.stderr


# --- diagnose --jobs workers never outlive the parent; a dead worker is one line naming its file ---

@pytest.fixture(scope="module")
def slow_exports(tmp_path_factory) -> list[Path]:
    """Two synthetic unit-test exports (real nsys schema) with 1M kernels each: seconds of work per worker."""
    folder = tmp_path_factory.mktemp("slow")
    t = TinyTrace(folder / "rank0.sqlite")
    t.process(100)
    t.kernel(0, 10, 1, 100)
    cols = [r[1] for r in t.conn.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)") if r[3]]
    values = {"start": "i * 20", "end": "i * 20 + 10", "correlationId": "i + 1", "globalPid": str(100 << 24),
              "streamId": "7", "demangledName": "1", "shortName": "1", "contextId": "1"}
    names = sorted(set(cols) | set(values))
    t.conn.execute(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL ({', '.join(map(repr, names))}) "
                   "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000000) "
                   f"SELECT {', '.join(values.get(c, '0') for c in names)} FROM n")
    first = t.close()
    second = folder / "rank1.sqlite"
    shutil.copyfile(first, second)
    return [first, second]


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
    return out


def _open_export(pid: int) -> str | None:
    """The .sqlite file a process has open, if any."""
    try:
        links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    except OSError:
        return None
    return next((link for link in links if link.endswith(".sqlite")), None)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _busy_workers(slow_exports):
    """Start diagnose --jobs 2 on the slow exports; return (process, {worker pid: file it has open})."""
    proc = subprocess.Popen([sys.executable, "-m", "nsysanalyze", "diagnose", "--jobs", "2", *map(str, slow_exports)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        busy = {w: f for w in _children(proc.pid) if (f := _open_export(w))}
        if len(busy) == 2:
            return proc, busy
        time.sleep(0.05)
    proc.kill()
    pytest.fail("the workers did not start")


def _gone(pids, within_s=10.0) -> bool:
    deadline = time.monotonic() + within_s
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(_alive(p) for p in pids)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_sigterm_kills_the_workers_and_exits_143(slow_exports):
    proc, busy = _busy_workers(slow_exports)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=TIMEOUT) == 143
    assert b"Traceback" not in proc.stderr.read()
    assert _gone(busy)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_workers_exit_when_the_parent_is_killed(slow_exports):
    proc, busy = _busy_workers(slow_exports)
    proc.kill()
    proc.wait(timeout=TIMEOUT)
    assert _gone(busy, within_s=5)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_a_dead_worker_is_one_line_naming_its_file(slow_exports):
    proc, busy = _busy_workers(slow_exports)
    victim, its_file = next(iter(busy.items()))
    os.kill(victim, signal.SIGKILL)  # as the OOM killer does
    assert proc.wait(timeout=TIMEOUT) == 2
    err = proc.stderr.read().decode()
    assert err.count("\n") == 1 and err.startswith("nsysanalyze: error:"), err
    assert its_file in err and "killed by signal 9" in err
    assert _gone(busy)


# --- .nsys-rep: private temp export, validated, cached by content; timeout; `--`; one-line failures ---
# A stand-in `nsys` on PATH (a shell script) plays each behaviour; its arguments are
# export --type sqlite --force-overwrite true -o OUT -- IN  ($7 = OUT, $8 = "--", $9 = IN).

def fake_nsys(tmp_path: Path, body: str) -> dict:
    """An environment whose PATH starts with an `nsys` running ``body``, and a private export cache."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    script = bindir / "nsys"
    script.write_text(f'#!/bin/sh\necho "$@" >> "{tmp_path}/nsys-calls"\n{body}\n')
    script.chmod(0o755)
    return {"PATH": f"{bindir}:{os.environ['PATH']}", "XDG_CACHE_HOME": str(tmp_path / "cache")}


def rep_naming(tmp_path: Path, source: Path, name: str = "run.nsys-rep") -> Path:
    """A .nsys-rep whose content names the real export the stand-in nsys copies (padded to 4 kB)."""
    rep = tmp_path / name
    rep.write_text(str(source).ljust(4096))
    return rep


COPY_NAMED = 'cp "$(tr -d " " < "$9")" "$7"'


def cached(tmp_path: Path) -> list[str]:
    """The cache's files but the entries' manifests."""
    return sorted(n for n in os.listdir(tmp_path / "cache" / "nsysanalyze") if not n.endswith(".manifest.json"))


def test_nsys_rep_export_is_private_validated_and_keyed_by_content(tmp_path):
    env = fake_nsys(tmp_path, COPY_NAMED)
    rep = rep_naming(tmp_path, example_path())
    first = run_cli("summary", "--format", "json", str(rep), env_extra=env)
    assert first.returncode == 0, first.stderr
    calls = (tmp_path / "nsys-calls").read_text().split()
    out, dashdash, arg = calls[6], calls[7], calls[8]
    assert dashdash == "--" and arg == str(rep.resolve())          # file names never read as options
    assert Path(out).parent == tmp_path / "cache" / "nsysanalyze" and Path(out).name.startswith(".run.")
    assert cached(tmp_path) == [next(iter(cached(tmp_path)))] and cached(tmp_path)[0].startswith("run-")
    again = run_cli("summary", "--format", "json", str(rep), env_extra=env)
    assert again.stdout == first.stdout and len((tmp_path / "nsys-calls").read_text().splitlines()) == 1  # reused
    # the same size and mtime but other content: exported again, not the stale export
    other = tmp_path / "other.sqlite"
    int64_edge_trace(other)
    st = rep.stat()
    rep_naming(tmp_path, other)
    os.utime(rep, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert rep.stat().st_size == st.st_size
    changed = run_cli("summary", "--format", "json", str(rep), env_extra=env)
    assert changed.returncode == 0 and changed.stdout != first.stdout
    assert len(cached(tmp_path)) == 2


@pytest.mark.parametrize("body, words", [
    ("echo garbage > \"$7\"", "did not produce an SQLite export"),
    ("exit 0", "did not produce an SQLite export (empty file)"),
    (f"cp {ROOT}/tests/data/nsys_schema.sql \"$7\"", "did not produce an SQLite export"),
    ("printf 'Loading...\\n\\033[31mERROR: unsupported report version\\033[0m\\nbye\\n' >&2; exit 3",
     "failed (exit 3): \\x1b[31mERROR: unsupported report version"),
])
def test_bad_nsys_export_is_one_line_and_never_cached(body, words, tmp_path):
    env = fake_nsys(tmp_path, body)
    rep = rep_naming(tmp_path, example_path())
    assert words in one_line_error(run_cli("summary", str(rep), env_extra=env))
    assert cached(tmp_path) == []  # no partial or garbage file kept
    good = fake_nsys(tmp_path, COPY_NAMED)
    assert run_cli("summary", str(rep), env_extra=good).returncode == 0  # and the next run exports afresh


def test_hanging_nsys_is_killed_after_the_timeout(tmp_path):
    env = fake_nsys(tmp_path, f'sleep 300 & echo $! > "{tmp_path}/child"; wait')
    rep = rep_naming(tmp_path, example_path())
    began = time.monotonic()
    line = one_line_error(run_cli("summary", "--nsys-timeout", "1", str(rep), env_extra=env))
    assert "did not finish in 1 s (--nsys-timeout)" in line and time.monotonic() - began < 30
    assert _gone([int((tmp_path / "child").read_text())], within_s=5)  # its whole process group is gone
    assert cached(tmp_path) == []


def test_rep_named_like_an_option_reaches_nsys_as_a_file(tmp_path, monkeypatch):
    env = fake_nsys(tmp_path, COPY_NAMED)
    rep_naming(tmp_path, example_path(), name="-o.nsys-rep")
    proc = run_cli("summary", "--", "-o.nsys-rep", env_extra=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "nsys-calls").read_text().split()[7:] == ["--", str(tmp_path / "-o.nsys-rep")]


def test_saved_report_whose_summary_is_not_an_object(tmp_path):
    """Found by the hypothesis test: a saved report with "summary": true crashed the format-1 rename."""
    from nsysanalyze.errors import InputError
    from nsysanalyze.saved_report import read_report

    p = tmp_path / "bad.json"
    p.write_text(json.dumps({"format_version": 3, "trace": {}, "summary": True}))
    with pytest.raises(InputError, match="not a single-trace nsysanalyze JSON report"):
        read_report(p)


@pytest.mark.parametrize("last_duration, refused", [(1 << 62, True), (1 << 61, False)])
def test_duration_totals_are_checked_to_the_last_row(last_duration, refused):
    """check_summable adds the durations of every row: a frame (built here, no trace) of 3,145,733 rows whose
    only non-zero duration is the last row's, at and below the 2**62 bound."""
    n = 3 * (1 << 20) + 5
    end = np.zeros(n, dtype=np.int64)
    end[-1] = last_duration
    frame = pd.DataFrame({"start": np.zeros(n, dtype=np.int64), "end": end})
    if refused:
        with pytest.raises(InputError, match="durations add up past 2\\*\\*62"):
            tables.check_summable(frame, "CUPTI_ACTIVITY_KIND_KERNEL")
    else:
        tables.check_summable(frame, "CUPTI_ACTIVITY_KIND_KERNEL")
