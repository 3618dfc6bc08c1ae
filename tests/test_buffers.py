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
