"""The Kafka source port's share-group offsets (KIP-932) against Apache Kafka 4.1 itself.

Kafka 4.1 ships share groups behind the ``share.version`` feature (0 by default), so this module
starts its own KRaft node formatted with ``--feature share.version=1``. A real share consumer
(Kafka's ConsoleShareConsumer) reads part of a topic in a share group; the port must then list
the group as SHARE and give, per partition, the share-partition start offset and leader epoch
that Kafka's own admin (``kafka-share-groups --describe --offsets``) reports.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic

from coordinator.ports import GroupType, UNDEFINED_EPOCH
from kafka_fixtures import require_apache_kafka
from streams.brokers.apache_kafka import ApacheKafkaCluster
from streams.brokers.kafka_jars import java_command, run_tool
from streams.kafka.source import KafkaSourceCluster

pytestmark = pytest.mark.slow

TOPIC, GROUP, RECORDS, READ = "shared", "share-readers", 10, 6


@pytest.fixture(scope="module")
def share_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApacheKafkaCluster]:
    require_apache_kafka()
    cluster = ApacheKafkaCluster(tmp_path_factory.mktemp("kafka-share"), brokers=1,
                                 format_args=["--feature", "share.version=1"])  # fmt: skip
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def _kafka_share_offsets(cluster: ApacheKafkaCluster) -> dict[tuple[str, int], tuple[int, int | None]]:
    """(topic, partition) -> (start offset, leader epoch or None), from Kafka's ShareGroupCommand."""
    out = run_tool("org.apache.kafka.tools.consumer.group.ShareGroupCommand",
                   ["--bootstrap-server", cluster.bootstrap, "--describe", "--group", GROUP, "--offsets", "--verbose"])  # fmt: skip
    lines = [line.split() for line in out.splitlines() if line.strip()]
    header = next(cols for cols in lines if cols[:2] == ["GROUP", "TOPIC"])
    rows = [dict(zip(header, cols)) for cols in lines if cols[0] == GROUP and len(cols) == len(header)]
    got = {}
    for r in rows:
        epoch = r.get("LEADER-EPOCH")
        start = r["START-OFFSET"]
        got[(r["TOPIC"], int(r["PARTITION"]))] = (int(start) if start != "-" else -1,
                                                 int(epoch) if epoch not in (None, "-") else None)  # fmt: skip
    return got


def test_share_group_offsets_match_kafkas_admin(share_kafka: ApacheKafkaCluster, tmp_path: Path) -> None:
    boot = share_kafka.bootstrap
    admin = KafkaAdminClient(bootstrap_servers=boot, client_id="kip1279-test-share")
    try:
        admin.create_topics([NewTopic(TOPIC, 2, 1)])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=boot)
    for i in range(RECORDS):
        producer.send(TOPIC, value=b"v%d" % i, partition=i % 2)
    producer.flush()
    producer.close()
    # A share group starts at the latest offset by default: read from the earliest instead.
    run_tool("org.apache.kafka.tools.ConfigCommand", ["--bootstrap-server", boot, "--alter", "--entity-type", "groups",
                                           "--entity-name", GROUP, "--add-config", "share.auto.offset.reset=earliest"])  # fmt: skip
    cmd = java_command("org.apache.kafka.tools.consumer.ConsoleShareConsumer",
                       ["--bootstrap-server", boot, "--topic", TOPIC, "--group", GROUP,
                        "--max-messages", str(READ), "--timeout-ms", "30000"])  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-2000:]
    assert len([v for v in done.stdout.split() if v.startswith("v")]) == READ, done.stdout

    kafka = _kafka_share_offsets(share_kafka)
    assert kafka, "Kafka's admin reports no share-partition of the group"
    assert any(start > 0 for start, _ in kafka.values()), kafka  # acknowledged records moved a start offset

    port = KafkaSourceCluster(boot, {"client.id": "kip1279-test-share-port"})
    try:
        groups = {g.group_id: g for g in port.list_groups()}
        assert groups[GROUP].group_type == GroupType.SHARE and not groups[GROUP].active
        names = {t.topic_id: t.name for t in port.describe_topics()}
        offsets = port.group_offsets(GROUP)
        assert all(o.group_id == GROUP and o.metadata == "" for o in offsets)
        got = {(names[o.topic_id], o.partition): o for o in offsets}
        # -1 (a share-partition not initialised) is no offset to sync: the port leaves it out.
        assert {k: o.offset for k, o in got.items()} == {k: s for k, (s, _) in kafka.items() if s >= 0}
        for k, o in got.items():
            epoch = kafka[k][1]
            assert o.leader_epoch == (UNDEFINED_EPOCH if epoch is None or epoch < 0 else epoch), (k, o, epoch)
        assert port.group_offsets("no-such-share-group") == []
    finally:
        port.close()


def test_share_groups_off_is_no_offsets(apache_kafka: ApacheKafkaCluster) -> None:
    """The session node keeps share.version at 0: Kafka 4.1 lists API 90 there but answers
    UNSUPPORTED_VERSION; an empty or unknown group is then no offsets, not an error."""
    from kafka import KafkaConsumer, TopicPartition as KafkaTP
    from kafka.structs import OffsetAndMetadata

    boot, topic = apache_kafka.bootstrap, "share-off-topic"
    admin = KafkaAdminClient(bootstrap_servers=boot, client_id="kip1279-test-share-off")
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        admin.close()
    consumer = KafkaConsumer(bootstrap_servers=boot, group_id="share-off-consumers", enable_auto_commit=False)
    try:
        consumer.assign([KafkaTP(topic, 0)])
        consumer.commit({KafkaTP(topic, 0): OffsetAndMetadata(3, "m", -1)})
    finally:
        consumer.close()
    port = KafkaSourceCluster(boot, {"client.id": "kip1279-test-share-off"})
    try:
        assert [(o.partition, o.offset, o.metadata) for o in port.group_offsets("share-off-consumers")] == [(0, 3, "m")]
        assert port.group_offsets("share-off-no-such-group") == []
    finally:
        port.close()
