"""The metadata log's dead-letter queue: a record the image cannot replay is quarantined there, with
its offset, epoch and the error as headers, and the replay goes on."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import NamedTuple
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from streams.state.metadata_serde import INT32, INT64, NO_EPOCH, MetadataLogError


DLQ_OFFSET_HEADER = "kip1279.offset"
DLQ_EPOCH_HEADER = "kip1279.epoch"
DLQ_ERROR_HEADER = "kip1279.error"
DLQ_TOPIC_HEADER = "kip1279.topic"


class DeadLetterQueue:
    """Quarantine for poison records: ``<metadata topic>.dlq``, value = the original bytes."""

    def __init__(self, bootstrap: str, metadata_topic: str, *, client_id: str = "kip1279-dlq") -> None:
        self.bootstrap = bootstrap
        self.metadata_topic = metadata_topic
        self.topic = f"{metadata_topic}.dlq"
        self.client_id = client_id
        self._producer: AIOKafkaProducer | None = None

    async def start(self) -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap, client_id=self.client_id, enable_idempotence=True, acks="all"
        )
        await producer.start()
        self._producer = producer

    async def stop(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()

    async def quarantine(self, offset: int, epoch: int, error: str, raw: bytes | None) -> int:
        """Writes the poison record; the key is its offset, so a replayed quarantine compacts away."""
        if self._producer is None:
            raise MetadataLogError("the dead-letter queue is not started")
        headers = [
            (DLQ_TOPIC_HEADER, self.metadata_topic.encode()),
            (DLQ_OFFSET_HEADER, INT64.pack(offset)),
            (DLQ_EPOCH_HEADER, INT32.pack(epoch)),
            (DLQ_ERROR_HEADER, error.encode("utf-8", "replace")),
        ]
        metadata = await self._producer.send_and_wait(
            self.topic, value=raw, key=str(offset).encode(), partition=0, headers=headers
        )
        return int(metadata.offset)


class QuarantinedRecord(NamedTuple):
    """A DLQ entry read back."""

    dlq_offset: int
    offset: int
    epoch: int
    error: str
    raw: bytes | None


def parse_dlq_headers(headers: Sequence[tuple[str, bytes]]) -> tuple[int, int, str]:
    h = dict(headers)
    offset = INT64.unpack(h[DLQ_OFFSET_HEADER])[0] if DLQ_OFFSET_HEADER in h else -1
    epoch = INT32.unpack(h[DLQ_EPOCH_HEADER])[0] if DLQ_EPOCH_HEADER in h else NO_EPOCH
    error = h.get(DLQ_ERROR_HEADER, b"").decode("utf-8", "replace")
    return int(offset), int(epoch), error


async def read_dlq(bootstrap: str, metadata_topic: str, timeout: float = 5.0) -> list[QuarantinedRecord]:
    """Every quarantined record so far (for operators and tests)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    await consumer.start()
    try:
        tp = TopicPartition(f"{metadata_topic}.dlq", 0)
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        consumer.seek(tp, 0)
        out: list[QuarantinedRecord] = []
        deadline = asyncio.get_running_loop().time() + timeout
        while (await consumer.position(tp)) < end:
            if asyncio.get_running_loop().time() > deadline:
                raise MetadataLogError(f"timed out reading {tp.topic}")
            batch = await consumer.getmany(tp, timeout_ms=200)
            for msg in batch.get(tp, []):
                offset, epoch, error = parse_dlq_headers(msg.headers)
                out.append(QuarantinedRecord(msg.offset, offset, epoch, error, msg.value))
        return out
    finally:
        await consumer.stop()
