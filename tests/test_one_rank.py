"""One rank of a job given alone (issue 23 item 7): the header says which rank of how many files, and the
command for the cross-rank view; a file of one rank with collectives but no siblings says so; others nothing."""
import json
import shutil

from click.testing import CliRunner

from conftest import fixture_trace
from nsysanalyze.cli import cli

DDP0 = fixture_trace("vit_l32_2gpu_ddp_0.sqlite")


def diagnose(*args):
    result = CliRunner().invoke(cli, ["diagnose", *map(str, args)])
    assert result.exit_code == 0, result.output
    return result.output


def test_rank_0_alone_names_its_job_and_the_cross_rank_command():
    head = diagnose(DDP0).splitlines()[:8]
    hint = next(line for line in head if "rank 0 of what looks like a 2-rank job" in line)
    command = f"nsysanalyze diagnose {DDP0.parent}/vit_l32_2gpu_ddp_*.sqlite"
    assert hint.endswith(command) and "2 files vit_l32_2gpu_ddp_*.sqlite" in hint and "NCCL collectives" in hint
    doc = json.loads(diagnose(DDP0, "--format", "json"))
    assert doc["notes"][0].endswith(command)
    assert "rank 0 of what looks like a 2-rank job" in diagnose(DDP0, "--format", "markdown")
    files = sorted(DDP0.parent.glob("vit_l32_2gpu_ddp_*.sqlite"))  # what the shell expands the glob to
    assert "One row per rank" in diagnose(*files) and "looks like" not in diagnose(*files)


def test_numbered_siblings_without_collectives_and_collectives_without_siblings(tmp_path):
    for n in (1, 2, 3):  # a real single-GPU export under a rank-numbered name, three of them
        shutil.copy(fixture_trace("dtoh_deferred.sqlite"), tmp_path / f"job_{n}.sqlite")
    text = diagnose(tmp_path / "job_2.sqlite")
    assert "rank 2 of what looks like a 3-rank job (3 files job_*.sqlite in its folder)" in text
    lone = tmp_path / "lone"
    lone.mkdir()
    shutil.copy(DDP0, lone / "ddp.sqlite")  # collectives, no siblings
    text = diagnose(lone / "ddp.sqlite")
    assert "looks like one rank of a multi-rank job (it holds NCCL collectives)" in text
    plain = diagnose(fixture_trace("resnet18_baseline.sqlite"))
    assert "rank" not in plain.split("Findings")[0]


def test_numbered_files_profiled_one_after_the_other_are_not_ranks(tmp_path):
    """Two real exports of this project profiled 47 s apart (dtoh_deferred's session ends 9 s after its start)
    under rank-like names: their sessions do not overlap, so neither is called a rank of a 2-file job. Real
    ranks' sessions do (vit_l32_2gpu_ddp_0/1, above; every rank set in fixtures/ starts within 0.13 s)."""
    shutil.copy(fixture_trace("dtoh_deferred.sqlite"), tmp_path / "run_1.sqlite")
    shutil.copy(fixture_trace("dtoh_pageable.sqlite"), tmp_path / "run_2.sqlite")
    for name in ("run_1.sqlite", "run_2.sqlite"):
        assert "rank" not in diagnose(tmp_path / name).split("Findings")[0]
    (tmp_path / "run_3.sqlite").write_text("not an export")  # a sibling whose session is unknown still counts
    hint = next(line for line in diagnose(tmp_path / "run_1.sqlite").splitlines() if "rank 1 of" in line)
    assert ("rank 1 of what looks like a 2-rank job (2 of the files run_*.sqlite, profiled at the same time, in "
            "its folder)") in hint
    assert hint.endswith(f"nsysanalyze diagnose {tmp_path / 'run_1.sqlite'} {tmp_path / 'run_3.sqlite'}")
