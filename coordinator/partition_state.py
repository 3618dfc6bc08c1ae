"""The mirror partition state: a frozen value, its legal transitions, FAILED retries and write fencing.

``MirrorPartitionState`` is the value of one ``__mirror_state`` record (``MirrorPartitionStateValue``)
plus the few fields a workflow needs to resume after a crash (``step``, ``truncation_offset``,
``stop_offset``, ``last_mirrored_epoch``, ``epoch_target``, ``entered_at_ms``, ``retry_at_ms``,
``error_code``), and a ``--consistent-cut`` stop's record of its cut (``CUT_FIELDS``). Schema
fields keep the schema's snake_case names so ``to_schema_fields`` is 1:1.

Every accepted write bumps ``state_epoch``; a write built from a stale view (older state epoch,
or a leader epoch below the stored one) is refused by ``check_write``, as the KIP's
WriteMirrorStates fences outdated requests (thread AS18).
"""

from __future__ import annotations

import enum
import functools
import uuid
from typing import Any

import msgspec

from coordinator.ports import UNDEFINED_EPOCH, UNDEFINED_OFFSET, TopicPartition
from coordinator.states import ErrorCode, MirrorState, is_legal_transition
from records.registry import default_schemas

NON_RETRYABLE = -1  # RetryAttempt -1: FAILED stays until an operator starts the topic again.


class Step(enum.IntEnum):
    """Progress inside a multi-step state, persisted so a restarted coordinator resumes there."""

    NONE = 0
    # PREPARING
    PREPARE_CHECK = 10  # source LME, truncation target, truncate (re-running it truncates to the same offset)
    PREPARE_WAIT_ISR = 12  # every ISR member (every replica when unclean elections are on) truncated
    # STOPPING, in the SPEC's order
    STOP_REMOVE_FETCHER = 20
    STOP_RECORD_LME = 21
    STOP_BUMP_EPOCH = 22
    STOP_ABORT_OPEN = 23
    STOP_PID_RESET = 24
    STOP_WAIT_ISR = 25  # with the last group offset sync, bounded in time
    STOP_CUT = 26  # --consistent-cut: truncate to the cut offset (after STOP_REMOVE_FETCHER, before STOP_RECORD_LME)


class MirrorPartitionKey(msgspec.Struct, frozen=True, order=True, gc=False, cache_hash=True):
    """``MirrorPartitionStateKey`` / ``LastMirrorEpochsKey``: (mirror name, topic ID, partition)."""

    mirror_name: str
    topic_id: uuid.UUID
    partition: int

    @property
    def topic_partition(self) -> TopicPartition:
        return _topic_partition(self)


@functools.lru_cache(maxsize=1 << 18)
def _topic_partition(key: MirrorPartitionKey) -> TopicPartition:
    """One ``TopicPartition`` per key, its hash made once: a new one hashes its UUID in Python
    (``UUID.__hash__``) at its first use as a dict key, and a mass stop uses each partition's
    many times a step. Bounded: beyond 262,144 keys the least recently used are made again."""
    return TopicPartition(key.topic_id, key.partition)


def key_order(key: MirrorPartitionKey) -> tuple[str, int, int]:
    """A sort key giving ``MirrorPartitionKey``'s own order: as plain strings and ints it sorts
    in C (comparing the keys compares their UUIDs in Python, ~1 us each; 200,000 keys take ~2 s)."""
    return (key.mirror_name, key.topic_id.int, key.partition)


class MirrorPartitionState(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One mirror partition's persisted state. ``UNKNOWN_STATE`` is the value before any write."""

    # -- MirrorPartitionStateValue v0 (schema names) --
    state: MirrorState = MirrorState.UNKNOWN
    previous_state: MirrorState = MirrorState.UNKNOWN
    retry_attempt: int = 0
    error_message: str | None = None
    leader_epoch: int = UNDEFINED_EPOCH  # the destination leader epoch (DLE) the writer held
    state_epoch: int = -1
    applied_offset: int = UNDEFINED_OFFSET  # metadata-log offset of the desired-state record applied
    # -- resume fields (tagged fields of the schema) --
    entered_at_ms: int = 0
    step: Step = Step.NONE
    truncation_offset: int = UNDEFINED_OFFSET  # PREPARING: where the local log is cut
    stop_offset: int = UNDEFINED_OFFSET  # STOPPING: LEO when the fetcher was removed; our own writes start here
    last_mirrored_epoch: int = UNDEFINED_EPOCH  # STOPPING: the LME recorded in __mirror_state
    epoch_target: int = UNDEFINED_EPOCH  # EPOCH_FENCING/STOPPING: bump the DLE to at least this
    retry_at_ms: int = -1  # FAILED: when the next automatic retry is due
    error_code: ErrorCode = ErrorCode.NONE
    # STOPPING with --consistent-cut (kept through FAILED and into STOPPED: the audit reads them)
    cut_offset: int = UNDEFINED_OFFSET
    cut_timestamp: int = -1
    given_up_end_offset: int = UNDEFINED_OFFSET  # the LEO before the cut, once recorded
    given_up_records: int = -1
    newest_given_up_timestamp: int = -1

    @property
    def cut_fields(self) -> dict[str, int]:
        """The consistent-cut fields, to carry across a transition."""
        return {name: getattr(self, name) for name in CUT_FIELDS}

    @property
    def retryable(self) -> bool:
        return self.retry_attempt != NON_RETRYABLE

    def with_(self, **changes: Any) -> MirrorPartitionState:
        """A copy with ``changes`` (not a transition: no epoch bump, use ``transition``/``advance``)."""
        return msgspec.structs.replace(self, **changes)

    def to_schema_fields(self) -> dict[str, Any]:
        """The ``MirrorPartitionStateValue`` fields, 1:1 (the resume fields are tagged ones)."""
        fields = msgspec.structs.asdict(self)
        for name in _ENUM_FIELDS:  # the enum-typed fields as plain ints; the rest as they are
            fields[name] = int(fields[name])
        return fields

    @classmethod
    def from_schema_fields(cls, fields: Any) -> MirrorPartitionState:
        """The inverse of ``to_schema_fields``, from a decoded ``MirrorPartitionStateValue``."""
        return cls(
            state=MirrorState(fields.state),
            previous_state=MirrorState(fields.previous_state),
            retry_attempt=fields.retry_attempt,
            error_message=fields.error_message,
            leader_epoch=fields.leader_epoch,
            state_epoch=fields.state_epoch,
            applied_offset=fields.applied_offset,
            entered_at_ms=fields.entered_at_ms,
            step=Step(fields.step),
            truncation_offset=fields.truncation_offset,
            stop_offset=fields.stop_offset,
            last_mirrored_epoch=fields.last_mirrored_epoch,
            epoch_target=fields.epoch_target,
            retry_at_ms=fields.retry_at_ms,
            error_code=ErrorCode(fields.error_code),
            cut_offset=fields.cut_offset,
            cut_timestamp=fields.cut_timestamp,
            given_up_end_offset=fields.given_up_end_offset,
            given_up_records=fields.given_up_records,
            newest_given_up_timestamp=fields.newest_given_up_timestamp,
        )


UNKNOWN_STATE = MirrorPartitionState()
CUT_FIELDS = ("cut_offset", "cut_timestamp", "given_up_end_offset", "given_up_records", "newest_given_up_timestamp")


class StopCut(msgspec.Struct, frozen=True, gc=False):
    """A partition's part of a ``--consistent-cut`` stop, as the controller appended it with the stop."""

    offset: int
    timestamp: int


class LastMirrorEpoch(msgspec.Struct, frozen=True, gc=False):
    """A ``LastMirrorEpochs`` record to write next to the state: the LME of a stopped partition."""

    key: MirrorPartitionKey
    last_mirror_epoch: int
    applied_offset: int = UNDEFINED_OFFSET


class IllegalTransition(Exception):
    """A transition the SPEC's table forbids; ``error_code`` is the KIP error to return."""

    def __init__(self, current: MirrorState, target: MirrorState, error_code: ErrorCode) -> None:
        super().__init__(f"illegal mirror partition transition {current.name} -> {target.name}")
        self.current = current
        self.target = target
        self.error_code = error_code


def transition_error(current: MirrorState, target: MirrorState) -> ErrorCode:
    """The KIP error for an illegal transition (SPEC's error table), NONE when it is legal."""
    if is_legal_transition(current, target):
        return ErrorCode.NONE
    if current is MirrorState.STOPPING:
        return ErrorCode.MIRROR_TOPIC_BEING_STOPPED
    if target in (MirrorState.PAUSING, MirrorState.PAUSED) and current is MirrorState.PAUSED:
        return ErrorCode.MIRROR_TOPIC_ALREADY_PAUSED
    if target is MirrorState.MIRRORING:
        return ErrorCode.MIRROR_TOPIC_NOT_PAUSED
    if target is MirrorState.PREPARING:
        return ErrorCode.MIRROR_TOPIC_NOT_STOPPED
    return ErrorCode.INVALID_CLUSTER_MIRROR_STATES


def transition(
    current: MirrorPartitionState,
    target: MirrorState,
    now_ms: int,
    *,
    leader_epoch: int | None = None,
    step: Step = Step.NONE,
    **resume_fields: Any,
) -> MirrorPartitionState:
    """Enter ``target``: refuses illegal transitions, records ``previous_state``, bumps ``state_epoch``.

    A same-state transition is legal and keeps ``previous_state`` (it is a re-entry, e.g. a retry).
    Resume fields of the old state are cleared unless passed again.
    """
    if not is_legal_transition(current.state, target):
        raise IllegalTransition(current.state, target, transition_error(current.state, target))
    previous = current.previous_state if target == current.state else current.state
    return MirrorPartitionState(
        state=target,
        previous_state=previous,
        retry_attempt=current.retry_attempt,
        error_message=None,
        leader_epoch=current.leader_epoch if leader_epoch is None else max(leader_epoch, current.leader_epoch),
        state_epoch=current.state_epoch + 1,
        applied_offset=current.applied_offset,
        entered_at_ms=now_ms,
        step=step,
        **resume_fields,
    )


def advance(current: MirrorPartitionState, leader_epoch: int | None = None, **changes: Any) -> MirrorPartitionState:
    """A write inside the same state (a step reached, a target recorded): bumps ``state_epoch`` only."""
    if leader_epoch is not None:
        changes["leader_epoch"] = max(leader_epoch, current.leader_epoch)
    return msgspec.structs.replace(current, state_epoch=current.state_epoch + 1, **changes)


def stamp_applied(state: MirrorPartitionState, desired_offset: int) -> MirrorPartitionState:
    """Record that this write has seen the desired-state record at ``desired_offset``."""
    return state if state.applied_offset >= desired_offset else state.with_(applied_offset=desired_offset)


# ---------------------------------------------------------------------------------------------
# Fencing
# ---------------------------------------------------------------------------------------------


class FenceReason(enum.Enum):
    STALE_LEADER_EPOCH = "stale leader epoch"
    STALE_STATE_EPOCH = "stale state epoch"


class StateWriteFenced(Exception):
    """A state write built from an outdated view; nothing was written."""

    def __init__(self, key: MirrorPartitionKey, reason: FenceReason, stored: int, proposed: int) -> None:
        super().__init__(f"{key}: {reason.value} (stored {stored}, proposed {proposed})")
        self.key = key
        self.reason = reason
        self.stored = stored
        self.proposed = proposed

    @property
    def error_code(self) -> ErrorCode:
        if self.reason is FenceReason.STALE_LEADER_EPOCH:
            return ErrorCode.FENCED_LEADER_EPOCH
        return ErrorCode.FENCED_STATE_EPOCH


def check_write(key: MirrorPartitionKey, stored: MirrorPartitionState | None, proposed: MirrorPartitionState) -> None:
    """Raise StateWriteFenced unless ``proposed`` was derived from ``stored``.

    The proposal must carry a state epoch above the stored one (each writer reads N and writes N+1,
    so of two writers that read N only the first lands) and a leader epoch not below the stored one.
    """
    if stored is None:
        return
    if proposed.leader_epoch < stored.leader_epoch:
        raise StateWriteFenced(key, FenceReason.STALE_LEADER_EPOCH, stored.leader_epoch, proposed.leader_epoch)
    if proposed.state_epoch <= stored.state_epoch:
        raise StateWriteFenced(key, FenceReason.STALE_STATE_EPOCH, stored.state_epoch, proposed.state_epoch)


_ENUM_FIELDS = ("state", "previous_state", "step", "error_code")


_STATE_V0: tuple[Any, Any, bool] | None = None  # (the value's Struct class, its v0 encoder, by position), looked up once
_STATE_FIELDS = MirrorPartitionState.__struct_fields__


def encode_state(state: MirrorPartitionState) -> bytes:
    """The ``MirrorPartitionStateValue`` v0 body, as ``__mirror_state`` holds it (a mass stop
    encodes three per partition: the schema lookups are made once, not per state)."""
    global _STATE_V0
    if _STATE_V0 is None:
        codec = default_schemas().codec("MirrorPartitionStateValue")
        cls = codec.cls
        # The value's fields begin with the state's, in its order (the schema's names, 1:1): a
        # state's field values go in by position, its enums as the ints they are (4x cheaper
        # than a dict of every field by name). Otherwise by name.
        positional = cls.__struct_fields__[: len(_STATE_FIELDS)] == _STATE_FIELDS
        _STATE_V0 = (cls, codec.version_codec(0).encode, positional)
    cls, encode, positional = _STATE_V0
    if positional:
        return encode(cls(*msgspec.structs.astuple(state)))
    return encode(cls(**state.to_schema_fields()))


def decode_state(data: bytes) -> MirrorPartitionState:
    return MirrorPartitionState.from_schema_fields(default_schemas().decode("MirrorPartitionStateValue", data, 0))
