"""PREPARING (log alignment): start a mirror partition, first time or failback.

Steps, each persisted in ``state.step``:

1. PREPARE_CHECK: wait until the topic is ready (created with the source's topic ID, read-only,
   attached to this mirror; the topic workflow refuses mirror loops and foreign topic IDs before
   that). Ask the source for its LME for the partition and work out the truncation target the
   way a follower handles divergence (OffsetsForLeaderEpoch): the source's end offset for the
   LME, capped by where the local log's copy of that epoch ends. No LME (a first mirror, or a
   source that never mirrored this partition) aligns from offset 0. After a ``--consistent-cut``
   stop on the source, at most its cut offset: the stop records the LME after truncating to the
   cut, so the epoch boundary already lands there; the cut, published with the LME, makes sure
   of it (a source whose epoch cache kept a cut epoch would otherwise let us keep records it
   gave up). Truncate.
2. PREPARE_WAIT_ISR: wait until every ISR member (every registered replica when
   ``support_unclean_leader_election``) has truncated, bump the DLE if SLE is near it, then
   MIRRORING. The fetcher's KIP-595 divergence check (``last_fetched_epoch``) settles anything
   the LME boundary did not (e.g. an unclean election on the source after the stop).

Re-running step 1 after a crash is harmless: the source's LME and its end offset have not moved,
the local end offset for that epoch is now the target itself, and truncating to it again is a no-op.
"""

from __future__ import annotations

import msgspec

from coordinator.partition_state import MirrorPartitionState, Step, advance, transition
from coordinator.ports import EpochEndOffset, IsrStatus, PartitionOffsets, TopicPartition
from coordinator.states import MirrorState
from coordinator.workflows.commands import (
    AddFetcher,
    Command,
    Decision,
    TruncateFullyAndStartAt,
    TruncateTo,
    unchanged,
)
from coordinator.workflows.config import MirrorConfig
from coordinator.workflows.fencing import proactive_bump


class PrepareObservation(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """What PREPARING reads: the destination partition, and the source's LME and epoch boundary."""

    topic_ready: bool
    dest: PartitionOffsets
    source_leader_epoch: int
    source_lme: int | None = None
    source_epoch_end: EpochEndOffset | None = None  # source's OffsetsForLeaderEpoch(LME)
    source_cut: int | None = None  # where a --consistent-cut stop ended the source's mirrored log
    local_epoch_end: EpochEndOffset | None = None  # destination's OffsetsForLeaderEpoch(source_epoch_end.epoch)
    isr: IsrStatus | None = None


# PREPARE_CHECK before the topic level made the topic ready: the destination's partition may not
# exist yet (its topic is created by the topic level, maybe in another table partition's job), so
# nothing is asked and nothing decided. A wait, not a failure: FAILED is for an operator to act on.
TOPIC_NOT_READY = PrepareObservation(topic_ready=False, dest=PartitionOffsets(-1, -1, -1, -1, -1), source_leader_epoch=-1)


def truncation_target(obs: PrepareObservation) -> int:
    """Where the local log is cut before mirroring starts (follower divergence semantics), at
    most at the source's consistent cut: the source never kept what lies after it."""
    target = _epoch_target(obs)
    return target if obs.source_cut is None else min(target, obs.source_cut)


def _epoch_target(obs: PrepareObservation) -> int:
    src = obs.source_epoch_end
    if obs.source_lme is None or src is None or src.undefined:
        return 0
    local = obs.local_epoch_end
    if local is None or local.undefined:
        # The local log knows no epoch at or below the source's: keep at most what the source has.
        return min(src.end_offset, obs.dest.leo)
    if local.epoch != src.epoch:
        # We never had the source's epoch: cut where our older epoch ends; the fetcher's
        # divergence check takes it from there, as a follower's next OffsetsForLeaderEpoch would.
        return min(local.end_offset, obs.dest.leo)
    return min(src.end_offset, local.end_offset)


def start(state: MirrorPartitionState, now_ms: int) -> MirrorPartitionState:
    """UNKNOWN/STOPPED/FAILED -> PREPARING at its first step."""
    return transition(state, MirrorState.PREPARING, now_ms, step=Step.PREPARE_CHECK)


def decide_prepare(
    state: MirrorPartitionState, tp: TopicPartition, obs: PrepareObservation, now_ms: int, config: MirrorConfig
) -> Decision:
    dle = obs.dest.leader_epoch
    if state.step in (Step.NONE, Step.PREPARE_CHECK):
        if not obs.topic_ready:
            return unchanged(state)
        target = truncation_target(obs)
        commands: tuple[Command, ...] = ()
        if target < obs.dest.log_start:
            commands = (TruncateFullyAndStartAt(tp, target),)
        elif target < obs.dest.leo:
            commands = (TruncateTo(tp, target),)
        nxt = advance(state, leader_epoch=dle, step=Step.PREPARE_WAIT_ISR, truncation_offset=target)
        return Decision(nxt, commands)
    # PREPARE_WAIT_ISR
    if obs.dest.leo > state.truncation_offset:
        # Someone appended after our cut (a late transaction marker, thread AS30): cut again.
        return unchanged(state, TruncateTo(tp, state.truncation_offset))
    isr = obs.isr
    if isr is None or not isr.isr_truncated_to(state.truncation_offset, all_replicas=config.support_unclean_leader_election):
        return unchanged(state)
    bump = proactive_bump(tp, dle, obs.source_leader_epoch, config)
    commands = (bump,) if bump is not None else ()
    epoch = bump.min_epoch if bump is not None else dle
    nxt = transition(
        state, MirrorState.MIRRORING, now_ms, leader_epoch=epoch, truncation_offset=state.truncation_offset
    )
    return Decision(nxt, commands + (AddFetcher(tp),))
