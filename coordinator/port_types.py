"""Value types of the ports: partitions, batches, offsets, epochs, groups, ACLs (frozen msgspec Structs).

Re-exported by coordinator.ports; see its docstring for the KIP-1279 vocabulary.
"""

from __future__ import annotations

import enum
import uuid

import msgspec

# One definition for records and ports: control record types, producer sentinels, and the
# 61-byte RecordBatch v2 header that batch sizes count so byte budgets behave like Kafka's.
from records.segments import (  # noqa: F401 - re-exported through coordinator.ports
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    RECORD_BATCH_OVERHEAD,
    ControlType,
)

# Kafka's sentinels the wire format does not name.
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1
NO_LEADER = -1


class IsolationLevel(enum.IntEnum):
    """Fetch isolation: READ_UNCOMMITTED reads up to the HW, READ_COMMITTED up to the LSO."""

    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1


class GroupType(enum.Enum):
    """Consumer groups and share groups (KIP-932) both carry committed offsets that get synced."""

    CONSUMER = "consumer"
    SHARE = "share"


# ---------------------------------------------------------------------------------------------
# Value types. Frozen msgspec Structs: cheap, hashable where all fields are, and they travel
# over the model server's msgpack protocol unchanged.
# ---------------------------------------------------------------------------------------------


class TopicPartition(msgspec.Struct, frozen=True, order=True, gc=False, cache_hash=True):
    """A partition named by topic ID (not name), as KIP-1279 mirrors keep topic IDs."""

    topic_id: uuid.UUID
    partition: int

    def __str__(self) -> str:
        return f"{self.topic_id}-{self.partition}"


def tp_order(tp: TopicPartition) -> tuple[int, int]:
    """A sort key giving ``TopicPartition``'s own order, compared in C (comparing the structs
    compares their UUIDs in Python, ~1 us each)."""
    return (tp.topic_id.int, tp.partition)


class Batch(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One RecordBatch: offsets [base_offset, last_offset], the epoch it was written in, producer fields.

    ``last_offset - base_offset + 1`` may exceed ``record_count`` after compaction (offset gaps
    inside a batch); a control batch holds one control record of ``control_type``.
    """

    base_offset: int
    last_offset: int
    leader_epoch: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    base_sequence: int = NO_SEQUENCE
    is_transactional: bool = False
    is_control: bool = False
    control_type: ControlType | None = None
    timestamp: int = 0  # the batch's max timestamp
    payload: bytes = b""
    record_count: int = 1
    log_append_time: bool = False  # the timestamp type bit: the leader stamped it (else its producer did)

    @property
    def next_offset(self) -> int:
        """The offset after this batch (what the LEO becomes once it is appended)."""
        return self.last_offset + 1

    @property
    def size_in_bytes(self) -> int:
        """The batch's size on the wire: header plus payload."""
        return RECORD_BATCH_OVERHEAD + len(self.payload)

    @property
    def has_producer_id(self) -> bool:
        """True when the batch was written by an idempotent or transactional producer."""
        return self.producer_id >= 0


class PartitionOffsets(msgspec.Struct, frozen=True, gc=False):
    """ListOffsets for one partition: log start <= LSO <= HW <= LEO, and the current leader epoch."""

    log_start: int
    lso: int
    hw: int
    leo: int
    leader_epoch: int


class PartitionMetadata(msgspec.Struct, frozen=True, gc=False):
    """Leader, leader epoch, replicas and ISR of one partition (leader -1 when offline)."""

    topic_id: uuid.UUID
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic_id, self.partition)


class TopicMetadata(msgspec.Struct, frozen=True):
    """A topic: name, topic ID, partitions, configs, and its mirror attachment.

    ``read_only`` is true while the topic is a mirror that producers may not write (every
    mirror state but STOPPED); ``mirror_name``/``mirror_source_cluster_id`` say which cluster
    mirror feeds it, which is what mirror-loop detection asks the source.
    """

    name: str
    topic_id: uuid.UUID
    partitions: tuple[PartitionMetadata, ...]
    configs: dict[str, str] = {}
    read_only: bool = False
    mirror_name: str | None = None
    mirror_source_cluster_id: str | None = None


class EpochEndOffset(msgspec.Struct, frozen=True, gc=False):
    """OffsetsForLeaderEpoch answer: the largest epoch <= the requested one and where it ends.

    (UNDEFINED_EPOCH, UNDEFINED_OFFSET) when the log knows no such epoch.
    """

    epoch: int
    end_offset: int

    @property
    def undefined(self) -> bool:
        return self.epoch == UNDEFINED_EPOCH and self.end_offset == UNDEFINED_OFFSET


class AbortedTransaction(msgspec.Struct, frozen=True, gc=False):
    """FetchResponse.AbortedTransactions entry: a producer's aborted transaction starting at first_offset."""

    producer_id: int
    first_offset: int


class FetchResult(msgspec.Struct, frozen=True, gc=False):
    """One partition's fetch answer.

    ``batches`` are whole batches, the first one containing the fetch offset; READ_COMMITTED
    stops below the LSO and lists the aborted transactions overlapping the returned range in
    ``aborted_transactions`` (as Kafka's FetchResponse does; the data itself is NOT filtered,
    because a mirror copies aborted batches and markers too). ``diverging_epoch`` is set
    (and ``batches`` empty) when ``last_fetched_epoch`` shows the fetcher's log diverged from the
    leader's: truncate to ``min(diverging_epoch.end_offset, own LEO)`` and retry (KIP-595 Fetch).
    ``leader_epoch`` is the partition's current leader epoch (the SLE when fetching a source).
    """

    batches: tuple[Batch, ...]
    hw: int
    lso: int
    log_start: int
    leader_epoch: int
    aborted_transactions: tuple[AbortedTransaction, ...] = ()
    diverging_epoch: EpochEndOffset | None = None

    def next_fetch_offset(self, fetch_offset: int) -> int:
        """Where the next fetch starts: after the last returned batch, or ``fetch_offset`` if none."""
        return self.batches[-1].next_offset if self.batches else fetch_offset


class ReplicaState(msgspec.Struct, frozen=True, gc=False):
    """One replica's view for ISR status: its broker, LEO, ISR membership and liveness."""

    broker: int
    leo: int
    in_isr: bool
    online: bool


class IsrStatus(msgspec.Struct, frozen=True, gc=False):
    """Replication status of one partition: who has truncated, who has caught up with the leader."""

    topic_id: uuid.UUID
    partition: int
    leader: int
    leader_epoch: int
    leo: int
    hw: int
    replicas: tuple[ReplicaState, ...]

    def isr_truncated_to(self, offset: int, all_replicas: bool = False) -> bool:
        """True when every ISR member (every replica if ``all_replicas``) has LEO <= ``offset``.

        ``all_replicas`` is the unclean-election mode of PREPARING: wait for all registered replicas.
        """
        return all(r.leo <= offset for r in self.replicas if r.in_isr or all_replicas)

    def isr_caught_up(self, all_replicas: bool = False) -> bool:
        """True when every ISR member (or every replica) has the leader's LEO and the HW reached it."""
        return self.hw == self.leo and all(
            r.leo == self.leo for r in self.replicas if r.in_isr or all_replicas
        )


class OpenTransaction(msgspec.Struct, frozen=True, gc=False):
    """A transaction with data in the log and no marker yet: it holds back the LSO."""

    producer_id: int
    producer_epoch: int
    first_offset: int


class GroupDescription(msgspec.Struct, frozen=True, gc=False):
    """A consumer or share group and whether it has active members (active groups are not synced to)."""

    group_id: str
    group_type: GroupType
    active: bool
    member_count: int


class GroupOffset(msgspec.Struct, frozen=True, gc=False):
    """A committed offset of a group on one partition, with the leader epoch of the committed record."""

    group_id: str
    topic_id: uuid.UUID
    partition: int
    offset: int
    leader_epoch: int = UNDEFINED_EPOCH
    metadata: str = ""


class AclBinding(msgspec.Struct, frozen=True, gc=False):
    """An ACL, as Kafka's AclBinding: resource pattern plus access control entry (string enums)."""

    resource_type: str  # TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, CLUSTER_MIRROR, ...
    resource_name: str
    pattern_type: str  # LITERAL or PREFIXED
    principal: str  # e.g. "User:alice"
    host: str  # "*" for any
    operation: str  # READ, WRITE, ALTER, DESCRIBE, ALL, ...
    permission_type: str  # ALLOW or DENY
