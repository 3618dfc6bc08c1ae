"""Reading a topic's partitions up to given offsets as whole record batches, straight from Fetch
responses, on an ``AIOKafkaConsumer``'s connections.

The consumer's own ``getmany`` builds a ``ConsumerRecord`` and does the fetcher's bookkeeping
for every record (~5 us a record); a reader of ``__mirror_state`` wants only each record's key,
value and offset, which the record batch's own iterator (aiokafka's C extension) gives at ~0.5 us.
The consumer stays paused: it gives the positions, the leaders and the connections, and is
sought to where the read ended.

Reads are ``read_committed`` (``__mirror_state`` is written in transactions, one per table
partition's write): the broker answers up to the last stable offset, and the batches of aborted
transactions and control batches (commit and abort markers) are skipped as Kafka's consumer skips
them; a batch's transaction is told by its producer's next marker in the response, and by the
response's ``aborted_transactions`` only where that marker is not in it
(``streams.state.aborted_transactions``). The consumer given must be
``read_committed`` too, so that its end offsets are the LSO a read stops at.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence

import aiokafka.errors as Errors
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.record.memory_records import MemoryRecords

from streams.config import CATCH_UP_FETCH_MAX_WAIT_MS
from streams.state.aborted_transactions import fates

log = logging.getLogger(__name__)
Apply = Callable[[bytes | None, bytes | None, int], None]  # key, value, offset
_FETCH_MAX_BYTES = 64 << 20
_PARTITION_MAX_BYTES = 16 << 20
_RETRY_S = 0.1
_READ_COMMITTED = 1

class RawLogReader:
    def __init__(self, consumer: AIOKafkaConsumer) -> None:
        self.consumer = consumer
        self.client = consumer._client  # the consumer's connections and cluster metadata

    async def read_to(self, tps: Sequence[TopicPartition], ends: Mapping[TopicPartition, int],
                      apply: Apply | Mapping[TopicPartition, Apply]) -> None:  # fmt: skip
        """Every record of ``tps`` from the consumer's position up to ``ends`` (exclusive), in
        offset order per partition, to ``apply`` (or to ``apply[tp]``: one Fetch for partitions
        whose records go apart); the consumer is then positioned after them."""
        positions = {tp: await self.consumer.position(tp) for tp in tps}
        try:
            while True:
                behind = [tp for tp in tps if positions[tp] < ends[tp]]
                if not behind:
                    return
                by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
                for tp in behind:
                    leader = self.client.cluster.leader_for_partition(tp)
                    if leader is None or leader < 0:
                        await self._refresh()
                        break
                    by_leader[leader].append(tp)
                else:
                    await asyncio.gather(*(self._fetch(node, parts, positions, ends, apply)
                                           for node, parts in by_leader.items()))  # fmt: skip
        finally:
            for tp, offset in positions.items():
                self.consumer.seek(tp, offset)

    async def _fetch(self, node: int, tps: list[TopicPartition], positions: dict[TopicPartition, int],
                     ends: Mapping[TopicPartition, int], apply: Apply | Mapping[TopicPartition, Apply]) -> None:  # fmt: skip
        by_topic: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
        for tp in tps:
            by_topic[tp.topic].append((tp.partition, positions[tp], _PARTITION_MAX_BYTES))
        request = FetchRequest(CATCH_UP_FETCH_MAX_WAIT_MS, 1, _FETCH_MAX_BYTES, _READ_COMMITTED, list(by_topic.items()))
        try:
            response = await self.client.send(node, request)
        except Errors.KafkaError as e:
            log.debug("fetch from node %d failed: %r", node, e)
            await self._refresh()
            return
        for topic, partitions in response.topics:
            for partition, error_code, _highwater, *data in partitions:
                tp = TopicPartition(topic, partition)
                error = Errors.for_code(error_code)
                if error is Errors.OffsetOutOfRangeError:  # the log's start moved past it (retention)
                    positions[tp] = (await self.consumer.beginning_offsets([tp]))[tp]
                    continue
                if error is not Errors.NoError:
                    if error.retriable:  # not the leader (any more), unknown yet, storage: look it up again
                        await self._refresh()
                        continue
                    raise error(f"fetch of {tp} at offset {positions[tp]}")
                # v4+: [LSO, (log start,) aborted transactions, (preferred replica,) records]
                aborted = next((d for d in data[:-1] if isinstance(d, list)), None) or []
                to = apply[tp] if isinstance(apply, Mapping) else apply
                positions[tp] = _apply_batches(MemoryRecords(data[-1]), positions[tp], ends[tp], to, aborted)

    async def _refresh(self) -> None:
        await self.client.force_metadata_update()
        await asyncio.sleep(_RETRY_S)


def _apply_batches(records: MemoryRecords, position: int, end: int, apply: Apply,
                   aborted: Sequence[tuple[int, int]] = ()) -> int:  # fmt: skip
    """The committed records of whole batches at or after ``position`` and before ``end``; the
    position after them. ``aborted``: the response's (producer id, first offset) of the aborted
    transactions: a transactional batch is skipped when its producer's next marker in the
    response is an ABORT, kept when it is a COMMIT, and left to ``aborted`` when the marker is
    not in the response (as Java's ``CompletedFetch`` and aiokafka's fetcher decide; a broker may
    list transactions that ended before the fetch: ``streams.state.aborted_transactions``)."""
    batches = []
    while (batch := records.next_batch()) is not None:  # the whole batches of this response
        batches.append(batch)
    fate: dict[int, bool | None] = fates(batches)[0] if aborted else {}
    listed = {pid for pid, _ in aborted}
    pending = sorted(aborted, key=lambda a: a[1])  # by first offset
    aborting: set[int] = set()
    for i, batch in enumerate(batches):
        if position >= end:
            break
        if pending or aborting:
            while pending and pending[0][1] <= batch.base_offset:
                aborting.add(pending.pop(0)[0])
            pid = batch.producer_id
            if batch.is_control_batch:
                if pid in aborting and batch.abort:  # a _ReadMarker: ``fates`` read it
                    aborting.discard(pid)
            elif batch.is_transactional:
                known = fate.get(batch.base_offset)
                if known is None and pid in listed and i > 0:
                    break  # its marker is past this response: the next fetch starts at this batch
                if known is False:
                    aborting.discard(pid)  # its transaction committed: an older abort's listing is stale
                elif known is True:
                    aborting.add(pid)
                if pid in aborting:
                    position = max(position, min(batch.next_offset, end))
                    continue
        if not batch.is_control_batch:
            for r in batch:
                offset = r.offset
                if position <= offset < end:
                    apply(r.key, r.value, offset)
        position = max(position, min(batch.next_offset, end))
    return position
