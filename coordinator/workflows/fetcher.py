"""MIRRORING: what to do with one partition's fetch answer, and how a fetch round is budgeted.

Isolation: the fetcher reads like a follower replica (the prototype's ``MirrorFetcherThread``):
READ_UNCOMMITTED, every batch up to the source's high-water mark. Transactional data, COMMIT
and ABORT markers and aborted data are copied byte for byte, whether or not the transaction is
decided yet, and the destination rebuilds its own producer state, LSO and aborted-transactions
index from them, so ``read_committed`` on the destination reads what it reads on the source up
to the copied offset. Lag is source HW minus destination LEO; it reaches 0 while transactions
are open on the source.

Why not up to the LSO (an earlier design in the threads): a transaction whose COMMIT marker
sits above the source's LSO (held back by an older open transaction) would be on the
destination without its marker at failover, and the stop workflow would abort a transaction
the source had committed. Copying to the HW leaves exactly the transactions still open on the
source open on the destination; STOPPING aborts those, once each.

Memory: a fetch round gives each fetcher one response budget (``fetch_response_max_bytes``) shared
by all its partitions, each capped at ``fetch_partition_max_bytes``; the round stops when the
budget is spent and the next round starts after the last partition served (rotation keeps it
fair). Peak memory is ``num_fetchers * fetch_response_max_bytes`` (plus one oversized first batch,
KIP-74), whatever the partition count.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from coordinator.partition_state import MirrorPartitionState, advance
from coordinator.ports import Batch, EpochEndOffset, FetchResult, IsolationLevel, TopicPartition, tp_order
from coordinator.workflows.commands import (
    AppendBatches,
    Command,
    Decision,
    TruncateFullyAndStartAt,
    TruncateTo,
)
from coordinator.workflows.config import MirrorConfig
from coordinator.workflows.fencing import enter_epoch_fencing, proactive_bump

MIRROR_FETCH_ISOLATION = IsolationLevel.READ_UNCOMMITTED


class FetchPosition(msgspec.Struct, frozen=True, gc=False):
    """Where a partition fetches from: the destination LEO, its latest epoch and log start."""

    fetch_offset: int
    last_fetched_epoch: int | None
    log_start: int
    dle: int


class OutOfRange(msgspec.Struct, frozen=True, gc=False):
    """The source answered OffsetOutOfRange: its log start and LEO at that moment."""

    log_start: int
    leo: int


def decide_fetch(
    state: MirrorPartitionState,
    tp: TopicPartition,
    pos: FetchPosition,
    result: FetchResult | OutOfRange,
    now_ms: int,
    config: MirrorConfig,
    local_epoch_end: EpochEndOffset | None = None,
) -> Decision:
    """Append what is safe to append, truncate on divergence or retention, fence on a new epoch.

    On divergence, ``local_epoch_end`` is the destination's OffsetsForLeaderEpoch for the source's
    diverging epoch; the cut is Kafka's follower rule (AbstractFetcherThread): the source's end of
    that epoch capped by ours, or, if we never had that epoch, where our older epochs end (the
    next fetch repeats the check, so each round removes at least one epoch of divergence).
    """
    if isinstance(result, OutOfRange):
        if pos.fetch_offset < result.log_start:
            # Source retention passed us: restart the log at the source's log start.
            return Decision(state, (TruncateFullyAndStartAt(tp, result.log_start),))
        if pos.fetch_offset > result.leo:
            # The source's log got shorter (unclean election): cut ours to its end, as a follower does.
            return Decision(state, (TruncateTo(tp, result.leo),))
        return Decision(state)
    if result.diverging_epoch is not None and result.diverging_epoch.undefined:
        # The source's epoch cache is empty: nothing in common, start over at its log start.
        return Decision(state, (TruncateFullyAndStartAt(tp, result.log_start),))
    if result.diverging_epoch is not None:
        return Decision(state, (TruncateTo(tp, divergence_target(result.diverging_epoch, local_epoch_end, pos)),))
    commands: list[Command] = []
    batches = list(result.batches)
    if batches and batches[0].base_offset < pos.fetch_offset:
        if pos.fetch_offset == pos.log_start:
            # The source's log start is inside this batch (DeleteRecords): start our log at the
            # batch's base offset, as Kafka's follower does on UnexpectedAppendOffset.
            commands.append(TruncateFullyAndStartAt(tp, batches[0].base_offset))
        else:
            batches = [b for b in batches if b.base_offset >= pos.fetch_offset]
    safe, fenced = split_at_fence(batches, pos.dle)
    if safe:
        commands.append(AppendBatches(tp, tuple(safe)))
    if fenced is not None:
        nxt = enter_epoch_fencing(state, fenced.leader_epoch, result.leader_epoch, now_ms, config)
        return Decision(nxt, tuple(commands))
    bump = proactive_bump(tp, pos.dle, result.leader_epoch, config)
    if bump is not None:
        commands.append(bump)
    nxt = state
    if state.retry_attempt > 0 and safe:
        nxt = advance(state, retry_attempt=0)  # progress ends a retry streak
    return Decision(nxt, tuple(commands))


def divergence_target(diverging: EpochEndOffset, local: EpochEndOffset | None, pos: FetchPosition) -> int:
    """Where to cut the local log after the source reported a diverging epoch."""
    if local is None or local.undefined:
        return min(diverging.end_offset, pos.fetch_offset)
    if local.epoch != diverging.epoch:
        # We never had the source's epoch: cut to where our older epoch ends, then ask again.
        return min(local.end_offset, pos.fetch_offset)
    return min(diverging.end_offset, local.end_offset, pos.fetch_offset)


def split_at_fence(batches: Sequence[Batch], dle: int) -> tuple[list[Batch], Batch | None]:
    """The batches that may be appended under ``dle``, and the first one whose epoch is above it."""
    for i, batch in enumerate(batches):
        if batch.leader_epoch > dle:
            return list(batches[:i]), batch
    return list(batches), None


def lag(source_hw: int, dest_leo: int) -> int:
    """Mirror lag in offsets: source HW minus destination LEO (0 when caught up)."""
    return max(0, source_hw - dest_leo)


def fetcher_of(tp: TopicPartition, num_fetchers: int) -> int:
    """The fetcher a partition belongs to; stable across restarts (no per-process hash seed)."""
    return (tp.topic_id.int * 31 + tp.partition) % max(1, num_fetchers)


def round_order(partitions: Sequence[TopicPartition], rotation: int) -> list[TopicPartition]:
    """This round's fetch order: sorted, starting at ``rotation`` (where the last round stopped)."""
    ordered = sorted(partitions, key=tp_order)
    if not ordered:
        return ordered
    k = rotation % len(ordered)
    return ordered[k:] + ordered[:k]


def partition_max_bytes(remaining: int, config: MirrorConfig) -> int:
    """The byte limit of the next partition's fetch: its own cap within what the round has left."""
    return max(0, min(config.fetch_partition_max_bytes, remaining))
