"""The worker's Faust consumer reads ``read_committed``.

``__mirror_state`` is written in transactions (one transactional producer per table partition,
``streams.worker.state_producers``), and a fenced owner's open transaction is aborted by its
successor: its records stay in the log, behind an abort marker. Faust 0.15.3 builds its aiokafka
consumer ``read_committed`` only under ``processing_guarantee="exactly_once"``, which would make
every agent's output transactional too. Here only the isolation level changes: the table's
recovery never replays an aborted write, and its highwaters (``end_offsets``) are the LSO.

The transport is set on the app before anything makes its consumer (``make_app``).
"""

from __future__ import annotations

from typing import Any

import aiokafka
from faust.transport.drivers import aiokafka as faust_aiokafka

READ_COMMITTED = "read_committed"


class _CommittedConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):  # type: ignore[misc]
    def _create_worker_consumer(self, transport: Any) -> aiokafka.AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        # Read by the consumer's start, which makes its fetcher: not started yet here.
        consumer._isolation_level = READ_COMMITTED
        return consumer


class CommittedConsumer(faust_aiokafka.Consumer):  # type: ignore[misc]
    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        return _CommittedConsumerThread(self, loop=self.loop, beacon=self.beacon)


class CommittedTransport(faust_aiokafka.Transport):  # type: ignore[misc]
    Consumer = CommittedConsumer


def read_committed(app: Any) -> None:
    """Gives ``app`` (not started) a consumer that reads committed data only."""
    app.transport = CommittedTransport(app.conf.broker_consumer, app)
