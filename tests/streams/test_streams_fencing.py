"""State writes are fenced where they land: by the broker, per table partition (issue #35).

Each table partition's writes to ``__mirror_state`` go through a transactional producer of its
own (``streams.worker.state_producers``). A worker that takes a table partition on, or holds it
at a new group generation, starts that producer anew (InitProducerId): the previous owner's
open transaction is aborted, and its later writes are refused by the broker. Then the worker
reads the partition from the changelog as it is after the fence.

Two owners of one table partition are made here as two workers would be, each with its own
Faust table on RocksDB (``WorkerTable``), on a real broker (noida-db and Apache Kafka): the older
owner's ``persist`` after the takeover is refused, its open transaction is aborted, and no
reader (the changelog view the controller's describe and the workers read, a worker's table
recovery and takeover, the audit export's reader, the raw history) ever sees its records; every
reader sees each key's state epoch strictly increasing.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from coordinator.partition_state import MirrorPartitionKey, MirrorPartitionState
from coordinator.states import MirrorState
from streams.config import WorkerConfig, ensure_topics
from streams.demo.harness import read_changelog
from streams.state.changelog_view import MirrorStateChangelogView
from streams.state.mirror_state import make_app, make_mirror_state_table
from streams.state.mirror_state_codec import RecordType, default_codec
from streams.state.raw_log import RawLogReader
from streams.worker.app import CoordinatorWorker
from streams.worker.audit_export import AuditExporter
from streams.worker.state_store import WorkerStateStore
from streams.worker.table import WorkerTable
from streams.worker.topics import worker_topic_specs

pytestmark = pytest.mark.brokers("noida-db", "apache-kafka")
MIRROR = "m"
STALE = 666  # the applied offset of every write the stale owner makes: no reader may see one


def keys_of(partitions: int, wanted: int, n: int) -> list[MirrorPartitionKey]:
    store = WorkerStateStore(partitions)
    out = [k for k in (MirrorPartitionKey(MIRROR, uuid.UUID(int=i), 0) for i in range(1, 2000))
           if store.partition_of(k) == wanted]  # fmt: skip
    return out[:n]


def image_of(keys: list[MirrorPartitionKey]) -> Any:
    topics = {k.topic_id: SimpleNamespace(mirror_name=MIRROR) for k in keys}
    return SimpleNamespace(offset=1_000, mirrors=SimpleNamespace(topics=topics))


def owner(cfg: WorkerConfig, data: Path, keys: list[MirrorPartitionKey]) -> WorkerTable:
    """A worker's side of the table, on its own RocksDB, as a worker makes it."""
    c = cfg.with_overrides(data_dir=str(data))
    table = make_mirror_state_table(make_app(c), c)
    image = image_of(keys)
    return WorkerTable(c, table, WorkerStateStore(c.state_partitions), lambda: image, lambda _: None)


def put(wt: WorkerTable, key: MirrorPartitionKey, state: MirrorState, applied: int = 1) -> None:
    before = wt.store.get(key)
    epoch = before.state_epoch if before is not None else 0
    wt.store.put(key, MirrorPartitionState(state=state, state_epoch=epoch + 1, applied_offset=applied))


def rows(wt: WorkerTable, partition: int) -> dict[bytes, MirrorPartitionState]:
    """What the owner's RocksDB holds for ``partition``: its MirrorPartitionState rows, decoded."""
    from coordinator.partition_state import decode_state

    return {k: decode_state(v[2:]) for k, v in wt._rows(partition) if k[:2] == b"\x00\x02" and v is not None}


async def close(*tables: WorkerTable) -> None:
    for wt in tables:
        await wt.stop()


async def test_a_stale_owners_write_after_a_takeover_is_refused_and_never_read(
        worker_config: WorkerConfig, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    cfg = worker_config
    await ensure_topics(cfg.bootstrap_servers, worker_topic_specs(cfg))
    open_p, refused_p = 1, 2  # one partition whose owner has a transaction open at the takeover, one that writes after
    (k_open, k_ghost), k_refused = keys_of(4, open_p, 2), keys_of(4, refused_p, 1)[0]
    keys = [k_open, k_refused]  # k_ghost: written only in the stale owner's open transaction
    old = owner(cfg, tmp_path / "old", keys)
    new = owner(cfg, tmp_path / "new", keys)
    try:
        assert await old.sync_ownership({open_p, refused_p}, generation=1) == ([], [])
        for k in keys:
            put(old, k, MirrorState.PREPARING)
        assert await old.persist(open_p) == 1 and await old.persist(refused_p) == 1
        for k in keys:
            put(old, k, MirrorState.MIRRORING)
        assert await old.persist(open_p) == 1 and await old.persist(refused_p) == 1

        # The old owner's write of ``open_p`` is under way when the new owner takes over: sent, not committed.
        producer = old.producers.get(open_p)
        assert producer is not None
        topic = cfg.mirror_state_topic_name
        stale_value = encoded(stale_state(old, k_open))
        await producer.begin_transaction()
        producer._txn_manager.maybe_add_partition_to_txn(TopicPartition(topic, open_p))
        batch = producer.create_batch()
        batch.append(key=old.store.state_key(k_open), value=stale_value, timestamp=None)
        batch.append(key=old.store.state_key(k_ghost), value=stale_value, timestamp=None)
        in_flight = await (await producer.send_batch(batch, topic, partition=open_p))
        assert in_flight.offset >= 2  # in the log, in an open transaction

        # The takeover: the new owner's InitProducerIds fence the old one, then it reads the changelog.
        released, loaded = await new.sync_ownership({open_p, refused_p}, generation=2)
        assert released == [] and sorted(loaded) == sorted(keys)
        assert {k: new.store.durable[k].state for k in keys} == {k: MirrorState.MIRRORING for k in keys}
        assert [new.store.durable[k].state_epoch for k in keys] == [1, 1]  # the first write is epoch 0
        for k in keys:
            put(new, k, MirrorState.STOPPING, applied=2)
        assert await new.persist(open_p) == 1 and await new.persist(refused_p) == 1

        # The stale owner wakes up: it commits what it had open, and writes what it decided before the pause.
        with pytest.raises(Exception) as refused:
            await producer.commit_transaction()
        assert type(refused.value).__name__ == "ProducerFenced", repr(refused.value)
        put(old, k_refused, MirrorState.STOPPING, applied=STALE)  # the same state epoch as the new owner's
        caplog.set_level(logging.WARNING, logger="streams.worker.table")
        assert await old.persist(refused_p) == 0  # refused by the broker
        warnings = [r.getMessage() for r in caplog.records if "fenced" in r.getMessage()]
        assert len(warnings) == 1 and f"table partition {refused_p} (generation 1)" in warnings[0], warnings
        assert refused_p not in old.store.owned and not old.store.pending.get(refused_p)  # not stepped any more
        assert old.store.get(k_refused) is None  # its states were let go with the partition
        assert await old.persist(refused_p) == 0 and len([r for r in caplog.records if "fenced" in r.getMessage()]) == 1
        assert all(v.applied_offset != STALE for v in rows(old, refused_p).values())  # nor in its own RocksDB

        for k in keys:
            put(new, k, MirrorState.STOPPED, applied=3)
        assert await new.persist(open_p) == 1 and await new.persist(refused_p) == 1
        final = {k: new.store.durable[k] for k in keys}
        assert {k: (s.state, s.state_epoch) for k, s in final.items()} == {k: (MirrorState.STOPPED, 3) for k in keys}
    finally:
        await close(old, new)

    # Every reader: committed writes only, each key's state epoch strictly increasing.
    history = await committed_history(cfg)
    assert k_ghost not in history
    for k in keys:
        assert [(s.state, s.state_epoch) for s in history[k]] == [
            (MirrorState.PREPARING, 0), (MirrorState.MIRRORING, 1), (MirrorState.STOPPING, 2), (MirrorState.STOPPED, 3)]

    view = MirrorStateChangelogView(cfg.bootstrap_servers, cfg.mirror_state_topic_name, cfg.state_partitions)
    await view.start()
    try:
        states = await view.catch_up()
    finally:
        await view.stop()
    assert {(k.mirror_name, k.topic_id, k.partition): MirrorState.STOPPED for k in keys} == {
        key: status.state for key, status in states.items()}  # no k_ghost

    seen = await audit_reader_sees(cfg, tmp_path, keys)
    assert k_ghost not in seen
    for k in keys:
        assert [s.state_epoch for s in seen[k]] == [0, 1, 2, 3] and all(s.applied_offset != STALE for s in seen[k])

    # A third worker (empty RocksDB) recovers the table with Faust's recovery (read_committed) and takes it on.
    recovered = await worker_recovers(cfg.with_overrides(data_dir=str(tmp_path / "third")))
    assert {k: recovered[k] for k in keys} == final and k_ghost not in recovered


def stale_state(wt: WorkerTable, key: MirrorPartitionKey) -> MirrorPartitionState:
    before = wt.store.get(key)
    assert before is not None
    return MirrorPartitionState(state=MirrorState.STOPPING, state_epoch=before.state_epoch + 1, applied_offset=STALE)


def encoded(state: MirrorPartitionState) -> bytes:
    from coordinator.partition_state import encode_state

    return b"\x00\x00" + encode_state(state)


async def committed_history(cfg: WorkerConfig) -> dict[MirrorPartitionKey, list[MirrorPartitionState]]:
    out: dict[MirrorPartitionKey, list[MirrorPartitionState]] = defaultdict(list)
    for rtype, k, value in await read_changelog(cfg.bootstrap_servers, cfg.mirror_state_topic_name):
        if rtype == RecordType.MIRROR_PARTITION_STATE and value is not None:
            st = MirrorPartitionState.from_schema_fields(value)
            assert st.applied_offset != STALE
            out[MirrorPartitionKey(k.mirror_name, k.topic_id, k.partition)].append(st)
    return out


async def audit_reader_sees(cfg: WorkerConfig, tmp_path: Path,
                            keys: list[MirrorPartitionKey]) -> dict[MirrorPartitionKey, list[MirrorPartitionState]]:  # fmt: skip
    """Every state the audit export's reader folds, per key, in order."""
    from coordinator.partition_state import decode_state

    c = cfg.with_overrides(audit_export_dir=str(tmp_path / "audit"))
    exporter = AuditExporter(c, lambda *_: (None, None), lambda: image_of(keys))
    seen: dict[MirrorPartitionKey, list[MirrorPartitionState]] = defaultdict(list)
    await exporter._start()
    try:
        assert exporter.fold is not None
        fold_apply = exporter.fold.apply

        def apply(partition: int, offset: int, key: bytes | None, value: bytes | None) -> None:
            if key is not None and key[:2] == b"\x00\x02" and value is not None:
                rtype, k = default_codec().decode_key(key)
                seen[MirrorPartitionKey(k.mirror_name, k.topic_id, k.partition)].append(decode_state(value[2:]))  # type: ignore[attr-defined]
            fold_apply(partition, offset, key, value)

        exporter.fold.apply = apply  # type: ignore[method-assign]
        positions = await exporter._read()
        ends = await exporter.consumer.end_offsets(exporter.tps)
        assert positions == {tp.partition: ends[tp] for tp in exporter.tps}  # read to the LSO, markers and all
    finally:
        await exporter.consumer.stop()
        exporter.pool.shutdown()
    return seen


async def worker_recovers(cfg: WorkerConfig) -> dict[MirrorPartitionKey, MirrorPartitionState]:
    worker = CoordinatorWorker(cfg, ports=lambda *_: (None, None), tick_interval=0.1)  # type: ignore[arg-type]
    started = asyncio.ensure_future(worker.app.start())
    try:
        deadline = time.monotonic() + 30
        while worker.store.owned != set(range(cfg.state_partitions)) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert worker.store.owned == set(range(cfg.state_partitions)), worker.app.tables.recovery.active_stats()
        # Faust's recovery waited for a record where the log holds a commit marker: the guard ended it.
        assert worker.recovery_guard.lowered >= 1
        return dict(worker.store.durable)
    finally:
        if not started.done():
            started.cancel()
        await asyncio.wait_for(worker.app.stop(), 30)
        worker.close()


async def test_the_raw_reader_skips_control_batches_and_aborted_transactions(kafka_broker: Any) -> None:
    bootstrap, topic = kafka_broker.bootstrap, f"txn-{uuid.uuid4().hex[:8]}"
    from aiokafka.admin import NewTopic

    await ensure_topics(bootstrap, [NewTopic(topic, 1, 1)])
    tp = TopicPartition(topic, 0)
    plain = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    txn = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", transactional_id=f"{topic}-tx", compression_type="lz4")
    await plain.start()
    await txn.start()
    expected: list[bytes] = []
    try:
        async def in_txn(values: list[bytes], commit: bool) -> None:
            await txn.begin_transaction()
            for v in values:
                await txn.send(topic, key=v, value=v, partition=0)
            await (txn.commit_transaction() if commit else txn.abort_transaction())

        await plain.send_and_wait(topic, key=b"p0", value=b"p0", partition=0)
        expected.append(b"p0")
        await in_txn([b"c1", b"c2"], commit=True)
        expected += [b"c1", b"c2"]
        await in_txn([b"a1", b"a2", b"a3"], commit=False)
        await plain.send_and_wait(topic, key=b"p1", value=b"p1", partition=0)
        expected.append(b"p1")
        await in_txn([b"a4"], commit=False)
        await in_txn([b"c3"], commit=True)
        expected.append(b"c3")
        # one left open: the LSO stops before it
        await txn.begin_transaction()
        await (await txn.send(topic, key=b"open", value=b"open", partition=0))

        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                    auto_offset_reset="earliest", isolation_level="read_committed")  # fmt: skip
        await consumer.start()
        try:
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            consumer.pause(tp)
            lso = (await consumer.end_offsets([tp]))[tp]
            got: list[tuple[bytes | None, int]] = []
            await asyncio.wait_for(RawLogReader(consumer).read_to([tp], {tp: lso}, lambda k, v, o: got.append((v, o))), 20)
            assert [v for v, _ in got] == expected
            assert await consumer.position(tp) == lso  # past the markers and the aborted batches up to the LSO
            assert lso > max(o for _, o in got) + 1  # the log holds more than the records read: markers, aborted data
        finally:
            await consumer.stop()
        await txn.abort_transaction()
    finally:
        await plain.stop()
        await txn.stop()


async def test_a_worker_whose_generation_changed_reloads_every_partition_it_holds(worker_config: WorkerConfig,
                                                                                  tmp_path: Path) -> None:  # fmt: skip
    """The pause case: a worker holds a table partition; another owner takes it over and writes;
    the first gets the same partition back at a new generation and must see those writes."""
    cfg = worker_config
    await ensure_topics(cfg.bootstrap_servers, worker_topic_specs(cfg))
    p = 3
    keys = keys_of(4, p, 3)
    paused = owner(cfg, tmp_path / "paused", keys)
    other = owner(cfg, tmp_path / "other", keys)
    try:
        await paused.sync_ownership({p}, generation=5)
        for k in keys:
            put(paused, k, MirrorState.PREPARING)
        assert await paused.persist(p) == 3
        for k in keys:
            put(paused, k, MirrorState.MIRRORING)
        assert await paused.persist(p) == 3
        inits = paused.producers.inits
        assert await paused.sync_ownership({p}, generation=5) == ([], [])  # the same generation: nothing again
        assert paused.producers.inits == inits

        # Meanwhile (the pause), another worker owns it: a stop moves every key on.
        await other.sync_ownership({p}, generation=6)
        for k in keys:
            put(other, k, MirrorState.STOPPING, applied=2)
        assert await other.persist(p) == 3
        for k in keys[:2]:
            put(other, k, MirrorState.STOPPED, applied=3)
        assert await other.persist(p) == 2
        latest = dict(other.store.durable)

        # The paused worker decided something before it noticed; then it rejoins and gets p back.
        put(paused, keys[2], MirrorState.STOPPING, applied=STALE)
        released, loaded = await paused.sync_ownership({p}, generation=7)
        assert sorted(released) == sorted(keys) and sorted(loaded) == sorted(keys)  # let go, then taken on again
        assert paused.producers.inits == inits + 1
        assert paused.store.durable == latest  # the store: what the other owner wrote
        assert not paused.store.pending.get(p)  # the decision made before the fence is dropped
        table_rows = rows(paused, p)
        assert sorted(table_rows.values(), key=lambda s: s.state_epoch) == sorted(latest.values(), key=lambda s: s.state_epoch)
        put(paused, keys[2], MirrorState.STOPPED, applied=4)
        assert await paused.persist(p) == 1  # its producer is the partition's owner again
        # and the other owner is fenced now
        put(other, keys[2], MirrorState.STOPPED, applied=STALE)
        assert await other.persist(p) == 0 and p not in other.store.owned
    finally:
        await close(paused, other)
    history = await committed_history(cfg)
    for k in keys:
        epochs = [s.state_epoch for s in history[k]]
        assert epochs == sorted(set(epochs)) and [s.state for s in history[k]][-1] is MirrorState.STOPPED
