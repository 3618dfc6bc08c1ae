"""End to end, real processes: a broker crash on an Apache Kafka source is no outage (issue #24).

The source is the session's Apache Kafka 4.4 (a controller and brokers 1..3, ``apache_kafka_3``),
a topic of 3 partitions at replication factor 3, written all along by an idempotent producer
(acks=all); B is the model, mirrored by B's controller and a ``kip1279-worker``. Checked:

- the leader of partition 0 SIGKILLed while producing: the controller fences it after
  broker.session.timeout.ms and elects a new leader; meanwhile no partition is ever FAILED
  (``--describe`` sampled throughout, and every state B's worker wrote), the lag shows the delay,
  and B ends with the source's batches byte for byte, every acknowledged record once;
- every broker SIGKILLed: each partition FAILED (NETWORK_EXCEPTION) once
  ``source.unavailable.timeout.ms`` has passed and not before, then MIRRORING again once the
  brokers are back, B again equal to the source.

The leader kill runs again on an old version (issue #39): Apache Kafka 2.8.2 on ZooKeeper, three
brokers (``kafka_2_8_3``), where the controller learns of the dead leader when its ZooKeeper
session expires (``zookeeper.session.timeout.ms``, 3 s here as the KRaft cluster's broker session).
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka_source_data import values
from worker_harness import Rig, history_problems

from kafka_fixtures import require_apache_kafka

from coordinator.ports import IsolationLevel, TopicPartition
from coordinator.states import MirrorState
from streams.brokers.apache_kafka import ApacheKafkaCluster
from streams.brokers.noida import LocalBroker
from streams.demo.harness import log_batches
from streams.kafka.source import KafkaSourceCluster

MIRROR = "crash"
PARTITIONS = 3
# Short FAILED backoffs, so that a retry lands soon after the source is back.
RETRIES = "failed.retry.initial.backoff.ms=300\nfailed.retry.max.backoff.ms=1000\n"


class Producer:
    """An idempotent kafka-python producer (acks=all) writing to every partition in a thread,
    remembering each acknowledged record: (partition, offset) -> value."""

    def __init__(self, bootstrap: str, topic: str, tag: str = "v") -> None:
        from kafka import KafkaProducer

        self.topic, self.tag = topic, tag
        self.acked: dict[tuple[int, int], bytes] = {}
        self.errors: list[BaseException] = []
        self.producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=5,
                                      retries=1_000_000, request_timeout_ms=5_000, delivery_timeout_ms=120_000,
                                      metadata_max_age_ms=500)  # fmt: skip
        self.halt = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="crash-producer")
        self.n = 0

    def start(self) -> Producer:
        self.thread.start()
        return self

    def _run(self) -> None:
        while not self.halt.is_set():
            for _ in range(PARTITIONS * 2):
                value = f"{self.tag}{self.n}".encode()
                fut = self.producer.send(self.topic, value, key=f"k{self.n % 11}".encode(), partition=self.n % PARTITIONS)
                fut.add_callback(lambda md, value=value: self.acked.__setitem__((md.partition, md.offset), value))
                fut.add_errback(self.errors.append)
                self.n += 1
            time.sleep(0.02)  # ~300 records a second

    def stop(self) -> None:
        self.halt.set()
        self.thread.join(10)
        self.producer.flush(60)
        self.producer.close(10)


LEGACY = "2.8.2"
# No StandardAuthorizer on ZooKeeper; a stopped follower leaves the ISR quickly, as on the KRaft
# source. No controlled shutdown: the brokers stop together at the end, and each one's request
# waited for a controller that was stopping too (15 s, to the SIGKILL).
LEGACY_OVERRIDES = {"replica.lag.time.max.ms": "3000", "controlled.shutdown.enable": "false"}


@pytest.fixture(scope="module")
def kafka_2_8_3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApacheKafkaCluster]:
    """Apache Kafka 2.8.2 on ZooKeeper: a ZooKeeper and brokers 1..3."""
    require_apache_kafka(LEGACY)
    cluster = ApacheKafkaCluster(tmp_path_factory.mktemp("kafka-2.8.2-3"), brokers=3, version=LEGACY, heap="384m",
                                 overrides=LEGACY_OVERRIDES)  # fmt: skip
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def _topic(kafka: ApacheKafkaCluster) -> Iterator[tuple[str, KafkaSourceCluster]]:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    name = f"crash-{uuid.uuid4().hex[:6]}"
    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap, client_id="kip1279-crash-test")
    try:
        admin.create_topics([NewTopic(name, PARTITIONS, 3, topic_configs={"min.insync.replicas": "2"})])
    finally:
        admin.close()
    port = KafkaSourceCluster(kafka.bootstrap, {"client.id": "kip1279-crash-check"}, metadata_max_age_ms=200)
    try:
        _wait("the topic's leaders", lambda: len(_leaders(port, name)) == PARTITIONS and -1 not in _leaders(port, name).values())
        yield name, port
    finally:
        port.close()


@pytest.fixture
def topic(apache_kafka_3: ApacheKafkaCluster) -> Iterator[tuple[str, KafkaSourceCluster]]:
    yield from _topic(apache_kafka_3)


@pytest.fixture
def legacy_topic(kafka_2_8_3: ApacheKafkaCluster) -> Iterator[tuple[str, KafkaSourceCluster]]:
    yield from _topic(kafka_2_8_3)


def _leaders(port: KafkaSourceCluster, name: str) -> dict[TopicPartition, int]:
    return {p.topic_partition: p.leader for t in port.describe_topics() if t.name == name for p in t.partitions}


def _wait(what: str, predicate: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (got := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.2)
    return got


def _mirror(rig: Rig, kafka: ApacheKafkaCluster, name: str, port: KafkaSourceCluster, extra: str = "") -> None:
    rig.start(("B",))
    rig.ids, rig.tps = {name: next(iter(_leaders(port, name))).topic_id}, sorted(_leaders(port, name))
    rig.topics = {name: PARTITIONS}
    rig.spawn_worker("B")
    props = rig.workdir / f"{MIRROR}.properties"
    props.write_text(f"bootstrap.servers={kafka.bootstrap}\nclient.id=kip1279-crash-mirror\n"
                     f"metadata.refresh.interval.ms=1000\n{RETRIES}{extra}")  # fmt: skip
    rig.cli("B", "--create", "--mirror", MIRROR, "--mirror-config", str(props))
    rig.start_topics("B", MIRROR)
    rig.wait("every partition MIRRORING", lambda: rig.all_in("B", MIRROR, MirrorState.MIRRORING), 60)


def _source_hw(port: KafkaSourceCluster, tp: TopicPartition) -> int | None:
    try:
        return port.list_offsets(tp).hw
    except Exception:  # noqa: BLE001 - a source moving its leaders: asked again
        return None


def _caught_up(rig: Rig, port: KafkaSourceCluster) -> bool:
    b = rig.clients["B"]
    return all((hw := _source_hw(port, tp)) is not None and b.list_offsets(tp).hw == hw for tp in rig.tps)


def _same_as_source(rig: Rig, port: KafkaSourceCluster, *producers: Producer) -> None:
    """B holds the source's batches byte for byte; every acknowledged record is there once."""
    b = rig.clients["B"]
    for tp in rig.tps:
        hw = port.list_offsets(tp).hw
        source, offset = [], 0
        while offset < hw:
            got = port.fetch(tp, offset, 1 << 20, IsolationLevel.READ_UNCOMMITTED).batches
            source += got
            offset = got[-1].next_offset
        on_b = log_batches(b, tp)
        assert [(x.base_offset, x.payload) for x in on_b] == [(x.base_offset, x.payload) for x in source], tp
        records = values(on_b)
        got = dict(records)
        twice = len(records) - len({v for _, v in records})
        assert twice == 0, f"{tp}: {twice} records twice"
        acked = {o: v for producer in producers for (p, o), v in producer.acked.items() if p == tp.partition}
        lost = [o for o, v in acked.items() if got.get(o) != v]
        assert acked and not lost, f"{tp}: acknowledged records lost at offsets {lost[:10]}"


@pytest.mark.slow
def test_leader_sigkilled_while_producing_fails_no_partition_and_loses_nothing(
        broker: LocalBroker, apache_kafka_3: ApacheKafkaCluster, topic: tuple[str, KafkaSourceCluster],
        tmp_path: Path) -> None:  # fmt: skip
    _leader_killed(broker, apache_kafka_3, topic, tmp_path)


@pytest.mark.slow
def test_leader_sigkilled_on_a_kafka_2_8_zookeeper_source_fails_no_partition_and_loses_nothing(
        broker: LocalBroker, kafka_2_8_3: ApacheKafkaCluster, legacy_topic: tuple[str, KafkaSourceCluster],
        tmp_path: Path) -> None:  # fmt: skip
    assert kafka_2_8_3.zookeeper and kafka_2_8_3.version == LEGACY
    _leader_killed(broker, kafka_2_8_3, legacy_topic, tmp_path)


def _leader_killed(broker: LocalBroker, kafka: ApacheKafkaCluster, topic: tuple[str, KafkaSourceCluster],
                   tmp_path: Path) -> None:  # fmt: skip
    name, port = topic
    rig = Rig(tmp_path, broker.bootstrap, {}, tick=0.1, seed=41)
    rig.loglevel += ",streams.kafka.connection=info"  # the request versions chosen, printed below
    producer = Producer(kafka.bootstrap, name).start()
    killed: int | None = None
    try:
        _mirror(rig, kafka, name, port)  # source.unavailable.timeout.ms at its default
        rig.wait("B caught up under load", lambda: all(rig.clients["B"].list_offsets(tp).hw > 0 for tp in rig.tps), 60)
        tp0 = rig.tps[0]
        killed = _leaders(port, name)[tp0]
        kafka.stop_node(killed, kill=True)
        at_kill = time.monotonic()
        hw_at_kill = rig.clients["B"].list_offsets(tp0).hw

        # Until a new leader is elected and B has what it took since: --describe sampled throughout.
        samples: list[dict[str, Any]] = []
        moved = False
        while True:
            rows = rig.describe("B", MIRROR)
            samples += rows
            assert not [r for r in rows if r["state"] != "MIRRORING"], [
                (r["partition"], r["state"], r["errorMessage"]) for r in rows]  # fmt: skip
            leaders = _leaders(port, name)
            moved = moved or leaders.get(tp0, killed) not in (killed, -1)
            if moved and rig.clients["B"].list_offsets(tp0).hw > hw_at_kill + 50:
                break
            assert time.monotonic() - at_kill < 90, "no new leader mirrored within 90 s"
            time.sleep(0.3)
        took = time.monotonic() - at_kill
        assert len(samples) >= 3 * PARTITIONS, samples
        assert max(r["lag"] for r in samples) > 0, "the lag shows the delay"
        kafka.start_node(killed, wait=False)
        time.sleep(1.0)
        producer.stop()
        assert not producer.errors, producer.errors[:3]
        rig.wait("B equal to the source", lambda: _caught_up(rig, port), 60)
        _same_as_source(rig, port, producer)
        assert rig.describe("B", MIRROR, "--failed") == []
        history = rig.history("B")
        assert history_problems(history) == [], history
        ours = {k: [s.state for s in v] for k, v in history.items() if k[0] == MIRROR}
        assert len(ours) == PARTITIONS and not [k for k, v in ours.items() if MirrorState.FAILED in v], ours
        chosen = sorted(set(re.findall(rf"source {re.escape(kafka.bootstrap)} broker \d+: (\w+ v\d+|no \w+)",
                                       rig.worker_log("worker-B"))))  # fmt: skip
        print(f"Kafka {kafka.version}: leader {killed} killed: partition mirrored from its new leader {took:.1f} s "
              f"later, never FAILED; requests: {'; '.join(chosen)}")  # fmt: skip
    finally:
        producer.halt.set()
        rig.close()
        if killed is not None:
            kafka.start_node(killed, wait=False)
        kafka.wait_ready()


@pytest.mark.slow
def test_every_broker_sigkilled_fails_partitions_after_the_timeout_then_they_mirror_again(
        broker: LocalBroker, apache_kafka_3: ApacheKafkaCluster, topic: tuple[str, KafkaSourceCluster],
        tmp_path: Path) -> None:  # fmt: skip
    kafka, (name, port) = apache_kafka_3, topic
    timeout_ms = 3000
    rig = Rig(tmp_path, broker.bootstrap, {}, tick=0.1, seed=43)
    producer = first = Producer(kafka.bootstrap, name).start()
    brokers = [n.node_id for n in kafka.brokers]
    try:
        _mirror(rig, kafka, name, port, f"source.unavailable.timeout.ms={timeout_ms}\n")
        rig.wait("B caught up under load", lambda: all(rig.clients["B"].list_offsets(tp).hw > 0 for tp in rig.tps), 60)
        producer.stop()  # what it sent is acknowledged: nothing in flight while the source is gone
        rig.wait("B equal to the source", lambda: _caught_up(rig, port), 60)
        killed_ms = int(time.time() * 1000)
        for node_id in brokers:
            kafka.stop_node(node_id, kill=True)
        at_kill = time.monotonic()
        before = []
        while not (rows := rig.describe("B", MIRROR)) or any(r["state"] != "FAILED" for r in rows):
            if time.monotonic() - at_kill < timeout_ms / 1000:
                before += rows
            assert time.monotonic() - at_kill < timeout_ms / 1000 + 10, rows
            time.sleep(0.2)
        took = time.monotonic() - at_kill
        assert before and all(r["state"] == "MIRRORING" for r in before), "nothing FAILED within the timeout"
        for r in rows:
            assert r["errorMessage"].startswith("NETWORK_EXCEPTION"), r
        history = rig.history("B")
        for key, states in history.items():
            failed = next(s for s in states if s.state is MirrorState.FAILED)
            assert failed.entered_at_ms - killed_ms >= timeout_ms, (key, failed.entered_at_ms - killed_ms)

        for node_id in brokers:
            kafka.start_node(node_id, wait=False)
        kafka.wait_ready()
        back = time.monotonic()
        rig.wait("every partition MIRRORING again", lambda: rig.all_in("B", MIRROR, MirrorState.MIRRORING), 60)
        producer = Producer(kafka.bootstrap, name, tag="after").start()
        time.sleep(1.0)
        producer.stop()
        rig.wait("B equal to the source", lambda: _caught_up(rig, port), 60)
        _same_as_source(rig, port, first, producer)
        assert history_problems(rig.history("B")) == []
        print(f"all brokers killed: FAILED {took:.1f} s later (timeout {timeout_ms} ms); "
              f"MIRRORING {time.monotonic() - back:.1f} s after they were back")
    finally:
        producer.halt.set()
        rig.close()
        for node_id in brokers:
            if not kafka.node(node_id).is_running():
                kafka.start_node(node_id, wait=False)
        kafka.wait_ready()
