"""Stop reports, on the compacted topic ``<prefix>__mirror_stop_reports``: one record per mirror
and table partition, by the worker that owns the table partition.

A report ``(mirror, table partition) -> through`` says: with the metadata log applied up to offset
``through``, every mirror partition of the mirror whose state lives in that table partition and
whose topic is desired STOP was durably STOPPED (or had no state). The topic level of a stopping
topic needs every partition of the topic, wherever its state lives; with these reports a worker
learns that of the table partitions it does not own from one record each, instead of reading
every state they wrote (~150,000 changelog records per worker at the end of a 50,000-partition
failover on two workers).

A report covers a stop at metadata offset ``o`` only when ``o <= through``. It never covers a
later one: a stop's partitions change state only when the topic's desired state changes again, at
a later offset. The reader uses a report only once its own metadata image is at ``through`` or
later, so both agree on which topics are stopping.

Records are JSON, as the sync status topic's, so ``kafka-console-consumer`` shows them as they are.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Mapping
from typing import NamedTuple

import msgspec
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import NewTopic

from streams.config import WorkerConfig
from streams.state.sync_status import paused_consumer, read_to_end

log = logging.getLogger(__name__)


class _Value(msgspec.Struct, kw_only=True):
    through: int  # the metadata offset the owner's image had applied
    partitions: int  # mirror.state.topic.num.partitions of the owner (a report of another count is ignored)
    worker: str
    at_ms: int


class StopReport(NamedTuple):
    through: int
    worker: str
    at_ms: int


_encode = msgspec.json.Encoder().encode
_key_decoder = msgspec.json.Decoder(tuple[str, int])
_value_decoder = msgspec.json.Decoder(_Value)


def stop_reports_topic_spec(config: WorkerConfig) -> NewTopic:
    # One partition: a record per mirror and table partition, read whole by the workers.
    return NewTopic(config.stop_reports_topic_name, 1, config.replication_factor,
                    topic_configs={"cleanup.policy": "compact"})  # fmt: skip


def stop_report(mirror: str, table_partition: int, through: int, num_partitions: int, worker: str,
                now_ms: int) -> tuple[bytes, bytes]:  # fmt: skip
    """A report's key and value."""
    value = _Value(through=through, partitions=num_partitions, worker=worker, at_ms=now_ms)
    return _encode((mirror, table_partition)), _encode(value)


def covers(report: StopReport | None, stop_offset: int, image_offset: int) -> bool:
    """Whether ``report`` covers a stop at ``stop_offset`` for a reader whose image is at
    ``image_offset`` (only a report at or before it: both then agree on which topics stop)."""
    return report is not None and stop_offset <= report.through <= image_offset


def covered_through(reports: Mapping[tuple[str, int], StopReport], table_partitions: Collection[int],
                    image_offset: int) -> dict[str, int]:  # fmt: skip
    """Per mirror, the latest stop offset that the reports of every one of ``table_partitions``
    cover for a reader whose image is at ``image_offset``."""
    out = {}
    for mirror in {m for m, _ in reports}:
        got = [reports.get((mirror, p)) for p in table_partitions]
        if all(covers(r, -1, image_offset) for r in got):
            out[mirror] = min((r.through for r in got if r is not None), default=image_offset)
    return out


class StopReportsView:
    """The latest report per (mirror, table partition), read from the topic when asked."""

    def __init__(self, bootstrap: str, topic: str, num_partitions: int) -> None:
        self.bootstrap, self.topic, self.num_partitions = bootstrap, topic, num_partitions
        self._reports: dict[tuple[str, int], StopReport] = {}
        self._consumer: AIOKafkaConsumer | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        self._consumer = await paused_consumer(self.bootstrap, self.topic, "kip1279-worker-stop-reports")

    async def stop(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await consumer.stop()

    async def reports(self) -> Mapping[tuple[str, int], StopReport]:
        """Every report, read up to the topic's end as of this call."""
        if self._consumer is None:
            await self.start()
        consumer = self._consumer
        assert consumer is not None
        async with self._lock:
            await read_to_end(consumer, TopicPartition(self.topic, 0), self._apply)
        return self._reports

    def _apply(self, key: bytes | None, value: bytes | None, offset: int) -> None:
        try:
            got = self.decode(key, value)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            log.error("undecodable %s record at offset %d: %s", self.topic, offset, e)
            return
        if got[1] is None:
            self._reports.pop(got[0], None)
        elif got[2] == self.num_partitions:  # a table of another partition count: not these table partitions
            self._reports[got[0]] = got[1]

    @staticmethod
    def decode(key: bytes | None, value: bytes | None) -> tuple[tuple[str, int], StopReport | None, int]:
        """A record's (mirror, table partition), its report (None: a tombstone) and the owner's
        partition count."""
        mirror, table_partition = _key_decoder.decode(key or b"")
        if value is None:
            return (mirror, table_partition), None, 0
        v = _value_decoder.decode(value)
        return (mirror, table_partition), StopReport(v.through, v.worker, v.at_ms), v.partitions
