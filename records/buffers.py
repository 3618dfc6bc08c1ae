"""Large byte buffers without page faults: glibc's malloc tuned for processes that move record batches.

A mirror moves megabytes per fetch: the response frame, its records, each batch's bytes, the
request to the destination. glibc serves every block above ``M_MMAP_THRESHOLD`` (128 KiB at
first) with a fresh mmap and unmaps it on free, so each copy of a batch page-faults every 4 KiB
page it touches: decoding and splitting a 4 MB Fetch response cost 5.5 ms of CPU, 1.4 ms with
the blocks kept on the heap. ``keep_large_buffers`` raises the threshold to glibc's maximum
(32 MiB) and keeps up to ``M_TRIM_THRESHOLD`` of freed heap before giving memory back.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's upper bound (HEAP_MAX_SIZE / 2 on 64-bit)
TRIM_THRESHOLD_BYTES = 64 << 20  # freed heap kept for the next batches before it is returned


_libc: object = None  # glibc once looked up; False for another C library (``_glibc``)


def _glibc() -> ctypes.CDLL | None:
    """glibc, or None: musl has a ``mallopt`` that ignores these settings and no ``malloc_trim``."""
    global _libc
    if _libc is None:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c"))
            libc.gnu_get_libc_version.restype = ctypes.c_char_p
            libc.malloc_trim.argtypes = (ctypes.c_size_t,)
            _libc = libc
        except (OSError, AttributeError, TypeError):
            _libc = False
    return _libc or None  # type: ignore[return-value]


def keep_large_buffers() -> bool:
    """Tunes glibc's malloc as the module docstring says; False where there is no glibc ``mallopt``
    (another C library: nothing changes)."""
    libc = _glibc()
    if libc is None:
        return False
    ok = bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
    if not ok:
        log.debug("mallopt refused the buffer settings (glibc %s)", libc.gnu_get_libc_version().decode())
    return ok


def release_free_heap() -> bool:
    """Gives the free pages of every malloc arena back to the system (glibc ``malloc_trim(0)``).

    With ``keep_large_buffers`` the heap keeps up to its trim threshold free at its top, and
    blocks up to 32 MiB live on the arenas instead of their own mmaps, so the freed middle of
    an arena stays resident: a worker's mass failover leaves each job's observations, decisions
    and record batches (megabytes) there. Call after such a burst, not per small job: it walks
    every arena's free chunks. False without glibc (nothing done)."""
    libc = _glibc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True


M_ARENA_MAX = -8


def one_heap() -> bool:
    """Every thread allocates from glibc's main arena (``M_ARENA_MAX`` 1), not an arena of its own.

    With ``keep_large_buffers`` each arena keeps what its threads freed, so a worker whose jobs
    run on a pool thread and whose changelog writes run on the event loop held both threads'
    peaks apart (and RocksDB's threads their own): at 50k partitions its peak RSS in a mass
    failover was 283-295 MB, with one arena 264 MB, for no more CPU (the GIL serialises the
    Python threads' allocations anyway). Call first thing, before threads start. False
    without glibc (nothing done)."""
    libc = _glibc()
    return libc is not None and bool(libc.mallopt(M_ARENA_MAX, 1))
