"""Real clients' first calls and every codec on the model's Kafka listener, with Kafka 4.1 as yardstick.

librdkafka's list_topics and regex subscriptions (Metadata v12 with bytes after the body), a
producer per codec read back by confluent-kafka and aiokafka, Kafka's own ConsoleProducer with
snappy, lz4 and zstd, Kafka's error code for each broken batch (the table below was measured on
Apache Kafka 4.1.2; ``test_kafka_gives_the_table`` re-measures it when Kafka can run here), and
ListOffsets MAX_TIMESTAMP (-3) against a real broker.
"""

from __future__ import annotations

import gzip
import socket
import struct
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import cramjam
import pytest
from crc32c import crc32c

from clustermodel.client import ClusterClient
from clustermodel.records import read_committed_values
from records.kafka_envelope import decode_response, encode_request
from records.registry import default_schemas
from records.segments import Record, build_batch, decode_batch, encode_batch

from kafka_clients import TIMEOUT_S, AioKafka, Confluent
from model_server import ServerProcess

S = default_schemas()
# What librdkafka 2.16 sends for list_topics() with no topic: Metadata v12, correlation id 3,
# client id "rdkafka", every topic, then 3 bytes after the body.
RDKAFKA_METADATA_V12 = bytes.fromhex("000000190003000c00000003000772646b61666b610000000000010000")
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
CODEC_IDS = {name: i for i, name in enumerate(CODECS)}


@pytest.fixture(scope="module")
def model() -> Iterator[ClusterClient]:
    with tempfile.TemporaryFile() as err:
        server = ServerProcess("--cluster", "A", "--seed", "11", stderr=err.fileno())
        client = ClusterClient(server.port, "A")
        try:
            yield client
        finally:
            client.close()
            assert server.stop() == 0
            err.seek(0)
            log = err.read().decode(errors="replace")
    assert "Traceback" not in log, log


# ---------------------------------------------------------------- a raw connection and crafted batches


class Conn:
    def __init__(self, address: tuple[str, int]) -> None:
        self.sock = socket.create_connection(address, timeout=10)
        self.cid = 100

    def _read(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("the listener closed the connection")
            out += chunk
        return out

    def frame(self) -> bytes:
        (size,) = struct.unpack(">i", self._read(4))
        return self._read(size)

    def call(self, api_key: int, version: int, body: object) -> Any:
        self.cid += 1
        self.sock.sendall(encode_request(api_key, version, self.cid, "codec-test", body))
        cid, resp = decode_response(self.frame(), api_key, version)
        assert cid == self.cid
        return resp

    def alive(self) -> bool:
        return self.call(18, 0, S.struct("ApiVersionsRequest")()).error_code == 0

    def produce(self, topic: str, records: bytes, version: int = 9) -> Any:
        P = S.nested("ProduceRequest", "PartitionProduceData")
        T = S.nested("ProduceRequest", "TopicProduceData")
        body = S.struct("ProduceRequest")(acks=1, timeout_ms=5000, topic_data=[T(name=topic, partition_data=[P(index=0, records=records)])])
        return self.call(0, version, body).responses[0].partition_responses[0]

    def list_offset(self, topic: str, timestamp: int, isolation: int = 0) -> tuple[int, int, int, int]:
        LP = S.nested("ListOffsetsRequest", "ListOffsetsPartition")
        LT = S.nested("ListOffsetsRequest", "ListOffsetsTopic")
        body = S.struct("ListOffsetsRequest")(replica_id=-1, isolation_level=isolation, topics=[
            LT(name=topic, partitions=[LP(partition_index=0, timestamp=timestamp, current_leader_epoch=-1)])])
        r = self.call(2, 7, body).topics[0].partitions[0]
        return r.error_code, r.offset, r.timestamp, r.leader_epoch

    def close(self) -> None:
        self.sock.close()


def compress(codec: int, data: bytes) -> bytes:
    if codec == 1:
        return gzip.compress(data)
    if codec == 2:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == 3:
        lz4 = cramjam.lz4.Compressor(block_linked=False)  # Kafka's lz4 reader wants independent blocks
        lz4.compress(data)
        return bytes(lz4.finish())
    if codec == 4:
        return bytes(cramjam.zstd.compress(data))
    return data


def batch(values: list[bytes], codec: int = 0, ts: int = 1000, deltas: list[int] | None = None,
          section: Callable[[bytes], bytes] | None = None, count: int | None = None, last_delta: int | None = None,
          base: int = 0, attributes: int | None = None, crc_ok: bool = True, pid: int = -1, seq: int = -1) -> bytes:
    """A RecordBatch v2 as a producer sends it; ``section`` turns the uncompressed records into the
    payload (default: compressed with ``codec``), the other arguments falsify one header field."""
    recs = [Record(i, (deltas or [0] * len(values))[i], None, v) for i, v in enumerate(values)]
    plain = encode_batch(build_batch(recs, base_offset=0, base_timestamp=ts))
    payload = section(plain[61:]) if section else compress(codec, plain[61:])
    header = bytearray(plain[:61])
    struct.pack_into(">q", header, 0, base)
    struct.pack_into(">i", header, 8, 49 + len(payload))
    struct.pack_into(">h", header, 21, codec if attributes is None else attributes)
    if last_delta is not None:
        struct.pack_into(">i", header, 23, last_delta)
    struct.pack_into(">qhi", header, 43, pid, 0 if pid >= 0 else -1, seq)
    if count is not None:
        struct.pack_into(">i", header, 57, count)
    crc = crc32c(bytes(header[21:]) + payload)
    struct.pack_into(">I", header, 17, crc if crc_ok else crc ^ 1)
    return bytes(header) + payload


def _magic1() -> bytes:
    b = bytearray(batch([b"a"]))
    b[16] = 1
    return bytes(b)


# Kafka 4.1.2's error code for each produced batch: CORRUPT_MESSAGE (2) for a CRC that does not
# match, INVALID_RECORD (87) for what its validators refuse (offsets, count, record framing after
# decompression, control batches, more than one batch), UNKNOWN_SERVER_ERROR (-1) when the codec
# cannot read the section (its IOException surfaces as a bare KafkaException).
KAFKA_CODES: dict[str, tuple[Callable[[], bytes], int]] = {}
for _c in range(5):
    KAFKA_CODES.update({
        f"{CODECS[_c]}-ok": (lambda c=_c: batch([b"a", b"b"], c), 0),
        f"{CODECS[_c]}-bad-crc": (lambda c=_c: batch([b"a"], c, crc_ok=False), 2),
        f"{CODECS[_c]}-count-above-records": (lambda c=_c: batch([b"a", b"b"], c, count=3, last_delta=2), 87),
        f"{CODECS[_c]}-count-below-records": (lambda c=_c: batch([b"a", b"b"], c, count=1, last_delta=0), 87),
        f"{CODECS[_c]}-bytes-after-records": (lambda c=_c: batch([b"a"], c, section=lambda s, c=c: compress(c, s + b"\0\0")), 87),
        f"{CODECS[_c]}-records-cut": (lambda c=_c: batch([b"a", b"b" * 8], c, section=lambda s, c=c: compress(c, s[:-3])), 87),
    })
    if _c:
        KAFKA_CODES[f"{CODECS[_c]}-garbage"] = (lambda c=_c: batch([b"a"], c, section=lambda s: b"\x01\x02garbage" * 3), -1)
        KAFKA_CODES[f"{CODECS[_c]}-stream-cut"] = (
            lambda c=_c: batch([b"a" * 50, b"b" * 50], c, section=lambda s, c=c: compress(c, s)[:-4]), -1)
KAFKA_CODES.update({
    "gzip-empty": (lambda: batch([b"a"], 1, section=lambda s: b""), -1),
    "gzip-garbage-after-stream": (lambda: batch([b"a"], 1, section=lambda s: gzip.compress(s) + b"xx"), 0),
    "snappy-garbage-after-stream": (lambda: batch([b"a"], 2, section=lambda s: compress(2, s) + b"xx"), -1),
    "zstd-garbage-after-stream": (lambda: batch([b"a"], 4, section=lambda s: compress(4, s) + b"xx"), -1),
    "lz4-linked-blocks": (lambda: batch([b"a", b"b"], 3, section=lambda s: bytes(cramjam.lz4.compress(s))), -1),
    "unknown-codec-5": (lambda: batch([b"a"], 5, section=lambda s: s), -1),
    "offsets-do-not-match-count": (lambda: batch([b"a", b"b"], last_delta=5), 87),
    "negative-count": (lambda: batch([b"a"], count=-1), 87),
    "base-offset-not-0": (lambda: batch([b"a"], base=5), 87),
    "two-batches": (lambda: batch([b"a"]) + batch([b"b"]), 87),
    "control-batch": (lambda: batch([b"a"], attributes=0x20), 87),
    "producer-id-without-sequence": (lambda: batch([b"a"], pid=7, seq=-1), 87),
    "magic-1": (_magic1, 87),
    "no-batch": (lambda: b"", 87),
})


def create_on_kafka(apache_kafka: Any, *topics: Any) -> tuple[str, int]:
    """Creates ``topics`` (kafka-python NewTopics) and waits until each has a leader: a new topic's
    leader reaches the broker's metadata a moment later (longer under load), and until then every
    produce gets NOT_LEADER_OR_FOLLOWER, not the code a case is about. Returns the broker's address."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=apache_kafka.bootstrap)
    try:
        admin.create_topics(list(topics))
        names = [x.name for x in topics]
        deadline = time.monotonic() + 60
        while True:
            described = admin.describe_topics(names)
            if len(described) == len(names) and all(d["error_code"] == 0 and d["partitions"] for d in described) \
                    and all(p["leader_id"] >= 0 for d in described for p in d["partitions"]):
                break
            assert time.monotonic() < deadline, f"{names}: no leader after 60 s"
            time.sleep(0.2)
    finally:
        admin.close()
    # Named in the metadata is not yet leading on the broker (NOT_LEADER_OR_FOLLOWER for a moment
    # more): a ListOffsets, which writes nothing, retried until it answers, as a client retries.
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=apache_kafka.bootstrap, request_timeout_ms=60_000)
    try:
        consumer.end_offsets([TopicPartition(x.name, p) for x in topics for p in range(x.num_partitions)])
    finally:
        consumer.close()
    host, port = apache_kafka.bootstrap.split(",")[0].rsplit(":", 1)
    return host, int(port)


def produce_codes(address: tuple[str, int], topic: str) -> dict[str, tuple[int, bool]]:
    """Each case on its own connection: (error code, the connection still answers)."""
    out = {}
    for name, (make, _) in KAFKA_CODES.items():
        conn = Conn(address)
        try:
            out[name] = (conn.produce(topic, make()).error_code, conn.alive())
        finally:
            conn.close()
    return out


def leader_address(client: ClusterClient, topic: str) -> tuple[str, int]:
    leader = next(t for t in client.describe_topics() if t.name == topic).partitions[0].leader
    _, _, host, port = next(x for x in client.kafka_listeners() if x[0] == "A" and x[1] == leader)
    return host, port


def test_model_gives_kafkas_code_for_each_batch_and_keeps_the_connection(model: ClusterClient) -> None:
    model.add_topic("codes", 1)
    got = produce_codes(leader_address(model, "codes"), "codes")
    assert got == {name: (code, True) for name, (_, code) in KAFKA_CODES.items()}


def test_kafka_gives_the_table(apache_kafka: Any) -> None:
    from kafka.admin import NewTopic

    got = produce_codes(create_on_kafka(apache_kafka, NewTopic("cmwire-codes", 1, 1)), "cmwire-codes")
    assert got == {name: (code, True) for name, (_, code) in KAFKA_CODES.items()}


# (acks, batch, Produce version, topic known) -> Kafka 4.1.2's code: request-level checks first
# (unknown topic, one v2 batch, zstd from v7), then acks (INVALID_REQUIRED_ACKS, 21), then the
# batch's own (CRC).
REQUEST_LEVEL_CASES: dict[str, tuple[int, Callable[[], bytes], int, bool, int]] = {
    "acks-2": (2, lambda: batch([b"a"]), 9, True, 21),
    "acks--2": (-2, lambda: batch([b"a"]), 9, True, 21),
    "acks-2-bad-crc": (2, lambda: batch([b"a"], crc_ok=False), 9, True, 21),
    "acks-2-two-batches": (2, lambda: batch([b"a"]) + batch([b"b"]), 9, True, 87),
    "acks-2-unknown-topic": (2, lambda: batch([b"a"]), 9, False, 3),
    "zstd-v6": (1, lambda: batch([b"z"], 4), 6, True, 76),  # UNSUPPORTED_COMPRESSION_TYPE
    "zstd-v7": (1, lambda: batch([b"z"], 4), 7, True, 0),
}


def request_level_codes(address: tuple[str, int], topic: str) -> dict[str, int]:
    out = {}
    for name, (acks, make, version, known, _) in REQUEST_LEVEL_CASES.items():
        conn = Conn(address)
        try:
            P = S.nested("ProduceRequest", "PartitionProduceData")
            T = S.nested("ProduceRequest", "TopicProduceData")
            body = S.struct("ProduceRequest")(acks=acks, timeout_ms=5000, topic_data=[
                T(name=topic if known else f"{topic}-missing", partition_data=[P(index=0, records=make())])])
            out[name] = conn.call(0, version, body).responses[0].partition_responses[0].error_code
            assert conn.alive()
        finally:
            conn.close()
    return out


def test_request_level_checks_on_the_model(model: ClusterClient) -> None:
    model.add_topic("acks", 1)
    assert request_level_codes(leader_address(model, "acks"), "acks") == {k: v[-1] for k, v in REQUEST_LEVEL_CASES.items()}


def test_request_level_checks_on_kafka(apache_kafka: Any) -> None:
    from kafka.admin import NewTopic

    assert request_level_codes(create_on_kafka(apache_kafka, NewTopic("cmwire-acks", 1, 1)), "cmwire-acks") == {k: v[-1] for k, v in REQUEST_LEVEL_CASES.items()}


# ApiVersions v3 software names and versions -> (error code, API keys listed), Kafka 4.1.2's answers.
SOFTWARE_NAMES = {
    ("good-name", "1.0"): (0, True),
    ("confluent-kafka-python", "2.16.1-rdkafka-2.16.1"): (0, True),
    ("bad name!", "1"): (42, False),  # INVALID_REQUEST
    ("", ""): (42, False),
    ("a", "-1"): (42, False),
}


def api_versions_answers(address: tuple[str, int]) -> dict[tuple[str, str], tuple[int, bool]]:
    out = {}
    for name, version in SOFTWARE_NAMES:
        conn = Conn(address)
        try:
            r = conn.call(18, 3, S.struct("ApiVersionsRequest")(client_software_name=name, client_software_version=version))
            assert conn.alive()
            out[(name, version)] = (r.error_code, bool(r.api_keys))
        finally:
            conn.close()
    return out


def test_api_versions_checks_software_names_on_the_model(model: ClusterClient) -> None:
    _, _, host, port = model.kafka_listeners()[0]
    assert api_versions_answers((host, port)) == SOFTWARE_NAMES


def test_api_versions_checks_software_names_on_kafka(apache_kafka: Any) -> None:
    host, port = apache_kafka.bootstrap.split(",")[0].rsplit(":", 1)
    assert api_versions_answers((host, int(port))) == SOFTWARE_NAMES


# ---------------------------------------------------------------- librdkafka's first calls


def test_librdkafka_metadata_bytes_are_answered(model: ClusterClient) -> None:
    model.add_topic("meta", 1)
    _, _, host, port = model.kafka_listeners()[0]
    conn = Conn((host, port))
    try:
        conn.sock.sendall(RDKAFKA_METADATA_V12)
        cid, resp = decode_response(conn.frame(), 3, 12)
        assert cid == 3 and resp.brokers and {t.name for t in resp.topics} == {t.name for t in model.describe_topics()}
        assert conn.alive()
    finally:
        conn.close()


def test_list_topics_without_a_topic_from_admin_consumer_and_producer(model: ClusterClient) -> None:
    ck = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient

    model.add_topic("listed", 2)
    boot = model.bootstrap_servers()
    for client in (AdminClient({"bootstrap.servers": boot}),
                   ck.Consumer({"bootstrap.servers": boot, "group.id": "lister"}),
                   ck.Producer({"bootstrap.servers": boot})):
        md = client.list_topics(timeout=10)
        assert len(md.topics["listed"].partitions) == 2 and md.cluster_id == model.cluster_id()
        if isinstance(client, ck.Consumer):
            client.close()


def test_regex_subscription_reads_existing_records(model: ClusterClient) -> None:
    ck = pytest.importorskip("confluent_kafka")
    model.add_topic("ord_regex", 1)
    model.add_topic("other_regex", 1)
    boot = model.bootstrap_servers()
    Confluent().produce(boot, "ord_regex", [b"r0", b"r1", b"r2"])
    Confluent().produce(boot, "other_regex", [b"x"])
    c = ck.Consumer({"bootstrap.servers": boot, "group.id": "regex", "auto.offset.reset": "earliest",
                     "topic.metadata.refresh.interval.ms": 500})
    c.subscribe(["^ord_reg.*"])
    got = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(got) < 3 and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append((m.topic(), m.value()))
    finally:
        c.close()
    assert got == [("ord_regex", b"r0"), ("ord_regex", b"r1"), ("ord_regex", b"r2")]


# ---------------------------------------------------------------- every codec, end to end


def stored_codecs(model: ClusterClient, topic: str) -> list[int]:
    """The codec of each batch as the listener serves it (Fetch v12, raw bytes)."""
    conn = Conn(leader_address(model, topic))
    try:
        P = S.nested("FetchRequest", "FetchPartition")
        T = S.nested("FetchRequest", "FetchTopic")
        body = S.struct("FetchRequest")(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                                        session_epoch=-1, topics=[T(topic=topic, partitions=[
                                            P(partition=0, current_leader_epoch=-1, fetch_offset=0, partition_max_bytes=1 << 20)])])
        data = conn.call(1, 12, body).responses[0].partitions[0].records
    finally:
        conn.close()
    codecs, pos = [], 0
    while pos < len(data):
        b, pos = decode_batch(data, pos, decompress=True)
        codecs.append(b.compression)
    return codecs


@pytest.mark.parametrize("codec", CODECS)
def test_librdkafka_producer_per_codec_read_back_by_two_clients(model: ClusterClient, codec: str) -> None:
    ck = pytest.importorskip("confluent_kafka")
    topic = f"codec_{codec}"
    model.add_topic(topic, 1)
    boot = model.bootstrap_servers()
    values = [f"{codec}-{i}-".encode() + b"v" * 40 for i in range(20)]
    p = ck.Producer({"bootstrap.servers": boot, "compression.type": codec, "linger.ms": 100, "acks": "all"})
    errors: list[Any] = []
    for v in values:
        p.produce(topic, v, partition=0, on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert p.flush(TIMEOUT_S) == 0 and errors == []
    assert set(stored_codecs(model, topic)) == {CODEC_IDS[codec]}  # kept as produced, not re-encoded
    assert [v for _, _, v in Confluent().consume(boot, topic, "read_uncommitted", f"g-ck-{codec}", len(values))] == values
    assert [v for _, _, v in AioKafka().consume(boot, topic, "read_uncommitted", f"g-aio-{codec}", len(values))] == values
    assert read_committed_values(model, model.tp(topic, 0)) == values  # the model's own read path


@pytest.mark.parametrize("codec", ("snappy", "lz4", "zstd"))
def test_kafka_console_producer_per_codec(model: ClusterClient, codec: str) -> None:
    from kafka_fixtures import require_apache_kafka
    from streams.brokers.kafka_jars import java_command

    require_apache_kafka()
    topic = f"console_{codec}"
    model.add_topic(topic, 1)
    boot = model.bootstrap_servers()
    lines = [f"{codec}-line-{i}-" + "y" * 30 for i in range(5)]
    cmd = java_command("org.apache.kafka.tools.ConsoleProducer",
                       ["--bootstrap-server", boot, "--topic", topic, "--compression-codec", codec,
                        "--producer-property", "linger.ms=200", "--producer-property", "batch.size=65536"])
    done = subprocess.run(cmd, input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-1500:]
    assert set(stored_codecs(model, topic)) == {CODEC_IDS[codec]}
    assert [v.decode() for _, _, v in Confluent().consume(boot, topic, "read_uncommitted", f"g-console-{codec}", len(lines))] == lines


def test_compaction_keeps_a_compressed_batchs_codec(model: ClusterClient) -> None:
    """The model's log cleaner needs the records of compressed batches; what it keeps stays compressed
    with the batch's codec, as Kafka's cleaner writes it, and clients still read it."""
    model.add_topic("compact_zstd", 1, configs={"cleanup.policy": "compact"})
    conn = Conn(leader_address(model, "compact_zstd"))
    try:
        assert conn.produce("compact_zstd", batch_keyed([(b"k1", b"k1-old"), (b"k2", b"k2")], 4)).error_code == 0
        assert conn.produce("compact_zstd", batch_keyed([(b"k1", b"k1-new")], 3)).error_code == 0
    finally:
        conn.close()
    tp = model.tp("compact_zstd", 0)
    assert read_committed_values(model, tp) == [b"k1-old", b"k2", b"k1-new"]
    assert model.compact("compact_zstd") == 1
    assert read_committed_values(model, tp) == [b"k2", b"k1-new"]
    assert stored_codecs(model, "compact_zstd") == [4, 3]
    boot = model.bootstrap_servers()
    assert [v for _, _, v in Confluent().consume(boot, "compact_zstd", "read_committed", "g-compact", 2)] == [b"k2", b"k1-new"]


def batch_keyed(pairs: list[tuple[bytes | None, bytes]], codec: int, ahead_ms: int = 0, ts: int | None = None) -> bytes:
    """A batch stamped now (+ ``ahead_ms``), or at ``ts``."""
    recs = [Record(i, 0, k, v) for i, (k, v) in enumerate(pairs)]
    stamp = int(time.time() * 1000) + ahead_ms if ts is None else ts
    plain = encode_batch(build_batch(recs, base_offset=0, base_timestamp=stamp))
    payload = compress(codec, plain[61:])
    header = bytearray(plain[:61])
    struct.pack_into(">i", header, 8, 49 + len(payload))
    struct.pack_into(">h", header, 21, codec)
    struct.pack_into(">I", header, 17, crc32c(bytes(header[21:]) + payload))
    return bytes(header) + payload


# LogValidator's per-record checks: (compacted topic, batch) -> Kafka 4.1.2's (code, indexes of
# the records in RecordErrors). A key is required on a compacted topic (INVALID_RECORD, 87); a
# CreateTime timestamp more than message.timestamp.after.max.ms (1 h by default) ahead is
# INVALID_TIMESTAMP (32); NO_TIMESTAMP (-1) and old timestamps pass.
HOUR_MS = 3_600_000
RECORD_CASES: dict[str, tuple[bool, Callable[[], bytes], tuple[int, list[int]]]] = {
    "compacted-one-null-key": (True, lambda: batch_keyed([(b"k", b"v"), (None, b"v2")], 0), (87, [1])),
    "compacted-null-keys-gzip": (True, lambda: batch_keyed([(None, b"v"), (None, b"v2")], 1), (87, [0, 1])),
    "compacted-keys-zstd": (True, lambda: batch_keyed([(b"k", b"v")], 4), (0, [])),
    "two-hours-ahead": (False, lambda: batch_keyed([(b"k", b"v")], 0, ahead_ms=2 * HOUR_MS), (32, [0])),
    "two-hours-ahead-gzip": (False, lambda: batch_keyed([(b"k", b"v"), (b"k", b"w")], 1, ahead_ms=2 * HOUR_MS), (32, [0, 1])),
    "half-an-hour-ahead": (False, lambda: batch_keyed([(b"k", b"v")], 0, ahead_ms=HOUR_MS // 2), (0, [])),
    "no-timestamp": (False, lambda: batch_keyed([(b"k", b"v")], 0, ts=-1), (0, [])),
    "negative-timestamp": (False, lambda: batch_keyed([(b"k", b"v")], 0, ts=-5), (0, [])),
}


def record_codes(address: tuple[str, int], compacted_topic: str, topic: str) -> dict[str, tuple[int, list[int]]]:
    out = {}
    conn = Conn(address)
    try:
        for name, (compacted, make, _) in RECORD_CASES.items():
            r = conn.produce(compacted_topic if compacted else topic, make())
            out[name] = (r.error_code, [e.batch_index for e in r.record_errors])
    finally:
        conn.close()
    return out


def test_record_checks_on_the_model(server_factory: Any) -> None:
    # One broker, so one connection reaches both leaders.
    server = server_factory("--cluster", "A", "--seed", "12", "--brokers", "1")
    client = ClusterClient(server.port, "A")
    try:
        client.add_topic("records_compacted", 1, configs={"cleanup.policy": "compact"})
        client.add_topic("records_plain", 1)
        got = record_codes(leader_address(client, "records_plain"), "records_compacted", "records_plain")
    finally:
        client.close()
    assert got == {name: case[-1] for name, case in RECORD_CASES.items()}


def test_record_checks_on_kafka(apache_kafka: Any) -> None:
    from kafka.admin import NewTopic

    address = create_on_kafka(apache_kafka, NewTopic("cmwire-records-compacted", 1, 1, topic_configs={"cleanup.policy": "compact"}),
                              NewTopic("cmwire-records-plain", 1, 1))  # fmt: skip
    got = record_codes(address, "cmwire-records-compacted", "cmwire-records-plain")
    assert got == {name: case[-1] for name, case in RECORD_CASES.items()}


# ---------------------------------------------------------------- ListOffsets MAX_TIMESTAMP (KIP-734)

# The batches, in order: timestamps 1000+delta; the zstd batch holds the first record at
# the log's largest timestamp (1020, offset 3), the gzip batch after it reaches 1020 too.
MAX_TS_SCENARIO = [
    lambda: batch([b"a", b"b"], 0, ts=1000, deltas=[0, 5]),
    lambda: batch([b"c", b"d", b"e"], 4, ts=1000, deltas=[9, 20, 3]),
    lambda: batch([b"f", b"g"], 1, ts=1010, deltas=[10, 10]),
    lambda: batch([b"h"], 3, ts=500),
]


def max_timestamp_answers(address: tuple[str, int], topic: str, lat_address: tuple[str, int], lat_topic: str) -> dict[str, Any]:
    conn, lat_conn = Conn(address), Conn(lat_address)
    try:
        empty = conn.list_offset(topic, -3)
        for make in MAX_TS_SCENARIO:
            assert conn.produce(topic, make()).error_code == 0
        before = int(time.time() * 1000)
        first = lat_conn.produce(lat_topic, batch([b"a", b"b"], 3, ts=1000, deltas=[0, 5]))
        time.sleep(0.01)  # the second batch is stamped later
        second = lat_conn.produce(lat_topic, batch([b"c", b"d"], 0, ts=1000, deltas=[0, 5]))
        after = int(time.time() * 1000)
        lat = lat_conn.list_offset(lat_topic, -3)
        return {
            "empty": empty,
            "uncommitted": conn.list_offset(topic, -3, 0),
            "committed": conn.list_offset(topic, -3, 1),
            "log_append_time": (first.error_code, second.error_code, lat[0], lat[1]),
            "append_time": before <= first.log_append_time_ms < second.log_append_time_ms == lat[2] <= after,
        }
    finally:
        conn.close()
        lat_conn.close()


KIP_734 = {
    "empty": (0, -1, -1, -1),
    "uncommitted": (0, 3, 1020, 0),
    "committed": (0, 3, 1020, 0),
    "log_append_time": (0, 0, 0, 2),  # the later batch holds the largest time: its first record
    "append_time": True,
}


def test_max_timestamp_on_the_model(model: ClusterClient) -> None:
    model.add_topic("maxts", 1)
    model.add_topic("maxts_lat", 1, configs={"message.timestamp.type": "LogAppendTime"})
    got = max_timestamp_answers(leader_address(model, "maxts"), "maxts", leader_address(model, "maxts_lat"), "maxts_lat")
    assert got == KIP_734


def test_max_timestamp_on_kafka(apache_kafka: Any) -> None:
    from kafka.admin import NewTopic

    suffix = uuid.uuid4().hex[:6]
    address = create_on_kafka(apache_kafka, NewTopic(f"maxts-{suffix}", 1, 1),
                              NewTopic(f"maxts-lat-{suffix}", 1, 1, topic_configs={"message.timestamp.type": "LogAppendTime"}))
    assert max_timestamp_answers(address, f"maxts-{suffix}", address, f"maxts-lat-{suffix}") == KIP_734
