"""End to end, real processes: mirror from a real Kafka-protocol broker into model cluster B.

The source (``mirror_source``, parametrised) is either a second noida-db 0.2.3 (its own port and
data directory, not the coordinator's broker) or the session's 3-broker Apache Kafka 4.4
(``loaded_kafka_source``, replication factor 3), written by real aiokafka producers: plain (uncompressed and gzip), idempotent, and
transactional records committed, aborted and one transaction left open, over three topics and
seven partitions, plus a consumer group's committed offsets and explicit topic configs. B's
controller and a ``kip1279-worker`` run the mirror (``bootstrap.servers=<host:port>``: the
worker's source port is ``streams.kafka.source.KafkaSourceCluster``). Checked:

- B's batches are the source's byte for byte, as the broker itself holds them (noida-db's
  ``kafka.json``, the Kafka leader's ``.log`` segments): same offsets, CRCs, producer fields, markers; lag 0 (``--describe``);
- B's LSO is the source's (the open transaction was copied), and read_committed on B reads
  what a real read_committed consumer reads on the source;
- the consumer group's committed offsets and the topic configs are synced to B;
- the source stopped: every partition FAILED (NETWORK_EXCEPTION) and retried with backoff
  (noida-db only: stopping and restarting the shared Kafka cluster would cost ~15 s);
- ``--stop`` meanwhile: every partition STOPPED, the open transaction aborted on B, B writable.

Where noida-db is not Kafka, and how the port and the core take it (docs/kafka-source.md):
no topic IDs in Metadata (the port derives stable ones from the cluster ID and the name); one
constant cluster ID for every instance; leader epochs always 0 and data batches keeping the
producer's partitionLeaderEpoch -1 (B's epoch cache skips negative epochs, as Kafka's does, so
DLE >= SLE = 0 holds trivially); Fetch size limits ignored (the port trims); READ_COMMITTED
Fetch drops aborted batches itself (the mirror fetches READ_UNCOMMITTED); no KIP-1279
ReadMirrorStates, so no LME: partitions align from offset 0, as KIP-1279 says of an old source.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kafka_fixtures import require_apache_kafka
from kafka_source_data import (
    assert_offsets_and_reads_alike,
    CONFIGS,
    GROUP,
    GROUP_OFFSETS,
    TOPICS,
    broker_log,
    elect_unclean,
    load_source,
    new_topic,
    produce,
    running_brokers,
    segment_batches,
    values,
)
from worker_harness import Rig

from coordinator.ports import IsolationLevel
from coordinator.states import MirrorState
from streams.brokers.noida import LocalBroker
from streams.demo.harness import log_batches
from streams.kafka.source import KafkaSourceCluster

MIRROR = "from-kafka"
Held = dict[tuple[str, int], list[tuple[int, bytes]]]


@dataclass
class MirrorSource:
    kind: str
    bootstrap: str
    held: Callable[[dict[tuple[str, int], int]], Held]  # the broker's own raw batches per partition
    stop: Callable[[], None] | None  # None: the source is shared and stays up


@pytest.fixture(params=["noida-db", "apache-kafka"])
def mirror_source(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MirrorSource]:
    if request.param == "apache-kafka":
        require_apache_kafka()
        kafka = request.getfixturevalue("loaded_kafka_source")
        port = KafkaSourceCluster(kafka.bootstrap)
        try:
            leaders = {(t.name, p.partition): p.leader for t in port.describe_topics() for p in t.partitions}
        finally:
            port.close()

        def held(hws: dict[tuple[str, int], int]) -> Held:
            return {k: segment_batches(kafka.node(leaders[k]).log_dir / f"{k[0]}-{k[1]}") for k in hws}

        yield MirrorSource("apache-kafka", kafka.bootstrap, held, None)
        return
    source = LocalBroker(tmp_path / "source-broker")
    source.start()
    loop = asyncio.new_event_loop()
    open_txn = None
    try:
        open_txn = loop.run_until_complete(load_source(source.bootstrap))
        yield MirrorSource("noida-db", source.bootstrap, lambda hws: broker_log(source.data_dir, hws), source.stop)
    finally:
        if open_txn is not None:
            loop.run_until_complete(open_txn.stop())
        loop.close()
        source.stop()


@pytest.mark.slow
def test_mirror_from_a_real_broker_byte_for_byte_then_failover(broker: LocalBroker, mirror_source: MirrorSource,
                                                              tmp_path: Path) -> None:  # fmt: skip
    source = mirror_source
    loop = asyncio.new_event_loop()
    port = KafkaSourceCluster(source.bootstrap, {"client.id": "kip1279-e2e-check"})
    rig = Rig(tmp_path, broker.bootstrap, {}, tick=0.1, seed=13)
    try:
        topics = {t.name: t for t in port.describe_topics() if t.name in TOPICS}
        assert len(topics) == len(TOPICS)
        names = {tp: (n, tp.partition) for n, t in topics.items() for tp in (p.topic_partition for p in t.partitions)}
        rig.start(("B",))
        rig.ids = {n: t.topic_id for n, t in topics.items()}  # what the rig's checks go by (start() resets them)
        rig.tps = sorted(names)
        rig.spawn_worker("B")
        b = rig.clients["B"]
        props = tmp_path / f"{MIRROR}.properties"
        props.write_text(f"bootstrap.servers={source.bootstrap}\nclient.id=kip1279-mirror-e2e\n"
                         "metadata.refresh.interval.ms=1000\n"
                         "failed.retry.initial.backoff.ms=300\nfailed.retry.max.backoff.ms=1500\n"
                         "source.unavailable.timeout.ms=1000\n")  # fmt: skip
        rig.cli("B", "--create", "--mirror", MIRROR, "--mirror-config", str(props))
        rig.wait("the source's topics registered", lambda: rig.run_cli(
            "B", "--start", "--mirror", MIRROR, "--topics", ",".join(TOPICS))[0] == 0, 30)  # fmt: skip
        rig.wait("every partition MIRRORING", lambda: rig.all_in("B", MIRROR, MirrorState.MIRRORING), 60)
        src = {tp: port.list_offsets(tp) for tp in rig.tps}
        rig.wait("lag 0", lambda: all(b.list_offsets(tp).hw >= src[tp].hw for tp in rig.tps), 60)
        rows = rig.describe("B", MIRROR)
        assert len(rows) == len(rig.tps) and all(r["lag"] == 0 and r["state"] == "MIRRORING" for r in rows), rows
        assert {(r["topic"], r["partition"]): r["sourceOffset"] for r in rows} == {names[tp]: src[tp].hw for tp in rig.tps}

        # Byte for byte: B holds the source broker's own batches, and nothing else below its HW.
        held = source.held({names[tp]: src[tp].hw for tp in rig.tps})
        fetched = {tp: [] for tp in rig.tps}
        for tp in rig.tps:
            offset = 0
            while offset < src[tp].hw:
                got = port.fetch(tp, offset, 1 << 20, IsolationLevel.READ_UNCOMMITTED).batches
                fetched[tp] += got
                offset = got[-1].next_offset
        for tp in rig.tps:
            on_b = log_batches(b, tp)
            # (noida-db's snapshot also ends a still-open transaction with an ABORT marker past the
            # HW, what a restart would find; the log it serves has none.)
            assert [(x.base_offset, x.payload) for x in on_b] == [(o, raw) for o, raw in held[names[tp]]
                                                                  if o < src[tp].hw], names[tp]  # fmt: skip
            assert [(x.last_offset, x.leader_epoch, x.producer_id, x.producer_epoch, x.base_sequence,
                     x.is_transactional, x.control_type) for x in on_b] == [
                (x.last_offset, x.leader_epoch, x.producer_id, x.producer_epoch, x.base_sequence,
                 x.is_transactional, x.control_type) for x in fetched[tp]], names[tp]  # fmt: skip
        assert_offsets_and_reads_alike(b, rig.tps, src, names, source.bootstrap, loop)

        # Syncs: the source group's committed offsets, the topics' explicit configs.
        want = {(rig.ids[t], p): o for (t, p), o in GROUP_OFFSETS.items()}
        rig.wait("group offsets synced", lambda: {(o.topic_id, o.partition): o.offset
                                                  for o in b.group_offsets(GROUP)} == want, 30)  # fmt: skip
        for name, configs in CONFIGS.items():
            rig.wait(f"{name}'s configs synced", lambda name=name, configs=configs: configs.items()
                     <= b.describe_configs(rig.ids[name]).items(), 30)  # fmt: skip
        assert all(b.describe_topics([tid])[0].read_only for tid in rig.ids.values())

        # The source goes away: SourceUnavailable, every partition FAILED (NETWORK_EXCEPTION), retried.
        open_on_b = [tp for tp in rig.tps if b.open_transactions(tp)]
        assert open_on_b
        if source.stop is not None:
            source.stop()
            rig.wait("every partition FAILED, retried", lambda: len(rows := rig.describe("B", MIRROR)) == len(rig.tps)
                     and all(r["state"] == "FAILED" and r["retryAttempt"] >= 1 for r in rows), 60)  # fmt: skip
            assert all(r["errorMessage"].startswith("NETWORK_EXCEPTION") for r in rig.describe("B", MIRROR))

        # Failover without the source: --stop; the transaction left open on the source is aborted
        # on B; B writable.
        rig.cli("B", "--stop", "--mirror", MIRROR, "--topics", ",".join(TOPICS))
        rig.wait("every partition STOPPED", lambda: rig.all_in("B", MIRROR, MirrorState.STOPPED), 60)
        rig.wait("B's topics writable", lambda: not any(rig.read_only("B").values()), 30)
        assert all(not b.open_transactions(tp) for tp in rig.tps)
        leo = b.list_offsets(rig.tps[0]).leo
        written = b.produce(names[rig.tps[0]][0], rig.tps[0].partition, [(b"k", b"written on B")], acks=1)
        assert written.base_offset >= leo
    finally:
        rig.close()
        port.close()
        loop.close()


def _source_partition(port: KafkaSourceCluster, name: str) -> Any:
    return next((p for t in port.describe_topics() if t.name == name for p in t.partitions), None)


def _wait(what: str, predicate: Callable[[], Any], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (got := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)
    return got


@pytest.mark.slow
def test_epoch_bump_and_unclean_election_on_kafka_converge_on_b(broker: LocalBroker, apache_kafka_3: Any,
                                                                  tmp_path: Path) -> None:  # fmt: skip
    """The prototype's ``epoch_bump`` and ``log_convergence_ule`` with A on Apache Kafka (no KIP-1279:
    no LME, no failback onto A) and B on the model. A topic on brokers 1 and 2: its leader stops
    (leader epoch bumped) before and while mirroring; the second stop leaves a stale follower, the
    leader takes a record alone and dies, the stale follower comes back and an UNCLEAN election
    makes it leader, and it takes two records. After each step B holds the source leader's log byte for byte
    (the lost record truncated away), lag 0, DLE >= SLE."""
    kafka = apache_kafka_3
    name = f"ule-e2e-{uuid.uuid4().hex[:6]}"
    new_topic(kafka, name, [1, 2], {"min.insync.replicas": "1"})
    port = KafkaSourceCluster(kafka.bootstrap, {"client.id": "kip1279-ule-check"}, metadata_max_age_ms=500)
    rig = Rig(tmp_path, broker.bootstrap, {}, tick=0.1, seed=17)
    stopped: list[int] = []

    def converged(step: str) -> None:
        def same() -> bool:
            meta, off = _source_partition(port, name), port.list_offsets(tp)
            on_b = log_batches(b, tp)
            held = [(o, raw) for o, raw in segment_batches(kafka.node(meta.leader).log_dir / f"{name}-0") if o < off.hw]
            return [(x.base_offset, x.payload) for x in on_b] == held and b.list_offsets(tp).hw == off.hw
        rig.wait(f"B converged to the source's log ({step})", same, 60)
        sle, dle = _source_partition(port, name).leader_epoch, b.list_offsets(tp).leader_epoch
        assert dle >= sle, (step, dle, sle)
        rows = rig.describe("B", MIRROR)
        assert [(r["state"], r["lag"]) for r in rows] == [("MIRRORING", 0)], (step, rows)

    try:
        # epoch_bump before mirroring: leader 1 stops, 2 leads at a higher epoch; 1 comes back.
        produce(kafka.running_bootstrap, name, [b"a0"])
        first = _wait("broker 1 leading", lambda: (p := _source_partition(port, name)) and p.leader == 1 and p)
        tp = first.topic_partition
        kafka.stop_node(1)
        _wait("broker 2 leading", lambda: _source_partition(port, name).leader == 2)
        kafka.start_node(1, wait=False)
        produce(kafka.running_bootstrap, name, [b"a1"])
        rig.start(("B",))
        rig.ids, rig.tps = {name: tp.topic_id}, [tp]
        rig.spawn_worker("B")
        b = rig.clients["B"]
        props = tmp_path / f"{MIRROR}.properties"
        props.write_text(f"bootstrap.servers={kafka.bootstrap}\nmetadata.refresh.interval.ms=500\n"
                         "failed.retry.initial.backoff.ms=300\nfailed.retry.max.backoff.ms=1000\n")  # fmt: skip
        rig.cli("B", "--create", "--mirror", MIRROR, "--mirror-config", str(props))
        rig.wait("the topic registered", lambda: rig.run_cli("B", "--start", "--mirror", MIRROR, "--topics", name)[0] == 0, 30)
        rig.wait("MIRRORING", lambda: rig.all_in("B", MIRROR, MirrorState.MIRRORING), 60)
        converged("epoch bumped before the mirror")
        assert _source_partition(port, name).leader_epoch > first.leader_epoch

        # epoch_bump while mirroring: 2 stops once 1 is back in the ISR; 1 leads at a higher epoch.
        _wait("broker 1 back in the ISR", lambda: sorted(_source_partition(port, name).isr) == [1, 2], 60)
        e = _source_partition(port, name).leader_epoch
        kafka.stop_node(2, kill=True)
        stopped.append(2)
        _wait("broker 1 leading alone", lambda: (p := _source_partition(port, name)).leader == 1 and p.isr == (1,))
        produce(kafka.running_bootstrap, name, [b"a2", b"a3"])
        assert _source_partition(port, name).leader_epoch > e
        converged("epoch bumped while mirroring")

        # log_convergence_ule: 2 is now the stale follower; the leader takes one record alone.
        produce(kafka.running_bootstrap, name, [b"lost"])
        converged("the follower stale")
        assert [v for _, v in values(log_batches(b, tp))][-1] == b"lost"
        # The leader goes; the stale follower comes back and is elected uncleanly: "lost" is gone.
        kafka.stop_node(1, kill=True)
        stopped.append(1)
        kafka.start_node(2, wait=False)
        stopped.remove(2)
        _wait("broker 2 back", lambda: 2 in running_brokers(kafka), 60)
        elect_unclean(kafka, name)
        _wait("the stale follower leading", lambda: (p := _source_partition(port, name)) and p.leader == 2)
        produce(kafka.running_bootstrap, name, [b"c0", b"c1"])
        converged("after the UNCLEAN election")
        # Broker 2 went stale before a2: a2, a3 and "lost" (acknowledged by the ISR {1}) are gone.
        assert [v for _, v in values(log_batches(b, tp))] == [b"a0", b"a1", b"c0", b"c1"]
    finally:
        rig.close()
        port.close()
        for node_id in stopped:
            kafka.start_node(node_id, wait=False)
        kafka.wait_ready()
