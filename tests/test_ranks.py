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


def test_job_gains_are_the_least_over_ranks_of_gain_plus_wait():
    """ranks.job_findings on hand-made report dicts and a rank table (exact values, not traces): three ranks that
    meet every step (NCCL on each), waits 0 / 30 / 5 ms. 'a' on every rank: min(10+0, 50+30, 12+5) = 10 on rank 0;
    'b' on ranks 1 and 2 only: upper min(40+30, 3+5) = 8 (rank 2), lower min(8, rank 0's wait 0) = 0; 'c', a 0 ns
    finding, gains nothing anywhere. Without NCCL on rank 2 (and no host all-reduce or straggler) the ranks do not
    meet: each rule's job gain is its largest rank's."""
    import pandas as pd

    MS = 1_000_000
    found = {0: {"a": 10}, 1: {"a": 50, "b": 40}, 2: {"a": 12, "b": 3, "c": 0}}
    reports = [{"trace": {"path": f"run_{r}.sqlite"}, "findings": [
        {"rule": k, "title": k.upper(), "gain_ns": v * MS, "globalPid": 100 + r, "deviceId": 0} for k, v in f.items()]}
        for r, f in found.items()]
    table = pd.DataFrame({"rank": [0, 1, 2], "path": [f"run_{r}.sqlite" for r in range(3)],
                          "globalPid": [100, 101, 102], "deviceId": 0, "devices": [[0]] * 3,
                          "nccl_ns": [2 * MS, 2 * MS, 2 * MS], "wait_ns": [0.0, 30 * MS, 5 * MS]})
    job = {f["rule"]: f for f in ranks.job_findings(reports, table, {})}
    assert [f["rule"] for f in ranks.job_findings(reports, table, {})] == ["a", "b", "c"]
    assert (job["a"]["job_gain_ns"], job["a"]["job_gain_max_ns"], job["a"]["bound_rank"]) == (10 * MS, 10 * MS, 0)
    assert job["a"]["largest_rank_gain_ns"] == 50 * MS and job["a"]["title"] == "A"
    assert (job["b"]["job_gain_ns"], job["b"]["job_gain_max_ns"], job["b"]["bound_rank"]) == (0.0, 8 * MS, 2)
    assert job["b"]["missing_ranks"] == [0] and job["b"]["gain_ns_by_rank"] == {"1": 40 * MS, "2": 3 * MS}
    assert job["c"]["job_gain_ns"] == job["c"]["job_gain_max_ns"] == 0.0
    apart = table.assign(nccl_ns=[2 * MS, 2 * MS, 0])
    job = {f["rule"]: f for f in ranks.job_findings(reports, apart, {})}
    assert not job["a"]["synchronized"]
    assert job["a"]["job_gain_ns"] == job["a"]["job_gain_max_ns"] == 50 * MS and job["a"]["bound_rank"] == 1
    assert job["b"]["job_gain_ns"] == job["b"]["job_gain_max_ns"] == 40 * MS
    assert ranks.job_findings(reports, apart, {"likely_straggler": 0})[0]["synchronized"]  # a straggler: they meet
