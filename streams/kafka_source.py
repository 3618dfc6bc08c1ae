"""A ``SourceCluster`` over the Kafka protocol: mirror from any Kafka-protocol broker.

The connection layer is aiokafka's (bootstrap, ApiVersions negotiation, TLS, SASL PLAIN and
SCRAM-SHA-256/512), run on a private event-loop thread: the ports are synchronous and the worker
calls them from its thread pool. The messages are our own schema codec's (``schemas/``, Kafka's
RPC JSON), sent through aiokafka's connections as a ``Request`` look-alike, at the highest version
both the broker and we know, capped where a newer version needs what we do not use (topic-ID
Fetch, batched FindCoordinator/OffsetFetch).

What each port read sends:

- ``describe_topics``/``cluster_id``: Metadata (topic IDs, leaders, leader epochs, cluster ID);
- ``list_offsets``: ListOffsets earliest, latest READ_UNCOMMITTED (the HW) and latest
  READ_COMMITTED (the LSO), one request of each per leader for a wave of partitions;
- ``fetch``: Fetch READ_UNCOMMITTED (the mirror copies up to the HW) with the current leader
  epoch and ``last_fetched_epoch``, one request per leader for a wave, under
  ``response_max_bytes``; each RecordBatch comes back whole, as raw bytes, CRC checked;
- ``end_offset_for_epoch``/``latest_epoch``: OffsetsForLeaderEpoch;
- ``last_mirrored_epoch``: the KIP's ReadMirrorStates; a broker without it has no LME (None),
  and the partition aligns from offset 0, as KIP-1279 says of an old source;
- ``list_groups``/``group_offsets``/``is_group_active``: ListGroups and DescribeGroups at every
  broker, FindCoordinator then OffsetFetch at the group's coordinator;
- ``describe_configs``/``describe_acls``: DescribeConfigs (DYNAMIC_TOPIC_CONFIG entries), DescribeAcls.

Failures: NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH
and an unknown topic refresh the metadata and retry once, then raise the port error the core
handles (NotLeader, FencedLeaderEpoch, UnknownLeaderEpoch, UnknownTopicId); a broker that cannot
be reached raises SourceUnavailable (the core backs the partition off, then FAILED with backoff).

A fetched ``Batch``'s ``payload`` is the whole RecordBatch as the source holds it (header
included), so the destination keeps it byte for byte; its fields (offsets, epochs, producer
fields, control type) are read from the header. See docs/kafka-source.md.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import io
import logging
import re
import struct
import threading
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from crc32c import crc32c

from coordinator.ports import (
    UNDEFINED_EPOCH,
    AclBinding,
    Batch,
    EpochEndOffset,
    FencedLeaderEpoch,
    FetchResult,
    GroupDescription,
    GroupOffset,
    GroupType,
    IsolationLevel,
    NotLeader,
    OffsetOutOfRange,
    PartitionMetadata,
    PartitionOffsets,
    PortError,
    SourceUnavailable,
    TopicMetadata,
    TopicPartition,
    UnknownLeaderEpoch,
    UnknownTopicId,
)
from coordinator.port_types import AbortedTransaction
from records.kafka_envelope import request_header, response_header_size
from records.registry import default_schemas
from records.segments import ControlType, control_type, decode_batch
from streams.config import ConfigError

log = logging.getLogger(__name__)
T = TypeVar("T")

# Kafka error codes the port tells apart (org.apache.kafka.common.protocol.Errors).
NONE = 0
OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
SECURITY_DISABLED = 54
KAFKA_STORAGE_ERROR = 56
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
UNKNOWN_TOPIC_ID = 100
_LEADER_MOVED = {LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR, REQUEST_TIMED_OUT}
_REFRESH = _LEADER_MOVED | {FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID}
_COORDINATOR_MOVED = {COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR}

# Highest versions we send: Fetch 12 names topics (13+ needs topic IDs in the request),
# FindCoordinator 3 and OffsetFetch 7 ask one group (later ones batch groups).
_CAPS = {"Fetch": 12, "ListOffsets": 8, "Metadata": 12, "OffsetForLeaderEpoch": 4, "ListGroups": 5,
         "DescribeGroups": 5, "FindCoordinator": 3, "OffsetFetch": 7, "DescribeConfigs": 4, "DescribeAcls": 3,
         "ReadMirrorStates": 0}  # fmt: skip
_API_KEYS = {"Fetch": 1, "ListOffsets": 2, "Metadata": 3, "OffsetFetch": 9, "FindCoordinator": 10,
             "DescribeGroups": 15, "ListGroups": 16, "OffsetForLeaderEpoch": 23, "DescribeAcls": 29,
             "DescribeConfigs": 32, "ReadMirrorStates": 100}  # fmt: skip

# A broker that ignores Fetch's byte limits (noida-db 0.2.3 sends the whole rest of the log) would
# make every fetch resend what the last one cut off: what came beyond the budget serves the next
# fetches of that partition (READ_UNCOMMITTED), up to this much per port and this long.
READ_AHEAD_MAX_BYTES = 1 << 30
READ_AHEAD_TTL_S = 60.0

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
CONSUMER_REPLICA_ID = -1
TOPIC_RESOURCE = 2
DYNAMIC_TOPIC_CONFIG = 1
_ACTIVE_GROUP_STATES = {"Stable", "PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"}
# AclBinding's string enums from Kafka's ResourceType, PatternType, AclOperation, AclPermissionType codes.
_RESOURCE_TYPES = {2: "TOPIC", 3: "GROUP", 4: "CLUSTER", 5: "TRANSACTIONAL_ID", 6: "DELEGATION_TOKEN", 7: "USER"}
_PATTERN_TYPES = {3: "LITERAL", 4: "PREFIXED"}
_OPERATIONS = {2: "ALL", 3: "READ", 4: "WRITE", 5: "CREATE", 6: "DELETE", 7: "ALTER", 8: "DESCRIBE",
               9: "CLUSTER_ACTION", 10: "DESCRIBE_CONFIGS", 11: "ALTER_CONFIGS", 12: "IDEMPOTENT_WRITE",
               13: "CREATE_TOKENS", 14: "DESCRIBE_TOKENS"}  # fmt: skip
_PERMISSIONS = {2: "DENY", 3: "ALLOW"}
_ANY = 1

# RecordBatch v2 header: baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes,
# lastOffsetDelta, baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordCount.
_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
_ATTRIBUTES_AT = 21  # the CRC32C covers attributes to the end
_ATTR_TRANSACTIONAL = 0x10
_ATTR_CONTROL = 0x20


class UnsupportedApi(Exception):
    """The broker does not know this API (or no version both sides know)."""


class KafkaProtocolError(PortError):
    """The source answered with a Kafka error the port has no typed error for."""

    field_names = ("reason",)

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# ---------------------------------------------------------------------------- mirror config


_JAAS_MODULES = {"PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
                 "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
                 "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule"}  # fmt: skip
_JAAS = re.compile(r'^\s*(?P<module>[\w.$]+)\s+(?P<flag>required|requisite|sufficient|optional)(?P<opts>.*?);?\s*$', re.S)
_JAAS_OPTION = re.compile(r'(\w[\w.]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|(\S+?))(?=\s|;|$)')


def parse_jaas(text: str, mechanism: str) -> tuple[str, str]:
    """``sasl.jaas.config`` -> (username, password), for the PLAIN and SCRAM login modules."""
    m = _JAAS.match(text)
    if m is None:
        raise ConfigError("sasl.jaas.config: expected '<LoginModule class> required username=\"...\" password=\"...\";'")
    want = _JAAS_MODULES[mechanism]
    if m["module"] != want:
        raise ConfigError(f"sasl.jaas.config: sasl.mechanism={mechanism} needs {want}, not {m['module']}")
    opts = {o[1]: re.sub(r"\\(.)", r"\1", o[2]) if o[2] is not None else o[3]
            for o in _JAAS_OPTION.finditer(m["opts"])}  # fmt: skip
    if "username" not in opts or "password" not in opts:
        raise ConfigError("sasl.jaas.config: username and password are required")
    return opts["username"], opts["password"]


def client_settings(props: Mapping[str, str]) -> dict[str, Any]:
    """Kafka's client settings of a mirror (``security.protocol``, ``ssl.*``, ``sasl.*``,
    ``client.id``) as AIOKafkaClient arguments. Raises ConfigError naming the bad setting."""
    from streams.admin_tls import client_context

    protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        raise ConfigError(f"security.protocol={protocol}: expected PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL")
    out: dict[str, Any] = {"security_protocol": protocol, "client_id": props.get("client.id", "kip1279-mirror-source")}
    if protocol in ("SSL", "SASL_SSL"):
        ssl_props = {k: v for k, v in props.items() if k.startswith("ssl.")}
        out["ssl_context"] = client_context({**ssl_props, "security.protocol": "SSL"})
    if protocol.startswith("SASL_"):
        mechanism = props.get("sasl.mechanism", "GSSAPI").strip().upper()
        if mechanism not in _JAAS_MODULES:
            raise ConfigError(f"sasl.mechanism={mechanism}: the mirror supports PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512")
        jaas = props.get("sasl.jaas.config")
        if not jaas:
            raise ConfigError(f"sasl.jaas.config is required with security.protocol={protocol}")
        user, password = parse_jaas(jaas, mechanism)
        out.update(sasl_mechanism=mechanism, sasl_plain_username=user, sasl_plain_password=password)
    return out


def is_model_bootstrap(bootstrap: str) -> bool:
    return bootstrap.strip().startswith("model://")


def parse_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    """``host:port[,host:port]`` -> pairs; ConfigError for anything else."""
    out = []
    for part in bootstrap.split(","):
        host, sep, port = part.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"bootstrap.servers {bootstrap!r}: expected host:port[,host:port] or model://NAME")
        out.append((host.strip("[]"), int(port)))
    return out


# ------------------------------------------------------------------ requests through aiokafka


class _Header:
    def __init__(self, data: bytes = b"", correlation_id: int = 0) -> None:
        self.data, self.correlation_id = data, correlation_id

    def encode(self) -> bytes:
        return self.data


class _Reply:
    """A decoded response: our codec's Struct and the version it was read at."""

    def __init__(self, body: Any, version: int) -> None:
        self.body, self.version = body, version


class _Decoder:
    def __init__(self, name: str, version: int) -> None:
        self.name, self.version = name, version

    def decode(self, buf: io.BytesIO) -> _Reply:
        return _Reply(default_schemas().decode(self.name + "Response", buf.read(), self.version), self.version)


class _Prepared:
    """What aiokafka's connection sends: header, body, and how to read the answer."""

    def __init__(self, name: str, api_key: int, version: int, body: Any) -> None:
        self.name, self.API_KEY, self.API_VERSION, self.body = name, api_key, version, body
        self.RESPONSE_TYPE = _Decoder(name, version)

    def build_request_header(self, correlation_id: int, client_id: str) -> _Header:
        return _Header(request_header(self.API_KEY, self.API_VERSION, correlation_id, client_id))

    def encode(self) -> bytes:
        return default_schemas().encode(self.body, self.API_VERSION)

    def parse_response_header(self, buf: io.BytesIO) -> _Header:
        start = buf.tell()
        head = buf.read(64)
        correlation_id, size = response_header_size(head, self.API_KEY, self.API_VERSION)
        buf.seek(start + size)
        return _Header(correlation_id=correlation_id)

    def __repr__(self) -> str:
        return f"{self.name}Request v{self.API_VERSION}"


class CodecRequest:
    """An aiokafka ``Request`` look-alike built with our codec: ``prepare`` picks the highest
    version both the connection's broker and we know, then ``build(version)`` makes the body."""

    def __init__(self, name: str, build: Callable[[int], Any], min_version: int = 0) -> None:
        self.name, self.build, self.min_version = name, build, min_version
        self.API_KEY = _API_KEYS[name]

    def prepare(self, versions: Mapping[int, tuple[int, int]]) -> _Prepared:
        spec = default_schemas().spec(self.name + "Request")
        if self.API_KEY not in versions:
            raise UnsupportedApi(f"the broker does not support {self.name} (api key {self.API_KEY})")
        lo, hi = versions[self.API_KEY]
        version = min(hi, spec.valid_versions.highest, _CAPS[self.name])
        if version < max(lo, spec.valid_versions.lowest, self.min_version):
            raise UnsupportedApi(f"no {self.name} version in common with the broker ({lo}-{hi})")
        return _Prepared(self.name, self.API_KEY, version, self.build(version))


def _s(name: str) -> Any:
    """A message's Struct class."""
    return default_schemas().struct(name)


def _n(message: str, struct_name: str) -> Any:
    """A nested Struct class of a message."""
    return default_schemas().nested(message, struct_name)


# ------------------------------------------------------------------------------ metadata


class _Topic:
    def __init__(self, name: str, topic_id: uuid.UUID, internal: bool, partitions: dict[int, PartitionMetadata]) -> None:
        self.name, self.topic_id, self.internal, self.partitions = name, topic_id, internal, partitions


class _Metadata:
    def __init__(self, cluster_id: str, brokers: dict[int, tuple[str, int]], topics: dict[uuid.UUID, _Topic]) -> None:
        self.cluster_id, self.brokers, self.topics = cluster_id, brokers, topics
        self.by_name = {t.name: t for t in topics.values()}

    def partition(self, tp: TopicPartition) -> tuple[_Topic, PartitionMetadata]:
        topic = self.topics.get(tp.topic_id)
        if topic is None:
            raise UnknownTopicId(tp.topic_id)
        part = topic.partitions.get(tp.partition)
        if part is None:
            raise UnknownTopicId(tp.topic_id, tp.partition)
        return topic, part

    def leader(self, tp: TopicPartition) -> tuple[_Topic, PartitionMetadata]:
        topic, part = self.partition(tp)
        if part.leader < 0:
            raise NotLeader(tp, part.leader, part.leader_epoch)
        return topic, part


def port_error(tp: TopicPartition, code: int, what: str, request_epoch: int, part: PartitionMetadata | None) -> PortError:
    """A partition's Kafka error as the port error the core handles."""
    epoch = part.leader_epoch if part is not None else UNDEFINED_EPOCH
    leader = part.leader if part is not None else -1
    if code in _LEADER_MOVED:
        return NotLeader(tp, -1 if code == LEADER_NOT_AVAILABLE else leader, epoch)
    if code == FENCED_LEADER_EPOCH:
        return FencedLeaderEpoch(tp, request_epoch, epoch)
    if code == UNKNOWN_LEADER_EPOCH:
        return UnknownLeaderEpoch(tp, request_epoch, epoch)
    if code in (UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID):
        return UnknownTopicId(tp.topic_id, tp.partition)
    return KafkaProtocolError(f"{what} of {tp}: Kafka error code {code}")


def split_batches(records: bytes | None, tp: TopicPartition) -> tuple[Batch, ...]:
    """The whole v2 RecordBatches of a fetched records blob (a partial last one is dropped, as a
    consumer drops it), each as a ``Batch`` whose payload is the raw batch, CRC checked."""
    if not records:
        return ()
    data = bytes(records)
    out = []
    pos, size = 0, len(data)
    while pos + _BATCH_HEADER.size <= size:
        (base, length, epoch, magic, crc, attrs, last_delta, _base_ts, max_ts, pid, pepoch, seq,
         count) = _BATCH_HEADER.unpack_from(data, pos)  # fmt: skip
        end = pos + 12 + length
        if end > size:
            break
        if magic != 2:
            raise KafkaProtocolError(f"{tp}: message format v{magic} at offset {base}; a mirror copies v2 "
                                     "RecordBatches only (Kafka 0.11 and later)")  # fmt: skip
        raw = data[pos:end]
        if crc32c(raw[_ATTRIBUTES_AT:]) != crc:
            raise KafkaProtocolError(f"{tp}: corrupt batch at offset {base} (CRC mismatch)")
        ctype: ControlType | None = None
        if attrs & _ATTR_CONTROL:
            got = control_type(decode_batch(raw)[0].records[0])  # control batches are never compressed
            ctype = got if isinstance(got, ControlType) else None
        out.append(Batch(base_offset=base, last_offset=base + last_delta, leader_epoch=epoch, producer_id=pid,
                         producer_epoch=pepoch, base_sequence=seq, is_transactional=bool(attrs & _ATTR_TRANSACTIONAL),
                         is_control=bool(attrs & _ATTR_CONTROL), control_type=ctype, timestamp=max_ts, payload=raw,
                         record_count=count))  # fmt: skip
        pos = end
    return tuple(out)


# --------------------------------------------------------------------------------- the port


class KafkaSourceCluster:
    """``SourceCluster`` (and ``call_many``) over the Kafka protocol; see the module docstring.

    ``props`` are the mirror's configs (its Kafka client settings are read from them).
    Thread-safe: every call runs as a coroutine on the port's own event-loop thread.
    """

    def __init__(self, bootstrap_servers: str, props: Mapping[str, str] | None = None, *,
                 request_timeout_ms: int = 10_000, metadata_max_age_ms: int = 5_000,
                 response_max_bytes: int = 50 << 20) -> None:  # fmt: skip
        self.cluster = bootstrap_servers  # named in errors and logs
        # Bad settings fail each call (SourceUnavailable: the partitions go FAILED and say why)
        # rather than the worker building the port; an altered config builds a new port.
        self.config_error: str | None = None
        self.settings: dict[str, Any] = {}
        try:
            parse_bootstrap(bootstrap_servers)
            self.settings = client_settings(props or {})
        except ConfigError as e:
            self.config_error = str(e)
        self.request_timeout_ms = request_timeout_ms
        self.metadata_max_age_ms = metadata_max_age_ms
        self.response_max_bytes = response_max_bytes
        self._client: Any = None
        self._meta: _Metadata | None = None
        self._meta_at = 0.0
        self._closed = False
        self._ahead: dict[tuple[TopicPartition, int], _Ahead] = {}
        self._ahead_bytes = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"kafka-source {bootstrap_servers}",
                                        daemon=True)  # fmt: skip
        self._thread.start()

    # ------------------------------------------------------------------ plumbing

    def _run(self, coro: Awaitable[T]) -> T:
        if self._closed:
            raise SourceUnavailable(self.cluster, "port closed")
        fut = asyncio.run_coroutine_threadsafe(self._guard(coro), self._loop)
        try:
            return fut.result(timeout=self.request_timeout_ms / 1000 * 3)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise SourceUnavailable(self.cluster, "request timed out") from None

    async def _guard(self, coro: Awaitable[T]) -> T:
        """Connection failures as SourceUnavailable; the next call reconnects."""
        from aiokafka.errors import KafkaError

        try:
            return await coro
        except PortError:
            raise
        except UnsupportedApi as e:
            raise KafkaProtocolError(str(e)) from e
        except (KafkaError, OSError, asyncio.TimeoutError) as e:
            self._meta = None
            raise SourceUnavailable(self.cluster, f"{type(e).__name__}: {e}") from e

    async def _connected(self) -> Any:
        if self.config_error is not None:
            raise SourceUnavailable(self.cluster, f"bad client settings: {self.config_error}")
        if self._client is None:
            from aiokafka.client import AIOKafkaClient

            client = AIOKafkaClient(bootstrap_servers=self.cluster, request_timeout_ms=self.request_timeout_ms,
                                    metadata_max_age_ms=300_000, **self.settings)  # fmt: skip
            try:
                await client.bootstrap()
            except BaseException:
                await client.close()
                raise
            self._client = client
        return self._client

    async def _send(self, node: int, request: CodecRequest) -> Any:
        client = await self._connected()
        if client.cluster.broker_metadata(node) is None:
            await client.force_metadata_update()
        reply = await client.send(node, request)
        return reply.body

    async def _send_any(self, request: CodecRequest) -> Any:
        """To the first broker that answers (metadata, configs, ACLs, coordinator lookups)."""
        from aiokafka.errors import KafkaError

        client = await self._connected()
        nodes = sorted(self._meta.brokers) if self._meta else []
        nodes += sorted(b.nodeId for b in client.cluster.brokers() if b.nodeId not in nodes)
        failure: BaseException = SourceUnavailable(self.cluster, "no brokers in the metadata")
        for node in nodes:
            try:
                return await self._send(node, request)
            except (KafkaError, OSError, asyncio.TimeoutError) as e:
                failure = e
        raise failure

    async def _supports(self, node: int, name: str) -> bool:
        client = await self._connected()
        conn = await client._get_conn(node)  # aiokafka keeps the negotiated versions per connection
        return conn is not None and _API_KEYS[name] in (conn._versions or {})

    # ------------------------------------------------------------------ metadata

    async def _metadata(self, force: bool = False) -> _Metadata:
        loop = asyncio.get_running_loop()
        if not force and self._meta is not None and loop.time() - self._meta_at < self.metadata_max_age_ms / 1000:
            return self._meta

        def build(version: int) -> Any:
            return _s("MetadataRequest")(topics=None, allow_auto_topic_creation=False)

        body = await self._send_any(CodecRequest("Metadata", build, min_version=1))
        brokers = {b.node_id: (b.host, b.port) for b in body.brokers}
        cluster_id = body.cluster_id or f"unknown-cluster-id:{self.cluster}"
        topics: dict[uuid.UUID, _Topic] = {}
        for t in body.topics:
            if t.error_code != NONE or t.name is None:
                continue
            # A broker without topic IDs (Metadata < v10) gets stable made-up ones: one per name.
            tid = t.topic_id if t.topic_id and t.topic_id.int else uuid.uuid5(uuid.NAMESPACE_URL, f"{cluster_id}/{t.name}")
            parts = {p.partition_index: PartitionMetadata(tid, p.partition_index, p.leader_id,
                                                          max(p.leader_epoch, 0) if p.leader_epoch is not None else 0,
                                                          tuple(p.replica_nodes), tuple(p.isr_nodes))
                     for p in t.partitions}  # fmt: skip
            topics[tid] = _Topic(t.name, tid, bool(t.is_internal), parts)
        self._meta = _Metadata(cluster_id, brokers, topics)
        self._meta_at = loop.time()
        return self._meta

    async def _with_refresh(self, attempt: Callable[[_Metadata, set[int]], Awaitable[dict[int, Any]]],
                            n: int) -> list[Any]:  # fmt: skip
        """Runs ``attempt`` on indices 0..n-1 (index -> result or PortError); once more for those
        that failed with an error a metadata refresh can cure."""
        meta = await self._metadata()
        got = await attempt(meta, set(range(n)))
        again = [i for i, r in got.items() if isinstance(r, (NotLeader, FencedLeaderEpoch, UnknownLeaderEpoch,
                                                                UnknownTopicId))]  # fmt: skip
        if again:
            meta = await self._metadata(force=True)
            retry = await attempt(meta, set(again))
            for i in again:
                got[i] = retry.get(i, got[i])
        return [got[i] for i in range(n)]

    # ------------------------------------------------------------------ fetch

    async def _fetch_many(self, calls: Sequence[tuple[tuple[Any, ...], dict[str, Any]]]) -> list[Any]:
        every = [_fetch_args(*a, **kw) for a, kw in calls]
        out: list[Any] = [None] * len(every)
        todo = []
        for i, a in enumerate(every):
            served = self._read_ahead(a)
            if served is None:
                todo.append(i)
            else:
                out[i] = served
        if todo:
            for i, r in zip(todo, await self._fetch_remote([every[i] for i in todo])):
                out[i] = r
        return out

    def _read_ahead(self, a: tuple[Any, ...]) -> FetchResult | None:
        """The next batches from what a broker sent beyond the asked bytes, if they start at the
        fetch offset and are recent (READ_UNCOMMITTED only: aborted lists are per response)."""
        tp, offset, max_bytes, isolation, current_epoch, _ = a
        key = (tp, isolation)
        ahead = self._ahead.pop(key, None)
        if ahead is None:
            return None
        self._ahead_bytes -= ahead.size
        if (ahead.offset != offset or self._loop.time() - ahead.at > READ_AHEAD_TTL_S
                or (current_epoch is not None and current_epoch != ahead.result.leader_epoch)):  # fmt: skip
            return None
        kept = _within(ahead.batches, max(max_bytes, 1))
        rest = ahead.batches[len(kept):]
        if rest:
            self._keep_ahead(key, ahead.result, rest, ahead.at)
        return FetchResult(kept, ahead.result.hw, ahead.result.lso, ahead.result.log_start, ahead.result.leader_epoch)

    def _keep_ahead(self, key: tuple[TopicPartition, int], result: FetchResult, rest: tuple[Batch, ...],
                    at: float) -> None:  # fmt: skip
        old = self._ahead.pop(key, None)
        if old is not None:
            self._ahead_bytes -= old.size
        room = READ_AHEAD_MAX_BYTES - self._ahead_bytes
        kept = _within(rest, room) if room > 0 else ()
        if kept and sum(len(b.payload) for b in kept) > room:
            kept = ()
        if kept:
            ahead = _Ahead(kept[0].base_offset, kept, result, at)
            self._ahead[key] = ahead
            self._ahead_bytes += ahead.size

    async def _fetch_remote(self, args: list[tuple[Any, ...]]) -> list[Any]:
        results: dict[int, Any] = {}

        async def attempt(meta: _Metadata, only: set[int]) -> dict[int, Any]:
            groups: dict[tuple[int, int], list[int]] = defaultdict(list)
            out: dict[int, Any] = {}
            for i in sorted(only):
                tp = args[i][0]
                try:
                    _, part = meta.leader(tp)
                except PortError as e:
                    out[i] = e
                    continue
                groups[(part.leader, int(args[i][3]))].append(i)
            answers = await asyncio.gather(*(self._fetch_from(meta, node, iso, idx, args)
                                             for (node, iso), idx in groups.items()), return_exceptions=True)  # fmt: skip
            for (key, idx), answer in zip(groups.items(), answers):
                if isinstance(answer, BaseException):
                    answer = answer if isinstance(answer, PortError) else await _as_port_error(self, answer)
                    out.update({i: answer for i in idx})
                else:
                    out.update(answer)
            return out

        got = await self._with_refresh(attempt, len(args))
        for i, r in enumerate(got):
            results[i] = r
        # OFFSET_OUT_OF_RANGE carries no range in Kafka's answer: ListOffsets gives it.
        oor = [i for i, r in results.items() if isinstance(r, _OutOfRange)]
        if oor:
            offsets = await self._list_offsets_many([args[i][0] for i in oor])
            for i, o in zip(oor, offsets):
                tp = args[i][0]
                results[i] = o if isinstance(o, PortError) else OffsetOutOfRange(tp, args[i][1], o.log_start, o.leo)
        return [results[i] for i in range(len(args))]

    async def _fetch_from(self, meta: _Metadata, node: int, isolation: int, idx: list[int],
                          args: list[tuple[Any, ...]]) -> dict[int, Any]:  # fmt: skip
        by_topic: dict[str, list[int]] = defaultdict(list)
        for i in idx:
            by_topic[meta.partition(args[i][0])[0].name].append(i)
        epochs = {i: (args[i][4] if args[i][4] is not None else meta.partition(args[i][0])[1].leader_epoch) for i in idx}
        total = min(sum(max(args[i][2], 1) for i in idx), self.response_max_bytes)

        def build(version: int) -> Any:
            part, topic = _n("FetchRequest", "FetchPartition"), _n("FetchRequest", "FetchTopic")
            topics = [topic(topic=name, topic_id=meta.by_name[name].topic_id,
                            partitions=[part(partition=args[i][0].partition, current_leader_epoch=epochs[i],
                                             fetch_offset=args[i][1],
                                             last_fetched_epoch=(args[i][5] if args[i][5] is not None
                                                                 and version >= 12 else -1),
                                             log_start_offset=-1, partition_max_bytes=max(args[i][2], 1))
                                        for i in members])
                      for name, members in by_topic.items()]  # fmt: skip
            # Sessionless full fetches (session epoch -1); fields of newer versions only there.
            newer = {"forgotten_topics_data": []} if version >= 7 else {}
            return _s("FetchRequest")(replica_id=CONSUMER_REPLICA_ID, max_wait_ms=0, min_bytes=0, max_bytes=total,
                                      isolation_level=isolation, session_id=0, session_epoch=-1, topics=topics,
                                      **newer)  # fmt: skip

        body = await self._send(node, CodecRequest("Fetch", build, min_version=4))
        out: dict[int, Any] = {}
        if body.error_code:
            err = KafkaProtocolError(f"Fetch from broker {node}: Kafka error code {body.error_code}")
            return {i: err for i in idx}
        answers = {(t.topic, p.partition_index): p for t in body.responses for p in t.partitions}
        for name, members in by_topic.items():
            for i in members:
                tp = args[i][0]
                part = meta.partition(tp)[1]
                p = answers.get((name, tp.partition))
                if p is None:
                    out[i] = NotLeader(tp, part.leader, part.leader_epoch)  # left out of the answer: ask again
                    continue
                try:
                    out[i], rest = self._fetch_result(tp, p, part, epochs[i], isolation, max(args[i][2], 1))
                except PortError as e:
                    out[i] = e
                    continue
                if rest and isolation == IsolationLevel.READ_UNCOMMITTED:
                    self._keep_ahead((tp, isolation), out[i], rest, self._loop.time())
        return out

    @staticmethod
    def _fetch_result(tp: TopicPartition, p: Any, part: PartitionMetadata, request_epoch: int, isolation: int,
                      max_bytes: int) -> tuple[Any, tuple[Batch, ...]]:  # fmt: skip
        """The partition's answer, and the whole batches sent beyond ``max_bytes``."""
        if p.error_code == OFFSET_OUT_OF_RANGE:
            return _OutOfRange(), ()
        if p.error_code != NONE:
            return port_error(tp, p.error_code, "Fetch", request_epoch, part), ()
        diverging = None
        de = getattr(p, "diverging_epoch", None)
        if de is not None and (de.epoch >= 0 or de.end_offset >= 0):
            diverging = EpochEndOffset(de.epoch, de.end_offset)
        every = () if diverging is not None else split_batches(p.records, tp)
        batches = _within(every, max_bytes)
        aborted = ()
        if isolation == IsolationLevel.READ_COMMITTED and p.aborted_transactions:
            aborted = tuple(AbortedTransaction(a.producer_id, a.first_offset) for a in p.aborted_transactions)
        lso = p.last_stable_offset if p.last_stable_offset >= 0 else p.high_watermark
        result = FetchResult(batches, p.high_watermark, lso, max(p.log_start_offset, 0), part.leader_epoch, aborted,
                             diverging)  # fmt: skip
        return result, every[len(batches):]

    # ------------------------------------------------------------------ list offsets

    async def _list_offsets_many(self, tps: Sequence[TopicPartition]) -> list[Any]:
        async def attempt(meta: _Metadata, only: set[int]) -> dict[int, Any]:
            groups: dict[int, list[int]] = defaultdict(list)
            out: dict[int, Any] = {}
            for i, tp in enumerate(tps):
                if i not in only:
                    continue
                try:
                    groups[meta.leader(tp)[1].leader].append(i)
                except PortError as e:
                    out[i] = e
            answers = await asyncio.gather(*(self._offsets_from(meta, node, idx, tps) for node, idx in groups.items()),
                                           return_exceptions=True)  # fmt: skip
            for idx, answer in zip(groups.values(), answers):
                if isinstance(answer, BaseException):
                    answer = answer if isinstance(answer, PortError) else await _as_port_error(self, answer)
                    out.update({i: answer for i in idx})
                else:
                    out.update(answer)
            return out

        return await self._with_refresh(attempt, len(tps))

    async def _offsets_from(self, meta: _Metadata, node: int, idx: list[int],
                            tps: Sequence[TopicPartition]) -> dict[int, Any]:  # fmt: skip
        by_topic: dict[str, list[int]] = defaultdict(list)
        for i in idx:
            by_topic[meta.partition(tps[i])[0].name].append(i)

        def request(timestamp: int, isolation: int) -> CodecRequest:
            def build(version: int) -> Any:
                part, topic = _n("ListOffsetsRequest", "ListOffsetsPartition"), _n("ListOffsetsRequest", "ListOffsetsTopic")
                topics = [topic(name=name, partitions=[part(partition_index=tps[i].partition,
                                                            current_leader_epoch=meta.partition(tps[i])[1].leader_epoch,
                                                            timestamp=timestamp) for i in members])
                          for name, members in by_topic.items()]  # fmt: skip
                return _s("ListOffsetsRequest")(replica_id=CONSUMER_REPLICA_ID, isolation_level=isolation, topics=topics)

            return CodecRequest("ListOffsets", build, min_version=2)

        bodies = await asyncio.gather(self._send(node, request(EARLIEST_TIMESTAMP, 0)),
                                      self._send(node, request(LATEST_TIMESTAMP, 0)),
                                      self._send(node, request(LATEST_TIMESTAMP, 1)))  # fmt: skip
        found = [{(t.name, p.partition_index): p for t in b.topics for p in t.partitions} for b in bodies]
        out: dict[int, Any] = {}
        for name, members in by_topic.items():
            for i in members:
                tp = tps[i]
                part = meta.partition(tp)[1]
                answers = [f.get((name, tp.partition)) for f in found]
                bad = next((a for a in answers if a is None or a.error_code != NONE), "ok")
                if bad != "ok":
                    code = bad.error_code if bad is not None else NOT_LEADER_OR_FOLLOWER
                    out[i] = port_error(tp, code, "ListOffsets", part.leader_epoch, part)
                    continue
                start, hw, lso = (a.offset for a in answers)
                # A consumer sees no LEO: the source's visible end is its HW.
                out[i] = PartitionOffsets(start, lso, hw, hw, part.leader_epoch)
        return out

    # ------------------------------------------------------------------ epochs

    async def _epoch_end(self, tp: TopicPartition, leader_epoch: int | None, current: int | None) -> EpochEndOffset:
        async def attempt(meta: _Metadata, only: set[int]) -> dict[int, Any]:
            try:
                topic, part = meta.leader(tp)
            except PortError as e:
                return {0: e}
            epoch = part.leader_epoch if leader_epoch is None else leader_epoch
            cur = part.leader_epoch if current is None else current

            def build(version: int) -> Any:
                p = _n("OffsetForLeaderEpochRequest", "OffsetForLeaderPartition")(
                    partition=tp.partition, current_leader_epoch=cur, leader_epoch=epoch)
                t = _n("OffsetForLeaderEpochRequest", "OffsetForLeaderTopic")(topic=topic.name, partitions=[p])
                return _s("OffsetForLeaderEpochRequest")(replica_id=CONSUMER_REPLICA_ID, topics=[t])

            try:
                body = await self._send(part.leader, CodecRequest("OffsetForLeaderEpoch", build, min_version=2))
            except UnsupportedApi:
                return {0: EpochEndOffset(UNDEFINED_EPOCH, -1)}  # a pre-0.11 broker keeps no epochs
            for t in body.topics:
                for p in t.partitions:
                    if p.partition == tp.partition:
                        if p.error_code != NONE:
                            return {0: port_error(tp, p.error_code, "OffsetsForLeaderEpoch", cur, part)}
                        return {0: EpochEndOffset(p.leader_epoch, p.end_offset)}
            return {0: NotLeader(tp, part.leader, part.leader_epoch)}

        got = (await self._with_refresh(attempt, 1))[0]
        if isinstance(got, PortError):
            raise got
        return got

    # ------------------------------------------------------------------ groups

    async def _coordinator(self, group_id: str) -> int:
        def build(version: int) -> Any:
            return _s("FindCoordinatorRequest")(key=group_id, key_type=0)

        for attempt in range(3):
            body = await self._send_any(CodecRequest("FindCoordinator", build))
            if body.error_code == NONE:
                return int(body.node_id)
            if body.error_code not in _COORDINATOR_MOVED:
                break
            await asyncio.sleep(0.1 * (attempt + 1))
        raise SourceUnavailable(self.cluster, f"no coordinator for group {group_id} (error code {body.error_code})")

    async def _describe_groups(self, node: int, group_ids: list[str]) -> dict[str, Any]:
        def build(version: int) -> Any:
            return _s("DescribeGroupsRequest")(groups=group_ids, include_authorized_operations=False)

        body = await self._send(node, CodecRequest("DescribeGroups", build))
        return {g.group_id: g for g in body.groups if g.error_code == NONE}

    async def _list_groups(self) -> list[GroupDescription]:
        meta = await self._metadata()

        def build(version: int) -> Any:
            return _s("ListGroupsRequest")()

        out: dict[str, GroupDescription] = {}
        for node in sorted(meta.brokers):  # each broker lists the groups it coordinates
            body = await self._send(node, CodecRequest("ListGroups", build))
            if body.error_code != NONE:
                raise KafkaProtocolError(f"ListGroups at broker {node}: Kafka error code {body.error_code}")
            # Consumer groups only: share groups need DescribeShareGroupOffsets, not sent yet; other
            # protocol types (connect) commit no offsets.
            ids = [g.group_id for g in body.groups if (g.protocol_type or "consumer") == "consumer"
                   and (getattr(g, "group_type", None) or "classic").lower() in ("classic", "consumer")]  # fmt: skip
            described = await self._describe_groups(node, ids) if ids else {}
            for gid in ids:
                d = described.get(gid)
                members = len(d.members) if d is not None else 0
                active = members > 0 or (d is not None and d.group_state in _ACTIVE_GROUP_STATES)
                out[gid] = GroupDescription(gid, GroupType.CONSUMER, active, members)
        return [out[g] for g in sorted(out)]

    async def _group_offsets(self, group_id: str) -> list[GroupOffset]:
        meta = await self._metadata()
        node = await self._coordinator(group_id)

        def build(version: int) -> Any:
            return _s("OffsetFetchRequest")(group_id=group_id, topics=None, require_stable=False)

        body = await self._send(node, CodecRequest("OffsetFetch", build, min_version=2))
        if body.error_code != NONE:
            raise KafkaProtocolError(f"OffsetFetch of group {group_id}: Kafka error code {body.error_code}")
        out = []
        for t in body.topics:
            topic = meta.by_name.get(t.name)
            if topic is None:
                topic = (await self._metadata(force=True)).by_name.get(t.name)
            if topic is None:
                continue  # a deleted topic's offsets: nothing to sync them to
            for p in t.partitions:
                if p.error_code != NONE or p.committed_offset < 0:
                    continue
                epoch = p.committed_leader_epoch if p.committed_leader_epoch is not None else UNDEFINED_EPOCH
                out.append(GroupOffset(group_id, topic.topic_id, p.partition_index, p.committed_offset, epoch,
                                       p.metadata or ""))  # fmt: skip
        return sorted(out, key=lambda o: (str(o.topic_id), o.partition))

    async def _is_group_active(self, group_id: str) -> bool:
        node = await self._coordinator(group_id)
        d = (await self._describe_groups(node, [group_id])).get(group_id)
        return d is not None and (len(d.members) > 0 or d.group_state in _ACTIVE_GROUP_STATES)

    # ------------------------------------------------------------------ configs, ACLs, LME

    async def _describe_configs(self, topic_id: uuid.UUID) -> dict[str, str]:
        meta = await self._metadata()
        topic = meta.topics.get(topic_id) or (await self._metadata(force=True)).topics.get(topic_id)
        if topic is None:
            raise UnknownTopicId(topic_id)
        name = topic.name

        def build(version: int) -> Any:
            r = _n("DescribeConfigsRequest", "DescribeConfigsResource")(resource_type=TOPIC_RESOURCE,
                                                                        resource_name=name, configuration_keys=None)
            return _s("DescribeConfigsRequest")(resources=[r], include_synonyms=False)

        body = await self._send_any(CodecRequest("DescribeConfigs", build, min_version=1))
        out: dict[str, str] = {}
        for r in body.results:
            if r.error_code in (UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID):
                raise UnknownTopicId(topic_id)
            if r.error_code != NONE:
                raise KafkaProtocolError(f"DescribeConfigs of {name}: Kafka error code {r.error_code}")
            out.update({c.name: c.value for c in r.configs
                        if c.config_source == DYNAMIC_TOPIC_CONFIG and c.value is not None and not c.is_sensitive})  # fmt: skip
        return out

    async def _describe_acls(self) -> list[AclBinding]:
        def build(version: int) -> Any:
            return _s("DescribeAclsRequest")(resource_type_filter=_ANY, resource_name_filter=None,
                                             pattern_type_filter=_ANY, principal_filter=None, host_filter=None,
                                             operation=_ANY, permission_type=_ANY)  # fmt: skip

        body = await self._send_any(CodecRequest("DescribeAcls", build, min_version=1))
        if body.error_code == SECURITY_DISABLED:
            return []  # no authorizer: no ACLs to sync
        if body.error_code != NONE:
            raise KafkaProtocolError(f"DescribeAcls: Kafka error code {body.error_code}: {body.error_message}")
        out = []
        for r in body.resources:
            for a in r.acls:
                out.append(AclBinding(_RESOURCE_TYPES.get(r.resource_type, str(r.resource_type)), r.resource_name,
                                      _PATTERN_TYPES.get(r.pattern_type, str(r.pattern_type)), a.principal, a.host,
                                      _OPERATIONS.get(a.operation, str(a.operation)),
                                      _PERMISSIONS.get(a.permission_type, str(a.permission_type))))  # fmt: skip
        return out

    async def _last_mirrored_epoch(self, mirror_name: str, tp: TopicPartition) -> int | None:
        meta = await self._metadata()
        topic, part = meta.leader(tp)
        if not await self._supports(part.leader, "ReadMirrorStates"):
            return None  # a broker without KIP-1279: no LME, the partition aligns from offset 0

        def build(version: int) -> Any:
            p = _n("ReadMirrorStatesRequest", "PartitionData")(partition_index=tp.partition)
            t = _n("ReadMirrorStatesRequest", "TopicMetadata")(name=topic.name, partitions=[p])
            return _s("ReadMirrorStatesRequest")(mirror_name=mirror_name, topics=[t])

        body = await self._send(part.leader, CodecRequest("ReadMirrorStates", build))
        if body.error_code != NONE:
            raise KafkaProtocolError(f"ReadMirrorStates of {tp}: Kafka error code {body.error_code}")
        for t in body.topics:
            for p in t.partitions:
                if p.partition_index == tp.partition and p.error_code == NONE and p.last_mirror_epoch >= 0:
                    return int(p.last_mirror_epoch)
        return None

    # ------------------------------------------------------------------ SourceCluster

    def cluster_id(self) -> str:
        return self._run(self._metadata()).cluster_id

    def describe_topics(self, topic_ids: Sequence[uuid.UUID] | None = None) -> list[TopicMetadata]:
        return self._run(self._describe_topics(topic_ids))

    async def _describe_topics(self, topic_ids: Sequence[uuid.UUID] | None) -> list[TopicMetadata]:
        meta = await self._metadata(force=True)
        if topic_ids is None:
            chosen = sorted((t for t in meta.topics.values() if not t.internal), key=lambda t: t.name)
        else:
            chosen = []
            for tid in topic_ids:
                if tid not in meta.topics:
                    raise UnknownTopicId(tid)
                chosen.append(meta.topics[tid])
        return [TopicMetadata(t.name, t.topic_id, tuple(t.partitions[p] for p in sorted(t.partitions)))
                for t in chosen]  # fmt: skip

    def list_offsets(self, tp: TopicPartition) -> PartitionOffsets:
        return _one(self._run(self._list_offsets_many([tp])))

    def fetch(self, tp: TopicPartition, fetch_offset: int, max_bytes: int,
              isolation: IsolationLevel = IsolationLevel.READ_COMMITTED, current_leader_epoch: int | None = None,
              last_fetched_epoch: int | None = None) -> FetchResult:  # fmt: skip
        kwargs = {"current_leader_epoch": current_leader_epoch, "last_fetched_epoch": last_fetched_epoch}
        return _one(self._run(self._fetch_many([((tp, fetch_offset, max_bytes, isolation), kwargs)])))

    def end_offset_for_epoch(self, tp: TopicPartition, leader_epoch: int,
                             current_leader_epoch: int | None = None) -> EpochEndOffset:  # fmt: skip
        return self._run(self._epoch_end(tp, leader_epoch, current_leader_epoch))

    def latest_epoch(self, tp: TopicPartition) -> int:
        answer = self._run(self._epoch_end(tp, None, None))
        return answer.epoch if answer.epoch >= 0 else UNDEFINED_EPOCH

    def last_mirrored_epoch(self, mirror_name: str, tp: TopicPartition) -> int | None:
        return self._run(self._last_mirrored_epoch(mirror_name, tp))

    def list_groups(self) -> list[GroupDescription]:
        return self._run(self._list_groups())

    def group_offsets(self, group_id: str) -> list[GroupOffset]:
        return self._run(self._group_offsets(group_id))

    def is_group_active(self, group_id: str) -> bool:
        return self._run(self._is_group_active(group_id))

    def describe_configs(self, topic_id: uuid.UUID) -> dict[str, str]:
        return self._run(self._describe_configs(topic_id))

    def describe_acls(self) -> list[AclBinding]:
        return self._run(self._describe_acls())

    def call_many(self, calls: Sequence[tuple[str, tuple[Any, ...], dict[str, Any] | None]]) -> list[Any]:
        """Many calls at once, results in order (PortErrors as values): the fetches of a wave go out
        as one Fetch per leader, the ListOffsets likewise; other calls run concurrently."""
        return self._run(self._call_many(calls))

    async def _call_many(self, calls: Sequence[tuple[str, tuple[Any, ...], dict[str, Any] | None]]) -> list[Any]:
        out: list[Any] = [None] * len(calls)
        fetches = [i for i, c in enumerate(calls) if c[0] == "fetch"]
        offsets = [i for i, c in enumerate(calls) if c[0] == "list_offsets" and not c[2]]
        grouped = set(fetches) | set(offsets)
        others = [i for i in range(len(calls)) if i not in grouped]

        async def run_fetches() -> None:
            if fetches:
                got = await self._fetch_many([(calls[i][1], calls[i][2] or {}) for i in fetches])
                out_update(fetches, got)

        async def run_offsets() -> None:
            if offsets:
                got = await self._list_offsets_many([calls[i][1][0] for i in offsets])
                out_update(offsets, got)

        async def run_other(i: int) -> None:
            method, args, kwargs = calls[i]
            if method not in _METHODS:
                out[i] = KafkaProtocolError(f"unknown port method {method}")
                return
            try:
                out[i] = await self._guard(_METHODS[method](self, *args, **(kwargs or {})))
            except PortError as e:
                out[i] = e

        def out_update(idx: list[int], got: list[Any]) -> None:
            for i, r in zip(idx, got):
                out[i] = r

        await asyncio.gather(run_fetches(), run_offsets(), *(run_other(i) for i in others))
        return out

    def close(self) -> None:
        """Closes the connections and stops the loop thread."""
        if self._closed:
            return
        self._closed = True

        async def shut() -> None:
            if self._client is not None:
                await self._client.close()
                self._client = None

        try:
            asyncio.run_coroutine_threadsafe(shut(), self._loop).result(timeout=5)
        except Exception:  # noqa: BLE001 - closing anyway
            log.debug("closing the source connections of %s failed", self.cluster, exc_info=True)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> KafkaSourceCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _within(batches: tuple[Batch, ...], max_bytes: int) -> tuple[Batch, ...]:
    """The first batch, then more while they fit ``max_bytes`` (Kafka's partition_max_bytes rule,
    kept here too: a broker may ignore the limit, noida-db 0.2.3 does)."""
    used = 0
    for n, b in enumerate(batches):
        used += len(b.payload)
        if used > max_bytes and n > 0:
            return batches[:n]
    return batches


class _Ahead:
    """Whole batches a broker sent beyond the asked bytes, kept for the next fetch of the partition."""

    def __init__(self, offset: int, batches: tuple[Batch, ...], result: FetchResult, at: float) -> None:
        self.offset, self.batches, self.result, self.at = offset, batches, result, at
        self.size = sum(len(b.payload) for b in batches)


class _OutOfRange:
    """A fetch answered OFFSET_OUT_OF_RANGE; the range is asked with ListOffsets."""


def _fetch_args(tp: TopicPartition, fetch_offset: int, max_bytes: int,
                isolation: IsolationLevel = IsolationLevel.READ_COMMITTED, current_leader_epoch: int | None = None,
                last_fetched_epoch: int | None = None) -> tuple[Any, ...]:  # fmt: skip
    return (tp, fetch_offset, max_bytes, int(isolation), current_leader_epoch, last_fetched_epoch)


def _one(results: list[Any]) -> Any:
    r = results[0]
    if isinstance(r, BaseException):
        raise r
    return r


async def _raise(e: BaseException) -> Any:
    raise e


async def _as_port_error(port: KafkaSourceCluster, e: BaseException) -> PortError:
    try:
        await port._guard(_raise(e))
    except PortError as pe:
        return pe
    raise e


async def _m_list_offsets(port: KafkaSourceCluster, tp: TopicPartition) -> PartitionOffsets:
    return _one(await port._list_offsets_many([tp]))


async def _m_fetch(port: KafkaSourceCluster, *args: Any, **kwargs: Any) -> FetchResult:
    return _one(await port._fetch_many([(args, kwargs)]))


async def _m_cluster_id(port: KafkaSourceCluster) -> str:
    return (await port._metadata()).cluster_id


async def _m_latest_epoch(port: KafkaSourceCluster, tp: TopicPartition) -> int:
    answer = await port._epoch_end(tp, None, None)
    return answer.epoch if answer.epoch >= 0 else UNDEFINED_EPOCH


async def _m_end_offset(port: KafkaSourceCluster, tp: TopicPartition, leader_epoch: int,
                        current_leader_epoch: int | None = None) -> EpochEndOffset:  # fmt: skip
    return await port._epoch_end(tp, leader_epoch, current_leader_epoch)


_METHODS: dict[str, Callable[..., Awaitable[Any]]] = {
    "cluster_id": _m_cluster_id,
    "describe_topics": lambda p, topic_ids=None: p._describe_topics(topic_ids),
    "list_offsets": _m_list_offsets,
    "fetch": _m_fetch,
    "end_offset_for_epoch": _m_end_offset,
    "latest_epoch": _m_latest_epoch,
    "last_mirrored_epoch": lambda p, mirror_name, tp: p._last_mirrored_epoch(mirror_name, tp),
    "list_groups": lambda p: p._list_groups(),
    "group_offsets": lambda p, group_id: p._group_offsets(group_id),
    "is_group_active": lambda p, group_id: p._is_group_active(group_id),
    "describe_configs": lambda p, topic_id: p._describe_configs(topic_id),
    "describe_acls": lambda p: p._describe_acls(),
}
