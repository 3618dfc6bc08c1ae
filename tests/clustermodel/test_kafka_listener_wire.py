"""The model's Kafka listener at the byte level: Kafka's error codes, envelopes, bad input.

The listeners run in the test's event loop on an in-process ClusterModel; requests are built
with records.kafka_envelope and Kafka's schemas, so every answer is checked as a client reads it.
"""

from __future__ import annotations

import asyncio
import struct
import time

import msgspec
import pytest

from clustermodel import ClusterModel
from clustermodel.kafka import KafkaListeners
from coordinator.ports import IsolationLevel, TopicPartition
from records.kafka_envelope import MODEL_LISTENER_VERSIONS, decode_response, encode_request
from records.registry import default_schemas
from records.segments import Record, build_batch, encode_batch

S = default_schemas()


class Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.cid = 0

    @classmethod
    async def open(cls, port: int) -> Conn:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def call(self, api_key: int, version: int, body: object) -> object:
        self.cid += 1
        self.writer.write(encode_request(api_key, version, self.cid, "wire-test", body))
        frame = await self.read_frame()
        cid, resp = decode_response(frame, api_key, version)
        assert cid == self.cid
        return resp

    async def read_frame(self) -> bytes:
        (size,) = struct.unpack(">i", await asyncio.wait_for(self.reader.readexactly(4), 5))
        return await asyncio.wait_for(self.reader.readexactly(size), 5)

    async def closed(self) -> bool:
        try:
            return await asyncio.wait_for(self.reader.read(1), 5) == b""
        except ConnectionError:
            return True

    def close(self) -> None:
        self.writer.close()


@pytest.fixture
async def rig():
    model = ClusterModel("A", seed=5, brokers=3, journal=False)
    model.add_topic("t", 1)
    listeners = KafkaListeners({"A": model})
    await listeners.start()
    yield model, listeners.clusters["A"]
    await listeners.stop()


def _produce_body(topic: str, records: bytes, acks: int = 1) -> object:
    P = S.nested("ProduceRequest", "PartitionProduceData")
    T = S.nested("ProduceRequest", "TopicProduceData")
    return S.struct("ProduceRequest")(acks=acks, timeout_ms=1000, topic_data=[T(name=topic, partition_data=[P(index=0, records=records)])])


def _batch(values: list[bytes], ts: int = 1000) -> bytes:
    return encode_batch(build_batch([Record(i, 0, None, v) for i, v in enumerate(values)], base_offset=0, base_timestamp=ts))


def _fetch_body(topic: str, offset: int, epoch: int = -1, isolation: int = 0, max_wait_ms: int = 0) -> object:
    P = S.nested("FetchRequest", "FetchPartition")
    T = S.nested("FetchRequest", "FetchTopic")
    return S.struct("FetchRequest")(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20,
                                    isolation_level=isolation, session_epoch=-1,
                                    topics=[T(topic=topic, partitions=[P(partition=0, current_leader_epoch=epoch, fetch_offset=offset,
                                                                          partition_max_bytes=1 << 20)])])


async def test_api_versions_and_unsupported_versions(rig):
    model, cluster = rig
    c = await Conn.open(cluster.ports[0])
    resp = await c.call(18, 3, S.struct("ApiVersionsRequest")(client_software_name="t", client_software_version="1"))
    assert resp.error_code == 0
    assert {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys} == {
        k: v for k, v in MODEL_LISTENER_VERSIONS.items() if k in cluster.dispatcher.handlers
    }
    # An ApiVersions version from the future: v0, UNSUPPORTED_VERSION, the table, on the same connection.
    c.writer.write(struct.pack(">ihhi", 8 + 2, 18, 42, 7) + struct.pack(">h", -1))
    cid, resp = decode_response(await c.read_frame(), 18, 0)
    assert (cid, resp.error_code) == (7, 35) and resp.api_keys
    # InitProducerId v5 (beyond the table): its own response with error 35; the connection stays.
    resp = await c.call(22, 5, S.struct("InitProducerIdRequest")())
    assert resp.error_code == 35
    resp = await c.call(3, 12, S.struct("MetadataRequest")(topics=None))
    assert [t.name for t in resp.topics] == ["t"]
    c.close()


async def test_versions_beyond_the_table_answer_35_where_the_errors_are(rig):
    """A version the model does not serve but Kafka's schema knows: UNSUPPORTED_VERSION in every
    partition asked about (no top-level error code in Produce v12 or ListOffsets v8); the
    connection stays open."""
    model, cluster = rig
    c = await Conn.open(cluster.ports[model.topic("t").partitions[0].leader])
    r = await c.call(0, 12, _produce_body("t", _batch([b"x"])))
    assert [(t.name, [(p.index, p.error_code) for p in t.partition_responses]) for t in r.responses] == [("t", [(0, 35)])]
    LP = S.nested("ListOffsetsRequest", "ListOffsetsPartition")
    LT = S.nested("ListOffsetsRequest", "ListOffsetsTopic")
    body = S.struct("ListOffsetsRequest")(replica_id=-1, topics=[LT(name="t", partitions=[LP(partition_index=0, timestamp=-1)])])
    r = await c.call(2, 8, body)
    assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in r.topics] == [("t", [(0, 35)])]
    assert (await c.call(18, 0, S.struct("ApiVersionsRequest")())).error_code == 0
    assert model.topic("t").partitions[0].leader_log.leo == 0
    c.close()


async def test_malformed_request_closes_only_that_connection(rig, caplog):
    caplog.set_level("WARNING", logger="clustermodel.kafka.listener")
    model, cluster = rig
    bad = await Conn.open(cluster.ports[1])
    good = await Conn.open(cluster.ports[1])
    bad.writer.write(struct.pack(">i", 6) + struct.pack(">hhh", 3, 12, 1))  # a header cut short
    assert await bad.closed()
    unknown = await Conn.open(cluster.ports[1])
    unknown.writer.write(struct.pack(">ihhi", 10, 9999, 0, 1) + b"\x00\x00")  # no such API: Kafka closes
    assert await unknown.closed()
    huge = await Conn.open(cluster.ports[1])
    huge.writer.write(struct.pack(">i", -5))
    assert await huge.closed()
    resp = await good.call(18, 0, S.struct("ApiVersionsRequest")())
    assert resp.error_code == 0
    # Each close is logged, one line each, at a level a default logging setup shows.
    closes = [r for r in caplog.records if "closing a connection" in r.getMessage()]
    assert len(closes) == 3 and all(r.levelname == "WARNING" and "\n" not in r.getMessage() for r in closes)
    again = await Conn.open(cluster.ports[1])
    assert (await again.call(18, 0, S.struct("ApiVersionsRequest")())).error_code == 0
    for conn in (good, again):
        conn.close()


async def test_metadata_topic_ids_epochs_and_advertised_ports(rig):
    model, cluster = rig
    model.elect_leader("t", 0)
    c = await Conn.open(cluster.ports[2])
    resp = await c.call(3, 12, S.struct("MetadataRequest")(topics=None))
    assert {(b.node_id, b.host, b.port) for b in resp.brokers} == {(b, "127.0.0.1", p) for b, p in cluster.ports.items()}
    (topic,) = resp.topics
    part = model.topic("t").partitions[0]
    assert topic.topic_id == model.topic("t").topic_id
    assert (topic.partitions[0].leader_id, topic.partitions[0].leader_epoch) == (part.leader, part.leader_epoch) == (part.leader, 1)
    model.crash_broker(part.replicas[-1] if part.replicas[-1] != part.leader else part.replicas[0])
    cluster.sync()
    resp = await c.call(3, 1, S.struct("MetadataRequest")(topics=[S.nested("MetadataRequest", "MetadataRequestTopic")(name="nope")]))
    assert resp.topics[0].error_code == 3
    assert len(resp.brokers) == 2
    c.close()


async def test_produce_errors_as_kafka_gives_them(rig):
    model, cluster = rig
    part = model.topic("t").partitions[0]
    follower = next(b for b in part.replicas if b != part.leader)
    f = await Conn.open(cluster.ports[follower])
    r = (await f.call(0, 9, _produce_body("t", _batch([b"x"])))).responses[0].partition_responses[0]
    assert r.error_code == 6  # NOT_LEADER_OR_FOLLOWER
    leader = await Conn.open(cluster.ports[part.leader])
    corrupt = bytearray(_batch([b"x"]))
    corrupt[-1] ^= 0xFF
    r = (await leader.call(0, 9, _produce_body("t", bytes(corrupt)))).responses[0].partition_responses[0]
    assert r.error_code == 2  # CORRUPT_MESSAGE: the CRC32C does not match
    # A valid CRC over a batch whose record count lies: the framing check refuses it.
    lying = bytearray(_batch([b"x", b"y"]))
    struct.pack_into(">i", lying, 57, 3)
    from crc32c import crc32c

    struct.pack_into(">I", lying, 17, crc32c(bytes(lying[21:])))
    r = (await leader.call(0, 9, _produce_body("t", bytes(lying)))).responses[0].partition_responses[0]
    assert r.error_code in (2, 87) and model.topic("t").partitions[0].leader_log.leo == 0
    lz4 = bytearray(_batch([b"x"]))
    lz4[22] |= 3  # attributes' low byte: lz4 (the CRC no longer matters: the codec is refused first)
    r = (await leader.call(0, 9, _produce_body("t", bytes(lz4)))).responses[0].partition_responses[0]
    assert r.error_code in (2, 76)
    r = (await leader.call(0, 3, _produce_body("t", _batch([b"a", b"b"])))).responses[0].partition_responses[0]
    assert (r.error_code, r.base_offset) == (0, 0)
    # acks=0: no response at all; the next request's answer comes next.
    leader.writer.write(encode_request(0, 9, 99, "t", _produce_body("t", _batch([b"c"]), acks=0)))
    assert (await leader.call(18, 0, S.struct("ApiVersionsRequest")())).error_code == 0
    assert model.topic("t").partitions[0].leader_log.leo == 3
    for conn in (f, leader):
        conn.close()


async def test_fetch_leader_epoch_checks_and_isolation(rig):
    model, cluster = rig
    model.produce("t", 0, [(None, b"a")])
    pid = model.init_producer_id("tx")
    model.begin_transaction("tx")
    model.produce_transactional("tx", "t", 0, [(None, b"t1")])
    model.abort_transaction("tx")
    model.begin_transaction("tx")
    model.produce_transactional("tx", "t", 0, [(None, b"open")])
    part = model.topic("t").partitions[0]
    c = await Conn.open(cluster.ports[part.leader])
    r = (await c.call(1, 12, _fetch_body("t", 0, epoch=part.leader_epoch, isolation=1))).responses[0].partitions[0]
    assert r.error_code == 0
    assert (r.high_watermark, r.last_stable_offset, r.log_start_offset) == (part.hw, part.lso(), 0)
    assert r.last_stable_offset == 3 < r.high_watermark == 4
    assert [(a.producer_id, a.first_offset) for a in r.aborted_transactions] == [(pid.producer_id, 1)]
    uncommitted = (await c.call(1, 12, _fetch_body("t", 0))).responses[0].partitions[0]
    assert uncommitted.aborted_transactions is None and len(uncommitted.records) > len(r.records)
    old_leader = part.leader
    model.elect_leader("t", 0)
    cluster.sync()
    stale = (await c.call(1, 12, _fetch_body("t", 0, epoch=0))).responses[0].partitions[0]
    assert stale.error_code == 6  # the old leader is no longer leader
    new = await Conn.open(cluster.ports[part.leader])
    fenced = (await new.call(1, 12, _fetch_body("t", 0, epoch=0))).responses[0].partitions[0]
    assert fenced.error_code == 74  # FENCED_LEADER_EPOCH
    future = (await new.call(1, 12, _fetch_body("t", 0, epoch=part.leader_epoch + 1))).responses[0].partitions[0]
    assert future.error_code == 75  # UNKNOWN_LEADER_EPOCH
    out_of_range = (await new.call(1, 12, _fetch_body("t", 99, epoch=part.leader_epoch))).responses[0].partitions[0]
    assert out_of_range.error_code == 1
    # A long poll returns when data arrives, not at max_wait.
    start = time.monotonic()
    waiting = asyncio.ensure_future(new.call(1, 12, _fetch_body("t", 4, max_wait_ms=5000)))
    await asyncio.sleep(0.1)
    model.produce("t", 0, [(None, b"late")])
    cluster.notify()
    got = (await waiting).responses[0].partitions[0]
    assert got.records and time.monotonic() - start < 2
    assert old_leader != part.leader
    for conn in (c, new):
        conn.close()


async def test_crashed_broker_drops_connections(rig):
    model, cluster = rig
    c = await Conn.open(cluster.ports[1])
    assert (await c.call(18, 0, S.struct("ApiVersionsRequest")())).error_code == 0
    model.crash_broker(1)
    cluster.sync()
    assert await c.closed()
    again = await Conn.open(cluster.ports[1])
    assert await again.closed()
    model.restart_broker(1)
    cluster.sync()
    back = await Conn.open(cluster.ports[1])
    assert (await back.call(18, 0, S.struct("ApiVersionsRequest")())).error_code == 0
    back.close()


async def test_list_offsets_and_offset_for_leader_epoch(rig):
    model, cluster = rig
    model.produce("t", 0, [(None, b"a"), (None, b"b")], timestamp=1000)
    model.elect_leader("t", 0)
    model.produce("t", 0, [(None, b"c")], timestamp=2000)
    model.delete_records("t", 0, 1)
    part = model.topic("t").partitions[0]
    c = await Conn.open(cluster.ports[part.leader])
    LP = S.nested("ListOffsetsRequest", "ListOffsetsPartition")
    LT = S.nested("ListOffsetsRequest", "ListOffsetsTopic")

    async def list_offset(ts: int) -> tuple[int, int]:
        body = S.struct("ListOffsetsRequest")(replica_id=-1, topics=[LT(name="t", partitions=[LP(partition_index=0, timestamp=ts, current_leader_epoch=-1)])])
        r = (await c.call(2, 7, body)).topics[0].partitions[0]
        assert r.error_code == 0
        return r.offset, r.leader_epoch

    assert await list_offset(-2) == (1, 0)  # earliest: the log start DeleteRecords moved
    assert await list_offset(-1) == (3, 1)  # latest: the HW
    assert (await list_offset(1500))[0] == 2  # the first batch stamped at or after 1500
    assert (await list_offset(5000))[0] == -1
    OP = S.nested("OffsetForLeaderEpochRequest", "OffsetForLeaderPartition")
    OT = S.nested("OffsetForLeaderEpochRequest", "OffsetForLeaderTopic")
    body = S.struct("OffsetForLeaderEpochRequest")(replica_id=-1, topics=[OT(topic="t", partitions=[
        OP(partition=0, current_leader_epoch=part.leader_epoch, leader_epoch=0)])])
    r = (await c.call(23, 4, body)).topics[0].partitions[0]
    assert (r.error_code, r.leader_epoch, r.end_offset) == (0, 0, 2)
    c.close()


async def test_mirror_topic_read_only_then_writable_and_identical_bytes(rig):
    model, cluster = rig
    model.produce("t", 0, [(b"k", b"v1"), (b"k", b"v2")])
    b_model = ClusterModel("B", seed=6, brokers=3, journal=False)
    listeners_b = KafkaListeners({"B": b_model})
    await listeners_b.start()
    try:
        src = model.topic("t")
        b_model.create_topic("t", src.topic_id, 1, read_only=True, mirror_name="m")
        tp = TopicPartition(src.topic_id, 0)
        b_model.bump_leader_epoch(tp, src.partitions[0].leader_epoch)
        b_model.append_mirror_batches(tp, model.fetch(tp, 0, 1 << 20, IsolationLevel.READ_UNCOMMITTED).batches)
        cb = listeners_b.clusters["B"]
        on_a = await Conn.open(cluster.ports[src.partitions[0].leader])
        on_b = await Conn.open(cb.ports[b_model.topic("t").partitions[0].leader])
        ra = (await on_a.call(1, 11, _fetch_body("t", 0))).responses[0].partitions[0]
        rb = (await on_b.call(1, 11, _fetch_body("t", 0))).responses[0].partitions[0]
        assert ra.records == rb.records and ra.records  # batch for batch, byte for byte
        refused = (await on_b.call(0, 9, _produce_body("t", _batch([b"x"])))).responses[0].partition_responses[0]
        assert refused.error_code == 134  # READ_ONLY_TOPIC
        b_model.set_read_only(src.topic_id, False)
        ok = (await on_b.call(0, 9, _produce_body("t", _batch([b"x"])))).responses[0].partition_responses[0]
        assert (ok.error_code, ok.base_offset) == (0, 2)
        on_a.close()
        on_b.close()
    finally:
        await listeners_b.stop()


async def test_headers_timestamps_and_gzip_reach_consumers(rig):
    import gzip

    from records.segments import Header, decode_batch

    model, cluster = rig
    part = model.topic("t").partitions[0]
    c = await Conn.open(cluster.ports[part.leader])
    records = [Record(0, 0, b"k0", b"v0", (Header("trace", b"abc"),)), Record(1, 7, None, b"v1")]
    plain = encode_batch(build_batch(records, base_offset=0, base_timestamp=5000))
    r = (await c.call(0, 9, _produce_body("t", plain))).responses[0].partition_responses[0]
    assert (r.error_code, r.base_offset) == (0, 0)
    # The same records gzip-compressed (codec 1): checked inflated, stored and served as sent.
    raw = bytearray(plain)
    section = gzip.compress(bytes(raw[61:]))
    header = bytearray(raw[:61])
    header[22] |= 1
    struct.pack_into(">i", header, 8, 49 + len(section))
    from crc32c import crc32c

    struct.pack_into(">I", header, 17, crc32c(bytes(header[21:]) + section))
    gzipped = bytes(header) + section
    r = (await c.call(0, 9, _produce_body("t", gzipped))).responses[0].partition_responses[0]
    assert (r.error_code, r.base_offset) == (0, 2)
    got = (await c.call(1, 12, _fetch_body("t", 0))).responses[0].partitions[0]
    first, pos = decode_batch(got.records, 0)
    second, _ = decode_batch(got.records, pos, decompress=True)
    # Only the broker's fields differ: base offset and partition leader epoch (outside the CRC).
    assert got.records[pos + 16 :] == gzipped[16:] and got.records[pos : pos + 8] == struct.pack(">q", 2)
    for batch, base, codec in ((first, 0, 0), (second, 2, 1)):
        assert batch.base_offset == base and batch.compression == codec
        assert [(r.key, r.value, r.headers) for r in batch.records] == [(r.key, r.value, r.headers) for r in records]
        assert [batch.timestamp_of(r) for r in batch.records] == [5000, 5007]
    # ListOffsets by timestamp finds the record, not only its batch.
    LP = S.nested("ListOffsetsRequest", "ListOffsetsPartition")
    LT = S.nested("ListOffsetsRequest", "ListOffsetsTopic")
    body = S.struct("ListOffsetsRequest")(replica_id=-1, topics=[LT(name="t", partitions=[LP(partition_index=0, timestamp=5001, current_leader_epoch=-1)])])
    r = (await c.call(2, 7, body)).topics[0].partitions[0]
    assert (r.error_code, r.offset, r.timestamp) == (0, 1, 5007)
    c.close()


async def test_handler_failure_without_a_top_level_error_code_keeps_the_connection(rig, monkeypatch):
    """Produce and Metadata have no top-level error code: the error goes in every partition or
    topic asked about, as Kafka's getErrorResponse puts it, and the connection stays open."""
    model, cluster = rig

    def broken(*_: object) -> object:
        raise RuntimeError("a handler bug")

    for key in (0, 3, 20):
        monkeypatch.setitem(cluster.dispatcher.handlers, key, broken)
    c = await Conn.open(cluster.ports[0])
    r = await c.call(0, 9, _produce_body("t", _batch([b"x"])))
    assert [(t.name, [(p.index, p.error_code) for p in t.partition_responses]) for t in r.responses] == [("t", [(0, -1)])]
    MT = S.nested("MetadataRequest", "MetadataRequestTopic")
    r = await c.call(3, 12, S.struct("MetadataRequest")(topics=[MT(name="t"), MT(name="u")]))
    assert [(t.name, t.error_code) for t in r.topics] == [("t", -1), ("u", -1)]
    r = await c.call(20, 4, S.struct("DeleteTopicsRequest")(topic_names=["t"], timeout_ms=1000))
    assert [(t.name, t.error_code) for t in r.responses] == [("t", -1)]
    assert (await c.call(18, 0, S.struct("ApiVersionsRequest")())).error_code == 0
    assert model.topic("t").partitions[0].leader_log.leo == 0
    c.close()


async def test_handler_failure_answers_unknown_server_error(rig, monkeypatch, caplog):
    model, cluster = rig

    def broken(*_: object) -> object:
        raise RuntimeError("a handler bug")

    monkeypatch.setitem(cluster.dispatcher.handlers, 22, broken)
    c = await Conn.open(cluster.ports[0])
    assert (await c.call(22, 4, S.struct("InitProducerIdRequest")())).error_code == -1
    assert (await c.call(18, 0, S.struct("ApiVersionsRequest")())).error_code == 0  # the connection stays
    assert "a handler bug" in caplog.text
    c.close()


def test_server_flags_for_kafka_listeners():
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    refused = subprocess.run([sys.executable, "-m", "clustermodel.server", "--kafka-host", "0.0.0.0"],
                             capture_output=True, text=True, env=env, cwd=root, timeout=30)
    assert refused.returncode == 2 and "loopback" in refused.stderr
    proc = subprocess.Popen([sys.executable, "-m", "clustermodel.server", "--port", "0", "--no-kafka-listeners"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, cwd=root)
    try:
        assert proc.stdout.readline().startswith("PORT ")
        assert proc.stdout.readline().startswith("clusters: ")  # no KAFKA lines
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0
        proc.stdout.close()


async def test_offset_fetch_require_stable_and_transactional_offsets(rig):
    from clustermodel.kafka.handlers_cluster import coordinator_for

    model, cluster = rig
    model.produce("t", 0, [(None, b"a"), (None, b"b")])
    ident = model.init_producer_id("tx")
    model.add_offsets_to_txn("tx", ident.producer_id, ident.producer_epoch, "g")
    model.txn_offset_commit("tx", ident.producer_id, ident.producer_epoch, "g", [("t", 0, 2, -1)])
    G = S.nested("OffsetFetchRequest", "OffsetFetchRequestGroup")
    T = S.nested("OffsetFetchRequest", "OffsetFetchRequestTopics")
    c = await Conn.open(cluster.ports[coordinator_for(cluster, "g")])

    async def fetch(stable: bool) -> tuple[int, int]:
        body = S.struct("OffsetFetchRequest")(groups=[G(group_id="g", topics=[T(name="t", partition_indexes=[0])])], require_stable=stable)
        (p,) = (await c.call(9, 8, body)).groups[0].topics[0].partitions
        return p.error_code, p.committed_offset

    assert await fetch(True) == (88, -1)  # UNSTABLE_OFFSET_COMMIT while the transaction is open
    assert await fetch(False) == (0, -1)
    model.end_txn("tx", ident.producer_id, ident.producer_epoch, True)
    assert await fetch(True) == (0, 2)
    other = await Conn.open(cluster.ports[(coordinator_for(cluster, "g") + 1) % 3])
    body = S.struct("OffsetFetchRequest")(groups=[G(group_id="g", topics=None)])
    assert (await other.call(9, 8, body)).groups[0].error_code == 16  # NOT_COORDINATOR
    for conn in (c, other):
        conn.close()


async def test_acks_all_waits_for_the_isr(rig):
    model, cluster = rig
    part = model.topic("t").partitions[0]
    follower = next(b for b in part.replicas if b != part.leader)
    model.set_follower_stalled(follower, True)
    cluster.sync()
    c = await Conn.open(cluster.ports[part.leader])

    def body(acks: int, timeout_ms: int) -> object:
        b = _produce_body("t", _batch([b"x"]), acks=acks)
        return msgspec.structs.replace(b, timeout_ms=timeout_ms)

    r = (await c.call(0, 9, body(-1, 300))).responses[0].partition_responses[0]
    assert r.error_code == 7  # REQUEST_TIMED_OUT: the stalled follower is still in the ISR
    r = (await c.call(0, 9, body(1, 300))).responses[0].partition_responses[0]
    assert (r.error_code, r.base_offset) == (0, 1)
    waiting = asyncio.ensure_future(c.call(0, 9, body(-1, 5000)))
    await asyncio.sleep(0.2)
    assert not waiting.done()
    model.set_follower_stalled(follower, False)
    model.run_replication()
    cluster.sync()
    r = (await waiting).responses[0].partition_responses[0]
    assert (r.error_code, r.base_offset) == (0, 2)
    c.close()


async def test_a_parked_fetch_wakes_for_its_own_partitions_only(rig, monkeypatch):
    """A long poll is parked on the partitions it reads: an append to another partition does not
    read it again, its own partition's append answers it at once, with no ``notify`` (the model's
    change hook), and a call of the model's own API that changed no broker wakes nothing."""
    from clustermodel.kafka import handlers_fetch

    model, cluster = rig
    model.add_topic("other", 1)
    part = model.topics[model.topic_ids["t"]].partitions[0]
    reads = []
    real = handlers_fetch._fetch_once
    monkeypatch.setattr(handlers_fetch, "_fetch_once", lambda *a: reads.append(1) or real(*a))
    c = await Conn.open(cluster.ports[part.leader])
    start = time.monotonic()
    waiting = asyncio.ensure_future(c.call(1, 12, _fetch_body("t", 0, max_wait_ms=5000)))
    await asyncio.sleep(0.1)
    assert len(reads) == 1 and cluster._parked
    for i in range(5):
        model.produce("other", 0, [(None, b"elsewhere %d" % i)])
        cluster.sync()  # as after each call of the model's own API
    await asyncio.sleep(0.1)
    assert len(reads) == 1 and not waiting.done()
    model.produce("t", 0, [(None, b"mine")])
    got = (await waiting).responses[0].partitions[0]
    assert got.records and time.monotonic() - start < 2 and len(reads) == 2
    assert not cluster._parked  # a woken fetch leaves no registration behind
    c.close()
