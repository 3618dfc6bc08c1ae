"""The local model server: named model clusters in their own process, on loopback only.

    clustermodel-server --port 0 --cluster a --cluster b --seed 7 --snapshot state.msgpack
    python -m clustermodel.server ...

The first stdout line is ``PORT <n>`` (the bound port) so scripts can read it. With
``--snapshot FILE`` the clusters are loaded from FILE at start (if it exists) and saved there
on stop (SIGTERM/SIGINT), so stream workers can crash and restart without the clusters' state
vanishing with them. Malformed requests get an error reply; the server itself never dies of one.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import ipaddress
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from coordinator.fencing import MUTATING_METHODS
from coordinator.ports import InvalidRequest, PortError
from records.buffers import keep_large_buffers

from .cluster import ClusterModel
from .errors import ModelError
from .fetch_sessions import FETCH_WAIT, FetchSessions, watch_args_decoder
from .persistence import dump_clusters, load_clusters
from .producers import ProducerError
from .protocol import (
    BATCH,
    HEADER,
    MAX_FRAME_BYTES,
    METHODS,
    batch_calls_decoder,
    batch_head_decoder,
    encode_error,
    encode_ok,
    error_body,
    request_decoder,
)

# Server-level methods (cluster name ignored).
SERVER_METHODS = ("ping", "list_clusters", "save_snapshot", "add_cluster", "kafka_listeners")


class AddClusterArgs(msgspec.Struct, array_like=True):
    name: str
    seed: int = 0
    brokers: int = 3


_add_cluster_decoder = msgspec.msgpack.Decoder(AddClusterArgs)


def is_loopback(host: str) -> bool:
    """True for 'localhost' and loopback addresses; the server never listens anywhere else."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ModelServer:
    """Serves port and control calls on named clusters; one request at a time (the model is sync)."""

    def __init__(self, clusters: dict[str, ClusterModel], snapshot_path: Path | None = None) -> None:
        self.clusters = clusters
        self.snapshot_path = snapshot_path
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.StreamWriter] = set()
        self.requests_served = 0
        # The clusters' Kafka listeners (clustermodel.kafka), when the server runs them.
        self.kafka: Any = None
        self._pending: set[asyncio.Task[None]] = set()
        self.fetch_sessions = FetchSessions(clusters)

    # ---------------------------------------------------------------- dispatch

    def dispatch(self, payload: bytes) -> tuple[bytes | _Parked, int]:
        """Answer one request frame; returns the reply frame and the real delay (ms) a slow cluster adds."""
        try:
            return self._dispatch(payload)
        finally:
            if self.kafka is not None:
                # A control call may have crashed a broker or appended data: listeners catch up.
                self.kafka.sync()

    def _dispatch(self, payload: bytes) -> tuple[bytes | _Parked, int]:
        try:
            req = request_decoder.decode(payload)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            return encode_error(_salvage_id(payload), InvalidRequest(f"malformed request: {exc}")), 0
        self.requests_served += 1
        if req.method in SERVER_METHODS:
            return self._server_method(req.id, req.method, req.args), 0
        cluster = self.clusters.get(req.cluster)
        if cluster is None:
            return encode_error(req.id, InvalidRequest(f"unknown cluster {req.cluster!r}")), 0
        if req.method == BATCH:
            return self._batch(req.id, cluster, req.args, req.fence), cluster.faults.state.slow_ms
        if req.method == FETCH_WAIT:
            return _Parked(req.id, req.cluster, req.args), 0
        spec = METHODS.get(req.method)
        if spec is None:
            return encode_error(req.id, InvalidRequest(f"unknown method {req.method!r}")), 0
        try:
            args = spec.args_decoder.decode(req.args)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            return encode_error(req.id, InvalidRequest(f"bad arguments for {req.method}: {exc}")), 0
        try:
            if req.fence is not None and req.method in MUTATING_METHODS:
                cluster.check_owner_fence(req.fence)  # a stale owner's call changes nothing
            result = getattr(cluster, req.method)(*msgspec.structs.astuple(args))
            reply = encode_ok(req.id, result)
        except (PortError, ModelError, ProducerError, ValueError, TypeError) as exc:
            reply = encode_error(req.id, exc)
        except Exception as exc:  # noqa: BLE001 - a model bug must not take the server down
            reply = encode_error(req.id, exc)
        return reply, cluster.faults.state.slow_ms

    def _batch(self, request_id: int, cluster: ClusterModel, raw_args: msgspec.Raw,
               fence: tuple[str, int] | None = None) -> bytes:  # fmt: skip
        """Many calls of one method, each answered on its own (one failing call fails only itself);
        a stale owner fence refuses the whole batch before any call runs."""
        try:
            method, raw_calls = batch_head_decoder.decode(raw_args)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            return encode_error(request_id, InvalidRequest(f"bad batch: {exc}"))
        spec = METHODS.get(method)
        if spec is None:
            return encode_error(request_id, InvalidRequest(f"unknown method {method!r}"))
        if fence is not None and method in MUTATING_METHODS:
            try:
                cluster.check_owner_fence(fence)
            except PortError as exc:
                return encode_error(request_id, exc)
        fn = getattr(cluster, method)
        wrapped = getattr(fn, "__wrapped__", None)
        if wrapped is not None and cluster._journal is None:  # the journal's wrapper would only pass each call on
            fn = wrapped.__get__(cluster)
        astuple = msgspec.structs.astuple
        try:  # every call's arguments in one decode; a bad one sends the batch the slow way below
            calls: list[Any] = [astuple(a) for a in spec.batch_decoder.decode(raw_calls)]
        except (msgspec.DecodeError, msgspec.ValidationError):
            try:
                calls = batch_calls_decoder.decode(raw_calls)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                return encode_error(request_id, InvalidRequest(f"bad batch: {exc}"))
            return self._batch_one_by_one(request_id, method, spec.args_decoder, fn, calls)
        out: list[tuple[bool, Any]] = []
        for args in calls:
            try:
                out.append((True, fn(*args)))
            except Exception as exc:  # noqa: BLE001 - a model bug must not take the server down
                out.append((False, error_body(exc)))
        self.requests_served += len(calls) - 1
        return encode_ok(request_id, out)

    def _batch_one_by_one(self, request_id: int, method: str, decoder: msgspec.msgpack.Decoder[Any], fn: Any,
                          calls: list[msgspec.Raw]) -> bytes:  # fmt: skip
        """A batch with a malformed call: each call decoded on its own, so only that one fails."""
        astuple = msgspec.structs.astuple
        out: list[tuple[bool, Any]] = []
        for raw in calls:
            try:
                out.append((True, fn(*astuple(decoder.decode(raw)))))
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                out.append((False, error_body(InvalidRequest(f"bad arguments for {method}: {exc}"))))
            except Exception as exc:  # noqa: BLE001 - a model bug must not take the server down
                out.append((False, error_body(exc)))
        self.requests_served += len(calls) - 1
        return encode_ok(request_id, out)

    def _server_method(self, request_id: int, method: str, raw_args: msgspec.Raw) -> bytes:
        if method == "ping":
            return encode_ok(request_id, "pong")
        if method == "list_clusters":
            return encode_ok(request_id, sorted(self.clusters))
        if method == "add_cluster":
            try:
                args = _add_cluster_decoder.decode(raw_args)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                return encode_error(request_id, InvalidRequest(f"bad arguments for add_cluster: {exc}"))
            if args.name in self.clusters:
                return encode_error(request_id, InvalidRequest(f"cluster {args.name!r} exists"))
            if not 1 <= args.brokers <= 64:
                return encode_error(request_id, InvalidRequest(f"bad broker count {args.brokers}"))
            self.clusters[args.name] = ClusterModel(args.name, seed=args.seed, brokers=args.brokers, journal=False)
            self.fetch_sessions.attach(args.name, self.clusters[args.name])
            if self.kafka is not None:
                listeners = self.kafka.add_cluster(args.name, self.clusters[args.name])
                task = asyncio.get_running_loop().create_task(listeners.start())
                self._pending.add(task)
                task.add_done_callback(self._pending.discard)
            return encode_ok(request_id, args.name)
        if method == "kafka_listeners":
            if self.kafka is None:
                return encode_ok(request_id, [])
            return encode_ok(request_id, [list(a) for a in self.kafka.addresses()])
        try:
            self.save()
        except OSError as exc:
            return encode_error(request_id, InvalidRequest(f"cannot save snapshot: {exc}"))
        return encode_ok(request_id, str(self.snapshot_path) if self.snapshot_path else None)

    # ---------------------------------------------------------------- connections

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        buf = bytearray()
        self._connections.add(writer)
        try:
            while True:
                data = await reader.read(1 << 20)  # a mirror's append is megabytes: fewer, larger reads
                if not data:
                    break
                buf += data
                replies: list[bytes] = []
                delay_ms = 0
                pos = 0
                close = False
                while len(buf) - pos >= HEADER:
                    size = int.from_bytes(buf[pos : pos + HEADER], "big")
                    if size > MAX_FRAME_BYTES:
                        replies.append(encode_error(-1, InvalidRequest(f"frame of {size} bytes exceeds limit")))
                        close = True
                        break
                    if len(buf) - pos - HEADER < size:
                        break
                    with memoryview(buf) as view:  # one copy (a bytearray slice would be a second)
                        payload = bytes(view[pos + HEADER : pos + HEADER + size])
                    pos += HEADER + size
                    reply, slow = self.dispatch(payload)
                    if isinstance(reply, _Parked):
                        # A long poll: the replies before it go first, in order.
                        if replies:
                            writer.write(b"".join(replies))
                            replies.clear()
                        reply = await self._fetch_wait(reply, writer)
                    replies.append(reply)
                    delay_ms += slow
                del buf[:pos]
                if delay_ms:
                    await asyncio.sleep(delay_ms / 1000)
                if replies:
                    writer.write(b"".join(replies))
                    await writer.drain()
                if close:
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            self._connections.discard(writer)
            self.fetch_sessions.close_owner(writer)
            writer.close()
            try:
                await writer.wait_closed()
            except (ConnectionError, OSError):
                pass

    async def _fetch_wait(self, parked: _Parked, owner: object) -> bytes:
        """A fetch session's long poll (``clustermodel.fetch_sessions``): parks this connection only."""
        if parked.cluster not in self.clusters:
            return encode_error(parked.id, InvalidRequest(f"unknown cluster {parked.cluster!r}"))
        try:
            args = watch_args_decoder.decode(parked.args)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            return encode_error(parked.id, InvalidRequest(f"bad arguments for {FETCH_WAIT}: {exc}"))
        try:
            return encode_ok(parked.id, await self.fetch_sessions.watch(parked.cluster, args, owner))
        except (PortError, ModelError) as exc:
            return encode_error(parked.id, exc)

    async def start(self, host: str, port: int) -> int:
        if not is_loopback(host):
            raise ValueError(f"refusing to listen on non-loopback host {host!r}")
        # Buffered up to 2 MiB before the transport pauses (64 KiB by default: a pause and a resume per
        # 128 KiB of a mirrored append).
        self._server = await asyncio.start_server(self.handle, host, port, limit=1 << 20)
        return int(self._server.sockets[0].getsockname()[1])

    async def start_kafka(self, host: str) -> None:
        """Kafka-protocol listeners for every cluster, one port per modelled broker."""
        from .kafka import KafkaListeners

        self.kafka = KafkaListeners(self.clusters, host)
        await self.kafka.start()

    async def stop(self) -> None:
        if self.kafka is not None:
            await self.kafka.stop()
        if self._server is not None:
            self._server.close()
            for writer in list(self._connections):
                # abort, not close: close waits to flush replies a vanished client will never read.
                writer.transport.abort()
            await self._server.wait_closed()
            # Let connection handlers see their closed streams and finish.
            for _ in range(3):
                await asyncio.sleep(0)
        self.save()

    def save(self) -> None:
        if self.snapshot_path is not None:
            tmp = self.snapshot_path.with_suffix(self.snapshot_path.suffix + ".tmp")
            tmp.write_bytes(dump_clusters(self.clusters))
            tmp.replace(self.snapshot_path)


class _Parked(msgspec.Struct):
    """A request that waits (a fetch session's long poll): answered by ``ModelServer._fetch_wait``."""

    id: int
    cluster: str
    args: msgspec.Raw


def _salvage_id(payload: bytes) -> int:
    try:
        value = msgspec.msgpack.decode(payload)
    except msgspec.DecodeError:
        return -1
    if isinstance(value, list) and value and isinstance(value[0], int):
        return value[0]
    return -1


def build_clusters(names: Sequence[str], seed: int, brokers: int, snapshot: Path | None) -> dict[str, ClusterModel]:
    """Clusters from the snapshot if it exists, plus fresh ones (seed + index) for names it lacks."""
    clusters: dict[str, ClusterModel] = {}
    if snapshot is not None and snapshot.exists():
        clusters = load_clusters(snapshot.read_bytes(), ClusterModel)
    for index, name in enumerate(names):
        if name not in clusters:
            clusters[name] = ClusterModel(name, seed=seed + index, brokers=brokers, journal=False)
    return clusters


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="clustermodel-server", description="Run model Kafka clusters on loopback.")
    parser.add_argument("--host", default="127.0.0.1", help="loopback address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port; 0 picks a free one (printed first on stdout)")
    parser.add_argument("--cluster", action="append", default=[], metavar="NAME", help="a cluster name (repeatable)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first cluster; the next ones get seed+1, ...")
    parser.add_argument("--brokers", type=int, default=3, help="brokers per cluster (default 3)")
    parser.add_argument("--snapshot", type=Path, default=None, metavar="FILE", help="load state at start, save at stop")
    parser.add_argument(
        "--kafka-listeners", action=argparse.BooleanOptionalAction, default=True,
        help="serve the Kafka protocol, one port per modelled broker (default on); "
        "each is printed as 'KAFKA <cluster> <broker> <host>:<port>'",
    )
    parser.add_argument("--kafka-host", default=None, help="loopback address of the Kafka listeners (default: --host)")
    return parser.parse_args(argv)


async def serve(args: argparse.Namespace) -> int:
    clusters = build_clusters(args.cluster or ["default"], args.seed, args.brokers, args.snapshot)
    server = ModelServer(clusters, args.snapshot)
    # Signal handlers first: a SIGTERM right after the PORT line must still save and exit 0.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if args.kafka_listeners:
        # Before the control port opens, so no add_cluster call races the listeners' start.
        await server.start_kafka(args.kafka_host or args.host)
    port = await server.start(args.host, args.port)
    print(f"PORT {port}", flush=True)
    if server.kafka is not None:
        for cluster, broker, host, kport in server.kafka.addresses():
            print(f"KAFKA {cluster} {broker} {f'[{host}]' if ':' in host else host}:{kport}", flush=True)
    print(f"clusters: {', '.join(sorted(clusters))} on {args.host}:{port}", flush=True)
    await stop.wait()
    await server.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point: clustermodel-server."""
    args = parse_args(argv)
    # Fewer full collections: a model of 100,000s of partitions holds millions of objects, each
    # full collection walks them all (as the worker, streams.worker.main.GC_THRESHOLDS).
    gc.set_threshold(20_000, 10, 10)
    keep_large_buffers()  # mirrored appends are megabytes: no page faults per copy (records.buffers)
    if not is_loopback(args.host):
        print(f"error: --host must be a loopback address, got {args.host!r}", file=sys.stderr)
        return 2
    if args.kafka_host is not None and not is_loopback(args.kafka_host):
        print(f"error: --kafka-host must be a loopback address, got {args.kafka_host!r}", file=sys.stderr)
        return 2
    if not 0 <= args.port <= 65535:
        print(f"error: bad --port {args.port}", file=sys.stderr)
        return 2
    return asyncio.run(serve(args))


if __name__ == "__main__":
    sys.exit(main())
