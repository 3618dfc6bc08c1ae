"""Clients of the local model server, implementing the same ports as the in-process model.

``ClusterClient`` is synchronous (a blocking socket), for the pure core and tests;
``AsyncClusterClient`` has the same method names as coroutines, for the Faust shell. Both
re-raise the server's typed errors as the same port (or model) error classes. Requests can be
pipelined: ``ClusterClient.pipeline`` sends many at once; concurrent calls on the async client
share one connection.
"""

from __future__ import annotations

import asyncio
import itertools
import selectors
import socket
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from coordinator.ports import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    AclBinding,
    Batch,
    ControlType,
    EpochEndOffset,
    FetchResult,
    GroupDescription,
    GroupOffset,
    GroupType,
    IsolationLevel,
    IsrStatus,
    OpenTransaction,
    PartitionOffsets,
    SourceUnavailable,
    TopicMetadata,
    TopicPartition,
)

from .fetch_sessions import FETCH_WAIT, watch_result_decoder
from .protocol import (
    BATCH,
    CONTROL_METHODS,
    HEADER,
    METHODS,
    decode_batch_reply,
    decode_error,
    encode_request,
    encode_request_into,
    response_decoder,
)


def _result(method: str, ok: bool, raw: Any) -> Any:
    if ok:
        if method.startswith(BATCH + ":"):
            return decode_batch_reply(method[len(BATCH) + 1 :], raw)
        return METHODS[method].result_decoder.decode(raw) if method in METHODS else _generic(raw)
    return decode_error(raw)


def _generic(raw: Any) -> Any:
    return msgspec.msgpack.decode(raw)


_BATCH_CALLS = 2048  # calls per batch request: bounds one reply frame
# A pipeline's requests up to this size are sent whole before any reply is read: they fit the
# socket buffers (the server's receive window alone is larger), so neither side can block the other.
_SEND_WHOLE = 32 << 10


class ClusterClient:
    """A blocking client bound to one named cluster of a model server."""

    def __init__(self, port: int, cluster: str = "default", host: str = "127.0.0.1", timeout: float = 30.0) -> None:
        self.cluster = cluster
        self.address = (host, port)
        self._ids = itertools.count(1)
        self._buf = bytearray()
        try:
            self._sock = socket.create_connection(self.address, timeout=timeout)
        except OSError as exc:
            raise SourceUnavailable(cluster, f"cannot connect to model server {host}:{port}: {exc}") from exc
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sel: selectors.BaseSelector | None = None  # a long pipeline's (``_interleaved``)

    def close(self) -> None:
        if self._sel is not None:
            self._sel.close()
        self._sock.close()

    def __enter__(self) -> ClusterClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def for_cluster(self, cluster: str) -> ClusterClient:
        """Another client on the same server for a different cluster (its own connection)."""
        return ClusterClient(self.address[1], cluster, self.address[0])

    # ---------------------------------------------------------------- transport

    def _encode(self, method: str, args: tuple[Any, ...], kwargs: Mapping[str, Any], out: bytearray | None = None) -> tuple[int, bytearray]:
        """The request's id and its frame, appended to ``out`` (or a new buffer). A ``fence``
        keyword (``coordinator.fencing.OwnerFence``) goes into the frame, for the cluster to check."""
        kwargs, fence = _split_fence(kwargs)
        spec = METHODS.get(method)
        positional = spec.positional(args, kwargs) if spec else list(args)
        request_id = next(self._ids)
        if out is None:
            out = bytearray()
        encode_request_into(out, request_id, self.cluster, method, positional, fence)
        return request_id, out

    def _read_frame(self) -> bytes:
        while True:
            if len(self._buf) >= HEADER:
                size = int.from_bytes(self._buf[:HEADER], "big")
                if len(self._buf) >= HEADER + size:
                    payload = bytes(self._buf[HEADER : HEADER + size])
                    del self._buf[: HEADER + size]
                    return payload
            try:
                chunk = self._sock.recv(1 << 16)
            except OSError as exc:
                raise SourceUnavailable(self.cluster, f"model server connection failed: {exc}") from exc
            if not chunk:
                raise SourceUnavailable(self.cluster, "model server closed the connection")
            self._buf += chunk

    def _send(self, data: bytes) -> None:
        try:
            self._sock.sendall(data)
        except OSError as exc:
            raise SourceUnavailable(self.cluster, f"model server connection failed: {exc}") from exc

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call any model method by name; raises the typed error the server reports."""
        request_id, data = self._encode(method, args, kwargs)
        self._send(data)
        resp = response_decoder.decode(self._read_frame())
        if resp.id != request_id:
            raise SourceUnavailable(self.cluster, f"reply {resp.id} for request {request_id}")
        result = _result(method, resp.ok, resp.result)
        if not resp.ok:
            raise result
        return result

    def pipeline(self, calls: Sequence[tuple[str, tuple[Any, ...]] | tuple[str, tuple[Any, ...], Mapping[str, Any]]]) -> list[Any]:
        """Send every call, ``(method, args[, kwargs])``, at once and read the replies in order;
        errors come back as exception values.

        Sending and reading interleave (a selector loop), so a long pipeline cannot deadlock with
        the server blocked writing replies while we are blocked writing requests.
        """
        ids: list[tuple[int, str]] = []
        out = bytearray()
        for call in calls:
            method, args = call[0], call[1]
            request_id, _ = self._encode(method, args, call[2] if len(call) > 2 else {}, out)  # type: ignore[misc]
            ids.append((request_id, f"{BATCH}:{args[0]}" if method == BATCH else method))
        results: list[Any] = []
        undecodable: BaseException | None = None  # raised once every reply is read: the connection stays in step

        def decoded(payload: bytes) -> None:
            nonlocal undecodable
            try:
                resp = response_decoder.decode(payload)
                results.append(_result(ids[len(results)][1], resp.ok, resp.result))
            except Exception as e:  # noqa: BLE001 - raised below
                results.append(e)
                undecodable = undecodable or e

        if len(out) <= _SEND_WHOLE:
            # Small enough to sit whole in the socket buffers whatever the server does: sent at
            # once, then the replies read (no selector: a copy job's two round trips each made one).
            self._send(out)
            while len(results) < len(ids):
                decoded(self._read_frame())
        else:
            self._interleaved(memoryview(out), len(ids), results, decoded)
        if undecodable is not None:
            raise undecodable
        return results

    def _interleaved(self, view: memoryview, n: int, results: list[Any], decoded: Any) -> None:
        """Send ``view`` and read ``n`` replies at once (one selector per connection, kept)."""
        sent = 0
        timeout = self._sock.gettimeout()
        self._sock.setblocking(False)
        try:
            sel = self._sel
            if sel is None:
                sel = self._sel = selectors.DefaultSelector()
                sel.register(self._sock, selectors.EVENT_READ | selectors.EVENT_WRITE)
            else:
                sel.modify(self._sock, selectors.EVENT_READ | selectors.EVENT_WRITE)
            while len(results) < n:
                events = sel.select(timeout)
                if not events:
                    raise SourceUnavailable(self.cluster, "model server timed out")
                for _, mask in events:
                    if mask & selectors.EVENT_WRITE and sent < len(view):
                        sent += self._sock.send(view[sent : sent + (1 << 20)])
                        if sent == len(view):
                            sel.modify(self._sock, selectors.EVENT_READ)
                    if mask & selectors.EVENT_READ:
                        chunk = self._sock.recv(1 << 20)
                        if not chunk:
                            raise SourceUnavailable(self.cluster, "model server closed the connection")
                        self._buf += chunk
                        # Decoded as they come: the server works on the next requests meanwhile.
                        for payload in self._complete_frames():
                            decoded(payload)
        except (BlockingIOError, InterruptedError):  # pragma: no cover - spurious wakeup
            raise SourceUnavailable(self.cluster, "model server connection failed") from None
        except OSError as exc:
            raise SourceUnavailable(self.cluster, f"model server connection failed: {exc}") from exc
        finally:
            self._sock.settimeout(timeout)

    def call_many(self, calls: Sequence[tuple[str, tuple[Any, ...], Mapping[str, Any] | None]]) -> list[Any]:
        """Results of many calls, in order, errors as exception values: the calls of each method go
        out as one batch request (a ListOffsets for many partitions, not one per partition), and
        all requests as one pipeline."""
        groups: dict[tuple[str, Any], list[int]] = {}  # by method and owner fence: a batch carries one fence
        for i, (method, _, kwargs) in enumerate(calls):
            groups.setdefault((method, kwargs.get("fence") if kwargs else None), []).append(i)
        requests: list[tuple[str, tuple[Any, ...], Mapping[str, Any]]] = []
        spans: list[tuple[list[int], bool]] = []
        for (method, fence), idx in groups.items():
            spec = METHODS.get(method)
            if len(idx) == 1 or spec is None:
                for i in idx:
                    requests.append((method, calls[i][1], calls[i][2] or {}))
                    spans.append(([i], False))
                continue
            head = {} if fence is None else {"fence": fence}
            for start in range(0, len(idx), _BATCH_CALLS):
                chunk = idx[start : start + _BATCH_CALLS]
                requests.append((BATCH, (method, [spec.positional(calls[i][1], _split_fence(calls[i][2] or {})[0])
                                                  for i in chunk]), head))  # fmt: skip
                spans.append((chunk, True))
        out: list[Any] = [None] * len(calls)
        for (span, batched), got in zip(spans, self.pipeline(requests)):
            if not batched:
                out[span[0]] = got
            elif isinstance(got, BaseException):  # the whole batch was refused
                for i in span:
                    out[i] = got
            else:
                for i, r in zip(span, got):
                    out[i] = r
        return out

    def _complete_frames(self) -> list[bytes]:
        frames = []
        pos = 0
        buf = self._buf
        while len(buf) - pos >= HEADER:
            size = int.from_bytes(buf[pos : pos + HEADER], "big")
            if len(buf) - pos - HEADER < size:
                break
            frames.append(bytes(buf[pos + HEADER : pos + HEADER + size]))
            pos += HEADER + size
        del buf[:pos]
        return frames

    def ping(self) -> str:
        return self.call("ping")  # type: ignore[no-any-return]

    def fetch_wait(self, session_id: int, add: Sequence[tuple[TopicPartition, int, int]],
                   remove: Sequence[TopicPartition], max_wait_ms: int) -> tuple[int, list[TopicPartition]]:
        """A fetch session's long poll (``clustermodel.fetch_sessions``) on a client of its own (``open_watch``)."""
        request_id = next(self._ids)
        args = [session_id, [(tp.topic_id, tp.partition, o, e) for tp, o, e in add],
                [(tp.topic_id, tp.partition) for tp in remove], max_wait_ms]  # fmt: skip
        self._send(encode_request(request_id, self.cluster, FETCH_WAIT, args))
        timeout = self._sock.gettimeout()
        self._sock.settimeout(None if timeout is None else timeout + max_wait_ms / 1000)
        try:
            resp = response_decoder.decode(self._read_frame())
        finally:
            self._sock.settimeout(timeout)
        if resp.id != request_id:
            raise SourceUnavailable(self.cluster, f"reply {resp.id} for request {request_id}")
        if not resp.ok:
            raise decode_error(resp.result)
        sid, moved = watch_result_decoder.decode(resp.result)
        return sid, [TopicPartition(t, p) for t, p in moved]

    def open_watch(self) -> ClusterClient:
        """A client of its own for ``fetch_wait`` (a long poll must not hold up other calls)."""
        return ClusterClient(self.address[1], self.cluster, self.address[0], timeout=self._sock.gettimeout() or 30.0)

    def add_cluster(self, name: str, seed: int = 0, brokers: int = 3) -> str:
        """Create another named cluster on the server."""
        return self.call("add_cluster", name, seed, brokers)  # type: ignore[no-any-return]

    def save_snapshot(self) -> str | None:
        """Ask the server to write its snapshot file now."""
        return self.call("save_snapshot")  # type: ignore[no-any-return]

    def kafka_listeners(self) -> list[tuple[str, int, str, int]]:
        """(cluster, broker, host, port) of every Kafka listener the server runs (empty if none)."""
        return [tuple(a) for a in self.call("kafka_listeners")]  # type: ignore[misc]

    def bootstrap_servers(self, cluster: str | None = None) -> str:
        """A Kafka client's bootstrap.servers for a cluster (this client's by default)."""
        return bootstrap_servers(self.kafka_listeners(), cluster or self.cluster)

    # ---------------------------------------------------------------- ClusterPort

    def cluster_id(self) -> str:
        return self.call("cluster_id")  # type: ignore[no-any-return]

    def describe_topics(self, topic_ids: Sequence[uuid.UUID] | None = None) -> list[TopicMetadata]:
        return self.call("describe_topics", topic_ids)  # type: ignore[no-any-return]

    def list_offsets(self, tp: TopicPartition) -> PartitionOffsets:
        return self.call("list_offsets", tp)  # type: ignore[no-any-return]

    def fetch(
        self,
        tp: TopicPartition,
        fetch_offset: int,
        max_bytes: int,
        isolation: IsolationLevel = IsolationLevel.READ_COMMITTED,
        current_leader_epoch: int | None = None,
        last_fetched_epoch: int | None = None,
    ) -> FetchResult:
        return self.call(  # type: ignore[no-any-return]
            "fetch", tp, fetch_offset, max_bytes, isolation, current_leader_epoch, last_fetched_epoch
        )

    def end_offset_for_epoch(
        self, tp: TopicPartition, leader_epoch: int, current_leader_epoch: int | None = None
    ) -> EpochEndOffset:
        return self.call("end_offset_for_epoch", tp, leader_epoch, current_leader_epoch)  # type: ignore[no-any-return]

    def latest_epoch(self, tp: TopicPartition) -> int:
        return self.call("latest_epoch", tp)  # type: ignore[no-any-return]

    def last_mirrored_epoch(self, mirror_name: str, tp: TopicPartition) -> int | None:
        return self.call("last_mirrored_epoch", mirror_name, tp)  # type: ignore[no-any-return]

    def last_mirror_cut(self, mirror_name: str, tp: TopicPartition) -> int | None:
        return self.call("last_mirror_cut", mirror_name, tp)  # type: ignore[no-any-return]

    def list_groups(self) -> list[GroupDescription]:
        return self.call("list_groups")  # type: ignore[no-any-return]

    def group_offsets(self, group_id: str) -> list[GroupOffset]:
        return self.call("group_offsets", group_id)  # type: ignore[no-any-return]

    def is_group_active(self, group_id: str) -> bool:
        return self.call("is_group_active", group_id)  # type: ignore[no-any-return]

    def describe_configs(self, topic_id: uuid.UUID) -> dict[str, str]:
        return self.call("describe_configs", topic_id)  # type: ignore[no-any-return]

    def describe_acls(self) -> list[AclBinding]:
        return self.call("describe_acls")  # type: ignore[no-any-return]

    # ---------------------------------------------------------------- DestinationCluster

    def create_topic(
        self,
        name: str,
        topic_id: uuid.UUID,
        num_partitions: int,
        configs: Mapping[str, str] | None = None,
        replication_factor: int | None = None,
        read_only: bool = True,
        mirror_name: str | None = None,
        mirror_source_cluster_id: str | None = None,
    ) -> TopicMetadata:
        return self.call(  # type: ignore[no-any-return]
            "create_topic", name, topic_id, num_partitions, dict(configs) if configs else None,
            replication_factor, read_only, mirror_name, mirror_source_cluster_id,
        )

    def create_partitions(self, topic_id: uuid.UUID, total_count: int) -> TopicMetadata:
        return self.call("create_partitions", topic_id, total_count)  # type: ignore[no-any-return]

    def set_read_only(self, topic_id: uuid.UUID, read_only: bool) -> None:
        self.call("set_read_only", topic_id, read_only)

    def set_mirror(
        self, topic_id: uuid.UUID, mirror_name: str | None, mirror_source_cluster_id: str | None = None
    ) -> None:
        self.call("set_mirror", topic_id, mirror_name, mirror_source_cluster_id)

    def append_mirror_batches(self, tp: TopicPartition, batches: Sequence[Batch], expected_leo: int | None = None) -> int:
        if expected_leo is None:
            return self.call("append_mirror_batches", tp, list(batches))  # type: ignore[no-any-return]
        return self.call("append_mirror_batches", tp, list(batches), expected_leo=expected_leo)  # type: ignore[no-any-return]

    def truncate_to(self, tp: TopicPartition, offset: int) -> PartitionOffsets:
        return self.call("truncate_to", tp, offset)  # type: ignore[no-any-return]

    def truncate_fully_and_start_at(self, tp: TopicPartition, offset: int) -> PartitionOffsets:
        return self.call("truncate_fully_and_start_at", tp, offset)  # type: ignore[no-any-return]

    def bump_leader_epoch(self, tp: TopicPartition, min_epoch: int) -> int:
        return self.call("bump_leader_epoch", tp, min_epoch)  # type: ignore[no-any-return]

    def open_transactions(self, tp: TopicPartition) -> list[OpenTransaction]:
        return self.call("open_transactions", tp)  # type: ignore[no-any-return]

    def append_control_batch(
        self,
        tp: TopicPartition,
        control_type: ControlType,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        source_cluster_id: str | None = None,
    ) -> Batch:
        return self.call(  # type: ignore[no-any-return]
            "append_control_batch", tp, control_type, producer_id, producer_epoch, source_cluster_id
        )

    def isr_status(self, tp: TopicPartition) -> IsrStatus:
        return self.call("isr_status", tp)  # type: ignore[no-any-return]

    def set_last_mirrored_epoch(self, mirror_name: str, tp: TopicPartition, epoch: int | None,
                                cut_offset: int | None = None) -> None:  # fmt: skip
        self.call("set_last_mirrored_epoch", mirror_name, tp, epoch, cut_offset)

    def commit_group_offsets(
        self, group_id: str, offsets: Sequence[GroupOffset], group_type: GroupType = GroupType.CONSUMER
    ) -> None:
        self.call("commit_group_offsets", group_id, list(offsets), group_type)

    def alter_configs(
        self, topic_id: uuid.UUID, set_configs: Mapping[str, str], delete_configs: Sequence[str] = ()
    ) -> None:
        self.call("alter_configs", topic_id, dict(set_configs), list(delete_configs))

    def create_acls(self, acls: Sequence[AclBinding]) -> None:
        self.call("create_acls", list(acls))

    def delete_acls(self, acls: Sequence[AclBinding]) -> None:
        self.call("delete_acls", list(acls))

    # Control operations (produce, tick, elect_leader, crash_broker, ...) are generated below:
    # same names and arguments as ClusterModel's.
    def __getattr__(self, name: str) -> Any:
        if name in CONTROL_METHODS:
            return lambda *args, **kwargs: self.call(name, *args, **kwargs)
        raise AttributeError(name)


class AsyncClusterClient:
    """The asyncio twin of ClusterClient: same method names, as coroutines; calls pipeline on one connection."""

    def __init__(self, port: int, cluster: str = "default", host: str = "127.0.0.1") -> None:
        self.cluster = cluster
        self.address = (host, port)
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[str, asyncio.Future[Any]]] = {}
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._task: asyncio.Task[None] | None = None

    async def connect(self) -> AsyncClusterClient:
        try:
            self._reader, self._writer = await asyncio.open_connection(*self.address)
        except OSError as exc:
            raise SourceUnavailable(self.cluster, f"cannot connect to model server: {exc}") from exc
        self._task = asyncio.create_task(self._read_loop())
        return self

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            try:
                await self._writer.wait_closed()
            except (ConnectionError, OSError):
                pass
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - shutting down
                pass

    async def __aenter__(self) -> AsyncClusterClient:
        return await self.connect()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _read_loop(self) -> None:
        assert self._reader is not None
        error: Exception = SourceUnavailable(self.cluster, "model server closed the connection")
        try:
            while True:
                header = await self._reader.readexactly(HEADER)
                payload = await self._reader.readexactly(int.from_bytes(header, "big"))
                resp = response_decoder.decode(payload)
                pending = self._pending.pop(resp.id, None)
                if pending is None:
                    continue
                method, fut = pending
                if not fut.done():
                    value = _result(method, resp.ok, resp.result)
                    if resp.ok:
                        fut.set_result(value)
                    else:
                        fut.set_exception(value)
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
            error = SourceUnavailable(self.cluster, f"model server connection lost: {exc}")
        finally:
            for _, fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(error)
            self._pending.clear()

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call any model method by name; concurrent calls share the connection (pipelined)."""
        if self._writer is None:
            await self.connect()
        assert self._writer is not None
        spec = METHODS.get(method)
        positional = spec.positional(args, kwargs) if spec else list(args)
        request_id = next(self._ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = (method, fut)
        self._writer.write(encode_request(request_id, self.cluster, method, _wire(positional)))
        return await fut

    async def ping(self) -> str:
        return await self.call("ping")  # type: ignore[no-any-return]

    async def kafka_listeners(self) -> list[tuple[str, int, str, int]]:
        """(cluster, broker, host, port) of every Kafka listener the server runs (empty if none)."""
        return [tuple(a) for a in await self.call("kafka_listeners")]  # type: ignore[misc]

    async def bootstrap_servers(self, cluster: str | None = None) -> str:
        return bootstrap_servers(await self.kafka_listeners(), cluster or self.cluster)

    def __getattr__(self, name: str) -> Any:
        if name in METHODS:

            async def method(*args: Any, **kwargs: Any) -> Any:
                return await self.call(name, *args, **kwargs)

            method.__name__ = name
            return method
        raise AttributeError(name)


def _split_fence(kwargs: Mapping[str, Any]) -> tuple[Mapping[str, Any], Any]:
    """A call's keyword arguments without its ``fence``, and the fence (None when absent)."""
    if not kwargs or "fence" not in kwargs:
        return kwargs, None
    rest = dict(kwargs)
    return rest, rest.pop("fence")


def bootstrap_servers(listeners: Sequence[Sequence[Any]], cluster: str) -> str:
    """'host:port,...' of a cluster's Kafka listeners."""
    addrs = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}" for name, _, host, port in listeners if name == cluster]
    if not addrs:
        raise ValueError(f"no Kafka listeners for cluster {cluster!r}")
    return ",".join(addrs)


def _wire(args: list[Any]) -> list[Any]:
    # Mappings and sequences passed as abstract types encode as their concrete forms.
    return [dict(a) if isinstance(a, Mapping) and not isinstance(a, dict) else a for a in args]
