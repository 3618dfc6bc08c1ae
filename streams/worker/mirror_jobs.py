"""One cluster mirror's runner and ports inside the worker, and how its jobs run: FAILED retries with
full jitter, and no cyclic collection while any job runs."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import random
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from streams.runner.runner import MirrorRunner


class MirrorJob:
    """One cluster mirror as the worker runs it: its runner, its two ports and the job in flight."""

    def __init__(self, runner: MirrorRunner, ports: tuple[Any, Any], configs: Mapping[str, str] | None = None) -> None:
        self.runner = runner
        self.ports = ports
        self.configs = configs  # the image's configs it runs with: a change reconfigures or rebuilds it
        self.busy: concurrent.futures.Future[Any] | asyncio.Future[Any] | None = None
        self.retired = False  # topics left the mirror (or it was deleted): rebuilt from the store next

    def close(self) -> None:
        self.runner.close()
        for port in self.ports:
            close = getattr(port, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:  # noqa: BLE001
                    pass


def full_jitter() -> float:
    """FAILED retries wait a random share (0, 1] of their backoff, as the prototype's full jitter:
    partitions failed by one outage do not all retry in the same round."""
    return 1.0 - random.random()


_gc_pauses = 0
_gc_lock = threading.Lock()


@contextlib.contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """No cyclic collection while a job runs (reference counting still frees what it can).

    A job's waves keep tens of thousands of short-lived objects (observers, observations,
    decisions) alive for a second or more: the young collections promoted them, and their
    deaths in the old generation triggered full collections (0.3 s each at 200,000 partitions,
    ~8 s of a 60 s mass failover). Paused, they are freed by their reference counts at the end
    of the wave; the collector runs again after the job. Jobs of other mirrors may overlap:
    the collector resumes after the last of them."""
    global _gc_pauses
    with _gc_lock:
        _gc_pauses += 1
        gc.disable()
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pauses -= 1
            if _gc_pauses == 0:
                gc.enable()
