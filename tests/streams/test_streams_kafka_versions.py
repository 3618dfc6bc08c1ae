"""The source version matrix (issue #39): the Apache Kafka versions users migrate off, each
mirrored into B byte for byte and then failed over.

One single-broker source per version: every ``tools/kafka/versions/<version>/`` that ``bin/setup``
fetched (2.8.2 and 3.0.2 on ZooKeeper, from the same classpath; 3.7.2, 3.9.1 and 4.1.2 in KRaft
mode) and the pinned version (tools/kafka/pom.xml, KRaft). All start at once and are loaded at once
(the module's fixture), by real aiokafka clients: a topic of one partition per codec (none, gzip,
snappy, lz4, zstd), idempotent records, transactions committed, aborted and one left open, a
compacted topic with a tombstone, and a consumer group's commits. Then, per version, B's
controller and a ``kip1279-worker`` mirror it over PLAINTEXT and ``--stop`` it. Checked:

- B's topics have the source's topic IDs; B's batches are the broker's own (its ``.log``
  segments) byte for byte, each codec's batches as compressed; log start, HW and LSO equal;
- read_committed on B reads what a real read_committed consumer reads on the source;
- the group's committed offsets and the compacted topic's ``cleanup.policy`` are synced;
- ``--stop``: every partition STOPPED, B writable, the open transaction aborted on B once;
- the worker logged the request version it chose for each API against the broker (the
  ``streams.kafka.connection`` INFO lines), each within the range the broker's own ApiVersions
  answer gives, the highest both sides know for Fetch; printed with the times (``-s``).

A version whose jars are missing is skipped (a failure under KIP1279_REQUIRE_KAFKA=1, as CI runs);
a version that cannot start fails.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
import socket
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from kafka_fixtures import REQUIRE_ENV, kafka_required
from kafka_source_data import assert_offsets_and_reads_alike, commit_and_leave_open, segment_batches
from worker_harness import Rig

from coordinator.states import MirrorState
from streams.brokers.apache_kafka import ApacheKafkaCluster
from streams.brokers.kafka_clusters import start_clusters
from streams.brokers.kafka_jars import missing_reason, source_versions
from streams.brokers.noida import LocalBroker, _recv_exactly
from streams.demo.harness import failover_aborts, log_batches
from streams.kafka.source import KafkaSourceCluster

VERSIONS = source_versions()
MIRROR = "legacy"
CODECS = (None, "gzip", "snappy", "lz4", "zstd")  # partition i of "codecs" holds codec i's batches
TOPICS = {"codecs": len(CODECS), "idem": 2, "txn": 2, "compacted": 1}
CONFIGS = {"compacted": {"cleanup.policy": "compact"}, "txn": {"retention.ms": "86400000"}}
GROUP = "legacy-app"
GROUP_OFFSETS = {("codecs", 0): 4, ("codecs", 4): 9, ("idem", 1): 5, ("compacted", 0): 3}
OPEN_TXN = "legacy-open"
# The worker's line for each request version it chooses (streams/kafka/connection.py).
VERSION_LINE = re.compile(r"source (\S+) broker (\d+): (\w+) v(\d+) \(the broker offers v(-?\d+)-v(-?\d+)\)")
LACKS_LINE = re.compile(r"source (\S+) broker (\d+): no (\w+) \(api key (\d+)\)")
API_KEYS = {"Fetch": 1, "ListOffsets": 2, "Metadata": 3, "OffsetFetch": 9, "FindCoordinator": 10,
            "DescribeGroups": 15, "ListGroups": 16, "OffsetForLeaderEpoch": 23, "DescribeAcls": 29,
            "DescribeConfigs": 32}  # fmt: skip


@dataclass
class Source:
    version: str
    cluster: ApacheKafkaCluster | None = None
    problem: str | None = None  # why it did not start (a failure) ...
    missing: str | None = None  # ... or why it could not (a skip, unless Kafka is required)
    open_txn: AIOKafkaProducer | None = None
    timings: dict[str, float] = field(default_factory=dict)


async def load(bootstrap: str) -> AIOKafkaProducer:
    """Writes the matrix's data to one source; returns the producer whose transaction is left open."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(t, n, 1, topic_configs=CONFIGS.get(t, {})) for t, n in TOPICS.items()])
    finally:
        await admin.close()
    # One producer per codec; send() then flush() puts several records in a batch.
    for partition, codec in enumerate(CODECS):
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type=codec, linger_ms=20)
        await p.start()
        try:
            for i in range(24):
                await p.send("codecs", f"{codec}-{i}".encode() * 4, key=f"k{i % 5}".encode(), partition=partition)
            await p.flush()
        finally:
            await p.stop()
    idem = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all", linger_ms=10)
    await idem.start()
    try:
        for i in range(20):
            await idem.send("idem", f"idem-{i}".encode(), partition=i % 2)
            if i % 5 == 4:
                await idem.flush()
    finally:
        await idem.stop()
    txn = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="legacy-txn", compression_type="lz4")
    await txn.start()
    try:
        for n in range(6):
            await txn.begin_transaction()
            for i in range(4):
                await txn.send_and_wait("txn", f"txn-{n}-{i}".encode(), partition=(n + i) % 2)
            if n % 3 == 2:
                await txn.abort_transaction()
            else:
                await txn.commit_transaction()
    finally:
        await txn.stop()
    keyed = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await keyed.start()
    try:
        for i in range(15):
            await keyed.send_and_wait("compacted", f"v{i}".encode(), key=f"key-{i % 4}".encode())
        await keyed.send_and_wait("compacted", None, key=b"key-0")  # a tombstone
    finally:
        await keyed.stop()
    return await commit_and_leave_open(bootstrap, GROUP, GROUP_OFFSETS, OPEN_TXN,
                                       [("txn", b"open-1", 1), ("codecs", b"open-2", 0)])  # fmt: skip


async def _load_all(bootstraps: list[str]) -> list[Any]:
    return await asyncio.gather(*(load(b) for b in bootstraps), return_exceptions=True)


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Source]]:
    """Every version's source, started at once and loaded at once."""
    out = {v: Source(v, missing=missing_reason(version=v)) for v in VERSIONS}
    runnable = [s for s in out.values() if s.missing is None]
    base = tmp_path_factory.mktemp("kafka-versions")
    for s in runnable:
        s.cluster = ApacheKafkaCluster(base / s.version, brokers=1, version=s.version, heap="256m")
    t0 = time.monotonic()
    failures = start_clusters([s.cluster for s in runnable])  # type: ignore[misc]
    for i, s in enumerate(runnable):
        if i in failures:
            s.problem = f"Kafka {s.version} did not start: {failures[i]}"
        else:
            s.timings["ready_s"] = s.cluster.startup_s or 0.0  # type: ignore[union-attr]
    loop = asyncio.new_event_loop()
    started = [s for s in runnable if s.problem is None]
    try:
        t1 = time.monotonic()
        loaded = loop.run_until_complete(_load_all([s.cluster.bootstrap for s in started]))  # type: ignore[union-attr]
        for s, got in zip(started, loaded):
            if isinstance(got, BaseException):
                s.problem = f"Kafka {s.version} could not be loaded: {type(got).__name__}: {got}"
            else:
                s.open_txn = got
                s.timings["loaded_s"] = time.monotonic() - t1
        print(f"\nsource matrix: {len(started)} of {len(VERSIONS)} versions up and loaded in {time.monotonic() - t0:.1f} s")
        yield out
    finally:
        for s in started:
            if s.open_txn is not None:
                loop.run_until_complete(s.open_txn.stop())
        loop.close()
        with concurrent.futures.ThreadPoolExecutor(max(1, len(runnable))) as pool:
            list(pool.map(lambda s: s.cluster.stop(), runnable))  # type: ignore[union-attr]


def api_versions(host: str, port: int) -> dict[int, tuple[int, int]]:
    """The broker's own ApiVersions v0 answer: api key -> (min, max)."""
    body = struct.pack(">hhih", 18, 0, 39, len(b"kip1279-matrix")) + b"kip1279-matrix"
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.settimeout(10)
        sock.sendall(struct.pack(">i", len(body)) + body)
        (size,) = struct.unpack(">i", _recv_exactly(sock, 4))
        data = _recv_exactly(sock, size)
    cid, error, n = struct.unpack_from(">ihi", data, 0)
    assert cid == 39 and error == 0, (cid, error)
    return {k: (lo, hi) for k, lo, hi in (struct.unpack_from(">hhh", data, 10 + 6 * i) for i in range(n))}


def _codec(raw: bytes) -> int:
    return int.from_bytes(raw[21:23], "big") & 0x7  # RecordBatch attributes, bits 0-2


@pytest.mark.slow
@pytest.mark.parametrize("version", VERSIONS)
def test_mirror_and_stop_from_each_kafka_version(version: str, sources: dict[str, Source], broker: LocalBroker,
                                                 tmp_path: Path) -> None:  # fmt: skip
    source = sources[version]
    if source.missing is not None:
        if kafka_required():
            pytest.fail(f"{REQUIRE_ENV}=1 but {source.missing}", pytrace=False)
        pytest.skip(source.missing)
    assert source.problem is None, source.problem
    kafka = source.cluster
    assert kafka is not None
    t0 = time.monotonic()
    loop = asyncio.new_event_loop()
    port = KafkaSourceCluster(kafka.bootstrap, {"client.id": "kip1279-matrix-check"})
    rig = Rig(tmp_path, broker.bootstrap, {}, tick=0.1, seed=39)
    rig.loglevel += ",streams.kafka.connection=info"
    try:
        topics = {t.name: t for t in port.describe_topics() if t.name in TOPICS}
        assert set(topics) == set(TOPICS)
        names = {p.topic_partition: (n, p.partition) for n, t in topics.items() for p in t.partitions}
        rig.start(("B",))
        rig.ids = {n: t.topic_id for n, t in topics.items()}
        rig.tps = sorted(names)
        worker = rig.spawn_worker("B")
        b = rig.clients["B"]
        props = tmp_path / f"{MIRROR}.properties"
        props.write_text(f"bootstrap.servers={kafka.bootstrap}\nclient.id=kip1279-matrix-mirror\n"
                         "metadata.refresh.interval.ms=1000\n")  # fmt: skip
        rig.cli("B", "--create", "--mirror", MIRROR, "--mirror-config", str(props))
        rig.wait("the source's topics registered", lambda: rig.run_cli(
            "B", "--start", "--mirror", MIRROR, "--topics", ",".join(TOPICS))[0] == 0, 30)  # fmt: skip
        rig.wait("every partition MIRRORING", lambda: rig.all_in("B", MIRROR, MirrorState.MIRRORING), 60)
        src = {tp: port.list_offsets(tp) for tp in rig.tps}
        rig.wait("lag 0", lambda: all(b.list_offsets(tp).hw >= src[tp].hw for tp in rig.tps), 60)
        mirrored_s = time.monotonic() - t0

        # The same topic IDs; the broker's own batches byte for byte, each codec as compressed.
        assert {t.name: t.topic_id for t in b.describe_topics(list(rig.ids.values()))} == rig.ids
        node = kafka.brokers[0]
        for tp in rig.tps:
            name, partition = names[tp]
            held = [(o, raw) for o, raw in segment_batches(node.log_dir / f"{name}-{partition}") if o < src[tp].hw]
            on_b = log_batches(b, tp)
            assert [(x.base_offset, x.payload) for x in on_b] == held, names[tp]
            if name == "codecs":
                data = [raw for _, raw in held if not _is_control(raw)]
                assert data and {_codec(raw) for raw in data} == {partition}, (names[tp], {_codec(r) for r in data})
        assert_offsets_and_reads_alike(b, rig.tps, src, names, kafka.bootstrap, loop)

        # The syncs: the group's commits, the compacted topic's policy.
        want = {(rig.ids[t], p): o for (t, p), o in GROUP_OFFSETS.items()}
        rig.wait("group offsets synced", lambda: {(o.topic_id, o.partition): o.offset
                                                  for o in b.group_offsets(GROUP)} == want, 30)  # fmt: skip
        rig.wait("cleanup.policy synced", lambda: b.describe_configs(rig.ids["compacted"]).get("cleanup.policy") == "compact", 30)

        # Failover: --stop; the transaction left open on the source is aborted on B, once.
        open_at_stop = {tp: b.open_transactions(tp) for tp in rig.tps}
        assert sum(len(o) for o in open_at_stop.values()) == 2, open_at_stop
        rig.cli("B", "--stop", "--mirror", MIRROR, "--topics", ",".join(TOPICS))
        rig.wait("every partition STOPPED", lambda: rig.all_in("B", MIRROR, MirrorState.STOPPED), 60)
        rig.wait("B's topics writable", lambda: not any(rig.read_only("B").values()), 30)
        for tp, opens in open_at_stop.items():
            assert failover_aborts(log_batches(b, tp), opens) == [], names[tp]
            assert not b.open_transactions(tp), names[tp]
        total_s = time.monotonic() - t0

        # The request versions the worker chose against the broker, within what the broker offers.
        offered = api_versions(kafka.host, node.broker_port or 0)
        chosen: dict[str, tuple[int, int, int]] = {}
        for m in VERSION_LINE.finditer(rig.worker_log(worker)):
            if m.group(1) == kafka.bootstrap:
                chosen[m.group(3)] = (int(m.group(4)), int(m.group(5)), int(m.group(6)))
        assert {"Fetch", "ListOffsets", "Metadata", "OffsetFetch", "DescribeConfigs"} <= set(chosen), chosen
        for api, (v, lo, hi) in chosen.items():
            assert (lo, hi) == offered[API_KEYS[api]] and lo <= v <= hi, (api, v, offered[API_KEYS[api]])
        assert chosen["Fetch"][0] == min(12, offered[1][1])  # the highest both know (12: topic names)
        lacks = {m.group(3): int(m.group(4)) for m in LACKS_LINE.finditer(rig.worker_log(worker))
                 if m.group(1) == kafka.bootstrap}  # fmt: skip
        assert "ReadMirrorStates" in lacks and not set(lacks.values()) & set(offered), (lacks, sorted(offered))
        mode = "ZooKeeper" if kafka.zookeeper else "KRaft"
        print(f"\nKafka {version} ({mode}): ready {source.timings['ready_s']:.1f} s, loaded "
              f"{source.timings['loaded_s']:.1f} s (all versions at once); mirrored {mirrored_s:.1f} s, "
              f"checked and stopped {total_s:.1f} s; versions: "
              + ", ".join(f"{api} v{v} (offers {lo}-{hi})" for api, (v, lo, hi) in sorted(chosen.items()))
              + f"; not sent: {', '.join(sorted(lacks))}; the broker offers OffsetForLeaderEpoch "
              f"{'-'.join(map(str, offered[23]))}, API 90: {90 in offered}, API 100: {100 in offered}")
    finally:
        rig.close()
        port.close()
        loop.close()


def _is_control(raw: bytes) -> bool:
    return bool(int.from_bytes(raw[21:23], "big") & 0x20)
