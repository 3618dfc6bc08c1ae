"""A worker's presence on ``__mirror_sync_status``: the controller's proof that it is alive.

The controller removes from the workers' group a member whose instance has published nothing for
its session timeout (``streams.admin.members``). So the presence must stop only when a broker's
heartbeats would: the worker's group heartbeats come from Faust's consumer thread, not from the
worker's event loop, which a slow step can hold for seconds. Presence is sent the same way, from a
thread of its own with its own producer, every tenth of the session timeout (at least every
second) while the process lives; a stuck loop is
the watchdog's business (``streams.worker.liveness``), which ends the process. A clean stop sends a
tombstone, so the controller stops counting the worker at once.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

from streams.config import WorkerConfig
from streams.state.sync_status import PRESENCE, presence_report, publish, report_key

log = logging.getLogger(__name__)

INTERVAL_S = 1.0  # the shortest interval
PER_SESSION = 10  # publications per session timeout


def presence_interval_s(session_timeout_ms: int) -> float:
    """A tenth of the session timeout, at least a second: ten publications per session where
    Kafka's group heartbeats give three, and an idle worker of the default 60 s session sends one
    record every 6 s, not every second."""
    return max(INTERVAL_S, session_timeout_ms / 1000 / PER_SESSION)


class PresencePublisher:
    def __init__(self, config: WorkerConfig, instance_id: str, interval_s: float | None = None) -> None:
        self.config, self.instance_id = config, instance_id
        self.interval_s = interval_s if interval_s is not None else presence_interval_s(config.session_timeout_ms)
        self.sent = 0  # presence records acknowledged
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kip1279-presence", daemon=True)

    def start(self) -> PresencePublisher:
        self._thread.start()
        self._started.wait(10)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Sends the tombstone and ends the thread (within ``timeout``)."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(stop.set)
        self._thread.join(timeout)

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        from aiokafka import AIOKafkaProducer

        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        self._started.set()
        c = self.config
        producer: Any = None
        failing = False
        while not self._stop.is_set():
            try:
                if producer is None:
                    producer = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers, linger_ms=0,
                                                client_id=f"{c.faust_app_id}-presence")  # fmt: skip
                    await producer.start()
                now_ms = int(time.time() * 1000)
                await asyncio.wait_for(publish(producer, c.sync_status_topic_name,
                                               [presence_report(self.instance_id, now_ms, c.session_timeout_ms)]),
                                       max(self.interval_s, 5.0))  # fmt: skip
                self.sent += 1
                if failing:
                    log.info("presence published again")
                failing = False
            except Exception as e:  # noqa: BLE001 - tried again next interval; the log says it once
                if not failing:
                    log.warning("presence not published (the controller removes a worker silent for %d ms): %r",
                                c.session_timeout_ms, e)  # fmt: skip
                failing = True
                if producer is not None:
                    await _close(producer)
                    producer = None
            try:
                await asyncio.wait_for(self._stop.wait(), self.interval_s)
            except asyncio.TimeoutError:
                pass
        if producer is not None:
            try:
                await asyncio.wait_for(publish(producer, c.sync_status_topic_name,
                                               [(PRESENCE, report_key(PRESENCE, self.instance_id), None)]), 3.0)  # fmt: skip
            except Exception as e:  # noqa: BLE001 - the controller then counts the session down instead
                log.warning("presence tombstone not sent: %r", e)
            await _close(producer)


async def _close(producer: Any) -> None:
    try:
        await asyncio.wait_for(producer.stop(), 5.0)
    except Exception as e:  # noqa: BLE001 - closing a broken producer
        log.debug("presence producer close: %r", e)
