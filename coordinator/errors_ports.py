"""Typed port errors: what a source or destination port raises (not the KIP admin error codes).

Re-exported by coordinator.ports. Each error carries named fields so it can travel over the
model server and be re-raised as the same class on the client.
"""

from __future__ import annotations

import typing
import uuid
from collections.abc import Mapping
from typing import Any, ClassVar

import msgspec

from .port_types import TopicPartition
# ---------------------------------------------------------------------------------------------
# Typed port errors. They carry named fields so they can travel over the model server and be
# re-raised as the same class on the client (see ``PortError.to_fields``/``from_fields``).
# ---------------------------------------------------------------------------------------------


class PortError(Exception):
    """Base of every error a port raises; ``retriable`` says whether a retry may succeed."""

    retriable: ClassVar[bool] = False
    field_names: ClassVar[tuple[str, ...]] = ()

    def to_fields(self) -> dict[str, Any]:
        """The constructor arguments, for transport."""
        return {name: getattr(self, name) for name in self.field_names}

    @classmethod
    def from_fields(cls, fields: Mapping[str, Any]) -> PortError:
        """Rebuild the error from transported fields, converting them back to their declared types."""
        hints = typing.get_type_hints(cls.__init__)
        kwargs = {
            name: msgspec.convert(fields.get(name), hints[name], strict=False)
            for name in cls.field_names
        }
        return cls(**kwargs)


class OffsetOutOfRange(PortError):
    """The fetch offset is below the log start or above the LEO."""

    field_names = ("topic_partition", "offset", "log_start", "leo")

    def __init__(self, topic_partition: TopicPartition, offset: int, log_start: int, leo: int) -> None:
        super().__init__(f"offset {offset} out of range [{log_start}, {leo}] for {topic_partition}")
        self.topic_partition = topic_partition
        self.offset = offset
        self.log_start = log_start
        self.leo = leo


class NotLeader(PortError):
    """The partition has no leader (offline) or leadership moved; refresh metadata and retry."""

    retriable = True
    field_names = ("topic_partition", "leader", "leader_epoch")

    def __init__(self, topic_partition: TopicPartition, leader: int, leader_epoch: int) -> None:
        super().__init__(f"no leader for {topic_partition} (leader {leader}, epoch {leader_epoch})")
        self.topic_partition = topic_partition
        self.leader = leader
        self.leader_epoch = leader_epoch


class FencedLeaderEpoch(PortError):
    """The request's current leader epoch is older than the partition's: refresh metadata."""

    retriable = True
    field_names = ("topic_partition", "request_epoch", "leader_epoch")

    def __init__(self, topic_partition: TopicPartition, request_epoch: int, leader_epoch: int) -> None:
        super().__init__(f"fenced leader epoch {request_epoch} < {leader_epoch} for {topic_partition}")
        self.topic_partition = topic_partition
        self.request_epoch = request_epoch
        self.leader_epoch = leader_epoch


class UnknownLeaderEpoch(PortError):
    """The request's current leader epoch is newer than the partition's (stale broker view)."""

    retriable = True
    field_names = ("topic_partition", "request_epoch", "leader_epoch")

    def __init__(self, topic_partition: TopicPartition, request_epoch: int, leader_epoch: int) -> None:
        super().__init__(f"unknown leader epoch {request_epoch} > {leader_epoch} for {topic_partition}")
        self.topic_partition = topic_partition
        self.request_epoch = request_epoch
        self.leader_epoch = leader_epoch


class UnknownTopicId(PortError):
    """No topic has this ID (or the partition index does not exist; ``partition`` is then set)."""

    field_names = ("topic_id", "partition")

    def __init__(self, topic_id: uuid.UUID, partition: int | None = None) -> None:
        where = f"{topic_id}" if partition is None else f"{topic_id}-{partition}"
        super().__init__(f"unknown topic id {where}")
        self.topic_id = topic_id
        self.partition = partition


class SourceUnavailable(PortError):
    """The cluster cannot be reached (down, or flapping); raised for any role, retriable."""

    retriable = True
    field_names = ("cluster", "reason")

    def __init__(self, cluster: str, reason: str) -> None:
        super().__init__(f"cluster {cluster} unavailable: {reason}")
        self.cluster = cluster
        self.reason = reason


class ReadOnlyTopic(PortError):
    """A producer wrote to a mirror topic that is not STOPPED (KIP-1279 READ_ONLY_TOPIC, code 134)."""

    field_names = ("topic_id",)

    def __init__(self, topic_id: uuid.UUID) -> None:
        super().__init__(f"topic {topic_id} is a read-only mirror topic")
        self.topic_id = topic_id


class UnexpectedAppendOffset(PortError):
    """A mirror append's batches start below the LEO or overlap each other (offsets must increase), or
    the LEO is not the one the append was fetched for."""

    field_names = ("topic_partition", "base_offset", "leo")

    def __init__(self, topic_partition: TopicPartition, base_offset: int, leo: int) -> None:
        super().__init__(f"append at {base_offset} where the LEO is {leo} for {topic_partition}")
        self.topic_partition = topic_partition
        self.base_offset = base_offset
        self.leo = leo


class TopicAlreadyExists(PortError):
    """A topic with this name or topic ID already exists."""

    field_names = ("name", "topic_id")

    def __init__(self, name: str, topic_id: uuid.UUID) -> None:
        super().__init__(f"topic {name} ({topic_id}) already exists")
        self.name = name
        self.topic_id = topic_id


class GroupNotEmpty(PortError):
    """Offsets were written to a group that has active members (offset sync must skip it)."""

    field_names = ("group_id",)

    def __init__(self, group_id: str) -> None:
        super().__init__(f"group {group_id} has active members")
        self.group_id = group_id


class InvalidRequest(PortError):
    """The request itself is malformed (bad arguments, unknown method on the model server)."""

    field_names = ("reason",)

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class FencedOwnerEpoch(PortError):
    """A mutating call's owner epoch is below the highest the cluster has seen for its scope: a
    newer owner took the work over (``coordinator.fencing``). Never retried: the caller is not the
    owner any more, so it drops the step."""

    field_names = ("scope", "request_epoch", "owner_epoch")
    error_code: ClassVar[int] = 1279  # ErrorCode.OWNER_EPOCH_FENCED: ours, not Kafka's

    def __init__(self, scope: str, request_epoch: int, owner_epoch: int) -> None:
        super().__init__(f"owner epoch {request_epoch} of {scope} is fenced: a newer owner holds epoch {owner_epoch}")
        self.scope = scope
        self.request_epoch = request_epoch
        self.owner_epoch = owner_epoch


PORT_ERRORS: dict[str, type[PortError]] = {
    cls.__name__: cls
    for cls in (
        PortError,
        OffsetOutOfRange,
        NotLeader,
        FencedLeaderEpoch,
        UnknownLeaderEpoch,
        UnknownTopicId,
        SourceUnavailable,
        ReadOnlyTopic,
        UnexpectedAppendOffset,
        TopicAlreadyExists,
        GroupNotEmpty,
        InvalidRequest,
        FencedOwnerEpoch,
    )
}
