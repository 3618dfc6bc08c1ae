"""The Kafka source port's partition reads: Fetch, ListOffsets and OffsetsForLeaderEpoch, each
batched per leader for a wave of partitions, built with our codec and decoded into port results.

- ``fetch``: Fetch with the current leader epoch and ``last_fetched_epoch``, under
  ``response_max_bytes``; each RecordBatch comes back whole, as raw bytes, CRC checked;
  OFFSET_OUT_OF_RANGE carries no range in Kafka's answer, so ListOffsets gives it;
- ``list_offsets``: ListOffsets earliest, latest READ_UNCOMMITTED (the HW) and latest
  READ_COMMITTED (the LSO);
- ``epoch_end``: OffsetsForLeaderEpoch.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from coordinator.port_types import AbortedTransaction
from coordinator.ports import (
    UNDEFINED_EPOCH,
    Batch,
    EpochEndOffset,
    FetchResult,
    IsolationLevel,
    NotLeader,
    OffsetOutOfRange,
    PartitionMetadata,
    PartitionOffsets,
    PortError,
    TopicPartition,
)
from streams.kafka.connection import KafkaConnection, _Metadata
from streams.kafka.read_ahead import Prefetches, ReadAhead, within
from streams.kafka.wire import (
    CONSUMER_REPLICA_ID,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    NONE,
    NOT_LEADER_OR_FOLLOWER,
    OFFSET_OUT_OF_RANGE,
    CodecRequest,
    KafkaProtocolError,
    UnsupportedApi,
    _n,
    _s,
    port_error,
    split_batches,
)


K = TypeVar("K")


class _OutOfRange:
    """A fetch answered OFFSET_OUT_OF_RANGE; the range is asked with ListOffsets."""


def fetch_args(tp: TopicPartition, fetch_offset: int, max_bytes: int,
               isolation: IsolationLevel = IsolationLevel.READ_COMMITTED, current_leader_epoch: int | None = None,
               last_fetched_epoch: int | None = None) -> tuple[Any, ...]:  # fmt: skip
    """A ``fetch`` call's arguments as one tuple."""
    return (tp, fetch_offset, max_bytes, int(isolation), current_leader_epoch, last_fetched_epoch)


class PartitionReads:
    """Fetch, ListOffsets and OffsetsForLeaderEpoch over ``conn`` (coroutines on its loop)."""

    def __init__(self, conn: KafkaConnection, response_max_bytes: int, ahead: ReadAhead | None = None,
                 prefetch: bool = True) -> None:  # fmt: skip
        self.conn, self.response_max_bytes = conn, response_max_bytes
        self.ahead = ahead if ahead is not None else ReadAhead()
        self.prefetches = Prefetches(response_max_bytes) if prefetch else None

    # ------------------------------------------------------------------ fetch

    async def fetch_many(self, calls: Sequence[tuple[tuple[Any, ...], dict[str, Any]]]) -> list[Any]:
        every = [fetch_args(*a, **kw) for a, kw in calls]
        out: list[Any] = [None] * len(every)
        todo = []
        now = self.conn.loop.time()
        if self.prefetches is not None:
            self.prefetches.expire(now)
        for i, a in enumerate(every):
            served = await self._prefetched(a, now)
            if served is None:
                served = self.ahead.take(a, now)
            if served is None:
                todo.append(i)
            else:
                out[i] = served
        if todo:
            for i, r in zip(todo, await self._fetch_remote([every[i] for i in todo])):
                out[i] = r
        self._prefetch_next(every, out)
        return out

    async def _prefetched(self, a: tuple[Any, ...], now: float) -> FetchResult | None:
        """The answer a prefetch got for exactly this fetch, if it got data (else None: fetched
        the usual way, errors and all)."""
        pf = self.prefetches.pop(a, now) if self.prefetches is not None else None
        if pf is None:
            return None
        got = (await pf.task).get(pf.index)
        if not isinstance(got, FetchResult) or not got.batches or got.diverging_epoch is not None:
            return None
        return got

    def _prefetch_next(self, every: list[tuple[Any, ...]], out: list[Any]) -> None:
        """Sends, one Fetch per leader, the next fetch of each partition answered with data that
        is still behind the HW (READ_UNCOMMITTED; not where read-ahead already holds the next batches)."""
        meta = self.conn.meta
        if self.prefetches is None or meta is None:
            return
        groups: dict[int, list[tuple[Any, ...]]] = defaultdict(list)
        for a, r in zip(every, out):
            tp, isolation = a[0], a[3]
            if (isolation != IsolationLevel.READ_UNCOMMITTED or not isinstance(r, FetchResult) or not r.batches
                    or r.diverging_epoch is not None or r.batches[-1].next_offset >= r.hw
                    or self.ahead.holds((tp, isolation))):  # fmt: skip
                continue
            try:
                leader = meta.leader(tp)[1].leader
            except PortError:
                continue
            last = r.batches[-1]
            groups[leader].append((tp, last.next_offset, a[2], isolation, a[4], last.leader_epoch))
        now = self.conn.loop.time()
        for node, args in groups.items():
            if self.prefetches.room(sum(max(x[2], 1) for x in args)):
                task = self.conn.loop.create_task(self._prefetch(meta, node, args))
                self.prefetches.add(args, task, now)

    async def _prefetch(self, meta: _Metadata, node: int, args: list[tuple[Any, ...]]) -> dict[int, Any]:
        try:
            return await self._fetch_from(meta, node, int(IsolationLevel.READ_UNCOMMITTED), list(range(len(args))), args)
        except Exception:  # noqa: BLE001 - a failed prefetch is fetched again the usual way, and fails there
            return {}

    async def _gather_into(self, out: dict[int, Any], groups: Mapping[K, list[int]],
                           call: Callable[[K, list[int]], Awaitable[dict[int, Any]]]) -> dict[int, Any]:  # fmt: skip
        """One ``call`` a group, all at once, their answers added to ``out``; a call that raised
        gives its error, as a PortError, to every index of its group."""
        answers = await asyncio.gather(*(call(key, idx) for key, idx in groups.items()), return_exceptions=True)
        for idx, answer in zip(groups.values(), answers):
            if isinstance(answer, BaseException):
                answer = answer if isinstance(answer, PortError) else await self.conn.as_port_error(answer)
                out.update({i: answer for i in idx})
            else:
                out.update(answer)
        return out

    async def _fetch_remote(self, args: list[tuple[Any, ...]]) -> list[Any]:
        results: dict[int, Any] = {}

        async def attempt(meta: _Metadata, only: set[int]) -> dict[int, Any]:
            groups: dict[tuple[int, int], list[int]] = defaultdict(list)
            out: dict[int, Any] = {}
            for i in sorted(only):
                tp = args[i][0]
                try:
                    _, part = meta.leader(tp)
                except PortError as e:
                    out[i] = e
                    continue
                groups[(part.leader, int(args[i][3]))].append(i)
            return await self._gather_into(out, groups, lambda key, idx: self._fetch_from(meta, key[0], key[1], idx, args))

        got = await self.conn.with_refresh(attempt, len(args))
        for i, r in enumerate(got):
            results[i] = r
        # OFFSET_OUT_OF_RANGE carries no range in Kafka's answer: ListOffsets gives it.
        oor = [i for i, r in results.items() if isinstance(r, _OutOfRange)]
        if oor:
            offsets = await self.list_offsets_many([args[i][0] for i in oor])
            for i, o in zip(oor, offsets):
                tp = args[i][0]
                results[i] = o if isinstance(o, PortError) else OffsetOutOfRange(tp, args[i][1], o.log_start, o.leo)
        return [results[i] for i in range(len(args))]

    async def _fetch_from(self, meta: _Metadata, node: int, isolation: int, idx: list[int],
                          args: list[tuple[Any, ...]]) -> dict[int, Any]:  # fmt: skip
        by_topic: dict[str, list[int]] = defaultdict(list)
        for i in idx:
            by_topic[meta.partition(args[i][0])[0].name].append(i)
        epochs = {i: (args[i][4] if args[i][4] is not None else meta.partition(args[i][0])[1].leader_epoch) for i in idx}
        total = min(sum(max(args[i][2], 1) for i in idx), self.response_max_bytes)

        def build(version: int) -> Any:
            part, topic = _n("FetchRequest", "FetchPartition"), _n("FetchRequest", "FetchTopic")
            topics = [topic(topic=name, topic_id=meta.by_name[name].topic_id,
                            partitions=[part(partition=args[i][0].partition, current_leader_epoch=epochs[i],
                                             fetch_offset=args[i][1],
                                             last_fetched_epoch=(args[i][5] if args[i][5] is not None
                                                                 and version >= 12 else -1),
                                             log_start_offset=-1, partition_max_bytes=max(args[i][2], 1))
                                        for i in members])
                      for name, members in by_topic.items()]  # fmt: skip
            # Sessionless full fetches (session epoch -1); fields of newer versions only there.
            newer = {"forgotten_topics_data": []} if version >= 7 else {}
            return _s("FetchRequest")(replica_id=CONSUMER_REPLICA_ID, max_wait_ms=0, min_bytes=0, max_bytes=total,
                                      isolation_level=isolation, session_id=0, session_epoch=-1, topics=topics,
                                      **newer)  # fmt: skip

        body = await self.conn.send(node, CodecRequest("Fetch", build, min_version=4))
        out: dict[int, Any] = {}
        if body.error_code:
            err = KafkaProtocolError(f"Fetch from broker {node}: Kafka error code {body.error_code}")
            return {i: err for i in idx}
        answers = {(t.topic, p.partition_index): p for t in body.responses for p in t.partitions}
        for name, members in by_topic.items():
            for i in members:
                tp = args[i][0]
                part = meta.partition(tp)[1]
                p = answers.get((name, tp.partition))
                if p is None:
                    out[i] = NotLeader(tp, part.leader, part.leader_epoch)  # left out of the answer: ask again
                    continue
                try:
                    out[i], rest = self._fetch_result(tp, p, part, epochs[i], isolation, max(args[i][2], 1))
                except PortError as e:
                    out[i] = e
                    continue
                if rest and isolation == IsolationLevel.READ_UNCOMMITTED:
                    self.ahead.keep((tp, isolation), out[i], rest, self.conn.loop.time())
        return out

    @staticmethod
    def _fetch_result(tp: TopicPartition, p: Any, part: PartitionMetadata, request_epoch: int, isolation: int,
                      max_bytes: int) -> tuple[Any, tuple[Batch, ...]]:  # fmt: skip
        """The partition's answer, and the whole batches sent beyond ``max_bytes``."""
        if p.error_code == OFFSET_OUT_OF_RANGE:
            return _OutOfRange(), ()
        if p.error_code != NONE:
            return port_error(tp, p.error_code, "Fetch", request_epoch, part), ()
        diverging = None
        de = getattr(p, "diverging_epoch", None)
        if de is not None and (de.epoch >= 0 or de.end_offset >= 0):
            diverging = EpochEndOffset(de.epoch, de.end_offset)
        every = () if diverging is not None else split_batches(p.records, tp)
        batches = within(every, max_bytes)
        aborted = ()
        if isolation == IsolationLevel.READ_COMMITTED and p.aborted_transactions:
            aborted = tuple(AbortedTransaction(a.producer_id, a.first_offset) for a in p.aborted_transactions)
        lso = p.last_stable_offset if p.last_stable_offset >= 0 else p.high_watermark
        result = FetchResult(batches, p.high_watermark, lso, max(p.log_start_offset, 0), part.leader_epoch, aborted,
                             diverging)  # fmt: skip
        return result, every[len(batches):]

    # ------------------------------------------------------------------ list offsets

    async def list_offsets_many(self, tps: Sequence[TopicPartition]) -> list[Any]:
        async def attempt(meta: _Metadata, only: set[int]) -> dict[int, Any]:
            groups: dict[int, list[int]] = defaultdict(list)
            out: dict[int, Any] = {}
            for i, tp in enumerate(tps):
                if i not in only:
                    continue
                try:
                    groups[meta.leader(tp)[1].leader].append(i)
                except PortError as e:
                    out[i] = e
            return await self._gather_into(out, groups, lambda node, idx: self._offsets_from(meta, node, idx, tps))

        return await self.conn.with_refresh(attempt, len(tps))

    async def _offsets_from(self, meta: _Metadata, node: int, idx: list[int],
                            tps: Sequence[TopicPartition]) -> dict[int, Any]:  # fmt: skip
        by_topic: dict[str, list[int]] = defaultdict(list)
        for i in idx:
            by_topic[meta.partition(tps[i])[0].name].append(i)

        def request(timestamp: int, isolation: int) -> CodecRequest:
            def build(version: int) -> Any:
                part, topic = _n("ListOffsetsRequest", "ListOffsetsPartition"), _n("ListOffsetsRequest", "ListOffsetsTopic")
                topics = [topic(name=name, partitions=[part(partition_index=tps[i].partition,
                                                            current_leader_epoch=meta.partition(tps[i])[1].leader_epoch,
                                                            timestamp=timestamp) for i in members])
                          for name, members in by_topic.items()]  # fmt: skip
                return _s("ListOffsetsRequest")(replica_id=CONSUMER_REPLICA_ID, isolation_level=isolation, topics=topics)

            return CodecRequest("ListOffsets", build, min_version=2)

        bodies = await asyncio.gather(self.conn.send(node, request(EARLIEST_TIMESTAMP, 0)),
                                      self.conn.send(node, request(LATEST_TIMESTAMP, 0)),
                                      self.conn.send(node, request(LATEST_TIMESTAMP, 1)))  # fmt: skip
        found = [{(t.name, p.partition_index): p for t in b.topics for p in t.partitions} for b in bodies]
        out: dict[int, Any] = {}
        for name, members in by_topic.items():
            for i in members:
                tp = tps[i]
                part = meta.partition(tp)[1]
                answers = [f.get((name, tp.partition)) for f in found]
                bad = next((a for a in answers if a is None or a.error_code != NONE), "ok")
                if bad != "ok":
                    code = bad.error_code if bad is not None else NOT_LEADER_OR_FOLLOWER
                    out[i] = port_error(tp, code, "ListOffsets", part.leader_epoch, part)
                    continue
                start, hw, lso = (a.offset for a in answers)
                # A consumer sees no LEO: the source's visible end is its HW.
                out[i] = PartitionOffsets(start, lso, hw, hw, part.leader_epoch)
        return out

    # ------------------------------------------------------------------ epochs

    async def epoch_end(self, tp: TopicPartition, leader_epoch: int | None, current: int | None) -> EpochEndOffset:
        from aiokafka.errors import KafkaError

        async def attempt(meta: _Metadata, only: set[int]) -> dict[int, Any]:
            try:
                topic, part = meta.leader(tp)
            except PortError as e:
                return {0: e}
            epoch = part.leader_epoch if leader_epoch is None else leader_epoch
            cur = part.leader_epoch if current is None else current

            def build(version: int) -> Any:
                p = _n("OffsetForLeaderEpochRequest", "OffsetForLeaderPartition")(
                    partition=tp.partition, current_leader_epoch=cur, leader_epoch=epoch)
                t = _n("OffsetForLeaderEpochRequest", "OffsetForLeaderTopic")(topic=topic.name, partitions=[p])
                return _s("OffsetForLeaderEpochRequest")(replica_id=CONSUMER_REPLICA_ID, topics=[t])

            try:
                body = await self.conn.send(part.leader, CodecRequest("OffsetForLeaderEpoch", build, min_version=2))
            except UnsupportedApi:
                return {0: EpochEndOffset(UNDEFINED_EPOCH, -1)}  # a pre-0.11 broker keeps no epochs
            except (KafkaError, OSError, asyncio.TimeoutError) as e:
                return {0: await self.conn.as_port_error(e)}  # the leader is gone: refresh, retry
            for t in body.topics:
                for p in t.partitions:
                    if p.partition == tp.partition:
                        if p.error_code != NONE:
                            return {0: port_error(tp, p.error_code, "OffsetsForLeaderEpoch", cur, part)}
                        return {0: EpochEndOffset(p.leader_epoch, p.end_offset)}
            return {0: NotLeader(tp, part.leader, part.leader_epoch)}

        got = (await self.conn.with_refresh(attempt, 1))[0]
        if isinstance(got, PortError):
            raise got
        return got
