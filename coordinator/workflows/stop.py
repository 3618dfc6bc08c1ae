"""STOPPING (failover): detach a mirror partition from its source and make it writable.

The SPEC's order, one persisted step each:

1. STOP_REMOVE_FETCHER: remove the partition from its fetch session (no more appends from the source).
   Entering STOPPING does it at once (``begin_stop``); a state at this step (a FAILED stop's
   retry, or one persisted by an earlier version) still resumes here.
1a. STOP_CUT, only for a ``--consistent-cut`` stop (``coordinator.cut``; the cut offset and T
   came with the stop's record on the metadata log): first record what the cut gives up (the
   range ``[cut_offset, LEO)``, its data records and newest timestamp) in the state, then, once
   that is durable, truncate the log to the cut offset and wait for the ISR to have truncated
   too. The LME is recorded after it, so it is the epoch of the last record kept, and a
   failback's truncation to the LME's end lands on the cut (``prepare.truncation_target``).
2. STOP_RECORD_LME: the LME is the epoch of the last mirrored batch (the destination's
   OffsetsForLeaderEpoch for its own leader epoch); it is written to ``__mirror_state`` as a
   LastMirrorEpochs record and published with ``set_last_mirrored_epoch``. The LEO at that moment
   (``stop_offset``) and the bump target (``epoch_target``) are persisted with it: from here on the
   log only grows by the coordinator's own writes, so recomputing after a crash would be wrong
   (the latest epoch is the bumped one) and is never done.
3. STOP_BUMP_EPOCH: raise the DLE to at least ``max(DLE, LME) + 1`` so the coordinator's markers and
   every later local write start a new epoch: that boundary is what failback truncates to.
4. STOP_ABORT_OPEN: an ABORT marker for each transaction the destination still reports open (with the
   transaction's producer epoch, as the transaction coordinator would). Re-running aborts only
   what is still open, so no marker is written twice.
5. STOP_PID_RESET: a MIRROR_PID_RESET control batch carrying the source cluster ID, unless the
   coordinator's own tail of the log (``[stop_offset, LEO)``, which no producer can write while the
   topic is read-only) already holds one: at most one per stop. The tail is read once the HW has
   reached the LEO (a fetch reads below the HW), so a reset written just before a crash is seen.
6. STOP_WAIT_ISR: wait until the ISR has everything (HW = LEO on every ISR member), and for one
   last consumer- and share-group offset sync, so offsets committed on the source since the last
   periodic sync are not lost with the failover. The shell runs that sync while partitions are at
   this step (``final_sync``): the destination's log is final here, so the clamp to its LEO holds.
   A failed sync is tried again until ``stop_group_sync_timeout_ms`` after the stop began, then the
   failover goes on without it (a source that is down costs the failover that long at most, a
   source that blinks loses no offsets). It is not a step of its own: a persisted step would cost
   every partition one more durable write, and a sync run again after a crash is harmless.
7. STOPPED: the topic workflow makes the topic writable once all its partitions are STOPPED.

Steps 3 to 5 are decided together at STOP_BUMP_EPOCH, in their order: only the coordinator
writes to a STOPPING partition, so the transactions open before the bump are those open after
it, and a log that still ends at ``stop_offset`` holds no reset of ours. Two observations and
decisions per partition fewer (a 200,000-partition failover is 400,000 of each). Once the log
has grown past ``stop_offset`` (a crash after some of those commands), the aborts still open are
written and the reset waits for STOP_PID_RESET, which reads the tail first; a state persisted at
STOP_ABORT_OPEN or STOP_PID_RESET resumes there.
"""

from __future__ import annotations

import enum

import msgspec

from coordinator.partition_state import (
    LastMirrorEpoch,
    MirrorPartitionKey,
    MirrorPartitionState,
    Step,
    StopCut,
    advance,
    transition,
)
from coordinator.ports import (
    UNDEFINED_EPOCH,
    Batch,
    ControlType,
    EpochEndOffset,
    IsrStatus,
    OpenTransaction,
    PartitionOffsets,
    TopicPartition,
)
from coordinator.states import MirrorState
from coordinator.workflows.commands import (
    AppendControl,
    BumpLeaderEpoch,
    Command,
    Decision,
    RemoveFetcher,
    SetLastMirroredEpoch,
    TruncateTo,
    unchanged,
)


class FinalSync(enum.IntEnum):
    """How STOPPING's last group offset sync went."""

    RAN = 0
    FAILED = 1  # tried again until the bound


class StopObservation(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """What STOPPING reads from the destination (the source may be gone: a failover needs none of it)."""

    dest: PartitionOffsets | None  # None at STOP_WAIT_ISR: its decision reads the ISR's status, not the offsets
    dest_latest_epoch: EpochEndOffset | None = None  # OffsetsForLeaderEpoch(DLE) on the destination
    open_transactions: tuple[OpenTransaction, ...] = ()
    tail: tuple[Batch, ...] | None = None  # destination batches in [stop_offset, LEO); None until readable
    isr: IsrStatus | None = None
    in_fetcher: bool = False
    source_cluster_id: str = ""
    final_sync: FinalSync | None = None  # STOP_WAIT_ISR: how the last group sync went; None: not tried
    cut_tail: tuple[Batch, ...] | None = None  # STOP_CUT: destination batches in [cut_offset, LEO)


def begin_stop(state: MirrorPartitionState, tp: TopicPartition, now_ms: int, cut: StopCut | None = None) -> Decision:
    """Enter STOPPING (legal from every state but UNKNOWN and STOPPED), its first step done with
    it: the fetcher goes as the partition enters, so the state starts at STOP_RECORD_LME (a step
    less to observe and decide per partition; removing a fetcher is local and idempotent), or
    at STOP_CUT for a ``--consistent-cut`` stop."""
    if cut is not None:
        nxt = transition(state, MirrorState.STOPPING, now_ms, step=Step.STOP_CUT, cut_offset=cut.offset,
                         cut_timestamp=cut.timestamp)  # fmt: skip
        return Decision(nxt, (RemoveFetcher(tp),))
    return Decision(transition(state, MirrorState.STOPPING, now_ms, step=Step.STOP_RECORD_LME), (RemoveFetcher(tp),))


def given_up(tail: tuple[Batch, ...], cut_offset: int) -> tuple[int, int]:
    """The data records of ``tail`` at or after the cut, and their newest timestamp (-1: none)."""
    data = [b for b in tail if b.base_offset >= cut_offset and not b.is_control]
    return sum(b.record_count for b in data), max((b.timestamp for b in data), default=-1)


def decide_cut(state: MirrorPartitionState, tp: TopicPartition, obs: StopObservation) -> Decision:
    """STOP_CUT: record what the cut gives up, then (that durable) truncate and wait for the ISR."""
    assert obs.dest is not None, "STOP_CUT reads the destination's offsets"
    dle, cut, leo = obs.dest.leader_epoch, state.cut_offset, obs.dest.leo
    if obs.in_fetcher:
        return unchanged(state, RemoveFetcher(tp))
    if state.given_up_end_offset < 0:
        if leo <= cut:  # nothing past the cut (a log shorter than planned keeps what it has)
            return Decision(advance(state, leader_epoch=dle, given_up_end_offset=leo, given_up_records=0))
        if obs.cut_tail is None:
            return unchanged(state)
        records, newest = given_up(obs.cut_tail, cut)
        return Decision(advance(state, leader_epoch=dle, given_up_end_offset=leo, given_up_records=records,
                                newest_given_up_timestamp=newest))  # fmt: skip
    if leo > cut:
        return unchanged(state, TruncateTo(tp, cut))
    if obs.isr is None or not obs.isr.isr_truncated_to(cut):
        return unchanged(state)
    return Decision(advance(state, leader_epoch=dle, step=Step.STOP_RECORD_LME))


def has_pid_reset(tail: tuple[Batch, ...]) -> bool:
    """True when the tail holds a MIRROR_PID_RESET batch (our own, from before a crash)."""
    return any(b.is_control and b.control_type == ControlType.MIRROR_PID_RESET for b in tail)


def abort_markers(tp: TopicPartition, open_transactions: tuple[OpenTransaction, ...]) -> tuple[AppendControl, ...]:
    """The ABORT markers a stop writes: one per transaction still open on the destination, with
    its producer epoch (as the transaction coordinator would). ``coordinator.impact`` previews
    the same choice."""
    return tuple(AppendControl(tp, ControlType.ABORT, t.producer_id, t.producer_epoch) for t in open_transactions)


def stop_markers(tp: TopicPartition, open_transactions: tuple[OpenTransaction, ...],
                 source_cluster_id: str) -> tuple[AppendControl, ...]:
    """What a stop appends to a partition's log in one go: the aborts, then one MIRROR_PID_RESET
    (a control batch each, one offset each): the preview counts the LEO the last group sync clamps to from it."""
    reset = AppendControl(tp, ControlType.MIRROR_PID_RESET, source_cluster_id=source_cluster_id)
    return (*abort_markers(tp, open_transactions), reset)


def decide_stop(
    state: MirrorPartitionState, key: MirrorPartitionKey, obs: StopObservation, now_ms: int,
    group_sync_timeout_ms: int = 3_000,
) -> Decision:
    step = state.step
    if step is Step.STOP_WAIT_ISR:
        return wait_isr(state, obs, now_ms, group_sync_timeout_ms)
    tp = key.topic_partition
    assert obs.dest is not None, "a stop step before the ISR wait reads the destination's offsets"
    dle = obs.dest.leader_epoch
    if step in (Step.NONE, Step.STOP_REMOVE_FETCHER):
        nxt_step = Step.STOP_CUT if state.cut_offset >= 0 and state.given_up_end_offset < 0 else Step.STOP_RECORD_LME
        return Decision(advance(state, leader_epoch=dle, step=nxt_step), (RemoveFetcher(tp),))
    if step is Step.STOP_CUT:
        return decide_cut(state, tp, obs)
    if step is Step.STOP_RECORD_LME:
        if obs.in_fetcher:
            return unchanged(state, RemoveFetcher(tp))
        latest = obs.dest_latest_epoch
        lme = latest.epoch if latest is not None and not latest.undefined else UNDEFINED_EPOCH
        target = max(dle, lme) + 1
        nxt = advance(
            state,
            leader_epoch=dle,
            step=Step.STOP_BUMP_EPOCH,
            last_mirrored_epoch=lme,
            stop_offset=obs.dest.leo,
            epoch_target=target,
        )
        record = LastMirrorEpoch(key, lme, state.applied_offset)
        publish = SetLastMirroredEpoch(key.mirror_name, tp, lme if lme != UNDEFINED_EPOCH else None,
                                       state.cut_offset if state.cut_offset >= 0 else None)  # fmt: skip
        return Decision(nxt, (publish,), record)
    bump: tuple[Command, ...] = () if dle >= state.epoch_target else (BumpLeaderEpoch(tp, state.epoch_target),)
    aborts = abort_markers(tp, obs.open_transactions)
    if step is Step.STOP_BUMP_EPOCH:
        # The bump, the aborts and the reset in one step, as their own steps would write them:
        # while STOPPING only the coordinator writes to the partition, so the transactions open
        # before the bump are the ones open after it, and a log still ending at the stop offset
        # holds no reset of ours yet. Once the coordinator has written (a crash after some of
        # these commands), the reset waits for its step, which reads the tail first.
        leader_epoch = max(dle, state.epoch_target)
        if obs.dest.leo == state.stop_offset:
            markers = stop_markers(tp, obs.open_transactions, obs.source_cluster_id)
            return Decision(advance(state, leader_epoch=leader_epoch, step=Step.STOP_WAIT_ISR), (*bump, *markers))
        return Decision(advance(state, leader_epoch=leader_epoch, step=Step.STOP_PID_RESET), bump + aborts)
    if step is Step.STOP_ABORT_OPEN:
        return Decision(advance(state, step=Step.STOP_PID_RESET), bump + aborts)
    if step is Step.STOP_PID_RESET:
        if obs.tail is None:
            return unchanged(state, *bump)  # the tail is readable once HW = LEO; wait for it
        reset: tuple[Command, ...] = ()
        if not has_pid_reset(obs.tail):
            reset = (AppendControl(tp, ControlType.MIRROR_PID_RESET, source_cluster_id=obs.source_cluster_id),)
        return Decision(advance(state, step=Step.STOP_WAIT_ISR), bump + reset)
    return wait_isr(state, obs, now_ms, group_sync_timeout_ms)


def wait_isr(state: MirrorPartitionState, obs: StopObservation, now_ms: int, group_sync_timeout_ms: int) -> Decision:
    """STOP_WAIT_ISR: STOPPED once every ISR member has everything and the last group sync ran
    (or failed for longer than its bound)."""
    if obs.isr is None or not obs.isr.isr_caught_up():
        return unchanged(state)
    if obs.final_sync is None:
        return unchanged(state)  # not tried yet
    if obs.final_sync is FinalSync.FAILED and now_ms < state.entered_at_ms + group_sync_timeout_ms:
        return unchanged(state)  # the source did not answer: again next round, within the bound
    stopped = transition(
        state,
        MirrorState.STOPPED,
        now_ms,
        last_mirrored_epoch=state.last_mirrored_epoch,
        stop_offset=state.stop_offset,
        epoch_target=state.epoch_target,
        **state.cut_fields,
    )
    return Decision(stopped.with_(retry_attempt=0))
