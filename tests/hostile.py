"""Copies of real traces whose trace-derived strings are HTML/JS (and matplotlib '$') payloads."""
import shutil
import sqlite3
from pathlib import Path

PAYLOAD = "<script>alert('nvtx')</script><img src=x onerror=alert(document.cookie)>$\\frac{a}{$ "
KERNEL_PAYLOAD = "<script>alert('kernel')</script>"
PROCESS_PAYLOAD = "<iframe src=javascript:alert('proc')>"
HOSTILE_NAME = "evil<i>&amp;'\"x.sqlite"
# Terminal payloads: clear screen, retitle, OSC 8 hyperlink, 8-bit CSI, bidi override, bell, backspaces.
TERMINAL_PAYLOAD = ("\x1b[2J\x1b]0;pwned\x07\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\"
                    "\x9b31m\u202e\x08\x08\r ")
# Markdown payloads (PR comments): heading, link, image, HTML, mention, pipe, code, math, bare URL.
MARKDOWN_PAYLOAD = ("# Heading [link](http://evil.example) ![img](http://evil.example/x.png) <b>bold</b> "
                    "@octocat | `code` $x^2$ https://evil.example/bare *em* ")


def hostile_copy(src: Path, folder: Path, payload: str = PAYLOAD, kernel_payload: str = KERNEL_PAYLOAD,
                 process_payload: str = PROCESS_PAYLOAD, name: str = HOSTILE_NAME) -> Path:
    """``src`` copied to ``folder`` under a hostile file name, NVTX range names, kernel names and
    process names prefixed with payloads (default: HTML/JS; step numbering kept, so steps are still found)."""
    dst = folder / name
    shutil.copyfile(src, dst)
    con = sqlite3.connect(dst)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "NVTX_EVENTS" in tables:
        con.execute("UPDATE NVTX_EVENTS SET text = ? || text WHERE text IS NOT NULL AND eventType IN (59, 60)",
                    (payload,))
        con.execute("UPDATE StringIds SET value = ? || value WHERE id IN "
                    "(SELECT textId FROM NVTX_EVENTS WHERE textId IS NOT NULL AND eventType IN (59, 60))", (payload,))
    if "CUPTI_ACTIVITY_KIND_KERNEL" in tables:
        con.execute("UPDATE StringIds SET value = ? || value WHERE id IN (SELECT shortName FROM "
                    "CUPTI_ACTIVITY_KIND_KERNEL UNION SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL)",
                    (kernel_payload,))
    con.execute("UPDATE PROCESSES SET name = ? || name", (process_payload,))
    con.commit()
    con.close()
    return dst
