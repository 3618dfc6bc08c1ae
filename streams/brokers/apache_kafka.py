"""Apache Kafka itself on loopback: a KRaft cluster started from the jars Maven fetched.

noida-db (``streams.brokers.noida``) stays the tests' pip-only default; the main job and the
benchmarks use this one for the coordinator's own topics (``streams.brokers.own``). It runs a
combined-mode single node (``process.roles=broker,controller``) or one controller plus N brokers,
all on free 127.0.0.1 ports, each node with its own storage formatted by Kafka's ``StorageTool``.

The runtime classpath is ``tools/kafka/lib/`` (git-ignored), filled by ``bin/setup`` from
``tools/kafka/pom.xml``, which pins the version. Readiness is a Metadata request on every
broker listener that must list every broker (Kafka lists only unfenced brokers); a
controller-only node is probed with ApiVersions. Stop is SIGTERM, then SIGKILL after a grace.
"""

from __future__ import annotations

import argparse
import base64
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from streams.brokers.noida import (
    LOOPBACK,
    BrokerError,
    StopSignals,
    _die_with_parent,
    _recv_exactly,
    free_port,
    probe,
    require_loopback,
    stop_process,
)
from streams.brokers.kafka_jars import DEFAULT_HEAP, KafkaUnavailable, java_command, kafka_lib, kafka_version, missing_reason

STOP_GRACE_S = 15.0  # a broker's controlled shutdown takes a few seconds
DEFAULT_READY_TIMEOUT_S = 120.0
METADATA_KEY = 3
BROKER_MAIN = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"


def new_cluster_id() -> str:
    """A KRaft cluster id as Kafka's ``Uuid.randomUuid().toString()`` makes one (base64url, 22 chars)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        if not text.startswith("-"):  # Kafka avoids ids that read as a command-line option
            return text


LOG4J2 = """\
status = error
rootLogger.level = {level}
rootLogger.appenderRef.file.ref = FILE
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {path}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
"""


@dataclass
class KafkaNode:
    node_id: int
    roles: tuple[str, ...]  # ("broker",), ("controller",) or both
    directory: Path
    broker_port: int | None
    controller_port: int | None
    proc: subprocess.Popen[bytes] | None = None
    # Listener name -> port of the broker's extra listeners (SSL, SASL_SSL, ...), beside PLAINTEXT.
    extra_ports: dict[str, int] = field(default_factory=dict)
    started_at: float = 0.0
    ready_after_s: float | None = None
    _out: object | None = field(default=None, repr=False)

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    @property
    def log_dir(self) -> Path:
        return self.directory / "logs"

    @property
    def properties_path(self) -> Path:
        return self.directory / "server.properties"

    @property
    def server_log(self) -> Path:
        return self.directory / "server.log"

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, limit: int = 2000) -> str:
        chunks = []
        for p in (self.directory / "stdout.log", self.server_log):
            try:
                chunks.append(p.read_bytes()[-limit:].decode("utf-8", "replace").strip())
            except OSError:
                pass
        return " | ".join(c for c in chunks if c)


class ApacheKafkaCluster:
    """A KRaft cluster of Apache Kafka on 127.0.0.1: ``brokers=1`` is one combined-mode node
    (node 1); ``brokers=N>1`` (or ``combined=False``) is controller node 0 plus brokers 1..N;
    ``brokers=N, combined=True`` is N combined-mode nodes 1..N, a quorum of N controllers.

    ``overrides`` are extra server properties for every node (e.g. ``{"log.retention.ms": ...}``);
    ``format_args`` go to every node's ``kafka-storage format`` (e.g. ``--feature group.version=0``).
    Use as a context manager, or ``start()``/``stop()``. ``startup_s`` is the wall time from the
    first JVM launch to a ready cluster (formatting excluded: ``format_s``).
    """

    def __init__(
        self,
        base_dir: str | os.PathLike[str],
        brokers: int = 1,
        combined: bool | None = None,
        heap: str = DEFAULT_HEAP,
        overrides: dict[str, str] | None = None,
        host: str = LOOPBACK,
        lib: Path | None = None,
        die_with_parent: bool = True,
        format_args: Sequence[str] = (),
        extra_listeners: Mapping[str, str] | None = None,
    ) -> None:
        """``extra_listeners``: listener name -> security protocol (``{"SASL_SSL": "SASL_SSL"}``),
        each on its own free port of every broker, beside PLAINTEXT (which brokers use between
        themselves); their settings go in ``overrides`` (``listener.name.sasl_ssl.*``, ``ssl.*``)."""
        if brokers < 1:
            raise ValueError("brokers must be at least 1")
        self.host = require_loopback(host)
        self.base_dir = Path(base_dir)
        self.combined = (brokers == 1) if combined is None else combined
        self.heap = heap
        self.overrides = dict(overrides or {})
        self.lib = lib
        self.format_args = list(format_args)  # e.g. ["--feature", "group.version=0"]
        self.die_with_parent = die_with_parent
        self.cluster_id = new_cluster_id()
        self.version = kafka_version()
        self.format_s: float | None = None
        self.startup_s: float | None = None
        self.nodes: list[KafkaNode] = []
        self._directory_ids: dict[int, str] = {}
        if self.combined:  # N combined nodes: N brokers and a quorum of N controllers (3: the HA setup)
            for i in range(1, brokers + 1):
                self.nodes.append(KafkaNode(i, ("broker", "controller"), self.base_dir / f"node-{i}", free_port(host), free_port(host)))
        else:
            self.nodes.append(KafkaNode(0, ("controller",), self.base_dir / "node-0", None, free_port(host)))
            for i in range(1, brokers + 1):
                self.nodes.append(KafkaNode(i, ("broker",), self.base_dir / f"node-{i}", free_port(host), None))
        self.extra_listeners = {name.upper(): proto.upper() for name, proto in (extra_listeners or {}).items()}
        for node in self.brokers:
            node.extra_ports = {name: free_port(host) for name in self.extra_listeners}

    # --- addresses -------------------------------------------------------------------------

    @property
    def brokers(self) -> list[KafkaNode]:
        return [n for n in self.nodes if n.is_broker]

    @property
    def controller(self) -> KafkaNode:
        return next(n for n in self.nodes if "controller" in n.roles)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{self.host}:{n.broker_port}" for n in self.brokers)

    def listener_bootstrap(self, name: str) -> str:
        """``bootstrap.servers`` of one of the ``extra_listeners``."""
        return ",".join(f"{self.host}:{n.extra_ports[name.upper()]}" for n in self.brokers)

    @property
    def metadata_log_dir(self) -> Path:
        """The controller's ``__cluster_metadata-0`` folder."""
        return self.controller.log_dir / "__cluster_metadata-0"

    def node(self, node_id: int) -> KafkaNode:
        return next(n for n in self.nodes if n.node_id == node_id)

    # --- configuration ---------------------------------------------------------------------

    @property
    def quorum(self) -> list[KafkaNode]:
        return [n for n in self.nodes if "controller" in n.roles]

    def properties(self, node: KafkaNode) -> dict[str, str]:
        listeners = []
        if node.is_broker:
            listeners.append(f"PLAINTEXT://{self.host}:{node.broker_port}")
            listeners += [f"{name}://{self.host}:{port}" for name, port in node.extra_ports.items()]
        if "controller" in node.roles:
            listeners.append(f"CONTROLLER://{self.host}:{node.controller_port}")
        n_brokers = len(self.brokers)
        rf = str(min(3, n_brokers))
        min_isr = "1" if n_brokers < 3 else "2"
        props = {
            "process.roles": ",".join(node.roles),
            "node.id": str(node.node_id),
            "controller.quorum.bootstrap.servers": ",".join(f"{self.host}:{n.controller_port}" for n in self.quorum),
            "controller.listener.names": "CONTROLLER",
            "listeners": ",".join(listeners),
            # Never let Kafka advertise (or fall back to) anything but loopback.
            "advertised.listeners": ",".join(listeners),
            "listener.security.protocol.map": ",".join(
                ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"] + [f"{n}:{p}" for n, p in self.extra_listeners.items()]
            ),
            "log.dirs": str(node.log_dir),
            "num.partitions": "1",
            "default.replication.factor": "1",
            "offsets.topic.replication.factor": rf,
            "offsets.topic.num.partitions": "5",
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": min_isr,
            "transaction.state.log.num.partitions": "5",
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": min_isr,
            "share.coordinator.state.topic.num.partitions": "3",
            "group.initial.rebalance.delay.ms": "0",
            # A restarted broker re-registers only once its old session has expired (9 s by
            # default), and a killed one is fenced only then: 3 s keeps restarts quick.
            "broker.heartbeat.interval.ms": "500",
            "broker.session.timeout.ms": "3000",
            "num.network.threads": "2",
            "num.io.threads": "2",
            "background.threads": "2",
            "num.recovery.threads.per.data.dir": "1",
            "log.cleaner.threads": "1",
            "log.cleaner.dedupe.buffer.size": str(8 * 1024 * 1024),
        }
        if n_brokers > 1:
            props["inter.broker.listener.name"] = "PLAINTEXT"
        props.update(self.overrides)
        return props

    def _write_config(self, node: KafkaNode) -> None:
        node.directory.mkdir(parents=True, exist_ok=True)
        node.properties_path.write_text("".join(f"{k}={v}\n" for k, v in self.properties(node).items()))
        (node.directory / "log4j2.properties").write_text(LOG4J2.format(level="WARN", path=node.server_log))

    def format(self) -> None:
        """Formats every node's storage with Kafka's StorageTool (in parallel: each is a JVM)."""
        t0 = time.monotonic()
        procs = []
        for node in self.nodes:
            self._write_config(node)
            if (node.log_dir / "meta.properties").exists():
                continue
            args = ["format", "-t", self.cluster_id, "-c", str(node.properties_path), "--ignore-formatted"]
            # One controller starts a dynamic quorum with itself as its only voter; several start
            # one with all of them as voters, each named with its metadata log dir's ID.
            if "controller" not in node.roles:
                args.append("--no-initial-controllers")
            elif len(self.quorum) == 1:
                args.append("--standalone")
            else:
                args += ["--initial-controllers", ",".join(f"{n.node_id}@{self.host}:{n.controller_port}:{self._directory_id(n)}"
                                                          for n in self.quorum)]  # fmt: skip
            args += self.format_args
            cmd = java_command(STORAGE_TOOL, args, lib=self.lib)
            procs.append((node, subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)))
        for node, proc in procs:
            out, _ = proc.communicate(timeout=120)
            if proc.returncode != 0:
                raise BrokerError(f"formatting node {node.node_id} failed ({proc.returncode}): {out.decode(errors='replace')[-2000:]}")
        self.format_s = time.monotonic() - t0

    def _directory_id(self, node: KafkaNode) -> str:
        """A Kafka Uuid (URL-safe base64, no padding) per controller, fixed for this cluster."""
        if node.node_id not in self._directory_ids:
            self._directory_ids[node.node_id] = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        return self._directory_ids[node.node_id]

    # --- life cycle ------------------------------------------------------------------------

    def start(self, timeout: float = DEFAULT_READY_TIMEOUT_S) -> ApacheKafkaCluster:
        self.format()
        t0 = time.monotonic()
        try:
            for node in self.nodes:
                self.start_node(node.node_id, wait=False)
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - t0
        return self

    def start_node(self, node_id: int, wait: bool = True, timeout: float = DEFAULT_READY_TIMEOUT_S) -> KafkaNode:
        """Starts (or restarts) one node on its existing storage."""
        node = self.node(node_id)
        if node.is_running():
            return node
        out = open(node.directory / "stdout.log", "ab")  # noqa: SIM115 - closed in stop_node()
        node._out = out
        cmd = java_command(BROKER_MAIN, [str(node.properties_path)], heap=self.heap,
                           log4j=node.directory / "log4j2.properties", lib=self.lib)  # fmt: skip
        node.started_at = time.monotonic()
        node.ready_after_s = None
        node.proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=_die_with_parent if self.die_with_parent else None,
        )  # fmt: skip
        if wait:
            self.wait_ready(timeout)
        return node

    def wait_ready(self, timeout: float = DEFAULT_READY_TIMEOUT_S) -> None:
        """Every running node answers; every running broker's Metadata lists every running broker."""
        deadline = time.monotonic() + timeout
        while True:
            pending = False
            running = [n for n in self.nodes if n.proc is not None]
            expected = {n.node_id for n in running if n.is_broker}
            for node in running:
                if node.proc is not None and node.proc.poll() is not None:
                    raise BrokerError(f"Kafka node {node.node_id} exited with code {node.proc.returncode}: {node.log_tail()}")
                if node.ready_after_s is not None:
                    continue
                if node.is_broker:
                    ok = expected <= metadata_broker_ids(self.host, node.broker_port or 0)
                else:
                    ok = probe(self.host, node.controller_port or 0)
                if ok:
                    node.ready_after_s = time.monotonic() - node.started_at
                else:
                    pending = True
            if not pending:
                return
            if time.monotonic() > deadline:
                late = [n.node_id for n in running if n.ready_after_s is None]
                raise BrokerError(f"Kafka nodes {late} not ready after {timeout:.0f}s; see {self.base_dir}")
            time.sleep(0.1)

    def stop_node(self, node_id: int, grace: float = STOP_GRACE_S, kill: bool = False) -> int | None:
        """SIGTERM (SIGKILL right away with ``kill``), wait up to ``grace``, then SIGKILL."""
        node = self.node(node_id)
        proc, node.proc = node.proc, None
        code = stop_process(proc, grace, kill)
        out, node._out = node._out, None
        if out is not None:
            out.close()  # type: ignore[attr-defined]
        node.ready_after_s = None
        return code

    def stop(self, grace: float = STOP_GRACE_S) -> None:
        """Brokers first (they need the controller for a controlled shutdown), in parallel."""
        order = [n for n in self.nodes if n.is_broker and "controller" not in n.roles]
        order += [n for n in self.nodes if n not in order]
        for node in order:  # signal all brokers at once, then wait
            if node.is_broker and "controller" not in node.roles and node.is_running():
                node.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        for node in order:
            self.stop_node(node.node_id, grace)

    def __enter__(self) -> ApacheKafkaCluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _metadata_request(correlation_id: int) -> bytes:
    """Metadata v1 (request header v1) with an empty topic list: brokers and controller only."""
    client = b"kip1279-probe"
    body = struct.pack(">hhih", METADATA_KEY, 1, correlation_id, len(client)) + client + struct.pack(">i", 0)
    return struct.pack(">i", len(body)) + body


def metadata_broker_ids(host: str, port: int, timeout: float = 1.0) -> set[int]:
    """The broker ids a Metadata v1 response lists (empty when the broker does not answer yet)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(_metadata_request(0x4B1279))
            (size,) = struct.unpack(">i", _recv_exactly(sock, 4))
            body = _recv_exactly(sock, size)
    except (OSError, struct.error):
        return set()
    cid, n = struct.unpack_from(">ii", body, 0)
    if cid != 0x4B1279:
        return set()
    pos, ids = 8, set()
    for _ in range(n):
        (node_id, hlen) = struct.unpack_from(">ih", body, pos)
        pos += 6 + hlen + 4  # host, port
        (rlen,) = struct.unpack_from(">h", body, pos)
        pos += 2 + max(rlen, 0)
        ids.add(node_id)
    return ids


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
    tool = sub.add_parser("tool", help="run a Kafka tool class on the classpath, e.g. kafka.tools.DumpLogSegments --files F")
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
            cluster = ApacheKafkaCluster(data_dir, brokers=3, combined=True, heap=args.heap, overrides=overrides)
        else:
            cluster = ApacheKafkaCluster(data_dir, brokers=args.brokers, heap=args.heap, overrides=overrides)
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
