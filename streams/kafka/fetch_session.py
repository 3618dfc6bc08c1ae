"""The Kafka source port's long poll: incremental fetch sessions (KIP-227) over caught-up partitions.

``KafkaSourceCluster.open_watch`` gives a ``KafkaFetchSessions``: the ``fetch_wait`` of the
model server's API (``clustermodel.fetch_sessions``, used by ``streams.runner.data_watch``) over
Fetch v7+, on a connection of its own (Kafka answers one connection's requests in order, so a
parked Fetch would hold up the port's other calls).

Per leader, a session as Kafka's ``FetchSessionHandler`` keeps it: the first request is a full
one (session ID 0, epoch 0) naming every watched partition that broker leads, and its answer
carries the session ID; the next ones are incremental (that ID, the next epoch), naming only the
partitions added or whose position changed, and in ``forgotten_topics_data`` those that left.
``max_wait_ms`` with ``min_bytes`` 1 does the waiting on the broker. A partition the answer
carries with records, an error, or an HW other than its fetch offset has moved: it is reported
and forgotten (the runner fetches it through the port and parks it again once caught up).
FETCH_SESSION_ID_NOT_FOUND (70) and INVALID_FETCH_SESSION_EPOCH (71) reset that leader's
session: the next request is a full one, as ``FetchSessionHandler.handleError`` does.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from coordinator.ports import PortError, TopicPartition
from streams.kafka.connection import KafkaConnection, _Metadata
from streams.kafka.wire import CONSUMER_REPLICA_ID, NONE, CodecRequest, KafkaProtocolError, _n, _s

FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71
INITIAL_EPOCH = 0  # with session ID 0: "start a new session"
_READ_UNCOMMITTED = 0  # the mirror copies up to the HW
_KEEP = 200  # requests remembered in ``requests`` (tests, logs)


def next_epoch(epoch: int) -> int:
    """Kafka's ``FetchMetadata.nextEpoch``: wraps to 1, never back to the initial 0."""
    return 1 if epoch >= 2**31 - 1 else epoch + 1


class _LeaderSession:
    """One leader's fetch session as this side knows it."""

    __slots__ = ("epoch", "sent", "session_id")

    def __init__(self) -> None:
        self.session_id, self.epoch = 0, INITIAL_EPOCH
        self.sent: dict[TopicPartition, tuple[int, int]] = {}  # what the broker's session holds


class KafkaFetchSessions:
    """``fetch_wait`` over Kafka fetch sessions, one per leader (see the module docstring)."""

    def __init__(self, conn: KafkaConnection) -> None:
        self.conn = conn
        self._watched: dict[TopicPartition, tuple[int, int]] = {}
        self._leaders: dict[int, _LeaderSession] = {}
        # (broker, session ID, epoch, partitions named, partitions forgotten, error code) per request
        self.requests: list[tuple[int, int, int, int, int, int]] = []

    def fetch_wait(self, session_id: int, add: Sequence[tuple[TopicPartition, int, int]],
                   remove: Sequence[TopicPartition], max_wait_ms: int) -> tuple[int, list[TopicPartition]]:  # fmt: skip
        return self.conn.run(self._wait(session_id, add, remove, max_wait_ms))

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> KafkaFetchSessions:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def _wait(self, session_id: int, add: Sequence[tuple[TopicPartition, int, int]],
                    remove: Sequence[TopicPartition], max_wait_ms: int) -> tuple[int, list[TopicPartition]]:  # fmt: skip
        if session_id == 0:
            self._watched.clear()  # the caller names everything again (the broker sessions stay: diffed below)
        for tp in remove:
            self._watched.pop(tp, None)
        for tp, offset, epoch in add:
            self._watched[tp] = (offset, epoch)
        meta = await self.conn.metadata()
        moved: list[TopicPartition] = []
        want: dict[int, dict[TopicPartition, tuple[int, int]]] = defaultdict(dict)
        for tp, (offset, epoch) in self._watched.items():
            try:
                _, part = meta.leader(tp)
            except PortError:
                moved.append(tp)  # no leader, unknown topic: the port's fetch says which
                continue
            if part.leader_epoch != epoch:
                moved.append(tp)
            else:
                want[part.leader][tp] = (offset, epoch)
        if not moved:
            nodes = sorted(set(want) | {n for n, s in self._leaders.items() if s.sent})
            if not nodes:
                await asyncio.sleep(max_wait_ms / 1000)
            for got in await asyncio.gather(*(self._poll(meta, n, want.get(n, {}), max_wait_ms) for n in nodes)):
                moved.extend(got)
        for tp in moved:
            self._watched.pop(tp, None)
        return 1, moved

    async def _poll(self, meta: _Metadata, node: int, want: dict[TopicPartition, tuple[int, int]],
                    max_wait_ms: int) -> list[TopicPartition]:  # fmt: skip
        s = self._leaders.setdefault(node, _LeaderSession())
        if s.session_id == 0:  # a full request: a new session
            named, forgotten = dict(want), []
            sid, epoch = 0, INITIAL_EPOCH
        else:
            named = {tp: v for tp, v in want.items() if s.sent.get(tp) != v}
            forgotten = [tp for tp in s.sent if tp not in want]
            sid, epoch = s.session_id, s.epoch
        names = {tp: meta.partition(tp)[0].name for tp in named}
        names.update((tp, _name_of(meta, tp)) for tp in forgotten)

        def build(version: int) -> Any:
            part, topic, gone = (_n("FetchRequest", "FetchPartition"), _n("FetchRequest", "FetchTopic"),
                                 _n("FetchRequest", "ForgottenTopic"))  # fmt: skip
            by_topic: dict[str, list[TopicPartition]] = defaultdict(list)
            for tp in named:
                by_topic[names[tp]].append(tp)
            topics = [topic(topic=name, topic_id=tps[0].topic_id,
                            partitions=[part(partition=tp.partition, current_leader_epoch=named[tp][1],
                                             fetch_offset=named[tp][0], last_fetched_epoch=-1, log_start_offset=-1,
                                             partition_max_bytes=1) for tp in tps])
                      for name, tps in by_topic.items()]  # fmt: skip
            left: dict[str, list[TopicPartition]] = defaultdict(list)
            for tp in forgotten:
                left[names[tp]].append(tp)
            return _s("FetchRequest")(replica_id=CONSUMER_REPLICA_ID, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1,
                                      isolation_level=_READ_UNCOMMITTED, session_id=sid, session_epoch=epoch,
                                      topics=topics,
                                      forgotten_topics_data=[gone(topic=name, topic_id=tps[0].topic_id,
                                                                  partitions=[tp.partition for tp in tps])
                                                             for name, tps in left.items()])  # fmt: skip

        body = await self.conn.send(node, CodecRequest("Fetch", build, min_version=7))
        self.requests.append((node, sid, epoch, len(named), len(forgotten), body.error_code))
        del self.requests[:-_KEEP]
        if body.error_code in (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH):
            self._leaders[node] = _LeaderSession()  # evicted or out of step: the next request is a full one
            return []
        if body.error_code != NONE:
            raise KafkaProtocolError(f"Fetch (session {sid}) from broker {node}: Kafka error code {body.error_code}")
        # A broker that keeps no session for us answers 0: every request stays a full one.
        s.session_id, s.epoch = body.session_id, next_epoch(epoch) if body.session_id else INITIAL_EPOCH
        s.sent = dict(want) if body.session_id else {}
        moved = []
        for t in body.responses:
            topic = meta.by_name.get(t.topic)
            if topic is None:
                continue
            for p in t.partitions:
                tp = TopicPartition(topic.topic_id, p.partition_index)
                v = want.get(tp)
                if v is not None and (p.error_code != NONE or p.records or p.high_watermark != v[0]):
                    moved.append(tp)
        return moved


def _name_of(meta: _Metadata, tp: TopicPartition) -> str:
    """A forgotten partition's topic name (a deleted topic keeps none: its ID names it)."""
    try:
        return meta.partition(tp)[0].name
    except PortError:
        return ""
