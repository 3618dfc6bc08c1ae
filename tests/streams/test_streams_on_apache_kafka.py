"""What only a real Kafka broker shows (noida-db never compacts, never expires a dead member):
on the session's Apache Kafka node, ``__mirror_state`` as the worker creates it really is
compacted, and a SIGKILLed worker's group member is expired after worker.session.timeout.ms with
nothing done by the test."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from worker_harness import Rig

from coordinator.states import MirrorState
from streams.state import mirror_state_codec as mss
from streams.brokers.apache_kafka import ApacheKafkaCluster
from streams.config import WorkerConfig
from streams.config import ensure_topics

SESSION_TIMEOUT_MS = 6000  # Kafka's group.min.session.timeout.ms


def _admin(bootstrap: str):  # type: ignore[no-untyped-def]
    from kafka import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=bootstrap, client_id="kip1279-test")


async def _read_all(bootstrap: str, topic: str) -> list[tuple[bytes, bytes | None, int]]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False, fetch_max_wait_ms=50)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        out = []
        while await consumer.position(tp) < end:
            for msgs in (await consumer.getmany(tp, timeout_ms=200)).values():
                out += [(m.key, m.value, m.offset) for m in msgs]
        return out
    finally:
        await consumer.stop()


async def test_mirror_state_is_really_compacted(apache_kafka: ApacheKafkaCluster, tmp_path: Path) -> None:
    from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType

    cfg = WorkerConfig(bootstrap_servers=apache_kafka.bootstrap, cluster_name=f"compact-{uuid.uuid4().hex[:6]}",
                       state_partitions=1, data_dir=str(tmp_path))  # fmt: skip
    topic = cfg.mirror_state_topic_name
    await ensure_topics(cfg.bootstrap_servers, [mss.mirror_state_topic_spec(cfg)])  # the worker's own spec
    admin = _admin(apache_kafka.bootstrap)
    try:
        # Only how soon a segment closes and is worth cleaning is changed, so it happens within the
        # test; the policy is the one the worker set.
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, {
            "segment.ms": (AlterConfigOp.SET, "100"), "min.cleanable.dirty.ratio": (AlterConfigOp.SET, "0.01")})],
            incremental=True)  # fmt: skip
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic, {"cleanup.policy": None})])
    finally:
        admin.close()
    assert described["topic"][topic]["cleanup.policy"]["value"] == "compact"

    codec = mss.default_codec()
    keys = [codec.state_key("a-to-b", uuid.UUID(int=7), p) for p in range(3)]
    producer = AIOKafkaProducer(bootstrap_servers=cfg.bootstrap_servers, acks="all")
    await producer.start()
    written = 0
    try:
        for round_ in range(12):  # one segment per round (each later than segment.ms)
            for key in keys:
                value = codec.encode_value(codec.state_value(state=int(MirrorState.MIRRORING), leader_epoch=round_,
                                                             state_epoch=0, applied_offset=round_))  # fmt: skip
                await producer.send_and_wait(topic, key=key, value=value, partition=0)
                written += 1
            await asyncio.sleep(0.15)
    finally:
        await producer.stop()

    deadline = time.monotonic() + 30
    while True:
        records = await _read_all(cfg.bootstrap_servers, topic)
        if len(records) < written / 2 or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.5)
    assert len(records) < written / 2, f"{len(records)} of {written} records left after 30 s: not compacted"
    offsets = [o for _, _, o in records]
    assert offsets == sorted(offsets) and offsets[-1] == written - 1  # gaps where older values were
    latest = {k: codec.decode(k, v).value.leader_epoch for k, v, _ in records}  # type: ignore[union-attr]
    assert latest == {k: 11 for k in keys}  # the newest value of every key survives


def test_sigkilled_worker_member_expires_after_its_session_timeout(apache_kafka: ApacheKafkaCluster, tmp_path: Path) -> None:
    from aiokafka.errors import KafkaError

    rig = Rig(tmp_path, apache_kafka.bootstrap, {"orders": 2})

    def members() -> list[object] | None:
        try:
            return rig.group_members("B")
        except KafkaError:  # no group coordinator yet (__consumer_offsets being created)
            return None

    try:
        rig.start(clusters=("B",))
        rig.spawn_worker("B", extra=["--session-timeout-ms", str(SESSION_TIMEOUT_MS), "--heartbeat-interval-ms", "500",
                                     "--rebalance-timeout-ms", "10000"])  # fmt: skip
        rig.wait("the worker joins its group", lambda: len(members() or ()) == 1, timeout=60)
        time.sleep(1.0)  # a few heartbeats: the member is settled, not mid-join
        rig.kill_worker("worker-B")
        killed = time.monotonic()
        rig.wait("the broker expires the dead member", lambda: members() == [], timeout=30)
        expired_after = time.monotonic() - killed
        print(f"member expired {expired_after:.1f}s after SIGKILL (session timeout {SESSION_TIMEOUT_MS / 1000:.0f}s)")
        # Its last heartbeat was at most one interval before the kill; polling adds a little.
        assert SESSION_TIMEOUT_MS / 1000 - 1.0 <= expired_after <= SESSION_TIMEOUT_MS / 1000 + 5.0
    finally:
        rig.close()
