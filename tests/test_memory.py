"""memory.tune_allocator: with glibc, a large block freed within a stage goes back to the OS at once."""
import subprocess
import sys

import pytest

from nsysanalyze import memory

PROBE = """
import sys
import numpy as np
from nsysanalyze import memory

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096

if sys.argv[1] == "fixed":
    memory.tune_allocator()
first = np.ones(30 << 17)  # 30 MiB, mapped; freeing it raises glibc's own threshold to 30 MiB
del first
before = rss()
block = np.ones(20 << 17)  # 20 MiB, touched
del block
print(rss() - before)
"""


def retained_bytes(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return int(out.stdout)


@pytest.mark.skipif(memory._glibc("mallopt") is None, reason="glibc only")
def test_large_blocks_are_unmapped_when_freed():
    """Without the fixed threshold the freed 20 MiB stays in the heap (RSS); with it, it is unmapped."""
    assert retained_bytes("default") >= 15 << 20
    assert retained_bytes("fixed") < 2 << 20
