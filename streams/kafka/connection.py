"""The Kafka source port's connection layer: a private event-loop thread running aiokafka's client
(bootstrap, ApiVersions negotiation, TLS, SASL), our codec's requests sent through it, and the
source's metadata, cached and refreshed.

The ports are synchronous and the worker calls them from its thread pool: ``run`` hands a
coroutine to the loop thread and waits. Connection failures become SourceUnavailable
(``guard``); errors a metadata refresh can cure are retried once (``with_refresh``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from coordinator.ports import (
    FencedLeaderEpoch,
    NotLeader,
    PartitionMetadata,
    PortError,
    SourceUnavailable,
    TopicPartition,
    UnknownLeaderEpoch,
    UnknownTopicId,
)
from streams.kafka.wire import _API_KEYS, NONE, CodecRequest, KafkaProtocolError, UnsupportedApi, _s

log = logging.getLogger(__name__)
T = TypeVar("T")


class _Topic:
    def __init__(self, name: str, topic_id: uuid.UUID, internal: bool, partitions: dict[int, PartitionMetadata]) -> None:
        self.name, self.topic_id, self.internal, self.partitions = name, topic_id, internal, partitions


class _Metadata:
    def __init__(self, cluster_id: str, brokers: dict[int, tuple[str, int]], topics: dict[uuid.UUID, _Topic]) -> None:
        self.cluster_id, self.brokers, self.topics = cluster_id, brokers, topics
        self.by_name = {t.name: t for t in topics.values()}

    def partition(self, tp: TopicPartition) -> tuple[_Topic, PartitionMetadata]:
        topic = self.topics.get(tp.topic_id)
        if topic is None:
            raise UnknownTopicId(tp.topic_id)
        part = topic.partitions.get(tp.partition)
        if part is None:
            raise UnknownTopicId(tp.topic_id, tp.partition)
        return topic, part

    def leader(self, tp: TopicPartition) -> tuple[_Topic, PartitionMetadata]:
        topic, part = self.partition(tp)
        if part.leader < 0:
            raise NotLeader(tp, part.leader, part.leader_epoch)
        return topic, part


class KafkaConnection:
    """aiokafka's client on a private loop thread, our codec's requests, the metadata cache.

    ``settings`` are AIOKafkaClient arguments; ``config_error`` (bad client settings) fails every
    call with SourceUnavailable naming the setting.
    """

    def __init__(self, bootstrap_servers: str, settings: dict[str, Any], config_error: str | None, *,
                 request_timeout_ms: int, metadata_max_age_ms: int) -> None:  # fmt: skip
        self.cluster = bootstrap_servers  # named in errors and logs
        self.settings, self.config_error = settings, config_error
        self.request_timeout_ms = request_timeout_ms
        self.metadata_max_age_ms = metadata_max_age_ms
        self._client: Any = None
        # (broker, API) -> the version we chose (-1: the broker lacks it), logged once (again if it changes).
        self.versions_used: dict[tuple[int, str], int] = {}
        self.meta: _Metadata | None = None
        self._meta_at = 0.0
        self.closed = False
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=f"kafka-source {bootstrap_servers}",
                                        daemon=True)  # fmt: skip
        self._thread.start()

    # ------------------------------------------------------------------ calls

    def run(self, coro: Awaitable[T]) -> T:
        if self.closed:
            raise SourceUnavailable(self.cluster, "port closed")
        fut = asyncio.run_coroutine_threadsafe(self.guard(coro), self.loop)
        try:
            return fut.result(timeout=self.request_timeout_ms / 1000 * 3)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise SourceUnavailable(self.cluster, "request timed out") from None

    async def guard(self, coro: Awaitable[T]) -> T:
        """Connection failures as SourceUnavailable; the next call reconnects."""
        from aiokafka.errors import KafkaError

        try:
            return await coro
        except PortError:
            raise
        except UnsupportedApi as e:
            raise KafkaProtocolError(str(e)) from e
        except (KafkaError, OSError, asyncio.TimeoutError) as e:
            self.meta = None
            raise SourceUnavailable(self.cluster, f"{type(e).__name__}: {e}") from e

    async def as_port_error(self, e: BaseException) -> PortError:
        """``e`` as ``guard`` would raise it (a non-port error ``guard`` does not map is re-raised)."""
        try:
            await self.guard(_raise(e))
        except PortError as pe:
            return pe
        raise e

    async def _connected(self) -> Any:
        if self.config_error is not None:
            raise SourceUnavailable(self.cluster, f"bad client settings: {self.config_error}")
        if self._client is None:
            from aiokafka.client import AIOKafkaClient

            client = AIOKafkaClient(bootstrap_servers=self.cluster, request_timeout_ms=self.request_timeout_ms,
                                    metadata_max_age_ms=300_000, **self.settings)  # fmt: skip
            try:
                await client.bootstrap()
            except BaseException:
                await client.close()
                raise
            self._client = client
        return self._client

    async def send(self, node: int, request: CodecRequest) -> Any:
        client = await self._connected()
        if client.cluster.broker_metadata(node) is None:
            await client.force_metadata_update()
        reply = await client.send(node, request)
        if self.versions_used.get((node, request.name)) != reply.version:
            self.versions_used[(node, request.name)] = reply.version
            lo, hi = request.offered or (-1, -1)
            log.info("source %s broker %s: %s v%d (the broker offers v%d-v%d)", self.cluster, node, request.name,
                     reply.version, lo, hi)  # fmt: skip
        return reply.body

    async def send_any(self, request: CodecRequest) -> Any:
        """To the first broker that answers (metadata, configs, ACLs, coordinator lookups)."""
        from aiokafka.errors import KafkaError

        client = await self._connected()
        nodes = sorted(self.meta.brokers) if self.meta else []
        nodes += sorted(b.nodeId for b in client.cluster.brokers() if b.nodeId not in nodes)
        failure: BaseException = SourceUnavailable(self.cluster, "no brokers in the metadata")
        for node in nodes:
            try:
                return await self.send(node, request)
            except (KafkaError, OSError, asyncio.TimeoutError) as e:
                failure = e
        raise failure

    async def supports(self, node: int, name: str) -> bool:
        """Whether ``node`` serves API ``name``; a node that cannot be reached says nothing about it
        (NodeNotReadyError: retried once the metadata names a live one), rather than "no"."""
        from aiokafka.errors import NodeNotReadyError

        client = await self._connected()
        conn = await client._get_conn(node)  # aiokafka keeps the negotiated versions per connection
        if conn is None:
            raise NodeNotReadyError(f"cannot connect to node {node}")
        served = _API_KEYS[name] in (conn._versions or {})
        if not served and self.versions_used.get((node, name)) != -1:
            self.versions_used[(node, name)] = -1
            log.info("source %s broker %s: no %s (api key %d)", self.cluster, node, name, _API_KEYS[name])
        return served

    # ------------------------------------------------------------------ metadata

    async def metadata(self, force: bool = False) -> _Metadata:
        loop = asyncio.get_running_loop()
        if not force and self.meta is not None and loop.time() - self._meta_at < self.metadata_max_age_ms / 1000:
            return self.meta

        def build(version: int) -> Any:
            return _s("MetadataRequest")(topics=None, allow_auto_topic_creation=False)

        body = await self.send_any(CodecRequest("Metadata", build, min_version=1))
        brokers = {b.node_id: (b.host, b.port) for b in body.brokers}
        cluster_id = body.cluster_id or f"unknown-cluster-id:{self.cluster}"
        topics: dict[uuid.UUID, _Topic] = {}
        for t in body.topics:
            if t.error_code != NONE or t.name is None:
                continue
            # A broker without topic IDs (Metadata < v10) gets stable made-up ones: one per name.
            tid = t.topic_id if t.topic_id and t.topic_id.int else uuid.uuid5(uuid.NAMESPACE_URL, f"{cluster_id}/{t.name}")
            parts = {p.partition_index: PartitionMetadata(tid, p.partition_index, p.leader_id,
                                                          max(p.leader_epoch, 0) if p.leader_epoch is not None else 0,
                                                          tuple(p.replica_nodes), tuple(p.isr_nodes))
                     for p in t.partitions}  # fmt: skip
            topics[tid] = _Topic(t.name, tid, bool(t.is_internal), parts)
        self.meta = _Metadata(cluster_id, brokers, topics)
        self._meta_at = loop.time()
        return self.meta

    async def with_refresh(self, attempt: Callable[[_Metadata, set[int]], Awaitable[dict[int, Any]]],
                           n: int) -> list[Any]:  # fmt: skip
        """Runs ``attempt`` on indices 0..n-1 (index -> result or PortError); once more for those
        that failed with an error a metadata refresh can cure. A leader that cannot be reached is
        one of them: a crashed broker closes its connections and the metadata names the new leader
        (as a Kafka consumer does on a disconnect)."""
        meta = await self.metadata()
        got = await attempt(meta, set(range(n)))
        again = [i for i, r in got.items() if isinstance(r, (NotLeader, FencedLeaderEpoch, UnknownLeaderEpoch,
                                                                UnknownTopicId, SourceUnavailable))]  # fmt: skip
        if again:
            meta = await self.metadata(force=True)
            retry = await attempt(meta, set(again))
            for i in again:
                got[i] = retry.get(i, got[i])
        return [got[i] for i in range(n)]

    # ------------------------------------------------------------------ closing

    def close(self) -> None:
        """Closes the connections and stops the loop thread."""
        if self.closed:
            return
        self.closed = True

        async def shut() -> None:
            for task in asyncio.all_tasks():  # prefetches in flight
                if task is not asyncio.current_task():
                    task.cancel()
            if self._client is not None:
                await self._client.close()
                self._client = None

        try:
            asyncio.run_coroutine_threadsafe(shut(), self.loop).result(timeout=5)
        except Exception:  # noqa: BLE001 - closing anyway
            log.debug("closing the source connections of %s failed", self.cluster, exc_info=True)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self.loop.close()


async def _raise(e: BaseException) -> Any:
    raise e
