"""The broker of the coordinator's own topics in the main job and the benchmarks.

Apache Kafka (one combined-mode KRaft node, ``streams.brokers.apache_kafka``, from the jars
``bin/setup`` fetches) by default: the broker a deployment runs, with Kafka's group coordinator
(it expires dead members, compacts, fences). noida-db (``streams.brokers.noida``) with
``--broker noida``: one Rust process, no Java, a few seconds faster to start. Without Java or the
jars, the default falls back to noida-db and says why; asking for ``kafka`` then fails with the reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from streams.brokers.kafka_jars import missing_reason
from streams.brokers.noida import BrokerError, LocalBroker

KAFKA, NOIDA = "kafka", "noida"
CHOICES = (KAFKA, NOIDA)
# The own broker is one combined node that is never restarted: it keeps Kafka's broker heartbeat
# (the 500 ms ApacheKafkaCluster sets are for tests' quick restarts), and its KRaft controller
# appends a NoOpRecord every 5 s, not Kafka's 500 ms (metadata.max.idle.interval.ms). Measured
# on the idle JVM alone: 0.030 core -> 0.015 (docs/apache-kafka.md, "Idle").
OWN_KAFKA_OVERRIDES = {
    "broker.heartbeat.interval.ms": "2000",
    "broker.session.timeout.ms": "9000",
    "metadata.max.idle.interval.ms": "5000",
}
FLAG_HELP = ("the broker of the coordinator's own topics: kafka (Apache Kafka, one KRaft node; the default, "
             "noida-db if Java or Kafka's jars are missing) or noida (noida-db)")  # fmt: skip


def start_own_broker(kind: str | None, directory: Path, brokers: int = 1) -> tuple[Any, str]:
    """Starts the broker (``kind`` None: the default) in ``directory``; returns it (``.bootstrap``,
    ``.stop()``) and one line naming it. ``brokers`` 3: Apache Kafka with three brokers (the HA
    setup: Kafka's internal topics at RF 3, min.insync.replicas 2), which noida-db cannot be."""
    if kind not in (None, *CHOICES):
        raise ValueError(f"unknown broker {kind!r}; known: {', '.join(CHOICES)}")
    why_not = missing_reason() if kind != NOIDA else None
    if brokers > 1:
        if kind == NOIDA or why_not is not None:
            raise BrokerError(f"{brokers} brokers need Apache Kafka" + (f": {why_not}" if why_not else ", not noida-db"))
        from streams.brokers.apache_kafka import ApacheKafkaCluster

        # Combined nodes: every one a broker and a KRaft voter, so any one of them may die.
        cluster = ApacheKafkaCluster(directory, brokers=brokers, combined=True, overrides=OWN_KAFKA_OVERRIDES).start()
        return cluster, (f"Apache Kafka {cluster.version} ({brokers} combined nodes: brokers and a KRaft quorum of "
                         f"{brokers}) on {cluster.bootstrap}, ready in {cluster.startup_s:.1f}s")  # fmt: skip
    if kind == KAFKA and why_not is not None:
        raise BrokerError(f"--broker kafka: {why_not}")
    if kind == NOIDA or why_not is not None:
        broker = LocalBroker(directory).start()
        fallback = f" (Apache Kafka cannot run here: {why_not})" if why_not is not None else ""
        return broker, f"noida-db broker on {broker.bootstrap}{fallback}"
    from streams.brokers.apache_kafka import ApacheKafkaCluster

    cluster = ApacheKafkaCluster(directory, brokers=1, overrides=OWN_KAFKA_OVERRIDES).start()
    return cluster, f"Apache Kafka {cluster.version} (one KRaft node) on {cluster.bootstrap}, ready in {cluster.startup_s:.1f}s"
