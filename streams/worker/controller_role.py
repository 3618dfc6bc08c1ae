"""The controller role of ``kip1279-worker --controller`` (``streams.worker.main`` parses the
command line): ``ClusterMirrorController`` with the model setup's source-topic registration and
describe's offsets from the cluster ports. No Faust and no worker app here: a restarted
controller's start-up is its own imports, not the worker's."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import time
import uuid
from collections.abc import Sequence
from typing import Any

from coordinator.ports import PortError
from records.framing import ApiMessageAndVersion
from records.registry import default_schemas
from streams import tls
from streams.admin.controller import ClusterMirrorController
from streams.config import WorkerConfig, ensure_topics
from streams.state.changelog_view import MirrorStateChangelogView
from streams.worker.ports import ReconnectingClient, model_cluster_of, open_source, source_key
from streams.worker.topics import worker_topic_specs

log = logging.getLogger("streams.worker.main")


def _amv(_record: str, /, **fields: Any) -> ApiMessageAndVersion:
    s = default_schemas()
    return ApiMessageAndVersion(s.struct(_record)(**fields), 0, s.spec(_record).api_key)  # type: ignore[arg-type]


def topic_records(image: Any, source_topics: Sequence[Any]) -> list[ApiMessageAndVersion]:
    """TopicRecord/PartitionRecords for source topics (or partitions) the image lacks."""
    out: list[ApiMessageAndVersion] = []
    for t in source_topics:
        have = image.topics.get(t.topic_id)
        if have is None:
            if image.topics.get_by_name(t.name) is not None:
                continue  # a local topic of that name with another ID: the workflow reports it
            out.append(_amv("TopicRecord", name=t.name, topic_id=t.topic_id))
        known = set(have.partitions) if have is not None else set()
        for p in range(len(t.partitions)):
            if p not in known:
                out.append(_amv("PartitionRecord", partition_id=p, topic_id=t.topic_id, replicas=(1,), isr=(1,), leader=1))
    return out


class _ModelOffsets:
    """Describe's source HW and destination LEO, from the model clusters.

    ``ListOffsets`` per partition and cluster, ``CHUNK`` partitions per batched call (not one
    round trip each) on a worker thread, so a describe of 50,000 partitions neither blocks the
    controller's event loop nor waits on 100,000 sequential round trips.
    """

    CHUNK = 5000

    def __init__(self, controller: Any, port: int, dest: str) -> None:
        self.controller, self.port, self.dest = controller, port, dest
        self.clients: dict[str, ReconnectingClient] = {}
        self.sources: dict[Any, Any] = {}  # source_key -> a model client or a KafkaSourceCluster

    def client(self, cluster: str) -> ReconnectingClient:
        c = self.clients.get(cluster)
        if c is None:
            c = self.clients[cluster] = ReconnectingClient(self.port, cluster, 2.0)
        return c

    def source(self, key: Any, mirror: Any) -> Any:
        c = self.sources.get(key)
        if c is None:
            c = self.sources[key] = open_source(mirror, self.port, 2.0)
        return c

    async def __call__(self, keys: Sequence[tuple[str, uuid.UUID, int]]
                       ) -> dict[tuple[str, uuid.UUID, int], tuple[int, int, str | None]]:  # fmt: skip
        """(source HW, destination LEO, why the source could not say, or None) per key."""
        from coordinator.ports import TopicPartition

        # Mirror -> source cluster on the loop: the controller's image is built there, not thread-safe.
        mirrors = self.controller.image.mirrors
        sources: dict[str, Any] = {}
        ports: dict[Any, Any] = {}
        for name in {k[0] for k in keys}:
            m = mirrors.get(name)
            sources[name] = source_key(m) if m is not None else None
            if m is not None and sources[name] not in ports:
                try:
                    ports[sources[name]] = self.source(sources[name], m)
                except ValueError:
                    sources[name] = None
        tps = [TopicPartition(k[1], k[2]) for k in keys]
        by_source: dict[Any, list[int]] = {}
        for i, k in enumerate(keys):
            if (src := sources[k[0]]) is not None:
                by_source.setdefault(src, []).append(i)
        # Clients are made here, on the loop; the thread then uses each one alone.
        jobs = [(ports[src], [tps[i] for i in idx]) for src, idx in by_source.items()]
        jobs.append((self.client(self.dest), tps))
        results = await asyncio.to_thread(lambda: [self._list_offsets(c, t) for c, t in jobs])
        hws: list[tuple[int, str | None]] = [(-1, None)] * len(keys)
        for src, idx, found in zip(by_source, by_source.values(), results[:-1], strict=True):
            for i, o in zip(idx, found, strict=True):
                hws[i] = (-1, f"source {_source_name(src[0])}: {o}") if isinstance(o, str) else (o.hw, None)
        return {k: (hw, o.leo if not isinstance(o, str) else -1, why)
                for k, (hw, why), o in zip(keys, hws, results[-1], strict=True)}  # fmt: skip

    @classmethod
    def _list_offsets(cls, client: ReconnectingClient, tps: Sequence[Any]) -> list[Any]:
        """PartitionOffsets per partition, or why the cluster could not say (unknown topic, down)."""
        from coordinator.ports import PartitionOffsets

        out: list[Any] = []
        for start in range(0, len(tps), cls.CHUNK):
            chunk = tps[start : start + cls.CHUNK]
            try:
                replies = client.call_many([("list_offsets", (tp,), None) for tp in chunk])
            except PortError as e:  # the cluster is down: the remaining chunks would only wait too
                log.warning("offsets of %d partition(s) on %s unavailable: %s", len(tps) - start, client.cluster, e)
                return out + [str(e)] * (len(tps) - start)
            out += [r if isinstance(r, PartitionOffsets) else str(r) for r in replies]
        return out


def _source_name(bootstrap: str) -> str:
    """A model source by its cluster name, a Kafka source by its bootstrap servers."""
    try:
        return model_cluster_of(bootstrap)
    except ValueError:
        return bootstrap


def _refresh_interval_s(mirror: Any) -> float:
    """The mirror's ``metadata.refresh.interval.ms``, in seconds."""
    from coordinator.workflows.config import MirrorConfig

    try:
        return MirrorConfig.from_properties(mirror.configs).metadata_refresh_interval_ms / 1000
    except ValueError:
        return MirrorConfig().metadata_refresh_interval_ms / 1000


async def _register_topics(controller: Any, port: int, stop: asyncio.Event, tick: float = 1.0,
                           cost_factor: float = 10.0) -> None:  # fmt: skip
    """Registers each mirror's new source topics and partitions, and starts the topics its
    started patterns select (``ClusterMirrorController.discover``).

    Describing a source of 1,000 x 50 partitions costs ~0.15 s of CPU (model server and this
    process), so a mirror whose source showed nothing new is asked again later and later: the
    period doubles from ``tick`` up to its ``metadata.refresh.interval.ms`` (the pace at which a
    destination learns of source changes anyway), and is never under ``cost_factor`` times what
    the last describe took. A new mirror, a changed source or newly registered topics reset it.
    """
    clients: dict[Any, Any] = {}  # source_key -> source port
    rounds: dict[str, tuple[str, float, float]] = {}  # mirror -> (source bootstrap, next describe at, period)
    while not stop.is_set():
        try:
            # A standby registers nothing (the active controller does): as if there were no mirrors.
            mirrors = controller.image.mirrors.mirrors if getattr(controller, "active", True) else {}
            for gone in rounds.keys() - mirrors.keys():
                del rounds[gone]
                controller.source_cluster_ids.pop(gone, None)
            used = {source_key(m) for m in mirrors.values()}
            for key in [k for k in clients if k not in used]:  # a deleted mirror, or new connection settings
                await asyncio.to_thread(clients.pop(key).close)
            for name, mirror in sorted(mirrors.items()):
                last = rounds.get(name)
                if last is not None and last[0] == mirror.source_bootstrap and time.monotonic() < last[1]:
                    continue
                key = source_key(mirror)
                cluster = _source_name(mirror.source_bootstrap)
                client = clients.get(key)
                if client is None:
                    try:
                        client = clients[key] = open_source(mirror, port, 10.0)
                    except ValueError as e:
                        log.warning("mirror %s: cannot reach its source: %s", name, e)
                        continue
                started = time.monotonic()
                try:
                    topics = await asyncio.to_thread(client.describe_topics)
                except PortError as e:
                    log.warning("mirror %s: source %s unavailable: %s", name, cluster, e)
                    continue
                took = time.monotonic() - started
                if last is not None and last[0] != mirror.source_bootstrap:
                    controller.source_cluster_ids.pop(name, None)  # another source now
                if name not in controller.source_cluster_ids:
                    try:  # for --list: a source that answers says who it is
                        controller.source_cluster_ids[name] = await asyncio.to_thread(client.cluster_id)
                    except PortError as e:
                        log.warning("mirror %s: source %s did not give its cluster ID: %s", name, cluster, e)
                records = topic_records(controller.image, topics)
                for start in range(0, len(records), 5000):
                    async with controller._lock:  # one writer, in request order
                        await controller.append(records[start : start + 5000], timeout=120.0)
                if records:
                    log.info("registered %d topic/partition record(s) of %s's source %s", len(records), name, cluster)
                await controller.discover(name, {t.name: t.topic_id for t in topics})
                if records or last is None or last[0] != mirror.source_bootstrap:
                    period = tick
                else:
                    period = min(max(last[2] * 2, tick), max(tick, _refresh_interval_s(mirror)))
                period = max(period, cost_factor * took)
                rounds[name] = (mirror.source_bootstrap, started + period, period)
        except Exception:  # noqa: BLE001 - the next round tries again
            log.exception("topic registration failed")
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), tick)


async def run_controller_role(cfg: WorkerConfig, args: argparse.Namespace) -> int:
    port = int(cfg.extra.get("cluster.model.port", "0"))
    dest = cfg.extra.get("cluster.model.cluster", cfg.cluster_name)
    holder: dict[str, Any] = {}
    offsets = None
    if port and not args.no_offsets:

        async def offsets(keys: Sequence[Any]) -> Any:  # bound once the controller exists
            return await holder["offsets"](keys)
    status = MirrorStateChangelogView(cfg.bootstrap_servers, cfg.mirror_state_topic_name, cfg.state_partitions, offsets=offsets)
    supers = tls.parse_super_users(args.super_users)
    controller = ClusterMirrorController(cfg, status=status, super_users=supers)
    holder["offsets"] = _ModelOffsets(controller, port, dest)
    if port:  # --stop/--start --dry-run: the mirror's ports, opened per preview as the worker opens them
        controller.preview_ports = lambda mirror: (open_source(mirror, port, 5.0), ReconnectingClient(port, dest, 5.0))
    await ensure_topics(cfg.bootstrap_servers, worker_topic_specs(cfg))
    await controller.start()
    assert controller.address is not None
    print(f"LISTENING {controller.address[0]}:{controller.address[1]}", flush=True)
    served = None
    if cfg.metrics_address is not None:
        from streams.worker.metrics import serve_controller

        served = await serve_controller(controller)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    task = asyncio.create_task(_register_topics(controller, port, stop)) if port else None
    try:
        await stop.wait()
    finally:
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if served is not None:
            await served()
        await controller.stop()
    return 0
