"""The metadata log on a real broker: atomic appends, replay, poison records to the DLQ, snapshots."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from coordinator.delta import Replayer
from coordinator.image import ConfigResourceType, MetadataImage
from records import segments
from records.framing import ApiMessageAndVersion
from records.registry import default_schemas
from streams.config import WorkerConfig
from streams.state.dead_letters import DeadLetterQueue, read_dlq
from streams.state.metadata_log import LogEntry, MetadataLogLoader, MetadataLogReader, MetadataLogWriter, PoisonRecord
from streams.state.snapshots import SnapshotPolicy, SnapshotStore
from streams.config import dlq_topic_spec, ensure_topics, metadata_topic_spec

# Each broker test runs on noida-db and on Apache Kafka (tests/streams/conftest.py).
pytestmark = pytest.mark.brokers("noida-db", "apache-kafka")

S = default_schemas()


def amv(_message: str, /, **fields: object) -> ApiMessageAndVersion:
    return ApiMessageAndVersion(S.struct(_message)(**fields), 0, S.spec(_message).api_key)  # type: ignore[arg-type]


def sample_records(n_topics: int = 3) -> list[ApiMessageAndVersion]:
    out = [amv("ConfigRecord", resource_type=int(ConfigResourceType.CLUSTER_MIRROR), resource_name="a-to-b",
               name="bootstrap.servers", value="a:9092")]
    for i in range(n_topics):
        tid = uuid.UUID(int=i + 1)
        out.append(amv("TopicRecord", name=f"orders-{i}", topic_id=tid))
        for p in range(2):
            out.append(amv("PartitionRecord", partition_id=p, topic_id=tid, replicas=(1,), isr=(1,), leader=1,
                           leader_epoch=0, partition_epoch=0))
        out.append(amv("MirrorTopicStateChangeRecord", topic_id=tid, mirror_name="a-to-b", desired_state=0))
    return out


async def setup_log(cfg: WorkerConfig) -> str:
    topic = cfg.metadata_topic_name
    await ensure_topics(cfg.bootstrap_servers, [metadata_topic_spec(topic), dlq_topic_spec(topic)])
    return topic


async def read_all(cfg: WorkerConfig, topic: str, dlq: DeadLetterQueue | None = None) -> list[LogEntry]:
    async with MetadataLogReader(cfg.bootstrap_servers, topic, dlq=dlq) as reader:
        return [e async for e in reader.read(0, follow=False)]


async def test_append_is_atomic_and_replays_in_order(worker_config: WorkerConfig) -> None:
    topic = await setup_log(worker_config)
    records = sample_records()
    async with MetadataLogWriter(worker_config.bootstrap_servers, topic) as writer:
        first = await writer.append(records[:4])
        second = await writer.append(records[4:])
        epoch = writer.epoch
    assert first == sorted(first) and second[0] > first[-1]
    entries = await read_all(worker_config, topic)
    assert [e.offset for e in entries] == first + second
    assert [e.record for e in entries] == records
    assert {e.leader_epoch for e in entries} == {epoch}
    # A new writer (controller failover) takes the next epoch.
    async with MetadataLogWriter(worker_config.bootstrap_servers, topic) as writer2:
        assert writer2.epoch == epoch + 1


async def test_second_writer_fences_the_first(worker_config: WorkerConfig) -> None:
    topic = await setup_log(worker_config)
    records = sample_records(1)
    old = MetadataLogWriter(worker_config.bootstrap_servers, topic)
    await old.start()
    try:
        await old.append(records[:1])
        async with MetadataLogWriter(worker_config.bootstrap_servers, topic) as new:
            await new.append(records[1:2])
            with pytest.raises(KafkaError):
                await old.append(records[2:3])  # a zombie controller cannot append any more
    finally:
        await old.stop()
    entries = await read_all(worker_config, topic)
    assert [e.record for e in entries] == records[:2]


async def test_poison_record_is_quarantined_and_replay_continues(worker_config: WorkerConfig) -> None:
    topic = await setup_log(worker_config)
    records = sample_records(1)
    async with MetadataLogWriter(worker_config.bootstrap_servers, topic) as writer:
        await writer.append(records[:2])
    producer = AIOKafkaProducer(bootstrap_servers=worker_config.bootstrap_servers)
    await producer.start()
    try:
        garbage = b"\x01\x1d\x00\x07\x07\x07"  # frame v1, apiKey 29, v0, truncated body
        poison_offset = (await producer.send_and_wait(topic, garbage, partition=0)).offset
    finally:
        await producer.stop()
    async with MetadataLogWriter(worker_config.bootstrap_servers, topic) as writer:
        tail = await writer.append(records[2:])

    dlq = DeadLetterQueue(worker_config.bootstrap_servers, topic)
    await dlq.start()
    try:
        entries = await read_all(worker_config, topic, dlq)
    finally:
        await dlq.stop()
    poison = [e for e in entries if e.is_poison]
    assert [e.offset for e in poison] == [poison_offset]
    assert isinstance(poison[0].record, PoisonRecord) and "MirrorTopicStateChangeRecord" in poison[0].record.error
    assert [e.record for e in entries if not e.is_poison] == records  # nothing before or after was lost
    assert entries[-1].offset == tail[-1]
    quarantined = await read_dlq(worker_config.bootstrap_servers, topic)
    assert len(quarantined) == 1
    q = quarantined[0]
    assert q.offset == poison_offset and q.raw == garbage and q.error == poison[0].record.error


def _replayer_loader(reader: MetadataLogReader, store: SnapshotStore | None, policy: SnapshotPolicy) -> tuple[MetadataLogLoader, Replayer]:
    r = Replayer()
    loader = MetadataLogLoader(reader, store, policy=policy, replay=lambda off, ep, rec: r.replay(rec, off, ep),
                               to_records=lambda: r.image().to_records())
    return loader, r


async def test_snapshot_plus_tail_equals_full_replay(worker_config: WorkerConfig, tmp_path: Path) -> None:
    topic = await setup_log(worker_config)
    records = sample_records(6)
    async with MetadataLogWriter(worker_config.bootstrap_servers, topic) as writer:
        for i in range(0, len(records), 5):
            await writer.append(records[i : i + 5])

    store = SnapshotStore(tmp_path / "snaps")
    async with MetadataLogReader(worker_config.bootstrap_servers, topic, dlq=None) as reader:
        loader, first = _replayer_loader(reader, store, SnapshotPolicy(max_records=7, max_interval_ms=10**9))
        await loader.catch_up()
    full: MetadataImage = first.image()
    ids = store.ids()
    assert ids, "a snapshot every 7 records was due"
    assert ids[-1].end_offset <= loader.next_offset

    # More records after the snapshot: the restart replays only those.
    more = [amv("MirrorTopicStateChangeRecord", topic_id=uuid.UUID(int=1), mirror_name="a-to-b", desired_state=1)]
    async with MetadataLogWriter(worker_config.bootstrap_servers, topic) as writer:
        await writer.append(more)
    async with MetadataLogReader(worker_config.bootstrap_servers, topic, dlq=None) as reader:
        restarted, second = _replayer_loader(reader, store, SnapshotPolicy(max_records=10**9))
        seen: list[int] = []
        orig = restarted.replay
        restarted.replay = lambda off, ep, rec: (seen.append(off), orig(off, ep, rec))  # type: ignore[assignment]
        await restarted.catch_up()
    snap = restarted.loaded_snapshot
    assert snap is not None
    assert all(off >= snap.last_offset for off in seen)  # snapshot records sit at its last offset
    async with MetadataLogReader(worker_config.bootstrap_servers, topic, dlq=None) as reader:
        scratch, third = _replayer_loader(reader, None, SnapshotPolicy())
        await scratch.catch_up()
    assert second.image() == third.image()
    assert second.image() != full  # the tail's stop was applied
    assert second.image().provenance == third.image().provenance


async def test_records_appended_during_catch_up_are_not_skipped(worker_config: WorkerConfig) -> None:
    """A catch-up reads to the high-water mark it saw at its start; records appended while it
    reads belong to the follower, not skipped past (the end is read once, not again after)."""
    topic = await setup_log(worker_config)
    first, later = sample_records(3), sample_records(6)[len(sample_records(3)):]
    async with MetadataLogWriter(worker_config.bootstrap_servers, topic) as writer:
        appended = await writer.append(first)
        async with MetadataLogReader(worker_config.bootstrap_servers, topic, dlq=None) as reader:
            # Apache Kafka writes the commit markers after EndTxn returns: the appended records
            # are committed but below the last stable offset only a moment later.
            for _ in range(200):
                if await reader.high_watermark() > appended[-1]:
                    break
                await asyncio.sleep(0.05)
            loader, r = _replayer_loader(reader, None, SnapshotPolicy())
            seen: list[int] = []
            replay = loader.replay

            def replay_then_append(off: int, ep: int, rec: ApiMessageAndVersion) -> None:
                seen.append(off)
                replay(off, ep, rec)

            loader.replay = replay_then_append  # type: ignore[assignment]
            read = reader.read

            async def read_racing(*args: object, **kwargs: object):  # noqa: ANN202
                async for entry in read(*args, **kwargs):  # type: ignore[arg-type]
                    if entry.offset == 0:
                        await writer.append(later)  # lands while the catch-up is reading
                    yield entry

            reader.read = read_racing  # type: ignore[method-assign]
            await loader.catch_up()
            reader.read = read  # type: ignore[method-assign]
            assert len(seen) == len(first)  # up to where it began, no further

            async def follow() -> None:
                async for entry in reader.read(loader.next_offset, follow=True):
                    loader.apply(entry)
                    if len(seen) == len(first) + len(later):
                        return

            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(follow(), 20)
    assert len(seen) == len(first) + len(later) and seen == sorted(seen)  # every record, in order, none skipped
    assert {t.name for t in r.image().topics.by_id.values()} == {f"orders-{i}" for i in range(6)}


def test_snapshot_files_are_segments_and_damage_falls_back(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path, keep=5)
    recs = sample_records(2)
    old = store.write(recs[:3], last_offset=10, epoch=1, timestamp_ms=1000)
    new = store.write(recs, last_offset=20, epoch=2, timestamp_ms=2000)
    assert new.name == "00000000000000000021-0000000002"
    batches = segments.read_segment(tmp_path / f"{new.name}.checkpoint")
    assert batches[0].is_control and batches[-1].is_control
    assert segments.control_type(batches[0].records[0]) == segments.ControlType.SNAPSHOT_HEADER
    latest = store.latest()
    assert latest is not None and latest.id == new and latest.records == recs
    # Flip a byte of the newest segment: the checksum catches it, the older snapshot is used.
    path = tmp_path / f"{new.name}.checkpoint"
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))
    fallback = store.latest()
    assert fallback is not None and fallback.id == old and fallback.records == recs[:3]
    # A segment without its manifest (crash before the commit point) is not a snapshot.
    (tmp_path / f"{old.name}.manifest.json").unlink()
    assert old not in store.ids()


async def test_snapshots_due_at_once_write_one_and_a_failed_write_is_not_fatal(tmp_path: Path) -> None:
    """The worker's ticks and its metadata follower both call ``maybe_snapshot``: two calls while
    one write is on its thread must not write the same snapshot file twice (the second rename
    failed and crashed the worker), and a failed write only logs."""
    writes: list[int] = []

    class SlowStore(SnapshotStore):
        def write(self, records, last_offset, epoch, timestamp_ms):  # type: ignore[no-untyped-def]
            writes.append(last_offset)
            import time

            time.sleep(0.2)  # on the loader's thread: the second call comes meanwhile
            return super().write(records, last_offset, epoch, timestamp_ms)

    recs = sample_records(2)
    loader = MetadataLogLoader(None, SlowStore(tmp_path), replay=lambda *_: None,  # type: ignore[arg-type]
                               to_records=lambda: recs, policy=SnapshotPolicy(max_records=1))  # fmt: skip
    loader.next_offset, loader._since_snapshot = 5, 5
    first, second = await asyncio.gather(loader.maybe_snapshot(), loader.maybe_snapshot())
    assert first is not None and second is None and writes == [4]
    latest = SnapshotStore(tmp_path).latest()
    assert latest is not None and latest.id == first and latest.records == recs
    # The directory gone read-only under it (a full disk, say): logged, the loader goes on.
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the snapshot directory should be")
    loader.snapshots = SnapshotStore(blocked)
    loader._since_snapshot = 5
    assert await loader.maybe_snapshot() is None
    loader.snapshots = SnapshotStore(tmp_path / "again")
    assert await loader.maybe_snapshot() is not None


async def test_a_snapshot_due_while_busy_waits_for_a_quiet_moment_at_most_a_minute(tmp_path: Path) -> None:
    """The controller defers a snapshot due while it serves requests (a mass stop and its --wait
    polls): it is written once the controller is quiet, or after MAX_SNAPSHOT_DEFER_MS anyway."""
    from streams.state.metadata_log import MAX_SNAPSHOT_DEFER_MS

    now, busy = [0], [True]
    loader = MetadataLogLoader(None, SnapshotStore(tmp_path), replay=lambda *_: None,  # type: ignore[arg-type]
                               to_records=lambda: sample_records(2), policy=SnapshotPolicy(max_records=1),
                               clock_ms=lambda: now[0], busy=lambda: busy[0])  # fmt: skip
    loader.next_offset, loader._since_snapshot = 5, 5
    assert await loader.maybe_snapshot() is None  # due, but busy
    now[0] = MAX_SNAPSHOT_DEFER_MS - 1
    assert await loader.maybe_snapshot() is None  # still busy, not yet a minute
    busy[0] = False
    first = await loader.maybe_snapshot()
    assert first is not None and first.last_offset == 4  # quiet: written
    busy[0] = True
    loader.next_offset, loader._since_snapshot = 9, 4
    assert await loader.maybe_snapshot() is None  # due again, busy again: the wait starts anew
    now[0] += MAX_SNAPSHOT_DEFER_MS
    second = await loader.maybe_snapshot()
    assert second is not None and second.last_offset == 8  # busy for a minute: written anyway
    assert await loader.maybe_snapshot(force=True) is not None  # forced: never deferred


async def test_an_idle_follower_long_polls_and_still_reads_a_commit_at_once(worker_config: WorkerConfig,
                                                                           kafka_broker: object) -> None:  # fmt: skip
    """Following the log's end, an idle reader sends one fetch per FOLLOW_FETCH_MAX_WAIT_MS on
    Apache Kafka (it sent two a second); a commit is read at once all the same (the broker answers
    the held fetch), and the lag answers from the fetch answers, not queued behind the held fetch."""
    topic = await setup_log(worker_config)
    async with MetadataLogWriter(worker_config.bootstrap_servers, topic) as writer:
        first = await writer.append(sample_records(1))
        async with MetadataLogReader(worker_config.bootstrap_servers, topic, dlq=None) as reader:
            got: list[int] = []
            arrived = asyncio.Event()

            async def follow() -> None:
                async for entries in reader.read_batches(0, follow=True):
                    got.extend(e.offset for e in entries)
                    arrived.set()

            task = asyncio.create_task(follow())
            try:
                while not got or got[-1] < first[-1]:
                    await asyncio.wait_for(arrived.wait(), 10)
                    arrived.clear()
                await asyncio.sleep(0.5)  # the fetch after the last answer is under way
                fetches = [0]
                assert reader._consumer is not None
                client = reader._consumer._client
                send = client.send

                async def counting(node_id: object, request: object, *a: object, **k: object) -> object:
                    fetches[0] += getattr(request, "API_KEY", None) == 1
                    return await send(node_id, request, *a, **k)

                client.send = counting  # type: ignore[method-assign]
                await asyncio.sleep(2.0)
                idle = fetches[0]
                t = time.monotonic()
                lag = await reader.lag()
                lag_s = time.monotonic() - t
                t = time.monotonic()
                more = await writer.append(sample_records(1))
                while got[-1] < more[-1]:
                    await asyncio.wait_for(arrived.wait(), 10)
                    arrived.clear()
                read_s = time.monotonic() - t
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    if type(kafka_broker).__name__ == "ApacheKafkaCluster":  # noida-db answers empty fetches at once
        assert idle <= 1, f"{idle} fetches in 2 s of idle following"
    assert lag == 0 and lag_s < 0.3, (lag, lag_s)
    assert read_s < 1.0, read_s
