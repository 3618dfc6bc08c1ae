"""The ``__mirror_state`` codec: its records' keys and values, their partitioning and the state-write
fence. Pure of Faust, so readers of ``__mirror_state`` (the controller, describe) import no Faust;
the Faust table that writes it is ``streams.state.mirror_state``.

**Encoding.** ``__mirror_state`` holds Kafka coordinator records, as ``__consumer_offsets``
does, built from the project's schemas:

- key   = int16 record type (the key schema's apiKey) + the key body at version 0:
  type 2 ``MirrorPartitionStateKey``, type 1 ``LastMirrorEpochsKey``, type 3
  ``MirrorFailoverImpactKey`` (a stop's prediction and outcome, issue #26);
- value = int16 value version + the value body (``MirrorPartitionStateValue`` /
  ``LastMirrorEpochsValue`` / ``MirrorFailoverImpactValue``); a null value is a tombstone.

``kafka-records decode --type MirrorPartitionStateKey --version 0 HEX`` reads a key once its
2-byte type is dropped, and the value likewise (``decode_changelog_record`` does both).

**Partitioning.** A mirror partition's ``__mirror_state`` partition (and its desired-state
topic partition, and so the RocksDB partition that holds it) is::

    toPositive(murmur2(MirrorPartitionStateKey v0 body)) % mirror.state.topic.num.partitions

Kafka's default partitioner over the key body (not the type prefix), so the state, the
last mirror epoch and the failover impact of one mirror partition always share a partition.

**Fencing.** ``check_state_write`` is pure: a write with a leader epoch below the stored one
is FENCED_LEADER_EPOCH; one whose state epoch is not above the stored one is
FENCED_STATE_EPOCH (each writer reads N and writes N + 1; of two writers that read N only
the first lands). That rule reads the writer's own copy; the broker holds the one a stale owner
cannot dodge: each table partition is written in transactions of its own producer, which a new
owner's InitProducerId fences (``streams.worker.state_producers``), and every reader reads
``read_committed``.
"""

from __future__ import annotations

import enum
import struct
import uuid
from typing import Any, NamedTuple

import msgspec
from aiokafka.admin import NewTopic
from aiokafka.partitioner import murmur2

from coordinator.states import ErrorCode
from records.registry import SchemaSet, default_schemas
from streams.config import WorkerConfig

_INT16 = struct.Struct(">h")
KEY_VERSION = 0
VALUE_VERSION = 0
FENCED_STATE_EPOCH = 124  # Kafka's Errors.FENCED_STATE_EPOCH (KIP-932); not in coordinator.states yet


class RecordType(enum.IntEnum):
    """The int16 prefix of a ``__mirror_state`` key: the key schema's apiKey."""

    LAST_MIRROR_EPOCHS = 1
    MIRROR_PARTITION_STATE = 2
    MIRROR_FAILOVER_IMPACT = 3


_KEY_SCHEMA = {RecordType.LAST_MIRROR_EPOCHS: "LastMirrorEpochsKey", RecordType.MIRROR_PARTITION_STATE: "MirrorPartitionStateKey",
               RecordType.MIRROR_FAILOVER_IMPACT: "MirrorFailoverImpactKey"}
_VALUE_SCHEMA = {
    RecordType.LAST_MIRROR_EPOCHS: "LastMirrorEpochsValue",
    RecordType.MIRROR_PARTITION_STATE: "MirrorPartitionStateValue",
    RecordType.MIRROR_FAILOVER_IMPACT: "MirrorFailoverImpactValue",
}


class MirrorStateError(ValueError):
    pass


class ChangelogRecord(NamedTuple):
    type: RecordType
    key: msgspec.Struct
    value: msgspec.Struct | None  # None: tombstone


_TYPE_PREFIX = {t: _INT16.pack(t) for t in RecordType}


def retyped_key(state_key: bytes, rtype: RecordType) -> bytes:
    """The key of record type ``rtype`` of the partition whose MirrorPartitionState key is
    ``state_key``: the three key schemas have the same fields, so the same body after the type
    (a changelog write of a stop takes its LME and impact keys from the state's, made once)."""
    return _TYPE_PREFIX[rtype] + state_key[2:]


class MirrorStateCodec:
    """Encodes and decodes ``__mirror_state`` keys and values with the project's schemas."""

    def __init__(self, schemas: SchemaSet | None = None) -> None:
        self.schemas = schemas or default_schemas()
        self.state_key_cls = self.schemas.struct("MirrorPartitionStateKey")
        self.lme_key_cls = self.schemas.struct("LastMirrorEpochsKey")
        self.state_value_cls = self.schemas.struct("MirrorPartitionStateValue")
        self.lme_value_cls = self.schemas.struct("LastMirrorEpochsValue")

    def key_body(self, mirror_name: str, topic_id: uuid.UUID, partition: int) -> bytes:
        return self.schemas.encode(self.state_key_cls(mirror_name=mirror_name, topic_id=topic_id, partition=partition), KEY_VERSION)

    def state_key(self, mirror_name: str, topic_id: uuid.UUID, partition: int) -> bytes:
        return _INT16.pack(RecordType.MIRROR_PARTITION_STATE) + self.key_body(mirror_name, topic_id, partition)

    def lme_key(self, mirror_name: str, topic_id: uuid.UUID, partition: int) -> bytes:
        # LastMirrorEpochsKey has the same fields as MirrorPartitionStateKey, so the same body.
        body = self.schemas.encode(self.lme_key_cls(mirror_name=mirror_name, topic_id=topic_id, partition=partition), KEY_VERSION)
        return _INT16.pack(RecordType.LAST_MIRROR_EPOCHS) + body

    def impact_key(self, mirror_name: str, topic_id: uuid.UUID, partition: int) -> bytes:
        # The same body again: the impact lands in the state's partition.
        return _INT16.pack(RecordType.MIRROR_FAILOVER_IMPACT) + self.key_body(mirror_name, topic_id, partition)

    def state_value(self, **fields: Any) -> msgspec.Struct:
        return self.state_value_cls(**fields)

    def lme_value(self, last_mirror_epoch: int, applied_offset: int = -1) -> msgspec.Struct:
        return self.lme_value_cls(last_mirror_epoch=last_mirror_epoch, applied_offset=applied_offset)

    def encode_value(self, value: msgspec.Struct) -> bytes:
        return _INT16.pack(VALUE_VERSION) + self.schemas.encode(value, VALUE_VERSION)

    def decode_key(self, key: bytes) -> tuple[RecordType, msgspec.Struct]:
        if len(key) < 2:
            raise MirrorStateError(f"__mirror_state key of {len(key)} bytes has no record type")
        (raw_type,) = _INT16.unpack_from(key)
        try:
            rtype = RecordType(raw_type)
        except ValueError:
            raise MirrorStateError(f"unknown __mirror_state record type {raw_type}") from None
        return rtype, self.schemas.decode(_KEY_SCHEMA[rtype], key[2:], KEY_VERSION)

    def decode_value(self, rtype: RecordType, value: bytes) -> msgspec.Struct:
        if len(value) < 2:
            raise MirrorStateError(f"__mirror_state value of {len(value)} bytes has no version")
        (version,) = _INT16.unpack_from(value)
        return self.schemas.decode(_VALUE_SCHEMA[rtype], value[2:], version)

    def decode(self, key: bytes, value: bytes | None) -> ChangelogRecord:
        rtype, k = self.decode_key(key)
        return ChangelogRecord(rtype, k, None if value is None else self.decode_value(rtype, value))


_default_codec: MirrorStateCodec | None = None


def default_codec() -> MirrorStateCodec:
    global _default_codec
    if _default_codec is None:
        _default_codec = MirrorStateCodec()
    return _default_codec


def decode_changelog_record(key: bytes, value: bytes | None) -> ChangelogRecord:
    return default_codec().decode(key, value)


def applied_offset_of(rtype: RecordType, value: msgspec.Struct) -> int:
    """The metadata offset a value was written for (a failover impact: its prediction's record)."""
    if rtype == RecordType.MIRROR_FAILOVER_IMPACT:
        return value.metadata_offset  # type: ignore[attr-defined, no-any-return]
    return value.applied_offset  # type: ignore[attr-defined, no-any-return]


# ---------------------------------------------------------------------------------- partitioning


def partition_for_body(key_body: bytes, num_partitions: int) -> int:
    """Kafka's default partitioner: toPositive(murmur2(bytes)) % n."""
    return (murmur2(key_body) & 0x7FFFFFFF) % num_partitions


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition of an encoded ``__mirror_state`` key (either record type)."""
    return partition_for_body(key[2:], num_partitions)


def partition_for(mirror_name: str, topic_id: uuid.UUID, partition: int, num_partitions: int) -> int:
    return partition_for_body(default_codec().key_body(mirror_name, topic_id, partition), num_partitions)


# ---------------------------------------------------------------------------------------- fencing


class StateFence(NamedTuple):
    """Why a state write was refused."""

    error_code: int
    message: str


def check_state_write(stored: msgspec.Struct | None, proposed: msgspec.Struct) -> StateFence | None:
    """None if ``proposed`` (a MirrorPartitionStateValue) may replace ``stored``; else the fence.

    Pure, so the core can adopt it (``coordinator.partition_state.check_write`` applies the
    same rule to its own state type).
    """
    if stored is None:
        return None
    if proposed.leader_epoch < stored.leader_epoch:  # type: ignore[attr-defined]
        return StateFence(
            ErrorCode.FENCED_LEADER_EPOCH,
            f"leader epoch {proposed.leader_epoch} is older than the stored {stored.leader_epoch}",  # type: ignore[attr-defined]
        )
    if proposed.state_epoch <= stored.state_epoch:  # type: ignore[attr-defined]
        return StateFence(
            FENCED_STATE_EPOCH,
            f"state epoch {proposed.state_epoch} is not above the stored {stored.state_epoch}",  # type: ignore[attr-defined]
        )
    return None


class StateWriteFencedError(Exception):
    def __init__(self, fence: StateFence) -> None:
        super().__init__(fence.message)
        self.fence = fence

    @property
    def error_code(self) -> int:
        return self.fence.error_code


def mirror_state_topic_spec(config: WorkerConfig) -> NewTopic:
    return NewTopic(
        config.mirror_state_topic_name, config.state_partitions, config.replication_factor,
        topic_configs={"cleanup.policy": "compact"},
    )  # fmt: skip


def desired_state_topic_spec(config: WorkerConfig) -> NewTopic:
    return NewTopic(config.desired_state_topic_name, config.state_partitions, config.replication_factor)
