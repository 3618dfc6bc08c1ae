"""``kip1279-worker``: the stream worker of one destination cluster (and, with ``--controller``,
that cluster's controller with the source-topic registration the model setup needs).

    kip1279-worker --bootstrap-server 127.0.0.1:9092 --cluster-name B --model-port 7000 --data-dir ./data
    kip1279-worker ... --session-timeout-ms 10000 --heartbeat-interval-ms 1000   # worker.session.timeout.ms etc.
    kip1279-worker --controller --listener 127.0.0.1:9393 --bootstrap-server ... --cluster-name B --model-port 7000

The worker runs the Faust app of ``streams.worker.app`` (no web server: it would bind 0.0.0.0); the
input topics are created first with the table's partition count. SIGTERM/SIGINT stop it
cleanly; a SIGKILL loses nothing that was acknowledged (see ``streams.worker.app``). A worker's table
partitions go to the other workers when it leaves the group (SIGTERM) or when the broker expires
its session (``worker.session.timeout.ms``: Faust's 60 s by default; brokers accept 6 s to 30 min).
It is a static group member (``--group-instance-id``, or the id kept in ``--data-dir``): restarted
after a SIGKILL, it takes its dead member over at once (``streams.worker.membership``). It exits with
code 1 if its consumer drops out of the group for good, and with code 70 if its Faust app
crashes (a task of it raised), for a supervisor to restart it.

``--controller`` runs ``ClusterMirrorController`` and registers in the metadata log the topics
of each mirror's source cluster that the log does not have yet (TopicRecord and PartitionRecords
with the source's topic ID), as a destination learns of the topics it mirrors: every second at
first, less often while the source shows nothing new, at least once per
``metadata.refresh.interval.ms`` (see ``_register_topics``). New source topics that a started
pattern selects are started then (discovery).
Describe shows source HW and destination LEO from the model clusters unless ``--no-offsets``.

``--metrics-listener HOST:PORT`` (``metrics.listener``, loopback) serves ``/metrics``, ``/healthz``
and ``/readyz`` from either role (``streams.worker.metrics``) and prints ``METRICS HOST:PORT``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from coordinator.ports import PortError
from records.buffers import keep_large_buffers, one_heap
from records.framing import ApiMessageAndVersion
from records.registry import default_schemas
from streams import tls
from streams.runner import backoff as fetch_backoff
from streams import config as worker_config
from streams.worker import membership, profiling
from streams.worker.app import CoordinatorWorker
from streams.worker.table import worker_topic_specs
from streams.worker.ports import ReconnectingClient, model_cluster_of, open_source, source_key
from streams.config import WorkerConfig, ensure_topics
from streams.runner.destination_check import check_destination
from streams.worker.liveness import LoopWatchdog
from streams.worker.presence import PresencePublisher
from streams.worker.exits import EXIT_GROUP_LOST

log = logging.getLogger("streams.worker.main")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kip1279-worker", description="KIP-1279 coordinator stream worker.")
    p.add_argument("--config", help="worker properties (bootstrap.servers, cluster.name, cluster.model.port, ...)")
    p.add_argument("--bootstrap-server", help="Kafka bootstrap servers of the coordinator's topics")
    p.add_argument("--cluster-name", help="the destination cluster this coordinator serves (topic prefix)")
    p.add_argument("--data-dir", help="RocksDB tables and metadata snapshots live here")
    p.add_argument("--state-partitions", type=int, help="mirror.state.topic.num.partitions")
    p.add_argument("--model-port", type=int, help="cluster-model server port (cluster.model.port)")
    p.add_argument("--model-cluster", help="the model cluster this destination is (default: --cluster-name)")
    p.add_argument("--destination-bootstrap-server",
                   help="destination.bootstrap.servers: a destination cluster over the Kafka protocol; checked at "
                        "start-up for KIP-1279's APIs (a cluster without them is refused, naming what it lacks)")
    p.add_argument("--session-timeout-ms", type=int,
                   help="worker.session.timeout.ms: a worker silent this long loses its table partitions")
    p.add_argument("--heartbeat-interval-ms", type=int, help="worker.heartbeat.interval.ms")
    p.add_argument("--rebalance-timeout-ms", type=int,
                   help="worker.rebalance.timeout.ms: how long a rebalance waits for workers to rejoin")
    p.add_argument("--group-instance-id",
                   help="worker.group.instance.id: this worker's static group membership (default: an id "
                        "made at its first start and kept in --data-dir)")
    p.add_argument("--metrics-listener",
                   help="metrics.listener: serve /metrics, /healthz and /readyz on loopback HOST:PORT (off by default)")
    p.add_argument("--audit-export-dir",
                   help="audit.export.dir: export audit snapshots (Parquet) under DIR/<cluster name> (off by default)")
    p.add_argument("--audit-export-interval-ms", type=int, help="audit.export.interval.ms (default 300000)")
    p.add_argument("--tick-interval", type=float, default=0.25, help="seconds between ticks per table partition")
    p.add_argument("--threads", type=int, default=4, help="port-call thread pool size")
    p.add_argument("--controller", action="store_true", help="run the controller of this cluster instead")
    p.add_argument("--listener", help="--controller: admin endpoint HOST:PORT; off loopback only with TLS "
                                      "(admin.listener.ssl.* in --config)")
    p.add_argument("--super-users", default="",
                   help="--controller: principals allowed everything, ';'-separated as Kafka's super.users")
    p.add_argument("--no-offsets", action="store_true", help="--controller: describe without source HW / dest LEO")
    p.add_argument("--loglevel", default="info")
    return p


def load_config(args: argparse.Namespace) -> WorkerConfig:
    cfg = worker_config.load(args.config, bootstrap_servers=args.bootstrap_server, cluster_name=args.cluster_name,
                             data_dir=args.data_dir, state_partitions=args.state_partitions,
                             controller_listener=args.listener, session_timeout_ms=args.session_timeout_ms,
                             heartbeat_interval_ms=args.heartbeat_interval_ms,
                             rebalance_timeout_ms=args.rebalance_timeout_ms,
                             group_instance_id=args.group_instance_id,
                             metrics_listener=args.metrics_listener, audit_export_dir=args.audit_export_dir,
                             audit_export_interval_ms=args.audit_export_interval_ms)  # fmt: skip
    extra = dict(cfg.extra)
    if args.model_port:
        extra["cluster.model.port"] = str(args.model_port)
    if args.model_cluster:
        extra["cluster.model.cluster"] = args.model_cluster
    if args.destination_bootstrap_server:
        extra["destination.bootstrap.servers"] = args.destination_bootstrap_server
    return replace(cfg, extra=extra)


# ------------------------------------------------------------------------------ the worker


def run_worker(cfg: WorkerConfig, args: argparse.Namespace) -> int:
    """Runs the worker until SIGTERM/SIGINT (exit 0), until it is out of its group for good
    (``EXIT_GROUP_LOST``) or until its Faust app crashes (``EXIT_CRASHED``); a clean stop leaves
    the group (see ``streams.worker.membership``), and so does a crash's unless the stop hangs."""
    import faust

    worker_config.install_payload_redaction()
    if not cfg.group_instance_id:
        cfg = replace(cfg, group_instance_id=membership.instance_id(cfg.cluster_data_dir, cfg.cluster_name))
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    profiling.profile_loop(loop)
    loop.run_until_complete(ensure_topics(cfg.bootstrap_servers, worker_topic_specs(cfg)))
    presence = PresencePublisher(cfg, cfg.group_instance_id).start()  # before it joins the group
    coordinator = CoordinatorWorker(cfg, tick_interval=args.tick_interval, threads=args.threads)

    def leave() -> None:  # a stop that hangs never reaches the ``finally`` below
        if coordinator.exit.member_id:
            _leave_group(cfg, coordinator.exit.member_id)

    coordinator.exit.on_fatal = lambda: _stop_self(code=coordinator.exit.exit_code, before_exit=leave)
    crashes = loop.create_task(coordinator.exit.watch_crash())  # noqa: F841 - held, as ``beats``
    watchdog = LoopWatchdog(cfg.unhealthy_exit_ms) if cfg.unhealthy_exit_ms else None
    if watchdog is not None:
        beats = loop.create_task(watchdog.beat())  # noqa: F841 - held: the loop keeps only weak references
    if cfg.metrics_address is not None:
        from streams.worker.metrics import serve_worker

        loop.run_until_complete(serve_worker(coordinator))
    fw = faust.Worker(coordinator.app, loop=loop, loglevel=args.loglevel.upper(), quiet=True,
                      redirect_stdouts=False, override_logging=False)  # fmt: skip
    log.info("worker %s for cluster %r starting (model port %s)", cfg.group_instance_id, cfg.cluster_name,
             cfg.extra.get("cluster.model.port"))  # fmt: skip
    code = 0
    try:
        fw.execute_from_commandline()
    except SystemExit as e:
        code = int(e.code or 0)
    finally:
        if watchdog is not None:
            watchdog.stop()  # a slow shutdown is not a stuck loop: _stop_self has its own backstop
        coordinator.close()
        presence.stop()
        if coordinator.exit.member_id:
            _leave_group(cfg, coordinator.exit.member_id)
    return coordinator.exit.exit_code or code


def _stop_self(grace_s: float = 30.0, code: int = EXIT_GROUP_LOST,
               before_exit: Callable[[], None] = lambda: None) -> None:  # fmt: skip
    """Stops this worker as SIGTERM does; should the stop hang, exits anyway with ``code`` after
    ``grace_s``, once ``before_exit`` (leaving the group) has run."""

    def backstop_exit() -> None:
        log.critical("the worker's stop has not finished after %.0f s; exiting with code %d", grace_s, code)
        try:
            before_exit()
        finally:
            logging.shutdown()  # flush the lines first
            os._exit(code)

    backstop = threading.Timer(grace_s, backstop_exit)
    backstop.daemon = True
    backstop.start()
    os.kill(os.getpid(), signal.SIGTERM)


def _leave_group(cfg: WorkerConfig, member: str) -> None:
    try:
        error = asyncio.run(membership.leave_group(cfg.bootstrap_servers, cfg.faust_app_id, member,
                                                   client_id=f"{cfg.client_id}-leave"))  # fmt: skip
    except Exception as e:  # noqa: BLE001 - the broker expires the member after its session instead
        log.warning("LeaveGroup for member %s of %s failed: %r", member, cfg.faust_app_id, e)
        return
    if error:
        log.info("member %s of %s was no longer in the group (error code %d)", member, cfg.faust_app_id, error)
    else:
        log.info("member %s left group %s", member, cfg.faust_app_id)


# -------------------------------------------------------------------------- the controller


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
    from streams.admin.controller import ClusterMirrorController
    from streams.state.changelog_view import MirrorStateChangelogView

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


GC_THRESHOLDS = (20_000, 10, 10)  # Python's (700, 10, 10) with 28x fewer young collections


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Fewer collections: with the default thresholds a mass failover's short-lived objects were
    # promoted fast enough to run a full collection (a walk over every object the process holds,
    # ~1M at 50,000 partitions) every few hundred ms: a fifth of the worker's CPU. With fewer
    # young collections they die young; the peak RSS stays within a few MB of the default's.
    gc.set_threshold(*GC_THRESHOLDS)
    keep_large_buffers()  # a mirrored batch's copies must not page-fault (records.buffers)
    one_heap()  # and what one thread frees, the next thread's allocations reuse (records.buffers)
    fetch_backoff.install()  # idle consumers must not busy-poll a broker that answers empty fetches at once
    # --loglevel LEVEL[,LOGGER=LEVEL...]: e.g. "warning,streams.worker.app=debug" for the round timings alone
    root, *per_logger = [part.strip() for part in args.loglevel.split(",") if part.strip()] or ["info"]
    args.loglevel = root
    logging.basicConfig(level=getattr(logging, root.upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")  # fmt: skip
    for item in per_logger:
        name, _, level = item.partition("=")
        logging.getLogger(name.strip()).setLevel(getattr(logging, level.strip().upper(), logging.INFO))
    try:
        cfg = load_config(args)
        check_destination(cfg.extra)  # fails fast on a destination without KIP-1279
    except worker_config.ConfigError as e:
        sys.stderr.write(f"error: {e}\n")
        return 2
    if args.controller:
        try:
            return asyncio.run(run_controller_role(cfg, args))
        except worker_config.ConfigError as e:  # a bad admin.listener.ssl.* setting, an unsafe bind
            sys.stderr.write(f"error: {e}\n")
            return 2
    return run_worker(cfg, args)


if __name__ == "__main__":
    sys.exit(main())
