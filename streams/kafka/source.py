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

Failures: NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH,
an unknown topic and a leader whose connection fails refresh the metadata and retry once, then
raise the port error the core handles (NotLeader, FencedLeaderEpoch, UnknownLeaderEpoch,
UnknownTopicId, SourceUnavailable); the core backs the partition off with the client's backoff and
sends it to FAILED only after ``source.unavailable.timeout.ms`` of failures. Reads any broker can
answer go to another when one does not (docs/kafka-source.md).

A fetched ``Batch``'s ``payload`` is the whole RecordBatch as the source holds it (header
included), so the destination keeps it byte for byte; its fields (offsets, epochs, producer
fields, control type) are read from the header. See docs/kafka-source.md.

Layout (as Kafka splits its fetcher threads): ``wire`` (our codec's requests through
aiokafka, error codes, RecordBatch headers), ``connection`` (loop thread, client, metadata
cache and refresh), ``read_ahead``, ``partition_reads`` (Fetch, ListOffsets,
OffsetsForLeaderEpoch), ``cluster_reads`` (topics, groups, configs, ACLs, LME); this module
holds the mirror's client settings and the port, which maps port calls onto them.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from coordinator.ports import (
    UNDEFINED_EPOCH,
    AclBinding,
    EpochEndOffset,
    FetchResult,
    GroupDescription,
    GroupOffset,
    IsolationLevel,
    PartitionOffsets,
    PortError,
    TopicMetadata,
    TopicPartition,
)
from streams.config import ConfigError
from streams.kafka.cluster_reads import ClusterReads
from streams.kafka.connection import KafkaConnection
from streams.kafka.fetch_session import KafkaFetchSessions
from streams.kafka.partition_reads import PartitionReads
from streams.kafka.read_ahead import READ_AHEAD_MAX_BYTES, READ_AHEAD_TTL_S, ReadAhead
from streams.kafka.wire import (
    KafkaProtocolError,
)

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
    from streams.tls import client_context

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


# --------------------------------------------------------------------------------- the port


class KafkaSourceCluster:
    """``SourceCluster`` (and ``call_many``) over the Kafka protocol; see the module docstring.

    ``props`` are the mirror's configs (its Kafka client settings are read from them).
    Thread-safe: every call runs as a coroutine on the connection's own event-loop thread.
    """

    def __init__(self, bootstrap_servers: str, props: Mapping[str, str] | None = None, *,
                 request_timeout_ms: int = 10_000, metadata_max_age_ms: int = 5_000,
                 response_max_bytes: int = 50 << 20) -> None:  # fmt: skip
        self.cluster = bootstrap_servers  # named in errors and logs
        # Bad settings fail each call (SourceUnavailable: the partitions go FAILED and say why)
        # rather than the worker building the port; an altered config builds a new port.
        config_error: str | None = None
        settings: dict[str, Any] = {}
        try:
            parse_bootstrap(bootstrap_servers)
            settings = client_settings(props or {})
        except ConfigError as e:
            config_error = str(e)
        self.conn = KafkaConnection(bootstrap_servers, settings, config_error, request_timeout_ms=request_timeout_ms,
                                    metadata_max_age_ms=metadata_max_age_ms)  # fmt: skip
        self.partitions = PartitionReads(self.conn, response_max_bytes, ReadAhead(READ_AHEAD_MAX_BYTES, READ_AHEAD_TTL_S))
        self.reads = ClusterReads(self.conn)

    @property
    def config_error(self) -> str | None:
        return self.conn.config_error

    @property
    def settings(self) -> dict[str, Any]:
        return self.conn.settings

    # ------------------------------------------------------------------ SourceCluster

    def cluster_id(self) -> str:
        return self.conn.run(self.reads.cluster_id())

    def describe_topics(self, topic_ids: Sequence[uuid.UUID] | None = None) -> list[TopicMetadata]:
        return self.conn.run(self.reads.describe_topics(topic_ids))

    def list_offsets(self, tp: TopicPartition) -> PartitionOffsets:
        return self.conn.run(_m_list_offsets(self, tp))

    def fetch(self, tp: TopicPartition, fetch_offset: int, max_bytes: int,
              isolation: IsolationLevel = IsolationLevel.READ_COMMITTED, current_leader_epoch: int | None = None,
              last_fetched_epoch: int | None = None) -> FetchResult:  # fmt: skip
        kwargs = {"current_leader_epoch": current_leader_epoch, "last_fetched_epoch": last_fetched_epoch}
        return self.conn.run(_m_fetch(self, tp, fetch_offset, max_bytes, isolation, **kwargs))

    def end_offset_for_epoch(self, tp: TopicPartition, leader_epoch: int,
                             current_leader_epoch: int | None = None) -> EpochEndOffset:  # fmt: skip
        return self.conn.run(self.partitions.epoch_end(tp, leader_epoch, current_leader_epoch))

    def latest_epoch(self, tp: TopicPartition) -> int:
        return self.conn.run(_m_latest_epoch(self, tp))

    def last_mirrored_epoch(self, mirror_name: str, tp: TopicPartition) -> int | None:
        return self.conn.run(self.reads.last_mirrored_epoch(mirror_name, tp))

    def last_mirror_cut(self, mirror_name: str, tp: TopicPartition) -> int | None:
        """None: KIP-1279's ReadMirrorStates carries no cut offset, so a failback from a Kafka
        cluster aligns by the LME's epoch boundary alone (which a cut stop already puts at the cut)."""
        return self.conn.run(_METHODS["last_mirror_cut"](self, mirror_name, tp))

    def list_groups(self) -> list[GroupDescription]:
        return self.conn.run(self.reads.list_groups())

    def group_offsets(self, group_id: str) -> list[GroupOffset]:
        return self.conn.run(self.reads.group_offsets(group_id))

    def is_group_active(self, group_id: str) -> bool:
        return self.conn.run(self.reads.is_group_active(group_id))

    def describe_configs(self, topic_id: uuid.UUID) -> dict[str, str]:
        return self.conn.run(self.reads.describe_configs(topic_id))

    def describe_acls(self) -> list[AclBinding]:
        return self.conn.run(self.reads.describe_acls())

    def call_many(self, calls: Sequence[tuple[str, tuple[Any, ...], dict[str, Any] | None]]) -> list[Any]:
        """Many calls at once, results in order (PortErrors as values): the fetches of a wave go out
        as one Fetch per leader, the ListOffsets likewise; other calls run concurrently."""
        return self.conn.run(self._call_many(calls))

    async def _call_many(self, calls: Sequence[tuple[str, tuple[Any, ...], dict[str, Any] | None]]) -> list[Any]:
        out: list[Any] = [None] * len(calls)
        fetches = [i for i, c in enumerate(calls) if c[0] == "fetch"]
        offsets = [i for i, c in enumerate(calls) if c[0] == "list_offsets" and not c[2]]
        grouped = set(fetches) | set(offsets)
        others = [i for i in range(len(calls)) if i not in grouped]

        async def run_fetches() -> None:
            if fetches:
                got = await self.partitions.fetch_many([(calls[i][1], calls[i][2] or {}) for i in fetches])
                out_update(fetches, got)

        async def run_offsets() -> None:
            if offsets:
                got = await self.partitions.list_offsets_many([calls[i][1][0] for i in offsets])
                out_update(offsets, got)

        async def run_other(i: int) -> None:
            method, args, kwargs = calls[i]
            if method not in _METHODS:
                out[i] = KafkaProtocolError(f"unknown port method {method}")
                return
            try:
                out[i] = await self.conn.guard(_METHODS[method](self, *args, **(kwargs or {})))
            except PortError as e:
                out[i] = e

        def out_update(idx: list[int], got: list[Any]) -> None:
            for i, r in zip(idx, got):
                out[i] = r

        await asyncio.gather(run_fetches(), run_offsets(), *(run_other(i) for i in others))
        return out

    def open_watch(self) -> KafkaFetchSessions:
        """The long poll over caught-up partitions (``streams.kafka.fetch_session``), on its own connection."""
        c = self.conn
        return KafkaFetchSessions(KafkaConnection(c.cluster, c.settings, c.config_error, request_timeout_ms=c.request_timeout_ms,
                                                  metadata_max_age_ms=c.metadata_max_age_ms))  # fmt: skip

    def close(self) -> None:
        """Closes the connections and stops the loop thread."""
        self.conn.close()

    def __enter__(self) -> KafkaSourceCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _one(results: list[Any]) -> Any:
    r = results[0]
    if isinstance(r, BaseException):
        raise r
    return r


async def _m_list_offsets(port: KafkaSourceCluster, tp: TopicPartition) -> PartitionOffsets:
    return _one(await port.partitions.list_offsets_many([tp]))


async def _m_fetch(port: KafkaSourceCluster, *args: Any, **kwargs: Any) -> FetchResult:
    return _one(await port.partitions.fetch_many([(args, kwargs)]))


async def _m_latest_epoch(port: KafkaSourceCluster, tp: TopicPartition) -> int:
    answer = await port.partitions.epoch_end(tp, None, None)
    return answer.epoch if answer.epoch >= 0 else UNDEFINED_EPOCH


# Port method -> coroutine, for ``call_many``.
async def _none() -> None:
    return None


# Every read method of the port, for call_many (a name missing here answers "unknown port method").
_METHODS: dict[str, Callable[..., Awaitable[Any]]] = {
    "cluster_id": lambda p: p.reads.cluster_id(),
    "describe_topics": lambda p, topic_ids=None: p.reads.describe_topics(topic_ids),
    "list_offsets": _m_list_offsets,
    "fetch": _m_fetch,
    "end_offset_for_epoch": lambda p, tp, leader_epoch, current_leader_epoch=None: p.partitions.epoch_end(
        tp, leader_epoch, current_leader_epoch),
    "latest_epoch": _m_latest_epoch,
    "last_mirrored_epoch": lambda p, mirror_name, tp: p.reads.last_mirrored_epoch(mirror_name, tp),
    "last_mirror_cut": lambda p, mirror_name, tp: _none(),
    "list_groups": lambda p: p.reads.list_groups(),
    "group_offsets": lambda p, group_id: p.reads.group_offsets(group_id),
    "is_group_active": lambda p, group_id: p.reads.is_group_active(group_id),
    "describe_configs": lambda p, topic_id: p.reads.describe_configs(topic_id),
    "describe_acls": lambda p: p.reads.describe_acls(),
}
