"""The stream worker's side of the ``mirror_state`` table (RocksDB, changelog ``__mirror_state``).

``WorkerTable`` knows which mirror partitions each table partition holds, loads their states
when a table partition is assigned (tombstoning those of a membership that is gone), and makes
the writes queued in ``WorkerStateStore`` durable, one table partition at a time: whole record
batches in one transaction of the partition's own producer, committed before the next step's
commands run.

The broker fences the writes (``streams.worker.state_producers``): a table partition taken on,
or held at a new group generation, gets a new transactional producer, whose InitProducerId
aborts the previous owner's open transaction and makes the broker refuse its later writes; only
then is the partition read from the changelog and loaded. A write refused so means the partition
is another worker's: it is let go until the next generation.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from coordinator.image import MetadataImage
from coordinator.partition_state import MirrorPartitionKey, decode_state, encode_state, key_order
from coordinator.states import DesiredState
from streams.config import WorkerConfig
from streams.state.mirror_state import TP, write_partition
from streams.state.mirror_state_codec import RecordType, applied_offset_of, default_codec, partition_for_key, retyped_key
from streams.state.stop_reports import StopReportsView
from streams.worker.state_producers import FENCED_ERRORS, StateProducers
from streams.worker.stop_reports import ReportedStops

log = logging.getLogger(__name__)
REPORT_WAIT_S = 10.0  # how long other workers' stop reports are waited for before their states are read
_VALUE_PREFIX = struct.pack(">h", 0)


class WorkerTable:
    """Table partitions: their keys, their loading on assignment, their durable writes."""

    def __init__(self, config: WorkerConfig, table: Any, store: Any, image: Callable[[], MetadataImage],
                 on_write: Callable[[float], None]) -> None:  # fmt: skip
        self.config = config
        self.table = table
        self.store = store
        self.image = image
        self.on_write = on_write  # seconds until the changelog acknowledged a write (metrics)
        self.producer: Any = None  # sync status and stop reports (see ``changelog_producer``)
        self.producers = StateProducers(config)  # state writes: one transactional producer per owned partition
        self._reader: Any = None  # the changelog's reader at a takeover (``_catch_up``)
        self._sync_lock = asyncio.Lock()
        self._generation: int | None = None  # the group generation the owned partitions were taken on at
        self._fenced: dict[int, int | None] = {}  # partitions fenced out, until the next generation
        self._released: list[MirrorPartitionKey] = []  # their keys, for the next sync to hand the runners
        self._keys_by_partition: dict[int, set[MirrorPartitionKey]] = defaultdict(set)
        self._keys_sorted: dict[int, list[MirrorPartitionKey]] = {}  # keys_of, until a key is added

    # ---------------------------------------------------------------- keys per table partition

    def keys_of(self, partition: int) -> list[MirrorPartitionKey]:
        """Mirror partitions whose state lives in table partition ``partition``."""
        got = self._keys_sorted.get(partition)
        if got is None:
            got = self._keys_sorted[partition] = sorted(self._keys_by_partition.get(partition, ()), key=key_order)
        return got

    def key_set(self, partition: int) -> set[MirrorPartitionKey]:
        """The same keys as ``keys_of``, as a set (live: do not change it)."""
        return self._keys_by_partition.get(partition, set())

    def add_key(self, partition: int, key: MirrorPartitionKey) -> None:
        keys = self._keys_by_partition[partition]
        if key not in keys:
            keys.add(key)
            self._keys_sorted.pop(partition, None)

    def drop_key(self, partition: int, key: MirrorPartitionKey) -> None:
        keys = self._keys_by_partition.get(partition)
        if keys is not None and key in keys:
            keys.discard(key)
            self._keys_sorted.pop(partition, None)

    # ---------------------------------------------------------------- assignment

    async def sync_ownership(self, owned: set[int], generation: int | None = None,
                             ) -> tuple[list[MirrorPartitionKey], list[MirrorPartitionKey]]:  # fmt: skip
        """Takes the table partitions in ``owned`` on and lets the others go; returns the mirror
        partitions released and those whose states were loaded, for the runners to follow.

        A table partition taken on, and every one held when the group ``generation`` changed (a
        worker that rejoined after a pause gets the same partitions back at a new generation,
        with whatever another owner wrote meanwhile), is fenced first (its transactional
        producer's InitProducerId), then read from the changelog as it is after the fence, then
        loaded: no state of this worker's own memory outlives an ownership."""
        async with self._sync_lock:
            return await self._sync_ownership(owned, generation)

    async def _sync_ownership(self, owned: set[int], generation: int | None,
                              ) -> tuple[list[MirrorPartitionKey], list[MirrorPartitionKey]]:  # fmt: skip
        released, self._released = self._released, []  # fenced out since the last sync
        lost = (self.store.owned | set(self._fenced) | self.producers.partitions()) - owned
        for p in lost:
            self._fenced.pop(p, None)
            released += self.store.drop_partition(p)
        if lost:
            await self.producers.release(lost)
        app = getattr(self.table, "app", None)
        if app is not None and (app.rebalancing or app.in_recovery):
            # Faust replays a newly assigned partition's changelog into RocksDB with the stream
            # flow already resumed: loaded now, its states would be partial, and never loaded again.
            return released, []
        if generation is not None and generation != self._generation:
            # The same partitions back at a new generation: each is taken on again.
            for p in self.store.owned & owned:
                released += self.store.drop_partition(p)
            self._fenced.clear()
            self._generation = generation
        gained = owned - self.store.owned - set(self._fenced)
        if not gained:
            return released, []
        started = time.perf_counter()
        try:
            await self.fence_and_catch_up(gained)
        except Exception as e:  # noqa: BLE001 - the next step's sync tries again
            log.warning("table partitions %s: taking them on failed: %r", sorted(gained), e)
            return released, []
        loaded = self._load(gained)
        log.info("table partitions %s taken on at generation %s: fenced, read to the LSO and %d mirror partition "
                 "state(s) loaded in %.3fs", sorted(gained), generation, len(loaded),
                 time.perf_counter() - started)  # fmt: skip
        return released, loaded

    async def fence_and_catch_up(self, partitions: set[int]) -> None:
        """Fences the previous owner of each of ``partitions`` (a new transactional producer:
        InitProducerId aborts its open transaction, and the broker refuses its later writes),
        then reads each partition's committed records, from where RocksDB has it up to the LSO
        as of after the fence, into RocksDB."""
        await self.producers.fence(partitions)
        await self._catch_up(partitions)

    async def _catch_up(self, partitions: set[int]) -> None:
        from aiokafka import TopicPartition

        from streams.state.raw_log import RawLogReader

        reader = await self._reader_consumer()
        topic = self.table.changelog_topic.get_topic_name()
        data = self.table.data
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        reader.assign(tps)
        reader.pause(*tps)
        start = {tp.partition: data.persisted_offset(TP(topic, tp.partition)) for tp in tps}
        # one lookup for all (a seek to the beginning each was a lookup per partition, one after the other)
        beginnings = await reader.beginning_offsets([tp for tp in tps if start[tp.partition] is None])
        for tp in tps:
            offset = start[tp.partition]
            reader.seek(tp, beginnings[tp] if offset is None else offset + 1)
        ends = await reader.end_offsets(tps)  # read_committed: the LSO, as of after the fence
        latest: dict[int, dict[bytes, bytes | None]] = {p: {} for p in partitions}

        def apply_to(p: int) -> Callable[[bytes | None, bytes | None, int], None]:
            rows = latest[p]

            def apply(key: bytes | None, value: bytes | None, offset: int) -> None:
                if key is not None:
                    rows[key] = value

            return apply

        await RawLogReader(reader).read_to(tps, ends, {tp: apply_to(tp.partition) for tp in tps})
        for tp in tps:
            p, end = tp.partition, ends[tp]
            if latest[p]:
                write_partition(data, p, list(latest[p].items()))
            if end > 0 and (start[p] is None or end - 1 > start[p]):
                data.set_persisted_offset(TP(topic, p), end - 1)  # everything before the LSO is applied

    async def _reader_consumer(self) -> Any:
        if self._reader is None:
            from aiokafka import AIOKafkaConsumer

            from streams.config import CATCH_UP_FETCH_MAX_WAIT_MS

            reader = AIOKafkaConsumer(bootstrap_servers=self.config.bootstrap_servers, group_id=None,
                                      enable_auto_commit=False, auto_offset_reset="earliest",
                                      isolation_level="read_committed", fetch_max_wait_ms=CATCH_UP_FETCH_MAX_WAIT_MS,
                                      client_id=f"{self.config.faust_app_id}-takeover")  # fmt: skip
            await reader.start()
            self._reader = reader
        return self._reader

    def _rows(self, partition: int) -> Iterable[tuple[bytes, bytes | None]]:
        """The table's rows of ``partition``: its own RocksDB where the store has one per partition."""
        data = getattr(self.table, "data", None)
        db_for = getattr(data, "_db_for_partition", None)
        if db_for is None:
            n = self.config.state_partitions
            return [(k, v) for k, v in self.table.items() if partition_for_key(k, n) == partition]
        offset_key = data.offset_key  # type: ignore[union-attr]
        return [(k, v) for k, v in db_for(partition).items() if k != offset_key]

    def _load(self, gained: set[int]) -> list[MirrorPartitionKey]:
        loaded: list[MirrorPartitionKey] = []
        codec = default_codec()
        with self.store.lock:
            self.store.owned |= gained
            for p in sorted(gained):
                self.store.drop_queued(p)  # decided on what this worker knew before the fence
                for raw_key, raw_value in self._rows(p):
                    if raw_value is None:
                        continue
                    rtype, k = codec.decode_key(raw_key)
                    key = MirrorPartitionKey(k.mirror_name, k.topic_id, k.partition)  # type: ignore[attr-defined]
                    if rtype == RecordType.MIRROR_PARTITION_STATE:
                        state = decode_state(raw_value[2:])
                        applied = state.applied_offset
                    else:
                        applied = applied_offset_of(rtype, codec.decode_value(rtype, raw_value))
                    if self.orphaned(key, applied):
                        self.store.deletes[p].add(key)  # its mirror no longer holds the topic: tombstones
                        continue
                    if rtype == RecordType.MIRROR_FAILOVER_IMPACT:
                        value = codec.decode_value(rtype, raw_value)
                        if not value.completed:  # type: ignore[attr-defined]
                            self.store.durable_impact[key] = value  # a stop under way: its outcome so far
                    if rtype != RecordType.MIRROR_PARTITION_STATE:
                        continue
                    self.store.durable[key] = state
                    self.add_key(p, key)
                    loaded.append(key)
        return loaded

    def orphaned(self, key: MirrorPartitionKey, applied_offset: int) -> bool:
        """State of a membership that is gone: the topic left the key's mirror after the state was
        applied, by the removals seen (``store.removed``) or by the image (a worker that was down
        while the mirror was deleted)."""
        if self.store.outlived(key, applied_offset):
            return True
        image = self.image()
        member = image.mirrors.topics.get(key.topic_id)
        gone = member is None or member.mirror_name != key.mirror_name
        return gone and applied_offset <= image.offset

    # ---------------------------------------------------------------- durable writes

    async def persist(self, partition: int) -> int:
        """Writes the queued writes of ``partition`` into the table (inside an event of that
        partition) and waits for the changelog to acknowledge them, in one transaction of the
        partition's own producer. Returns how many were written.

        A write the broker refused because a newer owner fenced this worker's producer (or one
        that left the producer unusable) means the partition is not this worker's any more: its
        queued writes are dropped, not retried, and it is not stepped again until the next
        assignment takes it on again (``sync_ownership``)."""
        producer = self.producers.get(partition)
        if producer is None or partition in self._fenced:
            return 0  # not taken on (yet), or fenced out: nothing may be written
        deletes = self.store.take_deletes(partition)
        ready, lmes, taken = self.store.prepare(partition)
        impacts = self.store.take_impacts(partition)
        if not taken and not lmes and not deletes and not impacts:
            return 0
        codec = default_codec()
        writes: list[tuple[bytes, bytes | None]] = [(raw, None) for raw in self.tombstones(deletes)]  # before new states
        state_key = self.store.state_key
        writes += [(state_key(k), _VALUE_PREFIX + encode_state(st)) for k, st in ready]
        for key, lme in lmes.items():
            value = codec.lme_value(lme.last_mirror_epoch, lme.applied_offset)
            writes.append((retyped_key(state_key(key), RecordType.LAST_MIRROR_EPOCHS), codec.encode_value(value)))
        # a stop's impact rides with the state write of the same step: no write of its own
        writes += [(retyped_key(state_key(k), RecordType.MIRROR_FAILOVER_IMPACT), codec.encode_value(v))
                   for k, v in impacts.items()]  # fmt: skip
        try:
            # durable before the next step's commands run
            started = time.perf_counter()
            # every key's partition was worked out (murmur2) when it was queued under ``partition``
            await self.table.write_durably(partition, writes, producer, keys_checked=True)
            self.on_write(time.perf_counter() - started)
        except BaseException as e:
            replaced = self.producers.get(partition) is not producer  # taken on again meanwhile (a new generation)
            cancelled = isinstance(e, asyncio.CancelledError)
            if not replaced and not cancelled and not self.producers.usable(partition):
                self._fence_out(partition, e)
                return 0
            if not replaced:  # not acknowledged: the next round writes them again
                self.store.requeue(partition, taken, lmes, impacts)
                self.store.requeue_deletes(partition, deletes)
            if replaced and not cancelled:
                return 0  # decided before the partition was taken on again: dropped
            raise
        self.store.land(ready)
        self.store.land_impacts(impacts)
        return len(writes)

    def _fence_out(self, partition: int, error: BaseException) -> None:
        """The broker refused the partition's writes: another worker owns it now."""
        fenced = isinstance(error, FENCED_ERRORS)
        log.warning("table partition %d (generation %s): %s; its queued writes are dropped and it is not stepped "
                    "until it is assigned again", partition, self._generation,
                    "a newer owner fenced this worker's state writes" if fenced
                    else f"its state producer failed ({error!r})")  # fmt: skip
        self._fenced[partition] = self._generation
        self._released += self.store.drop_partition(partition)

    def tombstones(self, keys: Iterable[MirrorPartitionKey]) -> list[bytes]:
        """The table keys (MirrorPartitionState and LastMirrorEpochs) of ``keys`` that still hold
        a value of a membership that is gone; a newer membership's value is kept."""
        codec = default_codec()
        out = []
        for key in sorted(keys):
            fields = (key.mirror_name, key.topic_id, key.partition)
            for rtype, raw in ((RecordType.MIRROR_PARTITION_STATE, codec.state_key(*fields)),
                               (RecordType.LAST_MIRROR_EPOCHS, codec.lme_key(*fields)),
                               (RecordType.MIRROR_FAILOVER_IMPACT, codec.impact_key(*fields))):  # fmt: skip
                value = self.table.get(raw)
                if value is None:
                    continue
                applied = applied_offset_of(rtype, codec.decode_value(rtype, value))
                if self.orphaned(key, applied):
                    out.append(raw)
        return out

    async def changelog_producer(self) -> Any:
        """The producer of the worker's reports (sync status, stop reports), idempotent.

        State writes go through each table partition's transactional producer
        (``streams.worker.state_producers``), with the same settings: whole record batches per
        table partition (Faust's producer sends a table's changelog one record at a time),
        acks=all, lz4: a batch of states of one mirror is mostly the same bytes (mirror name,
        field tags), and a mass failover writes three states per partition to a log that is never
        compacted on noida-db, which rewrites all it holds about once a second."""
        if self.producer is None:
            from aiokafka import AIOKafkaProducer

            producer = AIOKafkaProducer(bootstrap_servers=self.config.bootstrap_servers, acks="all",
                                        enable_idempotence=True, linger_ms=0, max_batch_size=1 << 19,
                                        compression_type="lz4",
                                        client_id=f"{self.config.faust_app_id}-changelog")  # fmt: skip
            await producer.start()
            self.producer = producer
        return self.producer

    async def stop(self) -> None:
        await self.producers.stop()
        if self._reader is not None:
            await self._reader.stop()
        if self.producer is not None:
            await self.producer.stop()


class OtherWorkersStates:
    """The latest states of the table partitions other workers own, read from the changelog
    (read-only) into ``store.remote``: the topic level needs every partition of a topic,
    wherever its state lives. Read after their writes were acknowledged, so a STOPPED seen is
    durable. ``store.remote`` is None while there is no view for the stop under way."""

    def __init__(self, config: WorkerConfig, store: Any, interval: float, timeout: float,
                 image: Callable[[], MetadataImage] | None = None, desired: Callable[[str], Any] | None = None) -> None:  # fmt: skip
        self.config = config
        self.store = store
        self.interval = interval  # at most one read per interval
        self.timeout = timeout
        self.view: Any = None  # streams.admin.controller.MirrorStateChangelogView, made on first use
        self._following: frozenset[int] | None = None  # the table partitions the view follows
        self._read_at = 0.0
        self._lock = asyncio.Lock()  # table partitions step side by side: one read at a time
        # The other workers' stop reports (``streams.state.stop_reports``): with the image and the
        # desired states (image and events), the view of a stop from one record per table partition.
        self.image, self.desired = image, desired
        self.reports: Any = None  # StopReportsView, made on first use
        self._waiting_since: float | None = None  # the first read of the stop under way

    async def refresh(self, stop_under_way: Callable[[], bool]) -> None:
        async with self._lock:
            await self._refresh(stop_under_way)

    async def _refresh(self, stop_under_way: Callable[[], bool]) -> None:
        if len(self.store.owned) >= self.config.state_partitions:
            self.store.remote = {}
            return
        if not stop_under_way():
            self.store.remote = None  # a view from an earlier stop may say STOPPED for a restarted partition
            self._waiting_since = None
            return
        now = time.monotonic()
        if now - self._read_at < self.interval:
            return
        self._read_at = now
        if self._waiting_since is None:
            self._waiting_since = now
        c = self.config
        # Only the table partitions others own: with two workers, following all of them read each
        # worker's own 3 writes per stopped partition back (~2 s of CPU per 25,000 partitions).
        others = frozenset(range(c.state_partitions)) - self.store.owned
        # Their owners' reports first: one record per table partition. The changelog's states are
        # read only when the reports have not covered the stops for REPORT_WAIT_S (an owner that
        # publishes none, or whose image has not reached a stop that came to it as an event).
        if await self._from_reports(others, now - self._waiting_since < REPORT_WAIT_S):
            return
        try:
            if self.view is not None and self._following is not None and self._following != others:
                view, self.view = self.view, None  # the assignment moved: follow the new set
                await view.stop()
            if self.view is None:
                from streams.state.changelog_view import MirrorStateChangelogView

                view = MirrorStateChangelogView(c.bootstrap_servers, c.mirror_state_topic_name, c.state_partitions,
                                                partitions=others)  # fmt: skip
                await view.start()
                self.view, self._following = view, others
            started = time.perf_counter()
            self.store.remote = await asyncio.wait_for(self.view.catch_up(), timeout=self.timeout)
            if log.isEnabledFor(logging.DEBUG):
                log.debug("other workers' states: %d read in %.3fs", len(self.store.remote), time.perf_counter() - started)
        except Exception as e:  # noqa: BLE001 - the topic level waits for the next read (a timeout too)
            self.store.remote = None
            log.warning("reading other workers' states from %s failed: %s", c.mirror_state_topic_name, e)

    async def _from_reports(self, others: frozenset[int], wait: bool) -> bool:
        """``store.remote`` from the reports when they cover every stop in every one of ``others``,
        or (``wait``) as far as they do; False: read the changelog's states."""
        if self.image is None or self.desired is None:
            return False
        c = self.config
        try:
            if self.reports is None:
                self.reports = StopReportsView(c.bootstrap_servers, c.stop_reports_topic_name, c.state_partitions)
            reports = await asyncio.wait_for(self.reports.reports(), timeout=self.timeout)
        except Exception as e:  # noqa: BLE001 - the changelog's states then, as before the reports
            log.warning("reading %s failed: %s", c.stop_reports_topic_name, e)
            return False
        image = self.image()
        latest: dict[str, int] = {}
        for name in image.mirrors.mirrors:
            offsets = [o for want, o in self.desired(name).values() if want is DesiredState.STOP]
            if offsets:
                latest[name] = max(offsets)
        got = ReportedStops(reports, image.offset, self.desired, self.store.partition_of)
        if not (wait or got.covers(latest, sorted(others))):
            return False
        held = self.store.remote
        if not (isinstance(held, ReportedStops) and held.reports == got.reports and held.image_offset == got.image_offset):
            self.store.remote = got  # a new view only when a report or the image moved: it moves the store's version
        return True

    async def stop(self) -> None:
        if self.view is not None:
            await self.view.stop()
        if self.reports is not None:
            await self.reports.stop()
