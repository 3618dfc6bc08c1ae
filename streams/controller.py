"""The cluster mirror controller: validates and authorizes admin commands, and alone appends
their records to the metadata log (as KRaft's active controller).

One request at a time, like KRaft's single-threaded controller: validate against the current
image -> append the records atomically -> wait until the log has been replayed past them ->
answer. Reads (list, describe) see only committed state. Validation is a pluggable callable
``(request, image, states) -> (records, response)``; the default wires ``coordinator.admin``.

The per-partition states come from a ``StatusSource``; the default follows ``__mirror_state``
(the Faust table's changelog) with a plain consumer, so describe shows what the workers
persisted: state, retry attempt and error. Source HW and destination LEO come from an
optional batched offsets lookup (the cluster ports), -1 until one is given; only describe asks
for them, looked up for the request unless it allows older ones (``OffsetsMaxAgeMs``), and
each partition's answer says how old its offsets are.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import logging
import struct
import time
import uuid
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import msgspec
from aiokafka import AIOKafkaConsumer, TopicPartition

from coordinator import admin
from coordinator.delta import ProblemKind, Replayer
from coordinator.readiness import SyncReport, combined_sync_times, failover_readiness
from coordinator.state_counts import StateTally
from coordinator.workflows.config import MirrorConfig
from coordinator.workflows.fetcher import lag as fetch_lag
from coordinator.image import AclOperation, AclPermissionType, AclResourceType, MetadataImage, PatternType
from coordinator.states import ErrorCode, MirrorState
from records.framing import ApiMessageAndVersion
from records.redact import redact_config
from records.registry import SchemaSet, default_schemas
from streams.admin_client import (  # noqa: F401 - scrub/secret_values re-exported
    API_NAMES,
    ProtocolError,
    RequestHeader,
    decode_request_header,
    encode_response,
    read_frame,
    scrub,
    secret_values,
)
from streams import admin_tls
from streams.config import CATCH_UP_FETCH_MAX_WAIT_MS, WorkerConfig
from streams.metadata_log import (
    DeadLetterQueue,
    MetadataLogLoader,
    MetadataLogReader,
    MetadataLogWriter,
    SnapshotPolicy,
    SnapshotStore,
    dlq_topic_spec,
    ensure_topics,
    metadata_topic_spec,
)
from streams.mirror_state_store import MirrorStateCodec, RecordType, mirror_state_topic_spec
from streams.sync_status import SyncStatusView, sync_status_topic_spec

log = logging.getLogger(__name__)
ANONYMOUS = "User:ANONYMOUS"
StateKey = tuple[str, uuid.UUID, int]
_Offsets = tuple[int, int, float, str | None]  # (HW, LEO, looked up at, why the source could not say)


class PartitionStatus(NamedTuple):
    state: MirrorState
    retry_attempt: int = 0
    error_message: str | None = None
    source_hw: int = -1
    destination_leo: int = -1
    offsets_at: float = -1.0  # time.monotonic() of the lookup that gave the offsets; -1: none


class AdminRequest(NamedTuple):
    header: RequestHeader
    api: str  # e.g. "StopMirrorTopics"
    body: msgspec.Struct
    principal: admin.Principal
    # Describe only: the workers' sync reports per mirror (None: not known to this controller).
    syncs: Mapping[str, Sequence[SyncReport]] | None = None
    # A StateCountsOnly describe: the counts per state kept as the changelog is read (None: walk the states).
    tally: StateTally | None = None


Validator = Callable[[AdminRequest, MetadataImage, Mapping[StateKey, PartitionStatus]],
                     tuple[Sequence[ApiMessageAndVersion], msgspec.Struct]]  # fmt: skip


# Source HW and destination LEO of many mirror partitions at once: (HW, LEO) per key, -1 where
# unknown, optionally with why the source could not say (shown in the error column). A
# coroutine, so the lookup chooses where it blocks (never on the controller's loop).
OffsetsLookup = Callable[[Sequence[StateKey]], Awaitable[Mapping[StateKey, tuple[int, int] | tuple[int, int, str | None]]]]


class StatusSource(Protocol):
    async def start(self) -> None: ...
    async def stop(self) -> None: ...

    async def statuses(self, offsets: bool = True, mirrors: Collection[str] | None = None,
                       max_age: float = 0.0) -> Mapping[StateKey, PartitionStatus]:  # fmt: skip
        """Every partition's status; source HW / destination LEO only with ``offsets``, and then
        only for ``mirrors`` (None: all) -- the others keep -1. Offsets are looked up for this
        call unless ones at most ``max_age`` seconds old are at hand."""
        ...


# -------------------------------------------------------------------- the default validator


def _error_response(schemas: SchemaSet, api: str, code: int, message: str | None) -> msgspec.Struct:
    cls = schemas.struct(f"{api}Response")
    fields = {"throttle_time_ms": 0, "error_code": int(code), "error_message": message}
    if api == "ListClusterMirrors":
        fields["mirrors"] = []
    elif api == "DescribeClusterMirrors":
        fields["mirrors"] = []
    elif api in ("AlterClusterMirrorConfigs", "DescribeClusterMirrorConfigs"):
        fields["configs"] = []
    elif api not in ("CreateClusterMirror", "DeleteClusterMirror"):
        fields["topics"] = []
    return cls(**fields)


def _topic_response(schemas: SchemaSet, api: str, result: admin.AdminResponse, secrets: Sequence[str]) -> msgspec.Struct:
    cls = schemas.struct(f"{api}Response")
    if api in ("CreateClusterMirror", "DeleteClusterMirror"):
        code, message = result.first_error()
        return cls(throttle_time_ms=0, error_code=int(code), error_message=scrub(message, secrets))
    topic_cls = schemas.nested(f"{api}Response", "TopicResult")
    topics = [topic_cls(name=t.name, error_code=int(t.error_code), error_message=scrub(t.error_message, secrets))
              for t in result.topics]  # fmt: skip
    extra: dict[str, Any] = {}
    if result.skipped:  # only StartMirrorTopics has them
        skipped_cls = schemas.nested(f"{api}Response", "SkippedTopic")
        extra["skipped_topics"] = [skipped_cls(name=n, reason=scrub(why, secrets)) for n, why in result.skipped]
    return cls(throttle_time_ms=0, error_code=int(result.error_code),
               error_message=scrub(result.error_message, secrets), topics=topics, **extra)  # fmt: skip


def _names(body: Any) -> list[str]:
    return [t.topic_name for t in body.topics]


def coordinator_validator(schemas: SchemaSet | None = None, ready_max_lag: int = 1000) -> Validator:
    """``coordinator.admin`` behind the controller's validator interface; ``ready_max_lag`` is
    the lag a describe still calls ready for a failover (``metrics.failover.ready.max.lag``)."""
    s = schemas or default_schemas()

    def validate(req: AdminRequest, image: MetadataImage, statuses: Mapping[StateKey, PartitionStatus]):  # noqa: ANN202
        b: Any = req.body
        states = {k: v.state for k, v in statuses.items()}
        who = req.principal
        svo = getattr(b, "state_validation_offset", -1)
        api = req.api
        if api == "CreateClusterMirror":
            config = {c.name: c.value for c in b.config}
            r = admin.create_cluster_mirror(image, b.mirror_name, config, principal=who, schemas=s)
            return r.records, _topic_response(s, api, r.response, secret_values(config))
        if api == "DeleteClusterMirror":
            r = admin.delete_cluster_mirror(image, b.mirror_name, states=states, state_validation_offset=svo, principal=who, schemas=s)
        elif api == "StartMirrorTopics":
            r = admin.start_mirror_topics(image, b.mirror_name, _names(b), include_patterns=b.include_patterns,
                                          exclude_patterns=b.exclude_patterns, states=states,
                                          state_validation_offset=svo, principal=who, schemas=s)  # fmt: skip
        elif api == "StopMirrorTopics":
            r = admin.stop_mirror_topics(image, b.mirror_name, _names(b), patterns=b.patterns, states=states,
                                         state_validation_offset=svo, principal=who, schemas=s)  # fmt: skip
        elif api == "PauseMirrorTopics":
            r = admin.pause_mirror_topics(image, b.mirror_name, _names(b), states=states, state_validation_offset=svo, principal=who, schemas=s)
        elif api == "ResumeMirrorTopics":
            r = admin.resume_mirror_topics(image, b.mirror_name, _names(b), states=states, state_validation_offset=svo, principal=who, schemas=s)
        elif api == "AlterClusterMirrorConfigs":
            changes = [(c.name, admin.ConfigOp(c.config_operation) if c.config_operation in (0, 1) else c.config_operation,
                        c.value) for c in b.configs]  # fmt: skip
            r = admin.alter_cluster_mirror_configs(image, b.mirror_name, changes, validate_only=b.validate_only,
                                                   principal=who, schemas=s)  # fmt: skip
            return r.records, _alter_configs_response(s, r.response, secret_values({c.name: c.value for c in b.configs}))
        elif api == "DescribeClusterMirrorConfigs":
            code, message, configs = admin.describe_cluster_mirror_configs(image, b.mirror_name, principal=who)
            ccls = s.nested(f"{api}Response", "DescribeConfigsResourceResult")
            return (), s.struct(f"{api}Response")(throttle_time_ms=0, error_code=int(code), error_message=message,
                                                  configs=[ccls(name=c.name, value=c.value, is_sensitive=c.sensitive)
                                                           for c in configs])  # fmt: skip
        elif api == "ListClusterMirrors":
            return (), _list_response(s, admin.list_cluster_mirrors(image, b.include_topic_names, principal=who))
        elif api == "DescribeClusterMirrors":
            counts_only = getattr(b, "state_counts_only", False)
            tally = req.tally if counts_only else None
            described = admin.describe_cluster_mirrors(image, list(b.mirror_names or ()), states=states, principal=who,
                                                       tally=tally)  # fmt: skip
            return (), _describe_response(s, described, statuses, ready_max_lag, req.syncs, counts_only=counts_only)
        else:
            return (), _error_response(s, api, ErrorCode.INVALID_REQUEST, f"unsupported API {api}")
        return r.records, _topic_response(s, api, r.response, ())

    return validate


def _alter_configs_response(s: SchemaSet, result: admin.AdminResponse, secrets: Sequence[str]) -> msgspec.Struct:
    name = "AlterClusterMirrorConfigsResponse"
    rcls = s.nested(name, "ConfigResult")
    configs = [rcls(name=c.name, error_code=int(c.error_code), error_message=scrub(c.error_message, secrets))
               for c in result.topics]  # fmt: skip
    return s.struct(name)(throttle_time_ms=0, error_code=int(result.error_code),
                          error_message=scrub(result.error_message, secrets), configs=configs)  # fmt: skip


def _list_response(s: SchemaSet, mirrors: Sequence[admin.ListedMirror]) -> msgspec.Struct:
    cls = s.nested("ListClusterMirrorsResponse", "ListedMirror")
    listed = [cls(mirror_name=m.name, source_bootstrap=m.source_bootstrap, source_cluster_id=m.source_cluster_id,
                  topic_count=m.topic_count, topic_names=list(m.topic_names)) for m in mirrors]  # fmt: skip
    return s.struct("ListClusterMirrorsResponse")(throttle_time_ms=0, error_code=0, error_message=None, mirrors=listed)


def _describe_response(s: SchemaSet, described: Sequence[admin.DescribedMirror],
                       statuses: Mapping[StateKey, PartitionStatus], ready_max_lag: int = 1000,
                       syncs: Mapping[str, Sequence[SyncReport]] | None = None,
                       counts_only: bool = False) -> msgspec.Struct:  # fmt: skip
    """``counts_only``: each topic with its partitions' counts per state and no details (a
    progress poll of 50k partitions then costs a few thousand counts, not 50k rows)."""
    name = "DescribeClusterMirrorsResponse"
    mcls, tcls, pcls = s.nested(name, "DescribedMirror"), s.nested(name, "TopicPartitions"), s.nested(name, "PartitionDetail")
    ccls = s.nested(name, "StateCount")
    now = time.monotonic()
    now_ms = int(time.time() * 1000)
    mirrors = []
    for m in described:
        topics = []
        counts = dict.fromkeys(MirrorState, 0)
        lags: dict[tuple[uuid.UUID, int], int] = {}
        for t in m.topics:
            if counts_only:
                per_state: dict[MirrorState, int] = dict(t.state_counts or {})
                for p, state in t.partitions:  # none when counted by a StateTally
                    st = statuses.get((m.name, t.topic_id, p))
                    state = state if st is None else st.state
                    per_state[state] = per_state.get(state, 0) + 1
                for state, n in per_state.items():
                    counts[state] += n
                topics.append(tcls(topic_name=t.name, partitions=[],
                                   state_counts=[ccls(state=int(k), count=n) for k, n in sorted(per_state.items())]))  # fmt: skip
                continue
            parts = []
            for p, state in t.partitions:
                st = statuses.get((m.name, t.topic_id, p), PartitionStatus(state))
                known = st.source_hw >= 0 and st.destination_leo >= 0
                lag = st.source_hw - st.destination_leo if known else -1
                age = int((now - st.offsets_at) * 1000) if st.offsets_at >= 0 else -1
                counts[st.state] += 1
                if known and st.state is MirrorState.MIRRORING:
                    lags[(t.topic_id, p)] = fetch_lag(st.source_hw, st.destination_leo)
                parts.append(pcls(partition_index=p, source_offset=st.source_hw, destination_offset=st.destination_leo,
                                  lag=lag, state_value=st.state.name, retry_attempt=st.retry_attempt,
                                  error_message=st.error_message, error_code=0, state=int(st.state),
                                  offsets_age_ms=max(age, 0) if age >= 0 else -1))  # fmt: skip
            topics.append(tcls(topic_name=t.name, partitions=parts))
        extra: dict[str, Any] = {}
        if not m.error_code:
            # The workers' rule, over the sync times the workers report (streams.sync_status).
            interval = _sync_interval_ms(m.configs)
            times = None if syncs is None else combined_sync_times(syncs.get(m.name, ()), interval, now_ms)
            ready = failover_readiness(counts, lags, ready_max_lag, times, interval, now_ms)
            extra = {"failover_ready": -1 if ready.ready is None else int(ready.ready),
                     "not_ready_reasons": list(ready.reasons),
                     "failed_retry_max_attempts": _retry_max_attempts(m.configs)}  # fmt: skip
        mirrors.append(mcls(error_code=int(m.error_code), mirror_name=m.name, topics=topics, error_message=m.error_message,
                            **extra))  # fmt: skip
    return s.struct(name)(throttle_time_ms=0, error_code=0, error_message=None, mirrors=mirrors)


def _retry_max_attempts(configs: Mapping[str, str | None]) -> int:
    try:
        return MirrorConfig.from_properties({k: v for k, v in configs.items() if v is not None}).failed_retry_max_attempts
    except Exception:  # noqa: BLE001 - a config the mirror could not parse: the CLI shows its default
        return -1


def _sync_interval_ms(configs: Mapping[str, str | None]) -> int:
    try:
        return MirrorConfig.from_properties({k: v for k, v in configs.items() if v is not None}).metadata_refresh_interval_ms
    except Exception:  # noqa: BLE001 - as the worker, which would not run such a mirror, falls back
        return MirrorConfig().metadata_refresh_interval_ms


# ---------------------------------------------------------------- states from __mirror_state


class MirrorStateChangelogView:
    """Follows every partition of ``__mirror_state`` and keeps each mirror partition's latest state.

    Offsets cost up to two cluster lookups per partition (source HW, destination LEO), batched
    (at 50,000 partitions a few pipelined calls per cluster). A describe looks them up for itself:
    offsets older than the request would show a lag that is no longer true. A caller may accept
    older ones (``max_age``, the CLI's ``--max-age``) and then reuses the last lookup's; progress
    polls (``--wait``) ask for states alone and cost no lookup at all.
    """

    def __init__(self, bootstrap: str, topic: str, num_partitions: int, offsets: OffsetsLookup | None = None) -> None:
        self.bootstrap, self.topic, self.num_partitions = bootstrap, topic, num_partitions
        self.offsets = offsets
        self.codec = MirrorStateCodec()
        self._states: dict[StateKey, PartitionStatus] = {}
        # Counts per state, kept as ``_states`` changes (``tally``): what --wait polls.
        self._tally = StateTally()
        self._tallied: dict[StateKey, PartitionStatus] | None = self._states
        # Raw values read but not decoded yet, by raw key; and the decoded keys (they never change).
        self._latest: dict[bytes, tuple[bytes | None, int]] = {}
        self._keys: dict[bytes, StateKey] = {}
        self._state_prefix = struct.pack(">h", RecordType.MIRROR_PARTITION_STATE)
        self._other_prefixes = frozenset(struct.pack(">h", t) for t in RecordType if t is not RecordType.MIRROR_PARTITION_STATE)
        self._consumer: AIOKafkaConsumer | None = None
        self._catch_up_lock = asyncio.Lock()  # one reader of the consumer at a time
        self._offsets_lock = asyncio.Lock()  # concurrent describes share one lookup
        self._offsets: dict[StateKey, _Offsets] = {}
        self.offsets_lookups = 0  # lookups made (each covers many partitions); tests and benches read it

    async def start(self) -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None, enable_auto_commit=False,
                                    auto_offset_reset="earliest", client_id="kip1279-controller-states",
                                    fetch_max_wait_ms=CATCH_UP_FETCH_MAX_WAIT_MS)  # fmt: skip
        await consumer.start()
        tps = [TopicPartition(self.topic, p) for p in range(self.num_partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        # Read only when asked (``catch_up``): between reads nothing is fetched. An idle consumer
        # at the end of a big changelog kept the broker answering ~100 fetches a second.
        consumer.pause(*tps)
        self._consumer = consumer

    async def stop(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await consumer.stop()

    async def catch_up(self) -> dict[StateKey, PartitionStatus]:
        """Reads the changelog up to its end offsets as of this call; the latest state per key."""
        async with self._catch_up_lock:
            await self._catch_up_locked()
        return self._states

    async def _catch_up_locked(self) -> None:
        consumer = self._consumer
        if consumer is None:
            return
        tps = list(consumer.assignment())
        ends = await consumer.end_offsets(tps)
        latest = self._latest
        behind = [tp for tp in tps if await consumer.position(tp) < ends[tp]]
        if behind:
            consumer.resume(*behind)
        try:
            await self._read_to(consumer, tps, ends)
        finally:
            consumer.pause(*tps)
        if latest:
            changed = await _off_loop(len(latest), self._decode_latest, latest)
            tally = self.tally()
            for skey, status in changed.items():  # applied on the loop: readers never see a half-applied read
                if status is None:
                    self._states.pop(skey, None)
                    tally.discard(skey)
                else:
                    self._states[skey] = status
                    tally.set(skey, status.state)
            self._latest = {}  # only now: a read cancelled while decoding decodes them next time

    async def _read_to(self, consumer: AIOKafkaConsumer, tps: list[TopicPartition], ends: Mapping[TopicPartition, int]) -> None:
        """Reads ``tps`` up to ``ends``, keeping the latest raw value per state key in ``_latest``."""
        latest, prefix = self._latest, self._state_prefix
        while any([await consumer.position(tp) < ends[tp] for tp in tps]):
            for msgs in (await consumer.getmany(*tps, timeout_ms=200)).values():
                for msg in msgs:
                    key = msg.key or b""
                    if key[:2] == prefix:  # keep the latest raw value; decoded below, once per key
                        latest[key] = (msg.value, msg.offset)
                    elif key[:2] not in self._other_prefixes:
                        log.error("undecodable %s record at offset %d: unknown record type", self.topic, msg.offset)

    def _decode_latest(self, latest: Mapping[bytes, tuple[bytes | None, int]]) -> dict[StateKey, PartitionStatus | None]:
        """Only the latest value of each key written since the last read is decoded: a partition
        that moved through three states costs one decode, not three (and LME records none)."""
        keys = self._keys
        changed: dict[StateKey, PartitionStatus | None] = {}
        for raw, (value, offset) in latest.items():
            skey = keys.get(raw)
            try:
                if skey is None:
                    k: Any = self.codec.decode_key(raw)[1]
                    skey = keys[raw] = (k.mirror_name, k.topic_id, k.partition)
                if value is None:
                    changed[skey] = None
                    continue
                v: Any = self.codec.decode_value(RecordType.MIRROR_PARTITION_STATE, value)
            except Exception as e:  # noqa: BLE001 - one bad changelog record must not hide the rest
                log.error("undecodable %s record at offset %d: %s", self.topic, offset, e)
                continue
            try:
                state = MirrorState(v.state)
            except ValueError:
                state = MirrorState.UNKNOWN
            changed[skey] = PartitionStatus(state, v.retry_attempt, v.error_message)
        return changed

    def tally(self) -> StateTally:
        """The counts per state of the states read so far (kept as they change)."""
        if self._tallied is not self._states:  # the states were replaced wholesale: counted once more
            self._tally = StateTally((k, st.state) for k, st in self._states.items())
            self._tallied = self._states
        return self._tally

    async def state_counts(self) -> StateTally:
        """``tally`` after reading the changelog to its end offsets as of this call."""
        await self.catch_up()
        return self.tally()

    async def statuses(self, offsets: bool = True, mirrors: Collection[str] | None = None,
                       max_age: float = 0.0) -> Mapping[StateKey, PartitionStatus]:  # fmt: skip
        asked = time.monotonic()  # offsets looked up before this are older than the request
        await self.catch_up()
        states = dict(self._states)
        if self.offsets is None or not offsets:
            return states
        keys = list(states) if mirrors is None else [k for k in states if k[0] in mirrors]
        known = await self._lookup_offsets(keys, asked - max(0.0, max_age))
        return await _off_loop(len(keys), _with_offsets, states, known, mirrors)

    async def _lookup_offsets(self, keys: Sequence[StateKey], oldest: float) -> Mapping[StateKey, _Offsets]:
        assert self.offsets is not None
        async with self._offsets_lock:
            cached = self._offsets  # replaced, never changed in place: safe to read on a thread
            todo = await _off_loop(len(keys), _stale, keys, cached, oldest)
            if not todo:
                return cached
            started = time.monotonic()
            found = await self.offsets(todo)
            self.offsets_lookups += 1
            # Keep only partitions that still have a state: deleted mirrors do not pile up here.
            fresh = {k: v for k, v in cached.items() if k in self._states}
            for k in todo:
                hw, leo, *why = found.get(k, (-1, -1))
                fresh[k] = (hw, leo, started, why[0] if why else None)  # as old as the lookup's start
            self._offsets = fresh
            return fresh


_INLINE = 2_000  # partitions under which a thread hop costs more than it spares the loop


async def _off_loop(n: int, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` on a worker thread when it walks ``n`` >= _INLINE partitions."""
    return fn(*args) if n < _INLINE else await asyncio.to_thread(fn, *args)


def _stale(keys: Sequence[StateKey], cached: Mapping[StateKey, _Offsets], oldest: float) -> list[StateKey]:
    return [k for k in keys if (c := cached.get(k)) is None or c[2] < oldest]  # a lookup started before: stale


def _with_offsets(states: Mapping[StateKey, PartitionStatus], known: Mapping[StateKey, _Offsets],
                  mirrors: Collection[str] | None) -> dict[StateKey, PartitionStatus]:  # fmt: skip
    """The states with their offsets; where the state has no error of its own and the source
    could not say its HW (unreachable, say), the error column says why rather than a bare -1."""
    unknown = (-1, -1, -1.0, None)
    out = {}
    for k, st in states.items():  # one pass and no _replace: it runs for 50k partitions on every describe
        if mirrors is None or k[0] in mirrors:
            hw, leo, at, why = known.get(k, unknown)
            st = PartitionStatus(st.state, st.retry_attempt, st.error_message or why, hw, leo, at)
        out[k] = st
    return out


# ------------------------------------------------------------------------------ controller


class ClusterMirrorController:
    def __init__(self, config: WorkerConfig, *, validator: Validator | None = None, status: StatusSource | None = None,
                 super_users: frozenset[str] = frozenset(), snapshot_policy: SnapshotPolicy | None = None,
                 schemas: SchemaSet | None = None) -> None:  # fmt: skip
        self.config = config
        self.schemas = schemas or default_schemas()
        self.validator = validator or coordinator_validator(self.schemas, config.failover_ready_max_lag)
        self.status = status or MirrorStateChangelogView(
            config.bootstrap_servers, config.mirror_state_topic_name, config.state_partitions)
        self.sync_view = SyncStatusView(config.bootstrap_servers, config.sync_status_topic_name)
        self.super_users = super_users
        # The admin listener's TLS, checked before anything starts: a bad key store or a
        # non-loopback bind without TLS stops the controller here, with the reason.
        self.listener_ssl = admin_tls.server_context(admin_tls.admin_listener_ssl(config.extra))
        admin_tls.check_bind(config.controller_address[0], self.listener_ssl is not None)
        topic = config.metadata_topic_name
        self.writer = MetadataLogWriter(config.bootstrap_servers, topic)
        self.dlq = DeadLetterQueue(config.bootstrap_servers, topic)
        self.reader = MetadataLogReader(config.bootstrap_servers, topic, dlq=self.dlq, client_id="kip1279-controller")
        self.replayer = Replayer(schemas=self.schemas)
        policy = snapshot_policy or SnapshotPolicy(config.snapshot_max_records, config.snapshot_max_interval_ms)
        self.loader = MetadataLogLoader(
            self.reader, SnapshotStore(config.snapshot_dir / "controller"), policy=policy,
            replay=self._replay,
            to_records=lambda: None if self.replayer.in_transaction else self.image.to_records(self.schemas),
            on_poison=self._on_poison,
        )  # fmt: skip
        self._applied = asyncio.Condition()
        self._lock = asyncio.Lock()  # one command at a time
        self._follow: asyncio.Task[None] | None = None
        self._timer: asyncio.Task[None] | None = None
        self._server: asyncio.base_events.Server | None = None
        self.address: tuple[str, int] | None = None
        self._image: MetadataImage | None = None
        self._image_stale = True
        # Told of the records each request appended (``streams.metrics`` times stop requests).
        self.on_command: Callable[[str, Sequence[ApiMessageAndVersion]], None] = lambda api, records: None

    def _replay(self, offset: int, epoch: int, record: ApiMessageAndVersion) -> None:
        problem = self.replayer.replay(record, offset, epoch)
        if problem is not None:
            log.error("metadata record at offset %d not applied: %s", offset, problem.message)
        self._image_stale = True

    def _on_poison(self, entry: Any) -> None:
        self.replayer.delta.report(entry.offset, entry.leader_epoch, ProblemKind.UNDECODABLE, entry.record.error)
        self._image_stale = True

    @property
    def image(self) -> MetadataImage:
        """The committed image; rebuilt only when records were applied since the last call."""
        if self._image is None or self._image_stale:
            _, self._image = self.replayer.publish()  # start a fresh delta: unchanged parts stay shared
            self._image_stale = False
        return self._image

    @property
    def metadata_offset(self) -> int:
        return self.image.offset

    async def start(self, listen: bool = True) -> None:
        c = self.config
        await ensure_topics(c.bootstrap_servers, [metadata_topic_spec(c.metadata_topic_name, c.replication_factor),
                                                  dlq_topic_spec(c.metadata_topic_name, c.replication_factor),
                                                  mirror_state_topic_spec(c), sync_status_topic_spec(c)])  # fmt: skip
        await self.writer.start()
        await self.dlq.start()
        await self.reader.start()
        await self.status.start()
        await self.sync_view.start()
        await self.loader.catch_up()
        self._follow = asyncio.create_task(self._run_follow(), name="kip1279-controller-follow")
        self._timer = asyncio.create_task(self._snapshot_timer(), name="kip1279-controller-snapshots")
        if listen:
            host, port = c.controller_address
            self._server = await asyncio.start_server(self._serve, host, port, ssl=self.listener_ssl)
            sock = self._server.sockets[0].getsockname()
            self.address = (sock[0], sock[1])
            if self.listener_ssl is not None:
                log.info("controller for %s listening on %s:%d (SSL, client certificates required: the "
                         "principal is the certificate's subject)", c.metadata_topic_name, *self.address)  # fmt: skip
            else:
                log.warning("controller for %s listening on %s:%d (PLAINTEXT, local mode: loopback only, the "
                            "principal is the one the client claims; set admin.listener.ssl.* for TLS)",
                            c.metadata_topic_name, *self.address)  # fmt: skip

    @property
    def following(self) -> bool:
        """False once the metadata log follower has stopped (appends then time out)."""
        return self._follow is None or not self._follow.done()

    async def _run_follow(self) -> None:
        try:
            async for entry in self.reader.read(self.loader.next_offset, follow=True):
                self.loader.apply(entry)
                async with self._applied:
                    self._applied.notify_all()
                await self.loader.maybe_snapshot()
        except asyncio.CancelledError:
            raise
        except Exception:
            # Appends now time out and answer an error instead of hanging; the log says why.
            log.exception("the controller stopped following %s", self.config.metadata_topic_name)
            raise

    async def _snapshot_timer(self) -> None:
        # A quiet log still gets its time-based snapshot (records alone only trigger the count).
        period = max(1.0, min(self.loader.policy.max_interval_ms / 1000, 60.0))
        while True:
            await asyncio.sleep(period)
            try:
                await self.loader.maybe_snapshot()
            except Exception as e:  # noqa: BLE001 - a failed snapshot only lengthens the next replay
                log.error("metadata snapshot failed: %s", e)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for task in (self._follow, self._timer):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._follow = self._timer = None
        for part in (self.status, self.sync_view, self.reader, self.dlq, self.writer):
            with contextlib.suppress(Exception):
                await part.stop()

    async def append(self, records: Sequence[ApiMessageAndVersion], timeout: float = 30.0) -> list[int]:
        """Appends records and returns once the image includes them (read-your-writes)."""
        offsets = await self.writer.append(records)
        if offsets:
            last = offsets[-1]
            async with self._applied:
                await asyncio.wait_for(self._applied.wait_for(lambda: self.loader.next_offset > last), timeout)
        return offsets

    async def discover(self, mirror_name: str, source_topics: Mapping[str, uuid.UUID]) -> tuple[str, ...]:
        """Starts the source topics a started pattern of the mirror selects and no mirror holds
        (``admin.discover_mirror_topics``), in turn with the admin commands. Returns their names."""
        async with self._lock:
            found = admin.discover_mirror_topics(self.image, mirror_name, source_topics, schemas=self.schemas)
            if not found.records:
                return ()
            # Partition states only now: a start must not race a stop still under way.
            statuses = await self.status.statuses(offsets=False)
            found = admin.discover_mirror_topics(self.image, mirror_name, source_topics, schemas=self.schemas,
                                                 states={k: v.state for k, v in statuses.items()})  # fmt: skip
            if found.records:
                await self.append(list(found.records))
        names = tuple(t.name for t in found.response.topics)
        if names:
            log.info("mirror %s: discovered and started %d topic(s): %s", mirror_name, len(names), ", ".join(names))
        return names

    async def create_acls(self, principal: str, operations: Sequence[AclOperation], mirror: str = "*",
                          pattern: PatternType = PatternType.LITERAL, deny: bool = False, host: str = "*") -> list[int]:  # fmt: skip
        """Bootstrap ClusterMirror ACLs (there is no CreateAcls RPC in this project yet)."""
        cls = self.schemas.struct("AccessControlEntryRecord")
        key = self.schemas.spec("AccessControlEntryRecord").api_key
        perm = AclPermissionType.DENY if deny else AclPermissionType.ALLOW
        records = [ApiMessageAndVersion(cls(id=uuid.uuid4(), resource_type=int(AclResourceType.CLUSTER_MIRROR),
                                            resource_name=mirror, pattern_type=int(pattern), principal=principal,
                                            host=host, operation=int(op), permission_type=int(perm)), 0, key)
                   for op in operations]  # type: ignore[arg-type]  # fmt: skip
        return await self.append(records)

    async def handle(self, header: RequestHeader, body: msgspec.Struct, peer_host: str = "127.0.0.1", *,
                     authenticated: str | None = None) -> tuple[msgspec.Struct, int]:  # fmt: skip
        """Validates, appends, answers. Returns the response and the metadata offset it reflects.

        ``authenticated``: the principal of the connection's client certificate; with it, the
        principal the request claims is ignored."""
        api = API_NAMES[header.api_key]
        who = admin.Principal(authenticated or header.principal or ANONYMOUS, peer_host, self.super_users)
        req = AdminRequest(header, api, body, who)
        describe = api == "DescribeClusterMirrors"
        async with self._lock:
            # Only describe shows offsets; the commands validate against states alone.
            mirrors = (set(getattr(body, "mirror_names", None) or ()) or None) if describe else None
            counts_only = describe and getattr(body, "state_counts_only", False)
            with_offsets = describe and getattr(body, "include_offsets", True) and not counts_only
            state_counts = getattr(self.status, "state_counts", None) if counts_only else None
            if state_counts is not None:
                # A progress poll: counts kept as the changelog is read, no walk over every state.
                statuses = {}
                req = req._replace(tally=await state_counts())
            elif with_offsets:
                max_age = max(0, getattr(body, "offsets_max_age_ms", 0)) / 1000
                statuses = await self.status.statuses(offsets=True, mirrors=mirrors, max_age=max_age)
            else:
                statuses = await self.status.statuses(offsets=False, mirrors=mirrors)
            image = self.image  # built on the loop; once built it is immutable
            if describe:
                req = req._replace(syncs=await self.sync_view.reports())
                # A describe of 50k partitions is ~0.2 s of CPU; on a thread the loop keeps serving.
                # The response codec is made here first: made on two threads at once, it could
                # differ from the one encode_response looks up.
                self.schemas.codec(f"{api}Response")
                if req.tally is not None:  # a few counts per topic: on the loop, where the tally changes
                    records, response = self.validator(req, image, statuses)
                else:
                    records, response = await asyncio.to_thread(self.validator, req, image, statuses)
            else:
                records, response = self.validator(req, image, statuses)
            secrets = secret_values({c.name: c.value for c in getattr(body, "config", None) or getattr(body, "configs", [])})
            code = getattr(response, "error_code", 0)
            log.info("%s %s by %s from %s: error %d, %d record(s)%s", api, getattr(body, "mirror_name", ""),
                     who.name, peer_host, code, len(records), _describe_config(body))  # fmt: skip
            if records:
                try:
                    await self.append(list(records))
                except Exception as e:  # noqa: BLE001 - the client gets an error, the controller stays up
                    log.error("%s: append to the metadata log failed: %s", api, scrub(str(e), secrets))
                    return _error_response(self.schemas, api, ErrorCode.UNKNOWN_SERVER_ERROR, "metadata log append failed"), self.metadata_offset
                self.on_command(api, records)
            return response, self.metadata_offset

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername") or ("?", 0)
        authenticated = None
        try:
            tls = writer.get_extra_info("ssl_object")
            if tls is not None:  # the handshake required a certificate our trust store vouches for
                authenticated = admin_tls.principal_of(tls.getpeercert(binary_form=True))
                log.debug("admin connection from %s authenticated as %s", peer[0], authenticated)
            while True:
                frame = await read_frame(reader)
                if frame is None:
                    break
                header, pos = decode_request_header(frame)
                api = API_NAMES.get(header.api_key)
                if api is None or header.api_version != 0:
                    log.warning("unsupported api key %d v%d from %s; closing", header.api_key, header.api_version, peer[0])
                    break
                try:
                    body = self.schemas.decode(f"{api}Request", frame[pos:], header.api_version)
                except Exception as e:  # noqa: BLE001 - a malformed request gets INVALID_REQUEST
                    response, offset = _error_response(self.schemas, api, ErrorCode.INVALID_REQUEST, f"malformed {api} request: {e}"), self.metadata_offset
                else:
                    try:
                        response, offset = await self.handle(header, body, peer[0], authenticated=authenticated)
                    except Exception:  # noqa: BLE001 - a validator bug answers an error, never kills the controller
                        log.exception("%s failed", api)
                        response = _error_response(self.schemas, api, ErrorCode.UNKNOWN_SERVER_ERROR, f"{api} failed on the controller")
                        offset = self.metadata_offset
                args = (header.correlation_id, offset, response, header.api_version, self.schemas)
                if api == "DescribeClusterMirrors":  # megabytes at 50k partitions: encoded off the loop
                    writer.write(await asyncio.to_thread(encode_response, *args))
                else:
                    writer.write(encode_response(*args))
                await writer.drain()
        except (ProtocolError, asyncio.IncompleteReadError, ConnectionError, ssl.SSLError, ValueError) as e:
            log.warning("admin connection from %s dropped: %s", peer[0], e)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


def _describe_config(body: Any) -> str:
    config = getattr(body, "config", None) or getattr(body, "configs", None)
    if not config:
        return ""
    return f", config {redact_config({c.name: c.value for c in config})}"


async def run_controller(config: WorkerConfig, super_users: frozenset[str] = frozenset()) -> None:
    """Run a controller until cancelled (``kafka-cluster-mirrors --run-controller``)."""
    controller = ClusterMirrorController(config, super_users=super_users)
    await controller.start()
    try:
        await asyncio.Event().wait()
    finally:
        await controller.stop()
