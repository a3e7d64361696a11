"""memory.tune_allocator: with glibc, a large block freed within a stage goes back to the OS at once, and the heap's
smaller blocks are reused rather than handed back and faulted in again."""
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


def probed(script: str, mode: str) -> int:
    """The number a probe script prints, run in a fresh interpreter (the allocator settings are per process)."""
    out = subprocess.run([sys.executable, "-c", script, mode], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return int(out.stdout)


@pytest.mark.skipif(memory._glibc("mallopt") is None, reason="glibc only")
def test_large_blocks_are_unmapped_when_freed():
    """Without the fixed threshold the freed 20 MiB stays in the heap (RSS); with it, it is unmapped."""
    assert probed(PROBE, "default") >= 15 << 20
    assert probed(PROBE, "fixed") < 2 << 20


FAULTS_PROBE = """
import resource
import sys
import numpy as np
from nsysanalyze import memory

if sys.argv[1] == "tuned":
    memory.tune_allocator()
else:  # the mmap threshold alone, as before the trim threshold was set
    memory._glibc("mallopt")(memory.M_MMAP_THRESHOLD, memory.MMAP_THRESHOLD)
np.ones(3 << 17)  # 3 MiB: from the heap (below the mmap threshold and numpy's 4 MiB huge-page hint)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    block = np.ones(3 << 17)  # touched, then freed at the heap's top
    del block
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(memory._glibc("mallopt") is None, reason="glibc only")
def test_heap_blocks_are_reused_not_faulted_in_again():
    """20 blocks of 3 MiB (768 pages each) one after the other: with only the mmap threshold fixed, glibc hands
    each freed block back and the next one faults all its pages in again; with the trim threshold as well,
    the pages stay for the next block."""
    assert probed(FAULTS_PROBE, "mmap_only") >= 10_000
    assert probed(FAULTS_PROBE, "tuned") < 2_000
