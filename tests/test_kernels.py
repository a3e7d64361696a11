"""`nsysanalyze kernels`: per-kernel totals checked against plain SQL on real fixtures, and the formats."""
import csv
import io
import json
import sqlite3
import statistics

import pandas as pd
import pytest
from click.testing import CliRunner

from conftest import fixture_trace
from nsysanalyze.analysis import Analysis
from nsysanalyze.cli import cli
from nsysanalyze.kernels import aggregate, from_trace, kernel_table
from nsysanalyze.metrics import steady_steps

BASELINE = fixture_trace("resnet18_baseline.sqlite")
DDP0 = fixture_trace("vit_l32_2gpu_ddp_0.sqlite")


def sql(path, query):
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return conn.execute(query).fetchall()
    finally:
        conn.close()


def run(*args):
    result = CliRunner().invoke(cli, ["kernels", *map(str, args)])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("path", [BASELINE, DDP0])
def test_totals_equal_the_traces_kernel_time(path):
    with Analysis(path) as a:
        table = kernel_table(a)
    per_device = dict(((p, d), t) for p, d, t in sql(
        path, 'SELECT globalPid, deviceId, sum("end" - start) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY 1, 2'))
    got = table.groupby(["globalPid", "deviceId"])["total_ns"].sum().to_dict()
    assert got == per_device
    assert table.groupby(["globalPid", "deviceId"])["share"].sum().round(12).eq(1).all()
    assert table["count"].sum() == sql(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]


def test_top_entry_equals_a_group_by_demangled_name():
    top = sql(BASELINE, 'SELECT s.value, count(*), sum(k."end" - k.start), min(k."end" - k.start), '
                        'max(k."end" - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s '
                        'ON s.id = k.demangledName GROUP BY k.demangledName ORDER BY 3 DESC LIMIT 1')[0]
    doc = json.loads(run(BASELINE, "--format", "json", "--top", "1"))
    k = doc["kernels"][0]
    assert (k["name"], k["count"], k["total_ns"], k["min_ns"], k["max_ns"]) == top
    durations = [r[0] for r in sql(BASELINE, 'SELECT k."end" - k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN '
                                             f"StringIds s ON s.id = k.demangledName WHERE s.value = '{top[0]}'")]
    assert k["median_ns"] == statistics.median(durations) and k["mean_ns"] == pytest.approx(statistics.mean(durations))
    # as `nsys stats -r cuda_gpu_kern_sum` prints it for this file (nsys 2023.4.4): 23.4%, 30 instances
    assert (round(100 * k["share"], 1), k["count"], k["total_ns"], k["median_ns"]) == (23.4, 30, 41824539, 947888.0)
    assert doc["name_column"] == "demangledName" and doc["devices"][0]["kernel_names"] == 64


def test_per_step_counts_only_kernels_starting_in_the_steady_steps():
    with Analysis(BASELINE) as a:
        table = kernel_table(a)
        steps = steady_steps(a.steps())
        kernels = a.trace.kernel_names()
    kernels["duration_ns"] = kernels["end"] - kernels["start"]
    inside = pd.Series(False, index=kernels.index)
    for w in steps.itertuples():  # the plain way: one window at a time
        inside |= (kernels["start"] >= w.window_start) & (kernels["start"] < w.window_end)
    assert (table["steps"] == len(steps)).all() and len(steps) == 2
    assert (table["per_step_ns"] * len(steps)).sum() == pytest.approx(kernels.loc[inside, "duration_ns"].sum())
    assert (table["launches_per_step"] * len(steps)).sum() == pytest.approx(inside.sum())


@pytest.mark.parametrize("path", [BASELINE, DDP0, fixture_trace("tinyops_eager.sqlite")])
def test_table_from_the_metrics_kernels_equals_a_read_by_name(path):
    """The JSON view aggregates the kernels the metrics loaded; the straightforward path reads them again."""
    with Analysis(path) as a:
        pd.testing.assert_frame_equal(a.kernel_table(), from_trace(a.trace, a.steps()))


def test_aggregate_sorts_durations_exactly_when_the_keyed_sort_would_overflow():
    """Unit test on hand-made rows: a span of 2^61 ns with two groups takes the lexsort path."""
    rows = pd.DataFrame({"globalPid": [1] * 4, "deviceId": [0] * 4, "nameId": [1, 2, 1, 2],
                         "start": [0, 0, 0, 0], "end": [2 ** 61, 5, 3, 1]})
    t = aggregate([rows], {1: "a", 2: "b"})
    assert t[["name", "min_ns", "max_ns", "median_ns"]].values.tolist() == [["a", 3, 2 ** 61, (2 ** 61 + 3) / 2],
                                                                             ["b", 1, 5, 3.0]]


def test_aggregate_exact_values_on_a_tiny_frame():
    """Unit test on hand-made rows (not a trace): two names on one GPU, one name on another."""
    rows = pd.DataFrame({"globalPid": [1, 1, 1, 1, 1], "deviceId": [0, 0, 0, 0, 1], "nameId": [7, 7, 7, 8, 7],
                         "start": [0, 10, 100, 20, 0], "end": [4, 12, 110, 23, 5]})
    steps = pd.DataFrame({"globalPid": [1], "deviceId": [0], "window_start": [0], "window_end": [50]})
    t = aggregate([rows], {7: "gemm", 8: "copy"}, steps)
    gemm = t.iloc[0].to_dict()
    assert t["name"].tolist() == ["gemm", "copy", "gemm"]
    assert (gemm["count"], gemm["total_ns"], gemm["median_ns"], gemm["min_ns"], gemm["max_ns"]) == (3, 16, 4.0, 2, 10)
    assert gemm["share"] == pytest.approx(16 / 19) and gemm["per_step_ns"] == 6.0 and gemm["launches_per_step"] == 2
    other = t.iloc[2].to_dict()
    assert other["share"] == 1.0 and other["steps"] == 0 and pd.isna(other["per_step_ns"])


def test_formats_and_short_names():
    short = run(BASELINE, "--base", "--format", "json", "--top", "0")
    doc = json.loads(short)
    names = {r[0] for r in sql(BASELINE, "SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                                         "JOIN StringIds s ON s.id = k.shortName")}
    assert {k["name"] for k in doc["kernels"]} == names and doc["name_column"] == "shortName"
    rows = list(csv.DictReader(io.StringIO(run(BASELINE, DDP0, "--format", "csv", "--top", "3"))))
    assert len(rows) == 6 and rows[0]["trace"].endswith("resnet18_baseline.sqlite") and int(rows[0]["total_ns"]) > 0
    md = run(BASELINE, "--format", "markdown", "--top", "2")
    assert md.startswith("### ") and "top 2 of 64 kernel names" in md and md.count("| `") == 2
    text = run(BASELINE, "--top", "2")
    assert "void cudnn::bn_bw_1C11_kernel_new" in text and "…" not in text
    several = json.loads(run(BASELINE, DDP0, "--format", "json"))
    assert [t["trace"]["path"] for t in several["traces"]] == [str(BASELINE), str(DDP0)]
