"""`report -o`, `plot -o`, `redact OUT`: never an input, never a device or directory, never half-written.

The inputs are copies of a real H200 trace (``tiny_path`` only where a command must succeed quickly:
a synthetic unit-test trace on the real nsys schema, see conftest.py).
"""
import hashlib
import os
import stat

import pytest
from conftest import shared_trace

from nsysanalyze.cli import main
from nsysanalyze.errors import InputError
from nsysanalyze.outputs import atomic_output, check_output

NVTX = "h200/resnet18-baseline-nvtx.sqlite"


def sha(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def fails(capsys, *argv) -> str:
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert e.value.code == 2, err
    assert err.count("\n") == 1 and err.startswith("nsysanalyze: error:"), err
    return err


@pytest.fixture
def trace(copy_of):
    return copy_of(shared_trace(NVTX))


def outputs_naming(trace, tmp_path):
    """Every way of naming ``trace`` as an output path: itself, relative, symlink, hard link."""
    sym = tmp_path / "sym.sqlite"
    sym.symlink_to(trace)
    hard = tmp_path / "hard.png"
    os.link(trace, hard)
    return [trace, f"../{tmp_path.name}/./{trace.name}", sym, hard]


def test_report_never_writes_over_its_input_or_baseline(trace, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = sha(trace)
    base = tmp_path / "base.sqlite"
    os.link(trace, base)  # BASELINE: another name of the same inode
    for out in outputs_naming(trace, tmp_path):
        assert "is the input file" in fails(capsys, "report", trace, "-o", out, "--force")
        assert "is the input file" in fails(capsys, "report", trace.name, "--baseline", base, "-o", out)
    assert "is the input file" in fails(capsys, "report", "other.sqlite", "--baseline", trace, "-o", trace)
    assert sha(trace) == before


def test_plot_never_writes_over_its_input(trace, tmp_path, capsys):
    before = sha(trace)
    hard = tmp_path / "hard.png"
    os.link(trace, hard)
    assert "is the input file" in fails(capsys, "plot", trace, "-o", hard, "--force")
    assert "is the input file" in fails(capsys, "plot", tmp_path, "-o", hard, "--force")  # a DIR of inputs
    assert sha(trace) == before


def test_redact_never_writes_over_its_input(trace, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = sha(trace)
    for out in outputs_naming(trace, tmp_path):
        assert "is the input file" in fails(capsys, "redact", trace, out, "--force")
    assert sha(trace) == before


@pytest.mark.parametrize("argv", [["report", "{src}", "-o", "{out}.html"], ["plot", "{src}", "-o", "{out}.png"],
                                  ["redact", "{src}", "{out}.sqlite"]])
def test_existing_output_needs_force(argv, tiny_path, tmp_path, capsys):
    out = tmp_path / "out"
    args = [a.format(src=tiny_path, out=out) for a in argv]
    target = args[-1]
    with open(target, "w") as f:
        f.write("keep me")
    assert "already exists; pass --force" in fails(capsys, *args)
    assert open(target).read() == "keep me"
    with pytest.raises(SystemExit) as e:
        main([*args, "--force"])
    assert e.value.code == 0, capsys.readouterr().err
    assert open(target, "rb").read(8) != b"keep me"
    mode = stat.S_IMODE(os.stat(target).st_mode)
    umask = os.umask(0)
    os.umask(umask)
    assert mode == 0o666 & ~umask
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([tiny_path.name, os.path.basename(target)])


@pytest.mark.parametrize("command", ["report", "plot", "redact"])
def test_output_must_be_a_regular_file_path(command, tiny_path, tmp_path, capsys):
    fifo = tmp_path / "fifo.png"
    os.mkfifo(fifo)
    to_fifo = tmp_path / "to-fifo.png"
    to_fifo.symlink_to(fifo)
    folder = tmp_path / "dir.png"
    folder.mkdir()
    to_dir = tmp_path / "to-dir.png"
    to_dir.symlink_to(folder)
    to_null = tmp_path / "null.png"
    to_null.symlink_to(os.devnull)
    for out, why in ((fifo, "not a regular file"), (to_fifo, "not a regular file"), (to_null, "not a regular"),
                     (folder, "is a directory"), (to_dir, "is a directory")):
        args = [command, tiny_path, out, "--force"] if command == "redact" else [command, tiny_path, "-o", out,
                                                                                  "--force"]
        assert why in fails(capsys, *args)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and to_fifo.is_symlink() and folder.is_dir()
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)
    if command == "redact":
        assert "not a regular" in fails(capsys, command, tiny_path, os.devnull, "--force")


def test_atomic_output_is_private_and_removed_on_failure(tmp_path):
    out = check_output(tmp_path / "r.html", [])
    with atomic_output(out) as tmp:
        assert tmp.parent == tmp_path and tmp.suffix == ".html"
        assert stat.S_IMODE(tmp.stat().st_mode) == 0o600
        tmp.write_text("new")
    assert out.read_text() == "new"
    out = check_output(out, [], force=True)
    with pytest.raises(ZeroDivisionError):
        with atomic_output(out) as tmp:
            tmp.write_text("half")
            1 / 0
    assert out.read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["r.html"]


def test_dangling_symlink_is_replaced_not_followed(tmp_path):
    link = tmp_path / "out.html"
    link.symlink_to(tmp_path / "elsewhere.html")
    with pytest.raises(InputError, match="already exists"):
        check_output(link, [])
    with atomic_output(check_output(link, [], force=True)) as tmp:
        tmp.write_text("x")
    assert not link.is_symlink() and link.read_text() == "x" and not (tmp_path / "elsewhere.html").exists()
