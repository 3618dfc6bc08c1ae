"""FAILED: entering it, exponential backoff, retrying back towards the previous state, exhaustion.

- ``retry_attempt`` counts the retries already made; the first failure has 0, and the n-th retry
  waits ``min(max, initial * 2**n)`` ms (``mirror.failed.retry.*``).
- ``retry_attempt == -1`` is non-retryable: only a new operator START (a newer desired-state
  record than the one the state applied) re-arms it, with the count back at 0.
- When the attempts are exhausted the state becomes non-retryable and says so in its message.
- The prototype draws full jitter in [0, backoff]; the core takes the jitter as an argument
  (a float in (0, 1], default 1.0) so it stays deterministic; the shell may pass a random one.
- A source that cannot serve a partition (no broker answers, no leader) for
  ``source_unavailable_timeout_ms`` sends it to FAILED (``source_failed``, the prototype's
  ``refreshSourceClusterMetadata``); until then its calls are retried with the client's backoff
  (``source_retry_backoff_ms``). A retry of a FAILED partition first asks the source
  (``probe_source``): while it still fails, the partition stays FAILED with the attempt counted,
  one write per attempt.
"""

from __future__ import annotations

from coordinator.partition_state import (
    NON_RETRYABLE,
    MirrorPartitionState,
    StopCut,
    Step,
    advance,
    transition,
)
from coordinator.ports import FencedLeaderEpoch, NotLeader, PortError, SourceUnavailable, UnknownLeaderEpoch
from coordinator.states import DesiredState, ErrorCode, MirrorState, is_legal_transition
from coordinator.workflows.config import MirrorConfig


def backoff_ms(attempt: int, config: MirrorConfig, jitter: float = 1.0) -> int:
    """The wait before retry number ``attempt`` (0-based), capped at the max backoff."""
    exp = config.failed_retry_initial_backoff_ms * (2 ** min(max(attempt, 0), 62))
    return max(1, int(min(exp, config.failed_retry_max_backoff_ms) * jitter))


def fail(
    state: MirrorPartitionState,
    error_code: ErrorCode,
    message: str,
    now_ms: int,
    config: MirrorConfig,
    *,
    retryable: bool = True,
    jitter: float = 1.0,
) -> MirrorPartitionState:
    """Enter FAILED (legal from anywhere), keeping the resume fields of the state that failed.

    Keeping ``step``/``last_mirrored_epoch``/``stop_offset``/``epoch_target`` matters for STOPPING:
    a retry must resume the stop where it was, not re-record the LME from a log it already bumped.
    """
    attempt = max(state.retry_attempt, 0) if retryable else NON_RETRYABLE
    failed = transition(
        state,
        MirrorState.FAILED,
        now_ms,
        step=state.step,
        truncation_offset=state.truncation_offset,
        stop_offset=state.stop_offset,
        last_mirrored_epoch=state.last_mirrored_epoch,
        epoch_target=state.epoch_target,
        **state.cut_fields,
    )
    retry_at = now_ms + backoff_ms(attempt, config, jitter) if attempt != NON_RETRYABLE else -1
    return failed.with_(
        retry_attempt=attempt,
        error_message=message,
        error_code=error_code,
        retry_at_ms=retry_at,
    )


def retry_target(previous: MirrorState, desired: DesiredState) -> MirrorState:
    """Where a retry goes: the previous state when FAILED may enter it, else the nearest one that may.

    EPOCH_FENCING, PAUSING and PAUSED cannot be entered from FAILED; MIRRORING is the way back to them
    (the fetch re-detects a fence, the pause workflow pauses again). UNKNOWN starts with PREPARING.
    """
    if desired is DesiredState.STOP:
        return MirrorState.STOPPING
    if previous in (MirrorState.EPOCH_FENCING, MirrorState.PAUSING, MirrorState.PAUSED):
        return MirrorState.MIRRORING
    if previous in (MirrorState.UNKNOWN, MirrorState.STOPPED, MirrorState.FAILED):
        return MirrorState.PREPARING
    assert is_legal_transition(MirrorState.FAILED, previous)
    return previous


def retry_due(state: MirrorPartitionState, now_ms: int) -> bool:
    return state.state is MirrorState.FAILED and state.retryable and now_ms >= state.retry_at_ms


def exhausted(state: MirrorPartitionState, config: MirrorConfig) -> bool:
    limit = config.failed_retry_max_attempts
    return limit > 0 and state.retry_attempt >= limit


def leave_failed(
    state: MirrorPartitionState, target: MirrorState, now_ms: int, *, retry_attempt: int, cut: StopCut | None = None
) -> MirrorPartitionState:
    """Transition out of FAILED to ``target``; STOPPING keeps its progress, the others start over
    (a stop that begins here takes its ``--consistent-cut``, if any)."""
    if target is MirrorState.STOPPING and state.previous_state is MirrorState.STOPPING:
        nxt = transition(
            state,
            target,
            now_ms,
            step=state.step,
            stop_offset=state.stop_offset,
            last_mirrored_epoch=state.last_mirrored_epoch,
            epoch_target=state.epoch_target,
            **state.cut_fields,
        )
    elif target is MirrorState.STOPPING and cut is not None:
        nxt = transition(state, target, now_ms, step=Step.STOP_CUT, cut_offset=cut.offset, cut_timestamp=cut.timestamp)
    elif target is MirrorState.STOPPING:
        nxt = transition(state, target, now_ms, step=Step.STOP_REMOVE_FETCHER)
    elif target is MirrorState.PREPARING:
        nxt = transition(state, target, now_ms, step=Step.PREPARE_CHECK)
    else:
        nxt = transition(state, target, now_ms)
    return nxt.with_(retry_attempt=retry_attempt)


def decide_failed(
    state: MirrorPartitionState,
    desired: DesiredState,
    desired_offset: int,
    now_ms: int,
    config: MirrorConfig,
    cut: StopCut | None = None,
) -> MirrorPartitionState:
    """The next state of a FAILED partition (the input itself when nothing is due).

    - STOP wins at once (failover must not wait for a backoff), except for INCONSISTENT_TOPIC_ID:
      the destination topic is not ours, so the coordinator never writes markers into it.
    - A newer operator START/PAUSE re-arms a partition, exhausted or non-retryable included.
    - Otherwise a due retry goes to ``retry_target`` with the attempt counted, or, when the attempts
      are used up, the state becomes non-retryable.
    """
    if state.error_code is ErrorCode.INCONSISTENT_TOPIC_ID and desired_offset <= state.applied_offset:
        return state
    if desired is DesiredState.STOP:
        if state.error_code is ErrorCode.INCONSISTENT_TOPIC_ID:
            return state
        nxt = leave_failed(state, MirrorState.STOPPING, now_ms, retry_attempt=0, cut=cut)
        return nxt.with_(applied_offset=max(desired_offset, state.applied_offset))
    if desired_offset > state.applied_offset:
        nxt = leave_failed(state, retry_target(state.previous_state, desired), now_ms, retry_attempt=0)
        return nxt.with_(applied_offset=desired_offset)
    if not retry_due(state, now_ms):
        return state
    if exhausted(state, config):
        return _exhaust(state)
    return leave_failed(state, retry_target(state.previous_state, desired), now_ms, retry_attempt=state.retry_attempt + 1)


def _exhaust(state: MirrorPartitionState) -> MirrorPartitionState:
    return advance(
        state,
        retry_attempt=NON_RETRYABLE,
        retry_at_ms=-1,
        error_message=f"{state.error_message}; retries exhausted after {state.retry_attempt} attempts",
    )


# ---------------------------------------------------------------------------------------------
# The source failing
# ---------------------------------------------------------------------------------------------

# A source call that fails for a partition is retried as a Kafka consumer or replica fetcher
# retries it: the metadata re-read, the call sent again (to the new leader) after a backoff. A
# broker crash is routine: the controller fences it after broker.session.timeout.ms and elects
# new leaders, and the partition keeps its state meanwhile, its lag showing the delay. Only a
# partition whose source calls have failed for ``source_unavailable_timeout_ms`` in a row (no
# broker answers, no leader is elected, its leader stays unreachable) goes to FAILED.
SOURCE_ERROR_CODES = frozenset({ErrorCode.NETWORK_EXCEPTION, ErrorCode.LEADER_NOT_AVAILABLE,
                                ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH,
                                ErrorCode.UNKNOWN_LEADER_EPOCH})  # fmt: skip
# The states whose work needs the source; a stop or a pause never asks it.
_NEEDS_SOURCE = frozenset({MirrorState.PREPARING, MirrorState.MIRRORING, MirrorState.EPOCH_FENCING})


def source_retry_backoff_ms(streak: int, config: MirrorConfig) -> int:
    """The wait before asking the source again after ``streak`` failed calls in a row (1-based):
    ``retry.backoff.ms`` doubling up to ``retry.backoff.max.ms``, as Kafka's clients (KIP-580)."""
    exp = config.retry_backoff_ms * (2 ** min(max(streak - 1, 0), 30))
    return max(0, min(exp, config.retry_backoff_max_ms))


def source_error_code(error: PortError) -> ErrorCode | None:
    """The Kafka error a failed source call stands for, None when it is no outage of the source
    (an unknown topic, an offset out of range: their own workflows handle them)."""
    if isinstance(error, SourceUnavailable):
        return ErrorCode.NETWORK_EXCEPTION
    if isinstance(error, NotLeader):
        return ErrorCode.LEADER_NOT_AVAILABLE if error.leader < 0 else ErrorCode.NOT_LEADER_OR_FOLLOWER
    if isinstance(error, FencedLeaderEpoch):
        return ErrorCode.FENCED_LEADER_EPOCH
    if isinstance(error, UnknownLeaderEpoch):
        return ErrorCode.UNKNOWN_LEADER_EPOCH
    return None


def source_failed(
    state: MirrorPartitionState,
    error: PortError,
    failing_since_ms: int,
    now_ms: int,
    config: MirrorConfig,
    *,
    jitter: float = 1.0,
) -> MirrorPartitionState | None:
    """The state after a call to the source failed for this partition.

    ``failing_since_ms``: when the first of the partition's source failures in a row happened
    (this one's ``now_ms`` if it is the first). None: not an outage (handle it as any port error);
    ``state`` itself: nothing to write, retry the call after ``source_retry_backoff_ms``; otherwise
    the state to write: FAILED entered (the source failed it for ``source_unavailable_timeout_ms``),
    or, for a FAILED partition whose retry found the source still failing, the attempt counted and
    the next retry scheduled.
    """
    code = source_error_code(error)
    if code is None:
        return None
    message = f"{code.name}: source {error}"
    if state.state is MirrorState.FAILED:
        if not retry_due(state, now_ms):
            return state
        if exhausted(state, config):
            return _exhaust(state.with_(error_message=message, error_code=code))
        attempt = state.retry_attempt + 1
        return advance(state, retry_attempt=attempt, error_message=message, error_code=code,
                       retry_at_ms=now_ms + backoff_ms(attempt, config, jitter))  # fmt: skip
    failing_for = now_ms - failing_since_ms
    if state.state not in _NEEDS_SOURCE or failing_for < config.source_unavailable_timeout_ms:
        return state
    if failing_for > 0:
        message += f" (failing for {failing_for} ms, source.unavailable.timeout.ms={config.source_unavailable_timeout_ms})"
    return fail(state, code, message, now_ms, config, jitter=jitter)


def probe_source(state: MirrorPartitionState, desired: DesiredState, now_ms: int) -> bool:
    """Must the source answer before this FAILED partition retries? Only for a retry towards
    mirroring of a partition the source failed: a stop or a pause needs nothing from it."""
    return desired is DesiredState.START and state.error_code in SOURCE_ERROR_CODES and retry_due(state, now_ms)
