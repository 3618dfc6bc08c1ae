"""A source noida-db broker loaded by real aiokafka producers, for the Kafka source port tests.

``load_source`` writes, over several topics and partitions: plain records (uncompressed and
gzip, several records per batch), idempotent records, and transactions committed, aborted and
one left open; a consumer group commits offsets; topics get explicit configs. It returns the
producer holding the open transaction (the caller ends it).

Reading helpers decode raw RecordBatches with kafka-python's record code (another
implementation than ours, and it inflates gzip), and read the broker's own copy of its log from
its data directory: noida-db 0.2.3 snapshots every partition's raw batches to ``kafka.json``
about a second after a write.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition as KafkaTP
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.record.memory_records import MemoryRecords

from coordinator.ports import Batch, ControlType, IsolationLevel, TopicPartition
from streams.brokers.apache_kafka import ApacheKafkaCluster
from streams.brokers.kafka_probes import metadata_broker_ids
from streams.brokers.kafka_jars import java_command

TOPICS = {"plain": 3, "idem": 2, "txn": 2}
CONFIGS = {"plain": {"retention.ms": "604800001"}, "txn": {"max.message.bytes": "2000000", "retention.ms": "86400000"}}
GROUP = "src-group"
GROUP_OFFSETS = {("plain", 0): 3, ("plain", 1): 5, ("idem", 0): 7}
OPEN_TXN = "src-open"


async def load_source(bootstrap: str, scale: int = 1, replication: int = 1) -> AIOKafkaProducer:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(t, n, replication, topic_configs=CONFIGS.get(t, {})) for t, n in TOPICS.items()])
    finally:
        await admin.close()
    # Plain: one producer uncompressed, one gzip; send() then flush() puts several records in a batch.
    for compression in (None, "gzip"):
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type=compression, linger_ms=20)
        await p.start()
        try:
            for i in range(40 * scale):
                await p.send("plain", f"{compression}-{i}".encode() * 3, key=f"k{i % 7}".encode(), partition=i % 3)
            await p.flush()
        finally:
            await p.stop()
    idem = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all")
    await idem.start()
    try:
        for i in range(30 * scale):
            await idem.send_and_wait("idem", f"idem-{i}".encode(), partition=i % 2)
    finally:
        await idem.stop()
    txn = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="src-txn")
    await txn.start()
    try:
        for n in range(6 * scale):
            await txn.begin_transaction()
            for i in range(4):
                await txn.send_and_wait("txn" if i % 2 else "plain", f"txn-{n}-{i}".encode(), partition=(n + i // 2) % 2)
            if n % 3 == 2:
                await txn.abort_transaction()
            else:
                await txn.commit_transaction()
    finally:
        await txn.stop()
    return await commit_and_leave_open(bootstrap, GROUP, GROUP_OFFSETS, OPEN_TXN,
                                       [("txn", b"open-1", 1), ("plain", b"open-2", 2)])  # fmt: skip


async def commit_and_leave_open(bootstrap: str, group: str, offsets: dict[tuple[str, int], int], open_txn: str,
                                sends: list[tuple[str, bytes, int]]) -> AIOKafkaProducer:  # fmt: skip
    """The source's committed group (``offsets``) and a transaction left open over ``sends``
    (topic, value, partition); the open transaction's producer, for the caller to close."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign([KafkaTP(t, p) for t, p in offsets])
        await consumer.commit({KafkaTP(t, p): o for (t, p), o in offsets.items()})
    finally:
        await consumer.stop()
    # Kafka aborts a transaction after its timeout (aiokafka's default: 60 s); a session- or
    # module-scoped source outlives that, so the open one asks for Kafka's longest
    # (transaction.max.timeout.ms, 15 min, in every version).
    left_open = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=open_txn, transaction_timeout_ms=900_000)
    await left_open.start()
    await left_open.begin_transaction()
    for topic, value, partition in sends:
        await left_open.send_and_wait(topic, value, partition=partition)
    return left_open


def broker_log(data_dir: Path, hws: dict[tuple[str, int], int], timeout: float = 15.0) -> dict[tuple[str, int], list[tuple[int, bytes]]]:
    """(base offset, raw batch) per partition, from the broker's own ``kafka.json``, once its
    snapshot holds every partition up to ``hws``."""
    deadline = time.monotonic() + timeout
    while True:
        got = _read_log(data_dir / "kafka.json")
        have = {k: (v[-1][0] + _last_delta(v[-1][1]) + 1 if v else 0) for k, v in got.items()}
        if all(have.get(k, 0) >= hw for k, hw in hws.items()):
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"kafka.json never reached {hws}: {have}")
        time.sleep(0.2)


def segment_batches(partition_dir: Path) -> list[tuple[int, bytes]]:
    """(base offset, raw batch) from an Apache Kafka partition folder's ``.log`` segments, as the
    broker holds them on disk (baseOffset int64, batchLength int32, then batchLength bytes)."""
    out = []
    for seg in sorted(partition_dir.glob("*.log")):
        data, pos = seg.read_bytes(), 0
        while pos + 12 <= len(data):
            length = int.from_bytes(data[pos + 8 : pos + 12], "big")
            if length == 0 or pos + 12 + length > len(data):
                break
            out.append((int.from_bytes(data[pos : pos + 8], "big"), data[pos : pos + 12 + length]))
            pos += 12 + length
    return out


def _last_delta(raw: bytes) -> int:
    return int.from_bytes(raw[23:27], "big", signed=True)


def _read_log(path: Path) -> dict[tuple[str, int], list[tuple[int, bytes]]]:
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    out = {}
    for name, topic in state["topics"]:
        for pid, part in topic["partitions"]:
            out[(name, int(pid))] = [(int(off), bytes(raw)) for off, raw in part["record_batches"]]
    return out


def values(batches: Iterable[Batch], aborted: Iterable[Any] = (), committed_only: bool = False) -> list[tuple[int, bytes | None]]:
    """(offset, value) of the data records, decoded by aiokafka's record reader (every codec); ``committed_only`` drops
    aborted transactions as a read_committed consumer does (aborted list plus ABORT markers)."""
    starts = sorted(aborted, key=lambda a: a.first_offset)
    aborting: set[int] = set()
    out = []
    for b in batches:
        while starts and starts[0].first_offset <= b.base_offset:
            aborting.add(starts.pop(0).producer_id)
        if b.is_control:
            if b.control_type == ControlType.ABORT:
                aborting.discard(b.producer_id)
            continue
        if committed_only and b.is_transactional and b.producer_id in aborting:
            continue
        out += [(r.offset, r.value) for r in MemoryRecords(b.payload).next_batch()]
    return out


def read_committed(client: Any, tp: TopicPartition, lso: int) -> list[tuple[int, bytes | None]]:
    """What a read_committed Fetch from ``client`` (a model cluster) serves below ``lso``."""
    out, offset = [], 0
    while offset < lso:
        r = client.fetch(tp, offset, 1 << 20, IsolationLevel.READ_COMMITTED)
        if not r.batches:
            break
        out += values(r.batches, r.aborted_transactions, committed_only=True)
        offset = r.batches[-1].next_offset
    return out



def assert_offsets_and_reads_alike(b: Any, tps: list[TopicPartition], src: dict[Any, Any], names: dict[Any, Any],
                                   bootstrap: str, loop: asyncio.AbstractEventLoop) -> None:  # fmt: skip
    """B's log start, HW and LSO are the source's; the source's open transaction is open on B too; a
    read_committed Fetch on B serves what a real consumer reads on the source."""
    for tp in tps:
        ob = b.list_offsets(tp)
        assert (ob.log_start, ob.hw, ob.lso) == (src[tp].log_start, src[tp].hw, src[tp].lso), names[tp]
    assert any(src[tp].lso < src[tp].hw for tp in tps)
    for tp in tps:
        expected = loop.run_until_complete(consume(bootstrap, *names[tp], "read_committed", src[tp].lso))
        assert read_committed(b, tp, src[tp].lso) == expected, names[tp]

async def consume(bootstrap: str, topic: str, partition: int, isolation: str, end: int) -> list[tuple[int, bytes | None]]:
    """What a real aiokafka consumer reads from a partition, up to ``end``."""
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level=isolation,
                         auto_offset_reset="earliest")  # fmt: skip
    await c.start()
    try:
        tp = KafkaTP(topic, partition)
        c.assign([tp])
        await c.seek_to_beginning(tp)
        out: list[tuple[int, bytes | None]] = []
        deadline = asyncio.get_running_loop().time() + 15
        while await c.position(tp) < end and asyncio.get_running_loop().time() < deadline:
            got = await c.getmany(tp, timeout_ms=300)
            out += [(m.offset, m.value) for m in got.get(tp, [])]
        return out
    finally:
        await c.stop()


# --- Apache Kafka sources: topics on given brokers, sync produce, UNCLEAN elections ---


def new_topic(kafka: ApacheKafkaCluster, name: str, assignment: list[int], configs: dict[str, str]) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap, client_id="kip1279-epoch-test")
    try:
        admin.create_topics([NewTopic(name, replica_assignments={0: assignment}, topic_configs=configs)])
    finally:
        admin.close()


def produce(bootstrap: str, topic: str, values_: list[bytes], acks: Any = "all") -> None:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, acks=acks, linger_ms=0, retries=20, request_timeout_ms=5000,
                      metadata_max_age_ms=500)  # fmt: skip
    try:
        for v in values_:
            p.send(topic, v, partition=0).get(timeout=30)
    finally:
        p.close()


def running_brokers(kafka: ApacheKafkaCluster) -> set[int]:
    return set().union(*(metadata_broker_ids(kafka.host, n.broker_port or 0) for n in kafka.brokers if n.is_running()))


def elect_unclean(kafka: ApacheKafkaCluster, name: str) -> None:
    """Kafka's own kafka-leader-election, --election-type UNCLEAN (the admin API's ElectLeaders)."""
    cmd = java_command("org.apache.kafka.tools.LeaderElectionCommand", [
        "--bootstrap-server", kafka.bootstrap, "--election-type", "UNCLEAN", "--topic", name, "--partition", "0"])  # fmt: skip
    deadline = time.monotonic() + 30
    while True:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        if done.returncode == 0 and "Successfully completed leader election" in done.stdout:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"unclean election failed: {done.stdout[-1500:]} {done.stderr[-1500:]}")
        time.sleep(0.5)
