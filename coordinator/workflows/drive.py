"""Route one mirror partition to the workflow its state and its topic's desired state call for.

The desired state is a level: START converges to MIRRORING, PAUSE to PAUSED, STOP to STOPPED.
A workflow in progress finishes what cannot be interrupted (a STOPPING partition stops before a
START takes it to PREPARING; PAUSING becomes PAUSED before a resume), and the rest follows the
SPEC's transition table. Every write records the desired-state record it saw in
``applied_offset``; FAILED uses it to tell a new operator command (which re-arms it) from the
standing one. ``needs`` tells the shell what to observe before calling ``decide_partition``.
"""

from __future__ import annotations

import enum

import msgspec

from coordinator.partition_state import MirrorPartitionKey, MirrorPartitionState, Step, StopCut
from coordinator.ports import PartitionOffsets
from coordinator.retry import decide_failed, probe_source
from coordinator.states import DesiredState, MirrorState
from coordinator.workflows.commands import AddFetcher, Decision, unchanged
from coordinator.workflows.config import MirrorConfig
from coordinator.workflows.fencing import decide_epoch_fencing
from coordinator.workflows.pause import decide_pausing, pause, resume
from coordinator.workflows.prepare import PrepareObservation, decide_prepare, start
from coordinator.workflows.stop import StopObservation, begin_stop, decide_stop


class Need(enum.Enum):
    """The observation a partition's next decision needs."""

    NOTHING = "nothing"
    DEST = "dest"  # destination offsets and leader epoch
    PREPARE = "prepare"  # PrepareObservation
    STOP = "stop"  # StopObservation
    SOURCE = "source"  # the source answers for the partition (a FAILED one's retry), nothing kept


class PartitionObservation(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    in_fetcher: bool = False
    dest: PartitionOffsets | None = None
    prepare: PrepareObservation | None = None
    stop: StopObservation | None = None


# Steps whose decision writes to the destination log from values the step before persisted
# (STOPPING's LME, stop offset and bump target, which could not be recomputed after a crash):
# the state must be durable before that decision runs. Every other step recomputes what it
# needs from the clusters, so a worker may take it before the state it starts from is durable.
# STOP_CUT: what the cut gives up is durable before the truncation removes it.
_DURABLE_BEFORE_NEXT = frozenset({Step.STOP_BUMP_EPOCH, Step.STOP_CUT})


def may_step_before_durable(pending: MirrorPartitionState, durable: MirrorPartitionState | None,
                            proposed: MirrorPartitionState | None = None) -> bool:
    """May a worker act on ``pending`` (written, not yet durable) and propose ``proposed``
    (None: may it decide at all)?

    Not when ``pending``'s step needs to be durable first, and not when it would be a second
    change of state since the durable one (the changelog must hold every state a partition was
    in: UNKNOWN -> PREPARING -> MIRRORING is two writes, however fast it goes). Step changes
    inside one state may be collapsed: each step is idempotent and resumes after a crash.
    """
    if pending.state is MirrorState.STOPPING and pending.step in _DURABLE_BEFORE_NEXT:
        return False
    if proposed is None:
        return True
    before = durable.state if durable is not None else MirrorState.UNKNOWN
    return proposed.state is pending.state or pending.state is before


def needs(state: MirrorPartitionState, desired: DesiredState, now_ms: int) -> Need:
    s = state.state
    if s is MirrorState.STOPPING:
        return Need.STOP
    if desired is DesiredState.STOP:
        return Need.NOTHING  # entering STOPPING needs no observation
    if s is MirrorState.FAILED and probe_source(state, desired, now_ms):
        return Need.SOURCE
    if s is MirrorState.PREPARING:
        return Need.PREPARE
    if s is MirrorState.EPOCH_FENCING:
        return Need.DEST
    return Need.NOTHING


def decide_partition(
    key: MirrorPartitionKey,
    state: MirrorPartitionState,
    desired: DesiredState,
    desired_offset: int,
    obs: PartitionObservation,
    now_ms: int,
    config: MirrorConfig,
    cut: StopCut | None = None,
) -> Decision:
    """``cut``: this partition's part of a ``--consistent-cut`` stop, when the desired STOP carries one."""
    decision = _route(key, state, desired, desired_offset, obs, now_ms, config, cut)
    nxt = decision.state
    if nxt is not state and nxt.applied_offset < desired_offset:
        decision = msgspec.structs.replace(decision, state=nxt.with_(applied_offset=desired_offset))
    return decision


def _route(
    key: MirrorPartitionKey,
    state: MirrorPartitionState,
    desired: DesiredState,
    desired_offset: int,
    obs: PartitionObservation,
    now_ms: int,
    config: MirrorConfig,
    cut: StopCut | None = None,
) -> Decision:
    tp = key.topic_partition
    s = state.state
    if s is MirrorState.FAILED:
        stop_cut = cut if desired is DesiredState.STOP else None
        return Decision(decide_failed(state, desired, desired_offset, now_ms, config, stop_cut))
    if s is MirrorState.STOPPING:
        assert obs.stop is not None, "STOPPING needs a StopObservation"
        return decide_stop(state, key, obs.stop, now_ms, config.stop_group_sync_timeout_ms)
    if desired is DesiredState.STOP:
        if s in (MirrorState.UNKNOWN, MirrorState.STOPPED):
            return unchanged(state)
        return begin_stop(state, tp, now_ms, cut)
    # START or PAUSE
    if s in (MirrorState.UNKNOWN, MirrorState.STOPPED):
        return Decision(start(state, now_ms))
    if s is MirrorState.PREPARING:
        assert obs.prepare is not None, "PREPARING needs a PrepareObservation"
        return decide_prepare(state, tp, obs.prepare, now_ms, config)
    if s is MirrorState.EPOCH_FENCING:
        assert obs.dest is not None, "EPOCH_FENCING needs the destination's leader epoch"
        return decide_epoch_fencing(state, tp, obs.dest.leader_epoch, now_ms)
    if s is MirrorState.MIRRORING:
        if desired is DesiredState.PAUSE:
            return pause(state, tp, now_ms)
        return unchanged(state) if obs.in_fetcher else unchanged(state, AddFetcher(tp))
    if s is MirrorState.PAUSING:
        return decide_pausing(state, tp, obs.in_fetcher, now_ms)
    if s is MirrorState.PAUSED:
        return resume(state, tp, now_ms) if desired is DesiredState.START else unchanged(state)
    return unchanged(state)
