"""Build tiny nsys-like SQLite files for unit tests.

The tables are created from DDL copied verbatim from real nsys exports (tests/data/nsys_schema.sql);
the rows are written by the test, so every expected value can be computed exactly by hand.
These are NOT traces: they are synthetic unit-test inputs on a real schema.
"""
from __future__ import annotations

import sqlite3
from pathlib import Path

SCHEMA = Path(__file__).parent / "data" / "nsys_schema.sql"


def gpid(pid: int) -> int:
    """globalPid of a process id (pid in bits 24..47)."""
    return pid << 24


def gtid(pid: int, tid: int) -> int:
    return (pid << 24) | tid


class TinyTrace:
    def __init__(self, path: Path, nsys_version: str = "2023.4.4.54", schema_version: str = "3.7.2"):
        self.path = Path(path)
        self.conn = sqlite3.connect(self.path)
        self.conn.executescript(SCHEMA.read_text())
        self._strings: dict[str, int] = {}
        self._notnull = {}
        self.insert("META_DATA_EXPORT", name="EXPORT_PRODUCT_VERSION", value=nsys_version)
        self.insert("META_DATA_EXPORT", name="EXPORT_SCHEMA_VERSION", value=schema_version)
        self.insert("TARGET_INFO_SESSION_START_TIME", utcEpochNs=1_700_000_000_000_000_000,
                    utcTime="2026-01-01T00:00:00", localTime="2026-01-01T00:00:00")

    def string(self, value: str) -> int:
        if value not in self._strings:
            self._strings[value] = len(self._strings) + 1
            self.insert("StringIds", id=self._strings[value], value=value)
        return self._strings[value]

    def insert(self, table: str, **values) -> None:
        """Insert a row; NOT NULL columns not given are filled with 0."""
        if table not in self._notnull:
            self._notnull[table] = [r[1] for r in self.conn.execute(f'PRAGMA table_info("{table}")') if r[3]]
        row = {c: 0 for c in self._notnull[table]}
        row.update(values)
        cols = ",".join(f'"{c}"' for c in row)
        self.conn.execute(f'INSERT INTO "{table}" ({cols}) VALUES ({",".join("?" * len(row))})', list(row.values()))

    def process(self, pid: int, name: str = "python3") -> None:
        self.insert("PROCESSES", globalPid=gpid(pid), pid=pid, name=name)

    def kernel(self, start, end, corr, pid, device=0, stream=7, name="volta_sgemm"):
        n = self.string(name)
        self.insert("CUPTI_ACTIVITY_KIND_KERNEL", start=start, end=end, deviceId=device, streamId=stream,
                    correlationId=corr, globalPid=gpid(pid), demangledName=n, shortName=n, contextId=1)

    def memcpy(self, start, end, corr, pid, nbytes, copy_kind, src_kind=0, dst_kind=2, device=0, stream=7):
        self.insert("CUPTI_ACTIVITY_KIND_MEMCPY", start=start, end=end, deviceId=device, streamId=stream,
                    correlationId=corr, globalPid=gpid(pid), bytes=nbytes, copyKind=copy_kind,
                    srcKind=src_kind, dstKind=dst_kind, contextId=1)

    def memset(self, start, end, corr, pid, nbytes=64, device=0, stream=7):
        self.insert("CUPTI_ACTIVITY_KIND_MEMSET", start=start, end=end, deviceId=device, streamId=stream,
                    correlationId=corr, globalPid=gpid(pid), bytes=nbytes, value=0, contextId=1)

    def runtime(self, start, end, corr, tid, name="cudaLaunchKernel_v7000"):
        self.insert("CUPTI_ACTIVITY_KIND_RUNTIME", start=start, end=end, globalTid=tid, correlationId=corr,
                    nameId=self.string(name), eventClass=1, returnValue=0)

    def nvtx(self, start, end, text, tid, event_type=59, domain=0):
        self.insert("NVTX_EVENTS", start=start, end=end, eventType=event_type, text=None,
                    textId=self.string(text), globalTid=tid, domainId=domain)

    def osrt(self, start, end, tid, name="munmap"):
        self.insert("OSRT_API", start=start, end=end, globalTid=tid, nameId=self.string(name), eventClass=27,
                    returnValue=0, nestingLevel=0, callchainId=0)

    def close(self) -> Path:
        self.conn.commit()
        self.conn.close()
        return self.path
