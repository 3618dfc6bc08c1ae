"""The ``mirror_state`` Faust table on RocksDB, with ``__mirror_state`` as its changelog: the
worker's side. The records' encoding, their partitioning and the state-write fence are
``streams.state.mirror_state_codec`` (no Faust there, for the readers).

Every record type lives in one table (their keys differ by the type prefix), because Faust maps
each changelog partition to exactly one table. The table never takes the partition from the
current event implicitly: it computes it from the key and refuses a write made while processing
an event of another partition (a routing bug).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import faust
import msgspec
import rocksdict
from aiokafka import TopicPartition as KafkaTopicPartition
from aiokafka.producer.transaction_manager import TransactionState
from faust.streams import current_event
from faust.types import TP

from streams.config import WorkerConfig
from streams.state import aborted_transactions
from streams.state.committed_consumer import read_committed
from streams.state.mirror_state_codec import (
    ChangelogRecord,
    MirrorStateCodec,
    MirrorStateError,
    RecordType,
    StateWriteFencedError,
    check_state_write,
    default_codec,
    partition_for_key,
)

log = logging.getLogger(__name__)
_ABORTABLE = (TransactionState.IN_TRANSACTION, TransactionState.ABORTABLE_ERROR)
TABLE_NAME = "mirror_state"
# Each table partition is a RocksDB of its own, and its memtables hold every write until a flush:
# with Faust's defaults (64 MiB, 3 of them) none flushed before a 50,000-partition failover ended,
# and the worker kept its ~9 writes per partition in memory (~90 MB at 50k). A few MiB per table
# partition flush to disk as they fill; reads of recent writes stay in the process's own maps.
ROCKSDB_OPTIONS = {"write_buffer_size": 2 << 20, "max_write_buffer_number": 2}


# ------------------------------------------------------------------------------------- the table


class MirrorStateTable(faust.Table):  # type: ignore[misc]
    """A table whose changelog partition comes from the key, never from the current event."""

    def __init__(self, *args: Any, num_partitions: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.num_partitions = num_partitions

    def partition_for_key(self, key: Any) -> int:
        partition = partition_for_key(key, self.num_partitions)
        event = current_event()
        if event is not None and event.message.partition != partition:
            # The RocksDB store files a write under the event's partition: refuse a mismatch.
            raise MirrorStateError(
                f"state key of partition {partition} written while processing partition {event.message.partition}"
                f" of {event.message.topic}: route events with streams.state.mirror_state_codec.partition_for"
            )
        return partition

    async def write_durably(self, partition: int, writes: Sequence[tuple[bytes, bytes | None]], producer: Any, *,
                            keys_checked: bool = False) -> None:  # fmt: skip
        """Writes ``(key, value)`` pairs of table partition ``partition`` and returns once the
        changelog has acknowledged every one of them. A None value deletes the key and writes its
        tombstone.

        ``table[key] = value`` queues each changelog record in Faust's producer buffer, which
        sends them one at a time and whose flush gives up after 0.1 s without a send. Here the
        records go out as whole record batches on ``producer`` (an ``AIOKafkaProducer`` with
        acks=all) and every ack is awaited, which is what makes a state durable before the next
        step's commands run. A transactional ``producer`` (the table partition's own,
        ``streams.worker.state_producers``) sends them in one transaction, committed before this
        returns: a newer owner's InitProducerId aborts it, and the broker refuses its commit.

        The local store gets them only then (what the changelog holds, never a write the broker
        may still abort), as one write batch into ``partition``'s RocksDB, as Faust's changelog
        recovery writes (``table[key] = value`` files each one under the current event's
        partition, one put at a time).

        ``keys_checked``: the caller worked out each key's partition (murmur2, ~9 us a key) and
        queued it under ``partition``; otherwise each key's partition is checked.
        """
        if not writes:
            return
        if not keys_checked:
            for key, _ in writes:
                got = partition_for_key(key, self.num_partitions)
                if got != partition:
                    raise MirrorStateError(f"state key of partition {got} written to partition {partition}")
        store = self.data
        topic = self.changelog_topic.get_topic_name()
        txn = getattr(producer, "_txn_manager", None)
        if txn is not None and txn.transactional_id is None:
            txn = None
        if txn is not None:
            await producer.begin_transaction()
            # aiokafka 0.14's send_batch does not add the partition to the transaction (its send does)
            txn.maybe_add_partition_to_txn(KafkaTopicPartition(topic, partition))
        sent: list[tuple[Any, int]] = []  # (ack future, records in its batch)
        try:
            batch, n = producer.create_batch(), 0
            for key, value in writes:
                if batch.append(key=key, value=value, timestamp=None) is None:  # full: send it, start the next
                    sent.append((await producer.send_batch(batch, topic, partition=partition), n))
                    batch, n = producer.create_batch(), 0
                    batch.append(key=key, value=value, timestamp=None)
                n += 1
            sent.append((await producer.send_batch(batch, topic, partition=partition), n))
            acked = await asyncio.gather(*(fut for fut, _ in sent), return_exceptions=True)
            failed = next((a for a in acked if isinstance(a, BaseException)), None)
            if failed is not None:
                raise failed
            if txn is not None:
                await producer.commit_transaction()
        except BaseException:
            if txn is not None and txn.state in _ABORTABLE:
                await _abort(producer)  # a producer still usable goes on; a fenced one is dropped by its owner
            raise
        write_partition(store, partition, writes)
        # Where a restart's changelog recovery resumes for this partition (what Faust's own
        # changelog callback records): the last record's offset. The commit marker after it is
        # no record: recovery reaches it by position (``streams.worker.recovery_guard``).
        store.set_persisted_offset(TP(topic, partition), max(m.offset + n - 1 for m, (_, n) in zip(acked, sent)))

    def info(self) -> Any:
        return {**super().info(), "num_partitions": self.num_partitions}


async def _abort(producer: Any) -> None:
    try:
        await asyncio.wait_for(producer.abort_transaction(), timeout=10.0)
    except Exception as e:  # noqa: BLE001 - the write's own error is the one raised
        log.warning("aborting a state write's transaction failed: %r", e)


def write_partition(store: Any, partition: int, writes: Sequence[tuple[bytes, bytes | None]]) -> None:
    """``writes`` into the RocksDB of table partition ``partition``, in one write batch."""
    batch = rocksdict.WriteBatch(raw_mode=True)
    index = store._key_index  # where the store looks a key up first (as its own writes record it)
    put, delete = batch.put, batch.delete
    located: dict[bytes, int] = {}
    for key, value in writes:
        if value is None:
            delete(key)
            located.pop(key, None)
            index.pop(key, None)
        else:
            put(key, value)
            located[key] = partition
    index.update(located)  # one pass under the index's lock, not a locked insert per key
    store._db_for_partition(partition).write(batch)


def make_app(config: WorkerConfig, **overrides: Any) -> faust.App:
    """The worker's Faust app: RocksDB store, no web server (it would bind 0.0.0.0)."""
    settings: dict[str, Any] = {
        "broker": f"kafka://{config.bootstrap_servers}",
        "store": "rocksdb://",
        "datadir": str(config.cluster_data_dir / "faust"),
        "topic_partitions": config.state_partitions,
        "topic_replication_factor": config.replication_factor,
        "web_enabled": False,
        "web_bind": "127.0.0.1",
        "producer_acks": -1,
        "table_cleanup_interval": 3600.0,
        # No standby replicas: a worker given a table partition reads its state from the
        # changelog then (``WorkerTable.sync_ownership``), and a standby made each of two workers
        # apply every write of the other's table partitions to its own RocksDB as it happened
        # (a 50,000-partition failover: ~3 CPU-s of each worker's ~11).
        "table_standby_replicas": 0,
    }
    group = group_settings(config, overrides)
    # Faust refuses a session timeout above the request timeout (90 s by default).
    settings["broker_request_timeout"] = max(90.0, group["broker_session_timeout"])
    own: dict[str, Any] = dict(group)
    if config.group_instance_id:
        own["consumer_group_instance_id"] = config.group_instance_id  # static membership (KIP-345)
    settings.update(overrides)
    settings.update(own)
    Path(settings["datadir"]).parent.mkdir(parents=True, exist_ok=True)
    app = faust.App(config.faust_app_id, **settings)
    read_committed(app)  # __mirror_state is transactional: a fenced owner's aborted writes are never recovered
    # ... and what aborted is read off its markers: a new owner's writes keep the dead one's producer ID.
    if aborted_transactions.install():
        aborted_transactions.watch(config.mirror_state_topic_name)
    # Faust lets its environment variables (BROKER_SESSION_TIMEOUT, ...) beat keyword settings;
    # the worker's own settings must not be overridden silently, so they are set again.
    for name, value in own.items():
        setattr(app.conf, name, value)
    return app


def group_settings(config: WorkerConfig, overrides: dict[str, Any] | None = None) -> dict[str, float]:
    """The Faust settings of the worker's consumer group membership, in seconds (``overrides`` win)."""
    out = {
        "broker_session_timeout": config.session_timeout_ms / 1000.0,
        "broker_heartbeat_interval": config.heartbeat_interval_ms / 1000.0,
        "broker_rebalance_timeout": config.rebalance_timeout_ms / 1000.0,
    }
    out.update({k: float(v) for k, v in (overrides or {}).items() if k in out})
    return out


def make_mirror_state_table(app: faust.App, config: WorkerConfig) -> MirrorStateTable:
    """The ``mirror_state`` table, raw bytes keys and values, changelog ``__mirror_state`` (prefixed)."""
    changelog = app.topic(
        config.mirror_state_topic_name,
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
        partitions=config.state_partitions,
        compacting=True,
        deleting=False,
        internal=True,
    )
    table = MirrorStateTable(
        app,
        name=TABLE_NAME,
        key_type=bytes,
        value_type=bytes,
        partitions=config.state_partitions,
        changelog_topic=changelog,
        store="rocksdb://",
        options=dict(ROCKSDB_OPTIONS),  # a copy: Faust's store pops keys from the dict it is given
        num_partitions=config.state_partitions,
    )
    return app.tables.add(table)  # type: ignore[no-any-return]


def make_desired_state_topic(app: faust.App, config: WorkerConfig) -> faust.TopicT:
    """Per-mirror-partition desired-state events, co-partitioned with the table."""
    return app.topic(
        config.desired_state_topic_name,
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
        partitions=config.state_partitions,
    )


class MirrorStateStore:
    """Typed access to the table: schema Structs in and out, fencing on every state write.

    Reads work anywhere; writes must run in an agent processing the key's own partition.
    """

    def __init__(self, table: MirrorStateTable | Any, codec: MirrorStateCodec | None = None) -> None:
        self.table = table
        self.codec = codec or default_codec()

    def get_state(self, mirror_name: str, topic_id: uuid.UUID, partition: int) -> msgspec.Struct | None:
        raw = self.table.get(self.codec.state_key(mirror_name, topic_id, partition))
        return None if raw is None else self.codec.decode_value(RecordType.MIRROR_PARTITION_STATE, raw)

    def put_state(self, mirror_name: str, topic_id: uuid.UUID, partition: int, value: msgspec.Struct) -> None:
        """Writes ``value`` unless it is fenced (raises StateWriteFencedError, nothing written)."""
        fence = check_state_write(self.get_state(mirror_name, topic_id, partition), value)
        if fence is not None:
            raise StateWriteFencedError(fence)
        self.table[self.codec.state_key(mirror_name, topic_id, partition)] = self.codec.encode_value(value)

    def delete_state(self, mirror_name: str, topic_id: uuid.UUID, partition: int) -> None:
        """Tombstones both keys of a mirror partition (state and LME) through Faust's changelog."""
        for key in (self.codec.state_key(mirror_name, topic_id, partition), self.codec.lme_key(mirror_name, topic_id, partition)):
            if key in self.table:
                del self.table[key]

    def get_last_mirror_epoch(self, mirror_name: str, topic_id: uuid.UUID, partition: int) -> msgspec.Struct | None:
        raw = self.table.get(self.codec.lme_key(mirror_name, topic_id, partition))
        return None if raw is None else self.codec.decode_value(RecordType.LAST_MIRROR_EPOCHS, raw)

    def put_last_mirror_epoch(
        self, mirror_name: str, topic_id: uuid.UUID, partition: int, epoch: int, applied_offset: int = -1
    ) -> None:
        value = self.codec.lme_value(epoch, applied_offset)
        self.table[self.codec.lme_key(mirror_name, topic_id, partition)] = self.codec.encode_value(value)

    def items(self) -> list[ChangelogRecord]:
        """Every record this worker holds (its assigned partitions)."""
        out = []
        for key, value in self.table.items():
            out.append(self.codec.decode(key, value))
        return out
