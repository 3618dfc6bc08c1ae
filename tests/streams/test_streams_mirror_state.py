"""``__mirror_state``: our schemas on the wire, Kafka's partitioner, fencing, and a real Faust
table on RocksDB whose changelog is ``__mirror_state`` (recovered after the RocksDB is wiped)."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import shutil
import uuid
from contextlib import redirect_stdout
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from coordinator.states import ErrorCode, MirrorState
from records import cli as records_cli
from streams.state import mirror_state as mss
from streams.state import mirror_state_codec as msc
from streams.state import desired_state as dse
from streams.config import WorkerConfig
from streams.config import ensure_topics

codec = msc.default_codec()
# Each broker test runs on noida-db and on Apache Kafka (tests/streams/conftest.py).
pytestmark = pytest.mark.brokers("noida-db", "apache-kafka")

TID = uuid.UUID("6a1c3b52-7c1e-4d7e-9b1a-2f0c1d2e3f40")


def _signed(h: int) -> int:
    return h - (1 << 32) if h >= 1 << 31 else h


def test_murmur2_matches_kafka_and_both_record_types_share_a_partition() -> None:
    from aiokafka.partitioner import murmur2

    # Kafka's UtilsTest.testMurmur2 vectors.
    for data, expected in [(b"21", -973932308), (b"foobar", -790332482), (b"abc", 479470107),
                           (b"a-little-bit-long-string", -985981536)]:
        assert _signed(murmur2(data)) == expected
    for p in range(20):
        state_key, lme_key = codec.state_key("a-to-b", TID, p), codec.lme_key("a-to-b", TID, p)
        impact_key = codec.impact_key("a-to-b", TID, p)
        assert len({state_key, lme_key, impact_key}) == 3
        assert msc.partition_for_key(state_key, 50) == msc.partition_for_key(lme_key, 50) == msc.partition_for("a-to-b", TID, p, 50)
        assert msc.partition_for_key(impact_key, 50) == msc.partition_for_key(state_key, 50)
    assert len({msc.partition_for("a-to-b", TID, p, 50) for p in range(200)}) > 30  # spread, not one hot partition


def _decode_with_records_cli(message: str, hexdata: str) -> dict[str, Any]:
    out = io.StringIO()
    with redirect_stdout(out):
        assert records_cli.main(["decode", "--type", message, "--version", "0", hexdata], out=out) == 0
    return json.loads(out.getvalue())


def test_keys_and_values_are_our_schemas_readable_by_kafka_records() -> None:
    key = codec.state_key("a-to-b", TID, 7)
    value = codec.encode_value(codec.state_value(state=int(MirrorState.FAILED), previous_state=int(MirrorState.MIRRORING),
                                                 retry_attempt=3, error_message="source unreachable", leader_epoch=5,
                                                 state_epoch=9, applied_offset=42))
    assert key[:2] == b"\x00\x02" and value[:2] == b"\x00\x00"  # record type 2, value version 0
    k = _decode_with_records_cli("MirrorPartitionStateKey", key[2:].hex())
    # Kafka's JSON form of a uuid is unpadded url-safe base64.
    assert k == {"mirrorName": "a-to-b", "topicId": base64.urlsafe_b64encode(TID.bytes).rstrip(b"=").decode(), "partition": 7}
    v = _decode_with_records_cli("MirrorPartitionStateValue", value[2:].hex())
    assert v["state"] == 7 and v["retryAttempt"] == 3 and v["errorMessage"] == "source unreachable"
    assert v["leaderEpoch"] == 5 and v["stateEpoch"] == 9 and v["appliedOffset"] == 42
    rec = msc.decode_changelog_record(key, value)
    assert rec.type == msc.RecordType.MIRROR_PARTITION_STATE and rec.key.topic_id == TID and rec.value.applied_offset == 42
    lme = msc.decode_changelog_record(codec.lme_key("a-to-b", TID, 7), codec.encode_value(codec.lme_value(4, 40)))
    assert lme.type == msc.RecordType.LAST_MIRROR_EPOCHS and lme.value.last_mirror_epoch == 4
    assert msc.decode_changelog_record(key, None).value is None  # tombstone
    ikey = codec.impact_key("a-to-b", TID, 7)
    assert ikey[:2] == b"\x00\x03"  # record type 3: a stop's prediction and outcome
    assert _decode_with_records_cli("MirrorFailoverImpactKey", ikey[2:].hex()) == k
    value = codec.encode_value(codec.schemas.struct("MirrorFailoverImpactValue")(metadata_offset=12, stop_offset=30, completed=True))
    assert _decode_with_records_cli("MirrorFailoverImpactValue", value[2:].hex())["stopOffset"] == 30
    rec = msc.decode_changelog_record(ikey, value)
    assert rec.type == msc.RecordType.MIRROR_FAILOVER_IMPACT and msc.applied_offset_of(rec.type, rec.value) == 12


def test_fencing_refuses_stale_leader_and_state_epochs() -> None:
    stored = codec.state_value(state=2, leader_epoch=5, state_epoch=3)
    assert msc.check_state_write(None, stored) is None
    assert msc.check_state_write(stored, codec.state_value(state=3, leader_epoch=5, state_epoch=4)) is None
    assert msc.check_state_write(stored, codec.state_value(state=3, leader_epoch=6, state_epoch=4)) is None
    stale_leader = msc.check_state_write(stored, codec.state_value(state=3, leader_epoch=4, state_epoch=4))
    assert stale_leader is not None and stale_leader.error_code == ErrorCode.FENCED_LEADER_EPOCH
    for epoch in (3, 2):
        stale_state = msc.check_state_write(stored, codec.state_value(state=3, leader_epoch=5, state_epoch=epoch))
        assert stale_state is not None and stale_state.error_code == msc.FENCED_STATE_EPOCH


class _Worker:
    """A Faust app with the mirror_state table and an agent that writes proposed states."""

    def __init__(self, cfg: WorkerConfig) -> None:
        self.app = mss.make_app(cfg)
        self.table = mss.make_mirror_state_table(self.app, cfg)
        self.store = mss.MirrorStateStore(self.table)
        self.outcomes: list[tuple[int, int]] = []  # (state_epoch, error code)
        topic = mss.make_desired_state_topic(self.app, cfg)

        @self.app.agent(topic)
        async def write_states(stream: Any) -> None:
            async for event in stream.events():
                rtype, k = codec.decode_key(event.key)
                if rtype == msc.RecordType.LAST_MIRROR_EPOCHS:
                    self.store.put_last_mirror_epoch(k.mirror_name, k.topic_id, k.partition, 11, 99)
                    self.outcomes.append((-1, 0))
                    continue
                v = codec.decode_value(rtype, event.value)
                try:
                    self.store.put_state(k.mirror_name, k.topic_id, k.partition, v)
                    self.outcomes.append((v.state_epoch, 0))
                except msc.StateWriteFencedError as e:
                    self.outcomes.append((v.state_epoch, e.error_code))

    async def wait_outcomes(self, n: int, timeout: float = 20.0) -> None:
        for _ in range(int(timeout / 0.05)):
            if len(self.outcomes) >= n:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"only {len(self.outcomes)} of {n} writes processed")


async def _changelog(cfg: WorkerConfig) -> list[tuple[int, bytes, bytes | None]]:
    consumer = AIOKafkaConsumer(bootstrap_servers=cfg.bootstrap_servers, group_id=None, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(cfg.mirror_state_topic_name, p) for p in range(cfg.state_partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        out = []
        while any([await consumer.position(tp) < ends[tp] for tp in tps]):
            for tp, msgs in (await consumer.getmany(*tps, timeout_ms=300)).items():
                out += [(tp.partition, m.key, m.value) for m in msgs]
        return out
    finally:
        await consumer.stop()


async def test_faust_rocksdb_table_with_mirror_state_changelog(worker_config: WorkerConfig) -> None:
    cfg = worker_config
    await ensure_topics(cfg.bootstrap_servers, [msc.mirror_state_topic_spec(cfg), msc.desired_state_topic_spec(cfg)])
    worker = _Worker(cfg)
    assert worker.table.changelog_topic_name == f"{cfg.cluster_name}.__mirror_state"
    key = codec.state_key("a-to-b", TID, 3)
    part = msc.partition_for_key(key, cfg.state_partitions)
    proposals = [(1, 0), (2, 1), (2, 1), (1, 2), (4, 2)]  # (leader epoch, state epoch)
    await worker.app.start()
    try:
        producer = AIOKafkaProducer(bootstrap_servers=cfg.bootstrap_servers)
        await producer.start()
        try:
            for leader_epoch, state_epoch in proposals:
                value = codec.encode_value(codec.state_value(state=int(MirrorState.MIRRORING), leader_epoch=leader_epoch,
                                                             state_epoch=state_epoch, applied_offset=state_epoch * 10))
                await producer.send_and_wait(cfg.desired_state_topic_name, key=key, value=value, partition=part)
            await producer.send_and_wait(cfg.desired_state_topic_name, key=codec.lme_key("a-to-b", TID, 3), value=b"", partition=part)
        finally:
            await producer.stop()
        await worker.wait_outcomes(len(proposals) + 1)
        assert worker.outcomes[:5] == [(0, 0), (1, 0), (1, msc.FENCED_STATE_EPOCH), (2, ErrorCode.FENCED_LEADER_EPOCH), (2, 0)]
        stored = worker.store.get_state("a-to-b", TID, 3)
        assert (stored.leader_epoch, stored.state_epoch, stored.applied_offset) == (4, 2, 20)
        await asyncio.sleep(0.5)  # let the changelog producer flush
    finally:
        await worker.app.stop()

    changelog = await _changelog(cfg)
    assert {p for p, _, _ in changelog} == {part}  # the key's own partition, never the event's by accident
    decoded = [msc.decode_changelog_record(k, v) for _, k, v in changelog]
    states = [r.value for r in decoded if r.type == msc.RecordType.MIRROR_PARTITION_STATE]
    assert [(s.leader_epoch, s.state_epoch) for s in states] == [(1, 0), (2, 1), (4, 2)]  # fenced writes never landed
    lmes = [r.value for r in decoded if r.type == msc.RecordType.LAST_MIRROR_EPOCHS]
    assert [(v.last_mirror_epoch, v.applied_offset) for v in lmes] == [(11, 99)]

    # Wipe RocksDB: a new worker recovers the table from __mirror_state.
    shutil.rmtree(cfg.cluster_data_dir / "faust")
    again = _Worker(cfg)
    await again.app.start()
    try:
        for _ in range(200):
            if again.store.get_state("a-to-b", TID, 3) is not None:
                break
            await asyncio.sleep(0.05)
        recovered = again.store.get_state("a-to-b", TID, 3)
        assert recovered is not None and (recovered.leader_epoch, recovered.state_epoch) == (4, 2)
        assert again.store.get_last_mirror_epoch("a-to-b", TID, 3).last_mirror_epoch == 11
    finally:
        await again.app.stop()


def test_desired_state_events_are_co_partitioned_with_the_state() -> None:
    from records.registry import default_schemas

    record = default_schemas().struct("MirrorTopicStateChangeRecord")(topic_id=TID, mirror_name="a-to-b", desired_state=1)
    events = dse.desired_state_events(record, partitions=6, metadata_offset=41, metadata_epoch=2, num_partitions=50)
    assert len(events) == 6
    for p, e in enumerate(events):
        assert e.key == codec.state_key("a-to-b", TID, p)
        assert e.partition == msc.partition_for("a-to-b", TID, p, 50)
        d = dse.decode_desired_state(e.key, e.value, e.headers)
        assert (d.mirror_name, d.topic_id, d.partition, d.desired_state, d.metadata_offset, d.metadata_epoch) == \
            ("a-to-b", TID, p, 1, 41, 2)
    detach = default_schemas().struct("MirrorTopicStateChangeRecord")(topic_id=TID, mirror_name=None, desired_state=1)
    [event] = dse.desired_state_events(detach, 1, 50, 2, 50, mirror_name="a-to-b")
    assert event.key == codec.state_key("a-to-b", TID, 0) and dse.decode_desired_state(*event[1:]).mirror_name is None
    assert dse.decode_desired_state(events[0].key, events[0].value, events[0].headers).cut is None
    # A --consistent-cut stop's event carries its cut (for a worker whose image is behind the event).
    part = default_schemas().nested("MirrorTopicStateChangeRecord", "CutPartition")
    cut = msgspec.structs.replace(record, cut_timestamp=77, cut_partitions=[part(partition_index=0, cut_offset=5)])
    [event] = dse.desired_state_events(cut, 1, 42, 2, 50)
    got = dse.decode_desired_state(*event[1:]).cut
    assert got is not None and (got.timestamp, got.offsets) == (77, ((0, 5),))


def test_a_worker_takes_the_cut_of_the_newest_desired_state_image_or_event() -> None:
    import dataclasses
    from types import SimpleNamespace

    from coordinator.image import EMPTY_IMAGE, MirrorsImage, MirrorTopic, TopicCut, frozen_map
    from coordinator.states import DesiredState
    from streams.worker.app import _DesiredView

    old, new = TopicCut(5, ((0, 3),)), TopicCut(9, ((0, 4),))
    mirrors = MirrorsImage(topics=frozen_map({TID: MirrorTopic(TID, "a-to-b", DesiredState.STOP, 10, old)}))
    worker = SimpleNamespace(image=dataclasses.replace(EMPTY_IMAGE, mirrors=mirrors), event_cuts={})
    view = _DesiredView(worker, "a-to-b")  # type: ignore[arg-type]
    assert view.cut("a-to-b", TID) == old and view.cut("other", TID) is None
    worker.event_cuts[("a-to-b", TID)] = (new, 12)  # an event ahead of the image
    assert view.cut("a-to-b", TID) == new
    worker.event_cuts[("a-to-b", TID)] = (None, 8)  # an older event: the image's
    assert view.cut("a-to-b", TID) == old


@given(st.text(min_size=1, max_size=20), st.uuids(), st.integers(0, (1 << 31) - 1))
def test_the_lme_and_impact_keys_are_the_state_key_retyped(mirror: str, topic_id: uuid.UUID, partition: int) -> None:
    codec = msc.default_codec()
    state_key = codec.state_key(mirror, topic_id, partition)
    assert msc.retyped_key(state_key, msc.RecordType.LAST_MIRROR_EPOCHS) == codec.lme_key(mirror, topic_id, partition)
    assert msc.retyped_key(state_key, msc.RecordType.MIRROR_FAILOVER_IMPACT) == codec.impact_key(mirror, topic_id, partition)
    assert msc.retyped_key(state_key, msc.RecordType.MIRROR_PARTITION_STATE) == state_key
