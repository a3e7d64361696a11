import hashlib
import os
import pickle
import re
import shutil
from pathlib import Path

import pytest

from tiny import TinyTrace, gtid

ROOT = Path(__file__).resolve().parents[1]
SHARED_TRACES = Path(os.environ.get("NSYSANALYZE_SHARED_TRACES", ROOT.parent / "shared" / "traces"))  # a worktree elsewhere: set it
FIXTURES = ROOT / "fixtures"
# Ranks of one 8-rank capture are one shape: tests that run per file take the fast rank 0 and the slow rank 3
REPEATED_RANKS = re.compile(r"gloo_8rank(_slow)?_[124567]\.sqlite$")


def per_file_fixtures() -> list[Path]:
    """The fixtures for tests that check every file: all of them, the 8-rank jobs by two ranks each."""
    return [p for p in sorted(FIXTURES.glob("*.sqlite")) if not REPEATED_RANKS.search(p.name)]


def shared_trace(rel: str) -> Path:
    """A real export from ../shared/traces, or skip the test when the folder is absent."""
    p = SHARED_TRACES / rel
    if not p.exists():
        pytest.skip(f"{p} not available (../shared is only beside the project checkout)")
    return p


def fixture_trace(name: str) -> Path:
    p = FIXTURES / name
    if not p.exists():
        pytest.skip(f"fixture {name} not present")
    return p


# --- default reports of the real exports, computed once per test run ---
# Many tests check the default report of every fixture (the schema, the rank grouping, redaction, the fast path
# against the straightforward one). Each export's report is computed once per run, by whichever test or xdist
# worker asks first, and shared through a folder of this run's temporary folder (which pytest prunes), keyed by
# the path as given, its size and its mtime: only for exports no test modifies.
REPORTS_DIR = Path()  # set for the run by _reports_folder


@pytest.fixture(scope="session", autouse=True)
def _reports_folder(tmp_path_factory):
    global REPORTS_DIR
    run = tmp_path_factory.getbasetemp()  # an xdist worker's is a folder of the run's
    REPORTS_DIR = (run.parent if os.environ.get("PYTEST_XDIST_WORKER") else run) / "default-reports"
    REPORTS_DIR.mkdir(exist_ok=True)


def default_report(path: Path) -> dict:
    """render.contract.report_of(path) with the default settings, a fresh copy each call, computed once per run."""
    from nsysanalyze.render.contract import report_of

    st = os.stat(path)
    key = hashlib.sha256(f"{path}\0{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()[:32]
    cached = REPORTS_DIR / f"{key}.pickle"
    if cached.exists():
        return pickle.loads(cached.read_bytes())
    report = report_of(path)
    part = cached.with_suffix(f".{os.getpid()}.part")
    part.write_bytes(pickle.dumps(report))
    os.replace(part, cached)
    return report


@pytest.fixture
def copy_of(tmp_path):
    """Copy a real trace into tmp (for tests that must write)."""
    def _copy(src: Path) -> Path:
        dst = tmp_path / src.name
        shutil.copyfile(src, dst)
        return dst
    return _copy


P, Q = 100, 200          # process ids
T = gtid(P, 5)           # P's main thread
TQ = gtid(Q, 7)          # Q's thread


@pytest.fixture
def tiny_path(tmp_path) -> Path:
    """Synthetic unit-test input on a real nsys schema; expected values are worked out in test_tiny_metrics.py.

    Process P (thread T) runs 3 NVTX steps 'Batch 1..3' = [0,1000), [1000,2000), [2000,3000) and drives
    GPUs 0 and 1; process Q (no NVTX) drives its own GPU 0 and reuses correlationId 1.
    """
    t = TinyTrace(tmp_path / "tiny.sqlite")
    t.insert("META_DATA_CAPTURE", name="CAPTURE_EVENT_TYPE", value="NvtxEvents")
    t.process(P)
    t.process(Q)
    for i, (a, b) in enumerate([(0, 1000), (1000, 2000), (2000, 3000)], 1):
        t.nvtx(a, b, f"Batch {i}", T)
    t.nvtx(0, 600, "get batch", T)
    t.nvtx(1000, 1500, "get batch", T)
    t.nvtx(2000, 2400, "get batch", T)
    t.nvtx(610, 690, "copy batch", T)
    # step 1: pageable HtoD, two kernels on two streams, one kernel on GPU 1, a sync memcpy API, a munmap
    t.runtime(640, 645, 11, T, "cudaMemcpy_v3020")
    t.runtime(650, 655, 1, T, "cudaMemcpyAsync_v3020")
    t.runtime(660, 665, 2, T)
    t.runtime(670, 675, 3, T)
    t.runtime(680, 685, 10, T)
    t.memcpy(700, 800, 1, P, 1000, 1, src_kind=0)
    t.kernel(800, 900, 2, P, stream=7)
    t.kernel(850, 950, 3, P, stream=8)
    t.kernel(900, 1000, 10, P, device=1)
    t.osrt(960, 1000, T)
    # step 2: pinned HtoD hidden under compute + NCCL, an NCCL kernel, a DtoD copy, a stream sync, a munmap under busy GPU
    t.runtime(1600, 1605, 12, T, "cudaStreamSynchronize_v3020")
    t.runtime(1610, 1615, 5, T)
    t.runtime(1620, 1625, 4, T, "cudaMemcpyAsync_v3020")
    t.runtime(1630, 1635, 6, T)
    t.runtime(1640, 1645, 7, T, "cudaMemcpyAsync_v3020")
    t.kernel(1650, 1750, 5, P, stream=7)
    t.memcpy(1700, 1800, 4, P, 2000, 1, src_kind=1, stream=9)
    t.kernel(1750, 1850, 6, P, stream=10, name="ncclDevKernel_AllReduce_Sum_f32_RING_LL")
    t.memcpy(1850, 1900, 7, P, 4096, 8, src_kind=2, dst_kind=2)
    t.osrt(1660, 1700, T)
    # step 3: compute and NCCL overlapping by 50
    t.runtime(2450, 2455, 8, T)
    t.runtime(2460, 2465, 9, T)
    t.kernel(2500, 2600, 8, P, stream=7)
    t.kernel(2550, 2700, 9, P, stream=10, name="ncclKernel_AllReduce_RING_LL_Sum_float")
    # process Q: no NVTX, same correlationId 1 as P's first copy
    t.runtime(650, 655, 1, TQ)
    t.kernel(0, 500, 1, Q)
    return t.close()


READERS = ["pages", "sql", "rows"]


def use_reader(monkeypatch, reader: str) -> None:
    """Make trace/tables.py read with one reader: "pages" (the page decoder, one leaf page per chunk), "sql"
    (group_concat chunks, the page decoder off) or "rows" (plain row tuples)."""
    from nsysanalyze.trace import tables
    monkeypatch.setattr(tables, "PAGES", reader == "pages")
    monkeypatch.setattr(tables, "COLUMNAR", reader != "rows")
    monkeypatch.setattr(tables, "CHUNK_PAGES_BYTES", 1)  # one page per chunk, whatever the page size


def kernels_with_changing_steady_columns(tmp_path) -> Path:
    """A copy of the real ResNet-18 export whose kernels change device (rows 500-599), stream (from row 1000 on,
    alternating) and process (row 1100, past int32) part-way, as a multi-GPU capture holds them."""
    import sqlite3

    path = tmp_path / "devices.sqlite"
    shutil.copyfile(shared_trace("h200/resnet18-baseline-nvtx.sqlite"), path)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = 3 WHERE rowid BETWEEN 500 AND 599")
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET streamId = rowid % 2 + 9 WHERE rowid >= 1000")
        conn.execute(f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET globalPid = globalPid + {1 << 40} WHERE rowid = 1100")
    return path
