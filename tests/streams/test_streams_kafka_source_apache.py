"""The Kafka source port against Apache Kafka 4.4 itself (pinned): a KRaft controller and 3 brokers
(``apache_kafka_3``, one per session), loaded once by real aiokafka producers at replication
factor 3 (``loaded_kafka_source``: the same topics, transactions, group and configs as the
noida-db source of test_streams_kafka_source.py).

What noida-db cannot show, checked here: real topic IDs and cluster ID; batches as the leader
holds them in its ``.log`` segments; leader epochs that broker restarts advance, with
OffsetsForLeaderEpoch answering where each ended; a Fetch with a stale current leader epoch
fenced (FENCED_LEADER_EPOCH) and one from the future refused (UNKNOWN_LEADER_EPOCH); a fetcher
whose last fetched epoch the leader no longer has told where the logs diverge (KIP-595); an
UNCLEAN leader election (through Kafka's own LeaderElectionCommand) that loses acknowledged
records; Kafka's transactions and aborted-transaction lists; ACLs from StandardAuthorizer.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition as KafkaTP
from kafka_source_data import (
    CONFIGS,
    GROUP,
    GROUP_OFFSETS,
    TOPICS,
    consume,
    elect_unclean,
    new_topic,
    produce,
    running_brokers,
    segment_batches,
    values,
)

from coordinator.ports import (
    FencedLeaderEpoch,
    GroupType,
    IsolationLevel,
    SourceCluster,
    SourceUnavailable,
    TopicPartition,
    UnknownLeaderEpoch,
)
from streams.brokers.apache_kafka import ApacheKafkaCluster
from streams.kafka.source import KafkaSourceCluster


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def source(loaded_kafka_source: ApacheKafkaCluster) -> Iterator[tuple[ApacheKafkaCluster, KafkaSourceCluster]]:
    port = KafkaSourceCluster(loaded_kafka_source.bootstrap, {"client.id": "kip1279-test-kafka-source"},
                              metadata_max_age_ms=500)  # fmt: skip
    try:
        yield loaded_kafka_source, port
    finally:
        port.close()


def _tps(port: KafkaSourceCluster, names: Any = None) -> dict[tuple[str, int], TopicPartition]:
    return {(t.name, p.partition): p.topic_partition for t in port.describe_topics() for p in t.partitions
            if names is None or t.name in names}  # fmt: skip


def _fetch_all(port: KafkaSourceCluster, tp: TopicPartition, end: int, isolation: IsolationLevel, max_bytes: int = 300) -> list[Any]:
    out, offset = [], 0
    while offset < end:
        got = port.fetch(tp, offset, max_bytes, isolation).batches
        assert got, (tp, offset, end)
        assert len(got) == 1 or sum(len(b.payload) for b in got) <= max_bytes  # Kafka honours the limit
        out += got
        offset = got[-1].next_offset
    return out


def test_real_ids_and_the_leaders_own_batches(source: tuple[ApacheKafkaCluster, KafkaSourceCluster]) -> None:
    kafka, port = source
    assert isinstance(port, SourceCluster)
    assert port.cluster_id() == kafka.cluster_id
    topics = {t.name: t for t in port.describe_topics() if t.name in TOPICS}
    assert {n: len(t.partitions) for n, t in topics.items()} == TOPICS
    assert all(t.topic_id.int for t in topics.values()) and len({t.topic_id for t in topics.values()}) == 3
    assert all(p.leader in (1, 2, 3) and p.leader_epoch >= 0 for t in topics.values() for p in t.partitions)
    kinds = set()
    for (name, partition), tp in _tps(port, TOPICS).items():
        meta = next(p for p in topics[name].partitions if p.partition == partition)
        offsets = port.list_offsets(tp)
        got = _fetch_all(port, tp, offsets.hw, IsolationLevel.READ_UNCOMMITTED)
        # Byte for byte what the leader holds in its segment files, below the HW.
        held = segment_batches(kafka.node(meta.leader).log_dir / f"{name}-{partition}")
        assert [(b.base_offset, b.payload) for b in got] == [(o, raw) for o, raw in held if o < offsets.hw], name
        for b in got:
            # Kafka's leader stamps its epoch into every batch (noida-db leaves the producer's -1).
            assert 0 <= b.leader_epoch <= meta.leader_epoch
            kinds.add("gzip" if b.payload[22] & 0x07 == 1 else "txn" if b.is_transactional else
                      "idempotent" if b.producer_id >= 0 else "plain")  # fmt: skip
            kinds.add(f"control-{b.control_type.name}" if b.is_control else "data")
        assert values(got) == _run(consume(kafka.bootstrap, name, partition, "read_uncommitted", offsets.hw)), name
    assert kinds >= {"gzip", "txn", "idempotent", "plain", "control-COMMIT", "control-ABORT", "data"}


def test_transactions_lso_and_read_committed(source: tuple[ApacheKafkaCluster, KafkaSourceCluster]) -> None:
    kafka, port = source
    tps = _tps(port, TOPICS)
    open_seen = aborted_listed = False
    for key, tp in tps.items():
        offsets = port.list_offsets(tp)
        end = _run(_end_offsets(kafka.bootstrap, key))
        assert (offsets.log_start, offsets.hw, offsets.lso) == end, key
        open_seen |= offsets.lso < offsets.hw
        result = port.fetch(tp, 0, 1 << 20, IsolationLevel.READ_COMMITTED)
        assert result.lso == offsets.lso
        batches = _fetch_all(port, tp, offsets.lso, IsolationLevel.READ_COMMITTED, 1 << 20)
        # Kafka returns the aborted transactions' batches and lists them (noida-db drops them).
        aborted_listed |= bool(result.aborted_transactions)
        got = values(batches, result.aborted_transactions, committed_only=True)
        assert got == _run(consume(kafka.bootstrap, *key, "read_committed", offsets.lso)), key
    assert open_seen and aborted_listed


async def _end_offsets(bootstrap: str, key: tuple[str, int]) -> tuple[int, int, int]:
    out = []
    for iso in ("read_uncommitted", "read_committed"):
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=iso)
        await c.start()
        try:
            ktp = KafkaTP(*key)
            if iso == "read_uncommitted":
                out.append((await c.beginning_offsets([ktp]))[ktp])
            out.append((await c.end_offsets([ktp]))[ktp])
        finally:
            await c.stop()
    return out[0], out[1], out[2]


def test_groups_configs_and_acls(source: tuple[ApacheKafkaCluster, KafkaSourceCluster]) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import ACL, ACLOperation, ACLPermissionType, ResourcePattern, ResourceType

    kafka, port = source
    tps = _tps(port, TOPICS)
    groups = {g.group_id: g for g in port.list_groups()}
    assert groups[GROUP].group_type is GroupType.CONSUMER and not groups[GROUP].active
    got = {(o.topic_id, o.partition): o.offset for o in port.group_offsets(GROUP)}
    assert got == {(tps[k].topic_id, tps[k].partition): v for k, v in GROUP_OFFSETS.items()}
    names = {t.name: t.topic_id for t in port.describe_topics()}
    for name in TOPICS:
        assert port.describe_configs(names[name]) == CONFIGS.get(name, {})  # what was set, no defaults

    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap, client_id="kip1279-acl-test")
    principal = f"User:reader-{uuid.uuid4().hex[:6]}"
    acl = ACL(principal, "*", ACLOperation.READ, ACLPermissionType.ALLOW, ResourcePattern(ResourceType.TOPIC, "plain"))
    try:
        assert not admin.create_acls([acl])["failed"]
        deadline = time.monotonic() + 15
        while not (mine := [a for a in port.describe_acls() if a.principal == principal]) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(mine) == 1, port.describe_acls()
        a = mine[0]
        assert (a.resource_type, a.resource_name, a.pattern_type, a.host, a.operation, a.permission_type) == (
            "TOPIC", "plain", "LITERAL", "*", "READ", "ALLOW")  # fmt: skip
    finally:
        admin.delete_acls([acl])
        admin.close()


def _partition(port: KafkaSourceCluster, name: str) -> Any:
    return next(p for t in port.describe_topics() if t.name == name for p in t.partitions)


def _wait(what: str, predicate: Any, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (got := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)
    return got


def test_leader_epochs_advanced_by_a_broker_restart(source: tuple[ApacheKafkaCluster, KafkaSourceCluster]) -> None:
    kafka, port = source
    name = f"epochs-{uuid.uuid4().hex[:6]}"
    new_topic(kafka, name, [1, 2, 3], {})
    produce(kafka.running_bootstrap, name, [f"a{i}".encode() for i in range(5)])
    first = _wait("the topic", lambda: _partition(port, name))
    tp, e0 = first.topic_partition, first.leader_epoch
    # The leader restarts: leadership moves (controlled shutdown), the leader epoch goes up.
    kafka.stop_node(first.leader)
    try:
        moved = _wait("a new leader", lambda: (p := _partition(port, name)).leader != first.leader and p.leader >= 0 and p)
        produce(kafka.running_bootstrap, name, [f"b{i}".encode() for i in range(3)])
    finally:
        kafka.start_node(first.leader)
    e1 = moved.leader_epoch
    assert e1 > e0
    assert port.latest_epoch(tp) == e1
    assert (port.end_offset_for_epoch(tp, e0).epoch, port.end_offset_for_epoch(tp, e0).end_offset) == (e0, 5)
    assert port.end_offset_for_epoch(tp, e1).end_offset == 8
    batches = _fetch_all(port, tp, 8, IsolationLevel.READ_UNCOMMITTED)
    assert [b.leader_epoch for b in batches if b.base_offset < 5] == [e0] * 5
    assert {b.leader_epoch for b in batches if b.base_offset >= 5} == {e1}
    # A fetcher that still believes in e0 is fenced, one from the future is told the epoch is unknown.
    with pytest.raises(FencedLeaderEpoch):
        port.fetch(tp, 0, 1000, IsolationLevel.READ_UNCOMMITTED, current_leader_epoch=e0)
    with pytest.raises(UnknownLeaderEpoch):
        port.fetch(tp, 0, 1000, IsolationLevel.READ_UNCOMMITTED, current_leader_epoch=e1 + 5)
    ok = port.fetch(tp, 5, 1000, IsolationLevel.READ_UNCOMMITTED, current_leader_epoch=e1, last_fetched_epoch=e0)
    assert ok.batches and ok.diverging_epoch is None and ok.leader_epoch == e1
    kafka.wait_ready()


def test_unclean_leader_election_loses_acknowledged_records(source: tuple[ApacheKafkaCluster, KafkaSourceCluster]) -> None:
    """Replicas 1 and 2: the follower stops, the leader takes more records alone and dies; the
    follower comes back and an UNCLEAN election makes it leader. The records only the old leader
    had are gone, and a fetcher that had them is told where its log diverged."""
    kafka, port = source
    name = f"ule-{uuid.uuid4().hex[:6]}"
    new_topic(kafka, name, [1, 2], {"min.insync.replicas": "1"})
    produce(kafka.running_bootstrap, name, [f"a{i}".encode() for i in range(3)])
    tp = _wait("the topic", lambda: _partition(port, name)).topic_partition
    leader = _wait("broker 1 leading", lambda: (p := _partition(port, name)).leader == 1 and p)
    try:
        kafka.stop_node(2)
        _wait("the ISR shrunk to the leader", lambda: _partition(port, name).isr == (1,))
        produce(kafka.running_bootstrap, name, [f"b{i}".encode() for i in range(3)])
        e_b = port.latest_epoch(tp)
        lost = _fetch_all(port, tp, 6, IsolationLevel.READ_UNCOMMITTED)
        kafka.stop_node(1, kill=True)
        kafka.start_node(2, wait=False)
        _wait("broker 2 back", lambda: 2 in running_brokers(kafka))
        elect_unclean(kafka, name)
        after = _wait("broker 2 leading", lambda: (p := _partition(port, name)).leader == 2 and p)
    finally:
        kafka.start_node(1, wait=False)
        kafka.start_node(2, wait=False)
        kafka.wait_ready()
    assert after.leader_epoch > e_b >= leader.leader_epoch
    assert port.list_offsets(tp).hw == 3  # b0..b2 were acknowledged (acks=all, ISR {1}) and are lost
    produce(kafka.running_bootstrap, name, [f"c{i}".encode() for i in range(2)])
    assert port.latest_epoch(tp) == after.leader_epoch
    # A fetcher holding b0..b2 (epoch e_b; a KRaft ISR shrink does not bump the epoch, so a and b
    # share it): on the new leader e_b ends at 3, not 6: truncate to 3, then fetch c0, c1.
    end = port.end_offset_for_epoch(tp, e_b)
    assert (end.epoch, end.end_offset) == (e_b, 3)
    diverged = port.fetch(tp, 6, 1000, IsolationLevel.READ_UNCOMMITTED, current_leader_epoch=after.leader_epoch,
                          last_fetched_epoch=lost[-1].leader_epoch)  # fmt: skip
    assert diverged.diverging_epoch is not None and diverged.diverging_epoch.end_offset == 3, diverged
    assert values(_fetch_all(port, tp, 5, IsolationLevel.READ_UNCOMMITTED)) == [
        (0, b"a0"), (1, b"a1"), (2, b"a2"), (3, b"c0"), (4, b"c1")]  # fmt: skip


def test_a_dead_broker_fails_no_read_another_broker_answers(source: tuple[ApacheKafkaCluster, KafkaSourceCluster]) -> None:
    """Right after a broker's SIGKILL, while the metadata still names it (until the controller
    fences it): the group list comes from the brokers that answer, topics and configs from any
    broker; a read only the dead leader can answer fails as an error to retry, not as an answer
    (no "no LME" from a leader that could not be asked)."""
    kafka, _ = source
    port = KafkaSourceCluster(kafka.bootstrap, {"client.id": "kip1279-dead-broker"}, metadata_max_age_ms=60_000)
    victim = None
    try:
        coordinator = port.conn.run(port.reads._coordinator(GROUP))
        brokers = sorted(n.node_id for n in kafka.brokers)
        victim = max(n for n in brokers if n != coordinator)
        name = f"dead-{uuid.uuid4().hex[:6]}"
        new_topic(kafka, name, [victim] + [n for n in brokers if n != victim], {})  # the victim leads it
        tp = _wait("the victim leading", lambda: next((p for t in port.describe_topics() if t.name == name
                                                       for p in t.partitions if p.leader == victim), None)).topic_partition
        names = {t.name: t.topic_id for t in port.describe_topics()}  # the metadata, cached: it names the victim
        kafka.stop_node(victim, kill=True)
        assert GROUP in {g.group_id for g in port.list_groups()}
        with pytest.raises(SourceUnavailable):
            port.last_mirrored_epoch("m", tp)
        assert {t.name for t in port.describe_topics()} >= set(TOPICS)
        assert port.describe_configs(names["plain"]) == CONFIGS.get("plain", {})
    finally:
        port.close()
        if victim is not None:
            kafka.start_node(victim, wait=False)
        kafka.wait_ready()
