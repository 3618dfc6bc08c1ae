"""A failed port call and the partition it was for: backoff, or FAILED (``coordinator.retry``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from coordinator.partition_state import MirrorPartitionKey, MirrorPartitionState, stamp_applied
from coordinator.ports import FencedOwnerEpoch, PortError, TopicPartition, UnexpectedAppendOffset, UnknownTopicId
from coordinator.retry import fail, source_failed, source_retry_backoff_ms
from coordinator.states import ErrorCode, MirrorState
from coordinator.workflows.config import MirrorConfig
from streams.runner.observers import SourceCallFailed


class ErrorHost(Protocol):
    """What the error handling reads and changes of its runner (``streams.runner.runner.MirrorRunner``)."""

    now_ms: int
    config: MirrorConfig
    jitter: Callable[[], float]
    source_errors: dict[TopicPartition, tuple[int, int]]  # (first failure ms, failures in a row)
    backoff_until: dict[TopicPartition, int]

    def persist(self, key: MirrorPartitionKey, state: MirrorPartitionState) -> bool: ...

    def note(self, message: str) -> None: ...


def on_port_error(r: ErrorHost, key: MirrorPartitionKey, state: MirrorPartitionState, e: PortError, offset: int) -> None:
    """What a failed port call does to a partition: a source outage is retried with the client's
    backoff until ``source.unavailable.timeout.ms`` sends it to FAILED; other retriable errors back off;
    the rest fail the partition. A fenced call (``FencedOwnerEpoch``) changes nothing: its writer
    is not the owner any more, so the step is dropped, with no state write and no retry."""
    if isinstance(e, FencedOwnerEpoch):
        return  # logged once per job by the worker (``streams.worker.mirror_jobs.note_fenced``)
    tp = key.topic_partition
    r.note(f"{tp} in {state.state.name}: {e}")
    if isinstance(e, SourceCallFailed):
        since, streak = r.source_errors.get(tp, (r.now_ms, 0))
        r.source_errors[tp] = (since, streak + 1)
        nxt = source_failed(state, e.cause, since, r.now_ms, r.config, jitter=r.jitter())
        if nxt is state:
            r.backoff_until[tp] = r.now_ms + source_retry_backoff_ms(streak + 1, r.config)
        elif nxt is not None:
            # A retry that found the source still failing keeps the applied offset: a newer
            # operator command it has not acted on must still re-arm the partition.
            r.persist(key, nxt if state.state is MirrorState.FAILED else stamp_applied(nxt, offset))
        if nxt is not None:
            return
        e = e.cause  # no outage of the source (an unknown topic, say): handled as any port error
    if e.retriable or isinstance(e, UnexpectedAppendOffset):
        r.backoff_until[tp] = r.now_ms + r.config.fetch_backoff_ms
        return
    if state.state is MirrorState.FAILED:
        return
    code = ErrorCode.UNKNOWN_TOPIC_ID if isinstance(e, UnknownTopicId) else ErrorCode.UNKNOWN_SERVER_ERROR
    failed = fail(state, code, f"{type(e).__name__}: {e}", r.now_ms, r.config, jitter=r.jitter())
    r.persist(key, stamp_applied(failed, offset))
