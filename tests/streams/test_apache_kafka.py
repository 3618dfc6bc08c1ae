"""streams/brokers/apache_kafka.py: Apache Kafka (KRaft) started by the project on loopback.

The session's shared node (``apache_kafka``), the session's 1-controller + 3-broker cluster
(``apache_kafka_3``) and the console script's node; skipped with one reason where Java or the jars
are missing (a failure under KIP1279_REQUIRE_KAFKA=1). And, without Java, how the source version
matrix's older brokers are configured (ZooKeeper before 3.3, static KRaft voters before 3.9).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from kafka_fixtures import REQUIRE_ENV, require_apache_kafka

from streams.brokers.apache_kafka import ApacheKafkaCluster
from streams.brokers.kafka_probes import metadata_broker_ids
from streams.brokers.kafka_jars import kafka_version, missing_reason
from streams.brokers.noida import BrokerError, probe


def _listening_addresses(pid: int) -> set[tuple[str, int]]:
    """The (address, port) pairs a process listens on, from /proc (IPv4 and IPv6)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            cols = line.split()
            if cols[3] != "0A" or cols[9] not in inodes:  # 0A: LISTEN
                continue
            addr_hex, port_hex = cols[1].split(":")
            raw = bytes.fromhex(addr_hex)
            if table == "tcp":
                addr = socket.inet_ntop(socket.AF_INET, raw[::-1])
            else:
                words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
                addr = socket.inet_ntop(socket.AF_INET6, words)
            found.add((addr, int(port_hex, 16)))
    return found


def _produce_and_read_back(bootstrap: str, topic: str, replication: int) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 1, replication)])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    try:
        for i in range(3):
            producer.send(topic, f"v{i}".encode()).get(timeout=30)
    finally:
        producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=10000)
    try:
        return [m.value for _, m in zip(range(3), consumer)]
    finally:
        consumer.close()


def test_missing_jars_give_one_reason_and_the_switch_makes_it_a_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KIP1279_KAFKA_LIB", str(tmp_path))
    reason = missing_reason()
    assert reason is not None and f"Apache Kafka {kafka_version()} jars are not in {tmp_path}" in reason
    monkeypatch.delenv(REQUIRE_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match="jars are not in"):
        require_apache_kafka()
    monkeypatch.setenv(REQUIRE_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match=f"{REQUIRE_ENV}=1 but .*jars are not in"):
        require_apache_kafka()
    monkeypatch.setenv("PATH", str(tmp_path))  # no java at all
    assert "Java 17" in (missing_reason() or "")


def test_refuses_a_non_loopback_host(tmp_path: Path) -> None:
    with pytest.raises(BrokerError, match="loopback"):
        ApacheKafkaCluster(tmp_path, host="0.0.0.0")


def test_session_node_is_a_loopback_kraft_combined_node(apache_kafka: ApacheKafkaCluster) -> None:
    node = apache_kafka.nodes[0]
    assert node.roles == ("broker", "controller") and apache_kafka.combined
    assert metadata_broker_ids("127.0.0.1", node.broker_port or 0) == {1}
    assert probe("127.0.0.1", node.controller_port or 0)
    assert node.proc is not None
    listening = _listening_addresses(node.proc.pid)
    assert {("127.0.0.1", node.broker_port), ("127.0.0.1", node.controller_port)} <= listening
    assert all(addr == "127.0.0.1" for addr, _ in listening), listening
    props = node.properties_path.read_text()
    assert f"advertised.listeners=PLAINTEXT://127.0.0.1:{node.broker_port},CONTROLLER://127.0.0.1:{node.controller_port}" in props
    assert _produce_and_read_back(apache_kafka.bootstrap, "apache-kafka-roundtrip", 1) == [b"v0", b"v1", b"v2"]
    print(f"session node ready in {apache_kafka.session_ready_s:.1f}s (JVM to ready {apache_kafka.startup_s:.1f}s)")  # type: ignore[attr-defined]


def test_controller_and_three_brokers(apache_kafka_3: ApacheKafkaCluster) -> None:
    # The session's 1-controller + 3-broker cluster (the Kafka source tests' own), not one more:
    # four JVMs formatted and started cost ~25 s. It is left as found, every node running; its
    # stop at the session's end checks that every node's process ended (tests/kafka_fixtures.py).
    cluster = apache_kafka_3
    print(f"3-broker cluster: formatted in {cluster.format_s:.1f}s, ready in {cluster.startup_s:.1f}s")
    try:
        controller = cluster.controller
        assert controller.roles == ("controller",) and controller.broker_port is None
        assert [n.node_id for n in cluster.brokers] == [1, 2, 3]
        for b in cluster.brokers:
            assert metadata_broker_ids("127.0.0.1", b.broker_port or 0) == {1, 2, 3}
            assert b.proc is not None and all(a == "127.0.0.1" for a, _ in _listening_addresses(b.proc.pid))
        assert _produce_and_read_back(cluster.bootstrap, f"rf3-{uuid.uuid4().hex[:6]}", 3) == [b"v0", b"v1", b"v2"]

        code = cluster.stop_node(2)
        print(f"broker 2 exit code on SIGTERM: {code}")
        assert code in (0, 143) and not cluster.node(2).is_running()  # a clean exit, not the SIGKILL fallback
        deadline = time.monotonic() + 30
        while metadata_broker_ids("127.0.0.1", cluster.node(1).broker_port or 0) != {1, 3}:
            assert time.monotonic() < deadline, "broker 2 still listed after its clean stop"
            time.sleep(0.2)
        cluster.start_node(2)  # on its own storage: back in the cluster
        assert metadata_broker_ids("127.0.0.1", cluster.node(2).broker_port or 0) == {1, 2, 3}
        assert cluster.stop_node(3, kill=True) == -signal.SIGKILL
    finally:
        for node in cluster.nodes:
            if not node.is_running():
                cluster.start_node(node.node_id, wait=False)
        cluster.wait_ready()


def test_console_script_runs_kafka_until_sigterm(tmp_path: Path) -> None:
    require_apache_kafka()
    script = Path(sys.executable).with_name("kip1279-kafka")
    proc = subprocess.Popen([str(script), "run", "--data-dir", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        bootstrap = proc.stdout.readline().strip()
        host, port = bootstrap.split(":")
        assert host == "127.0.0.1" and metadata_broker_ids(host, int(port)) == {1}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert not probe(host, int(port))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    check = subprocess.run([str(script), "check"], capture_output=True, text=True)
    assert check.returncode == 0 and f"Apache Kafka {kafka_version()} is ready" in check.stdout


# --- the source version matrix's older brokers (issue #39): what each is configured with ---


def test_the_matrix_lists_every_fetched_pom_and_the_pinned_version_oldest_first() -> None:
    from streams.brokers.kafka_jars import VERSIONS_DIR, source_versions, version_key

    folders = {p.parent.name for p in VERSIONS_DIR.glob("*/pom.xml")}
    assert folders and {kafka_version(p) for p in VERSIONS_DIR.glob("*/pom.xml")} == folders  # folder = its pin
    versions = source_versions()
    assert set(versions) == folders | {kafka_version()} and versions == sorted(versions, key=version_key)
    assert missing_reason(version="0.0.1") is not None  # no folder, no jars: a reason, never a crash


def test_an_old_version_runs_on_zookeeper_and_a_pre_3_9_kraft_on_static_voters(tmp_path: Path) -> None:
    zk = ApacheKafkaCluster(tmp_path / "zk", brokers=1, version="2.8.2")
    assert zk.zookeeper and [n.roles for n in zk.nodes] == [("zookeeper",), ("broker",)]
    props = zk.properties(zk.brokers[0])
    assert props["zookeeper.connect"] == f"127.0.0.1:{zk.nodes[0].controller_port}" and props["broker.id"] == "1"
    assert not {k for k in props if k.startswith(("process.roles", "controller.", "broker.session", "share."))}
    assert zk.properties(zk.nodes[0])["clientPortAddress"] == "127.0.0.1"
    with pytest.raises(ValueError):
        ApacheKafkaCluster(tmp_path / "x", brokers=1, version="3.0.2", combined=True)

    static = ApacheKafkaCluster(tmp_path / "static", brokers=1, version="3.7.2")
    node = static.nodes[0]
    props = static.properties(node)
    assert not static.zookeeper and props["controller.quorum.voters"] == f"1@127.0.0.1:{node.controller_port}"
    assert "controller.quorum.bootstrap.servers" not in props and "CONTROLLER" not in props["advertised.listeners"]

    dynamic = ApacheKafkaCluster(tmp_path / "dynamic", brokers=1, version="3.9.1")
    props = dynamic.properties(dynamic.nodes[0])
    assert "controller.quorum.bootstrap.servers" in props and "controller.quorum.voters" not in props
    assert ApacheKafkaCluster(tmp_path / "pinned", brokers=1).jar_version is None  # the pinned one's jars
