"""``MetadataDelta``: replays metadata records on top of an image; ``apply()`` gives the next one.

Dispatch comes from the schemas: for every metadata message spec, the handler is the method
named ``replay_<snake_case name>`` (``MirrorTopicStateChangeRecord`` ->
``replay_mirror_topic_state_change_record``). The table is built once per schema set. A record
whose type has no handler is reported as UNHANDLED, never silently dropped.

Replay never raises on bad input. An unknown apiKey, an undecodable frame, or a record that
refers to something the image does not have (a partition of an unknown topic, a membership in
an unknown mirror, ...) becomes a ``ReplayProblem(offset, kind, message)`` on the delta, the
record is skipped, and replay goes on. Provenance still advances past it, so a restart does not
trip over the same record forever.

Offsets: a record at or below the base image's offset is already in it (a redelivery after a
restart) and is skipped as STALE_OFFSET; offsets within one delta must not go backwards.
Equal offsets are allowed, which is how a snapshot is loaded.
"""

from __future__ import annotations

import enum
import itertools
import uuid
from collections.abc import Callable, Iterable
from functools import lru_cache
from typing import Any, NamedTuple, Union

import msgspec

from coordinator.image import (EMPTY_IMAGE, MAX_KEPT_REQUESTS, ActiveController, AppliedRequest, ControlImage, TopicPrediction, AclsImage, ClusterMirrorImage, ConfigResource, ConfigResourceType,
                               ConfigsImage, MetadataImage, MetadataProvenance, MirrorsImage, MirrorTopic,
                               PartitionRegistration, StandardAcl, TopicCut, TopicImage, TopicsImage, frozen_map)
from coordinator.impact_record import predictions
from coordinator.states import DesiredState
from records.framing import ApiMessageAndVersion, FrameError, MetadataRecordSerde
from records.registry import SchemaSet, default_schemas
from records.schema import snake_case

Record = Union[ApiMessageAndVersion, msgspec.Struct]
_CLUSTER_MIRROR = int(ConfigResourceType.CLUSTER_MIRROR)


class ProblemKind(str, enum.Enum):
    UNKNOWN_RECORD_TYPE = "unknown_record_type"  # apiKey or message not in the schemas
    UNDECODABLE = "undecodable"  # the frame or body does not decode
    UNHANDLED = "unhandled"  # a metadata schema with no replay handler
    UNKNOWN_TOPIC = "unknown_topic"
    UNKNOWN_PARTITION = "unknown_partition"
    UNKNOWN_MIRROR = "unknown_mirror"
    UNKNOWN_ACL = "unknown_acl"
    INVALID_RECORD = "invalid_record"  # decodes, but breaks an invariant (bad DesiredState, ...)
    STALE_OFFSET = "stale_offset"  # already in the base image
    OUT_OF_ORDER = "out_of_order"  # offset below one already replayed in this delta


class ReplayProblem(NamedTuple):
    offset: int
    kind: ProblemKind
    message: str


_Outcome = Union[tuple[ProblemKind, str], None]


# ------------------------------------------------------------------------ per-domain deltas


class _TopicBuilder:
    """A topic being changed. Its partitions dict is this delta's own until ``apply()`` hands it
    to an image; the next write then copies it first (copy on write), so applying often is cheap."""

    __slots__ = ("name", "topic_id", "partitions", "applied")

    def __init__(self, name: str, topic_id: uuid.UUID, partitions: dict[int, PartitionRegistration]) -> None:
        self.name = name
        self.topic_id = topic_id
        self.partitions = partitions
        self.applied: TopicImage | None = None  # the image that now shares ``partitions``

    def writable(self) -> "_TopicBuilder":
        if self.applied is not None:
            self.partitions = dict(self.partitions)
            self.applied = None
        return self

    def image(self) -> TopicImage:
        if self.applied is None:
            self.applied = TopicImage(self.name, self.topic_id, frozen_map(self.partitions))
        return self.applied


class TopicsDelta:
    def __init__(self, image: TopicsImage) -> None:
        self.image = image
        self.changed: dict[uuid.UUID, _TopicBuilder] = {}  # created or changed topics
        self.deleted: dict[uuid.UUID, TopicImage] = {}  # base-image topics removed
        self.names: dict[str, uuid.UUID | None] = {}  # name -> id, None once removed

    def view(self, topic_id: uuid.UUID) -> _TopicBuilder | TopicImage | None:
        b = self.changed.get(topic_id)
        if b is not None:
            return b
        if topic_id in self.deleted:
            return None
        return self.image.by_id.get(topic_id)

    def id_of(self, name: str) -> uuid.UUID | None:
        if name in self.names:
            return self.names[name]
        return self.image.by_name.get(name)

    def builder(self, topic_id: uuid.UUID) -> _TopicBuilder | None:
        """The topic, ready to be written to (None if there is no such topic)."""
        b = self.changed.get(topic_id)
        if b is not None:
            return b.writable() if b.applied is not None else b
        if topic_id not in self.deleted:
            t = self.image.by_id.get(topic_id)
            if t is not None:
                b = self.changed[topic_id] = _TopicBuilder(t.name, topic_id, dict(t.partitions))
        return b

    def create(self, name: str, topic_id: uuid.UUID) -> _Outcome:
        current = self.view(topic_id)
        if current is not None:
            if current.name == name:
                return None  # the same TopicRecord again
            return ProblemKind.INVALID_RECORD, f"topic ID {topic_id} already belongs to topic {current.name!r}, not {name!r}"
        other = self.id_of(name)
        if other is not None:
            return ProblemKind.INVALID_RECORD, f"topic name {name!r} is already used by topic ID {other}"
        self.changed[topic_id] = _TopicBuilder(name, topic_id, {})
        self.names[name] = topic_id
        return None

    def remove(self, topic_id: uuid.UUID) -> str | None:
        """Removes a topic; returns its name, or None if there is no such topic."""
        current = self.view(topic_id)
        if current is None:
            return None
        self.changed.pop(topic_id, None)
        base = self.image.by_id.get(topic_id)
        if base is not None:
            self.deleted[topic_id] = base
        self.names[current.name] = None
        return current.name

    def apply(self) -> TopicsImage:
        if not self.changed and not self.deleted:
            return self.image
        by_id = dict(self.image.by_id)
        for tid in self.deleted:
            by_id.pop(tid, None)
        for tid, b in self.changed.items():
            by_id[tid] = b.image()
        by_name = dict(self.image.by_name)
        for name, tid in self.names.items():
            if tid is None:
                by_name.pop(name, None)
            else:
                by_name[name] = tid
        return TopicsImage(frozen_map(by_id), frozen_map(by_name))


class ConfigsDelta:
    def __init__(self, image: ConfigsImage) -> None:
        self.image = image
        self.resources: dict[ConfigResource, dict[str, str]] = {}  # touched resources, materialized

    def _own(self, res: ConfigResource) -> dict[str, str]:
        d = self.resources.get(res)
        if d is None:
            d = self.resources[res] = dict(self.image.resources.get(res, {}))
        return d

    def set(self, res: ConfigResource, key: str, value: str | None) -> None:
        d = self._own(res)
        if value is None:
            d.pop(key, None)
        else:
            d[key] = value

    def clear(self, res: ConfigResource) -> None:
        if res in self.resources or res in self.image.resources:
            self.resources[res] = {}

    def apply(self) -> ConfigsImage:
        if not self.resources:
            return self.image
        out = dict(self.image.resources)
        for res, d in self.resources.items():
            if d:
                out[res] = frozen_map(dict(d))
            else:
                out.pop(res, None)
        return ConfigsImage(frozen_map(out))


class MirrorsDelta:
    def __init__(self, image: MirrorsImage) -> None:
        self.image = image
        self.configs: dict[str, dict[str, str]] = {}  # touched mirrors, materialized
        self.topics: dict[uuid.UUID, MirrorTopic | None] = {}  # membership changes
        # (mirror, topic) -> offset at which the topic last left that mirror in this delta: kept
        # even if it joins again later in the delta, so a re-created mirror starts from nothing.
        self.left: dict[tuple[str, uuid.UUID], int] = {}
        self.impacts: dict[uuid.UUID, TopicPrediction | None] = {}  # predictions set (None: dropped)

    def exists(self, name: str) -> bool:
        d = self.configs.get(name)
        return bool(d) if d is not None else name in self.image.mirrors

    def membership(self, topic_id: uuid.UUID) -> MirrorTopic | None:
        if topic_id in self.topics:
            return self.topics[topic_id]
        return self.image.topics.get(topic_id)

    def set_membership(self, topic_id: uuid.UUID, member: MirrorTopic | None, offset: int) -> None:
        before = self.membership(topic_id)
        if before is not None and (member is None or member.mirror_name != before.mirror_name):
            self.left[(before.mirror_name, topic_id)] = offset
        if member is None or member.desired_state is not DesiredState.STOP:
            self.drop_impact(topic_id)  # a stop's prediction lasts until the topic moves on
        self.topics[topic_id] = member

    def drop_impact(self, topic_id: uuid.UUID) -> None:
        if self.impacts.get(topic_id, self.image.impacts.get(topic_id)) is not None:
            self.impacts[topic_id] = None

    def set_config(self, name: str, key: str, value: str | None, offset: int) -> None:
        d = self.configs.get(name)
        if d is None:
            base = self.image.mirrors.get(name)
            d = self.configs[name] = dict(base.configs) if base is not None else {}
        existed = bool(d)
        if value is None:
            d.pop(key, None)
        else:
            d[key] = value
        if existed and not d:
            self._detach_all(name, offset)

    def _detach_all(self, name: str, offset: int) -> None:
        # A mirror went away with topics still attached: detach them so the image stays whole.
        for tid, m in list(self.image.topics.items()) + list(self.topics.items()):
            if m is not None and m.mirror_name == name and self.membership(tid) is m:
                self.set_membership(tid, None, offset)

    def apply(self) -> MirrorsImage:
        if not self.configs and not self.topics and not self.impacts:
            return self.image
        mirrors = self.image.mirrors
        if self.configs:
            out = dict(mirrors)
            for name, d in self.configs.items():
                if d:
                    out[name] = ClusterMirrorImage(name, frozen_map(dict(d)))
                else:
                    out.pop(name, None)
            mirrors = frozen_map(out)
        topics = self.image.topics
        if self.topics:
            t = dict(topics)
            for tid, m in self.topics.items():
                if m is None:
                    t.pop(tid, None)
                else:
                    t[tid] = m
            topics = frozen_map(t)
        impacts = self.image.impacts
        if self.impacts:
            i = dict(impacts)
            for tid, pred in self.impacts.items():
                if pred is None:
                    i.pop(tid, None)
                else:
                    i[tid] = pred
            impacts = frozen_map(i)
        return MirrorsImage(mirrors, topics, impacts)


class AclsDelta:
    def __init__(self, image: AclsImage) -> None:
        self.image = image
        self.changes: dict[uuid.UUID, StandardAcl | None] = {}

    def exists(self, acl_id: uuid.UUID) -> bool:
        if acl_id in self.changes:
            return self.changes[acl_id] is not None
        return acl_id in self.image.acls

    def apply(self) -> AclsImage:
        if not self.changes:
            return self.image
        out = dict(self.image.acls)
        for acl_id, acl in self.changes.items():
            if acl is None:
                out.pop(acl_id, None)
            else:
                out[acl_id] = acl
        return AclsImage(frozen_map(out))


class ControlDelta:
    """The active controller and the kept requests (``ControlImage``): at most
    ``MAX_KEPT_REQUESTS``, the oldest dropped first."""

    def __init__(self, image: ControlImage) -> None:
        self.image = image
        self.controller: ActiveController | None = image.controller
        self.requests: list[tuple[uuid.UUID, AppliedRequest]] = []

    def apply(self) -> ControlImage:
        if self.controller == self.image.controller and not self.requests:
            return self.image
        requests = self.image.requests
        if self.requests:
            kept = dict(requests)
            for rid, r in self.requests:
                kept.pop(rid, None)
                kept[rid] = r
            for rid in list(itertools.islice(kept, max(0, len(kept) - MAX_KEPT_REQUESTS))):
                del kept[rid]
            requests = frozen_map(kept)
        return ControlImage(self.controller, requests)


# -------------------------------------------------------------------------- metadata delta


class _Dispatch(NamedTuple):
    by_api_key: dict[int, tuple[str, Callable[..., _Outcome] | None]]
    by_type: dict[type, Callable[..., _Outcome]]
    by_name: dict[str, Callable[..., _Outcome] | None]
    serde: MetadataRecordSerde
    # 3-byte frame header (frame 1, apiKey < 128, version < 128) -> that version's body decoder
    fast: dict[bytes, Callable[[bytes, int, int], tuple[Any, int]]]

    def fast_decoder(self, header: bytes) -> Callable[[bytes, int, int], tuple[Any, int]] | None:
        """The body decoder for a one-byte-varint header, looked up once per (apiKey, version)."""
        dec = self.fast.get(header)
        if dec is None and len(header) == 3 and header[0] == 1 and header[1] < 0x80 and header[2] < 0x80:
            entry = self.by_api_key.get(header[1])
            if entry is not None:
                spec = self.serde.schemas.spec(entry[0])
                if header[2] in spec.valid_versions:
                    dec = self.fast[header] = self.serde.schemas.codec(entry[0]).version_codec(header[2]).decode_at
        return dec


class MetadataDelta:
    """The one mutable thing: replays records, then ``apply()`` builds the next image."""

    def __init__(self, image: MetadataImage = EMPTY_IMAGE, schemas: SchemaSet | None = None) -> None:
        self.image = image
        self.schemas = schemas or default_schemas()
        self.topics = TopicsDelta(image.topics)
        self.configs = ConfigsDelta(image.configs)
        self.mirrors = MirrorsDelta(image.mirrors)
        self.acls = AclsDelta(image.acls)
        self.control = ControlDelta(image.control)
        self.problems: list[ReplayProblem] = []
        self.offset, self.epoch = image.provenance
        self.records_replayed = 0
        self._applied: tuple[tuple[int, int, int, int], MetadataImage] | None = None
        self._dispatch = _dispatch_table(self.schemas)

    # ---- entry points

    def replay(self, record: Record, offset: int, epoch: int = 0) -> ReplayProblem | None:
        """Replays one decoded record; returns the problem it raised, if any."""
        message = record.message if isinstance(record, ApiMessageAndVersion) else record
        handler = self._dispatch.by_type.get(type(message))
        if handler is None:
            name = type(message).__name__
            if name not in self._dispatch.by_name:
                return self.report(offset, epoch, ProblemKind.UNKNOWN_RECORD_TYPE,
                                   f"{name} is not a metadata record of these schemas")
            handler = self._dispatch.by_name[name]
            if handler is None:
                return self.report(offset, epoch, ProblemKind.UNHANDLED, f"no replay handler for {name}")
        if offset <= self.image.provenance.offset or offset < self.offset:
            return self._stale(offset)
        outcome = handler(self, message, offset)
        self.offset, self.epoch = offset, epoch
        self.records_replayed += 1
        if outcome is not None:
            return self._add(ReplayProblem(offset, outcome[0], f"{type(message).__name__}: {outcome[1]}"))
        return None

    def replay_framed(self, data: bytes, offset: int, epoch: int = 0) -> ReplayProblem | None:
        """Decodes a framed record (``MetadataRecordSerde``) and replays it."""
        if offset <= self.image.provenance.offset or offset < self.offset:
            return self._stale(offset)
        # Hot path: the header of nearly every record is 3 one-byte varints; decode the body
        # directly. Anything unusual goes through MetadataRecordSerde for its exact error.
        dec = self._dispatch.fast_decoder(data[:3])
        if dec is not None:
            try:
                message, end = dec(data, 3, len(data))
            except Exception:  # noqa: BLE001 - the slow path below reports it precisely
                pass
            else:
                if end == len(data):
                    return self.replay(message, offset, epoch)
        try:
            amv = self._dispatch.serde.decode(data)
        except FrameError as e:
            kind, message = self.classify_frame_error(data, e)
            return self.report(offset, epoch, kind, message)
        return self.replay(amv, offset, epoch)

    def classify_frame_error(self, data: bytes, error: FrameError) -> tuple[ProblemKind, str]:
        try:
            api_key, version, _ = self._dispatch.serde.read_header(data)
        except FrameError:
            return ProblemKind.UNDECODABLE, str(error)
        entry = self._dispatch.by_api_key.get(api_key)
        if entry is None:
            return ProblemKind.UNKNOWN_RECORD_TYPE, f"unknown metadata record apiKey {api_key} (version {version})"
        return ProblemKind.UNDECODABLE, str(error)

    def report(self, offset: int, epoch: int, kind: ProblemKind, message: str) -> ReplayProblem:
        """Records a problem at ``offset`` and moves provenance past it (the record is quarantined)."""
        if offset <= self.image.provenance.offset or offset < self.offset:
            return self._stale(offset)
        self.offset, self.epoch = offset, epoch
        return self._add(ReplayProblem(offset, kind, message))

    def apply(self) -> MetadataImage:
        """The next image. Cached until the next replay, so asking again costs nothing."""
        key = (self.offset, self.epoch, self.records_replayed, len(self.problems))
        if self._applied is not None and self._applied[0] == key:
            return self._applied[1]
        image = MetadataImage(
            MetadataProvenance(self.offset, self.epoch),
            self.topics.apply(),
            self.configs.apply(),
            self.mirrors.apply(),
            self.acls.apply(),
            self.control.apply(),
        )
        self._applied = (key, image)
        return image

    @classmethod
    def unhandled(cls, schemas: SchemaSet | None = None) -> tuple[str, ...]:
        """Metadata message names of ``schemas`` that have no replay handler."""
        table = _dispatch_table(schemas or default_schemas())
        return tuple(sorted(name for name, h in table.by_name.items() if h is None))

    # ---- internals

    def _stale(self, offset: int) -> ReplayProblem:
        if offset <= self.image.provenance.offset:
            p = ReplayProblem(offset, ProblemKind.STALE_OFFSET,
                              f"offset {offset} is already in the image (image offset {self.image.provenance.offset})")
        else:
            p = ReplayProblem(offset, ProblemKind.OUT_OF_ORDER, f"offset {offset} is below offset {self.offset} already replayed")
        return self._add(p)

    def _add(self, problem: ReplayProblem) -> ReplayProblem:
        self.problems.append(problem)
        return problem

    # ---- handlers: found by name from the schemas; each returns None or (kind, message)

    def replay_topic_record(self, r: Any, offset: int) -> _Outcome:
        return self.topics.create(r.name, r.topic_id)

    def replay_partition_record(self, r: Any, offset: int) -> _Outcome:
        b = self.topics.builder(r.topic_id)
        if b is None:
            return ProblemKind.UNKNOWN_TOPIC, f"partition {r.partition_id} of unknown topic ID {r.topic_id}"
        if r.partition_id < 0:
            return ProblemKind.INVALID_RECORD, f"invalid partition id {r.partition_id} for topic {b.name!r}"
        b.partitions[r.partition_id] = PartitionRegistration(
            r.replicas, r.isr, r.leader, r.leader_epoch, r.partition_epoch,
            r.removing_replicas, r.adding_replicas, r.leader_recovery_state,
            r.directories, r.eligible_leader_replicas, r.last_known_elr,
        )
        return None

    def replay_partition_change_record(self, r: Any, offset: int) -> _Outcome:
        current = self.topics.view(r.topic_id)
        if current is None:
            return ProblemKind.UNKNOWN_TOPIC, f"change of partition {r.partition_id} of unknown topic ID {r.topic_id}"
        if r.partition_id not in current.partitions:
            return ProblemKind.UNKNOWN_PARTITION, f"unknown partition {current.name}-{r.partition_id}"
        b = self.topics.builder(r.topic_id)
        assert b is not None
        b.partitions[r.partition_id] = b.partitions[r.partition_id].merge(r)
        return None

    def replay_remove_topic_record(self, r: Any, offset: int) -> _Outcome:
        name = self.topics.remove(r.topic_id)
        if name is None:
            return ProblemKind.UNKNOWN_TOPIC, f"removal of unknown topic ID {r.topic_id}"
        # As KRaft: a topic's configs go with it; so does its mirror membership.
        self.configs.clear(ConfigResource(int(ConfigResourceType.TOPIC), name))
        if self.mirrors.membership(r.topic_id) is not None:
            self.mirrors.set_membership(r.topic_id, None, offset)
        self.mirrors.drop_impact(r.topic_id)
        return None

    def replay_config_record(self, r: Any, offset: int) -> _Outcome:
        if r.resource_type == _CLUSTER_MIRROR:
            if not r.resource_name:
                return ProblemKind.INVALID_RECORD, "cluster mirror config with an empty mirror name"
            self.mirrors.set_config(r.resource_name, r.name, r.value, offset)
        else:
            self.configs.set(ConfigResource(r.resource_type, r.resource_name), r.name, r.value)
        return None

    def replay_mirror_topic_state_change_record(self, r: Any, offset: int) -> _Outcome:
        tid = r.topic_id
        if self.topics.view(tid) is None:
            return ProblemKind.UNKNOWN_TOPIC, f"mirror state change for unknown topic ID {tid}"
        if not r.mirror_name:  # null (or the prototype's blank) detaches the topic from its mirror
            if self.mirrors.membership(tid) is not None:
                self.mirrors.set_membership(tid, None, offset)
            return None
        try:
            desired = DesiredState(r.desired_state)
        except ValueError:
            return ProblemKind.INVALID_RECORD, f"invalid DesiredState {r.desired_state} for topic ID {tid}"
        if not self.mirrors.exists(r.mirror_name):
            return ProblemKind.UNKNOWN_MIRROR, f"topic ID {tid} attached to unknown cluster mirror {r.mirror_name!r}"
        cut = None
        if desired is DesiredState.STOP and r.cut_timestamp >= 0:
            cut = TopicCut(r.cut_timestamp, tuple(sorted((c.partition_index, c.cut_offset) for c in r.cut_partitions)))
        self.mirrors.set_membership(tid, MirrorTopic(tid, r.mirror_name, desired, offset, cut), offset)
        return None

    def replay_mirror_failover_impact_record(self, r: Any, offset: int) -> _Outcome:
        # A prediction only: no membership or desired state changes here.
        if not self.mirrors.exists(r.mirror_name):
            return ProblemKind.UNKNOWN_MIRROR, f"failover impact for unknown cluster mirror {r.mirror_name!r}"
        unknown = [str(t.topic_id) for t in r.topics if self.topics.view(t.topic_id) is None]
        if unknown:
            return ProblemKind.UNKNOWN_TOPIC, f"failover impact for unknown topic ID(s) {', '.join(unknown)}"
        for pred in predictions(r, offset):
            self.mirrors.impacts[pred.topic_id] = pred
        return None

    def replay_access_control_entry_record(self, r: Any, offset: int) -> _Outcome:
        self.acls.changes[r.id] = StandardAcl(
            r.resource_type, r.resource_name, r.pattern_type, r.principal, r.host, r.operation, r.permission_type
        )
        return None

    def replay_remove_access_control_entry_record(self, r: Any, offset: int) -> _Outcome:
        if not self.acls.exists(r.id):
            return ProblemKind.UNKNOWN_ACL, f"removal of unknown ACL ID {r.id}"
        self.acls.changes[r.id] = None
        return None

    def replay_cluster_mirror_controller_record(self, r: Any, offset: int) -> _Outcome:
        self.control.controller = ActiveController(r.controller_id, r.endpoint, r.epoch)
        return None

    def replay_cluster_mirror_request_record(self, r: Any, offset: int) -> _Outcome:
        self.control.requests.append((r.request_id, AppliedRequest(r.api_key, r.api_version, bytes(r.response))))
        return None

    def _provenance_only(self, r: Any, offset: int) -> _Outcome:
        # Not coordinator state; transactions are the Replayer's business (it buffers them).
        return None

    replay_feature_level_record = _provenance_only
    replay_zk_migration_state_record = _provenance_only
    replay_no_op_record = _provenance_only
    replay_begin_transaction_record = _provenance_only
    replay_end_transaction_record = _provenance_only
    replay_abort_transaction_record = _provenance_only
    # Kafka's cluster records (brokers, controllers, SCRAM users, delegation tokens, quotas,
    # producer-ID blocks, ELR): a KRaft log may hold them, the mirror image has no part for them.
    replay_register_broker_record = _provenance_only
    replay_unregister_broker_record = _provenance_only
    replay_fence_broker_record = _provenance_only
    replay_unfence_broker_record = _provenance_only
    replay_broker_registration_change_record = _provenance_only
    replay_register_controller_record = _provenance_only
    replay_user_scram_credential_record = _provenance_only
    replay_remove_user_scram_credential_record = _provenance_only
    replay_delegation_token_record = _provenance_only
    replay_remove_delegation_token_record = _provenance_only
    replay_client_quota_record = _provenance_only
    replay_producer_ids_record = _provenance_only
    replay_clear_elr_record = _provenance_only


@lru_cache(maxsize=16)
def _dispatch_table(schemas: SchemaSet) -> _Dispatch:
    by_api_key: dict[int, tuple[str, Callable[..., _Outcome] | None]] = {}
    by_type: dict[type, Callable[..., _Outcome]] = {}
    by_name: dict[str, Callable[..., _Outcome] | None] = {}
    for spec in schemas.specs.values():
        if spec.type != "metadata" or spec.api_key is None:
            continue
        handler = getattr(MetadataDelta, "replay_" + snake_case(spec.name), None)
        by_api_key[spec.api_key] = (spec.name, handler)
        by_name[spec.name] = handler
        if handler is not None:
            by_type[schemas.struct(spec.name)] = handler
    return _Dispatch(by_api_key, by_type, by_name, MetadataRecordSerde(schemas), {})


# ---------------------------------------------------------------------------------- replayer


class Replayer:
    """Replays a metadata log into images, as KRaft's loader does for its publishers.

    Records between ``BeginTransactionRecord`` and ``EndTransactionRecord`` are held back and
    applied together at the end; an ``AbortTransactionRecord`` drops them. ``publish()`` hands
    out ``(delta, image)`` (what ``local_changes`` needs) and starts a new delta on that image.
    """

    def __init__(self, image: MetadataImage = EMPTY_IMAGE, schemas: SchemaSet | None = None) -> None:
        self.schemas = schemas or default_schemas()
        self.delta = MetadataDelta(image, self.schemas)
        self.problems: list[ReplayProblem] = []
        self._pending: list[tuple[int, int, Record | ReplayProblem]] | None = None
        self._begin_offset = -1

    @property
    def in_transaction(self) -> bool:
        return self._pending is not None

    def replay(self, record: Record, offset: int, epoch: int = 0) -> ReplayProblem | None:
        message = record.message if isinstance(record, ApiMessageAndVersion) else record
        name = type(message).__name__
        if name == "BeginTransactionRecord":
            if self._pending is not None:
                return self._note(self.delta.report(offset, epoch, ProblemKind.INVALID_RECORD,
                                  f"BeginTransactionRecord inside the transaction begun at offset {self._begin_offset}"))
            self._pending, self._begin_offset = [], offset
            return None
        if name == "AbortTransactionRecord" and self._pending is not None:
            self._pending = None
            return self._note(self.delta.replay(record, offset, epoch))
        if name == "EndTransactionRecord" and self._pending is not None:
            pending, self._pending = self._pending, None
            for p_offset, p_epoch, item in pending:
                if isinstance(item, ReplayProblem):
                    self._note(self.delta.report(p_offset, p_epoch, item.kind, item.message))
                else:
                    self._note(self.delta.replay(item, p_offset, p_epoch))
            return self._note(self.delta.replay(record, offset, epoch))
        if self._pending is not None:
            self._pending.append((offset, epoch, record))
            return None
        return self._note(self.delta.replay(record, offset, epoch))

    def replay_framed(self, data: bytes, offset: int, epoch: int = 0) -> ReplayProblem | None:
        if self._pending is None:
            return self._note(self.delta.replay_framed(data, offset, epoch))
        try:
            amv = self.delta._dispatch.serde.decode(data)
        except FrameError as e:
            return self.report(offset, epoch, *self.delta.classify_frame_error(data, e))
        return self.replay(amv, offset, epoch)

    def report(self, offset: int, epoch: int, kind: ProblemKind, message: str) -> ReplayProblem | None:
        """Quarantines a record the caller could not read (inside a transaction, in order)."""
        if self._pending is not None:
            self._pending.append((offset, epoch, ReplayProblem(offset, kind, message)))
            return None
        return self._note(self.delta.report(offset, epoch, kind, message))

    def image(self) -> MetadataImage:
        """The image of everything committed so far (an open transaction is not in it)."""
        return self.delta.apply()

    def publish(self) -> tuple[MetadataDelta, MetadataImage]:
        delta = self.delta
        image = delta.apply()
        self.delta = MetadataDelta(image, self.schemas)
        return delta, image

    def _note(self, problem: ReplayProblem | None) -> ReplayProblem | None:
        if problem is not None:
            self.problems.append(problem)
        return problem


LogEntry = Union[tuple[int, Union[Record, bytes]], tuple[int, int, Union[Record, bytes]]]


def replay_log(
    entries: Iterable[LogEntry], image: MetadataImage = EMPTY_IMAGE, schemas: SchemaSet | None = None
) -> tuple[MetadataImage, tuple[ReplayProblem, ...]]:
    """Replays ``(offset, record)`` or ``(offset, epoch, record)`` entries; a record may be framed bytes."""
    r = Replayer(image, schemas)
    for entry in entries:
        if len(entry) == 2:
            offset, item = entry  # type: ignore[misc]
            epoch = 0
        else:
            offset, epoch, item = entry  # type: ignore[misc]
        if isinstance(item, (bytes, bytearray, memoryview)):
            r.replay_framed(bytes(item), offset, epoch)
        else:
            r.replay(item, offset, epoch)
    return r.image(), tuple(r.problems)


class SnapshotError(ValueError):
    def __init__(self, problems: list[ReplayProblem]) -> None:
        super().__init__("snapshot does not replay cleanly: " + "; ".join(f"{p.kind.value}: {p.message}" for p in problems[:5]))
        self.problems = problems


def load_snapshot(
    records: Iterable[Record], provenance: MetadataProvenance, schemas: SchemaSet | None = None
) -> MetadataImage:
    """Replays a snapshot (``MetadataImage.to_records()``) into an empty image at ``provenance``."""
    delta = MetadataDelta(EMPTY_IMAGE, schemas)
    at = max(provenance.offset, 0)  # every record of a snapshot sits at the snapshot's offset
    for record in records:
        delta.replay(record, at, provenance.epoch)
    if delta.problems:
        raise SnapshotError(delta.problems)
    delta.offset, delta.epoch = provenance  # an empty snapshot still has its provenance
    return delta.apply()
