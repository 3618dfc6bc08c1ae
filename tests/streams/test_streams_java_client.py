"""Kafka's Java client as a fourth client, next to aiokafka, kafka-python and librdkafka: Kafka's
own VerifiableProducer (acks=all, so idempotent by the Java client's default) and VerifiableConsumer (a consumer group that
commits) against each test broker, noida-db and Apache Kafka; and Kafka's ConsoleConsumer reading
a mirror on model cluster B through the model's Kafka listener. Needs Java and the jars bin/setup
fetches (kafka-tools): skipped with one reason otherwise, a failure under KIP1279_REQUIRE_KAFKA=1."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka_fixtures import require_apache_kafka

from streams.brokers.kafka_jars import java_command

pytestmark = pytest.mark.brokers("noida-db", "apache-kafka")
N = 20


def _java_tool(main_class: str, *args: str) -> list[dict[str, Any]]:
    """Runs a Verifiable* tool to completion; its JSON events (one a line on stdout)."""
    done = subprocess.run(java_command(main_class, list(args)), capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def test_java_producer_and_consumer_group(kafka_broker: Any) -> None:
    require_apache_kafka()  # the Java tools come with the Kafka jars
    from kafka import KafkaConsumer

    bootstrap = kafka_broker.bootstrap
    topic, group = f"java-{uuid.uuid4().hex[:8]}", f"java-group-{uuid.uuid4().hex[:8]}"
    produced = _java_tool("org.apache.kafka.tools.VerifiableProducer", "--bootstrap-server", bootstrap, "--topic", topic,
                          "--max-messages", str(N), "--acks", "-1")  # fmt: skip
    tool = next(e for e in produced if e["name"] == "tool_data")
    assert (tool["sent"], tool["acked"]) == (N, N)
    offsets = sorted(e["offset"] for e in produced if e["name"] == "producer_send_success")
    assert offsets == list(range(N))

    # Another client reads what the Java producer wrote.
    python = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=10000)
    try:
        assert [m.value for _, m in zip(range(N), python)] == [str(i).encode() for i in range(N)]
    finally:
        python.close()

    consumed = _java_tool("org.apache.kafka.tools.VerifiableConsumer", "--bootstrap-server", bootstrap, "--topic", topic,
                          "--group-id", group, "--max-messages", str(N), "--reset-policy", "earliest")  # fmt: skip
    names = [e["name"] for e in consumed]
    assert "partitions_assigned" in names
    records = [p for e in consumed if e["name"] == "records_consumed" for p in e["partitions"]]
    assert sum(p["count"] for p in records) == N and min(p["minOffset"] for p in records) == 0
    assert max(p["maxOffset"] for p in records) == N - 1
    commits = [o for e in consumed if e["name"] == "offsets_committed" for o in e["offsets"] if e["success"]]
    assert {(o["partition"], o["offset"]) for o in commits} >= {(0, N)}


def test_java_console_consumer_reads_the_mirror_on_b(broker: Any, tmp_path: Path) -> None:
    """Kafka's ConsoleConsumer reads a mirror partition on B through the cluster model's Kafka
    listener (docs/kafka-listener.md): the records model cluster A holds, at the same offsets,
    read_committed (an aborted transaction left out, as on A)."""
    require_apache_kafka()
    from worker_harness import Rig

    from coordinator.states import MirrorState

    name = "jv"
    rig = Rig(tmp_path, broker.bootstrap, {name: 1}, tick=0.1, seed=5).start(("B",))
    try:
        a, b = rig.clients["A"], rig.clients["B"]
        for i in range(0, N, 5):
            a.produce(name, 0, [(f"k{j}".encode(), f"v{j}".encode()) for j in range(i, i + 5)], acks=-1)
        a.init_producer_id("java-aborted")
        a.begin_transaction("java-aborted")
        a.produce_transactional("java-aborted", name, 0, [(b"x", b"aborted")])
        a.abort_transaction("java-aborted")
        a.produce(name, 0, [(b"k-last", b"v-last")], acks=-1)
        rig.spawn_worker("B")
        rig.create_mirror("B", "java-mirror", "A")
        rig.start_topics("B", "java-mirror")
        rig.wait("MIRRORING", lambda: rig.all_in("B", "java-mirror", MirrorState.MIRRORING), 60)
        rig.wait("lag 0", lambda: rig.in_sync("A", "B"), 60)
        bootstrap_b = b.bootstrap_servers("B")
        done = subprocess.run(java_command("org.apache.kafka.tools.consumer.ConsoleConsumer", [
            "--bootstrap-server", bootstrap_b, "--topic", name, "--partition", "0", "--offset", "earliest",
            "--max-messages", str(N + 1), "--timeout-ms", "30000", "--isolation-level", "read_committed",
            "--formatter-property", "print.offset=true", "--formatter-property", "print.key=true", "--formatter-property", "key.separator=|"]),
            capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        got = [line for line in done.stdout.splitlines() if line.startswith("Offset:")]
        want = [f"Offset:{o}|{k.decode()}|{v.decode()}" for o, k, v in _committed_records(a, name)]
        assert len(want) == N + 1 and got == want, (got, want)
    finally:
        rig.close()


def _committed_records(client: Any, name: str) -> list[tuple[int, bytes, bytes]]:
    """(offset, key, value) a read_committed reader sees on the model cluster, by its own fetch."""
    from clustermodel.records import decode_records
    from streams.demo.harness import log_batches

    tp = next(p.topic_partition for t in client.describe_topics() if t.name == name for p in t.partitions)
    out = []
    for batch in log_batches(client, tp):
        if batch.is_control or batch.is_transactional:  # the only transaction here is aborted
            continue
        out += [(batch.base_offset + i, key, value) for i, (_, key, value) in enumerate(decode_records(batch.payload))]
    return out
