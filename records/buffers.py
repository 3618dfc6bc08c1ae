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
import threading
import time

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


MADV_COLLAPSE = 25  # Linux 6.1: back a range with transparent huge pages now (not khugepaged's pace)
HUGE_PAGE = 2 << 20
DENSE = 0.75  # a mapping this resident is heap (a thread's stack, mostly untouched, is not)


def _dense_anonymous_mappings(smaps: str) -> list[tuple[int, int]]:
    """The 2 MiB-aligned ranges of the anonymous mappings in ``smaps`` (``/proc/PID/smaps``) that
    are mostly resident."""
    out: list[tuple[int, int]] = []
    vma: tuple[int, int, bool] | None = None
    rss = 0

    def done() -> None:
        if vma is None or not vma[2]:
            return
        start, end = (vma[0] + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1), vma[1] & ~(HUGE_PAGE - 1)
        if end - start >= HUGE_PAGE and rss >= DENSE * (vma[1] - vma[0]):
            out.append((start, end - start))

    for line in smaps.splitlines():
        head, _, rest = line.partition(" ")
        if "-" in head and not head.endswith(":"):
            done()
            fields = rest.split()
            lo, hi = (int(x, 16) for x in head.split("-"))
            anonymous = fields[0].startswith("rw") and fields[2] == "00:00" and (len(fields) < 5 or fields[4] == "[heap]")
            vma, rss = (lo, hi, anonymous), 0
        elif head == "Rss:":
            rss = int(rest.split()[0]) << 10
    done()
    return out


def collapse_heap() -> int:
    """Asks the kernel to back the process's dense anonymous memory (the Python heap: pymalloc's
    arenas and glibc's heap) with transparent huge pages; the bytes asked for.

    A worker or the model server at 50,000+ partitions looks things up all over a heap of
    hundreds of MB: with 4 KiB pages nearly every lookup of a mass failover misses the TLB, and
    on a virtual machine each miss is a two-level page walk (a dict lookup of a 200,000-entry
    table took ~1.9 us in the model server). With THP in ``madvise`` mode (the common default) no
    heap gets huge pages unless asked. ``MADV_COLLAPSE`` (Linux 6.1) copies a range into huge
    pages at once, in the calling thread, without the GIL; ranges already collapsed cost nothing.
    Sparse mappings (threads' stacks) are left alone, so the RSS stays about the same. 0 where
    the kernel or the C library cannot (nothing done)."""
    libc = _glibc()
    if libc is None:
        return 0
    try:
        with open("/proc/self/smaps") as f:
            ranges = _dense_anonymous_mappings(f.read())
    except OSError:
        return 0
    madvise = libc.madvise
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    asked = 0
    for start, length in ranges:
        if madvise(start, length, MADV_COLLAPSE) == 0:
            asked += length
    return asked


def keep_heap_on_huge_pages(interval_s: float = 10.0) -> threading.Thread | None:
    """``collapse_heap`` now and every ``interval_s`` from a daemon thread (the heap grows as
    partitions are added); None without glibc. Each pass reads ``/proc/self/smaps`` (a few ms);
    what is collapsed already costs nothing again."""
    if _glibc() is None:
        return None

    def run() -> None:
        while True:
            try:
                collapse_heap()
            except Exception:  # noqa: BLE001 - a tuning, never a reason to fail
                log.debug("collapse_heap failed", exc_info=True)
            time.sleep(interval_s)

    t = threading.Thread(target=run, name="huge-pages", daemon=True)
    t.start()
    return t
