"""The worker's last resort: exit when its event loop stops answering.

A stuck event loop (a call that blocks it, a deadlock in a library) serves no ``/healthz``, runs
no timer and sends no heartbeat of its own making, yet the process lives on and a supervisor sees
nothing. Only a thread can notice: the loop stamps a beat every second, and the thread exits the
process non-zero once no beat came for ``worker.unhealthy.exit.ms``, for the supervisor to
restart it. (A worker out of its group exits at once: ``WorkerExit.watch_membership``.)
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

EXIT_UNHEALTHY = 1
BEAT_S = 1.0


def _exit_now() -> None:
    logging.shutdown()  # flush the critical line first
    os._exit(EXIT_UNHEALTHY)


class LoopWatchdog:
    """Stamps beats on the loop (``beat``), watches them from a daemon thread (``start``)."""

    def __init__(self, limit_ms: int, on_stall: Callable[[], None] = _exit_now, beat_s: float = BEAT_S) -> None:
        self.limit_s = limit_ms / 1000
        self.beat_s = min(beat_s, self.limit_s / 4)
        self.on_stall = on_stall
        self.last = time.monotonic()
        self.stalled = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="kip1279-loop-watchdog", daemon=True)

    async def beat(self) -> None:
        """Runs on the watched loop; the watch starts with the first beat (start-up is not watched)."""
        while True:
            self.last = time.monotonic()
            if not self._thread.is_alive() and not self._stop.is_set():
                self._thread.start()
            await asyncio.sleep(self.beat_s)

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        while not self._stop.wait(self.beat_s):
            silent = time.monotonic() - self.last
            if silent > self.limit_s:
                log.critical("the worker's event loop has not answered for %.1f s (worker.unhealthy.exit.ms=%d); "
                             "exiting with code %d for a supervisor to restart it",
                             silent, int(self.limit_s * 1000), EXIT_UNHEALTHY)  # fmt: skip
                self.stalled = True
                self.on_stall()
                return
