"""Real Kafka clients (aiokafka, kafka-python, confluent-kafka/librdkafka) on a clustermodel-server.

One scenario, run by each client against the server's Kafka listeners: plain, idempotent and
transactional produce (committed, aborted, left open) on A; read_committed and read_uncommitted
consumers in groups that commit offsets; the partition mirrored to B through the model's mirror
ports; the same records at the same offsets on B; produce on B refused while the mirror topic is
read-only and accepted after the stop sequence (STOPPED); consume-transform-produce transactions
whose offsets count only when committed; a group resuming on B from synced offsets.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator

import pytest

from clustermodel.client import ClusterClient
from coordinator.ports import ControlType, IsolationLevel, TopicPartition

from kafka_clients import AioKafka, Client, ProduceRefused, available_clients

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
READ_ONLY_TOPIC = 134


class KafkaServer:
    """clustermodel-server with clusters A and B; reads the PORT and KAFKA lines it prints."""

    def __init__(self) -> None:
        self.stderr = tempfile.TemporaryFile()
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "clustermodel.server", "--port", "0", "--cluster", "A", "--cluster", "B", "--seed", "3"],
            stdout=subprocess.PIPE, stderr=self.stderr, text=True, cwd=ROOT, env=env,
        )
        assert self.proc.stdout is not None
        first = self.proc.stdout.readline()
        assert first.startswith("PORT "), first
        self.port = int(first.split()[1])
        self.printed: list[tuple[str, int, str, int]] = []
        while True:
            line = self.proc.stdout.readline()
            if not line.startswith("KAFKA "):
                break
            _, cluster, broker, addr = line.split()
            host, port = addr.rsplit(":", 1)
            self.printed.append((cluster, int(broker), host, int(port)))

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        self.stderr.seek(0)
        self.errors = self.stderr.read().decode(errors="replace")
        self.stderr.close()
        return code


@pytest.fixture(scope="module")
def kafka_server() -> Iterator[KafkaServer]:
    server = KafkaServer()
    yield server
    assert server.stop() == 0
    # The listener logs a traceback for any handler failure: there must be none.
    assert "Traceback" not in server.errors, server.errors


def mirror_partition(a: ClusterClient, b: ClusterClient, topic: str) -> uuid.UUID:
    """What the coordinator does for one new mirror topic, through the model's ports: create it
    read-only with A's topic ID, bump B's leader epoch to A's, copy A's batches as they are."""
    meta = next(t for t in a.describe_topics() if t.name == topic)
    b.create_topic(topic, meta.topic_id, len(meta.partitions), read_only=True, mirror_name="m1",
                   mirror_source_cluster_id=a.cluster_id())
    for p in meta.partitions:
        tp = TopicPartition(meta.topic_id, p.partition)
        offsets = a.list_offsets(tp)
        batches, pos = [], offsets.log_start
        while pos < offsets.hw:
            r = a.fetch(tp, pos, 1 << 20, IsolationLevel.READ_UNCOMMITTED)
            batches.extend(r.batches)
            pos = r.batches[-1].next_offset
        b.bump_leader_epoch(tp, offsets.leader_epoch)
        b.append_mirror_batches(tp, batches)
    return meta.topic_id


def stop_mirror_partition(a: ClusterClient, b: ClusterClient, tp: TopicPartition) -> None:
    """The coordinator's stop sequence for one partition, through the ports: a new leader epoch,
    ABORT markers for the mirrored open transactions, MIRROR_PID_RESET (so local producers whose
    IDs collide with mirrored ones start fresh), then writable."""
    b.bump_leader_epoch(tp, b.list_offsets(tp).leader_epoch + 1)
    for txn in b.open_transactions(tp):
        b.append_control_batch(tp, ControlType.ABORT, txn.producer_id, txn.producer_epoch)
    b.append_control_batch(tp, ControlType.MIRROR_PID_RESET, -1, -1, a.cluster_id())
    b.set_read_only(tp.topic_id, False)


@pytest.mark.parametrize("client", available_clients(), ids=lambda c: getattr(c, "name", "confluent-kafka"))
def test_client_scenario(kafka_server: KafkaServer, client: Client) -> None:
    a = ClusterClient(kafka_server.port, "A")
    b = ClusterClient(kafka_server.port, "B")
    name = client.name.replace("-", "_")
    topic = f"orders_{name}"
    a.add_topic(topic, 1)
    boot_a, boot_b = a.bootstrap_servers(), b.bootstrap_servers()
    assert boot_a == ",".join(f"{h}:{p}" for c, _, h, p in kafka_server.printed if c == "A")

    assert client.produce(boot_a, topic, [b"p0", b"p1", b"p2"]) == [0, 1, 2]
    assert client.produce(boot_a, topic, [b"i0", b"i1", b"i2"], idempotent=True) == [3, 4, 5]
    client.transaction(boot_a, f"tx_commit_{name}", topic, [b"c0", b"c1"], "commit")
    client.transaction(boot_a, f"tx_abort_{name}", topic, [b"a0", b"a1"], "abort")
    client.transaction(boot_a, f"tx_open_{name}", topic, [b"o0"], "open")

    tp = a.tp(topic, 0)
    offsets = a.list_offsets(tp)
    assert f"tx_open_{name}" in a.open_transactional_ids()
    assert offsets.lso < offsets.hw == offsets.leo  # the open transaction holds the LSO back

    committed = [b"p0", b"p1", b"p2", b"i0", b"i1", b"i2", b"c0", b"c1"]
    everything = committed + [b"a0", b"a1", b"o0"]
    rc = client.consume(boot_a, topic, "read_committed", f"g_rc_{name}", len(committed))
    ru = client.consume(boot_a, topic, "read_uncommitted", f"g_ru_{name}", len(everything))
    assert [v for _, _, v in rc] == committed
    assert [v for _, _, v in ru] == everything
    # Each group committed where it stopped: the LSO for read_committed, the HW for read_uncommitted.
    assert [(o.partition, o.offset) for o in a.group_offsets(f"g_rc_{name}")] == [(0, offsets.lso)]
    assert [(o.partition, o.offset) for o in a.group_offsets(f"g_ru_{name}")] == [(0, offsets.hw)]

    topic_id = mirror_partition(a, b, topic)
    # B shows the same records at the same offsets, the open transaction included.
    assert client.consume(boot_b, topic, "read_committed", f"g_rc_b_{name}", len(committed)) == rc
    assert client.consume(boot_b, topic, "read_uncommitted", f"g_ru_b_{name}", len(everything)) == ru

    with pytest.raises(ProduceRefused) as refused:
        client.produce(boot_b, topic, [b"too early"])
    # kafka-python and librdkafka report the code; aiokafka maps codes it does not know to UnknownError.
    if client.name == "aiokafka":
        assert type(refused.value.__cause__).__name__ == "UnknownError"
    else:
        assert refused.value.code == READ_ONLY_TOPIC
    stop_mirror_partition(a, b, TopicPartition(topic_id, 0))
    b_leo = b.list_offsets(TopicPartition(topic_id, 0)).leo
    assert client.produce(boot_b, topic, [b"after stop"]) == [b_leo]

    # Consume-transform-produce: offsets sent to a transaction count only if it commits.
    client.transaction(boot_b, f"ctp_abort_{name}", topic, [b"t0"], "abort", offsets=(f"g_ctp_{name}", 5))
    assert b.group_offsets(f"g_ctp_{name}") == []
    client.transaction(boot_b, f"ctp_commit_{name}", topic, [b"t1"], "commit", offsets=(f"g_ctp_{name}", 6))
    assert [(o.partition, o.offset) for o in b.group_offsets(f"g_ctp_{name}")] == [(0, 6)]
    values_b = [v for _, _, v in client.consume(boot_b, topic, "read_committed", f"g_all_b_{name}", len(committed) + 2)]
    assert values_b == committed + [b"after stop", b"t1"]  # the mirrored open transaction was aborted at the stop

    # The read_uncommitted group moves to B: its offsets synced as the coordinator's group sync
    # writes them; on B it resumes where it stopped on A and reads only what came after.
    b.commit_group_offsets(f"g_ru_{name}", a.group_offsets(f"g_ru_{name}"))
    resumed = client.consume(boot_b, topic, "read_uncommitted", f"g_ru_{name}", 3)
    assert [v for _, _, v in resumed] == [b"after stop", b"t0", b"t1"] and resumed[0][1] == b_leo


def test_printed_listeners_match_the_client_api(kafka_server: KafkaServer) -> None:
    with ClusterClient(kafka_server.port, "A") as a:
        listeners = a.kafka_listeners()
    assert listeners == kafka_server.printed
    assert {(c, b) for c, b, _, _ in listeners} == {(c, b) for c in "AB" for b in range(3)}
    assert all(h == "127.0.0.1" for _, _, h, _ in listeners)


def test_leadership_moves_and_broker_crash_reach_a_running_client(kafka_server: KafkaServer) -> None:
    """A long-lived aiokafka producer and consumer across an election, a broker crash and its restart."""
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    a = ClusterClient(kafka_server.port, "A")
    topic = "moves"
    a.add_topic(topic, 1)
    boot = a.bootstrap_servers()

    async def run() -> list[int]:
        p = AIOKafkaProducer(bootstrap_servers=boot, acks="all", request_timeout_ms=3000, retry_backoff_ms=50,
                             metadata_max_age_ms=60000)
        c = AIOKafkaConsumer(topic, bootstrap_servers=boot, group_id="g_moves", auto_offset_reset="earliest",
                             request_timeout_ms=3000, retry_backoff_ms=50, session_timeout_ms=6000,
                             heartbeat_interval_ms=300, metadata_max_age_ms=60000)
        await p.start()
        await c.start()
        seen: list[int] = []

        async def read_until(n: int) -> None:
            deadline = asyncio.get_running_loop().time() + 20
            while len(seen) < n and asyncio.get_running_loop().time() < deadline:
                for msgs in (await c.getmany(timeout_ms=200)).values():
                    seen.extend(m.offset for m in msgs)

        try:
            offsets = [(await p.send_and_wait(topic, b"before", partition=0)).offset]
            await read_until(1)
            old_leader = next(t for t in a.describe_topics() if t.name == topic).partitions[0].leader
            new_leader = a.elect_leader(topic, 0)
            assert new_leader != old_leader
            offsets.append((await p.send_and_wait(topic, b"after election", partition=0)).offset)
            await read_until(2)
            a.crash_broker(new_leader)
            offsets.append((await p.send_and_wait(topic, b"after crash", partition=0)).offset)
            await read_until(3)
            a.restart_broker(new_leader)
            offsets.append((await p.send_and_wait(topic, b"after restart", partition=0)).offset)
            await read_until(4)
            assert offsets == [0, 1, 2, 3]
            return seen
        finally:
            await c.stop()
            await p.stop()

    assert asyncio.run(run()) == [0, 1, 2, 3]
    assert isinstance(AioKafka(), Client)


@pytest.mark.parametrize("client", available_clients(), ids=lambda c: getattr(c, "name", "confluent-kafka"))
def test_one_producer_across_election_crash_and_restart(kafka_server: KafkaServer, client: Client) -> None:
    """Each client keeps one producer through a leader election (NOT_LEADER_OR_FOLLOWER, then
    Metadata), the new leader's crash (a closed connection) and its restart; no write is lost
    or duplicated and a consumer sees them all, in order."""
    a = ClusterClient(kafka_server.port, "A")
    topic = f"moves_{client.name.replace('-', '_')}"
    a.add_topic(topic, 1)
    boot = a.bootstrap_servers()
    session = client.producer(boot)
    try:
        offsets = [session.send(topic, b"before")]
        old = next(t for t in a.describe_topics() if t.name == topic).partitions[0].leader
        new = a.elect_leader(topic, 0)
        assert new != old
        offsets.append(session.send(topic, b"after election"))
        a.crash_broker(new)
        offsets.append(session.send(topic, b"after crash"))
        a.restart_broker(new)
        offsets.append(session.send(topic, b"after restart"))
    finally:
        session.close()
    assert offsets == [0, 1, 2, 3]
    assert a.list_offsets(a.tp(topic, 0)).leader_epoch == 2
    got = client.consume(boot, topic, "read_committed", f"g_{topic}", 4, settle_s=0.3)
    assert [(o, v) for _, o, v in got] == [(0, b"before"), (1, b"after election"), (2, b"after crash"), (3, b"after restart")]


def test_admin_with_librdkafka(kafka_server: KafkaServer) -> None:
    """confluent-kafka's AdminClient: topics, partitions, configs, ACLs, DeleteRecords on the model."""
    ck = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ConfigSource,
        NewPartitions,
        NewTopic,
        ResourcePatternType,
        ResourceType,
    )

    a = ClusterClient(kafka_server.port, "A")
    admin = AdminClient({"bootstrap.servers": a.bootstrap_servers()})
    admin.create_topics([NewTopic("adm", 2, 3, config={"retention.ms": "60000"})])["adm"].result(20)
    with pytest.raises(ck.KafkaException) as exists:
        admin.create_topics([NewTopic("adm", 1, 1)])["adm"].result(20)
    assert exists.value.args[0].code() == ck.KafkaError.TOPIC_ALREADY_EXISTS
    admin.create_partitions([NewPartitions("adm", 3)])["adm"].result(20)
    assert len(next(t for t in a.describe_topics() if t.name == "adm").partitions) == 3

    res = ConfigResource(ResourceType.TOPIC, "adm")
    admin.incremental_alter_configs([ConfigResource(ResourceType.TOPIC, "adm", incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
    ])])[res].result(20)
    described = admin.describe_configs([res])[res].result(20)
    # Every topic config, as Kafka lists them: the one set on the topic, the rest Kafka's defaults.
    assert {k: v.value for k, v in described.items() if v.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value} == {"cleanup.policy": "compact"}
    assert (described["retention.ms"].value, described["retention.ms"].source) == ("604800000", ConfigSource.DEFAULT_CONFIG.value)

    acl = AclBinding(ResourceType.TOPIC, "adm", ResourcePatternType.LITERAL, "User:alice", "*",
                     AclOperation.READ, AclPermissionType.ALLOW)
    admin.create_acls([acl])[acl].result(20)
    any_filter = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    assert admin.describe_acls(any_filter).result(20) == [acl]
    assert admin.delete_acls([any_filter])[any_filter].result(20) == [acl]
    assert a.describe_acls() == []

    # adm is compacted now: Kafka refuses records without a key there (INVALID_RECORD), so keyed ones.
    p = ck.Producer({"bootstrap.servers": a.bootstrap_servers(), "linger.ms": 0})
    for v in (b"a", b"b", b"c"):
        p.produce("adm", v, key=v, partition=0)
    assert p.flush(20) == 0 and a.list_offsets(a.tp("adm", 0)).hw == 3
    from confluent_kafka import TopicPartition as CTP

    done = admin.delete_records([CTP("adm", 0, 2)])
    (fut,) = done.values()
    assert fut.result(20).low_watermark == 2
    assert a.list_offsets(a.tp("adm", 0)).log_start == 2
    admin.delete_topics(["adm"])["adm"].result(20)
    assert "adm" not in {t.name for t in a.describe_topics()}
    del admin


def test_two_members_share_a_group_and_rebalance(kafka_server: KafkaServer) -> None:
    """Two aiokafka consumers in one group split a two-partition topic; when one leaves the other takes all."""
    import asyncio

    from aiokafka import AIOKafkaConsumer

    a = ClusterClient(kafka_server.port, "A")
    a.add_topic("shared", 2)
    for p in (0, 1):
        a.produce("shared", p, [(None, f"p{p}-{i}".encode()) for i in range(3)])
    boot = a.bootstrap_servers()

    def consumer() -> AIOKafkaConsumer:
        return AIOKafkaConsumer("shared", bootstrap_servers=boot, group_id="g_shared", auto_offset_reset="earliest",
                                session_timeout_ms=6000, heartbeat_interval_ms=200, enable_auto_commit=False)

    async def run() -> None:
        c1, c2 = consumer(), consumer()
        await c1.start()
        await c2.start()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while loop.time() < deadline:
            await asyncio.gather(c1.getmany(timeout_ms=100), c2.getmany(timeout_ms=100))
            if c1.assignment() and c2.assignment():
                break
        assert {tp.partition for tp in c1.assignment()} | {tp.partition for tp in c2.assignment()} == {0, 1}
        assert not c1.assignment() & c2.assignment()
        desc = a.list_groups()
        assert any(g.group_id == "g_shared" and g.active and g.member_count == 2 for g in desc), desc
        await c2.stop()
        while loop.time() < deadline and len(c1.assignment()) < 2:
            await c1.getmany(timeout_ms=100)
        assert {tp.partition for tp in c1.assignment()} == {0, 1}
        await c1.stop()

    asyncio.run(run())
    assert not any(g.group_id == "g_shared" and g.active for g in a.list_groups())


def test_admin_and_groups_with_kafka_python(kafka_server: KafkaServer) -> None:
    """kafka-python's KafkaAdminClient: topics, partitions, configs, DeleteRecords, and the groups the
    model holds (ListGroups, DescribeGroups, OffsetFetch v8) as an operator on B would see them."""
    from kafka import TopicPartition as KTP
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic

    b = ClusterClient(kafka_server.port, "B")
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap_servers(), request_timeout_ms=10000)
    try:
        created = admin.create_topics([NewTopic("kp_adm", 2, 2, topic_configs={"retention.ms": "5000"})])
        (topic,) = created["topics"]
        assert topic["error_code"] == 0 and topic["num_partitions"] == 2
        assert str(next(t for t in b.describe_topics() if t.name == "kp_adm").topic_id) == str(topic["topic_id"])
        assert admin.create_partitions({"kp_adm": 3}).results[0].error_code == 0
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "kp_adm")])
        assert {k: v["value"] for k, v in described["topic"]["kp_adm"].items()} == {"retention.ms": "5000"}

        b.produce("kp_adm", 0, [(None, b"a"), (None, b"b"), (None, b"c")])
        b.commit_offset("g_synced", "kp_adm", 0, 2)  # as the coordinator's group sync leaves it on B
        listed = {g["group_id"]: g for g in admin.list_groups()}
        assert listed["g_synced"]["group_state"] == "Empty"
        assert admin.describe_groups(["g_synced"])["g_synced"]["members"] == []
        offsets = admin.list_group_offsets(["g_synced"])["g_synced"]
        assert [(tp.partition, om.offset) for tp, om in offsets.items()] == [(0, 2)]

        deleted = admin.delete_records({KTP("kp_adm", 0): 2})
        assert deleted[KTP("kp_adm", 0)]["low_watermark"] == 2
        assert admin.delete_topics(["kp_adm"])["topics"][0]["error_code"] == 0
        assert "kp_adm" not in admin.list_topics()
    finally:
        admin.close()
