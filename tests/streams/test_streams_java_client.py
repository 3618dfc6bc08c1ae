"""Kafka's Java client as a fourth client, next to aiokafka, kafka-python and librdkafka: Kafka's
own VerifiableProducer (acks=all, so idempotent by the Java client's default) and VerifiableConsumer (a consumer group that
commits) against each test broker, noida-db and Apache Kafka. Needs Java and the jars bin/setup
fetches (kafka-tools): skipped with one reason otherwise, a failure under KIP1279_REQUIRE_KAFKA=1."""

from __future__ import annotations

import json
import subprocess
import uuid
from typing import Any

import pytest
from kafka_fixtures import require_apache_kafka

from streams.apache_kafka import java_command

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
