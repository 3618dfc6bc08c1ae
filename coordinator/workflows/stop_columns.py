"""The stop's common steps decided for many partitions at once (a mass failover's columnar step).

``decide_partition`` routes one partition at a time: a state, an observation object, a
decision object per step. A mass stop takes 200,000 partitions through the same four steps,
so the worker hands the partitions that share a step to these functions as columns (states,
and each observed value as a plain list) and gets back what ``decide_partition`` would have
decided for each: entering STOPPING (no ``--consistent-cut``), STOP_RECORD_LME, STOP_BUMP_EPOCH
and STOP_WAIT_ISR. Every other state, step and desired state stays on the per-partition path.
``tests/workflows/test_workflows_stop_columns.py`` holds each to ``decide_partition``.

A state is built with one constructor or ``replace`` per partition (what ``transition``,
``advance`` and the applied-offset stamp would make in three); the decisions are the same values.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from coordinator.partition_state import LastMirrorEpoch, MirrorPartitionKey, MirrorPartitionState, Step
from coordinator.ports import UNDEFINED_EPOCH, OpenTransaction, PartitionOffsets, TopicPartition
from coordinator.states import MirrorState, is_legal_transition
from coordinator.workflows.commands import (
    BumpLeaderEpoch,
    Command,
    Decision,
    RemoveFetcher,
    SetLastMirroredEpoch,
)
from coordinator.workflows.stop import FinalSync, abort_markers, stop_markers

# The states a desired STOP takes into STOPPING through ``begin_stop`` (FAILED goes through its
# retry, UNKNOWN and STOPPED stay): each must be a legal transition, which ``transition`` checks.
ENTERS = frozenset({MirrorState.MIRRORING, MirrorState.PREPARING, MirrorState.EPOCH_FENCING, MirrorState.PAUSING,
                    MirrorState.PAUSED})  # fmt: skip
assert all(is_legal_transition(s, MirrorState.STOPPING) for s in ENTERS)
assert is_legal_transition(MirrorState.STOPPING, MirrorState.STOPPED)

_STOPPING, _STOPPED = MirrorState.STOPPING, MirrorState.STOPPED
_replace = msgspec.structs.replace


def enter_stops(states: Sequence[MirrorPartitionState], now_ms: int,
                desired_offsets: Sequence[int]) -> list[MirrorPartitionState]:  # fmt: skip
    """``begin_stop`` with no cut, for states in ``ENTERS``: each at STOP_RECORD_LME (its
    command is ``RemoveFetcher`` of its partition, the same for all)."""
    record_lme = Step.STOP_RECORD_LME
    return [MirrorPartitionState(state=_STOPPING, previous_state=s.state, retry_attempt=s.retry_attempt,
                                 leader_epoch=s.leader_epoch, state_epoch=s.state_epoch + 1,
                                 applied_offset=max(s.applied_offset, offset), entered_at_ms=now_ms,
                                 step=record_lme) for s, offset in zip(states, desired_offsets)]  # fmt: skip


def record_lmes(keys: Sequence[MirrorPartitionKey], tps: Sequence[TopicPartition],
                states: Sequence[MirrorPartitionState], dests: Sequence[PartitionOffsets],
                latest: Sequence[int], in_fetcher: Sequence[bool], desired_offsets: Sequence[int]) -> list[Decision]:  # fmt: skip
    """STOP_RECORD_LME: ``latest`` is the destination's ``latest_epoch`` answer (< 0: none)."""
    out = []
    bump = Step.STOP_BUMP_EPOCH
    for key, tp, s, dest, epoch, fetching, offset in zip(keys, tps, states, dests, latest, in_fetcher, desired_offsets):
        if fetching:
            out.append(Decision(s, (RemoveFetcher(tp),)))
            continue
        lme = epoch if epoch >= 0 else UNDEFINED_EPOCH
        dle = dest.leader_epoch
        nxt = _replace(s, state_epoch=s.state_epoch + 1, leader_epoch=max(dle, s.leader_epoch), step=bump,
                       last_mirrored_epoch=lme, stop_offset=dest.leo, epoch_target=max(dle, lme) + 1,
                       applied_offset=max(s.applied_offset, offset))  # fmt: skip
        publish = SetLastMirroredEpoch(key.mirror_name, tp, lme if lme != UNDEFINED_EPOCH else None,
                                       s.cut_offset if s.cut_offset >= 0 else None)  # fmt: skip
        out.append(Decision(nxt, (publish,), LastMirrorEpoch(key, lme, s.applied_offset)))
    return out


def bump_epochs(tps: Sequence[TopicPartition], states: Sequence[MirrorPartitionState],
                dests: Sequence[PartitionOffsets], opens: Sequence[tuple[OpenTransaction, ...]],
                source_ids: Sequence[str], desired_offsets: Sequence[int]) -> list[Decision]:  # fmt: skip
    """STOP_BUMP_EPOCH: the bump, the aborts and the reset (``decide_stop``)."""
    out = []
    wait_isr, pid_reset = Step.STOP_WAIT_ISR, Step.STOP_PID_RESET
    for tp, s, dest, open_txns, source_id, offset in zip(tps, states, dests, opens, source_ids, desired_offsets):
        dle, target = dest.leader_epoch, s.epoch_target
        bump: tuple[Command, ...] = () if dle >= target else (BumpLeaderEpoch(tp, target),)
        leader_epoch = max(dle, target, s.leader_epoch)
        applied = max(s.applied_offset, offset)
        if dest.leo == s.stop_offset:
            commands = (*bump, *stop_markers(tp, open_txns, source_id))
            step = wait_isr
        else:
            commands = bump + abort_markers(tp, open_txns)
            step = pid_reset
        nxt = _replace(s, state_epoch=s.state_epoch + 1, leader_epoch=leader_epoch, step=step, applied_offset=applied)
        out.append(Decision(nxt, commands))
    return out


def wait_isrs(states: Sequence[MirrorPartitionState], caught_up: Sequence[bool],
              final_sync: Sequence[FinalSync | None], now_ms: int, group_sync_timeout_ms: int,
              desired_offsets: Sequence[int]) -> list[MirrorPartitionState]:  # fmt: skip
    """STOP_WAIT_ISR (``wait_isr``): STOPPED, or the state itself where it waits (no command either way)."""
    out = []
    failed = FinalSync.FAILED
    for s, isr_done, final, offset in zip(states, caught_up, final_sync, desired_offsets):
        if not isr_done or final is None or (final is failed and now_ms < s.entered_at_ms + group_sync_timeout_ms):
            out.append(s)
            continue
        out.append(MirrorPartitionState(
            state=_STOPPED, previous_state=_STOPPING, retry_attempt=0, leader_epoch=s.leader_epoch,
            state_epoch=s.state_epoch + 1, applied_offset=max(s.applied_offset, offset), entered_at_ms=now_ms,
            last_mirrored_epoch=s.last_mirrored_epoch, stop_offset=s.stop_offset, epoch_target=s.epoch_target,
            cut_offset=s.cut_offset, cut_timestamp=s.cut_timestamp, given_up_end_offset=s.given_up_end_offset,
            given_up_records=s.given_up_records, newest_given_up_timestamp=s.newest_given_up_timestamp))  # fmt: skip
    return out
