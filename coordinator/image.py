"""The metadata image: an immutable view of the metadata log up to an offset.

As Kafka's ``image/`` package, the image is split per domain, each sub-image immutable with an
``EMPTY`` value:

- ``TopicsImage``: topics by ID and name, with their partitions (replicas, ISR, leader, leader
  epoch, partition epoch);
- ``ConfigsImage``: configs of every resource except cluster mirrors (topics, brokers, ...);
- ``MirrorsImage``: cluster mirrors with their configs, and the mirror membership and desired
  state of each mirror topic (``MirrorTopicStateChangeRecord``);
- ``AclsImage``: every ACL by ID, ClusterMirror ACLs included.

How cluster mirrors are recorded (KIP-1279 prototype, ``ConfigurationControlManager``):

- A mirror *is* its configs: ``ConfigRecord``s with ``ResourceType`` 64
  (``ConfigResource.Type.CLUSTER_MIRROR``, thread RS14) and ``ResourceName`` = mirror name.
  It exists while it has at least one config key; create writes one record per key.
- Delete writes a null ``Value`` for every key. When the last key goes, the mirror is gone and
  any topic still attached to it is detached (the controller detaches them first; the
  cascade only keeps the image consistent if a log skipped that step).
- A topic's membership is set by ``MirrorTopicStateChangeRecord``; a null ``MirrorName``
  detaches it (the controller writes DesiredState 1 = STOP there, ignored on replay; the
  prototype's blank name is read the same way).
- A stop's prediction is a ``MirrorFailoverImpactRecord`` (``coordinator.impact_record``): the
  image keeps each topic's latest (``MirrorsImage.impacts``) until the topic is started, paused,
  detached or removed; it changes no mirror state.
- The control plane (``ControlImage``, issue #36): the active controller, from the latest
  ``ClusterMirrorControllerRecord``, and the answers of the latest admin requests that carried
  a request ID (``ClusterMirrorRequestRecord``), so a retry is answered, not applied again.
- ClusterMirror ACLs are ``AccessControlEntryRecord``s with ``ResourceType`` 8 (Kafka's ACL
  resource types end at USER = 7; 8 is the first unused one).

Mappings in an image are read-only proxies over dicts that no one mutates; a delta copies a
dict only when it writes to it, so every part that did not change is shared with the previous
image. ``to_records()`` writes an image back as records: the snapshot.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

import msgspec

from coordinator.impact_record import TopicPrediction, snapshot_record
from coordinator.states import DesiredState
from records.framing import ApiMessageAndVersion
from records.registry import SchemaSet, default_schemas

_EMPTY_MAP: Mapping[Any, Any] = MappingProxyType({})


def frozen_map(d: dict[Any, Any]) -> Mapping[Any, Any]:
    """A read-only view of ``d``; the caller hands over ownership of the dict."""
    return MappingProxyType(d) if d else _EMPTY_MAP


class ConfigResourceType(enum.IntEnum):
    """``ConfigRecord.ResourceType`` (Kafka's ``ConfigResource.Type``, plus CLUSTER_MIRROR)."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32
    CLUSTER_MIRROR = 64  # KIP-1279 prototype and thread RS14


class AclResourceType(enum.IntEnum):
    """``AccessControlEntryRecord.ResourceType`` (Kafka's ``ResourceType``, plus CLUSTER_MIRROR)."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7
    CLUSTER_MIRROR = 8  # our choice: the first byte Kafka does not use


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class MetadataProvenance(NamedTuple):
    """The offset and epoch of the last record applied to an image (-1, -1 for none)."""

    offset: int
    epoch: int


EMPTY_PROVENANCE = MetadataProvenance(-1, -1)
NO_LEADER_CHANGE = -2  # PartitionChangeRecord.Leader: the leader did not change


class ConfigResource(NamedTuple):
    type: int
    name: str


# --------------------------------------------------------------------------------- topics


class PartitionRegistration(msgspec.Struct, frozen=True, gc=False):
    """A partition as the controller registered it (Kafka's ``PartitionRegistration``)."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader_recovery_state: int = 0
    directories: tuple[uuid.UUID, ...] = ()
    elr: tuple[int, ...] | None = None
    last_known_elr: tuple[int, ...] | None = None

    def merge(self, r: Any) -> "PartitionRegistration":
        """Applies a ``PartitionChangeRecord`` as KRaft does: a leader change (even to the same
        leader, which is how an epoch is bumped) bumps the leader epoch; any change bumps the
        partition epoch. Null fields, -2 (leader) and -1 (recovery state) mean unchanged."""
        if r.leader == NO_LEADER_CHANGE:
            leader, leader_epoch = self.leader, self.leader_epoch
        else:
            leader, leader_epoch = r.leader, self.leader_epoch + 1
        if r.directories is not None:
            directories = r.directories
        else:  # new replicas without directories: unknown until the brokers report them
            directories = self.directories if r.replicas is None else ()
        return PartitionRegistration(
            self.replicas if r.replicas is None else r.replicas,
            self.isr if r.isr is None else r.isr,
            leader,
            leader_epoch,
            self.partition_epoch + 1,
            self.removing_replicas if r.removing_replicas is None else r.removing_replicas,
            self.adding_replicas if r.adding_replicas is None else r.adding_replicas,
            self.leader_recovery_state if r.leader_recovery_state == -1 else r.leader_recovery_state,
            directories,
            self.elr if r.eligible_leader_replicas is None else r.eligible_leader_replicas,
            self.last_known_elr if r.last_known_elr is None else r.last_known_elr,
        )


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: Mapping[int, PartitionRegistration] = field(default_factory=lambda: _EMPTY_MAP)


@dataclass(frozen=True, slots=True)
class TopicsImage:
    by_id: Mapping[uuid.UUID, TopicImage] = field(default_factory=lambda: _EMPTY_MAP)
    by_name: Mapping[str, uuid.UUID] = field(default_factory=lambda: _EMPTY_MAP)

    def get(self, topic_id: uuid.UUID) -> TopicImage | None:
        return self.by_id.get(topic_id)

    def get_by_name(self, name: str) -> TopicImage | None:
        tid = self.by_name.get(name)
        return None if tid is None else self.by_id[tid]

    def __len__(self) -> int:
        return len(self.by_id)


TopicsImage.EMPTY = TopicsImage()  # type: ignore[attr-defined]


# -------------------------------------------------------------------------------- configs


@dataclass(frozen=True, slots=True)
class ConfigsImage:
    """Configs per resource, except CLUSTER_MIRROR resources (those live in ``MirrorsImage``)."""

    resources: Mapping[ConfigResource, Mapping[str, str]] = field(default_factory=lambda: _EMPTY_MAP)

    def get(self, resource_type: int, name: str) -> Mapping[str, str]:
        return self.resources.get(ConfigResource(resource_type, name), _EMPTY_MAP)

    def topic_configs(self, topic_name: str) -> Mapping[str, str]:
        return self.get(ConfigResourceType.TOPIC, topic_name)


ConfigsImage.EMPTY = ConfigsImage()  # type: ignore[attr-defined]


# -------------------------------------------------------------------------------- mirrors


@dataclass(frozen=True, slots=True)
class ClusterMirrorImage:
    name: str
    configs: Mapping[str, str]

    @property
    def source_bootstrap(self) -> str:
        return self.configs.get("bootstrap.servers", "")


class TopicCut(msgspec.Struct, frozen=True, gc=False):
    """A ``--consistent-cut`` stop's cut of one topic: T and each partition's cut offset."""

    timestamp: int
    offsets: tuple[tuple[int, int], ...]  # (partition, cut offset), by partition

    def offset_of(self, partition: int) -> int | None:
        return next((o for p, o in self.offsets if p == partition), None)


@dataclass(frozen=True, slots=True)
class MirrorTopic:
    """A topic's mirror membership: which mirror, and what the operator last asked for it.

    ``last_change_offset`` is the metadata offset of the record that set it; the controller
    compares it with a request's StateValidationOffset. A snapshot cannot keep it (replaying a
    snapshot stamps the snapshot's offset), so it does not take part in equality.
    """

    topic_id: uuid.UUID
    mirror_name: str
    desired_state: DesiredState
    last_change_offset: int = field(default=-1, compare=False)
    cut: TopicCut | None = None  # a stop with --consistent-cut


@dataclass(frozen=True, slots=True)
class MirrorsImage:
    mirrors: Mapping[str, ClusterMirrorImage] = field(default_factory=lambda: _EMPTY_MAP)
    topics: Mapping[uuid.UUID, MirrorTopic] = field(default_factory=lambda: _EMPTY_MAP)
    impacts: Mapping[uuid.UUID, TopicPrediction] = field(default_factory=lambda: _EMPTY_MAP)  # latest stop's prediction

    def get(self, name: str) -> ClusterMirrorImage | None:
        return self.mirrors.get(name)

    def topics_of(self, mirror_name: str) -> list[MirrorTopic]:
        """The member topics of a mirror, in membership order."""
        return [m for m in self.topics.values() if m.mirror_name == mirror_name]


MirrorsImage.EMPTY = MirrorsImage()  # type: ignore[attr-defined]


# ----------------------------------------------------------------------------------- acls


class StandardAcl(msgspec.Struct, frozen=True, gc=False):
    """One access control entry, as ``AccessControlEntryRecord`` holds it (enum bytes)."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


@dataclass(frozen=True, slots=True)
class AclsImage:
    acls: Mapping[uuid.UUID, StandardAcl] = field(default_factory=lambda: _EMPTY_MAP)

    def cluster_mirror_acls(self) -> Iterator[tuple[uuid.UUID, StandardAcl]]:
        for acl_id, acl in self.acls.items():
            if acl.resource_type == AclResourceType.CLUSTER_MIRROR:
                yield acl_id, acl


AclsImage.EMPTY = AclsImage()  # type: ignore[attr-defined]


# ------------------------------------------------------------------------------- control

MAX_KEPT_REQUESTS = 1000  # request IDs remembered: a client retries for seconds, not for 1,000 requests


class ActiveController(NamedTuple):
    controller_id: str
    endpoint: str  # HOST:PORT
    epoch: int


class AppliedRequest(NamedTuple):
    api_key: int
    api_version: int
    response: bytes  # the response body as first sent


@dataclass(frozen=True, slots=True)
class ControlImage:
    controller: ActiveController | None = None
    requests: Mapping[uuid.UUID, AppliedRequest] = field(default_factory=lambda: _EMPTY_MAP)  # oldest first


ControlImage.EMPTY = ControlImage()  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------- image


@dataclass(frozen=True, slots=True)
class MetadataImage:
    provenance: MetadataProvenance = EMPTY_PROVENANCE
    topics: TopicsImage = field(default_factory=lambda: TopicsImage.EMPTY)  # type: ignore[attr-defined]
    configs: ConfigsImage = field(default_factory=lambda: ConfigsImage.EMPTY)  # type: ignore[attr-defined]
    mirrors: MirrorsImage = field(default_factory=lambda: MirrorsImage.EMPTY)  # type: ignore[attr-defined]
    acls: AclsImage = field(default_factory=lambda: AclsImage.EMPTY)  # type: ignore[attr-defined]
    control: ControlImage = field(default_factory=lambda: ControlImage.EMPTY)  # type: ignore[attr-defined]

    @property
    def offset(self) -> int:
        return self.provenance.offset

    def is_empty(self) -> bool:
        return not (self.topics.by_id or self.configs.resources or self.mirrors.mirrors or self.acls.acls)

    def mirror_topic(self, topic_id: uuid.UUID) -> MirrorTopic | None:
        return self.mirrors.topics.get(topic_id)

    def topic_configs(self, topic_name: str) -> Mapping[str, str]:
        return self.configs.topic_configs(topic_name)

    def to_records(self, schemas: SchemaSet | None = None) -> list[ApiMessageAndVersion]:
        """The image as records, in an order that replays cleanly into an empty delta.

        Topics and their partitions first, then configs, mirrors (configs, then memberships,
        which need both, then the stops' predictions), ACLs, then the control plane (the active
        controller, the kept requests oldest first). Each group is sorted so equal images give equal snapshots.
        """
        return list(_SnapshotWriter(schemas or default_schemas()).write(self))


MetadataImage.EMPTY = MetadataImage()  # type: ignore[attr-defined]
EMPTY_IMAGE = MetadataImage.EMPTY  # type: ignore[attr-defined]


class _SnapshotWriter:
    def __init__(self, schemas: SchemaSet) -> None:
        self.s = schemas
        self.keys = {name: schemas.spec(name).api_key for name in _SNAPSHOT_TYPES}

    def amv(self, name: str, message: msgspec.Struct, version: int = 0) -> ApiMessageAndVersion:
        return ApiMessageAndVersion(message, version, self.keys[name])  # type: ignore[arg-type]

    def write(self, image: MetadataImage) -> Iterator[ApiMessageAndVersion]:
        topic_record = self.s.struct("TopicRecord")
        partition_record = self.s.struct("PartitionRecord")
        config_record = self.s.struct("ConfigRecord")
        state_record = self.s.struct("MirrorTopicStateChangeRecord")
        acl_record = self.s.struct("AccessControlEntryRecord")
        for name in sorted(image.topics.by_name):
            t = image.topics.by_id[image.topics.by_name[name]]
            yield self.amv("TopicRecord", topic_record(name=t.name, topic_id=t.topic_id))
            for p in sorted(t.partitions):
                r = t.partitions[p]
                version = 2 if (r.elr is not None or r.last_known_elr is not None) else 1 if r.directories else 0
                message = partition_record(
                    partition_id=p, topic_id=t.topic_id, replicas=r.replicas, isr=r.isr,
                    removing_replicas=r.removing_replicas, adding_replicas=r.adding_replicas,
                    leader=r.leader, leader_recovery_state=r.leader_recovery_state,
                    leader_epoch=r.leader_epoch, partition_epoch=r.partition_epoch,
                    directories=r.directories, eligible_leader_replicas=r.elr, last_known_elr=r.last_known_elr,
                )
                yield self.amv("PartitionRecord", message, version)
        for res in sorted(image.configs.resources):
            for key, value in sorted(image.configs.resources[res].items()):
                yield self.amv("ConfigRecord", config_record(
                    resource_type=res.type, resource_name=res.name, name=key, value=value))
        for mname in sorted(image.mirrors.mirrors):
            for key, value in sorted(image.mirrors.mirrors[mname].configs.items()):
                yield self.amv("ConfigRecord", config_record(
                    resource_type=ConfigResourceType.CLUSTER_MIRROR, resource_name=mname, name=key, value=value))
        for tid in sorted(image.mirrors.topics, key=lambda u: u.int):
            m = image.mirrors.topics[tid]
            cut: dict[str, Any] = {}
            if m.cut is not None:
                part = self.s.nested("MirrorTopicStateChangeRecord", "CutPartition")
                cut = {"cut_timestamp": m.cut.timestamp,
                       "cut_partitions": [part(partition_index=p, cut_offset=o) for p, o in m.cut.offsets]}
            yield self.amv("MirrorTopicStateChangeRecord", state_record(
                topic_id=tid, mirror_name=m.mirror_name, desired_state=int(m.desired_state), **cut))
        for tid in sorted(image.mirrors.impacts, key=lambda u: u.int):
            yield self.amv("MirrorFailoverImpactRecord", snapshot_record(self.s, image.mirrors.impacts[tid]))
        for acl_id in sorted(image.acls.acls, key=lambda u: u.int):
            a = image.acls.acls[acl_id]
            yield self.amv("AccessControlEntryRecord", acl_record(
                id=acl_id, resource_type=a.resource_type, resource_name=a.resource_name,
                pattern_type=a.pattern_type, principal=a.principal, host=a.host,
                operation=a.operation, permission_type=a.permission_type))
        c = image.control.controller
        if c is not None:
            yield self.amv("ClusterMirrorControllerRecord", self.s.struct("ClusterMirrorControllerRecord")(
                controller_id=c.controller_id, endpoint=c.endpoint, epoch=c.epoch))
        request_record = self.s.struct("ClusterMirrorRequestRecord")
        for rid, r in image.control.requests.items():
            yield self.amv("ClusterMirrorRequestRecord", request_record(
                request_id=rid, api_key=r.api_key, api_version=r.api_version, response=r.response))


_SNAPSHOT_TYPES = (
    "TopicRecord", "PartitionRecord", "ConfigRecord", "MirrorTopicStateChangeRecord", "MirrorFailoverImpactRecord",
    "AccessControlEntryRecord", "ClusterMirrorControllerRecord", "ClusterMirrorRequestRecord",
)
