"""Apache Kafka for the tests: one KRaft cluster per test session, shared by every test that asks.

``apache_kafka`` is a combined-mode single node (started on first use, stopped at session end);
``apache_kafka_3`` a controller and 3 brokers, the mirror source of the Kafka source tests.
Where Java or the jars bin/setup fetches are missing, every test that needs it is skipped with
the same one-line reason; ``KIP1279_REQUIRE_KAFKA=1`` (set by .ci/run) turns that skip into a
failure, so CI always runs them. Tests isolate themselves by topic names.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from streams.brokers.apache_kafka import ApacheKafkaCluster
from streams.brokers.kafka_jars import missing_reason

REQUIRE_ENV = "KIP1279_REQUIRE_KAFKA"

# The shared node: an authorizer (so tests can create ACLs) whose super user is the PLAINTEXT
# principal, so nothing is denied; and group.version formatted at 0, then raised to Kafka's
# default (1) by an UpdateFeatures right after start, so the metadata log holds a
# FeatureLevelRecord the controller wrote for a client's request (the records yardstick uses it).
SESSION_OVERRIDES = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS",
    # The log cleaner looks for work every 0.2 s instead of 15 s, so compaction shows within a test.
    "log.cleaner.backoff.ms": "200",
}
SESSION_FORMAT_ARGS = ("--feature", "group.version=0")


def kafka_required() -> bool:
    return os.environ.get(REQUIRE_ENV, "").strip() not in ("", "0", "false", "no")


def require_apache_kafka(version: str | None = None) -> None:
    """Skip (or, under KIP1279_REQUIRE_KAFKA=1, fail) when Apache Kafka (the pinned version, or
    ``version`` of the source matrix) cannot run here."""
    reason = missing_reason(version=version)
    if reason is None:
        return
    if kafka_required():
        pytest.fail(f"{REQUIRE_ENV}=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def start_session_cluster(base_dir: Path) -> ApacheKafkaCluster:
    """The shared node, started and ready, at Kafka's default feature levels."""
    from kafka import KafkaAdminClient

    cluster = ApacheKafkaCluster(base_dir, brokers=1, overrides=SESSION_OVERRIDES, format_args=SESSION_FORMAT_ARGS)
    cluster.start()
    try:
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, client_id="kip1279-fixture")
        try:
            result = admin.update_features({"group.version": 1})
        finally:
            admin.close()
        if result.get("group.version") != "OK":
            raise RuntimeError(f"UpdateFeatures group.version=1 failed: {result}")
    except BaseException:
        cluster.stop()
        raise
    return cluster


@pytest.fixture(scope="session")
def apache_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApacheKafkaCluster]:
    require_apache_kafka()
    t0 = time.monotonic()
    cluster = start_session_cluster(tmp_path_factory.mktemp("apache-kafka"))
    cluster.session_ready_s = time.monotonic() - t0  # type: ignore[attr-defined]
    try:
        yield cluster
    finally:
        cluster.stop()


# The source cluster of the mirror tests: controller + 3 brokers, shared by the session (JVM
# start-up is slow here). An authorizer with the PLAINTEXT principal as super user, so ACLs exist
# on the source; short replica lag so that a stopped follower leaves the ISR quickly.
SOURCE_OVERRIDES = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS",
    "replica.lag.time.max.ms": "3000",
    "controlled.shutdown.enable": "true",
}


@pytest.fixture(scope="session")
def apache_kafka_3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApacheKafkaCluster]:
    """Controller node 0 plus brokers 1..3, started on first use, stopped at session end. Tests
    that stop a broker start it again before they return."""
    require_apache_kafka()
    cluster = ApacheKafkaCluster(tmp_path_factory.mktemp("apache-kafka-3"), brokers=3, overrides=SOURCE_OVERRIDES)
    cluster.start()
    try:
        yield cluster
    finally:
        procs = [n.proc for n in cluster.nodes if n.proc is not None]
        cluster.stop()
        # test_apache_kafka.py's claim for a multi-node stop: brokers, then the controller, all gone.
        assert procs and all(p.poll() is not None for p in procs), [p.pid for p in procs if p.poll() is None]
