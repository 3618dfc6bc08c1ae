"""``kip1279-worker``: the stream worker of one destination cluster (and, with ``--controller``,
that cluster's controller with the source-topic registration the model setup needs).

    kip1279-worker --bootstrap-server 127.0.0.1:9092 --cluster-name B --model-port 7000 --data-dir ./data
    kip1279-worker ... --session-timeout-ms 10000 --heartbeat-interval-ms 1000   # worker.session.timeout.ms etc.
    kip1279-worker --controller --listener 127.0.0.1:9393 --bootstrap-server ... --cluster-name B --model-port 7000

The worker runs the Faust app of ``streams.app`` (no web server: it would bind 0.0.0.0); the
input topics are created first with the table's partition count. SIGTERM/SIGINT stop it
cleanly; a SIGKILL loses nothing that was acknowledged (see ``streams.app``). A worker's table
partitions go to the other workers when it leaves the group (SIGTERM) or when the broker expires
its session (``worker.session.timeout.ms``: Faust's 60 s by default; brokers accept 6 s to 30 min).

``--controller`` runs ``ClusterMirrorController`` and, every second, registers in the metadata
log the topics of each mirror's source cluster that the log does not have yet (TopicRecord and
PartitionRecords with the source's topic ID), as a destination learns of the topics it mirrors.
Describe shows source HW and destination LEO from the model clusters unless ``--no-offsets``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from coordinator.ports import PortError
from records.framing import ApiMessageAndVersion
from records.registry import default_schemas
from streams import config as worker_config
from streams.app import CoordinatorWorker, ReconnectingClient, model_cluster_of, worker_topic_specs
from streams.config import WorkerConfig, ensure_topics

log = logging.getLogger("streams.worker")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kip1279-worker", description="KIP-1279 coordinator stream worker.")
    p.add_argument("--config", help="worker properties (bootstrap.servers, cluster.name, cluster.model.port, ...)")
    p.add_argument("--bootstrap-server", help="Kafka bootstrap servers of the coordinator's topics")
    p.add_argument("--cluster-name", help="the destination cluster this coordinator serves (topic prefix)")
    p.add_argument("--data-dir", help="RocksDB tables and metadata snapshots live here")
    p.add_argument("--state-partitions", type=int, help="mirror.state.topic.num.partitions")
    p.add_argument("--model-port", type=int, help="cluster-model server port (cluster.model.port)")
    p.add_argument("--model-cluster", help="the model cluster this destination is (default: --cluster-name)")
    p.add_argument("--session-timeout-ms", type=int,
                   help="worker.session.timeout.ms: a worker silent this long loses its table partitions")
    p.add_argument("--heartbeat-interval-ms", type=int, help="worker.heartbeat.interval.ms")
    p.add_argument("--rebalance-timeout-ms", type=int,
                   help="worker.rebalance.timeout.ms: how long a rebalance waits for workers to rejoin")
    p.add_argument("--tick-interval", type=float, default=0.25, help="seconds between ticks per table partition")
    p.add_argument("--threads", type=int, default=4, help="port-call thread pool size")
    p.add_argument("--controller", action="store_true", help="run the controller of this cluster instead")
    p.add_argument("--listener", help="--controller: admin endpoint HOST:PORT on loopback")
    p.add_argument("--super-users", default="", help="--controller: comma-separated principals allowed everything")
    p.add_argument("--no-offsets", action="store_true", help="--controller: describe without source HW / dest LEO")
    p.add_argument("--loglevel", default="info")
    return p


def load_config(args: argparse.Namespace) -> WorkerConfig:
    cfg = worker_config.load(args.config, bootstrap_servers=args.bootstrap_server, cluster_name=args.cluster_name,
                             data_dir=args.data_dir, state_partitions=args.state_partitions,
                             controller_listener=args.listener, session_timeout_ms=args.session_timeout_ms,
                             heartbeat_interval_ms=args.heartbeat_interval_ms,
                             rebalance_timeout_ms=args.rebalance_timeout_ms)  # fmt: skip
    extra = dict(cfg.extra)
    if args.model_port:
        extra["cluster.model.port"] = str(args.model_port)
    if args.model_cluster:
        extra["cluster.model.cluster"] = args.model_cluster
    return replace(cfg, extra=extra)


# ------------------------------------------------------------------------------ the worker


def run_worker(cfg: WorkerConfig, args: argparse.Namespace) -> int:
    import faust

    worker_config.install_payload_redaction()
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    loop.run_until_complete(ensure_topics(cfg.bootstrap_servers, worker_topic_specs(cfg)))
    coordinator = CoordinatorWorker(cfg, tick_interval=args.tick_interval, threads=args.threads)
    fw = faust.Worker(coordinator.app, loop=loop, loglevel=args.loglevel.upper(), quiet=True,
                      redirect_stdouts=False, override_logging=False)  # fmt: skip
    log.info("worker for cluster %r starting (model port %s)", cfg.cluster_name, cfg.extra.get("cluster.model.port"))
    try:
        fw.execute_from_commandline()
    except SystemExit as e:
        return int(e.code or 0)
    finally:
        coordinator.close()
    return 0


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
    """Describe's source HW and destination LEO, from the model clusters."""

    def __init__(self, controller: Any, port: int, dest: str) -> None:
        self.controller, self.port, self.dest = controller, port, dest
        self.clients: dict[str, ReconnectingClient] = {}

    def client(self, cluster: str) -> ReconnectingClient:
        c = self.clients.get(cluster)
        if c is None:
            c = self.clients[cluster] = ReconnectingClient(self.port, cluster, 2.0)
        return c

    def __call__(self, mirror: str, topic_id: uuid.UUID, partition: int) -> tuple[int, int]:
        from coordinator.ports import TopicPartition

        tp = TopicPartition(topic_id, partition)
        hw = leo = -1
        m = self.controller.image.mirrors.get(mirror)
        with contextlib.suppress(PortError, ValueError):
            if m is not None:
                hw = self.client(model_cluster_of(m.source_bootstrap)).list_offsets(tp).hw
        with contextlib.suppress(PortError, ValueError):
            leo = self.client(self.dest).list_offsets(tp).leo
        return hw, leo


async def _register_topics(controller: Any, port: int, stop: asyncio.Event) -> None:
    clients: dict[str, ReconnectingClient] = {}
    while not stop.is_set():
        try:
            for name, mirror in sorted(controller.image.mirrors.mirrors.items()):
                try:
                    cluster = model_cluster_of(mirror.source_bootstrap)
                except ValueError:
                    continue
                client = clients.setdefault(cluster, ReconnectingClient(port, cluster, 10.0))
                try:
                    topics = await asyncio.to_thread(client.describe_topics)
                except PortError as e:
                    log.warning("mirror %s: source %s unavailable: %s", name, cluster, e)
                    continue
                records = topic_records(controller.image, topics)
                for start in range(0, len(records), 5000):
                    async with controller._lock:  # one writer, in request order
                        await controller.append(records[start : start + 5000], timeout=120.0)
                if records:
                    log.info("registered %d topic/partition record(s) of %s's source %s", len(records), name, cluster)
        except Exception:  # noqa: BLE001 - the next round tries again
            log.exception("topic registration failed")
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), 1.0)


async def run_controller_role(cfg: WorkerConfig, args: argparse.Namespace) -> int:
    from streams.controller import ClusterMirrorController, MirrorStateChangelogView

    port = int(cfg.extra.get("cluster.model.port", "0"))
    dest = cfg.extra.get("cluster.model.cluster", cfg.cluster_name)
    holder: dict[str, Any] = {}
    offsets = None
    if port and not args.no_offsets:
        offsets = lambda *k: holder["offsets"](*k)  # noqa: E731 - bound once the controller exists
    status = MirrorStateChangelogView(cfg.bootstrap_servers, cfg.mirror_state_topic_name, cfg.state_partitions, offsets=offsets)
    supers = frozenset(s.strip() for s in args.super_users.split(",") if s.strip())
    controller = ClusterMirrorController(cfg, status=status, super_users=supers)
    holder["offsets"] = _ModelOffsets(controller, port, dest)
    await ensure_topics(cfg.bootstrap_servers, worker_topic_specs(cfg))
    await controller.start()
    assert controller.address is not None
    print(f"LISTENING {controller.address[0]}:{controller.address[1]}", flush=True)
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
        await controller.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=getattr(logging, args.loglevel.upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")  # fmt: skip
    try:
        cfg = load_config(args)
    except worker_config.ConfigError as e:
        sys.stderr.write(f"error: {e}\n")
        return 2
    if args.controller:
        return asyncio.run(run_controller_role(cfg, args))
    return run_worker(cfg, args)


if __name__ == "__main__":
    sys.exit(main())
