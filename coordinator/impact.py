"""A failover's cost, decided before it runs (issue #26): the impact preview.

Pure, like the workflows it previews, and built on their own decisions so the two cannot drift:

- the transactions a stop aborts are ``workflows.stop.abort_markers`` of what the destination
  reports open;
- the groups that re-read are STOPPING's last group sync, ``workflows.sync_groups.plan_group_sync``
  with every selected partition ``final`` (the same call the shell makes at STOP_WAIT_ISR), and
  the groups active on the destination are the ones that plan skips;
- a failback's truncation is ``workflows.prepare.truncation_target`` of the same observation
  PREPARING reads.

The RPO is the source's HW less the destination's LEO (Kafka's lag, in offsets: what a
consumer of the source saw and the destination never got), and the age of the oldest of those
records. With the source down both are unknown (``None``): the preview still counts the
transactions and the groups the destination knows of.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import msgspec

from coordinator.ports import (
    Batch,
    GroupDescription,
    GroupOffset,
    GroupType,
    OpenTransaction,
    PartitionOffsets,
    TopicPartition,
)
from coordinator.states import MirrorState
from coordinator.workflows.prepare import PrepareObservation, truncation_target
from coordinator.workflows.stop import abort_markers, stop_markers
from coordinator.workflows.sync_groups import DestPartition, plan_group_sync


class StopPreviewObservation(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """What the preview reads for one partition: the destination (always), the source (if it answers)."""

    tp: TopicPartition
    dest: PartitionOffsets
    open_transactions: tuple[OpenTransaction, ...] = ()
    open_batches: tuple[Batch, ...] = ()  # destination batches from the first open transaction to the LEO
    source: PartitionOffsets | None = None  # None: the source did not answer
    first_unmirrored: Batch | None = None  # the source's batch holding the destination's LEO, if any


class AbortImpact(msgspec.Struct, frozen=True, gc=False):
    producer_id: int
    producer_epoch: int
    first_offset: int
    record_count: int


class PartitionImpact(msgspec.Struct, frozen=True, gc=False):
    tp: TopicPartition
    dest_leo: int
    source_hw: int | None  # None: unknown (the source did not answer)
    lost_records: int | None
    oldest_lost_age_ms: int | None  # age of the oldest record not on the destination; None: none, or unknown
    aborts: tuple[AbortImpact, ...] = ()


class GroupImpact(msgspec.Struct, frozen=True, gc=False):
    """A group's position on one partition after the failover: it resumes at ``synced`` and reads
    ``reread`` records again that it had committed past on the source (None: unknown)."""

    group_id: str
    group_type: GroupType
    tp: TopicPartition
    source_committed: int | None
    synced: int
    reread: int | None
    dest_committed: int | None = None  # what the destination holds now (the last periodic sync's)


class TruncationImpact(msgspec.Struct, frozen=True, gc=False):
    """What a failback's truncation to the LME removes from the old source's log."""

    tp: TopicPartition
    target: int
    leo: int
    removed: int  # offsets removed: [first_removed, leo)
    first_removed: int
    newest_timestamp: int | None  # of the removed records; None when none are removed


class StopImpact(msgspec.Struct, frozen=True, gc=False):
    partitions: tuple[PartitionImpact, ...]
    groups: tuple[GroupImpact, ...] = ()
    active_groups: tuple[str, ...] = ()  # active on the destination: not synced
    source_available: bool = True

    @property
    def lost_partitions(self) -> int:
        return sum(1 for p in self.partitions if p.lost_records is None or p.lost_records > 0)

    @property
    def lost_records(self) -> int | None:
        if any(p.lost_records is None for p in self.partitions):
            return None
        return sum(p.lost_records or 0 for p in self.partitions)

    @property
    def aborted_transactions(self) -> int:
        return sum(len(p.aborts) for p in self.partitions)

    @property
    def rereading_groups(self) -> int:
        return len({g.group_id for g in self.groups if g.reread is None or g.reread > 0})

    @property
    def loses_something(self) -> bool:
        return self.lost_partitions > 0 or self.aborted_transactions > 0

    def verdict(self) -> str:
        if not self.loses_something and self.rereading_groups == 0:
            return "would lose nothing"
        lost = self.lost_records
        parts = [f"would lose {'an unknown number of' if lost is None else lost} records on {self.lost_partitions} partitions"]
        parts.append(f"would abort {self.aborted_transactions} transactions")
        parts.append(f"{self.rereading_groups} groups re-read")
        return "; ".join(parts)


class FailbackImpact(msgspec.Struct, frozen=True, gc=False):
    partitions: tuple[TruncationImpact, ...]

    @property
    def loses_something(self) -> bool:
        return any(p.removed > 0 for p in self.partitions)

    def verdict(self) -> str:
        removed = [p for p in self.partitions if p.removed > 0]
        if not removed:
            return "would lose nothing"
        return f"would lose {sum(p.removed for p in removed)} records on {len(removed)} partitions"


def open_transaction_records(batches: Iterable[Batch], txn: OpenTransaction) -> int:
    """Records of an open transaction: its producer's transactional data from its first offset on."""
    return sum(b.record_count for b in batches
               if b.producer_id == txn.producer_id and b.is_transactional and not b.is_control
               and b.base_offset >= txn.first_offset)  # fmt: skip


def partition_impact(obs: StopPreviewObservation, now_ms: int) -> PartitionImpact:
    chosen = {(m.producer_id, m.producer_epoch) for m in abort_markers(obs.tp, obs.open_transactions)}
    aborts = tuple(AbortImpact(t.producer_id, t.producer_epoch, t.first_offset, open_transaction_records(obs.open_batches, t))
                   for t in obs.open_transactions if (t.producer_id, t.producer_epoch) in chosen)  # fmt: skip
    if obs.source is None:
        return PartitionImpact(obs.tp, obs.dest.leo, None, None, None, aborts)
    lost = max(0, obs.source.hw - obs.dest.leo)
    age = None
    if lost and obs.first_unmirrored is not None:
        age = max(0, now_ms - obs.first_unmirrored.timestamp)
    return PartitionImpact(obs.tp, obs.dest.leo, obs.source.hw, lost, age, aborts)


def stopped_leo(obs: StopPreviewObservation) -> int:
    """The destination's LEO once the stop has written its markers (``stop_markers``, one offset each)."""
    return obs.dest.leo + len(stop_markers(obs.tp, obs.open_transactions, ""))


def stop_impact(
    partitions: Sequence[StopPreviewObservation],
    now_ms: int,
    *,
    source_groups: Sequence[GroupDescription] | None,
    source_offsets: Mapping[str, Sequence[GroupOffset]],
    dest_active: Iterable[str],
    dest_committed: Mapping[str, Sequence[GroupOffset]],
    include: Iterable[str],
    exclude: Iterable[str],
) -> StopImpact:
    """The preview of a stop of ``partitions``. ``source_groups`` None: the source did not answer,
    so the groups keep what the destination holds (the last periodic sync) and their re-read is unknown."""
    impacts = tuple(partition_impact(o, now_ms) for o in partitions)
    # STOPPING's last sync runs once the stop's own markers are in: it clamps to the LEO after them.
    dests = {o.tp: DestPartition(MirrorState.STOPPING, o.dest.log_start, stopped_leo(o), final=True) for o in partitions}
    active = sorted(set(dest_active))
    groups: list[GroupImpact] = []
    if source_groups is None:
        for group_id, offsets in sorted(dest_committed.items()):
            if group_id in active:
                continue
            for off in offsets:
                tp = TopicPartition(off.topic_id, off.partition)
                if tp in dests:
                    groups.append(GroupImpact(group_id, GroupType.CONSUMER, tp, None, off.offset, None, off.offset))
        return StopImpact(impacts, tuple(groups), tuple(active), source_available=False)
    # Every planned offset, also those the destination already has: the preview shows where
    # each group resumes, not what the sync rewrites.
    plan = plan_group_sync(source_groups, source_offsets, active, {}, dests, include, exclude)
    committed = {(o.group_id, TopicPartition(o.topic_id, o.partition)): o.offset
                 for offs in source_offsets.values() for o in offs}  # fmt: skip
    held = {(o.group_id, TopicPartition(o.topic_id, o.partition)): o.offset
            for offs in dest_committed.values() for o in offs}  # fmt: skip
    for p in plan.offsets:
        src = committed[(p.group_id, p.tp)]
        groups.append(GroupImpact(p.group_id, p.group_type, p.tp, src, p.offset, max(0, src - p.offset),
                                  held.get((p.group_id, p.tp))))
    return StopImpact(impacts, tuple(groups), plan.skipped_active, source_available=True)


def truncation_impact(tp: TopicPartition, obs: PrepareObservation, removed_batches: Iterable[Batch]) -> TruncationImpact:
    """What PREPARING's cut removes (``truncation_target``, as ``decide_prepare`` cuts); ``removed_batches``
    are the log's batches from the target (or its log start) to its LEO."""
    target = truncation_target(obs)
    leo = obs.dest.leo
    first = max(target, obs.dest.log_start)
    removed = max(0, leo - first) if target < leo else 0
    stamps = [b.timestamp for b in removed_batches if b.last_offset >= first]
    return TruncationImpact(tp, target, leo, removed, first, max(stamps) if removed and stamps else None)
