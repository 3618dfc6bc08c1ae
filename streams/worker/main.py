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

This module only parses the command line and picks the role: the worker
(``streams.worker.worker_role``) or the controller (``streams.worker.controller_role``), imported
then, so a controller never imports Faust or the worker's app (its restart is start-up bound).

``--metrics-listener HOST:PORT`` (``metrics.listener``, loopback) serves ``/metrics``, ``/healthz``
and ``/readyz`` from either role (``streams.worker.metrics``) and prints ``METRICS HOST:PORT``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import sys
from collections.abc import Sequence
from dataclasses import replace

from records.buffers import keep_large_buffers, one_heap
from streams import config as worker_config
from streams.config import WorkerConfig
from streams.runner import backoff as fetch_backoff
from streams.runner.destination_check import check_destination


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
        from streams.worker.controller_role import run_controller_role

        try:
            return asyncio.run(run_controller_role(cfg, args))
        except worker_config.ConfigError as e:  # a bad admin.listener.ssl.* setting, an unsafe bind
            sys.stderr.write(f"error: {e}\n")
            return 2
    from streams.worker.worker_role import run_worker

    return run_worker(cfg, args)


if __name__ == "__main__":
    sys.exit(main())
