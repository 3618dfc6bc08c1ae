"""Opt-in cProfile of a worker (``KIP1279_PROFILE_DIR=DIR``): its event loop and its mirror jobs.

``DIR/worker-loop-PID.prof`` (the loop's thread: Faust, ticks, the changelog) and
``DIR/worker-jobs-PID.prof`` (the jobs on the pool threads) are pstats files, rewritten every
few seconds so that a worker stopped at the end of a bench still leaves them. Off, it costs one
check per job.
"""

from __future__ import annotations

import asyncio
import contextlib
import cProfile
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

_DIR = os.environ.get("KIP1279_PROFILE_DIR")
_DUMP_S = 5.0
# Each thread's own CPU time, not the wall clock: a loop waiting in epoll costs nothing.
_jobs = cProfile.Profile(time.thread_time) if _DIR else None
_jobs_lock = threading.Lock()
_jobs_dumped = [0.0]


def _path(kind: str) -> str:
    return str(Path(_DIR or ".") / f"worker-{kind}-{os.getpid()}.prof")


def profile_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Profile the thread that runs ``loop`` (call it on that thread, before the loop runs)."""
    if not _DIR:
        return
    prof = cProfile.Profile(time.thread_time)

    def dump() -> None:
        prof.dump_stats(_path("loop"))  # stops it: on again below
        prof.enable()
        loop.call_later(_DUMP_S, dump)

    prof.enable()
    loop.call_later(_DUMP_S, dump)


@contextlib.contextmanager
def profiled_job() -> Iterator[None]:
    """Profile one job, unless another thread's job is being profiled (one profile at a time)."""
    if _jobs is None or not _jobs_lock.acquire(blocking=False):
        yield
        return
    try:
        _jobs.enable()
        try:
            yield
        finally:
            _jobs.disable()
        if time.monotonic() - _jobs_dumped[0] >= _DUMP_S:
            _jobs_dumped[0] = time.monotonic()
            _jobs.dump_stats(_path("jobs"))
    finally:
        _jobs_lock.release()
