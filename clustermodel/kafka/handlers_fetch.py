"""Fetch (long poll, isolation level, LSO, aborted transactions, leader epoch checks), ListOffsets,
OffsetForLeaderEpoch."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from coordinator.ports import Batch, IsolationLevel, PortError
from records.kafka_envelope import Request
from records.registry import default_schemas

from ..adapter import read_leader_fetch
from ..records import kafka_records

from . import errors as E

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..replica import Partition
    from .context import ListenerContext

S = default_schemas()
_FetchResponse = S.struct("FetchResponse")
_FetchTopic = S.nested("FetchResponse", "FetchableTopicResponse")
_FetchPartition = S.nested("FetchResponse", "PartitionData")
_Aborted = S.nested("FetchResponse", "AbortedTransaction")
_Diverging = S.nested("FetchResponse", "EpochEndOffset")
_FetchLeader = S.nested("FetchResponse", "LeaderIdAndEpoch")
_ListOffsetsResponse = S.struct("ListOffsetsResponse")
_LOTopic = S.nested("ListOffsetsResponse", "ListOffsetsTopicResponse")
_LOPartition = S.nested("ListOffsetsResponse", "ListOffsetsPartitionResponse")
_OFLEResponse = S.struct("OffsetForLeaderEpochResponse")
_OFLETopic = S.nested("OffsetForLeaderEpochResponse", "OffsetForLeaderTopicResult")
_OFLEPartition = S.nested("OffsetForLeaderEpochResponse", "EpochEndOffset")

EARLIEST, LATEST, MAX_TIMESTAMP = -2, -1, -3


def _leader_partition(cluster: ListenerContext, broker: int, topic: str, index: int) -> tuple[int, Partition | None]:
    """(error code, partition) for a request that must reach the partition's leader."""
    return _leader_of(_partitions_of(cluster, topic), broker, index)


def _partitions_of(cluster: ListenerContext, topic: str) -> Sequence[Partition] | None:
    """The partitions of ``topic`` by name (None: no such topic). Looked up once per topic of a
    request, not per partition: a consumer's full fetch of 500 partitions hashed each topic ID
    (a Python-level ``UUID.__hash__``) twice per partition, each time a write woke it."""
    model = cluster.model
    topic_id = model.topic_ids.get(topic)
    return None if topic_id is None else model.topics[topic_id].partitions


def _leader_of(partitions: Sequence[Partition] | None, broker: int, index: int) -> tuple[int, Partition | None]:
    if partitions is None or not 0 <= index < len(partitions):
        return E.UNKNOWN_TOPIC_OR_PARTITION, None
    part = partitions[index]
    if not part.online:
        return E.LEADER_NOT_AVAILABLE, part
    if part.leader != broker:
        return E.NOT_LEADER_OR_FOLLOWER, part
    return E.NONE, part


def _epoch(value: int) -> int | None:
    return value if value >= 0 else None


# ---------------------------------------------------------------- Fetch


async def fetch(cluster: ListenerContext, broker: int, req: Request) -> object:
    body = req.body
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(0, body.max_wait_ms) / 1000
    keys: list[tuple[int, int]] = []
    while True:
        response, size, errors = _fetch_once(cluster, broker, req, keys)
        remaining = deadline - loop.time()
        if size >= max(1, body.min_bytes) or errors or remaining <= 0:
            return response
        # Parked on its own partitions: another partition's append does not read them all again.
        await cluster.wait_change(remaining, keys)
        if broker not in cluster.model.live:
            return response
        keys = []


def _fetch_once(cluster: ListenerContext, broker: int, req: Request,
                keys: list[tuple[int, int]] | None = None) -> tuple[object, int, bool]:  # fmt: skip
    """The answer, its records' size and whether a partition failed; ``keys`` gets each partition
    read, as (topic ID as an int, partition)."""
    body = req.body
    isolation = IsolationLevel(body.isolation_level) if body.isolation_level in (0, 1) else IsolationLevel.READ_UNCOMMITTED
    budget = body.max_bytes if body.max_bytes > 0 else 0x7FFFFFFF
    total = 0
    errors = False
    topics = []
    for t in body.topics:
        parts = []
        partitions = _partitions_of(cluster, t.topic)
        for p in t.partitions:
            code, part = _leader_of(partitions, broker, p.partition)
            if code:
                errors = True
                leader = _FetchLeader(leader_id=part.leader, leader_epoch=part.leader_epoch) if part is not None else _FetchLeader()
                parts.append(_FetchPartition(partition_index=p.partition, error_code=code, high_watermark=-1,
                                             last_stable_offset=-1, log_start_offset=-1, current_leader=leader, records=None))
                continue
            if keys is not None:
                keys.append((part.tp.topic_id.int, p.partition))
            try:
                r = read_leader_fetch(part, p.fetch_offset, min(p.partition_max_bytes, budget) if total else p.partition_max_bytes,
                                      isolation, _epoch(p.current_leader_epoch), _epoch(p.last_fetched_epoch))
            except PortError as exc:
                errors = True
                log = part.leader_log
                parts.append(_FetchPartition(partition_index=p.partition, error_code=E.code_of(exc), high_watermark=part.hw,
                                             last_stable_offset=part.lso(), log_start_offset=log.log_start,
                                             current_leader=_FetchLeader(leader_id=part.leader, leader_epoch=part.leader_epoch),
                                             records=None))
                continue
            wire = cluster.wire.wire
            chunks = []
            for b in r.batches:
                data = wire(b)
                if total and total + len(data) > budget:
                    break
                chunks.append(data)
                total += len(data)
            aborted = None
            if isolation == IsolationLevel.READ_COMMITTED:
                aborted = [_Aborted(producer_id=a.producer_id, first_offset=a.first_offset) for a in r.aborted_transactions]
            diverging = _Diverging()
            if r.diverging_epoch is not None:
                diverging = _Diverging(epoch=r.diverging_epoch.epoch, end_offset=r.diverging_epoch.end_offset)
            parts.append(_FetchPartition(
                partition_index=p.partition, error_code=E.NONE, high_watermark=r.hw, last_stable_offset=r.lso,
                log_start_offset=r.log_start, diverging_epoch=diverging, aborted_transactions=aborted,
                preferred_read_replica=-1, records=b"".join(chunks),
            ))
        topics.append(_FetchTopic(topic=t.topic, topic_id=t.topic_id, partitions=parts))
    # session_id 0: no incremental fetch session, clients send full fetch requests.
    return _FetchResponse(error_code=E.NONE, session_id=0, responses=topics), total, errors


# ---------------------------------------------------------------- ListOffsets


def list_offsets(cluster: ListenerContext, broker: int, req: Request) -> object:
    body = req.body
    topics = []
    for t in body.topics:
        parts = []
        for p in t.partitions:
            code, part = _leader_partition(cluster, broker, t.name, p.partition_index)
            offset, timestamp, epoch = -1, -1, -1
            if not code:
                try:
                    cluster.model.leader_partition(part.tp, _epoch(p.current_leader_epoch))
                    offset, timestamp, epoch = _offset_for(part, p.timestamp, body.isolation_level)
                except PortError as exc:
                    code = E.code_of(exc)
            parts.append(_LOPartition(partition_index=p.partition_index, error_code=code, timestamp=timestamp,
                                      offset=offset, leader_epoch=epoch))
        topics.append(_LOTopic(name=t.name, partitions=parts))
    return _ListOffsetsResponse(topics=topics)


def _offset_for(part: Partition, timestamp: int, isolation_level: int) -> tuple[int, int, int]:
    log = part.leader_log
    if timestamp == EARLIEST:
        offset = log.log_start
    elif timestamp == LATEST:
        offset = part.lso() if isolation_level == 1 else part.hw
    elif timestamp == MAX_TIMESTAMP:
        return _max_timestamp(part, isolation_level)
    else:
        # The first record stamped at or after the target: batches by their max timestamp, then,
        # for a batch a client produced, its records' own timestamps.
        for b in log.batches:
            if not b.is_control and b.timestamp >= timestamp and b.base_offset < part.hw:
                offset, ts = record_at_or_after(b, timestamp)
                return max(offset, log.log_start), ts, b.leader_epoch
        return -1, -1, -1
    epoch = log.epochs.epoch_for_offset(offset - 1) if offset > log.log_start else log.epochs.epoch_for_offset(offset)
    return offset, -1, part.leader_epoch if epoch is None else epoch


def _max_timestamp(part: Partition, isolation_level: int) -> tuple[int, int, int]:
    """KIP-734, as Kafka's UnifiedLog answers it: the first batch holding the log's largest max
    timestamp (control batches count), then its first record stamped so; none past the HW (LSO)."""
    log = part.leader_log
    best = None
    for b in log.batches:
        if best is None or b.timestamp > best.timestamp:
            best = b
    if best is None:
        return -1, -1, -1
    offset, ts = record_at_or_after(best, best.timestamp)
    if offset >= (part.lso() if isolation_level == 1 else part.hw):
        return -1, -1, -1
    return offset, ts, best.leader_epoch if best.leader_epoch >= 0 else -1


def record_at_or_after(batch: Batch, timestamp: int) -> tuple[int, int]:
    """(offset, timestamp) of the batch's first record stamped at or after ``timestamp``
    (decompressed if need be; with LogAppendTime every record carries the batch's timestamp)."""
    parts = kafka_records(batch.payload)
    if parts is not None and not parts.log_append_time:
        try:
            for r in parts.records():
                if parts.base_timestamp + r.timestamp_delta >= timestamp:
                    return batch.base_offset + r.offset_delta, parts.base_timestamp + r.timestamp_delta
        except ValueError:  # SegmentError is one
            pass
    return batch.base_offset, batch.timestamp


# ---------------------------------------------------------------- OffsetForLeaderEpoch


def offset_for_leader_epoch(cluster: ListenerContext, broker: int, req: Request) -> object:
    topics = []
    for t in req.body.topics:
        parts = []
        for p in t.partitions:
            code, part = _leader_partition(cluster, broker, t.topic, p.partition)
            epoch, end = -1, -1
            if not code:
                try:
                    leader = cluster.model.leader_partition(part.tp, _epoch(p.current_leader_epoch))
                    answer = leader.leader_log.end_offset_for_epoch(p.leader_epoch)
                    epoch, end = answer.epoch, answer.end_offset
                except PortError as exc:
                    code = E.code_of(exc)
            parts.append(_OFLEPartition(error_code=code, partition=p.partition, leader_epoch=epoch, end_offset=end))
        topics.append(_OFLETopic(topic=t.topic, partitions=parts))
    return _OFLEResponse(topics=topics)


HANDLERS = {1: fetch, 2: list_offsets, 23: offset_for_leader_epoch}
