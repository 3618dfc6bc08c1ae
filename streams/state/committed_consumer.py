"""The worker's Faust consumer reads ``read_committed``.

``__mirror_state`` is written in transactions (one transactional producer per table partition,
``streams.worker.state_producers``), and a fenced owner's open transaction is aborted by its
successor: its records stay in the log, behind an abort marker. Faust 0.15.3 builds its aiokafka
consumer ``read_committed`` only under ``processing_guarantee="exactly_once"``, which would make
every agent's output transactional too. Here only the isolation level changes: the table's
recovery never replays an aborted write, and its highwaters (``end_offsets``) are the LSO.

The transport is set on the app before anything makes its consumer (``make_app``).

Its thread is also waited for off the event loop when it stops. mode's ``ServiceThread.stop``
waits for the thread with a blocking ``Event.wait`` on the loop; a consumer thread stopped in the
middle of a rebalance waits on that same loop (Faust runs the revoke and assign callbacks there),
so a SIGTERM in a rebalance left both waiting on each other, and the worker never stopped.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiokafka
from faust.transport.drivers import aiokafka as faust_aiokafka
from mode import Service

READ_COMMITTED = "read_committed"


class _CommittedConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):  # type: ignore[misc]
    def _create_worker_consumer(self, transport: Any) -> aiokafka.AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        # Read by the consumer's start, which makes its fetcher: not started yet here.
        consumer._isolation_level = READ_COMMITTED
        return consumer

    async def stop(self) -> None:
        """``ServiceThread.stop``, the thread waited for on another thread: the loop stays free
        to answer the rebalance callbacks the consumer thread may be waiting on."""
        if self._started.is_set():
            await Service.stop(self)
            if self._thread is not None:
                await asyncio.get_running_loop().run_in_executor(None, self._thread.stop)


class CommittedConsumer(faust_aiokafka.Consumer):  # type: ignore[misc]
    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        return _CommittedConsumerThread(self, loop=self.loop, beacon=self.beacon)


class CommittedTransport(faust_aiokafka.Transport):  # type: ignore[misc]
    Consumer = CommittedConsumer


def read_committed(app: Any) -> None:
    """Gives ``app`` (not started) a consumer that reads committed data only."""
    app.transport = CommittedTransport(app.conf.broker_consumer, app)
