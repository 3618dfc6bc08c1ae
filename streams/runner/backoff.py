"""A client-side stand-in for the broker's fetch long poll.

A Kafka broker holds a fetch with nothing to return for up to ``fetch.max.wait.ms``. A broker
that answers an empty fetch at once (noida-db does) turns every idle aiokafka consumer into a
busy loop: measured here, ~2,500 fetches a second and half a core per idle consumer, plus the
broker's CPU answering them -- CPU a mass failover needs. ``install()`` makes the fetcher wait a
little (at most ``BACKOFF_S``, and never past the fetch's own max wait) after an empty answer
that came back sooner than the max wait. Against a broker that honours the max wait nothing
changes: its empty answers take the max wait. A record produced meanwhile is fetched at most
``BACKOFF_S`` later.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger(__name__)
BACKOFF_S = 0.01  # at most 100 empty fetches a second per consumer and broker


def install(backoff_s: float = BACKOFF_S) -> bool:
    """Idempotent; patches aiokafka's fetcher for this process. False if it could not (another
    aiokafka layout): consumers then poll as before."""
    try:
        from aiokafka.consumer.fetcher import Fetcher
    except ImportError:  # pragma: no cover
        return False
    original = getattr(Fetcher, "_proc_fetch_request", None)
    if original is None:
        log.warning("aiokafka's fetcher has no _proc_fetch_request: empty fetches are not backed off")
        return False
    if getattr(original, "_kip1279_backoff", None) is not None:
        original._kip1279_backoff[0] = backoff_s  # type: ignore[attr-defined]
        return True
    setting = [backoff_s]

    async def proc_fetch_request(self: Any, assignment: Any, node_id: Any, request: Any) -> Any:
        loop = asyncio.get_running_loop()
        started = loop.time()
        got = await original(self, assignment, node_id, request)
        if not got:
            wait = min(setting[0], getattr(self, "_fetch_max_wait_ms", 500) / 1000 - (loop.time() - started))
            if wait > 0:
                try:
                    await asyncio.sleep(wait)
                except asyncio.CancelledError:  # closed or unassigned meanwhile: as the original answers
                    return False
        return got

    proc_fetch_request._kip1279_backoff = setting  # type: ignore[attr-defined]
    proc_fetch_request._kip1279_original = original  # type: ignore[attr-defined]
    Fetcher._proc_fetch_request = proc_fetch_request  # type: ignore[method-assign]
    return True


def uninstall() -> None:
    """Undoes ``install`` (tests)."""
    from aiokafka.consumer.fetcher import Fetcher

    patched = Fetcher._proc_fetch_request
    original = getattr(patched, "_kip1279_original", None)
    if original is not None:
        Fetcher._proc_fetch_request = original  # type: ignore[method-assign]
