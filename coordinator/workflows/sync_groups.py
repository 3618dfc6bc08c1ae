"""Group offset sync for consumer and share groups (periodic; thread VK12).

- Groups are chosen by ``groups.include`` / ``groups.exclude`` (whole-name Java regular
  expressions, comma-separated, as the prototype compiles them; ``coordinator.java_regex``).
- A group with active members on the destination is skipped: its members own their progress.
- Only partitions whose mirror partition is MIRRORING or EPOCH_FENCING are synced: a paused,
  stopped or failed partition keeps whatever the destination has (after a failover the
  destination's groups are the live ones; a stopped mirror never overwrites them). The one
  exception is STOPPING's last sync (``DestPartition.final``): the offsets consumers committed
  on the source since the last periodic sync, carried over once before the topic turns writable.
- The offset is double-clamped into what the destination can serve:
  ``synced = max(destLogStart, min(sourceCommitted, destLEO))``. Under lag it cannot point past
  the LEO (no OffsetOutOfRange, no ``auto.offset.reset=latest`` skipping records after failover);
  under destination retention it cannot point below the log start.
- The committed leader epoch travels with the offset when it was not clamped. When it was, the
  epoch is looked up in the destination's epoch cache: that of the record before the clamped
  offset, as a consumer commits the epoch of the last record it consumed (at the log start, the
  record there), so a consumer's position validation agrees with the local log.

Two phases keep this pure: ``plan_group_sync`` clamps and lists the epoch look-ups it needs,
``finish_group_sync`` takes their answers and builds the commits.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import msgspec

from coordinator.java_regex import JavaPatterns, compile_java_list
from coordinator.ports import GroupDescription, GroupOffset, GroupType, TopicPartition
from coordinator.states import MirrorState
from coordinator.workflows.commands import CommitGroupOffsets

SYNCED_STATES = frozenset({MirrorState.MIRRORING, MirrorState.EPOCH_FENCING})


def name_pattern(patterns: Iterable[str]) -> JavaPatterns | None:
    """Raises JavaPatternError for a pattern that cannot be used (``MirrorConfig`` leaves those out)."""
    return compile_java_list(patterns)


def group_selected(group_id: str, include: JavaPatterns | None, exclude: JavaPatterns | None) -> bool:
    if include is None or not include.fullmatch(group_id):
        return False
    return exclude is None or not exclude.fullmatch(group_id)


class DestPartition(msgspec.Struct, frozen=True, gc=False):
    """A mirrored partition as the sync sees it: its state and the destination's offset range."""

    state: MirrorState
    log_start: int
    leo: int
    final: bool = False  # STOPPING's last sync: synced although no longer mirroring


class PlannedOffset(msgspec.Struct, frozen=True, gc=False):
    group_id: str
    group_type: GroupType
    tp: TopicPartition
    offset: int
    leader_epoch: int  # the committed epoch, or -1 until looked up
    metadata: str
    needs_epoch: bool  # clamped: look the epoch of ``offset`` up in the destination's cache


class GroupSyncPlan(msgspec.Struct, frozen=True, gc=False):
    offsets: tuple[PlannedOffset, ...]
    skipped_active: tuple[str, ...] = ()

    def epoch_lookups(self) -> list[tuple[TopicPartition, int]]:
        return sorted({(p.tp, p.offset) for p in self.offsets if p.needs_epoch})


def clamp(committed: int, log_start: int, leo: int) -> int:
    """VK12's double clamp: ``max(log_start, min(committed, leo))``."""
    return max(log_start, min(committed, leo))


def plan_group_sync(
    source_groups: Sequence[GroupDescription],
    source_offsets: Mapping[str, Sequence[GroupOffset]],
    dest_active: Iterable[str],
    dest_committed: Mapping[str, Sequence[GroupOffset]],
    partitions: Mapping[TopicPartition, DestPartition],
    include: Iterable[str],
    exclude: Iterable[str],
) -> GroupSyncPlan:
    """Which offsets to write, clamped; unchanged destination offsets are not rewritten."""
    inc, exc = name_pattern(include), name_pattern(exclude)
    active = set(dest_active)
    planned: list[PlannedOffset] = []
    skipped: list[str] = []
    for group in sorted(source_groups, key=lambda g: g.group_id):
        if not group_selected(group.group_id, inc, exc):
            continue
        if group.group_id in active:
            skipped.append(group.group_id)
            continue
        current = {(o.topic_id, o.partition): o.offset for o in dest_committed.get(group.group_id, ())}
        for off in source_offsets.get(group.group_id, ()):
            tp = TopicPartition(off.topic_id, off.partition)
            dest = partitions.get(tp)
            if dest is None or (dest.state not in SYNCED_STATES and not dest.final):
                continue
            synced = clamp(off.offset, dest.log_start, dest.leo)
            if current.get((off.topic_id, off.partition)) == synced:
                continue
            clamped = synced != off.offset
            planned.append(
                PlannedOffset(group.group_id, group.group_type, tp, synced,
                              -1 if clamped else off.leader_epoch, off.metadata, clamped)
            )
    return GroupSyncPlan(tuple(planned), tuple(skipped))


def finish_group_sync(plan: GroupSyncPlan, epochs: Mapping[tuple[TopicPartition, int], int]) -> list[CommitGroupOffsets]:
    """One commit per group, with looked-up epochs filled in (-1 when the cache had none)."""
    by_group: dict[tuple[str, GroupType], list[GroupOffset]] = {}
    for p in plan.offsets:
        epoch = epochs.get((p.tp, p.offset), -1) if p.needs_epoch else p.leader_epoch
        by_group.setdefault((p.group_id, p.group_type), []).append(
            GroupOffset(p.group_id, p.tp.topic_id, p.tp.partition, p.offset, epoch, p.metadata)
        )
    return [CommitGroupOffsets(g, t, tuple(offs)) for (g, t), offs in sorted(by_group.items(), key=lambda kv: kv[0][0])]
