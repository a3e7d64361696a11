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
