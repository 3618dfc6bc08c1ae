"""``records.buffers.keep_large_buffers``: copies of megabyte buffers stop page-faulting."""

from __future__ import annotations

import subprocess
import sys

import pytest

_COPIES = """
import resource, sys
from records.buffers import keep_large_buffers
if sys.argv[1] == "tuned":
    assert keep_large_buffers()
src = bytes(4 << 20)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for i in range(20):  # as a fetch: a response frame, its partitions' records, their batches
    frame = src[i:]
    parts = [frame[j << 20 : (j + 1) << 20] for j in range(4)]
    batches = [p[k : k + 65536] for p in parts for k in range(0, 1 << 20, 65536)]
    del frame, parts, batches
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", _COPIES, mode], capture_output=True, text=True, check=True)
    return int(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_megabyte_copies_reuse_the_heap_instead_of_faulting_in_fresh_pages() -> None:
    default, tuned = _faults("default"), _faults("tuned")
    assert default >= 20 * 1024  # every frame and records block mmapped afresh: a fault per 4 KiB page
    assert tuned < default / 5


_FREED = """
import sys
from records.buffers import keep_large_buffers, release_free_heap
assert keep_large_buffers()
def rss_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) >> 10
kept, blocks = [], []
for i in range(96):  # 1 MiB blocks with a small survivor between them, as a job leaves the heap
    blocks.append(bytearray(1 << 20))
    kept.append(bytearray(4096))  # above pymalloc's 512 bytes: on the same heap
before = rss_mb()
del blocks
freed = rss_mb()
if sys.argv[1] == "trim":
    assert release_free_heap()
print(before, freed, rss_mb())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_release_free_heap_gives_freed_blocks_back_that_keep_large_buffers_keeps() -> None:
    def run(mode: str) -> list[int]:
        out = subprocess.run([sys.executable, "-c", _FREED, mode], capture_output=True, text=True, check=True)
        return [int(x) for x in out.stdout.split()]

    before, freed, kept = run("keep")
    assert kept >= before - 16  # the freed megabytes stay resident under the tuned thresholds
    before, freed, trimmed = run("trim")
    assert trimmed <= before - 80


_ARENAS = """
import ctypes, ctypes.util, sys, threading
from records.buffers import keep_large_buffers, one_heap
assert keep_large_buffers()
if sys.argv[1] == "one":
    assert one_heap()
start = threading.Barrier(4)
def work():
    start.wait()  # all at once: a thread that finds the arena busy makes one of its own
    kept = [bytearray(4096) for _ in range(20000)]
threads = [threading.Thread(target=work) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
ctypes.CDLL(ctypes.util.find_library("c")).malloc_stats()  # one "Arena N:" block per arena, on stderr
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_one_heap_keeps_every_thread_in_the_main_arena() -> None:
    def arenas(mode: str) -> int:
        out = subprocess.run([sys.executable, "-c", _ARENAS, mode], capture_output=True, text=True, check=True)
        return sum(1 for line in out.stderr.splitlines() if line.startswith("Arena "))

    assert arenas("many") > 1
    assert arenas("one") == 1
