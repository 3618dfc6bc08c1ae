"""The model's Kafka listener answers admin reads as Kafka 4.1 does, checked at the byte level on an
in-process model: Kafka's internal topics as Kafka creates them, DescribeTopicPartitions and its
cursor, DescribeLogDirs, DescribeConfigs with defaults and synonyms, simple groups and commit
metadata. tests/clustermodel/test_kafka_tools_yardstick.py compares the same against a real Kafka
through Kafka's own tools.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import pytest

from clustermodel import ClusterModel
from clustermodel.kafka import KafkaListeners
from clustermodel.kafka.batches import to_wire
from records.kafka_envelope import decode_response, encode_request
from records.registry import default_schemas

S = default_schemas()
CONSUMER_OFFSETS, TRANSACTION_STATE = "__consumer_offsets", "__transaction_state"
DYNAMIC_TOPIC_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, DEFAULT_CONFIG = 1, 3, 5
LIST_TYPE, LONG_TYPE = 7, 5


async def call(port: int, api_key: int, version: int, body: object) -> Any:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(encode_request(api_key, version, 7, "admin-test", body))
        (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 5))
        cid, resp = decode_response(await asyncio.wait_for(reader.readexactly(size), 5), api_key, version)
        assert cid == 7
        return resp
    finally:
        writer.close()


@pytest.fixture
async def rig():
    model = ClusterModel("A", seed=5, brokers=3, journal=False)
    listeners = KafkaListeners({"A": model})
    await listeners.start()
    yield model, listeners.clusters["A"]
    await listeners.stop()


async def metadata(port: int) -> dict[str, Any]:
    body = S.struct("MetadataRequest")(topics=None, allow_auto_topic_creation=False)
    return {t.name: t for t in (await call(port, 3, 12, body)).topics}


async def find_coordinator(port: int, key_type: int, key: str) -> Any:
    body = S.struct("FindCoordinatorRequest")(key_type=key_type, coordinator_keys=[key])
    (c,) = (await call(port, 10, 4, body)).coordinators
    assert c.error_code == 0
    return c


def dtp_body(names: list[str], limit: int = 2000, cursor: tuple[str, int] | None = None) -> Any:
    Topic = S.nested("DescribeTopicPartitionsRequest", "TopicRequest")
    Cursor = S.nested("DescribeTopicPartitionsRequest", "Cursor")
    return S.struct("DescribeTopicPartitionsRequest")(
        topics=[Topic(name=n) for n in names], response_partition_limit=limit,
        cursor=None if cursor is None else Cursor(topic_name=cursor[0], partition_index=cursor[1]))  # fmt: skip


# ---------------------------------------------------------------- internal topics


async def test_internal_topics_appear_as_kafka_creates_them(rig) -> None:
    model, cluster = rig
    model.add_topic("t", 1)
    port = cluster.ports[0]
    assert sorted(await metadata(port)) == ["t"]  # a fresh cluster: no group nor transaction used it yet

    await find_coordinator(port, 0, "g")  # Kafka creates __consumer_offsets for the first group lookup
    topics = await metadata(port)
    assert sorted(topics) == [CONSUMER_OFFSETS, "t"]
    offsets = topics[CONSUMER_OFFSETS]
    assert (offsets.is_internal, topics["t"].is_internal, len(offsets.partitions)) == (True, False, 50)
    assert all(len(p.replica_nodes) == 3 and p.leader_id in p.replica_nodes and p.error_code == 0 for p in offsets.partitions)

    await find_coordinator(port, 1, "tx")
    topics = await metadata(port)
    assert sorted(topics) == [CONSUMER_OFFSETS, TRANSACTION_STATE, "t"] and topics[TRANSACTION_STATE].is_internal
    assert topics[CONSUMER_OFFSETS].topic_id == offsets.topic_id  # one ID for the topic's life

    # Leaders follow the live brokers, as for any topic.
    model.crash_broker(1)
    cluster.sync()
    live = sorted(model.live)
    parts = (await metadata(cluster.ports[live[0]]))[CONSUMER_OFFSETS].partitions
    assert all(p.leader_id in live and p.offline_replicas == (1,) for p in parts)


async def test_groups_and_transactions_the_model_holds_show_their_internal_topics(rig) -> None:
    model, cluster = rig
    model.add_topic("t", 1)
    model.commit_offset("synced", "t", 0, 0)  # a group the coordinator synced, say
    model.init_producer_id("tx")
    assert sorted(await metadata(cluster.ports[0])) == [CONSUMER_OFFSETS, TRANSACTION_STATE, "t"]


async def test_internal_topics_have_their_coordinators_configs(rig) -> None:
    model, cluster = rig
    await find_coordinator(cluster.ports[0], 0, "g")
    configs = await describe_configs(cluster.ports[0], CONSUMER_OFFSETS)
    assert {k: (v.value, v.config_source) for k, v in configs.items() if v.config_source == DYNAMIC_TOPIC_CONFIG} == {
        "cleanup.policy": ("compact", 1), "compression.type": ("producer", 1), "segment.bytes": ("104857600", 1)}


# ---------------------------------------------------------------- DescribeTopicPartitions


async def test_describe_topic_partitions_pages_with_a_cursor(rig) -> None:
    model, cluster = rig
    model.add_topic("a", 3)
    model.add_topic("b", 2)
    port = cluster.ports[0]

    def rows(resp: Any) -> list[tuple[str, int]]:
        return [(t.name, p.partition_index) for t in resp.topics for p in t.partitions]

    def cursor(resp: Any) -> tuple[str, int] | None:
        c = resp.next_cursor
        return None if c is None else (c.topic_name, c.partition_index)

    first = await call(port, 75, 0, dtp_body([], limit=2))
    assert rows(first) == [("a", 0), ("a", 1)] and cursor(first) == ("a", 2)
    second = await call(port, 75, 0, dtp_body([], limit=2, cursor=cursor(first)))
    assert rows(second) == [("a", 2), ("b", 0)] and cursor(second) == ("b", 1)
    third = await call(port, 75, 0, dtp_body([], limit=2, cursor=cursor(second)))
    assert rows(third) == [("b", 1)] and cursor(third) is None
    # The limit reached exactly at a topic's end: the cursor points at the next topic's start.
    exact = await call(port, 75, 0, dtp_body(["b", "a"], limit=3))
    assert rows(exact) == [("a", 0), ("a", 1), ("a", 2)] and cursor(exact) == ("b", 0)

    whole = await call(port, 75, 0, dtp_body(["a"]))
    (topic,) = whole.topics
    part = model.topic("a").partitions[0]
    p0 = topic.partitions[0]
    assert (topic.error_code, topic.topic_id, topic.is_internal) == (0, model.topic("a").topic_id, False)
    assert (p0.leader_id, p0.leader_epoch, p0.replica_nodes, p0.isr_nodes) == (part.leader, part.leader_epoch, tuple(part.replicas), tuple(part.isr))
    # No ELR in the model: empty lists, as Kafka has for a partition whose ISR never shrank below min ISR.
    assert (p0.eligible_leader_replicas, p0.last_known_elr, p0.offline_replicas) == ((), (), ())


async def test_describe_topic_partitions_errors(rig) -> None:
    model, cluster = rig
    model.add_topic("a", 1)
    port = cluster.ports[0]
    resp = await call(port, 75, 0, dtp_body(["a", "missing", "bad/name"]))
    assert {t.name: t.error_code for t in resp.topics} == {"a": 0, "missing": 3, "bad/name": 17}
    # Every topic listed leaves unknown ones out; a cursor naming a topic not asked for is refused.
    assert [t.name for t in (await call(port, 75, 0, dtp_body([]))).topics] == ["a"]
    bad = await call(port, 75, 0, dtp_body(["a"], cursor=("z", 0)))
    assert [(t.name, t.error_code) for t in bad.topics] == [("a", 42)]


# ---------------------------------------------------------------- DescribeLogDirs


async def test_describe_log_dirs(rig) -> None:
    model, cluster = rig
    model.add_topic("a", 2, replication_factor=2)
    for i in range(3):
        model.produce("a", 0, [(b"k%d" % i, b"v" * (10 + i))])
    for broker in model.brokers:
        resp = await call(cluster.ports[broker], 35, 4, S.struct("DescribeLogDirsRequest")(topics=None))
        (result,) = resp.results
        assert (resp.error_code, result.error_code, result.log_dir) == (0, 0, f"/clustermodel/A/broker-{broker}")
        got = {(t.name, p.partition_index): p for t in result.topics for p in t.partitions}
        expected = {("a", i) for i, p in enumerate(model.topic("a").partitions) if broker in p.replicas}
        assert set(got) == expected
        for (_, i), p in got.items():
            log = model.topic("a").partitions[i].logs[broker]
            # Kafka's partition size is its segment bytes: the batches as Fetch serves them.
            assert p.partition_size == sum(len(to_wire(b)) for b in log.batches) and (p.offset_lag, p.is_future_key) == (0, False)
        assert any(p.partition_size > 0 for p in got.values()) == (("a", 0) in got)
    Topic = S.nested("DescribeLogDirsRequest", "DescribableLogDirTopic")
    leader = model.topic("a").partitions[1].leader
    resp = await call(cluster.ports[leader], 35, 1, S.struct("DescribeLogDirsRequest")(topics=[Topic(topic="a", partitions=[1])]))
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in resp.results[0].topics] == [("a", [1])]


# ---------------------------------------------------------------- DescribeConfigs


async def describe_configs(port: int, topic: str, keys: list[str] | None = None, synonyms: bool = False,
                           documentation: bool = False, version: int = 4) -> dict[str, Any]:  # fmt: skip
    R = S.nested("DescribeConfigsRequest", "DescribeConfigsResource")
    body = S.struct("DescribeConfigsRequest")(resources=[R(resource_type=2, resource_name=topic, configuration_keys=keys)],
                                              include_synonyms=synonyms, include_documentation=documentation)  # fmt: skip
    (result,) = (await call(port, 32, version, body)).results
    assert result.error_code == 0, result
    return {c.name: c for c in result.configs}


async def test_describe_configs_gives_kafkas_defaults(rig) -> None:
    model, cluster = rig
    model.add_topic("t", 1, configs={"retention.ms": "5000", "x.model.only": "1"})
    port = cluster.ports[0]
    configs = await describe_configs(port, "t")
    assert len(configs) > 30 and "segment.bytes" in configs
    policy, retention = configs["cleanup.policy"], configs["retention.ms"]
    assert (policy.value, policy.config_source, policy.config_type, policy.synonyms) == ("delete", DEFAULT_CONFIG, LIST_TYPE, ())
    assert (retention.value, retention.config_source, retention.config_type) == ("5000", DYNAMIC_TOPIC_CONFIG, LONG_TYPE)
    assert configs["min.insync.replicas"].config_source == DYNAMIC_DEFAULT_BROKER_CONFIG  # KRaft with ELR sets it cluster-wide
    assert configs["x.model.only"].config_source == DYNAMIC_TOPIC_CONFIG  # a config Kafka does not know still shows
    assert all(c.documentation is None and not c.read_only and not c.is_sensitive for c in configs.values())

    with_synonyms = await describe_configs(port, "t", synonyms=True, documentation=True)
    assert [(s.name, s.value, s.source) for s in with_synonyms["cleanup.policy"].synonyms] == [
        ("log.cleanup.policy", "delete", DEFAULT_CONFIG)]
    assert [(s.name, s.value, s.source) for s in with_synonyms["retention.ms"].synonyms] == [
        ("retention.ms", "5000", DYNAMIC_TOPIC_CONFIG)]
    assert with_synonyms["cleanup.policy"].documentation.startswith("This config designates the retention policy")

    model.set_topic_config("t", "cleanup.policy", "compact")
    picked = await describe_configs(port, "t", keys=["cleanup.policy", "no.such.config"], synonyms=True, version=1)
    assert list(picked) == ["cleanup.policy"]
    assert [(s.name, s.value, s.source) for s in picked["cleanup.policy"].synonyms] == [
        ("cleanup.policy", "compact", DYNAMIC_TOPIC_CONFIG), ("log.cleanup.policy", "delete", DEFAULT_CONFIG)]


# ---------------------------------------------------------------- groups


async def test_a_group_with_only_offsets_is_simple_and_keeps_commit_metadata(rig) -> None:
    model, cluster = rig
    model.add_topic("t", 2)
    node = (await find_coordinator(cluster.ports[0], 0, "simple")).node_id
    port = cluster.ports[node]
    CT = S.nested("OffsetCommitRequest", "OffsetCommitRequestTopic")
    CP = S.nested("OffsetCommitRequest", "OffsetCommitRequestPartition")
    commit = S.struct("OffsetCommitRequest")(group_id="simple", generation_id_or_member_epoch=-1, member_id="", topics=[
        CT(name="t", partitions=[CP(partition_index=0, committed_offset=3, committed_leader_epoch=-1, committed_metadata="kt"),
                                 CP(partition_index=1, committed_offset=0, committed_leader_epoch=-1, committed_metadata="")])])
    assert all(p.error_code == 0 for t in (await call(port, 8, 8, commit)).topics for p in t.partitions)

    fetched = await call(port, 9, 7, S.struct("OffsetFetchRequest")(group_id="simple", topics=None))
    rows = {p.partition_index: (p.committed_offset, p.committed_leader_epoch, p.metadata) for t in fetched.topics for p in t.partitions}
    # The metadata as committed; no leader epoch given, none returned (-1), as Kafka does.
    assert rows == {0: (3, -1, "kt"), 1: (0, -1, "")}

    listed = (await call(port, 16, 5, S.struct("ListGroupsRequest")())).groups
    assert [(g.group_id, g.protocol_type, g.group_state) for g in listed] == [("simple", "", "Empty")]
    (described,) = (await call(port, 15, 5, S.struct("DescribeGroupsRequest")(groups=["simple"]))).groups
    assert (described.protocol_type, described.group_state, described.members) == ("", "Empty", ())


async def test_transactional_offset_commits_keep_their_metadata(rig) -> None:
    model, cluster = rig
    model.add_topic("t", 1)
    txn_port = cluster.ports[(await find_coordinator(cluster.ports[0], 1, "tx")).node_id]
    group_port = cluster.ports[(await find_coordinator(cluster.ports[0], 0, "g")).node_id]
    init = await call(txn_port, 22, 4, S.struct("InitProducerIdRequest")(transactional_id="tx", transaction_timeout_ms=60000,
                                                                          producer_id=-1, producer_epoch=-1))  # fmt: skip
    pid, epoch = init.producer_id, init.producer_epoch
    added = await call(txn_port, 25, 3, S.struct("AddOffsetsToTxnRequest")(transactional_id="tx", producer_id=pid,
                                                                            producer_epoch=epoch, group_id="g"))  # fmt: skip
    assert added.error_code == 0
    T = S.nested("TxnOffsetCommitRequest", "TxnOffsetCommitRequestTopic")
    P = S.nested("TxnOffsetCommitRequest", "TxnOffsetCommitRequestPartition")
    body = S.struct("TxnOffsetCommitRequest")(transactional_id="tx", group_id="g", producer_id=pid, producer_epoch=epoch, topics=[
        T(name="t", partitions=[P(partition_index=0, committed_offset=0, committed_leader_epoch=-1, committed_metadata="txn-md")])])
    assert [p.error_code for t in (await call(group_port, 28, 3, body)).topics for p in t.partitions] == [0]
    ended = await call(txn_port, 26, 3, S.struct("EndTxnRequest")(transactional_id="tx", producer_id=pid, producer_epoch=epoch,
                                                                   committed=True))  # fmt: skip
    assert ended.error_code == 0
    fetched = await call(group_port, 9, 7, S.struct("OffsetFetchRequest")(group_id="g", topics=None))
    assert [(p.committed_offset, p.metadata) for t in fetched.topics for p in t.partitions] == [(0, "txn-md")]

