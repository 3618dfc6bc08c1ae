"""Pause and resume.

PAUSING removes the partition from its fetch session; PAUSED follows once the fetcher no longer
holds it. A paused partition neither fetches nor takes part in the metadata sync (no epoch check,
no config or group offset sync) and stays read-only. Resume (a START on a PAUSED partition) goes
straight back to MIRRORING: the fetcher starts from the local LEO, with the divergence check of
its first fetch covering anything that changed on the source meanwhile.
"""

from __future__ import annotations

from coordinator.partition_state import MirrorPartitionState, transition
from coordinator.ports import TopicPartition
from coordinator.states import MirrorState
from coordinator.workflows.commands import AddFetcher, Decision, RemoveFetcher, unchanged


def pause(state: MirrorPartitionState, tp: TopicPartition, now_ms: int) -> Decision:
    """MIRRORING -> PAUSING, removing the fetcher."""
    return Decision(transition(state, MirrorState.PAUSING, now_ms), (RemoveFetcher(tp),))


def decide_pausing(state: MirrorPartitionState, tp: TopicPartition, in_fetcher: bool, now_ms: int) -> Decision:
    """PAUSING -> PAUSED once the fetcher let go of the partition (removal is idempotent)."""
    if in_fetcher:
        return unchanged(state, RemoveFetcher(tp))
    return Decision(transition(state, MirrorState.PAUSED, now_ms))


def resume(state: MirrorPartitionState, tp: TopicPartition, now_ms: int) -> Decision:
    """PAUSED -> MIRRORING from the local LEO."""
    return Decision(transition(state, MirrorState.MIRRORING, now_ms), (AddFetcher(tp),))
