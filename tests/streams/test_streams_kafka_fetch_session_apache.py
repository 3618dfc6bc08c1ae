"""The Kafka source port's long poll against Apache Kafka 4.4: incremental fetch sessions (KIP-227).

``KafkaSourceCluster.open_watch`` keeps caught-up partitions in a fetch session per leader: a
full request first, then incremental ones that name only what changed, the broker holding each
for ``max_wait_ms``; an append wakes it. A session the broker no longer knows (an epoch out of
step, an unknown ID, a broker restart) is reset to a full request, as Kafka's
FetchSessionHandler does.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from coordinator.ports import SourceUnavailable, TopicPartition
from streams.brokers.apache_kafka import ApacheKafkaCluster
from streams.kafka.fetch_session import FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH
from streams.kafka.source import KafkaSourceCluster


def _create(bootstrap: str, name: str, partitions: int) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="kip1279-fetch-session-test")
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        admin.close()


def _produce(bootstrap: str, name: str, partition: int, n: int = 1) -> None:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0, retries=20, request_timeout_ms=5000)
    try:
        for i in range(n):
            p.send(name, f"v{i}".encode(), partition=partition).get(timeout=30)
    finally:
        p.close()


@pytest.fixture
def topic(apache_kafka: ApacheKafkaCluster) -> Iterator[tuple[ApacheKafkaCluster, KafkaSourceCluster, str, list[TopicPartition]]]:
    name = f"watch-{uuid.uuid4().hex[:8]}"
    _create(apache_kafka.bootstrap, name, 2)
    _produce(apache_kafka.bootstrap, name, 0, 3)
    port = KafkaSourceCluster(apache_kafka.bootstrap, {"client.id": "kip1279-fetch-session-test"}, metadata_max_age_ms=500)
    try:
        deadline = time.monotonic() + 30
        while True:
            found = [t for t in port.describe_topics() if t.name == name]
            if found and all(p.leader >= 0 for p in found[0].partitions) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        yield apache_kafka, port, name, [TopicPartition(found[0].topic_id, p) for p in range(2)]
    finally:
        port.close()


def _at_hw(port: KafkaSourceCluster, tps: list[TopicPartition]) -> list[tuple[TopicPartition, int, int]]:
    return [(tp, o.hw, o.leader_epoch) for tp, o in ((tp, port.list_offsets(tp)) for tp in tps)]


def test_a_full_request_then_incremental_ones_and_an_append_wakes_the_long_poll(topic: Any) -> None:
    kafka, port, name, tps = topic
    with port.open_watch() as watch:
        sid, moved = watch.fetch_wait(0, _at_hw(port, tps), [], 300)
        assert moved == []
        node, first_sid, first_epoch, named, forgotten, error = watch.requests[0]
        assert (first_sid, first_epoch, named, forgotten, error) == (0, 0, 2, 0, 0)  # full: a new session
        t0 = time.monotonic()
        assert watch.fetch_wait(sid, [], [], 400) == (sid, [])
        assert time.monotonic() - t0 >= 0.3  # the broker held it for max_wait_ms
        _, session, epoch, named, forgotten, error = watch.requests[-1]
        assert session > 0 and epoch == 1 and (named, forgotten, error) == (0, 0, 0)  # incremental: nothing named

        timer = threading.Timer(0.5, _produce, (kafka.bootstrap, name, 1))
        t0 = time.monotonic()
        timer.start()
        try:
            assert watch.fetch_wait(sid, [], [], 20_000)[1] == [tps[1]]
        finally:
            timer.join()
        assert time.monotonic() - t0 < 15  # woken by the append, not by the 20 s wait
        watch.fetch_wait(sid, [], [], 100)
        assert watch.requests[-1][1:5] == (session, 3, 0, 1)  # the reported partition is forgotten
        # Parked again at its new HW: named in an incremental request, not moved.
        assert watch.fetch_wait(sid, _at_hw(port, [tps[1]]), [], 100)[1] == []
        assert watch.requests[-1][1:5] == (session, 4, 1, 0)


def test_an_evicted_or_out_of_step_session_starts_over_with_a_full_request(topic: Any) -> None:
    kafka, port, name, tps = topic
    with port.open_watch() as watch:
        sid, _ = watch.fetch_wait(0, _at_hw(port, tps), [], 100)
        node = watch.requests[0][0]
        watch._leaders[node].epoch += 5  # out of step with the broker's session
        assert watch.fetch_wait(sid, [], [], 100)[1] == []
        assert watch.requests[-1][5] == INVALID_FETCH_SESSION_EPOCH
        watch.fetch_wait(sid, [], [], 100)
        assert watch.requests[-1][1:] == (0, 0, 2, 0, 0)  # a full request, both partitions named again
        watch._leaders[node].session_id = 12345  # a session the broker does not have (evicted)
        watch.fetch_wait(sid, [], [], 100)
        assert watch.requests[-1][5] == FETCH_SESSION_ID_NOT_FOUND
        watch.fetch_wait(sid, [], [], 100)
        assert watch.requests[-1][1:] == (0, 0, 2, 0, 0)
        _produce(kafka.bootstrap, name, 0)
        assert watch.fetch_wait(sid, [], [], 5_000)[1] == [tps[0]]  # the new session watches as the old one did


def test_a_broker_restart_fails_the_long_poll_then_a_new_session_watches(topic: Any) -> None:
    kafka, port, name, tps = topic
    node = kafka.brokers[0].node_id
    with port.open_watch() as watch:
        sid, _ = watch.fetch_wait(0, _at_hw(port, tps), [], 100)
        kafka.stop_node(node)
        try:
            with pytest.raises(SourceUnavailable):
                watch.fetch_wait(sid, [], [], 100)  # the data watch then reports every partition moved
        finally:
            kafka.start_node(node)
    deadline = time.monotonic() + 60
    while True:  # the restarted broker serves the partitions again
        try:
            at = _at_hw(port, tps)
            break
        except Exception:  # noqa: BLE001 - leaders not back yet
            assert time.monotonic() < deadline
            time.sleep(0.5)
    with port.open_watch() as watch:
        sid, moved = watch.fetch_wait(0, at, [], 100)
        assert moved == [] and watch.requests[-1][1:] == (0, 0, 2, 0, 0)
        _produce(kafka.bootstrap, name, 1)
        assert watch.fetch_wait(sid, [], [], 5_000)[1] == [tps[1]]
