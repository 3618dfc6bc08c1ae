"""The worker's last resort: exit when its event loop stops answering.

A stuck event loop (a call that blocks it, a deadlock in a library) serves no ``/healthz``, runs
no timer and sends no heartbeat of its own making, yet the process lives on and a supervisor sees
nothing. Only a thread can notice: the loop stamps a beat every second, and the thread exits the
process non-zero once no beat came for ``worker.unhealthy.exit.ms``, for the supervisor to
restart it. (A worker out of its group exits at once: ``WorkerExit.watch_membership``.)

Long before that, a loop silent for ``report_s`` (5 s) is logged once per stall with the stack
it is stuck in: a stall that ends by itself (a SIGTERM answered late, a rebalance that took
its time) otherwise leaves no trace of where the loop was.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable

log = logging.getLogger(__name__)

EXIT_UNHEALTHY = 1
BEAT_S = 1.0
REPORT_S = 5.0


def _exit_now() -> None:
    logging.shutdown()  # flush the critical line first
    os._exit(EXIT_UNHEALTHY)


class LoopWatchdog:
    """Stamps beats on the loop (``beat``), watches them from a daemon thread (``start``)."""

    def __init__(self, limit_ms: int, on_stall: Callable[[], None] = _exit_now, beat_s: float = BEAT_S,
                 report_s: float = REPORT_S) -> None:  # fmt: skip
        self.limit_s = limit_ms / 1000
        self.beat_s = min(beat_s, self.limit_s / 4)
        self.report_s = min(report_s, self.limit_s / 2)
        self.on_stall = on_stall
        self.last = time.monotonic()
        self.stalled = False
        self.reported = 0.0  # the beat whose stall was logged (one line per stall)
        self.loop_thread: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="kip1279-loop-watchdog", daemon=True)

    async def beat(self) -> None:
        """Runs on the watched loop; the watch starts with the first beat (start-up is not watched)."""
        self.loop_thread = threading.get_ident()
        while True:
            self.last = time.monotonic()
            if not self._thread.is_alive() and not self._stop.is_set():
                self._thread.start()
            await asyncio.sleep(self.beat_s)

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        while not self._stop.wait(self.beat_s):
            last = self.last
            silent = time.monotonic() - last
            if silent > self.report_s and self.reported != last:
                self.reported = last
                log.warning("the worker's event loop has not answered for %.1f s; it is in:\n%s", silent, self.stack())
            if silent > self.limit_s:
                log.critical("the worker's event loop has not answered for %.1f s (worker.unhealthy.exit.ms=%d); "
                             "exiting with code %d for a supervisor to restart it",
                             silent, int(self.limit_s * 1000), EXIT_UNHEALTHY)  # fmt: skip
                self.stalled = True
                self.on_stall()
                return

    def stack(self) -> str:
        """Where the loop's thread is now (its innermost frames)."""
        frame = sys._current_frames().get(self.loop_thread or -1)
        return "".join(traceback.format_stack(frame, limit=25)) if frame is not None else "(not running)"
