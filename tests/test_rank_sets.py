"""Which files form one job, and no straggler below the noise threshold (real fixtures)."""
import copy
import json

from click.testing import CliRunner

from conftest import default_report, fixture_trace
from nsysanalyze import ranks
from nsysanalyze.cli import analyze, cli


def diagnose(*files, fmt="json"):
    result = CliRunner().invoke(cli, ["diagnose", "--format", fmt, *map(str, files)])
    assert result.exit_code == 0, result.output
    return json.loads(result.output) if fmt == "json" else result.output


def test_unrelated_fixtures_are_diagnosed_alone_and_name_no_straggler():
    files = [fixture_trace("resnet18_baseline.sqlite"), fixture_trace("vit_l32_single.sqlite")]
    doc = diagnose(*files)
    assert "ranks" not in doc and [j["traces"] for j in doc["jobs"]] == [[0], [1]]
    assert all(j["ranks"] is None and "diagnosed alone" in j["note"] for j in doc["jobs"])
    text = diagnose(*files, fmt="text")
    assert "straggler" not in text.lower() and "slowest rank" not in text
    assert text.count("diagnosed alone") == 2


def test_consecutive_runs_on_the_same_gpu_are_not_one_job():
    # same step family, sessions 17 s apart, both on GPU 0: two runs, not two ranks
    files = [fixture_trace("resnet18_baseline.sqlite"), fixture_trace("resnet18_workers.sqlite")]
    assert [j["traces"] for j in ranks.jobs([analyze(f, None) for f in files])] == [[0], [1]]


def test_the_two_rank_ddp_fixtures_still_form_one_job():
    files = [fixture_trace(f"vit_l32_2gpu_ddp_{r}.sqlite") for r in (0, 1)]
    doc = diagnose(*files)
    assert doc["jobs"] == [{"traces": [0, 1], "ranks": doc["ranks"], "note": None}]
    s = doc["ranks"]["summary"]
    assert s["ranks"] == 2 and "likely_straggler" not in s and s["slowest_rank"] is None
    assert s["spread_ns"] < s["noise_ns"]


def test_a_directory_of_fixtures_groups_the_rank_pairs():
    reports = [default_report(f) for f in sorted(fixture_trace("resnet18_baseline.sqlite").parent.glob("*.sqlite"))]
    groups = ranks.jobs(reports)
    pairs = [[reports[i]["trace"]["path"].rsplit("/", 1)[1] for i in g["traces"]] for g in groups if len(g["traces"]) > 1]
    assert sorted(pairs) == (
        [[f"gloo_8rank_{r}.sqlite" for r in range(8)], [f"gloo_8rank_slow_{r}.sqlite" for r in range(8)],
         ["mpi_hoststaged_0.sqlite", "mpi_hoststaged_1.sqlite"]]
        + [[f"vit_l32_2gpu_{v}_0.sqlite", f"vit_l32_2gpu_{v}_1.sqlite"]
           for v in ("bf16", "bucket100", "bucket_view", "ddp", "powersgd")])
    assert sum(len(g["traces"]) == 1 for g in groups) == len(reports) - 28  # every single-process capture alone


def test_a_spread_of_nanoseconds_names_no_slowest_rank():
    r0 = analyze(fixture_trace("vit_l32_2gpu_ddp_0.sqlite"), None)
    r1 = copy.deepcopy(r0)
    r1["trace"]["path"] = "other_1.sqlite"
    for d in r1["summary"]["devices"]:
        d["step_median_window_ns"] += 5.5
    view = ranks.cross_rank([r0, r1])
    s = view["summary"]
    assert s["spread_ns"] == 5.5 and s["slowest_rank"] is None and "likely_straggler" not in s
    assert s["noise_ns"] >= 0.02 * s["step_ns_median"]


def test_a_file_without_runtime_calls_leaves_the_next_files_metrics_whole(tmp_path):
    """Files analysed one after another in one process (`--jobs 1`): a capture without CUDA runtime or OS
    runtime data (a doctored copy of a real fixture, its runtime table dropped) used to append the runtime
    metrics to the module's list of OS-runtime metrics, and every later file without OSRT data then reported
    null launch and sync figures."""
    import sqlite3

    src = fixture_trace("recompile_static.sqlite")    # runtime calls, no OS runtime table
    bare = tmp_path / "bare" / "no_runtime.sqlite"
    bare.parent.mkdir()
    bare.write_bytes(src.read_bytes())
    with sqlite3.connect(bare) as con:
        con.execute("DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME")
    result = CliRunner().invoke(cli, ["diagnose", "--format", "json", "--jobs", "1", str(bare), str(src)])
    assert result.exit_code == 0, result.output
    first, second = (t["summary"]["devices"] for t in json.loads(result.output)["traces"])
    assert first[0]["launch_calls"] is None
    assert second == default_report(src)["summary"]["devices"] and second[0]["launch_calls"] == 20986
