"""The mirror partition states, desired states and KIP-1279 error codes.

State bytes are those of ``MirrorPartitionStateValue.State`` in ``schemas/``; desired states are
those of ``MirrorTopicStateChangeRecord.DesiredState``. This module is pure data: the state
machine and workflows build on it.
"""

from __future__ import annotations

import enum


class MirrorState(enum.IntEnum):
    """A mirror partition's state, encoded as the int8 in ``__mirror_state``."""

    PREPARING = 0  # log alignment (alias LOG_ALIGNMENT / LOG_TRUNCATION)
    EPOCH_FENCING = 1
    MIRRORING = 2
    PAUSING = 3
    PAUSED = 4
    STOPPING = 5
    STOPPED = 6
    FAILED = 7
    UNKNOWN = 16

    @property
    def writable(self) -> bool:
        """Only a STOPPED mirror partition takes appends from producers."""
        return self is MirrorState.STOPPED


LOG_ALIGNMENT = MirrorState.PREPARING

# Target -> the states it may be entered from (SPEC's table). Same-state is always legal,
# and FAILED may be entered from any state.
ALLOWED_FROM: dict[MirrorState, frozenset[MirrorState]] = {
    MirrorState.PREPARING: frozenset({MirrorState.UNKNOWN, MirrorState.STOPPED, MirrorState.FAILED}),
    MirrorState.EPOCH_FENCING: frozenset({MirrorState.MIRRORING}),
    MirrorState.MIRRORING: frozenset(
        {MirrorState.PREPARING, MirrorState.EPOCH_FENCING, MirrorState.PAUSED, MirrorState.FAILED}
    ),
    MirrorState.PAUSING: frozenset({MirrorState.MIRRORING}),
    MirrorState.PAUSED: frozenset({MirrorState.PAUSING}),
    MirrorState.STOPPING: frozenset(
        {
            MirrorState.PREPARING,
            MirrorState.EPOCH_FENCING,
            MirrorState.MIRRORING,
            MirrorState.PAUSING,
            MirrorState.PAUSED,
            MirrorState.FAILED,
        }
    ),
    MirrorState.STOPPED: frozenset({MirrorState.STOPPING}),
    MirrorState.FAILED: frozenset(MirrorState),
    MirrorState.UNKNOWN: frozenset(),
}


def is_legal_transition(current: MirrorState, target: MirrorState) -> bool:
    return current == target or current in ALLOWED_FROM[target]


class DesiredState(enum.IntEnum):
    """``MirrorTopicStateChangeRecord.DesiredState``: what the operator asked for a topic."""

    START = 0  # first mirror, failback, and resume
    STOP = 1  # failover: detach and become writable
    PAUSE = 2


class ErrorCode(enum.IntEnum):
    """Kafka error codes the coordinator returns: the KIP-1279 ones and the reused ones."""

    NONE = 0
    UNKNOWN_SERVER_ERROR = -1
    OFFSET_OUT_OF_RANGE = 1
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    NETWORK_EXCEPTION = 13
    INVALID_TIMESTAMP = 32
    INVALID_TOPIC_EXCEPTION = 17
    INVALID_REQUEST = 42
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNKNOWN_TOPIC_ID = 100
    INCONSISTENT_TOPIC_ID = 103
    FENCED_STATE_EPOCH = 124
    READ_ONLY_TOPIC = 134
    CLUSTER_MIRROR_ALREADY_EXISTS = 136
    UNKNOWN_CLUSTER_MIRROR = 137
    TOPIC_ALREADY_IN_CLUSTER_MIRROR = 138
    TOPIC_NOT_IN_CLUSTER_MIRROR = 139
    MIRROR_TOPIC_ALREADY_PAUSED = 140
    MIRROR_TOPIC_NOT_PAUSED = 141
    MIRROR_TOPIC_BEING_STOPPED = 142
    CLUSTER_MIRROR_NOT_EMPTY = 143
    CLUSTER_MIRROR_AUTHORIZATION_FAILED = 144
    INVALID_CLUSTER_MIRROR_STATES = 145
    MIRROR_TOPIC_NOT_STOPPED = 146
    # Ours, not Kafka's (outside its range): a worker's call carried an owner epoch below the
    # highest the cluster has seen for its group, so a newer owner holds the work (coordinator.fencing).
    OWNER_EPOCH_FENCED = 1279
