"""Ports: what the coordinator may ask of a source cluster and of a destination cluster.

The core is synchronous and pure; adapters (the embedded ``clustermodel``, its local server
client, and later real Kafka admin/fetch clients) implement these Protocols.
Vocabulary follows Kafka and KIP-1279:

- LEO: log end offset, the offset the next appended batch gets.
- HW: high watermark, the smallest LEO over the ISR; consumers read below it.
- LSO: last stable offset, ``min(HW, first offset of the oldest open transaction)``;
  ``read_committed`` fetches stop there.
- log start: the first offset still readable (retention and DeleteRecords move it forward).
- leader epoch: bumped on every leader change; every batch carries the epoch it was written in.
  SLE/DLE are the source and destination partition leader epochs (KIP-1279 keeps DLE >= SLE).
- LME: last mirrored epoch, recorded in ``__mirror_state`` when a mirror partition stops;
  failback asks the old source for it and truncates to its end offset.

Mirror appends keep the source's base offsets and batch leader epochs; the destination has
its own partition leader epoch (DLE) and builds its own epoch cache, producer state and
transaction index from what it appends, as a Kafka follower does.
"""


from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from .errors_ports import (
    FencedLeaderEpoch,
    FencedOwnerEpoch,
    GroupNotEmpty,
    InvalidRequest,
    NotLeader,
    OffsetOutOfRange,
    PORT_ERRORS,
    PortError,
    ReadOnlyTopic,
    SourceUnavailable,
    TopicAlreadyExists,
    UnexpectedAppendOffset,
    UnknownLeaderEpoch,
    UnknownTopicId,
)
from .port_types import (
    AbortedTransaction,
    AclBinding,
    Batch,
    ControlType,
    EpochEndOffset,
    FetchResult,
    GroupDescription,
    GroupOffset,
    GroupType,
    IsolationLevel,
    IsrStatus,
    NO_LEADER,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    OpenTransaction,
    PartitionMetadata,
    PartitionOffsets,
    RECORD_BATCH_OVERHEAD,
    ReplicaState,
    TopicMetadata,
    TopicPartition,
    tp_order,
    UNDEFINED_EPOCH,
    UNDEFINED_OFFSET,
)

__all__ = [
    "AbortedTransaction",
    "AclBinding",
    "Batch",
    "ControlType",
    "EpochEndOffset",
    "FencedLeaderEpoch",
    "FetchResult",
    "GroupDescription",
    "GroupNotEmpty",
    "GroupOffset",
    "GroupType",
    "InvalidRequest",
    "FencedOwnerEpoch",
    "IsolationLevel",
    "IsrStatus",
    "NO_LEADER",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NotLeader",
    "OffsetOutOfRange",
    "OpenTransaction",
    "PORT_ERRORS",
    "PartitionMetadata",
    "PartitionOffsets",
    "PortError",
    "RECORD_BATCH_OVERHEAD",
    "ReadOnlyTopic",
    "ReplicaState",
    "SourceUnavailable",
    "TopicAlreadyExists",
    "TopicMetadata",
    "TopicPartition",
    "tp_order",
    "UNDEFINED_EPOCH",
    "UNDEFINED_OFFSET",
    "UnexpectedAppendOffset",
    "UnknownLeaderEpoch",
    "UnknownTopicId",
    "ClusterPort",
    "SourceCluster",
    "DestinationCluster",
    "SOURCE_METHODS",
    "DESTINATION_METHODS",
    "DESTINATION_MUTATIONS",
]

# ---------------------------------------------------------------------------------------------
# The ports.
# ---------------------------------------------------------------------------------------------


@runtime_checkable
class ClusterPort(Protocol):
    """Reads every cluster answers, whether it plays the source or the destination."""

    def cluster_id(self) -> str:
        """The cluster ID (a UUID string in Kafka)."""
        ...

    def describe_topics(self, topic_ids: Sequence[uuid.UUID] | None = None) -> list[TopicMetadata]:
        """Topic metadata (topic ID, partitions, leaders, leader epochs, ISR, configs); all topics if None."""
        ...

    def list_offsets(self, tp: TopicPartition) -> PartitionOffsets:
        """Log start, LSO, HW, LEO and the current leader epoch of a partition."""
        ...

    def fetch(
        self,
        tp: TopicPartition,
        fetch_offset: int,
        max_bytes: int,
        isolation: IsolationLevel = IsolationLevel.READ_COMMITTED,
        current_leader_epoch: int | None = None,
        last_fetched_epoch: int | None = None,
    ) -> FetchResult:
        """Whole batches from ``fetch_offset`` up to ``max_bytes`` (at least one), below the LSO or HW.

        Raises OffsetOutOfRange outside [log start, LEO], FencedLeaderEpoch/UnknownLeaderEpoch when
        ``current_leader_epoch`` is stale/ahead, NotLeader when offline.
        """
        ...

    def end_offset_for_epoch(
        self, tp: TopicPartition, leader_epoch: int, current_leader_epoch: int | None = None
    ) -> EpochEndOffset:
        """OffsetsForLeaderEpoch: the end offset of ``leader_epoch`` (LEO if it is the latest epoch)."""
        ...

    def latest_epoch(self, tp: TopicPartition) -> int:
        """The newest epoch in the leader's epoch cache (UNDEFINED_EPOCH if none): a fetcher's lastFetchedEpoch."""
        ...

    def last_mirrored_epoch(self, mirror_name: str, tp: TopicPartition) -> int | None:
        """The LME this cluster recorded when it stopped mirroring ``tp`` (failback asks the old source)."""
        ...

    def last_mirror_cut(self, mirror_name: str, tp: TopicPartition) -> int | None:
        """Where a ``--consistent-cut`` stop of ``tp`` ended this cluster's mirrored log (None: no cut)."""
        ...

    def list_groups(self) -> list[GroupDescription]:
        """Consumer and share groups, with whether each has active members."""
        ...

    def group_offsets(self, group_id: str) -> list[GroupOffset]:
        """A group's committed offsets, with the leader epochs committed alongside."""
        ...

    def is_group_active(self, group_id: str) -> bool:
        """True when the group has active members (offset sync skips it on the destination)."""
        ...

    def describe_configs(self, topic_id: uuid.UUID) -> dict[str, str]:
        """A topic's explicitly set configs."""
        ...

    def describe_acls(self) -> list[AclBinding]:
        """All ACL bindings of the cluster."""
        ...


@runtime_checkable
class SourceCluster(ClusterPort, Protocol):
    """What the coordinator asks of a source: the reads of ClusterPort (fetch, list offsets, LME, ...)."""


@runtime_checkable
class DestinationCluster(ClusterPort, Protocol):
    """What the coordinator does to a destination: mirror appends, truncation, epochs, markers, syncs."""

    def create_topic(
        self,
        name: str,
        topic_id: uuid.UUID,
        num_partitions: int,
        configs: Mapping[str, str] | None = None,
        replication_factor: int | None = None,
        read_only: bool = True,
        mirror_name: str | None = None,
        mirror_source_cluster_id: str | None = None,
    ) -> TopicMetadata:
        """Create a (mirror) topic with the source's topic ID (KIP-1279 extended CreateTopics)."""
        ...

    def create_partitions(self, topic_id: uuid.UUID, total_count: int) -> TopicMetadata:
        """Grow a topic to ``total_count`` partitions (new source partitions are mirrored too)."""
        ...

    def set_read_only(self, topic_id: uuid.UUID, read_only: bool) -> None:
        """Make a mirror topic read-only to producers, or writable (STOPPED)."""
        ...

    def set_mirror(
        self, topic_id: uuid.UUID, mirror_name: str | None, mirror_source_cluster_id: str | None = None
    ) -> None:
        """Attach the topic to a cluster mirror, or detach it (None)."""
        ...

    def append_mirror_batches(self, tp: TopicPartition, batches: Sequence[Batch], expected_leo: int | None = None) -> int:
        """Append fetched source batches keeping their base offsets and batch leader epochs; returns the LEO.

        Offsets must increase (gaps are kept); a batch below the LEO raises UnexpectedAppendOffset, as
        does an ``expected_leo`` (the LEO the caller fetched for) that is not the LEO: the log moved
        without the caller (a new leader truncated it), and a gap must not be made.
        The epoch cache, producer state and transaction index are built from the batches.
        """
        ...

    def truncate_to(self, tp: TopicPartition, offset: int) -> PartitionOffsets:
        """Remove everything at and above ``offset`` on the leader (no-op if offset >= LEO); ISR follows."""
        ...

    def truncate_fully_and_start_at(self, tp: TopicPartition, offset: int) -> PartitionOffsets:
        """Empty the log and restart it at ``offset`` (after OffsetOutOfRange below the source log start)."""
        ...

    def bump_leader_epoch(self, tp: TopicPartition, min_epoch: int) -> int:
        """Raise the DLE to at least ``min_epoch`` (no-op if already there); returns the leader epoch."""
        ...

    def open_transactions(self, tp: TopicPartition) -> list[OpenTransaction]:
        """Transactions with data and no marker in the log (STOPPING writes ABORT markers for them)."""
        ...

    def append_control_batch(
        self,
        tp: TopicPartition,
        control_type: ControlType,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        source_cluster_id: str | None = None,
    ) -> Batch:
        """Append an ABORT/COMMIT marker or a MIRROR_PID_RESET batch at the LEO with the current DLE.

        Allowed on read-only mirror topics: this is the coordinator's own write during STOPPING.
        """
        ...

    def isr_status(self, tp: TopicPartition) -> IsrStatus:
        """Each replica's LEO and ISR membership: has the ISR truncated, has it caught up."""
        ...

    def set_last_mirrored_epoch(self, mirror_name: str, tp: TopicPartition, epoch: int | None,
                                cut_offset: int | None = None) -> None:  # fmt: skip
        """Record (or clear) the LME of ``tp`` for ``mirror_name``, answered later by last_mirrored_epoch;
        with ``cut_offset`` (a consistent cut), answered by last_mirror_cut."""
        ...

    def commit_group_offsets(
        self, group_id: str, offsets: Sequence[GroupOffset], group_type: GroupType = GroupType.CONSUMER
    ) -> None:
        """Write synced group offsets; raises GroupNotEmpty if the group has active members."""
        ...

    def alter_configs(
        self, topic_id: uuid.UUID, set_configs: Mapping[str, str], delete_configs: Sequence[str] = ()
    ) -> None:
        """Incrementally set and delete topic configs (config sync)."""
        ...

    def create_acls(self, acls: Sequence[AclBinding]) -> None:
        """Add ACL bindings (idempotent)."""
        ...

    def delete_acls(self, acls: Sequence[AclBinding]) -> None:
        """Remove ACL bindings (absent ones are ignored)."""
        ...


SOURCE_METHODS: tuple[str, ...] = (
    "cluster_id",
    "describe_topics",
    "list_offsets",
    "fetch",
    "end_offset_for_epoch",
    "latest_epoch",
    "last_mirrored_epoch",
    "last_mirror_cut",
    "list_groups",
    "group_offsets",
    "is_group_active",
    "describe_configs",
    "describe_acls",
)
# The destination's calls that change it: every one carries an owner fence (coordinator.fencing).
DESTINATION_MUTATIONS: tuple[str, ...] = (
    "create_topic",
    "create_partitions",
    "set_read_only",
    "set_mirror",
    "append_mirror_batches",
    "truncate_to",
    "truncate_fully_and_start_at",
    "bump_leader_epoch",
    "append_control_batch",
    "set_last_mirrored_epoch",
    "commit_group_offsets",
    "alter_configs",
    "create_acls",
    "delete_acls",
)
DESTINATION_METHODS: tuple[str, ...] = SOURCE_METHODS + ("open_transactions", "isr_status") + DESTINATION_MUTATIONS
