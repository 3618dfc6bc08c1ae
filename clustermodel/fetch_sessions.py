"""Long polls on the model's own API: fetch sessions that park until a watched partition moves.

A worker registers its caught-up partitions (the fetch offset and the leader epoch it fetched
at) in a session and asks which of them moved. The server answers at once when some did, else
parks the request until the cluster's ``changed`` hook (an append, an HW move, a leader change,
a truncation, a log start move) wakes one of them, or ``max_wait_ms`` passes: the long poll of
Kafka's replica fetchers (replica.fetch.wait.max.ms) with KIP-227's incremental sessions (a
request names only the partitions added or removed, never the whole set). A reported partition
leaves the session: its owner fetches it and registers it again once caught up.

Waiting costs nothing per partition: one dict lookup per change, no polling loop. Sessions live
in the server's memory, per connection: a session the server does not know (it restarted, or
the connection dropped) is ``FetchSessionIdNotFound``, Kafka's FETCH_SESSION_ID_NOT_FOUND (70),
and the client starts a new one with every partition it watches.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from typing import Any

import msgspec

from coordinator.ports import TopicPartition

from .errors import FetchSessionIdNotFound

FETCH_WAIT = "fetch_wait"  # the method name on the wire
MAX_WAIT_MS = 30_000  # a longer long poll is cut to this


class WatchArgs(msgspec.Struct, array_like=True):
    session_id: int  # 0: a new session
    add: list[tuple[uuid.UUID, int, int, int]]  # topic ID, partition, fetch offset, leader epoch
    remove: list[tuple[uuid.UUID, int]]
    max_wait_ms: int


watch_args_decoder = msgspec.msgpack.Decoder(WatchArgs)
WatchResult = tuple[int, list[tuple[uuid.UUID, int]]]  # the session ID, the partitions that moved
watch_result_decoder = msgspec.msgpack.Decoder(WatchResult)


def moved(cluster: Any, tp: TopicPartition, offset: int, epoch: int) -> bool:
    """Whether a fetch at ``offset`` would not come back empty as it did (data, an error, a new epoch)."""
    topic = cluster.topics.get(tp.topic_id)
    if topic is None or tp.partition >= len(topic.partitions):
        return True
    part = topic.partitions[tp.partition]
    return (not part.online or part.leader_epoch != epoch or part.hw != offset
            or part.leader_log.log_start > offset)  # fmt: skip


Key = tuple[int, int]  # (topic ID as an int, partition): hashed and compared in C, where a
# TopicPartition decoded from a request hashes and compares its UUID in Python (a mass stop
# removes every partition of its mirror from the sessions)


class _Session:
    __slots__ = ("cluster", "owner", "ready", "waiter", "watched")

    def __init__(self, cluster: str, owner: object) -> None:
        self.cluster, self.owner = cluster, owner
        self.watched: dict[Key, tuple[int, int]] = {}  # -> (fetch offset, leader epoch)
        self.ready: list[tuple[uuid.UUID, int]] = []
        self.waiter: asyncio.Future[None] | None = None


class FetchSessions:
    """Every fetch session of a model server, and the partitions each one watches."""

    def __init__(self, clusters: dict[str, Any]) -> None:
        self.clusters = clusters
        self.sessions: dict[int, _Session] = {}
        self._ids = itertools.count(1)
        self._watchers: dict[tuple[str, int, int], set[_Session]] = {}
        for name, cluster in clusters.items():
            self.attach(name, cluster)

    def attach(self, name: str, cluster: Any) -> None:
        cluster.on_change(lambda tp, name=name: self._changed(name, tp))

    def _changed(self, cluster_name: str, tp: TopicPartition) -> None:
        key = (cluster_name, tp.topic_id.int, tp.partition)
        watchers = self._watchers.get(key)
        if not watchers:
            return
        cluster = self.clusters[cluster_name]
        for s in list(watchers):
            offset, epoch = s.watched[key[1:]]
            if moved(cluster, tp, offset, epoch):
                self._report(s, tp.topic_id, tp.partition)

    def _report(self, s: _Session, topic_id: uuid.UUID, partition: int) -> None:
        k = (topic_id.int, partition)
        del s.watched[k]
        key = (s.cluster, *k)
        watchers = self._watchers[key]
        watchers.discard(s)
        if not watchers:
            del self._watchers[key]
        s.ready.append((topic_id, partition))
        if s.waiter is not None and not s.waiter.done():
            s.waiter.set_result(None)

    def _unwatch(self, s: _Session, k: Key) -> None:
        if s.watched.pop(k, None) is not None:
            key = (s.cluster, *k)
            watchers = self._watchers[key]
            watchers.discard(s)
            if not watchers:
                del self._watchers[key]

    async def watch(self, cluster_name: str, args: WatchArgs, owner: object) -> WatchResult:
        """Apply a request's changes to its session; answer with what moved, at once or after a wait."""
        cluster = self.clusters[cluster_name]
        cluster._serve()  # the link's fault switches (unreachable, flapping) apply to a long poll too
        if args.session_id == 0:
            sid = next(self._ids)
            s = self.sessions[sid] = _Session(cluster_name, owner)
        else:
            sid = args.session_id
            got = self.sessions.get(sid)
            if got is None or got.owner is not owner or got.cluster != cluster_name:
                raise FetchSessionIdNotFound(f"fetch session {sid} not found")
            s = got
        unwatch = self._unwatch
        for topic_id, p in args.remove:
            unwatch(s, (topic_id.int, p))
        watchers = self._watchers
        for topic_id, p, offset, epoch in args.add:
            k = (topic_id.int, p)
            unwatch(s, k)
            s.watched[k] = (offset, epoch)
            watchers.setdefault((cluster_name, *k), set()).add(s)
            if moved(cluster, TopicPartition(topic_id, p), offset, epoch):
                self._report(s, topic_id, p)
        if not s.ready and args.max_wait_ms > 0:
            s.waiter = asyncio.get_running_loop().create_future()
            try:
                await asyncio.wait_for(s.waiter, min(args.max_wait_ms, MAX_WAIT_MS) / 1000)
            except asyncio.TimeoutError:
                pass
            finally:
                s.waiter = None
        ready, s.ready = s.ready, []
        return sid, ready

    def close_owner(self, owner: object) -> None:
        """A connection closed: its sessions go (as a broker evicts an idle session)."""
        for sid, s in list(self.sessions.items()):
            if s.owner is owner:
                for k in list(s.watched):
                    self._unwatch(s, k)
                if s.waiter is not None and not s.waiter.done():
                    s.waiter.cancel()
                del self.sessions[sid]
