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
                          literal_markdown, one_line_error, rep_naming, run_cli)

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
    _, tokens = literal_markdown(run_cli("kernels", "--top", "3", "--format", "markdown", str(hostile_kernels)))
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


def test_10_sigterm_of_diagnose_jobs_stops_every_workers_nsys_export(tmp_path):
    """diagnose --jobs 2 on two .nsys-rep files: each worker runs an nsys export that hangs (its child sleeps);
    a SIGTERM of the parent stops the workers gracefully, so each kills its nsys process group and removes
    its partial cache file: no nsys child and no cache entry is left."""
    env = fake_nsys(tmp_path, f'cp "$(tr -d " " < "$9")" "$7"; sleep 300 & echo $! > "{tmp_path}/child.$$"; wait')
    reps = [rep_naming(tmp_path, example_path(), name) for name in ("a.nsys-rep", "b.nsys-rep")]
    proc = subprocess.Popen([sys.executable, "-m", "nsysanalyze", "diagnose", "--jobs", "2", *map(str, reps)],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            env=dict(os.environ, PYTHONPATH=str(ROOT), **env))
    deadline = time.monotonic() + TIMEOUT
    while len(list(tmp_path.glob("child.*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    children = [int(p.read_text()) for p in tmp_path.glob("child.*")]
    assert len(children) == 2 and len(cached(tmp_path)) == 2  # both exports running, each with its partial file
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=TIMEOUT) == 143
    assert b"Traceback" not in proc.stderr.read()
    assert _gone(children, within_s=5)
    assert cached(tmp_path) == []


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


# --- 3: --dask with an odd address is one line naming it ---

@pytest.mark.parametrize("address", ["nonsense", "", "[::1", "tls://x:1", "inproc://x", "ucx://h:1", "h:99999"])
def test_3_odd_dask_addresses_are_one_line(address):
    line = one_line_error(run_cli("diagnose", "--example", "--dask", address))
    assert "not a Dask scheduler address" in line and repr(address) in line


def test_3_a_listener_that_is_not_a_scheduler_is_one_line():
    pytest.importorskip("distributed")
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def garbage():  # answers every connection with bytes that read as an absurd frame length
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.sendall(b"\xff" * 64)
    threading.Thread(target=garbage, daemon=True).start()
    try:
        line = one_line_error(run_cli("diagnose", "--example", "--dask", f"tcp://127.0.0.1:{server.getsockname()[1]}"))
        assert "cannot reach the Dask scheduler" in line
    finally:
        server.close()


# --- 4: saved reports that passed validation and then crashed a consumer ---

@pytest.fixture(scope="module")
def saved_doc() -> dict:
    proc = run_cli("diagnose", "--example", "--format", "json")
    assert proc.returncode == 0
    return json.loads(proc.stdout)


def _steps_with_required_keys_only(d):
    d["steps"] = [{k: s[k] for k in ("globalPid", "deviceId", "name")} for s in d["steps"]]


CRASHERS = [  # (edit of the report d, words of the message)
    (lambda d: d["steps"][0].update(idle_ns=int("9" * 400)), "steps[0].idle_ns: expected a finite number"),
    (_steps_with_required_keys_only, "steps[0].step: missing"),
    (lambda d: d["findings"][0]["evidence"].update(nested={"a": 1}), "evidence: expected an object of numbers"),
    (lambda d: d["summary"]["devices"][0].update(window_ns=1.7e308), "window_ns: expected a finite number"),
    (lambda d: d["steps"][0].update(window_ns=1.7e308), "steps[0].window_ns: expected a finite number"),
]


@pytest.mark.parametrize("edit, words", CRASHERS)
def test_4_saved_reports_that_crashed_consumers_are_one_line(edit, words, saved_doc, tmp_path, capsys):
    from nsysanalyze.cli import main

    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(saved_doc))
    doc = json.loads(json.dumps(saved_doc))
    edit(doc)
    bad.write_text(json.dumps(doc))
    for argv in (["compare", bad, good], ["compare", good, bad], ["plot", bad, "-o", tmp_path / "p.png"],
                 ["report", bad, "-o", tmp_path / "r.html"], ["report", good, "--baseline", bad, "-o", tmp_path / "s.html"]):
        with pytest.raises(SystemExit) as e:  # in-process: a traceback fails the test
            main([str(a) for a in argv])
        err = capsys.readouterr().err
        assert e.value.code == 2 and err.count("\n") == 1 and words in err, err
    assert sorted(os.listdir(tmp_path)) == ["bad.json", "good.json"]


# --- 6: inferred steps are bounded by design ---

def cycling_kernels(path: Path, names: int, count: int) -> Path:
    """A synthetic unit-test export (real nsys schema): ``count`` 10 ns kernels 20 ns apart on one GPU whose
    names cycle through ``names`` names, no NVTX."""
    from tiny import TinyTrace

    t = TinyTrace(path)
    t.process(100)
    ids = [t.string(f"kernel_{i}") for i in range(names)]
    cols = [r[1] for r in t.conn.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)") if r[3]]
    values = {"start": "i * 20", "end": "i * 20 + 10", "correlationId": "i + 1", "globalPid": str(100 << 24),
              "streamId": "7", "demangledName": f"{ids[0]} + i % {names}", "shortName": f"{ids[0]} + i % {names}",
              "contextId": "1"}
    chosen = sorted(set(cols) | set(values))
    t.conn.execute(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL ({', '.join(map(repr, chosen))}) "
                   f"WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < {count - 1}) "
                   f"SELECT {', '.join(values.get(c, '0') for c in chosen)} FROM n")
    return t.close()


def test_6_two_alternating_kernels_are_not_a_step(tmp_path):
    p = cycling_kernels(tmp_path / "pairs.sqlite", 2, 20_000)
    proc = run_cli("diagnose", "--format", "json", str(p))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["steps"] == [] and doc["trace"]["step_source"] is None


def test_6_inferred_steps_are_capped_with_a_note(tmp_path):
    from nsysanalyze.steps import MAX_INFERRED_STEPS

    periods = 2 * MAX_INFERRED_STEPS + 10
    p = cycling_kernels(tmp_path / "triples.sqlite", 3, 3 * periods)
    proc = run_cli("diagnose", "--format", "json", str(p))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["trace"]["step_source"] == "inferred"
    assert MAX_INFERRED_STEPS // 2 < len(doc["steps"]) <= MAX_INFERRED_STEPS
    assert "3 periods per step (at most 10,000 inferred steps per GPU)" in doc["trace"]["step_family"]
    assert any("3 periods per step" in n for n in doc["notes"])
    window = [s["window_ns"] for s in doc["steps"] if s["closed"]]
    assert set(window) == {3 * 3 * 20}  # three periods of three 20 ns kernel slots each


# --- 7: intervals that end before they start: one line naming the file and the table ---

def test_7_a_kernel_ending_before_it_starts_is_refused(tmp_path):
    from tiny import TinyTrace

    t = TinyTrace(tmp_path / "backwards.sqlite")
    t.process(100)
    t.kernel(0, 100, 1, 100)
    t.kernel(500, 400, 2, 100)
    p = t.close()
    line = one_line_error(run_cli("diagnose", str(p)))
    assert str(p) in line and "CUPTI_ACTIVITY_KIND_KERNEL: 1 row(s) end before they start" in line


# --- 12: untyped META_DATA_CAPTURE with an integer name ---

def test_12_integer_metadata_names_do_not_crash_redact(tmp_path):
    import sqlite3

    p = tmp_path / "untyped.sqlite"
    shutil.copyfile(example_path(), p)
    con = sqlite3.connect(p)
    con.executescript("ALTER TABLE META_DATA_CAPTURE RENAME TO old; CREATE TABLE META_DATA_CAPTURE(name, value); "
                      "INSERT INTO META_DATA_CAPTURE SELECT name, value FROM old; DROP TABLE old; "
                      "INSERT INTO META_DATA_CAPTURE VALUES (42, 'x'), (7, 12);")
    con.commit()
    con.close()
    check = run_cli("redact", "--check", str(p))
    assert check.returncode in (0, 1) and b"Traceback" not in check.stderr, check.stderr
    out = run_cli("redact", str(p), str(tmp_path / "r.sqlite"))
    assert out.returncode == 0 and b"Traceback" not in out.stderr, out.stderr


# --- 13: every error line names its file ---

def test_13_timestamp_guard_names_the_file(tmp_path):
    p = int64_edge_trace(tmp_path / "edge.sqlite", start=-(1 << 63) + 1)
    line = one_line_error(run_cli("summary", str(p)))
    assert line.startswith(f"nsysanalyze: error: {p}: ") and "timestamps beyond" in line


def test_13_non_integer_values_name_the_file_and_table(tmp_path):
    import sqlite3

    p = int64_edge_trace(tmp_path / "text.sqlite")
    con = sqlite3.connect(p)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET start = 'soon' WHERE correlationId = 2")
    con.commit()
    con.close()
    line = one_line_error(run_cli("summary", str(p)))
    assert line.startswith(f"nsysanalyze: error: {p}: CUPTI_ACTIVITY_KIND_MEMCPY: non-integer values"), line


# --- 8 and issue 23 item 6: redaction of what a person typed; --check with the same patterns ---

PLANTED = [  # (value typed on a command line, a part of it that must not survive redaction)
    (r"python \\fileserver\jdoe-share\proj\train.py", "fileserver"),
    ("--rdzv_endpoint=gpu-node-17:29500", "gpu-node-17"),
    ("--master_addr gpu-node-18", "gpu-node-18"),
    ("cat ~jdoe/data/list.txt", "~jdoe"),
    ("git clone https://jdoe:s3cr3tpw@git.corp.example.com/r.git", "s3cr3tpw"),
    ("--aws-secret-access-key=wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI"),
    ("--hf_token hf_abcdefghijklmnopqrstuvwxyzABCDEF", "hf_abcdefghij"),
    ("AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7"),
    ("srun --nodelist=gpu-node-[01-04,07] python", "[01-04,07]"),
    (r"C:\Users\Jane Doe\proj\train.py", "Jane Doe"),
]


def planted_export(tmp_path) -> Path:
    """The bundled real trace without environment, with PLANTED as its process's arguments."""
    import sqlite3

    p = tmp_path / "planted.sqlite"
    shutil.copyfile(example_path(), p)
    con = sqlite3.connect(p)
    con.execute("DELETE FROM META_DATA_CAPTURE WHERE name LIKE '%ENVIRONMENT%'")
    con.executemany("INSERT INTO META_DATA_CAPTURE(name, value) VALUES (?, ?)",
                    [(f"PROCESS_9:ARGUMENT_{i}", v) for i, (v, _) in enumerate(PLANTED)])
    con.commit()
    con.close()
    return p


def test_8_redact_removes_what_a_person_typed(tmp_path):
    from nsysanalyze.trace.redact import identifying, redact

    src = planted_export(tmp_path)
    count, found = identifying(src, limit=10_000)
    flagged = {value for _, _, value, _ in found}
    assert [v for v, _ in PLANTED if v not in flagged] == []          # --check catches every kind
    out = tmp_path / "r.sqlite"
    redact(src, out)
    data = out.read_bytes()
    assert [part for _, part in PLANTED if part.encode() in data] == []
    assert identifying(out) == (0, [])


SYSTEM_STRINGS = ["/usr/lib/x86_64-linux-gnu/libm.so.6", "NV_CUDNN_PACKAGE_DEV=libcudnn9-dev-cuda-12=9.7.0.66-1",
                  "NV_CUDNN_VERSION=9.7.0.66", "CAL_VERSION=\"0.4.4.50\"", "/opt/cray/pe/libsci/23.02.1.1/lib",
                  "/tmp/site/nvtx/_lib/lib.cpython-312-x86_64-linux-gnu.so",
                  "/opt/torch/.venv/lib/python3.12/site-packages/torch/lib/libgomp.so.1",
                  "torchrun --nproc_per_node=8 --nnodes 2 --master_port 29500 train.py"]


def test_23_6_system_paths_and_versions_are_not_identifying():
    from nsysanalyze.trace.redact import _flagger

    flag = _flagger(set(), set())
    assert {s: flag(s) for s in SYSTEM_STRINGS} == dict.fromkeys(SYSTEM_STRINGS)


# Each real fixture raising no false alarm and passing once redacted: tests/test_redact.py
# (test_metrics_identical_and_nothing_identifying_left, which redacts every export once).


# --- 14: a successful plot or report prints nothing but its line (no font warnings, no raw ESC) ---

@pytest.mark.parametrize("command, suffix", [("plot", "png"), ("report", "html")])
def test_14_hostile_names_make_no_warnings(command, suffix, hostile_kernels, tmp_path):
    proc = run_cli(command, str(hostile_kernels), "-o", str(tmp_path / f"out.{suffix}"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == b"" and proc.stdout.decode().startswith("wrote ")


# --- fuzzers: saved reports, and interval shapes ---

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

JSON_VALUES = st.one_of(st.none(), st.booleans(), st.integers(min_value=-10 ** 400, max_value=10 ** 400),
                        st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=4),
                        st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


def _paths(doc, prefix=()):
    """Every key/index path in ``doc`` (objects and lists), the document's own root excluded."""
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for k, v in items:
        yield (*prefix, k)
        yield from _paths(v, (*prefix, k))


@pytest.fixture(scope="module")
def small_saved(saved_doc) -> dict:
    """The bundled real trace's saved report with its first three steps (fewer paths to mutate)."""
    return {**saved_doc, "steps": saved_doc["steps"][:3]}


def _run_main(argv) -> tuple[int, str]:
    import contextlib
    import io

    from nsysanalyze.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()), pytest.raises(SystemExit) as e:
        main([str(a) for a in argv])
    return e.value.code, err.getvalue()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzz_saved_reports_never_crash_a_consumer(data, small_saved, tmp_path_factory):
    folder = tmp_path_factory.mktemp("fuzz")
    doc = json.loads(json.dumps(small_saved))
    paths = list(_paths(doc))
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(paths))
        parent = doc
        try:
            for k in path[:-1]:
                parent = parent[k]
            if data.draw(st.booleans()) and isinstance(parent, dict):
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = data.draw(JSON_VALUES)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation replaced this path's parent
    good, bad = folder / "good.json", folder / "bad.json"
    good.write_text(json.dumps(small_saved))
    bad.write_text(json.dumps(doc))
    commands = [["compare", bad, good], ["compare", good, bad]]
    if data.draw(st.integers(0, 4)) == 0:  # the slow consumers now and then
        commands += [["plot", bad, "-o", folder / "p.png", "--force"], ["report", bad, "-o", folder / "r.html", "--force"]]
    for argv in commands:
        code, err = _run_main(argv)
        assert code in (0, 2), (argv[0], code, err)
        assert code == 0 or (err.count("\n") == 1 and err.startswith("nsysanalyze: error:")), err


@pytest.mark.parametrize("field", ["nsys_version", "recorder_nsys_version"])
def test_saved_report_whose_nsys_version_is_not_a_string(field, small_saved, tmp_path):
    """Found by the saved-report fuzzer: "recorder_nsys_version": true crashed ``compare`` (str.startswith of a
    bool); a version that is not a string or null is one line and exit 2, as for the exporter's version."""
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(small_saved))
    bad.write_text(json.dumps({**small_saved, "trace": {**small_saved["trace"], field: True}}))
    code, err = _run_main(["compare", bad, good])
    assert code == 2 and err.count("\n") == 1 and f"trace.{field}" in err, err


KERNELS = st.lists(st.tuples(st.integers(0, 5_000), st.integers(-40, 400), st.integers(0, 3), st.integers(0, 1)),
                   min_size=1, max_size=60)


@settings(max_examples=60, deadline=None)
@given(kernels=KERNELS, shuffled=st.randoms(use_true_random=False))
def test_fuzz_interval_shapes(kernels, shuffled, tmp_path_factory):
    """Random kernels (any order, overlapping, zero-length or ending before they start) on two GPUs of a
    synthetic unit-test export (real nsys schema): a report whose times are all non-negative and consistent,
    or one line naming the file and the table."""
    from tiny import TinyTrace

    from nsysanalyze.render.contract import report_of as report
    from nsysanalyze.errors import InputError

    path = tmp_path_factory.mktemp("iv") / "k.sqlite"
    t = TinyTrace(path)
    t.process(100)
    rows = list(kernels)
    shuffled.shuffle(rows)
    for i, (start, duration, name, device) in enumerate(rows):
        t.kernel(start, start + duration, i + 1, 100, device=device, name=f"k{name}")
    t.close()
    try:
        doc = report(path)
    except InputError as e:
        assert any(d < 0 for _, d, _, _ in kernels)
        assert str(e).startswith(f"{path}: CUPTI_ACTIVITY_KIND_KERNEL: ") and "\n" not in str(e)
        return
    assert all(d >= 0 for _, d, _, _ in kernels)
    for row in doc["summary"]["devices"] + doc["steps"]:
        assert row["window_ns"] >= 0 and 0 <= row["idle_ns"] <= row["window_ns"]
        assert 0 <= row["kernel_ns"] <= row["kernel_sum_ns"]
        assert row["kernel_ns"] + row["idle_ns"] <= row["window_ns"] + 1
    for device in doc["summary"]["devices"]:
        mine = [d for _, d, _, dev in kernels if dev == device["deviceId"]]
        assert device["kernel_sum_ns"] == sum(mine)  # (a zero-length kernel at the window's end counts in no window)
        assert sum(d > 0 for d in mine) <= device["kernel_count"] <= len(mine)
