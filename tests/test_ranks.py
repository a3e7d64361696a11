"""Cross-rank view: several exports (one per rank) and one export holding several processes."""
import copy
import json
import shutil
import sqlite3

import pytest
from click.testing import CliRunner
from rich.console import Console

import nsysanalyze
from conftest import shared_trace
from nsysanalyze import batch, ranks
from nsysanalyze.cli import cli, main
from nsysanalyze.render import ranks as ranks_render
from nsysanalyze.render.contract import report as contract_report

RESNET = "h200/resnet18-baseline-nvtx.sqlite"
TWO_PROCESSES = "public/nsys-ai__mfu_2gpu_after.sqlite"


def report(rel: str) -> dict:
    with nsysanalyze.open(shared_trace(rel)) as a:
        return contract_report(a)


@pytest.fixture
def rank_dir(tmp_path):
    """Three copies of a real export named like `nsys profile -o run_%q{RANK}`; ranks 1 and 2 started
    1 and 5 ms later (so they are three captures launched together, not one file given three times)."""
    src = shared_trace(RESNET)
    for r in (2, 0, 1):
        shutil.copyfile(src, tmp_path / f"run_{r}.sqlite")
    for r, delay in ((1, 1_000_000), (2, 5_000_000)):
        with sqlite3.connect(tmp_path / f"run_{r}.sqlite") as conn:
            conn.execute(f"UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = utcEpochNs + {delay}")
    return tmp_path


def run_cli(*args) -> tuple[int, str]:
    res = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return res.exit_code, res.output


def test_directory_of_rank_files_gives_traces_and_ranks(rank_dir):
    rc, out = run_cli("diagnose", "--format", "json", str(rank_dir))
    assert rc == 0
    doc = json.loads(out)
    assert set(doc) == {"format_version", "traces", "ranks", "jobs"}
    assert doc["jobs"] == [{"traces": [0, 1, 2], "ranks": doc["ranks"], "note": None}]
    assert [t["trace"]["path"].rsplit("/", 1)[1] for t in doc["traces"]] == ["run_0.sqlite", "run_1.sqlite", "run_2.sqlite"]
    view = doc["ranks"]
    assert [r["trace"] for r in view["ranks"]] == ["run_0.sqlite", "run_1.sqlite", "run_2.sqlite"]
    assert [r["rank"] for r in view["ranks"]] == [0, 1, 2]
    s = view["summary"]
    assert s["ranks"] == 3 and s["spread_ns"] == 0 and s["scope"] == "step median"
    assert "likely_straggler" not in s  # identical ranks: nobody to blame
    # aligned on the UTC clock by each file's session start
    assert [r["offset_ns"] for r in view["ranks"]] == [0, 1_000_000, 5_000_000]
    assert s["aligned"] and s["start_spread_ns"] == 5_000_000
    assert all(st["start_skew_ns"] == 5_000_000 for st in view["steps"])
    assert [st["step"] for st in view["steps"]] == [1, 2]  # the first step's window is cut by the capture


def test_jobs_one_and_parallel_give_the_same_reports(rank_dir):
    paths = sorted(rank_dir.glob("*.sqlite"))
    assert batch.analyze_many(paths, None, jobs=1) == batch.analyze_many(paths, None, jobs=2)


def test_ranks_of_a_two_process_file():
    """Steps inferred from each GPU's kernel sequence (a pipeline-parallel run: rank 0 waits less in NCCL)."""
    r = report(TWO_PROCESSES)
    view = ranks.cross_rank([r])
    assert [x["label"] for x in view["ranks"]] == ["pid 148 GPU 0", "pid 149 GPU 1"]
    s = view["summary"]
    assert s["ranks"] == 2 and s["scope"] == "step median"
    nccl = {x["rank"]: x["nccl_ns"] for x in view["ranks"]}
    assert nccl[0] < nccl[1]
    assert s["least_nccl_rank"] == 0 and s["steps_compared"] == 14
    assert s["nccl_imbalance_ns"] == nccl[1] - nccl[0]
    assert s["aligned"]  # one file: one session start, offsets from the first GPU activity of each process


def test_single_multi_process_file_json_keeps_the_report_and_adds_ranks():
    rc, out = run_cli("diagnose", "--format", "json", str(shared_trace(TWO_PROCESSES)))
    doc = json.loads(out)
    assert rc == 0 and {"trace", "summary", "steps", "findings", "ranks"} <= set(doc)
    assert doc["ranks"]["summary"]["least_nccl_rank"] == 0
    rc, out = run_cli("diagnose", "--format", "json", str(shared_trace(RESNET)))
    assert "ranks" not in json.loads(out)  # one process, one GPU: no cross-rank view


def test_slowest_rank_and_per_step_spread_from_real_reports():
    base = report(RESNET)
    slow = copy.deepcopy(base)
    slow["trace"]["path"] = "run_1.sqlite"
    for s in slow["steps"]:
        s["window_ns"] += 250_000_000
    for d in slow["summary"]["devices"]:
        d["step_median_window_ns"] += 250_000_000
    base = {**base, "trace": {**base["trace"], "path": "run_0.sqlite"}}
    view = ranks.cross_rank([slow, base])  # given out of order: ranks follow the numbers in the names
    s = view["summary"]
    assert [r["trace"] for r in view["ranks"]] == ["run_0.sqlite", "run_1.sqlite"]
    assert s["slowest_rank"] == 1 and s["fastest_rank"] == 0 and s["spread_ns"] == 250_000_000
    assert 40_000_000 < s["noise_ns"] < 250_000_000  # its steady steps differ by 129 ms: 40 ms would be noise
    assert s["likely_straggler"] == 1 and s["straggler_reason"] == "slowest step time"
    assert all(st["slowest_rank"] == 1 and st["spread_ns"] == 250_000_000 for st in view["steps"])
    assert s["slowest_rank_most_often"] == 1


def test_text_and_markdown_renderings(rank_dir):
    rc, out = run_cli("diagnose", "--format", "markdown", str(shared_trace(TWO_PROCESSES)))
    # a 0.8 ms spread while each rank's steps vary by ~1 ms (3x MAD = 3.2 ms): nobody is named slowest
    assert rc == 0 and "## Ranks" in out and "No straggler" in out and "slowest most often" not in out
    rc, out = run_cli("diagnose", str(rank_dir))
    assert rc == 0 and "Ranks" in out and "aligned by session start" in out
    console = Console(record=True, width=200)
    ranks_render.render_text(ranks.cross_rank([report(TWO_PROCESSES)]), console)
    text = console.export_text()  # per-step spreads of 0.1 ms in a 19 ms step: nobody is "slowest"
    assert "No straggler" in text and "slowest most often" not in text and "noise threshold" in text


def test_bad_file_among_ranks_is_one_error_line(rank_dir, capsys):
    (rank_dir / "run_3.sqlite").write_text("not a trace")
    with pytest.raises(SystemExit) as exit_:
        main(["diagnose", "--format", "json", str(rank_dir)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and "run_3.sqlite: not an SQLite file" in err


def test_dask_cluster_gives_the_local_reports(rank_dir):
    pytest.importorskip("dask.distributed")
    from dask.distributed import LocalCluster

    paths = sorted(rank_dir.glob("*.sqlite"))[:2]
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        remote = batch.analyze_many(paths, None, scheduler=cluster.scheduler_address)
    assert remote == batch.analyze_many(paths, None, jobs=1)
