"""``kip1279-kafka``: Apache Kafka on loopback in the foreground (``streams.brokers.apache_kafka``),
or one of its tools on the pinned classpath."""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile

from streams.brokers.apache_kafka import DEFAULT_READY_TIMEOUT_S, ApacheKafkaCluster
from streams.brokers.kafka_jars import DEFAULT_HEAP, KafkaUnavailable, java_command, kafka_lib, kafka_version, missing_reason
from streams.brokers.noida import BrokerError, StopSignals


def main(argv: list[str] | None = None) -> int:
    """``kip1279-kafka``: run Apache Kafka on loopback in the foreground, or one of its tools."""
    parser = argparse.ArgumentParser(
        prog="kip1279-kafka",
        description="Apache Kafka (KRaft) on 127.0.0.1, from the jars bin/setup fetched into tools/kafka/lib/.",
    )
    sub = parser.add_subparsers(dest="command")
    run = sub.add_parser("run", help="start a cluster and keep it up until Ctrl-C (the default)")
    run.add_argument("--brokers", type=int, default=1, help="1: one combined-mode node; N>1: a controller and N brokers")
    run.add_argument("--ha", action="store_true",
                     help="3 combined-mode nodes: 3 brokers and a quorum of 3 KRaft controllers, internal topics at "
                          "replication factor 3 and min.insync.replicas 2 (any one node may die)")  # fmt: skip
    run.add_argument("--data-dir", help="where the nodes keep their storage (default: a new temporary directory)")
    run.add_argument("--heap", default=DEFAULT_HEAP, help=f"-Xmx of each node (default {DEFAULT_HEAP})")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a server property for every node")
    run.add_argument("--ready-timeout", type=float, default=DEFAULT_READY_TIMEOUT_S)
    run.add_argument("--kafka-version", metavar="V", help="one of the source matrix's versions "
                     "(tools/kafka/versions/V, fetched by bin/setup) instead of the pinned one")  # fmt: skip
    tool = sub.add_parser("tool", help="run a Kafka tool class on the classpath, e.g. org.apache.kafka.tools.DumpLogSegments --files F")
    tool.add_argument("main_class")
    tool.add_argument("args", nargs=argparse.REMAINDER)
    sub.add_parser("check", help="say whether Java and the Kafka jars are there; exit 1 if not")
    args = parser.parse_args(argv)
    if args.command == "check":
        reason = missing_reason()
        print(reason or f"Apache Kafka {kafka_version()} is ready in {kafka_lib()}")
        return 1 if reason else 0
    if args.command == "tool":
        try:
            cmd = java_command(args.main_class, args.args)
        except KafkaUnavailable as e:
            print(f"kip1279-kafka: {e}", file=sys.stderr)
            return 1
        return subprocess.call(cmd)
    if args.command is None:
        args = parser.parse_args(["run", *(argv or sys.argv[1:])])
    overrides = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--set wants KEY=VALUE, not {item!r}")
        overrides[key] = value
    data_dir = args.data_dir or tempfile.mkdtemp(prefix="kip1279-kafka-")
    signals = StopSignals()
    try:
        if args.ha:
            cluster = ApacheKafkaCluster(data_dir, brokers=3, combined=True, heap=args.heap, overrides=overrides,
                                         version=args.kafka_version)  # fmt: skip
        else:
            cluster = ApacheKafkaCluster(data_dir, brokers=args.brokers, heap=args.heap, overrides=overrides,
                                         version=args.kafka_version)  # fmt: skip
        cluster.start(args.ready_timeout)
    except (BrokerError, ValueError) as e:
        print(f"kip1279-kafka: {e}", file=sys.stderr)
        return 1
    print(cluster.bootstrap, flush=True)
    print(
        f"Apache Kafka {cluster.version}, cluster id {cluster.cluster_id}, data dir {data_dir}; "
        f"formatted in {cluster.format_s:.1f}s, ready in {cluster.startup_s:.1f}s; Ctrl-C stops it",
        file=sys.stderr, flush=True,
    )  # fmt: skip
    try:
        signals.wait(lambda: all(n.is_running() for n in cluster.nodes))
    finally:
        cluster.stop()
    if not signals.stopping:
        print("kip1279-kafka: a node exited on its own", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
