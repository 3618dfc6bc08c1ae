"""The metadata log: one single-partition topic of framed metadata records, KRaft-style.

- ``MetadataLogWriter`` is used by the controller only (single writer, as KRaft's active
  controller). It appends a list of records atomically in one Kafka transaction with a
  fixed transactional id per metadata topic, so a second controller on the same log fences
  the first one (the broker bumps the producer epoch) instead of interleaving with it. Each
  record carries the writer's epoch in a header: Kafka clients do not expose a batch's
  partition leader epoch, and this epoch is what KRaft calls the leader epoch of the log.
- ``MetadataLogReader`` replays from an offset to the high-water mark, then follows. A
  record that does not decode is a poison record: it is reported with its offset, copied to
  the dead-letter topic ``<metadata topic>.dlq`` and skipped after that, never retried in a
  loop and never dropped silently.

Snapshots (``SnapshotStore``) and the replay loop (``MetadataLogLoader``) are at the end.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import NamedTuple

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from records.framing import ApiMessageAndVersion, FrameError, MetadataRecordSerde
from streams.config import (
    install_payload_redaction,
)
from streams.state import aborted_transactions
from streams.state.snapshots import DEFAULT_SNAPSHOT_POLICY, SnapshotId, SnapshotPolicy, SnapshotStore
from streams.state.dead_letters import DeadLetterQueue
from streams.state.metadata_serde import MetadataLogError, NO_EPOCH, INT32, default_serde

log = logging.getLogger(__name__)

EPOCH_HEADER = "kip1279.epoch"
# fetch.max.wait.ms while following the log's end: Kafka answers a long poll as soon as a
# commit moves the last stable offset, so the wait costs no promptness, and an idle follower
# asks once per wait, not twice a second (aiokafka's 500 ms). Reads up to an end keep 500 ms:
# their ListOffsets would queue behind a held fetch on the connection.
FOLLOW_FETCH_MAX_WAIT_MS = 5000
MAX_SNAPSHOT_DEFER_MS = 60_000  # a snapshot due waits at most this long for a quiet moment (``busy``)


class PoisonRecord(NamedTuple):
    """A metadata-log value that is not a valid framed record."""

    error: str
    raw: bytes | None


class LogEntry(NamedTuple):
    offset: int
    leader_epoch: int
    record: ApiMessageAndVersion | PoisonRecord

    @property
    def is_poison(self) -> bool:
        return isinstance(self.record, PoisonRecord)


def _epoch_of(headers: Sequence[tuple[str, bytes]]) -> int:
    for key, value in headers:
        if key == EPOCH_HEADER and value is not None and len(value) == 4:
            return int(INT32.unpack(value)[0])
    return NO_EPOCH


class MetadataLogWriter:
    """The controller's appender. Not for workers: they only read the log."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        serde: MetadataRecordSerde | None = None,
        *,
        client_id: str = "kip1279-controller",
        transactional_id: str | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.serde = serde or default_serde()
        self.transactional_id = transactional_id or f"kip1279-controller-{topic}"
        self.client_id = client_id
        self.epoch = NO_EPOCH
        self.start_end_offset = -1  # the log's end once this writer had fenced the older ones
        self._producer: AIOKafkaProducer | None = None
        self._lock = asyncio.Lock()  # one transaction at a time keeps the log's order = call order

    async def start(self) -> None:
        install_payload_redaction()
        producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap,
            client_id=self.client_id,
            transactional_id=self.transactional_id,
            enable_idempotence=True,
            acks="all",
        )
        await producer.start()  # init_transactions: fences any older writer of this log
        self._producer = producer
        # The previous writer can no longer commit, so the log's tail is final: take the next epoch.
        last, self.start_end_offset = await _tail(self.bootstrap, self.topic)
        self.epoch = last + 1

    async def stop(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()

    async def append(self, records: Sequence[ApiMessageAndVersion]) -> list[int]:
        """Append ``records`` atomically; returns their offsets. All or none become visible."""
        if self._producer is None:
            raise MetadataLogError("the metadata log writer is not started")
        if not records:
            return []
        values = [self.serde.encode(r.message, r.version) for r in records]
        headers = [(EPOCH_HEADER, INT32.pack(self.epoch))]
        async with self._lock:
            futures = []
            async with self._producer.transaction():
                for value in values:
                    futures.append(await self._producer.send(self.topic, value=value, partition=0, headers=headers))
            metadata = [await f for f in futures]
        return [m.offset for m in metadata]

    async def __aenter__(self) -> MetadataLogWriter:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


async def last_epoch(bootstrap: str, topic: str) -> int:
    """The epoch header of the last committed record of the log, -1 if the log is empty."""
    return (await _tail(bootstrap, topic))[0]


async def _tail(bootstrap: str, topic: str) -> tuple[int, int]:
    """The last committed record's epoch (-1: none) and the log's end (its last stable offset)."""
    reader = MetadataLogReader(bootstrap, topic, dlq=None)
    await reader.start()
    try:
        end = await reader.high_watermark()
        # Control markers take offsets too, so look back over a few of them.
        start = max(0, end - 64)
        epoch = NO_EPOCH
        async for entry in reader.read(start, follow=False, until=end):
            epoch = max(epoch, entry.leader_epoch)
        return epoch, end
    finally:
        await reader.stop()


class MetadataLogReader:
    """Reads committed records of the metadata log (read_committed: aborted appends never show)."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        serde: MetadataRecordSerde | None = None,
        *,
        dlq: DeadLetterQueue | None,
        client_id: str = "kip1279-metadata-reader",
        poll_timeout_ms: int = 200,
        follow_fetch_max_wait_ms: int = FOLLOW_FETCH_MAX_WAIT_MS,
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.serde = serde or default_serde()
        self.dlq = dlq
        self.client_id = client_id
        self.poll_timeout_ms = poll_timeout_ms
        self.follow_fetch_max_wait_ms = follow_fetch_max_wait_ms
        self._default_max_wait_ms = 500  # aiokafka's fetch_max_wait_ms
        self._following = False
        self.tp = TopicPartition(topic, 0)
        self._consumer: AIOKafkaConsumer | None = None

    async def start(self) -> None:
        install_payload_redaction()
        # What aborted is read off the log's own markers, not the broker's list alone.
        if aborted_transactions.install():
            aborted_transactions.watch(self.topic)
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            client_id=self.client_id,
            group_id=None,  # the reader tracks its own position (snapshot + applied offset)
            enable_auto_commit=False,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            fetch_max_wait_ms=self._default_max_wait_ms,
        )
        await consumer.start()
        consumer.assign([self.tp])
        self._consumer = consumer

    async def stop(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await consumer.stop()

    async def high_watermark(self) -> int:
        """The end of the committed log (the last stable offset under read_committed)."""
        if self._consumer is None:
            raise MetadataLogError("the metadata log reader is not started")
        return int((await self._consumer.end_offsets([self.tp]))[self.tp])

    async def position(self) -> int:
        """The next offset this reader fetches (past any control markers it has read)."""
        if self._consumer is None:
            raise MetadataLogError("the metadata log reader is not started")
        return int(await self._consumer.position(self.tp))

    async def lag(self) -> int:
        """Offsets up to the high-water mark not read yet (control markers included, which
        ``MetadataLogLoader.next_offset`` never passes while following)."""
        if self._consumer is None:
            raise MetadataLogError("the metadata log reader is not started")
        # The last stable offset of the last fetch answer (a long poll answers on every commit):
        # a ListOffsets would queue behind a held fetch for up to its wait.
        end = self._consumer.last_stable_offset(self.tp) if self._following else None
        if end is None or end < 0:
            end = await self.high_watermark()
        return max(0, end - await self._consumer.position(self.tp))

    def decode(self, offset: int, raw: bytes | None, headers: Sequence[tuple[str, bytes]]) -> LogEntry:
        epoch = _epoch_of(headers)
        if raw is None:
            return LogEntry(offset, epoch, PoisonRecord("null value: the metadata log has no tombstones", None))
        try:
            return LogEntry(offset, epoch, self.serde.decode(raw))
        except FrameError as e:
            return LogEntry(offset, epoch, PoisonRecord(str(e), raw))
        except Exception as e:  # noqa: BLE001 - any decode failure is a poison record, not a crash
            return LogEntry(offset, epoch, PoisonRecord(f"{type(e).__name__}: {e}", raw))

    async def read(
        self, from_offset: int = 0, *, follow: bool = True, until: int | None = None
    ) -> AsyncIterator[LogEntry]:
        """Entries from ``from_offset``: to the high-water mark (``follow=False``) or forever.

        ``until`` stops before that offset. A poison entry is quarantined before it is yielded.
        """
        async for entries in self.read_batches(from_offset, follow=follow, until=until):
            for entry in entries:
                yield entry

    async def read_batches(
        self, from_offset: int = 0, *, follow: bool = True, until: int | None = None
    ) -> AsyncIterator[list[LogEntry]]:
        """As ``read``, a fetch's worth of entries at a time (never empty): a follower applies
        them all and publishes once, as KRaft's loader publishes per batch, not per record."""
        consumer = self._consumer
        if consumer is None:
            raise MetadataLogError("the metadata log reader is not started")
        consumer.seek(self.tp, from_offset)
        end = until if until is not None else (None if follow else await self.high_watermark())
        self._long_poll(end is None)
        try:
            async for entries in self._batches(consumer, end):
                yield entries
        finally:
            self._long_poll(False)

    def _long_poll(self, on: bool) -> None:
        """Following: fetches wait up to FOLLOW_FETCH_MAX_WAIT_MS (aiokafka keeps fetch.max.wait.ms
        on its fetcher and reads it per request)."""
        fetcher = getattr(self._consumer, "_fetcher", None)
        if fetcher is not None and hasattr(fetcher, "_fetch_max_wait_ms"):
            fetcher._fetch_max_wait_ms = self.follow_fetch_max_wait_ms if on else self._default_max_wait_ms
        self._following = on

    async def _batches(self, consumer: AIOKafkaConsumer, end: int | None) -> AsyncIterator[list[LogEntry]]:
        while True:
            if end is not None and await consumer.position(self.tp) >= end:
                return
            batch = await consumer.getmany(self.tp, timeout_ms=self.poll_timeout_ms)
            entries = []
            done = False
            for msg in batch.get(self.tp, []):
                if end is not None and msg.offset >= end:
                    done = True
                    break
                entry = self.decode(msg.offset, msg.value, msg.headers)
                if isinstance(entry.record, PoisonRecord):
                    await self._quarantine(entry)
                entries.append(entry)
            if entries:
                yield entries
            if done:
                return

    async def _quarantine(self, entry: LogEntry) -> None:
        assert isinstance(entry.record, PoisonRecord)
        log.error(
            "poison record at %s offset %d (epoch %d): %s; quarantined to %s.dlq",
            self.topic, entry.offset, entry.leader_epoch, entry.record.error, self.topic,
        )  # fmt: skip
        if self.dlq is not None:
            await self.dlq.quarantine(entry.offset, entry.leader_epoch, entry.record.error, entry.record.raw)

    async def __aenter__(self) -> MetadataLogReader:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


# ---------------------------------------------------------------------------------------------
# Snapshots (KRaft-style): the image as records, so a restart replays only the log's tail.
# ---------------------------------------------------------------------------------------------
#
# A snapshot is two files in the worker's snapshot directory, named after the snapshot id as
# KRaft names its ``.checkpoint`` files: ``<end offset, 20 digits>-<epoch, 10 digits>``, where
# the end offset is the first log offset NOT contained (last applied + 1).
#   - ``<id>.checkpoint``: a Kafka log segment (RecordBatch v2, CRC32C): a SNAPSHOT_HEADER
#     control batch, data batches of framed metadata records, a SNAPSHOT_FOOTER control batch.
#     ``kafka-records dump-log`` reads it.
#   - ``<id>.manifest.json``: last offset, epoch, record count and the segment's SHA-256.
# The manifest is renamed into place last: it is the commit point, so a crash mid-write
# leaves at worst an orphan segment, never a snapshot that seems whole but is not.


ReplayFn = Callable[[int, int, ApiMessageAndVersion], None]
"""Replay one record: (offset, epoch, record). Snapshot records come with the snapshot's last offset."""


class MetadataLogLoader:
    """Loads the latest snapshot, replays the tail, then follows the log, snapshotting as it goes.

    Generic over what is built: ``replay`` folds one record in, ``to_records`` writes the
    current state back as records (an image's ``to_records()``), ``reset`` empties it (before
    a snapshot is loaded). ``on_caught_up`` runs once the high-water mark is reached, as Kafka
    publishes nothing before that.
    """

    def __init__(
        self,
        reader: MetadataLogReader,
        snapshots: SnapshotStore | None,
        *,
        replay: ReplayFn,
        to_records: Callable[[], Iterable[ApiMessageAndVersion] | None] | None = None,
        policy: SnapshotPolicy = DEFAULT_SNAPSHOT_POLICY,
        on_poison: Callable[[LogEntry], None] | None = None,
        on_caught_up: Callable[[int], None] | None = None,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        busy: Callable[[], bool] | None = None,
    ) -> None:
        self.reader = reader
        self.snapshots = snapshots
        self.replay = replay
        self.to_records = to_records
        self.policy = policy
        self.on_poison = on_poison
        self.on_caught_up = on_caught_up
        self.clock_ms = clock_ms
        self.next_offset = 0
        self.last_epoch = NO_EPOCH
        self.poison_offsets: list[int] = []
        self.loaded_snapshot: SnapshotId | None = None
        self._since_snapshot = 0
        self._last_snapshot_ms = clock_ms()
        self._snapshotting = False  # a write is on its thread: callers meanwhile (ticks, the follower) skip
        # A snapshot due while ``busy()`` (the controller serving requests) waits until it is not,
        # at most MAX_SNAPSHOT_DEFER_MS: at 200,000 partitions one is ~0.5 CPU-s on the loop and a
        # thread sharing its GIL, which a mass failover's stop (its 4,000 records make one due)
        # and the --wait polls that follow it would pay.
        self.busy = busy
        self._deferred_since: int | None = None

    async def load_snapshot(self) -> SnapshotId | None:
        if self.snapshots is None:
            return None
        snapshot = await asyncio.to_thread(self.snapshots.latest)
        if snapshot is None:
            return None
        for record in snapshot.records:
            self.replay(snapshot.id.last_offset, snapshot.id.epoch, record)
        self.next_offset = snapshot.id.end_offset
        self.last_epoch = snapshot.id.epoch
        self.loaded_snapshot = snapshot.id
        self._last_snapshot_ms = self.clock_ms()
        return snapshot.id

    def apply(self, entry: LogEntry) -> None:
        """Folds one log entry in (a poison entry only moves the position past it)."""
        if isinstance(entry.record, PoisonRecord):
            self.poison_offsets.append(entry.offset)
            if self.on_poison is not None:
                self.on_poison(entry)
        else:
            self.replay(entry.offset, entry.leader_epoch, entry.record)
        self.next_offset = entry.offset + 1
        self.last_epoch = max(self.last_epoch, entry.leader_epoch)
        self._since_snapshot += 1

    async def catch_up(self) -> int:
        """Snapshot, then the tail up to the high-water mark. Returns the next offset."""
        if self.loaded_snapshot is None:
            await self.load_snapshot()
        end = await self.reader.high_watermark()  # one bound for the read and the resume point
        async for entry in self.reader.read(self.next_offset, follow=False, until=end):
            self.apply(entry)
            await self.maybe_snapshot()
        # Control markers past the last record still count: resume after them (but never past
        # records appended since ``end`` was read: those are the follower's).
        self.next_offset = max(self.next_offset, end)
        if self.on_caught_up is not None:
            self.on_caught_up(self.next_offset)
        return self.next_offset

    async def follow(self) -> None:
        """Forever: apply new records as they commit, snapshotting when due."""
        async for entry in self.reader.read(self.next_offset, follow=True):
            self.apply(entry)
            await self.maybe_snapshot()

    async def maybe_snapshot(self, force: bool = False) -> SnapshotId | None:
        if self.snapshots is None or self.to_records is None or self.next_offset == 0:
            return None
        now = self.clock_ms()
        if not force and not self.policy.due(self._since_snapshot, now - self._last_snapshot_ms):
            return None
        if not force and self.busy is not None and self.busy():
            if self._deferred_since is None:
                self._deferred_since = now
            if now - self._deferred_since < MAX_SNAPSHOT_DEFER_MS:
                return None
        if self._snapshotting:
            return None  # one write at a time: two of the same snapshot would race on its file
        got = self.to_records()  # taken on the loop: the state cannot move under it
        if got is None:
            return None  # not at a committed point (inside a metadata transaction): later
        records = list(got)
        self._snapshotting = True
        try:
            sid = await asyncio.to_thread(self.snapshots.write, records, self.next_offset - 1, self.last_epoch, now)
        except OSError as e:
            # A snapshot only shortens the next replay: a failed one is logged, never fatal.
            log.error("metadata snapshot at offset %d failed: %s", self.next_offset - 1, e)
            return None
        finally:
            self._snapshotting = False
        self._since_snapshot = 0
        self._last_snapshot_ms = now
        self._deferred_since = None
        return sid
