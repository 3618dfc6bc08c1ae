"""Sockets and connections of the model's Kafka listeners: one port per modelled broker.

Every handler runs on the event loop thread of the clustermodel-server, between two awaits,
so a Kafka request and a msgpack request never interleave inside the model (the msgpack server
serialises the same way). A crashed broker's listener drops its connections and closes new
ones at once, as a dead Kafka broker does; clients find the new leaders through Metadata.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Collection, Mapping

from coordinator.ports import TopicPartition
from records.kafka_envelope import MalformedRequest, split_frames

from ..cluster import ClusterModel
from .batches import WireCache
from .dispatcher import Dispatcher
from .group_coordinator import GroupCoordinator

log = logging.getLogger(__name__)


class ClusterListeners:
    """The listeners of one modelled cluster; its handlers see it as a ListenerContext."""

    def __init__(self, name: str, model: ClusterModel, host: str, dispatcher: Dispatcher) -> None:
        self.name = name
        self.model = model
        self.host = host
        self.dispatcher = dispatcher
        self.api_table = dispatcher.table
        self.ports: dict[int, int] = {}
        self._servers: dict[int, asyncio.base_events.Server] = {}
        self._sockets: dict[int, socket.socket] = {}
        self._connections: dict[int, set[asyncio.StreamWriter]] = {b: set() for b in model.brokers}
        self._waiters: set[asyncio.Future[None]] = set()  # woken by any change (a produce's acks=all)
        # Parked fetches by (topic ID as an int, partition): woken by their own partitions' changes
        # only. Woken by any change, a consumer's fetch of 500 partitions read all 500 again at
        # every append anywhere in the cluster (and at every call of the model's own API).
        self._parked: dict[tuple[int, int], set[asyncio.Future[None]]] = {}
        model.on_change(self._changed)
        self.groups = GroupCoordinator(model)
        self.wire = WireCache()
        self._live = set(model.live)
        self.internal_topics: set[str] = set()  # created by a FindCoordinator, as Kafka does (topic_views.py)

    # ---------------------------------------------------------------- lifecycle

    def bind(self, ports: Mapping[int, int] | None = None) -> None:
        """Bind every broker's socket now (so its port is known at once); start() serves them."""
        for broker in self.model.brokers:
            if broker in self._sockets:
                continue
            sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, (ports or {}).get(broker, 0)))
            sock.listen(128)
            sock.setblocking(False)
            self._sockets[broker] = sock
            self.ports[broker] = int(sock.getsockname()[1])

    async def start(self, ports: Mapping[int, int] | None = None) -> None:
        self.bind(ports)
        for broker, sock in self._sockets.items():
            if broker not in self._servers:
                self._servers[broker] = await asyncio.start_server(
                    lambda r, w, b=broker: self._connection(b, r, w), sock=sock
                )

    async def stop(self) -> None:
        self.groups.stop()
        for server in self._servers.values():
            server.close()
        for conns in self._connections.values():
            for w in list(conns):
                w.transport.abort()
        for server in self._servers.values():
            await server.wait_closed()
        for broker, sock in self._sockets.items():
            if broker not in self._servers:
                sock.close()
        self.notify()

    def address(self, broker: int) -> tuple[str, int]:
        return self.host, self.ports[broker]

    # ---------------------------------------------------------------- model changes

    def notify(self) -> None:
        """The model may have changed anywhere: wake every long poll."""
        waiters, self._waiters = self._waiters, set()
        parked, self._parked = self._parked, {}
        _wake(waiters)
        for futures in parked.values():
            _wake(futures)

    def _changed(self, tp: TopicPartition) -> None:
        """The model's change hook: the fetches parked on ``tp``, and the waits on any change."""
        _wake(self._parked.pop((tp.topic_id.int, tp.partition), ()))
        if self._waiters:
            waiters, self._waiters = self._waiters, set()
            _wake(waiters)

    async def wait_change(self, timeout_s: float, partitions: Collection[tuple[int, int]] | None = None) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        parked = self._parked
        if partitions is None:
            self._waiters.add(fut)
        else:
            for k in partitions:
                got = parked.get(k)
                if got is None:
                    parked[k] = {fut}
                else:
                    got.add(fut)
        try:
            await asyncio.wait_for(fut, timeout_s)
        except asyncio.TimeoutError:
            pass
        finally:
            if partitions is None:
                self._waiters.discard(fut)
            else:  # a wake-up popped one key; the others still hold this wait
                parked = self._parked
                for k in partitions:
                    got = parked.get(k)
                    if got is not None:
                        got.discard(fut)
                        if not got:
                            del parked[k]

    def sync(self) -> None:
        """After a call of the model's own API: if a broker went down or came back, the one down
        loses its connections and every long poll looks again. Data, HW, leader and log start
        changes wake the polls of their partitions by themselves (``_changed``)."""
        live = set(self.model.live)
        if live == self._live:
            return
        for broker in self._live - live:
            for w in list(self._connections.get(broker, ())):
                w.transport.abort()
        self._live = live
        self.notify()

    # ---------------------------------------------------------------- connections

    async def _connection(self, broker: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if broker not in self.model.live:
            writer.transport.abort()
            return
        conns = self._connections[broker]
        conns.add(writer)
        buf = bytearray()
        try:
            while True:
                data = await reader.read(1 << 18)
                if not data:
                    break
                buf += data
                for frame in split_frames(buf):
                    if broker not in self.model.live:
                        return
                    out = await self.dispatcher.handle(self, broker, frame)
                    if out is not None:
                        writer.write(out)
                await writer.drain()
        except MalformedRequest as exc:
            # One line, as Kafka logs the InvalidRequestException before it closes the connection.
            log.warning("%s broker %d: closing a connection: %s", self.name, broker, exc)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            conns.discard(writer)
            writer.transport.abort()


class KafkaListeners:
    """Kafka listeners for every cluster a clustermodel-server models."""

    def __init__(self, clusters: Mapping[str, ClusterModel], host: str = "127.0.0.1") -> None:
        self.host = host
        self.dispatcher = Dispatcher()
        self.clusters = {name: ClusterListeners(name, model, host, self.dispatcher) for name, model in clusters.items()}

    async def start(self) -> None:
        for c in list(self.clusters.values()):
            await c.start()

    def add_cluster(self, name: str, model: ClusterModel) -> ClusterListeners:
        """Listeners for a cluster added while running: ports bound now, served once the loop runs start()."""
        c = self.clusters[name] = ClusterListeners(name, model, self.host, self.dispatcher)
        c.bind()
        return c

    async def stop(self) -> None:
        for c in list(self.clusters.values()):
            await c.stop()

    def sync(self) -> None:
        for c in self.clusters.values():
            c.sync()

    def addresses(self) -> list[tuple[str, int, str, int]]:
        """(cluster, broker, host, port) of every listener."""
        return [(name, b, c.host, p) for name, c in sorted(self.clusters.items()) for b, p in sorted(c.ports.items())]


def _wake(futures: Collection[asyncio.Future[None]]) -> None:
    for f in futures:
        if not f.done():
            f.set_result(None)
