"""The page reader (trace/pages.py) gives exactly what the SQL reader gives, on every real export here, and
hands whatever it does not decode to the SQL reader."""
import sqlite3

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import (SHARED_TRACES, fixture_trace, kernels_with_changing_steady_columns, per_file_fixtures, shared_trace,
                      use_reader)
from tiny import TinyTrace, gtid
from nsysanalyze.errors import InputError
from nsysanalyze.trace import Trace, pages, tables

PAGED = [tables.KERNEL, tables.MEMCPY, tables.MEMSET, tables.RUNTIME, tables.OSRT]


def every_loader(path) -> dict[str, pd.DataFrame]:
    """Each loader that can take the page reader, as the analysis calls it."""
    with Trace(path) as t:
        out = {kind: t.gpu_table(kind) for kind in ("kernels", "memcpys", "memsets")}
        out |= {f"{kind} (compact)": getattr(tables, kind)(t.conn, t.schema, None, compact=True)
                for kind in ("kernels", "memcpys", "memsets")}
        out["runtime"] = t.runtime
        ids = sorted(t.api_names())
        out["runtime by name"] = t.runtime_named(ids[::2])
        out["osrt"], out["munmap"] = t.osrt(None), t.osrt(("munmap",))
        out["osrt of two threads"] = t.osrt(None, threads=out["osrt"]["globalTid"].drop_duplicates()[:2].tolist())
        out["kernel names"] = t.kernel_names()
    return out


def loaded_by_pages(path, monkeypatch) -> tuple[dict[str, pd.DataFrame], dict[str, str]]:
    """:func:`every_loader` with the page reader on, and per table of PAGED that it read: "pages" when every block
    was decoded, "sql" when one made the reader stand aside."""
    how: dict[str, str] = {}
    decode = pages.TablePages.decode

    def counting(self, numbers, fields, rowids=None, early=None):
        try:
            result = decode(self, numbers, fields, rowids, early)
        except pages.Unsupported:
            how[self.table] = "sql"
            raise
        how.setdefault(self.table, "pages")
        return result

    monkeypatch.setattr(pages.TablePages, "decode", counting)
    plan = tables._page_plan

    def naming(conn, table, exprs, where):
        made = plan(conn, table, exprs, where)
        if made is not None:
            made.table.table = table
        return made

    monkeypatch.setattr(tables, "_page_plan", naming)
    return every_loader(path), how


def real_exports() -> list:
    return per_file_fixtures() + sorted(SHARED_TRACES.glob("*/*.sqlite")) or [pytest.param(None, marks=pytest.mark.skip)]


@pytest.mark.parametrize("path", real_exports(), ids=lambda p: getattr(p, "name", "none"))
def test_every_loader_equals_the_sql_reader_on_real_exports(path, monkeypatch):
    """Every real export (this project's fixtures, the shared traces of other projects and nsys versions): each
    loader's frame is equal, dtype for dtype, with and without the page reader; and the page reader decoded
    every such table the export has rows in (no silent fallback to SQL)."""
    with monkeypatch.context() as m:
        m.setattr(tables, "PAGES", False)
        expected = every_loader(path)
    got, how = loaded_by_pages(path, monkeypatch)
    for name, frame in expected.items():
        pd.testing.assert_frame_equal(got[name], frame, obj=name)
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        present = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        with_rows = {t for t in PAGED if t in present and conn.execute(f'SELECT 1 FROM "{t}" LIMIT 1').fetchone()}
    assert how == dict.fromkeys(with_rows, "pages")


def test_one_page_chunks_across_a_multi_level_b_tree(tmp_path, monkeypatch):
    """A real export's kernels with a device, a stream and a process that change part-way (as a multi-GPU capture
    holds them), read one leaf page per chunk: equal to SQL, the steady columns written out where they change."""
    path = kernels_with_changing_steady_columns(tmp_path)
    use_reader(monkeypatch, "pages")
    got = every_loader(path)
    monkeypatch.setattr(tables, "PAGES", False)
    for name, frame in every_loader(path).items():
        pd.testing.assert_frame_equal(got[name], frame, obj=name)
    assert sorted(set(got["kernels"]["deviceId"])) == [0, 3] and got["kernels"]["streamId"].nunique() == 3


def tiny_table(tmp_path, rows: list[tuple], page_size: int = 4096, extra: str = "") -> sqlite3.Connection:
    """Unit-test input built here (not a trace): a table t(start, "end", value{extra}) with these rows, in a file
    of this page size; returned as the read-only connection the trace layer uses."""
    path = tmp_path / f"t{page_size}.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA page_size = {page_size}")
        conn.execute(f'CREATE TABLE t (start INTEGER, "end" INTEGER, value INTEGER{extra})')
        conn.executemany(f"INSERT INTO t VALUES ({', '.join('?' * len(rows[0]))})", rows)
    conn.close()
    return tables.readonly_connection(path)


EXTREMES = [0, 1, -1, 127, -128, 128, 32767, -32768, 1 << 16, -(1 << 20), (1 << 23) - 1, -(1 << 23), 1 << 23,
            -(1 << 23) - 1, (1 << 31) - 1, -(1 << 31), 1 << 40, -(1 << 47), (1 << 47) - 1, 1 << 48, (1 << 63) - 1, -(1 << 63)]


@pytest.mark.parametrize("page_size", [512, 4096, 65536])
def test_integers_of_every_width_and_b_trees_of_several_levels(tmp_path, page_size):
    """Unit test on a file built here: values of every serial type (0 and 1 stored in no bytes, 1-8 byte
    integers, negatives) in 30,000 rows, over one- to three-level b-trees (512-byte pages: three levels),
    equal to what SQL gives; a NULL start (filtered out) and a NULL value (COALESCE default) too."""
    n = 30_000
    values = [EXTREMES[i % len(EXTREMES)] for i in range(n)]
    rows = [(i, i + 5, v) for i, v in enumerate(values)]
    rows[7] = (None, 12, 3)
    rows[11] = (11, 16, None)
    conn = tiny_table(tmp_path, rows, page_size)
    exprs = {"start": "start", "end": '"end"', "value": 'COALESCE("value", -7)'}
    got = tables.fetch_columns(conn, "t", exprs, tables.TIMED)
    expected = [(s, e, -7 if v is None else v) for s, e, v in rows if s is not None]
    assert got.to_numpy().tolist() == [list(r) for r in expected]
    levels = pages.TablePages(tmp_path / f"t{page_size}.sqlite", conn.execute(
        "SELECT rootpage FROM sqlite_master WHERE name = 't'").fetchone()[0])
    assert levels.leaves.size > (100 if page_size == 512 else 1)
    levels.close()


@pytest.mark.parametrize("largest", [(1 << 56) - 1, 1 << 56])
def test_rowids_of_every_varint_length(tmp_path, largest):
    """Unit test on a file built here: rows whose rowids take varints of 1 to 8 bytes (up to 2^56 - 1; the
    decoder reads a cell's first 8 bytes at once) decode to SQL's values, also within a rowid range; a 9-byte
    one (2^56 and up) is not read (Unsupported: the SQL reader's)."""
    rowids = [1, 127, 128, 1 << 14, 1 << 21, 1 << 28, 1 << 35, 1 << 42, (1 << 49) - 1, 1 << 49, largest]
    path = tmp_path / "rowids.sqlite"
    with sqlite3.connect(path) as writer:
        writer.execute('CREATE TABLE t (start INTEGER, "end" INTEGER, value INTEGER)')
        writer.executemany('INSERT INTO t (rowid, start, "end", value) VALUES (?, ?, ?, ?)',
                           [(r, i, i + 1, r % 1000) for i, r in enumerate(rowids)])
        root = writer.execute("SELECT rootpage FROM sqlite_master WHERE name = 't'").fetchone()[0]
    table = pages.TablePages(path, root)
    try:
        for span in (None, (128, 1 << 42), (1 << 49, 1 << 62)):
            expected = [[i, r % 1000] for i, r in enumerate(rowids) if span is None or span[0] <= r < span[1]]
            if largest >= 1 << 56:
                with pytest.raises(pages.Unsupported, match="9-byte varint"):
                    table.decode(table.leaves, [0, 2], span)
                continue
            (start, value), _ = table.decode(table.leaves, [0, 2], span)
            assert np.column_stack([start, value]).tolist() == expected
    finally:
        table.close()


@pytest.mark.parametrize("rowids", [None, (1500, 3000)])
def test_a_time_test_before_the_other_columns_keeps_the_same_rows(monkeypatch, rowids):
    """The real ResNet-18 export's OS runtime calls: with ``early`` (a test on start and end that every kept
    row passes) the page reader decodes the other columns of fewer rows, and gives the rows ``keep`` alone gives,
    as the SQL reader does (also within a rowid range)."""
    path = fixture_trace("resnet18_baseline.sqlite")
    exprs = {"start": "start", "end": '"end"', "globalTid": "globalTid", "nameId": "nameId"}
    where = tables.Where(("end", "start", "globalTid", "nameId"))

    def time_test(s, e):  # a third of the calls (any test on the two times would do)
        return (s % 3 == 0) | (e - s > 20_000)

    def keep(chunk):
        return time_test(chunk["start"], chunk["end"]) & (chunk["nameId"] != 370)

    decoded = []
    decode = pages.TablePages.decode

    def counting(self, numbers, fields, rowids=None, early=None):
        values, nulls = decode(self, numbers, fields, rowids, early)
        decoded.append((early is not None, len(values[0])))
        return values, nulls

    monkeypatch.setattr(pages.TablePages, "decode", counting)
    with Trace(path) as trace:
        alone = tables.fetch_columns(trace.conn, tables.OSRT, exprs, where, keep=keep, rowids=rowids)
        read_alone = sum(n for _, n in decoded)
        decoded.clear()
        tested = tables.fetch_columns(trace.conn, tables.OSRT, exprs, where, keep=keep, rowids=rowids,
                                      early=(("start", "end"), time_test))
        monkeypatch.setattr(tables, "PAGES", False)
        by_sql = tables.fetch_columns(trace.conn, tables.OSRT, exprs, where, keep=keep, rowids=rowids,
                                      early=(("start", "end"), time_test))
    pd.testing.assert_frame_equal(tested, alone)
    pd.testing.assert_frame_equal(by_sql, alone)
    assert all(early for early, _ in decoded) and 0 < len(alone) < sum(n for _, n in decoded) < read_alone / 2


@pytest.mark.parametrize("one_width", [False, True])
def test_columns_between_the_tested_ones_are_gathered_for_the_kept_rows(tmp_path, monkeypatch, one_width):
    """Unit test on a file built here: an early test on start and tag (the first and last columns) keeps about
    half of 5,000 rows; "end" and value, which lie between them and the test does not read, are decoded for the
    kept rows only (their positions noted on the way). With values of every width and NULLs (COALESCE default),
    or all of one width, the page reader gives SQL's rows and values."""
    n = 5000
    rows = [(i, i + (i % 300), 1000 + i if one_width else (None if i % 17 == 5 else EXTREMES[i % len(EXTREMES)]),
             i % 7) for i in range(n)]
    conn = tiny_table(tmp_path, rows, extra=", tag INTEGER")
    exprs = {"start": "start", "end": '"end"', "value": 'COALESCE("value", -7)', "tag": "tag"}
    where = tables.Where(not_null=("end", "start", "tag"))
    early = (("start", "tag"), lambda start, tag: (start % 3 == 0) | (tag == 2))
    decoded = []
    decode = pages.TablePages.decode

    def recording(self, numbers, fields, rowids=None, early=None):
        decoded.append(early)
        return decode(self, numbers, fields, rowids, early)

    monkeypatch.setattr(pages.TablePages, "decode", recording)
    got = tables.fetch_columns(conn, "t", exprs, where, early=early)
    monkeypatch.setattr(tables, "PAGES", False)
    expected = tables.fetch_columns(conn, "t", exprs, where, early=early)
    pd.testing.assert_frame_equal(got, expected)
    kept = [(s, e, -7 if v is None else v, t) for s, e, v, t in rows if s % 3 == 0 or t == 2]
    assert got.to_numpy().tolist() == [list(r) for r in kept] and 2000 < len(kept) < 3000
    assert decoded and all(e is not None and e[0] == (0, 3) for e in decoded)  # the page reader tested early


def test_a_filter_by_ids_and_constant_expressions(tmp_path):
    """Unit test on a file built here: ``within`` keeps the rows whose value is among the ids (a NULL never is),
    an empty id list keeps none, and a constant expression is that integer in every row."""
    conn = tiny_table(tmp_path, [(1, 2, 5), (3, 4, None), (5, 6, 9), (7, 8, 5)])
    exprs = {"start": "start", "value": 'COALESCE("value", 0)', "zero": "0", "minus": "-1"}
    got = tables.fetch_columns(conn, "t", exprs, tables.Where(("start",), (("value", (5, 0)),)))
    assert got.to_numpy().tolist() == [[1, 5, 0, -1], [7, 5, 0, -1]]
    assert tables.fetch_columns(conn, "t", exprs, tables.Where((), (("value", ()),))).empty


@pytest.mark.parametrize("change", ["UPDATE t SET value = 2.5 WHERE start = 3", "UPDATE t SET value = 'x' WHERE start = 3",
                                    "UPDATE t SET value = NULL WHERE start = 3"])
def test_what_the_page_reader_leaves_to_sql_comes_out_as_sql_gives_it(tmp_path, monkeypatch, change):
    """Unit test on a file built here: a float, a text or a NULL where an integer must be makes the page reader
    stand aside, and the outcome is the SQL reader's: the same error for a text or a NULL (InputError: the
    export is corrupted), the same values for a float (SQL's text of 2.5 parses as 2: its behaviour, kept)."""
    conn = tiny_table(tmp_path, [(1, 2, 5), (3, 4, 6)])
    with sqlite3.connect(tmp_path / "t4096.sqlite") as writer:
        writer.execute(change)

    def outcome():
        try:
            return tables.fetch_columns(conn, "t", {"start": "start", "value": "value"}, tables.TIMED).to_numpy().tolist()
        except InputError as e:
            return str(e)

    with monkeypatch.context() as m:
        m.setattr(tables, "PAGES", False)
        expected = outcome()
    assert outcome() == expected
    assert expected == ([[1, 5], [3, 2]] if "2.5" in change else
                        "t: non-integer values where nsys writes integers (start, value): the export is corrupted")


@pytest.mark.parametrize("case, reason", [("overflow", "overflow"), ("added column", "fewer fields"),
                                          ("long text before", "multi-byte serial type")])
def test_overflow_pages_added_columns_and_long_headers_go_to_sql(tmp_path, monkeypatch, case, reason):
    """Unit test on a file built here: a row whose text spills to overflow pages, rows written before a column
    was added (fewer fields than the table has), a text long enough for a two-byte serial type before the asked
    column: each makes the page reader stand aside (for that reason), and the values are SQL's."""
    long = {"overflow": 20_000, "long text before": 70}.get(case, 1)
    rows = [(i, i + 1, i * 3, "x" * (long if i == 5 else 1)) for i in range(50)]
    if case == "added column":
        conn = tiny_table(tmp_path, rows, extra=", note TEXT")
        with sqlite3.connect(tmp_path / "t4096.sqlite") as writer:
            writer.execute("ALTER TABLE t ADD COLUMN later INTEGER")
            writer.execute("INSERT INTO t VALUES (100, 101, 300, 'y', 8)")
    else:
        conn = tiny_table(tmp_path, [(*r, -r[0]) for r in rows] + [(100, 101, 300, "y", 8)],
                          extra=", note TEXT, later INTEGER")
    reasons = []
    decode = pages.TablePages.decode

    def recording(self, numbers, fields, rowids=None, early=None):
        try:
            return decode(self, numbers, fields, rowids, early)
        except pages.Unsupported as e:
            reasons.append(str(e))
            raise

    monkeypatch.setattr(pages.TablePages, "decode", recording)
    exprs = {"start": "start", "value": "value", "later": 'COALESCE("later", -1)'}
    if case == "overflow":
        exprs.pop("later")
    got = tables.fetch_columns(conn, "t", exprs, tables.TIMED)
    expected = conn.execute(f"SELECT {', '.join(exprs.values())} FROM t ORDER BY rowid").fetchall()
    assert got.to_numpy().tolist() == [list(r) for r in expected] and len(expected) == 51
    assert reasons and reason in reasons[-1]
    if case == "added column":
        assert got["later"].tolist() == [-1] * 50 + [8]


def test_a_trace_read_by_pages_is_never_written(tmp_path):
    """The page reader opens the export read-only and only reads it: bytes and mtime unchanged, no side file."""
    t = TinyTrace(tmp_path / "k.sqlite")
    t.process(1)
    for i in range(2000):
        t.kernel(10 * i, 10 * i + 5, i, 1)
        t.runtime(10 * i - 3, 10 * i - 1, i, gtid(1, 1))
    path = t.close()
    before, mtime = path.read_bytes(), path.stat().st_mtime_ns
    with Trace(path) as trace:
        assert len(trace.gpu_table("kernels")) == 2000 and len(trace.runtime) == 2000
    assert path.read_bytes() == before and path.stat().st_mtime_ns == mtime
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.sqlite"]


@pytest.fixture(scope="module")
def kernel_leaves():
    """The real ResNet-18 export's bytes and the byte offsets of its kernel table's leaf and interior pages."""
    src = shared_trace("h200/resnet18-baseline-nvtx.sqlite")
    with Trace(src) as t:
        plan = tables._page_plan(t.conn, tables.KERNEL, {"start": "start"}, tables.TIMED)
    table = plan.table
    table.close()
    return src.read_bytes(), table.page_size, [int(p) - 1 for p in table.leaves]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 10_000), st.floats(0, 1, exclude_max=True), st.binary(min_size=1, max_size=16)),
                min_size=1, max_size=4))
def test_corrupted_table_pages_give_values_or_input_errors(kernel_leaves, tmp_path, hits):
    """Property-based: bytes of the real export's kernel leaf pages overwritten (headers, cell pointers, records):
    the page reader decodes, or stands aside for the SQL reader, which reads or reports the corruption; never
    another exception."""
    data, page_size, leaves = kernel_leaves
    data = bytearray(data)
    for which, where, payload in hits:
        at = leaves[which % len(leaves)] * page_size + int(where * (page_size - len(payload)))
        data[at:at + len(payload)] = payload
    path = tmp_path / "corrupt.sqlite"
    path.write_bytes(bytes(data))
    try:
        with Trace(path) as t:
            t.gpu_table("kernels")
    except (InputError, sqlite3.DatabaseError):
        pass


@pytest.mark.parametrize("page_size", [512, 4096])
def test_rowid_ranges_read_only_their_pages(tmp_path, monkeypatch, page_size):
    """Unit test on a file built here (30,000 rows, two- and three-level b-trees): a rowid range [lo, hi) gives
    exactly those rows, as SQL gives them, at page and b-tree edges and outside the table; the page reader
    decodes only the leaf pages that can hold them."""
    rows = [(i, i + 5, (i * 7919) % 1000 - 500) for i in range(30_000)]
    conn = tiny_table(tmp_path, rows, page_size)
    exprs = {"start": "start", "value": "value"}
    decoded = []
    decode = pages.TablePages.decode
    monkeypatch.setattr(pages.TablePages, "decode", lambda self, p, f, r=None, early=None: decoded.append(p.size) or decode(self, p, f, r, early))
    leaves = tables._page_plan(conn, "t", exprs, tables.TIMED).table.leaves.size
    for lo, hi in [(1, 2), (1, 30_001), (0, 10**12), (777, 778), (12_345, 23_456), (30_000, 30_001), (40_000, 50_000),
                   (5, 5), (9, 3)]:
        decoded.clear()
        got = tables.fetch_columns(conn, "t", exprs, tables.TIMED, rowids=(lo, hi))
        expected = [[s, v] for s, _, v in rows[max(lo - 1, 0):max(hi - 1, 0)]]
        assert got.to_numpy().tolist() == expected, (lo, hi)
        with monkeypatch.context() as m:
            m.setattr(tables, "PAGES", False)
            pd.testing.assert_frame_equal(tables.fetch_columns(conn, "t", exprs, tables.TIMED, rowids=(lo, hi)), got)
        if hi - lo < 1000:
            assert sum(decoded) <= 2, (lo, hi, decoded)  # one or two leaf pages, of hundreds
    assert leaves > 50


def test_without_preadv_the_pages_are_read_with_pread(tmp_path, monkeypatch):
    """Where os has no preadv (macOS) the page reader reads with pread and a copy, the same values; where it has
    no pread either (Windows) it stands aside for SQL."""
    rows = [(i, i + 5, i * 3) for i in range(5_000)]
    conn = tiny_table(tmp_path, rows)
    exprs = {"start": "start", "value": "value"}
    expected = [[s, v] for s, _, v in rows]
    monkeypatch.delattr(pages.os, "preadv")
    assert tables.fetch_columns(conn, "t", exprs, tables.TIMED).to_numpy().tolist() == expected
    monkeypatch.delattr(pages.os, "pread")
    assert tables._page_plan(conn, "t", exprs, tables.TIMED) is None
    assert tables.fetch_columns(conn, "t", exprs, tables.TIMED).to_numpy().tolist() == expected


@pytest.mark.parametrize("asked", [("c2", "c9"), ("c3", "c4", "c10"), ("c5",), ("c2", "c3", "c5", "c9", "c10")])
def test_fields_alike_in_every_row_and_fields_that_differ(tmp_path, monkeypatch, asked):
    """Unit test on a file built here: 11 columns over two header words, whose serial types are the same in every
    row of a block (read with one type per field), hold only 0 and 1 (types 8 and 9: no bytes either way, read
    per row when asked, skipped when not), or differ in width from the middle of the table on (every block
    before it alike, the ones after it not); the page reader decodes every block and gives what SQL gives for
    each set of asked columns."""
    decode, decoded = pages.TablePages.decode, []
    monkeypatch.setattr(pages.TablePages, "decode", lambda *a, **k: decoded.append(decode(*a, **k)) or decoded[-1])
    monkeypatch.setattr(tables, "CHUNK_PAGES_BYTES", 1 << 16)  # several blocks: alike ones and differing ones
    n = 20_000
    rows = [(100_000 + i, 100_005 + i, 7, i % 2, (i // 3) % 2, EXTREMES[i % len(EXTREMES)] if i > n // 2 else 300,
             i % 2, 1 << 20, 0, 1, (i // 7) % 2, 40_000) for i in range(n)]
    extra = "".join(f", c{k} INTEGER" for k in range(3, 12))
    conn = tiny_table(tmp_path, rows, extra=extra)
    names = ["value", *(f"c{k}" for k in range(3, 12))]
    column = {f"c{k + 2}": names[k] for k in range(len(names))}  # c2 is the table's "value" column
    exprs = {"start": "start", **{c: f'"{column[c]}"' for c in asked}}
    got = tables.fetch_columns(conn, "t", exprs, tables.TIMED)
    sql = "SELECT start, " + ", ".join(f'"{column[c]}"' for c in asked) + " FROM t ORDER BY rowid"
    assert got.to_numpy().tolist() == [list(r) for r in conn.execute(sql)]
    assert sum(len(values[0]) for values, _ in decoded) == n  # every row by the page reader, none by SQL
