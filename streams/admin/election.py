"""The controllers' heartbeats on ``<metadata topic>.controllers`` (issue #36).

Every controller of a destination cluster, active or standby, publishes a heartbeat there every
quarter of ``controller.session.timeout.ms`` and reads everyone's; ``coordinator.election`` says
from them when a standby takes over. Each heartbeat's time is its record's timestamp, so a
controller that starts reads at once who was alive in the last session timeout (the hosts'
clocks must agree to well within it, as the workers' sync reports already need).
"""

from __future__ import annotations

import logging
import time

import msgspec
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import NewTopic

from coordinator.election import Heartbeat

log = logging.getLogger(__name__)
HISTORY = 500  # heartbeats read back at start: at 4 a second per controller, over a minute of 3


class _Beat(msgspec.Struct, frozen=True):
    controller_id: str
    instance: str
    endpoint: str
    active: bool
    epoch: int
    leaving: bool = False


_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(_Beat).decode


def controllers_topic_spec(name: str, replication_factor: int = 1, min_insync: int | None = None) -> NewTopic:
    # One partition, kept 10 minutes: only the last session timeout's heartbeats matter.
    configs = {"retention.ms": "600000", "cleanup.policy": "delete"}
    if min_insync is not None:
        configs["min.insync.replicas"] = str(min_insync)
    return NewTopic(name, 1, replication_factor, topic_configs=configs)


class HeartbeatChannel:
    """Publishes this controller's heartbeats and keeps every controller's recent ones."""

    def __init__(self, bootstrap: str, topic: str, client_id: str = "kip1279-controller-heartbeats") -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.client_id = client_id
        self.tp = TopicPartition(topic, 0)
        self.heartbeats: list[Heartbeat] = []
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None

    async def start(self) -> None:
        self._producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, client_id=self.client_id, acks=1,
                                          linger_ms=0, request_timeout_ms=5000)  # fmt: skip
        await self._producer.start()
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, client_id=self.client_id, group_id=None,
                                    enable_auto_commit=False, auto_offset_reset="latest", fetch_max_wait_ms=100)  # fmt: skip
        await consumer.start()
        consumer.assign([self.tp])
        end = (await consumer.end_offsets([self.tp]))[self.tp]
        consumer.seek(self.tp, max(0, end - HISTORY))
        # Paused between polls: followed, the topic's end kept the broker answering ten empty
        # fetches a second (fetch.max.wait.ms 100) per controller while nothing happened.
        consumer.pause(self.tp)
        self._consumer = consumer
        await self.poll()

    async def stop(self) -> None:
        for part in (self._producer, self._consumer):
            if part is not None:
                try:
                    await part.stop()
                except Exception:  # noqa: BLE001 - stopping: nothing to do about it
                    pass
        self._producer = self._consumer = None

    async def publish(self, beat: Heartbeat) -> None:
        if self._producer is None:
            return
        value = _encode(_Beat(beat.controller_id, beat.instance, beat.endpoint, beat.active, beat.epoch, beat.leaving))
        await self._producer.send(self.topic, value, key=beat.controller_id.encode(), partition=0,
                                  timestamp_ms=beat.timestamp_ms)  # fmt: skip

    def _add(self, value: bytes | None, offset: int, timestamp_ms: int) -> None:
        try:
            b = _decode(value or b"")
        except msgspec.DecodeError:
            log.warning("%s offset %d: not a controller heartbeat, skipped", self.topic, offset)
            return
        self.heartbeats.append(Heartbeat(b.controller_id, b.instance, b.endpoint, b.active, b.epoch, timestamp_ms, b.leaving))

    async def poll(self, keep_ms: int = 60_000) -> list[Heartbeat]:
        """Reads what arrived (up to the end as of this call); returns the heartbeats of the
        last ``keep_ms``."""
        consumer = self._consumer
        if consumer is None:
            return self.heartbeats
        end = (await consumer.end_offsets([self.tp]))[self.tp]
        if await consumer.position(self.tp) < end:
            consumer.resume(self.tp)
            try:
                while await consumer.position(self.tp) < end:
                    for msgs in (await consumer.getmany(self.tp, timeout_ms=200)).values():
                        for msg in msgs:
                            self._add(msg.value, msg.offset, msg.timestamp)
            finally:
                consumer.pause(self.tp)
        now = int(time.time() * 1000)
        self.heartbeats = [h for h in self.heartbeats if now - h.timestamp_ms <= keep_ms]
        return self.heartbeats
