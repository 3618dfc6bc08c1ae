"""Apache Kafka as the yardstick of the records tooling: make Kafka write real segments, then
compare ``kafka-records dump-log`` with Kafka's own ``kafka-dump-log`` on them.

Used by tests/test_kafka_dump_log.py, and a command that (re)writes the stored samples:

    .venv/bin/python tests/kafka_yardstick.py tests/data

It starts one combined-mode Apache Kafka node (bin/setup fetched the jars), makes its KRaft
controller write ``__cluster_metadata`` (topics, partitions, configs, ACLs, SCRAM users, a
feature level raised by UpdateFeatures (tests/kafka_fixtures.py does that on every start), a
producer-ID block) and a data topic (idempotent, transactional, compressed
batches), stops it, and stores one segment of each kind with Kafka's dump of it beside it
(``*.kafka-dump.txt``), so the comparison also runs where Java is missing.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

DATA_TOPIC = "yardstick-data"
METADATA_TOPICS = ("yardstick-a", "yardstick-b", "yardstick-gone")
JAVA_CODECS = ("snappy", "lz4", "zstd")  # kafka-python here has gzip only; Kafka's producer has all


def admin(bootstrap: str) -> Any:
    from kafka import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=bootstrap, client_id="yardstick", request_timeout_ms=30000)


def write_metadata_activity(bootstrap: str) -> None:
    """Admin calls whose effects the controller writes to ``__cluster_metadata``."""
    from kafka.admin import (
        ACL,
        ACLOperation,
        ACLPermissionType,
        AlterConfigOp,
        ConfigResource,
        ConfigResourceType,
        NewPartitions,
        NewTopic,
        ResourcePattern,
        ResourceType,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )
    from kafka.admin._acls import ACLResourcePatternType

    a = admin(bootstrap)
    try:
        a.create_topics(
            [
                NewTopic("yardstick-a", 2, 1, topic_configs={"cleanup.policy": "compact", "min.compaction.lag.ms": "1000"}),
                NewTopic("yardstick-b", 1, 1),
                NewTopic("yardstick-gone", 1, 1),
            ]
        )
        a.create_partitions({"yardstick-b": NewPartitions(3)})
        a.alter_configs(
            [
                ConfigResource(ConfigResourceType.TOPIC, "yardstick-b", {"retention.ms": (AlterConfigOp.SET, "604800000")}),
                ConfigResource(ConfigResourceType.BROKER, "1", {"max.connections": (AlterConfigOp.SET, "1000")}),
            ],
            incremental=True,
        )
        a.create_acls(
            [
                ACL("User:alice", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
                    ResourcePattern(ResourceType.TOPIC, "yardstick-", ACLResourcePatternType.PREFIXED)),
                ACL("User:bob", "127.0.0.1", ACLOperation.WRITE, ACLPermissionType.DENY,
                    ResourcePattern(ResourceType.TOPIC, "yardstick-a")),
            ]
        )  # fmt: skip
        a.alter_user_scram_credentials(
            [
                UserScramCredentialUpsertion("alice", ScramMechanism.SCRAM_SHA_256, "alice-secret", iterations=4096),
                UserScramCredentialUpsertion("bob", ScramMechanism.SCRAM_SHA_512, "bob-secret", iterations=8192),
            ]
        )
        a.delete_topics(["yardstick-gone"])
    finally:
        a.close()


def write_data_activity(bootstrap: str, lib_java_producer: Any = None) -> None:
    """A data topic with idempotent, transactional (committed and aborted) and compressed batches.

    kafka-python's idempotent producer also makes the broker fetch a producer-ID block from the
    controller (a ``ProducerIdsRecord`` in the metadata log). ``lib_java_producer({codec: lines})``,
    when given, produces the snappy, lz4 and zstd batches with Kafka's own Java producer.
    """
    from kafka import KafkaProducer
    from kafka.admin import NewTopic

    a = admin(bootstrap)
    try:
        a.create_topics([NewTopic(DATA_TOPIC, 1, 1)])
    finally:
        a.close()
    p = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all", linger_ms=50)
    try:
        for i in range(3):
            p.send(DATA_TOPIC, key=f"k{i}".encode(), value=f"idempotent-{i}".encode(), headers=[("h", b"v"), ("empty", b"")])
        p.send(DATA_TOPIC, key=b"k0", value=None)  # a tombstone
        p.flush()
    finally:
        p.close()
    g = KafkaProducer(bootstrap_servers=bootstrap, compression_type="gzip", linger_ms=50)
    try:
        for i in range(4):
            g.send(DATA_TOPIC, key=b"gz", value=(f"gzip-{i}-" + "x" * 40).encode())
        g.flush()
    finally:
        g.close()
    t = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="yardstick-txn", linger_ms=10)
    try:
        t.init_transactions()
        for outcome in ("commit", "abort"):
            t.begin_transaction()
            for i in range(2):
                t.send(DATA_TOPIC, key=b"txn", value=f"{outcome}-{i}".encode())
            t.flush()
            if outcome == "commit":
                t.commit_transaction()
            else:
                t.abort_transaction()
    finally:
        t.close()
    if lib_java_producer is not None:
        lib_java_producer({codec: [f"{codec}-{i}-" + "y" * 30 for i in range(3)] for codec in JAVA_CODECS})


def java_console_producer(bootstrap: str) -> Any:
    """A function that produces ``{codec: lines}`` with Kafka's ConsoleProducer: one batch per
    codec, each from its own JVM, all started at once (JVM start-up is the cost)."""
    import subprocess

    from streams.brokers.kafka_jars import java_command

    def produce(batches: dict[str, list[str]]) -> None:
        procs = {}
        for codec, lines in batches.items():
            cmd = java_command(
                "org.apache.kafka.tools.ConsoleProducer",
                ["--bootstrap-server", bootstrap, "--topic", DATA_TOPIC, "--compression-codec", codec,
                 "--producer-property", "linger.ms=200", "--producer-property", "batch.size=65536"],
            )  # fmt: skip
            proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            procs[codec] = (proc, "\n".join(lines) + "\n")
        for codec, (proc, text) in procs.items():
            _, err = proc.communicate(text, timeout=120)
            if proc.returncode != 0:
                raise RuntimeError(f"ConsoleProducer ({codec}) failed: {err[-1500:]}")

    return produce


_WRITTEN: set[str] = set()


def ensure_yardstick_activity(bootstrap: str) -> None:
    """The metadata and data activity, written once per cluster (the session's node is shared by
    every test module that compares dumps)."""
    if bootstrap not in _WRITTEN:
        write_metadata_activity(bootstrap)
        write_data_activity(bootstrap, java_console_producer(bootstrap))
        _WRITTEN.add(bootstrap)


ROLLED_TOPIC = "yardstick-rolled"  # several segments: indexes, time indexes, producer snapshots
APPEND_TIME_TOPIC = "yardstick-append-time"  # message.timestamp.type=LogAppendTime
COMPACTED_TOPIC = "yardstick-compacted"  # cleaned: an idempotent producer's batch left empty
GROUP = "yardstick-group"


def _send_batch(bootstrap: str, topic: str, items: list[tuple[bytes, bytes | None]], **config: Any) -> None:
    """One batch (one producer, one flush) of ``items`` to partition 0."""
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=50, acks="all", **config)
    try:
        for key, value in items:
            p.send(topic, key=key, value=value, partition=0)
        p.flush()
    finally:
        p.close()


def write_log_dir_activity(bootstrap: str) -> None:
    """Topics whose partition folders hold every kind of file a log directory has: rolled
    segments with their .index, .timeindex and producer .snapshot, a .txnindex (the data topic's
    aborted transaction), LogAppendTime batches, a segment the cleaner compacted, and
    __consumer_offsets with a group's commits."""
    import time

    from kafka import KafkaConsumer
    from kafka.admin import NewTopic

    roll = {"segment.ms": "100", "index.interval.bytes": "1"}
    a = admin(bootstrap)
    try:
        a.create_topics(
            [
                NewTopic(ROLLED_TOPIC, 1, 1, topic_configs=roll),
                NewTopic(APPEND_TIME_TOPIC, 1, 1, topic_configs={"message.timestamp.type": "LogAppendTime"}),
                NewTopic(COMPACTED_TOPIC, 1, 1, topic_configs={
                    **roll, "cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "0",
                }),
            ]
        )  # fmt: skip
    finally:
        a.close()
    for i in range(3):  # each batch after segment.ms: a new segment each time
        _send_batch(bootstrap, ROLLED_TOPIC, [(f"r{i}-{j}".encode(), f"v{j}".encode()) for j in range(3)], enable_idempotence=True)
        _send_batch(bootstrap, APPEND_TIME_TOPIC, [(b"t", f"append-{i}".encode())], compression_type="gzip" if i else None)
        time.sleep(0.3)
    # The first producer's keys are all overwritten by the second: the cleaner empties its batch
    # but keeps it (its producer state); a third batch rolls the second into a cleanable segment.
    for value in (b"first", b"second", None):
        items = [(f"c{j}".encode(), value) for j in range(3)] if value else [(b"other", b"x")]
        _send_batch(bootstrap, COMPACTED_TOPIC, items, enable_idempotence=True)
        time.sleep(0.3)
    _send_batch(bootstrap, COMPACTED_TOPIC, [(b"last", b"y")])  # rolls the third batch's segment too
    c = KafkaConsumer(ROLLED_TOPIC, bootstrap_servers=bootstrap, group_id=GROUP, auto_offset_reset="earliest",
                      enable_auto_commit=False, consumer_timeout_ms=5000)  # fmt: skip
    try:
        for _ in c:
            pass
        c.commit()
    finally:
        c.close()


# --- Kafka's dump, parsed, and compared with ours -----------------------------------------------

_BATCH_FIELD = re.compile(r"(\w+): (\S+)")
_RECORD = re.compile(
    r"^\| offset: (?P<offset>-?\d+) (?P<tstype>CreateTime|LogAppendTime|NoTimestampType): (?P<ts>-?\d+)"
    r" keySize: (?P<keySize>-?\d+) valueSize: (?P<valueSize>-?\d+) sequence: (?P<sequence>-?\d+)"
    r" headerKeys: \[(?P<headerKeys>[^\]]*)\](?P<rest>.*)$"
)
_CONTROL_JSON = re.compile(r"^(?P<name>\w+):? (?P<json>\{.*\})$")
_END_TXN = re.compile(r"^endTxnMarker: (?P<type>\w+) coordinatorEpoch: (?P<epoch>-?\d+)$")

# Kafka's names for the KRaft control records it prints (DumpLogSegments) -> ours (ControlType).
KAFKA_CONTROL_NAMES = {
    "LeaderChange": "LEADER_CHANGE",
    "KRaftVersion": "KRAFT_VERSION",
    "KRaftVoters": "KRAFT_VOTERS",
    "SnapshotHeader": "SNAPSHOT_HEADER",
    "SnapshotFooter": "SNAPSHOT_FOOTER",
}


def parse_kafka_dump(text: str) -> list[dict[str, Any]]:
    """Kafka's DumpLogSegments text as one dict per record, its batch's fields under ``batch``.

    A batch line is ``baseOffset: 0 lastOffset: 0 count: 1 ... isvalid: true``; a record line
    ``| offset: 0 CreateTime: ... headerKeys: [a,b] <rest>``, where the rest is ``payload: JSON``
    (metadata decoder), ``LeaderChange: JSON`` / ``KRaftVersion JSON`` (KRaft control records),
    ``endTxnMarker: COMMIT coordinatorEpoch: 0``, or ``key: K payload: V`` (--print-data-log).
    """
    records: list[dict[str, Any]] = []
    batch: dict[str, str] | None = None
    for line in text.splitlines():
        if line.startswith("baseOffset:"):
            batch = dict(_BATCH_FIELD.findall(line))
        elif line.startswith("| offset:"):
            m = _RECORD.match(line)
            if m is None or batch is None:
                raise ValueError(f"unparsed record line: {line[:200]}")
            rec: dict[str, Any] = {k: m.group(k) for k in ("offset", "tstype", "ts", "keySize", "valueSize", "sequence")}
            rec["headerKeys"] = m.group("headerKeys").split(",") if m.group("headerKeys") else []
            rec["batch"] = batch
            rec["rest"] = m.group("rest").strip()
            records.append(rec)
    return records


def _kafka_payload(rest: str, data: bool) -> Any:
    """A record line's rest, in our dump's JSON terms (documented in docs/apache-kafka.md)."""
    if rest.startswith("payload: ") and not data:
        return json.loads(rest[len("payload: "):])
    m = _END_TXN.match(rest)
    if m:
        return {"type": m.group("type"), "version": 0, "data": {"coordinatorEpoch": int(m.group("epoch"))}}
    m = _CONTROL_JSON.match(rest)
    if m and m.group("name") in KAFKA_CONTROL_NAMES:
        body = json.loads(m.group("json"))
        return {"type": KAFKA_CONTROL_NAMES[m.group("name")], "version": body.get("version"), "data": body}
    if data:
        key = value = None
        if rest.startswith("key: "):
            at = rest.find(" payload: ")
            key, rest = (rest[5:], "") if at < 0 else (rest[5:at], rest[at + 1:])
        if rest.startswith("payload: "):
            value = rest[len("payload: "):]
        return {"key": key, "payload": value}
    raise ValueError(f"unparsed payload: {rest[:200]}")


def _optional_long(text: str) -> int | None:
    return None if text == "OptionalLong.empty" else int(text[len("OptionalLong["):-1])


def compare_dumps(kafka_text: str, ours_lines: list[dict[str, Any]], data: bool = False) -> list[str]:
    """Every difference between Kafka's dump and ours, record for record (empty when equal)."""
    theirs = parse_kafka_dump(kafka_text)
    diffs: list[str] = []
    if len(theirs) != len(ours_lines):
        diffs.append(f"Kafka dumped {len(theirs)} records, we dumped {len(ours_lines)}")
    for k, o in zip(theirs, ours_lines):
        b = k["batch"]
        expected: dict[str, Any] = {
            "offset": int(k["offset"]),
            "timestamp": int(k["ts"]),
            "keySize": int(k["keySize"]),
            "valueSize": int(k["valueSize"]),
            "sequence": int(k["sequence"]),
            "headerKeys": k["headerKeys"],
            "timestampType": "CREATE_TIME" if "CreateTime" in b else "LOG_APPEND_TIME",
            "createTime": int(b.get("CreateTime", b.get("LogAppendTime", "-1"))),
            "deleteHorizonMs": _optional_long(b["deleteHorizonMs"]),
            "compressCodec": b["compresscodec"],
            "isTransactional": b["isTransactional"] == "true",
            "isControl": b["isControl"] == "true",
        }
        for name in ("baseOffset", "lastOffset", "count", "baseSequence", "lastSequence", "producerId", "producerEpoch",
                     "partitionLeaderEpoch", "position", "size", "magic", "crc"):  # fmt: skip
            expected[name] = int(b[name])
        if b.get("isvalid") != "true":
            diffs.append(f"offset {k['offset']}: Kafka says the batch is not valid")
        payload = _kafka_payload(k["rest"], data)
        if data and not expected["isControl"]:
            expected.update(payload)
        else:
            expected["payload"] = payload
        for name, value in expected.items():
            if o.get(name) != value:
                diffs.append(f"offset {k['offset']}: {name}: Kafka {value!r}, ours {o.get(name)!r}")
    return diffs


def ours(path: Path, *extra: str, batches: bool = False) -> list[dict[str, Any]]:
    """``kafka-records dump-log PATH``'s record lines (with ``batches``, its batch lines too), parsed
    (exit code checked)."""
    from records.cli import main

    buf = io.StringIO()
    code = main(["dump-log", str(path), *extra], out=buf)
    if code != 0:
        raise AssertionError(f"kafka-records dump-log {path} exited {code}")
    lines = [json.loads(line) for line in buf.getvalue().splitlines()]
    return lines if batches else [line for line in lines if line.get("kind") != "batch"]


def record_types(lines: list[dict[str, Any]]) -> set[str]:
    return {line["payload"]["type"] for line in lines if isinstance(line.get("payload"), dict)}


def copy_whole_batches(src: Path, dest: Path) -> Path:
    """A live segment copied up to its last complete batch (its writer may be mid-append),
    so that both tools read the same bytes. Only the 12-byte batch frames are read here."""
    raw = src.read_bytes()
    end = 0
    while end + 12 <= len(raw):
        size = 12 + int.from_bytes(raw[end + 8 : end + 12], "big")
        if end + size > len(raw):
            break
        end += size
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(raw[:end])
    return dest


# --- regenerate the stored samples ------------------------------------------------------------


def copy_segment(src_dir: Path, dest: Path) -> Path:
    """The first (only) segment of a partition folder, copied byte for byte."""
    (segment,) = sorted(src_dir.glob("*.log"))[:1]
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(segment, dest)
    return dest


def regenerate(out_dir: Path) -> None:
    import tempfile

    from kafka_fixtures import start_session_cluster

    from streams.brokers.kafka_jars import dump_log_segments

    with tempfile.TemporaryDirectory(prefix="kip1279-yardstick-") as tmp:
        cluster = start_session_cluster(Path(tmp) / "kafka")
        try:
            write_metadata_activity(cluster.bootstrap)
            write_data_activity(cluster.bootstrap, java_console_producer(cluster.bootstrap))
        finally:
            cluster.stop()
        node = cluster.nodes[0]
        meta = copy_segment(cluster.metadata_log_dir, out_dir / "apache_kafka_cluster_metadata" / "00000000000000000000.log")
        data = copy_segment(node.log_dir / f"{DATA_TOPIC}-0", out_dir / "apache_kafka_data" / "00000000000000000000.log")
    (meta.parent / "kafka-dump.txt").write_text(dump_log_segments([meta], "--cluster-metadata-decoder"))
    (data.parent / "kafka-dump.txt").write_text(dump_log_segments([data], "--deep-iteration", "--print-data-log"))
    print(f"wrote {meta} ({meta.stat().st_size} bytes) and {data} ({data.stat().st_size} bytes), with Kafka's dumps")


if __name__ == "__main__":
    regenerate(Path(sys.argv[1] if len(sys.argv) > 1 else "tests/data"))
