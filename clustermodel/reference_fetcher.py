"""A reference mirror fetcher over the ports, for tests and demos (the coordinator has its own).

It does what KIP-1279's mirror fetcher does for one partition, in the simplest way: fetch
up to the source HW (read_uncommitted, as a follower) from the destination LEO with the destination's latest epoch as
lastFetchedEpoch; on a diverging epoch truncate as a Kafka follower does
(``min(leader end offset, own end offset for that epoch)``) and fetch again; below the source
log start truncate fully and restart there; bump the DLE before appending a batch whose epoch
is above it (epoch fencing).
"""

from __future__ import annotations

from coordinator.ports import (
    UNDEFINED_EPOCH,
    DestinationCluster,
    IsolationLevel,
    OffsetOutOfRange,
    SourceCluster,
    TopicPartition,
)


def mirror_partition(
    source: SourceCluster,
    destination: DestinationCluster,
    tp: TopicPartition,
    max_bytes: int = 1 << 20,
    max_rounds: int = 1000,
) -> int:
    """Copy ``tp`` until the destination has everything below the source HW; returns the destination LEO."""
    for _ in range(max_rounds):
        dest = destination.list_offsets(tp)
        leo = dest.leo
        last_epoch = destination.latest_epoch(tp)
        try:
            result = source.fetch(
                tp, leo, max_bytes, IsolationLevel.READ_UNCOMMITTED,
                last_fetched_epoch=None if last_epoch == UNDEFINED_EPOCH else last_epoch,
            )
        except OffsetOutOfRange as oor:
            if leo < oor.log_start:
                destination.truncate_fully_and_start_at(tp, oor.log_start)
            else:
                destination.truncate_to(tp, oor.leo)
            continue
        diverging = result.diverging_epoch
        if diverging is not None:
            if diverging.undefined:
                destination.truncate_fully_and_start_at(tp, result.log_start)
                continue
            own = destination.end_offset_for_epoch(tp, diverging.epoch)
            if own.epoch == diverging.epoch:
                target = min(own.end_offset, diverging.end_offset, leo)
            else:
                target = min(own.end_offset, leo) if own.end_offset >= 0 else 0
            destination.truncate_to(tp, max(target, 0))
            continue
        if not result.batches:
            return leo
        top = max(b.leader_epoch for b in result.batches)
        if top > dest.leader_epoch:
            destination.bump_leader_epoch(tp, top)
        destination.append_mirror_batches(tp, result.batches)
    raise RuntimeError(f"mirroring {tp} did not converge in {max_rounds} rounds")
