"""The Kafka source port against a real broker: a second noida-db 0.2.3 (its own port and data
directory) loaded by real aiokafka producers (plain, gzip, idempotent, transactions committed,
aborted and one left open) and a consumer group.

What the port returns is checked against what the broker holds (its own ``kafka.json``, byte for
byte) and against what real clients see (aiokafka consumers read_uncommitted / read_committed,
committed offsets, kafka-python's record decoder).

Where noida-db 0.2.3 is not Kafka (also in docs/kafka-source.md), and how the port takes it:

- Metadata carries no topic IDs (all zero): the port makes stable ones, ``uuid5(cluster id/name)``.
- Its cluster ID is the same constant on every instance.
- Leader epochs are always 0, and data batches keep the partitionLeaderEpoch the producer sent
  (-1); only its control batches carry epoch 0. A destination's epoch cache skips negative
  epochs, as Kafka's does, so this reads like a source that never changed leaders.
- It ignores Fetch's partition_max_bytes and max_bytes: the port trims to the budget itself.
- A READ_COMMITTED Fetch leaves the aborted transactions' batches out (Kafka returns them and
  lists the transactions); the mirror fetches READ_UNCOMMITTED, where both agree.
- It knows OffsetsForLeaderEpoch (v0-4; epoch 0 ends at the LEO), but not KIP-1279's
  ReadMirrorStates: no LME, the partition aligns from offset 0, as for an old source.
- It has no authorizer and no ACLs; DescribeAcls answers an empty list.
- Its SASL offers PLAIN only (any credentials pass), no SCRAM; it has no TLS listener (the TLS
  tests put one in front of it: ``tls_front.py``).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from aiokafka import AIOKafkaConsumer, TopicPartition as KafkaTP

from coordinator.ports import (
    FencedLeaderEpoch,
    GroupType,
    IsolationLevel,
    NotLeader,
    OffsetOutOfRange,
    PartitionMetadata,
    SourceCluster,
    SourceUnavailable,
    TopicPartition,
    UnknownLeaderEpoch,
    UnknownTopicId,
)
from streams.brokers.noida import LocalBroker
from records.registry import default_schemas
from streams.kafka.wire import CodecRequest, KafkaProtocolError, UnsupportedApi, _n, _s, port_error, split_batches
from streams.kafka.source import KafkaSourceCluster, client_settings, parse_jaas
from streams.config import ConfigError
from tls_front import TlsFront
from kafka_source_data import (
    CONFIGS,
    GROUP,
    GROUP_OFFSETS,
    TOPICS,
    broker_log,
    consume,
    load_source,
    values,
)

PLAIN_LOGIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule"


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalBroker, KafkaSourceCluster]]:
    broker = LocalBroker(tmp_path_factory.mktemp("kafka-source"))
    broker.start()
    loop = asyncio.new_event_loop()
    open_txn = None
    port = None
    try:
        open_txn = loop.run_until_complete(load_source(broker.bootstrap))
        port = KafkaSourceCluster(broker.bootstrap, {"client.id": "kip1279-test-source"})
        yield broker, port
    finally:
        if port is not None:
            port.close()
        if open_txn is not None:
            loop.run_until_complete(open_txn.stop())
        loop.close()
        broker.stop()


def _tps(port: KafkaSourceCluster) -> dict[tuple[str, int], TopicPartition]:
    return {(t.name, p.partition): p.topic_partition for t in port.describe_topics() for p in t.partitions}


def _fetch_all(port: KafkaSourceCluster, tps: list[TopicPartition], isolation: IsolationLevel,
               max_bytes: int = 300) -> dict[TopicPartition, list[Any]]:  # fmt: skip
    """Every batch up to the HW (or LSO), through call_many: one Fetch per broker per wave."""
    out: dict[TopicPartition, list[Any]] = {tp: [] for tp in tps}
    offsets = dict.fromkeys(tps, 0)
    results: dict[TopicPartition, Any] = {}
    for _ in range(1000):
        todo = [tp for tp in tps if tp not in results or results[tp].batches]
        if not todo:
            return out
        got = port.call_many([("fetch", (tp, offsets[tp], max_bytes, isolation), None) for tp in todo])
        for tp, r in zip(todo, got):
            assert not isinstance(r, Exception), r
            results[tp] = r
            out[tp].extend(r.batches)
            if r.batches:
                offsets[tp] = r.batches[-1].next_offset
                assert len(r.batches) == 1 or sum(len(b.payload) for b in r.batches) <= max_bytes
    raise AssertionError("fetching never ended")


def test_is_a_source_cluster_port(source: tuple[LocalBroker, KafkaSourceCluster]) -> None:
    _, port = source
    assert isinstance(port, SourceCluster)
    topics = {t.name: t for t in port.describe_topics()}
    assert {n: len(t.partitions) for n, t in topics.items()} == TOPICS  # __consumer_offsets is internal: left out
    assert len({t.topic_id for t in topics.values()}) == 3 and all(t.topic_id.int for t in topics.values())
    assert port.describe_topics([topics["idem"].topic_id])[0].name == "idem"
    assert all(p.leader >= 0 and p.leader_epoch == 0 for t in topics.values() for p in t.partitions)
    assert port.cluster_id()


def test_fetch_returns_the_brokers_batches_byte_for_byte(source: tuple[LocalBroker, KafkaSourceCluster]) -> None:
    broker, port = source
    tps = _tps(port)
    fetched = _fetch_all(port, list(tps.values()), IsolationLevel.READ_UNCOMMITTED)
    hws = {key: port.list_offsets(tp).hw for key, tp in tps.items()}
    held = broker_log(broker.data_dir, hws)
    kinds = set()
    for key, tp in tps.items():
        got = fetched[tp]
        # Up to the HW: the open transaction's records are in, as the mirror needs them.
        assert got and got[-1].next_offset == hws[key], key
        assert [(b.base_offset, b.payload) for b in got] == [(o, raw) for o, raw in held[key] if o < hws[key]], key
        for b in got:
            kinds.add("gzip" if b.payload[22] & 0x07 == 1 else "txn" if b.is_transactional else
                      "idempotent" if b.producer_id >= 0 else "plain")  # fmt: skip
            kinds.add(f"control-{b.control_type.name}" if b.is_control else "data")
            assert b.record_count == int.from_bytes(b.payload[57:61], "big")
            assert b.producer_id == int.from_bytes(b.payload[43:51], "big", signed=True)
    assert kinds >= {"gzip", "txn", "idempotent", "plain", "control-COMMIT", "control-ABORT", "data"}
    # The same records a real read_uncommitted consumer reads, decoded by another implementation.
    for key in [("plain", 0), ("plain", 2), ("idem", 1), ("txn", 1)]:
        assert values(fetched[tps[key]]) == _run(consume(broker.bootstrap, *key, "read_uncommitted", hws[key])), key


def test_list_offsets_and_read_committed_match_real_consumers(source: tuple[LocalBroker, KafkaSourceCluster]) -> None:
    broker, port = source
    tps = _tps(port)

    async def ends() -> tuple[dict[Any, int], dict[Any, int], dict[Any, int]]:
        out = []
        for iso in ("read_uncommitted", "read_committed"):
            c = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, isolation_level=iso)
            await c.start()
            try:
                ktps = [KafkaTP(*k) for k in tps]
                out.append({(k.topic, k.partition): v for k, v in (await c.end_offsets(ktps)).items()})
                if iso == "read_uncommitted":
                    out.append({(k.topic, k.partition): v for k, v in (await c.beginning_offsets(ktps)).items()})
            finally:
                await c.stop()
        return out[0], out[1], out[2]

    hw, start, lso = _run(ends())
    offsets = {key: port.list_offsets(tp) for key, tp in tps.items()}
    assert {k: (o.log_start, o.hw, o.lso) for k, o in offsets.items()} == {k: (start[k], hw[k], lso[k]) for k in tps}
    assert offsets[("txn", 1)].lso < offsets[("txn", 1)].hw  # the open transaction holds the LSO back
    # call_many answers the same, in one ListOffsets round per broker.
    many = port.call_many([("list_offsets", (tp,), None) for tp in tps.values()])
    assert many == list(offsets.values())
    # read_committed: up to the LSO, aborted transactions listed (not removed); filtered as a
    # consumer filters, they give what a real read_committed consumer reads.
    committed = _fetch_all(port, list(tps.values()), IsolationLevel.READ_COMMITTED, max_bytes=1 << 20)
    uncommitted = _fetch_all(port, list(tps.values()), IsolationLevel.READ_UNCOMMITTED, max_bytes=1 << 20)
    for key in [("plain", 0), ("plain", 1), ("txn", 0), ("txn", 1)]:
        tp = tps[key]
        result = port.fetch(tp, 0, 1 << 20, IsolationLevel.READ_COMMITTED)
        assert result.lso == offsets[key].lso
        assert all(b.base_offset < result.lso for b in committed[tp])
        got = values(committed[tp], result.aborted_transactions, committed_only=True)
        assert got and got == _run(consume(broker.bootstrap, *key, "read_committed", offsets[key].lso)), key
        everything = values(uncommitted[tp])
        if key[0] == "txn":  # transactions 2 and 5 were aborted: the mirror fetches them, consumers skip them
            assert any(v.startswith(b"txn-2-") for _, v in everything if v)
            assert not any(v.startswith((b"txn-2-", b"txn-5-")) for _, v in got if v)
            assert any(v.startswith(b"txn-0-") for _, v in got if v)
    assert any(port.fetch(tps[k], 0, 1 << 20, IsolationLevel.READ_COMMITTED).aborted_transactions
               for k in [("plain", 0), ("plain", 1), ("txn", 0), ("txn", 1)])  # fmt: skip


def test_epochs_lme_and_out_of_range(source: tuple[LocalBroker, KafkaSourceCluster]) -> None:
    _, port = source
    tp = _tps(port)[("idem", 0)]
    offsets = port.list_offsets(tp)
    assert port.end_offset_for_epoch(tp, 0).end_offset == offsets.hw  # no open transaction here: LEO = HW
    assert port.latest_epoch(tp) == 0
    assert port.last_mirrored_epoch("any-mirror", tp) is None  # no KIP-1279 ReadMirrorStates: no LME
    with pytest.raises(OffsetOutOfRange) as e:
        port.fetch(tp, offsets.hw + 100, 1000, IsolationLevel.READ_UNCOMMITTED)
    assert (e.value.log_start, e.value.leo) == (offsets.log_start, offsets.hw)
    with pytest.raises(UnknownTopicId):
        port.list_offsets(TopicPartition(tp.topic_id, 99))


def test_groups_configs_acls(source: tuple[LocalBroker, KafkaSourceCluster]) -> None:
    broker, port = source
    tps = _tps(port)
    groups = {g.group_id: g for g in port.list_groups()}
    assert groups[GROUP].group_type is GroupType.CONSUMER and not groups[GROUP].active
    got = {(o.topic_id, o.partition): o.offset for o in port.group_offsets(GROUP)}
    assert got == {(tps[k].topic_id, tps[k].partition): v for k, v in GROUP_OFFSETS.items()}
    assert port.group_offsets("no-such-group") == []

    async def with_member() -> tuple[bool, bool]:
        c = AIOKafkaConsumer("idem", bootstrap_servers=broker.bootstrap, group_id="live-group")
        await c.start()
        try:
            deadline = asyncio.get_running_loop().time() + 15
            while not c.assignment() and asyncio.get_running_loop().time() < deadline:
                await c.getmany(timeout_ms=200)  # joined and assigned: a member of the group
            return await asyncio.to_thread(port.is_group_active, "live-group"), any(
                g.group_id == "live-group" and g.active and g.member_count == 1 for g in port.list_groups())
        finally:
            await c.stop()

    assert _run(with_member()) == (True, True)
    names = {t.name: t.topic_id for t in port.describe_topics()}
    for name in TOPICS:
        assert port.describe_configs(names[name]) == CONFIGS.get(name, {})  # only what was set, no defaults
    assert port.describe_acls() == []


def test_unreachable_source_raises_source_unavailable(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    port = KafkaSourceCluster(f"127.0.0.1:{dead}", request_timeout_ms=2000)
    try:
        started = time.monotonic()
        with pytest.raises(SourceUnavailable):
            port.describe_topics()
        assert time.monotonic() - started < 10
    finally:
        port.close()
    # A source that goes away and comes back: unavailable meanwhile, then answers again.
    broker = LocalBroker(tmp_path / "flaky")
    broker.start()
    port = KafkaSourceCluster(broker.bootstrap, request_timeout_ms=2000)
    try:
        assert port.describe_topics() == []
        broker.stop()
        with pytest.raises(SourceUnavailable):
            port.describe_topics()
        broker.start()
        assert port.describe_topics() == []
    finally:
        port.close()
        broker.stop()


def test_client_settings_from_the_mirror_config(source: tuple[LocalBroker, KafkaSourceCluster]) -> None:
    broker, _ = source
    assert parse_jaas(f'{PLAIN_LOGIN} required username="alice" password="p\\"w";', "PLAIN") == ("alice", 'p"w')
    assert parse_jaas(f"{SCRAM_LOGIN} required username=bob password=x;", "SCRAM-SHA-512") == ("bob", "x")
    with pytest.raises(ConfigError, match="ScramLoginModule"):
        parse_jaas(f'{PLAIN_LOGIN} required username="a" password="b";', "SCRAM-SHA-256")
    with pytest.raises(ConfigError, match="sasl.jaas.config"):
        client_settings({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"})
    with pytest.raises(ConfigError, match="security.protocol"):
        client_settings({"security.protocol": "TLS"})
    secret = "s3cret-never-shown"
    jaas = f'{PLAIN_LOGIN} required username="alice" password="{secret}";'
    # SASL/PLAIN through aiokafka's SASL layer against the real broker.
    port = KafkaSourceCluster(broker.bootstrap, {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                                 "sasl.jaas.config": jaas})  # fmt: skip
    try:
        assert set(TOPICS) <= {t.name for t in port.describe_topics()}
    finally:
        port.close()
    # The broker offers no SCRAM: the port says the source is unavailable, without the secret.
    port = KafkaSourceCluster(broker.bootstrap, {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                                                 "sasl.jaas.config": jaas.replace(PLAIN_LOGIN, SCRAM_LOGIN)},
                              request_timeout_ms=3000)  # fmt: skip
    try:
        with pytest.raises(SourceUnavailable) as e:
            port.describe_topics()
        assert secret not in str(e.value)
    finally:
        port.close()
    # Bad settings fail each call with the setting named (the partitions go FAILED and say why).
    port = KafkaSourceCluster(broker.bootstrap, {"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"})
    try:
        with pytest.raises(SourceUnavailable, match="sasl.mechanism"):
            port.cluster_id()
    finally:
        port.close()


def test_fetched_bytes_are_cut_to_whole_checked_v2_batches(source: tuple[LocalBroker, KafkaSourceCluster]) -> None:
    """A partial last batch (a broker cuts a response at its byte limit) is dropped as a consumer
    drops it; a corrupt batch or an old message format is an error, never copied."""
    _, port = source
    tp = _tps(port)[("idem", 0)]
    raw = b"".join(b.payload for b in port.fetch(tp, 0, 1 << 20, IsolationLevel.READ_UNCOMMITTED).batches)
    whole = split_batches(raw, tp)
    assert len(whole) > 2 and b"".join(b.payload for b in whole) == raw
    assert split_batches(raw[:-5], tp) == whole[:-1]
    corrupt = bytearray(raw)
    corrupt[len(whole[0].payload) - 1] ^= 0xFF  # the first batch's last byte: its CRC no longer matches
    with pytest.raises(KafkaProtocolError, match="CRC"):
        split_batches(bytes(corrupt), tp)
    legacy = bytearray(raw)
    legacy[16] = 1  # magic v1: a message set from before Kafka 0.11
    with pytest.raises(KafkaProtocolError, match="message format v1"):
        split_batches(bytes(legacy), tp)


def test_kafka_errors_become_the_port_errors_the_core_handles() -> None:
    tp = TopicPartition(uuid.uuid4(), 0)
    part = PartitionMetadata(tp.topic_id, 0, leader=2, leader_epoch=7, replicas=(1, 2), isr=(2,))
    assert isinstance(port_error(tp, 6, "Fetch", 7, part), NotLeader)  # NOT_LEADER_OR_FOLLOWER
    offline = port_error(tp, 5, "Fetch", 7, part)  # LEADER_NOT_AVAILABLE
    assert isinstance(offline, NotLeader) and offline.leader == -1
    fenced = port_error(tp, 74, "Fetch", 5, part)
    assert isinstance(fenced, FencedLeaderEpoch) and (fenced.request_epoch, fenced.leader_epoch) == (5, 7)
    assert isinstance(port_error(tp, 75, "Fetch", 9, part), UnknownLeaderEpoch)
    assert isinstance(port_error(tp, 3, "Fetch", 7, part), UnknownTopicId)
    other = port_error(tp, 87, "Fetch", 7, part)
    assert isinstance(other, KafkaProtocolError) and not other.retriable and "87" in str(other)


def test_stale_metadata_is_refreshed_and_the_call_retried(source: tuple[LocalBroker, KafkaSourceCluster]) -> None:
    """A partition the port's cached metadata does not know yet (created on the source meanwhile):
    the call refreshes the metadata and succeeds, without the caller doing anything."""
    broker, port = source

    async def grow(step: str) -> None:
        from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic

        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            if step == "create":
                await admin.create_topics([NewTopic("grow", 1, 1)])
            else:
                await admin.create_partitions({"grow": NewPartitions(total_count=2)})
        finally:
            await admin.close()

    _run(grow("create"))
    tid = next(t.topic_id for t in port.describe_topics() if t.name == "grow")  # cached from here on
    _run(grow("partitions"))
    new = TopicPartition(tid, 1)
    assert port.list_offsets(new).hw == 0
    assert port.call_many([("fetch", (new, 0, 1000, IsolationLevel.READ_UNCOMMITTED), None),
                           ("list_offsets", (new,), None)])[0].batches == ()  # fmt: skip


def test_tls_and_mutual_tls_to_the_source(source: tuple[LocalBroker, KafkaSourceCluster], tmp_path: Path) -> None:
    """``security.protocol=SSL`` (and SASL_SSL) with the PEM trust and key stores, through a TLS listener (trustme
    certificates) in front of the real broker, which has none of its own (``tls_front``)."""
    broker, plain = source
    ca = trustme.CA()
    ca_pem = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_pem))
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(server)
    tp = _tps(plain)[("idem", 1)]
    expected = [b.payload for b in plain.fetch(tp, 0, 1 << 20, IsolationLevel.READ_UNCOMMITTED).batches]
    front = TlsFront((broker.host, broker.port), server).start()
    try:
        props = {"security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca_pem)}
        with KafkaSourceCluster(f"127.0.0.1:{front.port}", props) as port:
            assert set(TOPICS) <= {t.name for t in port.describe_topics()}
            assert [b.payload for b in port.fetch(tp, 0, 1 << 20, IsolationLevel.READ_UNCOMMITTED).batches] == expected
        assert front.handshakes >= 1
        sasl = {**props, "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                "sasl.jaas.config": f'{PLAIN_LOGIN} required username="mirror" password="pw";'}  # fmt: skip
        with KafkaSourceCluster(f"127.0.0.1:{front.port}", sasl) as port:  # SASL/PLAIN inside TLS
            assert set(TOPICS) <= {t.name for t in port.describe_topics()}
        stranger = tmp_path / "stranger.pem"
        trustme.CA().cert_pem.write_to_path(str(stranger))
        with KafkaSourceCluster(f"127.0.0.1:{front.port}", {**props, "ssl.truststore.location": str(stranger)},
                                request_timeout_ms=3000) as port:  # fmt: skip
            with pytest.raises(SourceUnavailable):  # the listener's certificate is not trusted
                port.describe_topics()
    finally:
        front.stop()
    # Mutual TLS: the listener requires a client certificate; inline PEM key store and trust store.
    mutual = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1").configure_cert(mutual)
    ca.configure_trust(mutual)
    mutual.verify_mode = ssl.CERT_REQUIRED
    leaf = ca.issue_cert("mirror.clients.example")
    inline = {"security.protocol": "SSL", "ssl.truststore.type": "PEM",
              "ssl.truststore.certificates": ca.cert_pem.bytes().decode()}  # fmt: skip
    front = TlsFront((broker.host, broker.port), mutual).start()
    try:
        keystore = {"ssl.keystore.type": "PEM", "ssl.keystore.key": leaf.private_key_pem.bytes().decode(),
                    "ssl.keystore.certificate.chain": "".join(c.bytes().decode() for c in leaf.cert_chain_pems)}
        with KafkaSourceCluster(f"127.0.0.1:{front.port}", {**inline, **keystore}) as port:
            assert set(TOPICS) <= {t.name for t in port.describe_topics()}
        with KafkaSourceCluster(f"127.0.0.1:{front.port}", inline, request_timeout_ms=3000) as port:
            with pytest.raises(SourceUnavailable):  # no client certificate
                port.describe_topics()
    finally:
        front.stop()


def test_requests_go_at_the_highest_version_both_sides_know() -> None:
    """Version negotiation on the broker's ApiVersions: an old broker gets an old Fetch (no fields
    of newer versions), one without the API gets a clear refusal."""
    tp = TopicPartition(uuid.uuid4(), 0)

    def fetch(version: int) -> Any:
        part = _n("FetchRequest", "FetchPartition")(partition=0, current_leader_epoch=3, fetch_offset=5,
                                                     last_fetched_epoch=-1, partition_max_bytes=100)  # fmt: skip
        topic = _n("FetchRequest", "FetchTopic")(topic="t", topic_id=tp.topic_id, partitions=[part])
        newer = {"forgotten_topics_data": []} if version >= 7 else {}
        return _s("FetchRequest")(replica_id=-1, max_bytes=100, topics=[topic], **newer)

    for broker_max, sent in ((4, 4), (11, 11), (17, 12)):
        prepared = CodecRequest("Fetch", fetch, min_version=4).prepare({1: (0, broker_max)})
        assert prepared.API_VERSION == sent
        body = prepared.encode()
        assert default_schemas().decode("FetchRequest", body, sent).topics[0].partitions[0].fetch_offset == 5
    with pytest.raises(UnsupportedApi):
        CodecRequest("Fetch", fetch, min_version=4).prepare({1: (0, 3)})
    with pytest.raises(UnsupportedApi):
        CodecRequest("ReadMirrorStates", fetch).prepare({1: (0, 12)})


def test_mirror_config_refuses_a_sasl_mechanism_the_port_does_not_speak() -> None:
    from coordinator.workflows.config import config_problems

    assert config_problems({"sasl.mechanism": "SCRAM-SHA-512", "security.protocol": "SASL_SSL"}) == {}
    problem = config_problems({"sasl.mechanism": "GSSAPI"})["sasl.mechanism"]
    assert "Invalid value GSSAPI for configuration sasl.mechanism" in problem and "PLAIN" in problem


def test_call_many_knows_every_source_read() -> None:
    """A wave's calls go through ``call_many``: a source read it does not know fails there with
    "unknown port method" (PREPARING's ``last_mirror_cut`` did, and no Kafka-source mirror started)."""
    from coordinator.ports import SOURCE_METHODS
    from streams.kafka import source

    assert set(SOURCE_METHODS) <= set(source._METHODS)
