"""Copies of real traces whose trace-derived strings are HTML/JS (and matplotlib '$') payloads."""
import shutil
import sqlite3
from pathlib import Path

PAYLOAD = "<script>alert('nvtx')</script><img src=x onerror=alert(document.cookie)>$\\frac{a}{$ "
KERNEL_PAYLOAD = "<script>alert('kernel')</script>"
PROCESS_PAYLOAD = "<iframe src=javascript:alert('proc')>"
HOSTILE_NAME = "evil<i>&amp;'\"x.sqlite"


def hostile_copy(src: Path, folder: Path) -> Path:
    """``src`` copied to ``folder`` under a hostile file name, NVTX range names, kernel names and
    process names prefixed with script payloads (step numbering kept, so steps are still found)."""
    dst = folder / HOSTILE_NAME
    shutil.copyfile(src, dst)
    con = sqlite3.connect(dst)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "NVTX_EVENTS" in tables:
        con.execute("UPDATE NVTX_EVENTS SET text = ? || text WHERE text IS NOT NULL AND eventType IN (59, 60)",
                    (PAYLOAD,))
        con.execute("UPDATE StringIds SET value = ? || value WHERE id IN "
                    "(SELECT textId FROM NVTX_EVENTS WHERE textId IS NOT NULL AND eventType IN (59, 60))", (PAYLOAD,))
    if "CUPTI_ACTIVITY_KIND_KERNEL" in tables:
        con.execute("UPDATE StringIds SET value = ? || value WHERE id IN (SELECT shortName FROM "
                    "CUPTI_ACTIVITY_KIND_KERNEL UNION SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL)",
                    (KERNEL_PAYLOAD,))
    con.execute("UPDATE PROCESSES SET name = ? || name", (PROCESS_PAYLOAD,))
    con.commit()
    con.close()
    return dst
