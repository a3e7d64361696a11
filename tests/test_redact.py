"""`nsysanalyze redact`: environment, paths, host and user names gone; metrics unchanged; input untouched."""
import hashlib
import json
import re
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import default_report, shared_trace

from nsysanalyze.analysis import Analysis
from nsysanalyze.cli import cli, main
from nsysanalyze.errors import InputError
from nsysanalyze.trace.redact import redact, shorten_paths
from nsysanalyze.render.contract import report as contract_report
from nsysanalyze.render.contract import report_of

LEAKS = re.compile(rb"IS_SANDBOX|CONTAINER_NAME=|OLDPWD=|HOME=/|PATH=/")
USER, HOST = b"alice-q", b"gpu-node-17"
ENV = {"IS_SANDBOX": "1", "CONTAINER_NAME": "job-4711", "OLDPWD": "/home/alice-q", "HOME": "/home/alice-q",
       "PATH": "/home/alice-q/.local/bin:/usr/bin", "USER": "alice-q", "HOSTNAME": "gpu-node-17"}


def report(path) -> str:
    with Analysis(path) as a:
        d = contract_report(a)
    d["trace"].pop("path")
    return json.dumps(d, sort_keys=True, default=str)


def sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def add_environment(path) -> None:
    """Put a realistic, unscrubbed environment into a copy of a real export (as raw nsys exports have)."""
    con = sqlite3.connect(path)
    con.executemany("INSERT INTO META_DATA_CAPTURE(name, value) VALUES ('PROCESS_0:ENVIRONMENT_VARIABLE', ?)",
                    [(f'{k}="{v}"',) for k, v in ENV.items()])
    con.execute("UPDATE META_DATA_CAPTURE SET value = '/home/alice-q/proj' WHERE name = 'PROCESS_0:WORKING_DIR'")
    con.execute("UPDATE META_DATA_CAPTURE SET value = 'gpu-node-17' WHERE name = 'DEVICE_DISPLAY_NAME'")
    con.execute("UPDATE META_DATA_CAPTURE SET value = '/home/alice-q/proj/seedtrain.py' "
                "WHERE name = 'PROCESS_0:ARGUMENT_0'")
    con.execute("UPDATE META_DATA_EXPORT SET value = 'gpu-node-17' WHERE name = 'EXPORT_HOST'")
    con.execute("UPDATE META_DATA_EXPORT SET value = 'alice-q' WHERE name = 'EXPORT_USER'")
    con.execute("UPDATE META_DATA_EXPORT SET value = '/home/alice-q/proj/run.sqlite' WHERE name LIKE '%PATH_ABS'")
    con.execute("UPDATE TARGET_INFO_SYSTEM_ENV SET value = ? WHERE name = 'DeviceEnvironment'",
                (";".join(f"{k}={v}" for k, v in ENV.items()),))
    con.execute("UPDATE TARGET_INFO_SYSTEM_ENV SET value = 'gpu-node-17' WHERE name = 'Hostname'")
    block = "\0".join(f"{k}={v}" for k, v in ENV.items()) + "\0"
    con.execute("INSERT INTO StringIds(id, value) VALUES ((SELECT max(id) + 1 FROM StringIds), ?)", (block,))
    con.commit()
    con.close()


@pytest.fixture
def raw_copy(copy_of):
    p = copy_of(shared_trace("h200/resnet18-baseline-nvtx.sqlite"))
    add_environment(p)
    return p


def test_inserted_environment_is_removed_and_metrics_unchanged(raw_copy, tmp_path):
    data = raw_copy.read_bytes()
    assert LEAKS.search(data) and USER in data and HOST in data  # the doctored input does leak
    before, mtime = sha(raw_copy), raw_copy.stat().st_mtime_ns
    out = tmp_path / "shared.sqlite"
    removed = redact(raw_copy, out)
    assert removed["environment_variables"] == len(ENV)
    assert removed["environment_strings"] == 1
    assert removed["system_env_values"] >= 2       # DeviceEnvironment, Hostname
    assert removed["metadata_values"] >= 5         # host, user, 2 x PATH_ABS, display name, working dir
    red = out.read_bytes()
    assert not LEAKS.search(red)
    assert USER not in red and HOST not in red and b"/home/" not in red
    assert sha(raw_copy) == before and raw_copy.stat().st_mtime_ns == mtime   # input untouched
    assert report(out) == report(raw_copy)
    con = sqlite3.connect(f"file:{out}?mode=ro", uri=True)
    meta = dict(con.execute("SELECT name, value FROM META_DATA_CAPTURE WHERE name LIKE 'PROCESS_0:%'"))
    assert meta["PROCESS_0:ARGUMENT_0"] == "seedtrain.py"          # command line kept, its path dropped
    assert meta["PROCESS_0:COLLECT_NVTX_TRACE"] == "true"          # capture settings kept
    assert con.execute("SELECT count(*) FROM StringIds WHERE value = ''").fetchone()[0] >= 1  # id kept, blank
    assert con.execute("PRAGMA freelist_count").fetchone()[0] == 0
    con.close()


@pytest.mark.parametrize("name", ["public/nsightful__power_iteration__baseline.sqlite",
                                  "public/pipit__perlmutter-cloverleaf-cuda.sqlite",
                                  "public/sc23-openmp-tutorial__report3.sqlite"])
def test_real_unscrubbed_exports(name, tmp_path):
    src = shared_trace(name)
    assert LEAKS.search(src.read_bytes())
    out = tmp_path / "r.sqlite"
    result = CliRunner().invoke(cli, ["redact", str(src), str(out)])
    assert result.exit_code == 0, result.output
    assert "environment variables" in result.output
    data = out.read_bytes()
    assert not LEAKS.search(data)
    for secret in (b"jhdavis", b"nid008553", b"train06", b"94b8b7b3215f", b"/content/"):
        assert secret not in data
    assert report(out) == report(src)


def test_refuses_output_that_is_the_input(raw_copy, tmp_path, monkeypatch, capsys):
    link = tmp_path / "link.sqlite"
    link.symlink_to(raw_copy)
    monkeypatch.chdir(raw_copy.parent)
    before = sha(raw_copy)
    for dst in (raw_copy, link, raw_copy.name, f"../{raw_copy.parent.name}/{raw_copy.name}"):
        with pytest.raises(InputError, match="is the input file"):
            redact(raw_copy, dst)
    with pytest.raises(SystemExit) as e:
        main(["redact", raw_copy.name, f"./{raw_copy.name}"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is the input file" in err
    assert sha(raw_copy) == before


def test_bad_input_is_one_line_exit_2(tmp_path, capsys):
    junk = tmp_path / "junk.sqlite"
    junk.write_text("not a database")
    plain = tmp_path / "plain.sqlite"
    sqlite3.connect(plain).execute("CREATE TABLE t(x)").connection.close()
    for src in (tmp_path / "missing.sqlite", junk, plain):
        with pytest.raises(SystemExit) as e:
            main(["redact", str(src), str(tmp_path / "out.sqlite")])
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("nsysanalyze: error:") and err.count("\n") == 1
    assert not (tmp_path / "out.sqlite").exists()


def test_shorten_paths():
    assert shorten_paths("/home/a/x/train.py --data=/scratch/a/d --lr 0.1") == "train.py --data=d --lr 0.1"
    assert shorten_paths("./heat") == "./heat" and shorten_paths("") == ""
    assert shorten_paths(r"C:\Users\a\run.py") == "run.py"


def test_large_export_goes_through_a_scratch_file(raw_copy, tmp_path, monkeypatch):
    import nsysanalyze.trace.redact as R
    monkeypatch.setattr(R, "IN_MEMORY_MAX_BYTES", 0)
    out = tmp_path / "big.sqlite"
    assert redact(raw_copy, out)["environment_variables"] == len(ENV)
    assert not LEAKS.search(out.read_bytes())
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([raw_copy.name, "big.sqlite"])
    assert report(out) == report(raw_copy)


# --- what else identifies a host or a user, and `redact --check` ---

def summary_metrics(d: dict) -> str:
    """The metrics of a report (summary devices and steps; not the header, whose names redact shortens)."""
    return json.dumps({"devices": d["summary"]["devices"], "steps": d["steps"],
                       "findings": [(f["rule"], f["gain_ns"]) for f in d["findings"]]}, sort_keys=True, default=str)


def every_export():
    from conftest import SHARED_TRACES, per_file_fixtures

    found = per_file_fixtures() + sorted(SHARED_TRACES.glob("*/*.sqlite"))
    return found or [pytest.param(None, marks=pytest.mark.skip(reason="no fixtures or shared traces"))]


@pytest.mark.parametrize("src", every_export(), ids=lambda p: p.name if p else "none")
def test_metrics_identical_and_nothing_identifying_left(src, tmp_path):
    """Each real export's redacted copy has the same metrics and nothing identifying but the names the analysis
    reads (kept). The project's own fixtures (issue 23 item 6): --check on the original reports only hardware ids
    (GPU UUIDs, PCI bus ids, session UUIDs) — no library path, version string or nsys's own paths — and nothing
    at all on the redacted copy."""
    from conftest import FIXTURES
    from nsysanalyze.trace.redact import identifying

    out = tmp_path / "r.sqlite"
    redact(src, out)
    assert summary_metrics(report_of(out)) == summary_metrics(default_report(src))
    count, found = identifying(out, limit=10 ** 6)
    assert count == len(found) and all(kept for *_, kept in found), [f for f in found if not f[-1]]
    if src.parent == FIXTURES:
        assert (count, found) == (0, [])
        _, in_source = identifying(src, limit=100_000)
        assert {kind for _, kind, _, _ in in_source} <= {"uuid", "pci"}, [f for f in in_source if f[1] not in ("uuid", "pci")]


def doctor_identities(path) -> None:
    """Identifying values as real captures hold them, put into a copy of a real export."""
    con = sqlite3.connect(path)
    top = con.execute("SELECT coalesce(max(id), 0) + 1 FROM StringIds").fetchone()[0]
    con.executemany("INSERT INTO StringIds(id, value) VALUES (?, ?)", [   # referenced by no table
        (top, "/cluster/apps/alice-q/nsight/lib/libToolsInjection64.so"),
        (top + 1, "/home/Alice Q/my project/train.py"),
        (top + 2, "connect to 10.20.30.40:29500 on gpu-node-17.hpc.example.org"),
    ])
    con.execute("UPDATE META_DATA_CAPTURE SET value = '--master_addr=10.20.30.40' WHERE name = 'PROCESS_0:ARGUMENT_1'")
    con.execute("INSERT INTO META_DATA_CAPTURE(name, value) VALUES ('SESSION_UUID', "
                "'1b2f3c4d-aaaa-bbbb-cccc-0123456789ab')")
    con.execute("UPDATE TARGET_INFO_GPU SET uuid = 'GPU-cf6b97c0-bf53-a39e-febd-9532190b5766', "
                "busLocation = '0000:c1:00.0'")
    con.execute("INSERT INTO TARGET_INFO_SYSTEM_ENV(devStateName, name, nameEnum, value) VALUES "
                "('Local (CLI)', 'SoftwareReleaseVersion', 0, '5.14.21-150400.24.81_12.0.86-cray_shasta_c')")
    con.execute("UPDATE TARGET_INFO_SESSION_START_TIME SET localTime = '2023-10-03T21:13:59'")
    con.executemany("INSERT INTO PROCESSES(globalPid, pid, name) VALUES (?, ?, ?)",
                    [((1 << 48) | (pid << 24), pid, name) for pid, name in ((1, "systemd"), (2, "sshd: alice-q"))])
    con.commit()
    con.close()


def test_identifiers_unreferenced_strings_and_other_processes_are_removed(copy_of, tmp_path):
    src = copy_of(shared_trace("h200/resnet18-baseline-nvtx.sqlite"))
    doctor_identities(src)
    from nsysanalyze.trace.redact import identifying

    assert identifying(src)[0] >= 6
    out = tmp_path / "r.sqlite"
    removed = redact(src, out)
    assert removed["other_processes"] == 2
    data = out.read_bytes()
    for secret in (b"/cluster/apps", b"alice", b"Alice Q", b"10.20.30.40", b"hpc.example.org", b"1b2f3c4d-aaaa",
                   b"cf6b97c0", b"0000:c1:00.0", b"5.14.21", b"21:13:59", b"systemd", b"sshd"):
        assert secret not in data, secret
    con = sqlite3.connect(f"file:{out}?mode=ro", uri=True)
    values = {v for (v,) in con.execute("SELECT value FROM StringIds")}
    # (a path with spaces keeps the folders after the home directory: where it ends is ambiguous)
    assert {"libToolsInjection64.so", "/my project/train.py", "connect to <ip>:29500 on <host>"} <= values
    meta = dict(con.execute("SELECT name, value FROM META_DATA_CAPTURE"))
    assert meta["PROCESS_0:ARGUMENT_1"] == "--master_addr=<ip>" and meta["SESSION_UUID"] == "<uuid>"
    assert con.execute("SELECT uuid, busLocation FROM TARGET_INFO_GPU").fetchone() == ("<uuid>", "<pci>")
    assert con.execute("SELECT localTime = utcTime FROM TARGET_INFO_SESSION_START_TIME").fetchone()[0] == 1
    assert [r[0] for r in con.execute("SELECT name FROM PROCESSES")] == ["python3"]
    con.close()
    assert identifying(out)[0] == 0
    assert summary_metrics(report_of(out)) == summary_metrics(report_of(src))


def test_redact_check_lists_what_looks_identifying(copy_of, tmp_path):
    src = copy_of(shared_trace("h200/resnet18-baseline-nvtx.sqlite"))
    doctor_identities(src)
    result = CliRunner().invoke(cli, ["redact", "--check", str(src)])
    assert result.exit_code == 1
    assert "path: /cluster/apps/alice-q/nsight" in result.output and ": ip: " in result.output
    assert "value(s) still look identifying" in result.output.splitlines()[-1]
    out = tmp_path / "r.sqlite"
    assert CliRunner().invoke(cli, ["redact", str(src), str(out)]).exit_code == 0
    result = CliRunner().invoke(cli, ["redact", "--check", str(out)])
    assert result.exit_code == 0 and result.output.strip().endswith("nothing identifying found")


def test_large_export_scratch_is_private_and_removed_on_sigterm(raw_copy, tmp_path):
    """A > 4 GiB export is redacted in a scratch copy in a private temporary folder; SIGTERM removes it."""
    import os
    import signal
    import subprocess
    import sys
    import time

    scratch_root = tmp_path / "tmp"
    scratch_root.mkdir()
    code = ("import sys, nsysanalyze.trace.redact as R; R.IN_MEMORY_MAX_BYTES = 0; "
            "orig = R._redact_in_place\n"
            "def slow(conn, tables):\n    print('scratch', flush=True); import time; time.sleep(60)\n"
            "R._redact_in_place = slow\nR.redact(sys.argv[1], sys.argv[2])")
    env = dict(os.environ, TMPDIR=str(scratch_root), PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    proc = subprocess.Popen([sys.executable, "-c", code, str(raw_copy), str(tmp_path / "out.sqlite")],
                            stdout=subprocess.PIPE, env=env)
    assert proc.stdout.readline().strip() == b"scratch"
    folders = list(scratch_root.iterdir())
    assert len(folders) == 1 and oct(folders[0].stat().st_mode & 0o777) == "0o700"
    copy = folders[0] / "copy"
    assert copy.stat().st_size > 0 and LEAKS.search(copy.read_bytes())  # the unredacted copy, private
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([raw_copy.name, "out.sqlite", "tmp"])  # nothing beside OUT
    assert (tmp_path / "out.sqlite").stat().st_size == 0  # OUT claimed at the start, still empty
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 143
    time.sleep(0.1)
    assert list(scratch_root.iterdir()) == []
    assert not (tmp_path / "out.sqlite").exists()  # the claim released
