"""Keeping DLE >= SLE: reactive (EPOCH_FENCING), proactive and periodic bumps.

Consumers of the destination validate positions with the leader epoch of the records they read;
a record whose epoch is above the partition's leader epoch sends them into a metadata refresh
loop (KIP-1279, "Leader Epoch Invariant"). So the destination leader epoch (DLE) is kept at or
above the source leader epoch (SLE) and above every batch epoch it appends:

- reactive: a fetched batch with an epoch above the DLE is not appended; the partition enters
  EPOCH_FENCING, the DLE is bumped, and mirroring resumes with that batch;
- proactive: when SLE comes within ``epoch_bump_threshold`` of the DLE, the DLE is bumped to
  SLE + ``epoch_bump_margin`` while mirroring continues (prototype: 3 and 10);
- periodic: the same check at every metadata sync, for partitions that fetched nothing.

Every bump is "to at least N", so repeating one is harmless.
"""

from __future__ import annotations

from coordinator.partition_state import MirrorPartitionState, transition
from coordinator.ports import TopicPartition
from coordinator.states import MirrorState
from coordinator.workflows.commands import BumpLeaderEpoch, Decision
from coordinator.workflows.config import MirrorConfig


def bump_target(sle: int, config: MirrorConfig) -> int:
    """The epoch a bump aims at: SLE plus the margin, so the next few source elections need none."""
    return sle + config.epoch_bump_margin


def needs_bump(dle: int, sle: int, config: MirrorConfig) -> bool:
    """True when SLE is above DLE or within the threshold of it."""
    return sle + config.epoch_bump_threshold >= dle


def proactive_bump(tp: TopicPartition, dle: int, sle: int, config: MirrorConfig) -> BumpLeaderEpoch | None:
    """The proactive (and periodic) bump for a partition, or None when DLE is comfortably ahead."""
    if sle < 0 or not needs_bump(dle, sle, config):
        return None
    return BumpLeaderEpoch(tp, bump_target(sle, config))


def enter_epoch_fencing(
    state: MirrorPartitionState, fenced_epoch: int, sle: int, now_ms: int, config: MirrorConfig
) -> MirrorPartitionState:
    """MIRRORING -> EPOCH_FENCING with the target recorded, so a restart bumps to the same epoch."""
    target = bump_target(max(fenced_epoch, sle), config)
    return transition(state, MirrorState.EPOCH_FENCING, now_ms, epoch_target=target)


def decide_epoch_fencing(
    state: MirrorPartitionState, tp: TopicPartition, dle: int, now_ms: int
) -> Decision:
    """EPOCH_FENCING: bump the DLE to at least the recorded target, then back to MIRRORING."""
    commands = () if dle >= state.epoch_target else (BumpLeaderEpoch(tp, state.epoch_target),)
    nxt = transition(state, MirrorState.MIRRORING, now_ms, leader_epoch=max(dle, state.epoch_target))
    return Decision(nxt, commands)
