"""The stream worker's side of the ``mirror_state`` table (RocksDB, changelog ``__mirror_state``).

``WorkerTable`` knows which mirror partitions each table partition holds, loads their states
when a table partition is assigned (tombstoning those of a membership that is gone), and makes
the writes queued in ``WorkerStateStore`` durable, one table partition at a time: whole record
batches, acknowledged by the changelog before the next step's commands run.
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
from streams.state.mirror_state import RecordType, applied_offset_of, default_codec, partition_for_key, retyped_key
from streams.config import dlq_topic_spec, metadata_topic_spec
from streams.state.mirror_state import desired_state_topic_spec, mirror_state_topic_spec
from streams.state.stop_reports import StopReportsView, stop_reports_topic_spec
from streams.state.sync_status import sync_status_topic_spec
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
        self.producer: Any = None  # state writes to the changelog (see ``changelog_producer``)
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

    def sync_ownership(self, owned: set[int]) -> tuple[list[MirrorPartitionKey], list[MirrorPartitionKey]]:
        """Takes the table partitions in ``owned`` on and lets the others go; returns the mirror
        partitions released and those whose states were loaded, for the runners to follow."""
        gained, lost = owned - self.store.owned, self.store.owned - owned
        app = getattr(self.table, "app", None)
        if gained and app is not None and (app.rebalancing or app.in_recovery):
            # Faust replays a newly assigned partition's changelog into RocksDB with the stream
            # flow already resumed: loaded now, its states would be partial, and never loaded again.
            gained = set()
        released = [key for p in lost for key in self.store.drop_partition(p)]
        loaded: list[MirrorPartitionKey] = []
        if not gained:
            return released, loaded
        codec = default_codec()
        with self.store.lock:
            self.store.owned |= gained
            for raw_key, raw_value in self.table.items():
                p = partition_for_key(raw_key, self.config.state_partitions)
                if p not in gained or raw_value is None:
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
        log.info("table partitions %s assigned: %d mirror partition state(s) loaded", sorted(gained), len(loaded))
        return released, loaded

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
        partition) and waits for the changelog to acknowledge them. Returns how many were written."""
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
            await self.table.write_durably(partition, writes, await self.changelog_producer(), keys_checked=True)
            self.on_write(time.perf_counter() - started)
        except BaseException:
            self.store.requeue(partition, taken, lmes, impacts)  # not acknowledged: the next round writes them again
            self.store.requeue_deletes(partition, deletes)
            raise
        self.store.land(ready)
        self.store.land_impacts(impacts)
        return len(writes)

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
        """The producer of state writes: whole record batches per table partition, acks=all,
        idempotent (Faust's producer sends a table's changelog one record at a time), lz4: a
        batch of states of one mirror is mostly the same bytes (mirror name, field tags), and a
        mass failover writes three states per partition to a log that is never compacted on
        noida-db, which rewrites all it holds about once a second."""
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


def tick_topic_name(config: WorkerConfig) -> str:
    return config.desired_state_topic_name + ".ticks"


def worker_topic_specs(config: WorkerConfig) -> list[Any]:
    from aiokafka.admin import NewTopic

    ticks = NewTopic(tick_topic_name(config), config.state_partitions, config.replication_factor,
                     topic_configs={"retention.ms": "600000"})  # fmt: skip
    return [metadata_topic_spec(config.metadata_topic_name, config.replication_factor),
            dlq_topic_spec(config.metadata_topic_name, config.replication_factor),
            mirror_state_topic_spec(config), desired_state_topic_spec(config), sync_status_topic_spec(config),
            stop_reports_topic_spec(config),
            ticks]  # fmt: skip
