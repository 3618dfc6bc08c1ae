"""The ports, served by a model cluster: SourceCluster and DestinationCluster (coordinator.ports).

Every port call first passes the fault switches (unreachable, flapping, random failures,
slowness), since these are the coordinator's remote calls. The cluster's own producers,
replication and elections are not subject to them.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence

from coordinator.ports import (
    UNDEFINED_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    AclBinding,
    Batch,
    ControlType,
    EpochEndOffset,
    FencedLeaderEpoch,
    FetchResult,
    GroupDescription,
    GroupNotEmpty,
    GroupOffset,
    GroupType,
    InvalidRequest,
    IsolationLevel,
    IsrStatus,
    NotLeader,
    OffsetOutOfRange,
    OpenTransaction,
    PartitionOffsets,
    SourceUnavailable,
    TopicAlreadyExists,
    TopicMetadata,
    TopicPartition,
    UnexpectedAppendOffset,
    UnknownLeaderEpoch,
    UnknownTopicId,
)

from .core import ClusterCore
from .groups import GroupState
from .journal import journaled
from .records import end_txn_marker_value, mirror_pid_reset_value
from .replica import Partition


class PortsAdapter(ClusterCore):
    """Implements coordinator.ports.SourceCluster and DestinationCluster on the model."""

    # Refuse mirror batches whose epoch is above the DLE: that breaks DLE >= SLE, a coordinator bug.
    strict_epochs: bool = True

    def _serve(self) -> None:
        """Faults first: a port call may fail as unreachable, and a slow link costs logical time."""
        reason = self.faults.unavailable_reason(self.now_ms, self.rng)
        if reason is not None:
            raise SourceUnavailable(self.name, reason)
        if self.faults.state.slow_ms:
            self.now_ms += self.faults.state.slow_ms

    def _leader(self, tp: TopicPartition, current_leader_epoch: int | None) -> Partition:
        _, part = self._online(tp)
        _check_leader_epoch(part, current_leader_epoch)
        return part

    def leader_partition(self, tp: TopicPartition, current_leader_epoch: int | None) -> Partition:
        """The online partition, after Kafka's current-leader-epoch check (Fenced/UnknownLeaderEpoch)."""
        return self._leader(tp, current_leader_epoch)

    def _offsets(self, part: Partition) -> PartitionOffsets:
        log = part.leader_log
        return PartitionOffsets(log.log_start, part.lso(), part.hw, log.leo, part.leader_epoch)

    # ---------------------------------------------------------------- ClusterPort reads

    @journaled
    def cluster_id(self) -> str:
        """The cluster ID."""
        self._serve()
        return self._cluster_id

    @journaled
    def describe_topics(self, topic_ids: Sequence[uuid.UUID] | None = None) -> list[TopicMetadata]:
        """Topic metadata, all topics (by name) when ``topic_ids`` is None."""
        self._serve()
        if topic_ids is None:
            return [self.topics[self.topic_ids[n]].metadata() for n in sorted(self.topic_ids)]
        out = []
        for topic_id in topic_ids:
            topic = self.topics.get(topic_id)
            if topic is None:
                raise UnknownTopicId(topic_id)
            out.append(topic.metadata())
        return out

    @journaled
    def list_offsets(self, tp: TopicPartition) -> PartitionOffsets:
        """Log start, LSO, HW, LEO and leader epoch."""
        self._serve()
        return self._offsets(self._online(tp)[1])

    @journaled
    def fetch(
        self,
        tp: TopicPartition,
        fetch_offset: int,
        max_bytes: int,
        isolation: IsolationLevel = IsolationLevel.READ_COMMITTED,
        current_leader_epoch: int | None = None,
        last_fetched_epoch: int | None = None,
    ) -> FetchResult:
        """Batches up to the LSO (read_committed) or HW; aborted transactions reported, not filtered."""
        self._serve()
        topic, part = self._topic_partition(tp)
        if self.faults.take_leader_change(tp) and part.online:
            # The leader moved while the request was in flight: the old leader refuses it.
            candidates = [b for b in part.isr if b in self.live and b != part.leader]
            if candidates:
                part.elect(candidates[0], False, self.now_ms, assign_epoch=not topic.read_only)
            else:
                part.bump_epoch(part.leader_epoch + 1, assign_epoch=not topic.read_only)
            self._after_leader_change(part)
            raise NotLeader(tp, part.leader, part.leader_epoch)
        return self.read_fetch(tp, fetch_offset, max_bytes, isolation, current_leader_epoch, last_fetched_epoch)

    def read_fetch(
        self,
        tp: TopicPartition,
        fetch_offset: int,
        max_bytes: int,
        isolation: IsolationLevel = IsolationLevel.READ_COMMITTED,
        current_leader_epoch: int | None = None,
        last_fetched_epoch: int | None = None,
    ) -> FetchResult:
        """fetch() without the port's fault switches: what the Kafka listener serves to clients
        (faults model the coordinator's link to a source, not applications' connections)."""
        return read_leader_fetch(self._online(tp)[1], fetch_offset, max_bytes, isolation, current_leader_epoch,
                                 last_fetched_epoch)  # fmt: skip

    @journaled
    def end_offset_for_epoch(
        self, tp: TopicPartition, leader_epoch: int, current_leader_epoch: int | None = None
    ) -> EpochEndOffset:
        """OffsetsForLeaderEpoch on the leader's log."""
        self._serve()
        return self._leader(tp, current_leader_epoch).leader_log.end_offset_for_epoch(leader_epoch)

    @journaled
    def latest_epoch(self, tp: TopicPartition) -> int:
        """The newest epoch in the leader's epoch cache, UNDEFINED_EPOCH when empty."""
        self._serve()
        epoch = self._online(tp)[1].leader_log.latest_epoch()
        return UNDEFINED_EPOCH if epoch is None else epoch

    @journaled
    def last_mirrored_epoch(self, mirror_name: str, tp: TopicPartition) -> int | None:
        """The LME recorded for ``tp`` under ``mirror_name``, if any."""
        self._serve()
        return self.lme.get((mirror_name, tp))

    @journaled
    def last_mirror_cut(self, mirror_name: str, tp: TopicPartition) -> int | None:
        """The consistent cut's offset recorded with the LME of ``tp``, if any."""
        self._serve()
        return self.lme_cuts.get((mirror_name, tp))

    @journaled
    def list_groups(self) -> list[GroupDescription]:
        """Every consumer and share group, by group ID."""
        self._serve()
        return [self.groups[g].describe() for g in sorted(self.groups)]

    @journaled
    def group_offsets(self, group_id: str) -> list[GroupOffset]:
        """Committed offsets of a group (empty for an unknown group, as OffsetFetch)."""
        self._serve()
        group = self.groups.get(group_id)
        return group.sorted_offsets() if group else []

    @journaled
    def is_group_active(self, group_id: str) -> bool:
        """True when the group has members."""
        self._serve()
        group = self.groups.get(group_id)
        return bool(group and group.members)

    @journaled
    def describe_configs(self, topic_id: uuid.UUID) -> dict[str, str]:
        """A topic's explicitly set configs."""
        self._serve()
        topic = self.topics.get(topic_id)
        if topic is None:
            raise UnknownTopicId(topic_id)
        return dict(topic.configs)

    @journaled
    def describe_acls(self) -> list[AclBinding]:
        """All ACLs, in creation order."""
        self._serve()
        return list(self.acls)

    # ---------------------------------------------------------------- DestinationCluster writes

    @journaled
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
        """Create a topic with a given topic ID; mirror topics start read-only."""
        self._serve()
        if name in self.topic_ids or topic_id in self.topics:
            raise TopicAlreadyExists(name, topic_id)
        if num_partitions < 1:
            raise InvalidRequest(f"num_partitions must be positive, got {num_partitions}")
        topic = self._add_topic(name, topic_id, 0, replication_factor, dict(configs or {}))
        topic.read_only = read_only
        topic.mirror_name = mirror_name
        topic.mirror_source_cluster_id = mirror_source_cluster_id
        rf = min(len(self.brokers), replication_factor or 3)
        self._grow(topic, num_partitions, rf, self.rng.randrange(len(self.brokers)))
        return topic.metadata()

    @journaled
    def create_partitions(self, topic_id: uuid.UUID, total_count: int) -> TopicMetadata:
        """Grow the topic to ``total_count`` partitions."""
        self._serve()
        topic = self.topics.get(topic_id)
        if topic is None:
            raise UnknownTopicId(topic_id)
        if total_count < len(topic.partitions):
            raise InvalidRequest(f"cannot shrink {topic.name} to {total_count} partitions")
        rf = len(topic.partitions[0].replicas) if topic.partitions else min(3, len(self.brokers))
        self._grow(topic, total_count, rf, self.rng.randrange(len(self.brokers)))
        return topic.metadata()

    @journaled
    def set_read_only(self, topic_id: uuid.UUID, read_only: bool) -> None:
        """Read-only (mirroring) or writable (STOPPED) to producers."""
        self._serve()
        topic = self.topics.get(topic_id)
        if topic is None:
            raise UnknownTopicId(topic_id)
        topic.read_only = read_only

    @journaled
    def set_mirror(
        self, topic_id: uuid.UUID, mirror_name: str | None, mirror_source_cluster_id: str | None = None
    ) -> None:
        """Attach to or detach from a cluster mirror."""
        self._serve()
        topic = self.topics.get(topic_id)
        if topic is None:
            raise UnknownTopicId(topic_id)
        topic.mirror_name = mirror_name
        topic.mirror_source_cluster_id = mirror_source_cluster_id if mirror_name else None

    @journaled
    def append_mirror_batches(self, tp: TopicPartition, batches: Sequence[Batch], expected_leo: int | None = None) -> int:
        """Append source batches as they are (offsets, batch epochs); all or nothing. Returns the LEO.

        Refused on a writable topic (only mirror topics take mirrored data), below the LEO, when
        the LEO is not ``expected_leo`` (given: the log moved since the caller read it), and for a
        batch whose epoch is above the DLE (the coordinator must bump first: DLE >= SLE).
        """
        self._serve()
        topic, part = self._online(tp)
        if not topic.read_only:
            raise InvalidRequest(f"mirror append to writable topic {topic.name}")
        leo = part.leader_log.leo
        if expected_leo is not None and expected_leo != leo:
            raise UnexpectedAppendOffset(tp, expected_leo, leo)
        for b in batches:
            if b.base_offset < leo or b.last_offset < b.base_offset:
                raise UnexpectedAppendOffset(tp, b.base_offset, leo)
            if self.strict_epochs and b.leader_epoch > part.leader_epoch:
                raise UnknownLeaderEpoch(tp, b.leader_epoch, part.leader_epoch)
            leo = b.last_offset + 1
        for b in batches:
            part.append_leader(b)
        if batches:
            self._after_append(part)
        return part.leader_log.leo

    @journaled
    def truncate_to(self, tp: TopicPartition, offset: int) -> PartitionOffsets:
        """Cut the leader's log at ``offset``; followers truncate on their next fetch."""
        self._serve()
        _, part = self._online(tp)
        if offset < 0:
            raise InvalidRequest(f"negative truncation offset {offset}")
        part.truncate_leader(offset)
        self._after_leader_change(part)
        return self._offsets(part)

    @journaled
    def truncate_fully_and_start_at(self, tp: TopicPartition, offset: int) -> PartitionOffsets:
        """Empty the log and restart it at ``offset``."""
        self._serve()
        _, part = self._online(tp)
        if offset < 0:
            raise InvalidRequest(f"negative start offset {offset}")
        part.truncate_fully_and_start_at(offset)
        self._after_leader_change(part)
        return self._offsets(part)

    @journaled
    def bump_leader_epoch(self, tp: TopicPartition, min_epoch: int) -> int:
        """Raise the DLE to at least ``min_epoch``; idempotent."""
        self._serve()
        topic, part = self._online(tp)
        was = part.leader_epoch
        epoch = part.bump_epoch(min_epoch, assign_epoch=not topic.read_only)
        if epoch != was:
            self._touch(tp)  # a fetch parked at the old epoch answers now, as Kafka's purgatory does
        return epoch

    @journaled
    def open_transactions(self, tp: TopicPartition) -> list[OpenTransaction]:
        """Transactions holding the LSO back on the leader."""
        self._serve()
        return self._online(tp)[1].leader_log.open_transactions()

    @journaled
    def append_control_batch(
        self,
        tp: TopicPartition,
        control_type: ControlType,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        source_cluster_id: str | None = None,
    ) -> Batch:
        """An ABORT/COMMIT marker for a producer, or a MIRROR_PID_RESET batch, at the LEO with the DLE."""
        self._serve()
        _, part = self._online(tp)
        if control_type == ControlType.MIRROR_PID_RESET:
            if not source_cluster_id:
                raise InvalidRequest("MIRROR_PID_RESET needs the source cluster id")
            return self._append_marker(
                part, control_type, NO_PRODUCER_ID, NO_PRODUCER_EPOCH, mirror_pid_reset_value(source_cluster_id)
            )
        if producer_id < 0:
            raise InvalidRequest(f"{control_type.name} marker needs a producer id")
        return self._append_marker(part, control_type, producer_id, producer_epoch, end_txn_marker_value())

    @journaled
    def isr_status(self, tp: TopicPartition) -> IsrStatus:
        """LEO and ISR membership of every replica."""
        self._serve()
        return self._topic_partition(tp)[1].isr_status(self.live)

    @journaled
    def set_last_mirrored_epoch(self, mirror_name: str, tp: TopicPartition, epoch: int | None,
                                cut_offset: int | None = None) -> None:  # fmt: skip
        """Record or clear the LME of ``tp`` (and the consistent cut's offset, if any)."""
        self._serve()
        self._topic_partition(tp)
        self.lme_cuts.pop((mirror_name, tp), None)
        if epoch is None:
            self.lme.pop((mirror_name, tp), None)
        else:
            self.lme[(mirror_name, tp)] = epoch
            if cut_offset is not None:
                self.lme_cuts[(mirror_name, tp)] = cut_offset

    @journaled
    def commit_group_offsets(
        self, group_id: str, offsets: Sequence[GroupOffset], group_type: GroupType = GroupType.CONSUMER
    ) -> None:
        """Admin offset write (AlterConsumerGroupOffsets / AlterShareGroupOffsets): refused if active."""
        self._serve()
        group = self.groups.get(group_id)
        if group is not None and group.members:
            raise GroupNotEmpty(group_id)
        for o in offsets:
            if o.topic_id not in self.topics:
                raise UnknownTopicId(o.topic_id)
        if group is None:
            group = self.groups[group_id] = GroupState(group_id, group_type)
        for o in offsets:
            group.commit(GroupOffset(group_id, o.topic_id, o.partition, o.offset, o.leader_epoch, o.metadata))

    @journaled
    def alter_configs(
        self, topic_id: uuid.UUID, set_configs: Mapping[str, str], delete_configs: Sequence[str] = ()
    ) -> None:
        """IncrementalAlterConfigs SET and DELETE on a topic."""
        self._serve()
        topic = self.topics.get(topic_id)
        if topic is None:
            raise UnknownTopicId(topic_id)
        topic.configs.update(set_configs)
        for key in delete_configs:
            topic.configs.pop(key, None)

    @journaled
    def create_acls(self, acls: Sequence[AclBinding]) -> None:
        """Add ACLs; existing ones stay as they are."""
        self._serve()
        for acl in acls:
            self.acls[acl] = None

    @journaled
    def delete_acls(self, acls: Sequence[AclBinding]) -> None:
        """Remove ACLs that match exactly."""
        self._serve()
        for acl in acls:
            self.acls.pop(acl, None)


def _check_leader_epoch(part: Partition, current_leader_epoch: int | None) -> None:
    """Kafka's current-leader-epoch check of a request (Fenced/UnknownLeaderEpoch)."""
    if current_leader_epoch is not None and current_leader_epoch >= 0:
        if current_leader_epoch < part.leader_epoch:
            raise FencedLeaderEpoch(part.tp, current_leader_epoch, part.leader_epoch)
        if current_leader_epoch > part.leader_epoch:
            raise UnknownLeaderEpoch(part.tp, current_leader_epoch, part.leader_epoch)


def read_leader_fetch(
    part: Partition,
    fetch_offset: int,
    max_bytes: int,
    isolation: IsolationLevel = IsolationLevel.READ_COMMITTED,
    current_leader_epoch: int | None = None,
    last_fetched_epoch: int | None = None,
) -> FetchResult:
    """``read_fetch`` of a partition its caller found online and led by the broker asked (the Kafka
    listener's fetch: no second lookup of the topic by its ID, a Python-level UUID hash)."""
    _check_leader_epoch(part, current_leader_epoch)
    tp = part.tp
    log = part.leader_log
    hw, lso = part.hw, part.lso()
    if last_fetched_epoch is not None and last_fetched_epoch >= 0:
        answer = log.end_offset_for_epoch(last_fetched_epoch)
        if answer.epoch < last_fetched_epoch or answer.end_offset < fetch_offset:
            return FetchResult((), hw, lso, log.log_start, part.leader_epoch, (), answer)
    if fetch_offset < log.log_start or fetch_offset > log.leo:
        raise OffsetOutOfRange(tp, fetch_offset, log.log_start, log.leo)
    upper = lso if isolation == IsolationLevel.READ_COMMITTED else hw
    batches = log.read(fetch_offset, upper, max_bytes)
    aborted = ()
    if isolation == IsolationLevel.READ_COMMITTED and batches:
        aborted = log.aborted_between(fetch_offset, batches[-1].next_offset)
    return FetchResult(tuple(batches), hw, lso, log.log_start, part.leader_epoch, aborted)
