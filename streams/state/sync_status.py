"""Each worker's sync status per mirror, on the compacted topic ``<prefix>__mirror_sync_status``.

The failover-readiness rule needs when each sync kind (group offsets, topic configs, ACLs) last ran
clean. Only the workers know, each for the mirror partitions it owns. So each worker publishes one
record per mirror (key: mirror and worker) whenever it changes and at least every half sync
interval, and a tombstone once it holds none of the mirror's MIRRORING partitions or stops cleanly.
The controller follows the topic and combines the live reports
(``coordinator.readiness.combined_sync_times``) into ``--describe``'s readiness.

Each worker also publishes its presence every tenth of its session timeout, at least every
second (key: ``""`` and the worker, with its
``worker.session.timeout.ms``), mirrors or not (``streams.worker.presence``): the controller
removes from the workers' group a member that has published nothing for its session timeout
(``streams.admin.members``).

Records are JSON, so ``kafka-console-consumer`` shows them as they are. Times are wall-clock
milliseconds: the workers' and the controller's clocks are assumed to agree to well under a
sync interval.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

import msgspec
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import NewTopic

from coordinator.readiness import SyncReport
from streams.config import CATCH_UP_FETCH_MAX_WAIT_MS, WorkerConfig

log = logging.getLogger(__name__)

class _Value(msgspec.Struct, kw_only=True, omit_defaults=True):
    mirror: str
    worker: str
    at_ms: int
    partitions: int
    success_ms: dict[str, int]
    errors: dict[str, str] = {}  # kind -> why its last sync failed (absent from older workers' records)
    session_timeout_ms: int = 0  # presence records: the worker's worker.session.timeout.ms


PRESENCE = ""  # the mirror name of a worker's presence record (a mirror's name is never empty)
_encode = msgspec.json.Encoder().encode
_key_decoder = msgspec.json.Decoder(tuple[str, str])
_value_decoder = msgspec.json.Decoder(_Value)


def sync_status_topic_spec(config: WorkerConfig) -> NewTopic:
    # One partition: a few records per mirror and worker, read whole by the controller.
    return NewTopic(config.sync_status_topic_name, 1, config.replication_factor,
                    topic_configs={"cleanup.policy": "compact"})  # fmt: skip


def report_key(mirror: str, worker: str) -> bytes:
    return _encode((mirror, worker))


def presence_report(worker: str, now_ms: int, session_timeout_ms: int) -> tuple[str, bytes, bytes]:
    """A worker's presence record (``publish`` sends it as a report)."""
    value = _Value(mirror=PRESENCE, worker=worker, at_ms=now_ms, partitions=0, success_ms={},
                   session_timeout_ms=session_timeout_ms)  # fmt: skip
    return PRESENCE, report_key(PRESENCE, worker), _encode(value)


async def paused_consumer(bootstrap: str, topic: str, client_id: str) -> AIOKafkaConsumer:
    """A consumer of ``topic``'s one partition from its start, paused: it is read only when asked
    (``read_to_end``). Followed between reads, a topic's end kept the broker answering 30-50
    empty fetches a second (fetch.max.wait.ms 20)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                auto_offset_reset="earliest", client_id=client_id,
                                fetch_max_wait_ms=CATCH_UP_FETCH_MAX_WAIT_MS)  # fmt: skip
    await consumer.start()
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    await consumer.seek_to_beginning(tp)
    consumer.pause(tp)
    return consumer


async def read_to_end(consumer: AIOKafkaConsumer, tp: TopicPartition,
                      apply: Callable[[bytes | None, bytes | None, int], None]) -> None:  # fmt: skip
    """Reads the paused ``tp`` up to its end offset as of this call (each record's key, value and
    offset to ``apply``), and pauses it again: between reads nothing is fetched."""
    end = (await consumer.end_offsets([tp]))[tp]
    if await consumer.position(tp) < end:
        consumer.resume(tp)
        try:
            while await consumer.position(tp) < end:
                for msgs in (await consumer.getmany(tp, timeout_ms=200)).values():
                    for msg in msgs:
                        apply(msg.key, msg.value, msg.offset)
        finally:
            consumer.pause(tp)


class MirrorSyncs(NamedTuple):
    """What a worker knows of one mirror now."""

    partitions: int  # its MIRRORING partitions of the mirror
    interval_ms: int  # the mirror's sync interval (metadata.refresh.interval.ms)
    success_ms: Mapping[str, int]
    errors: Mapping[str, str] = {}  # why each kind's last sync failed, if it did


class SyncStatusPublisher:
    """Decides which reports a worker sends; the worker sends them (``due`` returns key/value
    pairs, ``None`` a tombstone) and calls ``sent`` once they are acknowledged."""

    def __init__(self, worker: str) -> None:
        self.worker = worker
        self._last: dict[str, tuple[int, int, dict[str, int], dict[str, str]]] = {}  # mirror -> (at_ms, partitions, success_ms, errors)

    def due(self, now_ms: int, mirrors: Mapping[str, MirrorSyncs]) -> list[tuple[str, bytes, bytes | None]]:
        out: list[tuple[str, bytes, bytes | None]] = []
        for name, m in sorted(mirrors.items()):
            if m.partitions <= 0:
                continue
            success, errors = dict(m.success_ms), dict(m.errors)
            last = self._last.get(name)
            if last is not None and last[1:] == (m.partitions, success, errors) and now_ms - last[0] < m.interval_ms // 2:
                continue
            value = _Value(mirror=name, worker=self.worker, at_ms=now_ms, partitions=m.partitions, success_ms=success,
                           errors=errors)  # fmt: skip
            out.append((name, report_key(name, self.worker), _encode(value)))
        for name in sorted(self._last):
            if mirrors.get(name, MirrorSyncs(0, 0, {})).partitions <= 0:
                out.append((name, report_key(name, self.worker), None))
        return out

    def sent(self, now_ms: int, reports: Iterable[tuple[str, bytes, bytes | None]]) -> None:
        for name, _, value in reports:
            if value is None:
                self._last.pop(name, None)
            else:
                v = _value_decoder.decode(value)
                self._last[name] = (now_ms, v.partitions, v.success_ms, v.errors)

    def farewell(self) -> list[tuple[str, bytes, bytes | None]]:
        """Tombstones of every report this worker has standing (a clean stop)."""
        return [(name, report_key(name, self.worker), None) for name in sorted(self._last)]


class SyncStatusView:
    """The controller's copy of the topic: the latest report per mirror and worker, and when this
    controller last read a record of each worker (``seen``, its own monotonic clock: the workers'
    clocks do not count) and the session timeout each worker published (``session_timeout_ms``)."""

    def __init__(self, bootstrap: str, topic: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.bootstrap, self.topic, self.clock = bootstrap, topic, clock
        self._reports: dict[str, dict[str, SyncReport]] = {}
        self.seen: dict[str, float] = {}
        self.session_timeout_ms: dict[str, int] = {}
        self._consumer: AIOKafkaConsumer | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        self._consumer = await paused_consumer(self.bootstrap, self.topic, "kip1279-controller-sync-status")

    async def stop(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await consumer.stop()

    async def reports(self) -> dict[str, tuple[SyncReport, ...]] | None:
        """Every mirror's reports, read up to the topic's end as of this call; None when not
        following (then nothing is known of the syncs)."""
        consumer = self._consumer
        if consumer is None:
            return None
        async with self._lock:
            await read_to_end(consumer, TopicPartition(self.topic, 0), self._apply)
        return {m: tuple(r.values()) for m, r in self._reports.items() if m != PRESENCE}

    def _apply(self, key: bytes | None, value: bytes | None, offset: int) -> None:
        try:
            mirror, worker = _key_decoder.decode(key or b"")
            self.seen[worker] = self.clock()
            if value is None:
                self._reports.get(mirror, {}).pop(worker, None)
                return
            v = _value_decoder.decode(value)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            log.error("undecodable %s record at offset %d: %s", self.topic, offset, e)
            return
        if mirror == PRESENCE:
            self.session_timeout_ms[worker] = v.session_timeout_ms
        self._reports.setdefault(mirror, {})[worker] = SyncReport(worker, v.at_ms, v.partitions, v.success_ms, v.errors)


async def publish(producer: Any, topic: str, reports: list[tuple[str, bytes, bytes | None]]) -> None:
    """Sends ``reports`` and waits for every acknowledgement."""
    futures = [await producer.send(topic, key=key, value=value) for _, key, value in reports]
    await asyncio.gather(*futures)
