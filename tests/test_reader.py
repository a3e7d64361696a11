"""The trace reader (trace/tables.py) gives exactly what a straightforward SQL query gives, and never
writes to its input."""
import shutil
import sqlite3

import numpy as np
import pandas as pd
import pytest

from conftest import SHARED_TRACES, kernels_with_changing_steady_columns, per_file_fixtures, shared_trace, use_reader
from tiny import TinyTrace, gpid
from nsysanalyze.trace import Trace, tables
from nsysanalyze.trace.tables import pid_of


def nvtx_by_one_join(conn: sqlite3.Connection) -> pd.DataFrame:
    """The straightforward NVTX read: one query joining StringIds, row tuples, domains by a merge."""
    cols = {r[1] for r in conn.execute("PRAGMA table_info(NVTX_EVENTS)")}
    text = "e.text" if "text" in cols else "NULL"
    rows = conn.execute(
        f"SELECT e.start, e.\"end\", COALESCE(e.globalTid, 0), COALESCE(e.endGlobalTid, e.globalTid, 0), "
        f"COALESCE(e.domainId, 0), COALESCE(s.value, {text}, '') FROM NVTX_EVENTS e "
        "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType IN (59, 60) AND e.\"end\" IS NOT NULL "
        "AND e.\"end\" >= e.start ORDER BY e.rowid").fetchall()
    df = pd.DataFrame(rows, columns=["start", "end", "globalTid", "endGlobalTid", "domainId", "name"])
    df = df.astype({c: np.int64 for c in ["start", "end", "globalTid", "endGlobalTid", "domainId"]})
    created = conn.execute("SELECT COALESCE(globalTid, 0), domainId, COALESCE(text, '') FROM NVTX_EVENTS "
                           "WHERE eventType = 75").fetchall()
    first = {}
    for g, d, name in created:
        first.setdefault((int(pid_of(np.array([g]))[0]), d), name)
    df["domain"] = [first.get((int(p), d), "") if d else "" for p, d in zip(pid_of(df["globalTid"]), df["domainId"])]
    return df.astype({"name": str, "domain": str})


def nvtx_traces() -> list:
    paths = sorted(SHARED_TRACES.glob("*/*.sqlite")) + per_file_fixtures()
    return [p for p in paths if "NVTX_EVENTS" in Trace(p).schema.columns] or [pytest.param(None, marks=pytest.mark.skip)]


@pytest.mark.parametrize("path", nvtx_traces(), ids=lambda p: getattr(p, "name", "none"))
def test_nvtx_ranges_equal_one_join(path):
    with Trace(path) as t:
        got = t.nvtx
        expected = nvtx_by_one_join(t.conn)
    pd.testing.assert_frame_equal(got.reset_index(drop=True), expected)


def test_nvtx_names_from_text_and_from_missing_string_ids(tmp_path, monkeypatch):
    """Ranges named by text (no textId), by a textId with no StringIds row, and in tiny chunks."""
    src = shared_trace("h200/resnet18-baseline-nvtx.sqlite")
    path = tmp_path / "mixed.sqlite"
    shutil.copyfile(src, path)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE NVTX_EVENTS SET text = 'by text ' || (rowid % 3), textId = NULL WHERE rowid % 4 = 0")
        conn.execute("UPDATE NVTX_EVENTS SET textId = 999999, text = 'orphan' WHERE rowid % 4 = 1")
        conn.execute("UPDATE NVTX_EVENTS SET textId = 999998, text = NULL WHERE rowid % 4 = 2")
    monkeypatch.setattr(tables, "CHUNK_ROWS", 5)
    with Trace(path) as t:
        got = t.nvtx
        expected = nvtx_by_one_join(t.conn)
    assert {"by text 0", "orphan", "", "copy batch"} <= set(got["name"])
    pd.testing.assert_frame_equal(got.reset_index(drop=True), expected)


def test_osrt_calls_column_wise_names_once_per_id(tmp_path):
    """Unit test on a tiny trace built here (real nsys schema): OS runtime calls come back in rowid order
    with their names (categorical), filtered by name when asked; a call whose nameId has no string is
    left out, as the join with StringIds it replaces left it out."""
    t = TinyTrace(tmp_path / "osrt.sqlite")
    t.process(100)
    tid = gpid(100) + 7
    t.osrt(10, 20, tid, "munmap")
    t.osrt(30, 45, tid, "futex")
    t.osrt(50, 51, tid, "munmap")
    t.insert("OSRT_API", start=60, end=70, globalTid=tid, nameId=987654, eventClass=27, returnValue=0,
             nestingLevel=0, callchainId=0)
    path = t.close()
    with Trace(path) as trace:
        every = trace.osrt(None)
        munmap = trace.osrt(("munmap",))
        none = trace.osrt(("no_such_call",))
    assert every["start"].tolist() == [10, 30, 50] and every["end"].tolist() == [20, 45, 51]
    assert every["name"].tolist() == ["munmap", "futex", "munmap"] and every["globalTid"].tolist() == [tid] * 3
    assert isinstance(every["name"].dtype, pd.CategoricalDtype)
    assert munmap["start"].tolist() == [10, 50] and set(munmap["name"]) == {"munmap"}
    assert none.empty and list(none.columns) == ["start", "end", "globalTid", "name"]


def _kernels_by_sql(path, columns: list[str]) -> pd.DataFrame:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        rows = conn.execute(f"SELECT {', '.join(columns)} FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY rowid").fetchall()
    return pd.DataFrame(rows, columns=columns).astype(np.int64)


def test_steady_columns_of_one_value_take_no_memory():
    """The ResNet-18 trace's kernels run on one process, device and stream: those columns come back as
    read-only broadcast views (0 bytes a row), id columns int32 as before, values as plain SQL gives them."""
    path = shared_trace("h200/resnet18-baseline-nvtx.sqlite")
    cols = ["start", "end", "globalPid", "deviceId", "streamId"]
    with Trace(path) as t:
        got = t.gpu_table("kernels", cols)
    expected = _kernels_by_sql(path, cols)
    assert len(got) == 1167
    for c in ("globalPid", "deviceId", "streamId"):
        values = got[c].to_numpy()
        assert values.strides == (0,) and not values.flags.writeable
    assert got["deviceId"].dtype == np.int32 and got["globalPid"].dtype == np.int64
    assert got["start"].to_numpy().strides == (8,)
    pd.testing.assert_frame_equal(got.astype(np.int64), expected)


@pytest.mark.parametrize("reader", ["pages", "sql"])
def test_steady_column_that_changes_in_a_later_chunk(tmp_path, monkeypatch, reader):
    """One value for the first chunks, then others (a later chunk of one other value, a chunk that varies):
    the column is written out from that chunk on with the earlier rows' value; a value past int32 widens it.
    Both readers: SQL chunks of 100 rows, page chunks of one leaf page."""
    path = kernels_with_changing_steady_columns(tmp_path)
    use_reader(monkeypatch, reader)
    monkeypatch.setattr(tables, "CHUNK_ROWS", 100)
    cols = ["start", "globalPid", "deviceId", "streamId"]
    with Trace(path) as t:
        got = t.gpu_table("kernels", cols)
    expected = _kernels_by_sql(path, cols)
    assert sorted(set(got["deviceId"])) == [0, 3] and got["deviceId"].dtype == np.int32
    assert got["streamId"].nunique() == 3 and got["globalPid"].nunique() == 2
    for c in ("globalPid", "deviceId", "streamId"):
        assert got[c].to_numpy().strides != (0,)
    pd.testing.assert_frame_equal(got.astype(np.int64), expected)
