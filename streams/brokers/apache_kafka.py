"""Apache Kafka itself on loopback: a KRaft cluster started from the jars Maven fetched.

noida-db (``streams.brokers.noida``) stays the tests' pip-only default; the main job and the
benchmarks use this one for the coordinator's own topics (``streams.brokers.own``). It runs a
combined-mode single node (``process.roles=broker,controller``) or one controller plus N brokers,
all on free 127.0.0.1 ports, each node with its own storage formatted by Kafka's ``StorageTool``.

The runtime classpath is ``tools/kafka/lib/`` (git-ignored), filled by ``bin/setup`` from
``tools/kafka/pom.xml``, which pins the version. Readiness is a Metadata request on every
broker listener that must list every broker (Kafka lists only unfenced brokers); a
controller-only node is probed with ApiVersions. Stop is SIGTERM, then SIGKILL after a grace.

``version=`` runs one of the source version matrix's older brokers on its own jars
(tools/kafka/versions/<version>/): before 3.3 in ZooKeeper mode, a ZooKeeper (from the same
classpath, as Kafka's distribution ships it) in place of the controller; before 3.9 KRaft with a
static quorum (``controller.quorum.voters``: no ``--standalone`` in StorageTool).
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from streams.brokers.noida import (
    LOOPBACK,
    BrokerError,
    _die_with_parent,
    free_port,
    probe,
    require_loopback,
    stop_process,
)
from streams.brokers.kafka_probes import metadata_broker_ids, zookeeper_serving
from streams.brokers.kafka_jars import (
    DEFAULT_HEAP,
    java_command,
    kafka_version,
    version_key,
)

STOP_GRACE_S = 15.0  # a broker's controlled shutdown takes a few seconds
DEFAULT_READY_TIMEOUT_S = 120.0
BROKER_MAIN = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"
ZOOKEEPER_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
ZOOKEEPER_HEAP = "128m"
# KRaft is production-ready from 3.3; older brokers run on ZooKeeper. A dynamic quorum
# (controller.quorum.bootstrap.servers, StorageTool --standalone) exists from 3.9 (KIP-853).
KRAFT_FROM = (3, 3)
DYNAMIC_QUORUM_FROM = (3, 9)


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
# Kafka before 4.0 (and its ZooKeeper) log through log4j 1.
LOG4J1 = """\
log4j.rootLogger={level}, FILE
log4j.appender.FILE=org.apache.log4j.FileAppender
log4j.appender.FILE.File={path}
log4j.appender.FILE.layout=org.apache.log4j.PatternLayout
log4j.appender.FILE.layout.ConversionPattern=[%d] %p %m (%c)%n
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
    log4j_name: str = "log4j2.properties"  # log4j.properties before Kafka 4.0
    started_at: float = 0.0
    ready_after_s: float | None = None
    _out: object | None = field(default=None, repr=False)

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    @property
    def is_zookeeper(self) -> bool:
        return "zookeeper" in self.roles

    @property
    def log_dir(self) -> Path:
        return self.directory / "logs"

    @property
    def properties_path(self) -> Path:
        return self.directory / "server.properties"

    @property
    def server_log(self) -> Path:
        return self.directory / "server.log"

    @property
    def log4j_path(self) -> Path:
        return self.directory / self.log4j_name

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
    ``version`` (before 3.3): a ZooKeeper (node 0, ``roles=("zookeeper",)``) plus brokers 1..N.

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
        version: str | None = None,
    ) -> None:
        """``extra_listeners``: listener name -> security protocol (``{"SASL_SSL": "SASL_SSL"}``),
        each on its own free port of every broker, beside PLAINTEXT (which brokers use between
        themselves); their settings go in ``overrides`` (``listener.name.sasl_ssl.*``, ``ssl.*``)."""
        if brokers < 1:
            raise ValueError("brokers must be at least 1")
        self.host = require_loopback(host)
        self.base_dir = Path(base_dir)
        pinned = kafka_version()
        self.version = version or pinned
        # None: the pinned version's jars (or KIP1279_KAFKA_LIB); java_command finds a matrix version's.
        self.jar_version = None if self.version == pinned else self.version
        self.zookeeper = version_key(self.version) < KRAFT_FROM
        self.dynamic_quorum = version_key(self.version) >= DYNAMIC_QUORUM_FROM
        if self.zookeeper and combined:
            raise ValueError(f"Kafka {self.version} runs on ZooKeeper: no combined mode")
        self.combined = (brokers == 1 and not self.zookeeper) if combined is None else combined
        if self.combined and brokers != 1 and not self.dynamic_quorum:
            raise ValueError(f"Kafka {self.version}: several combined nodes need a dynamic quorum (3.9+)")
        self.heap = heap
        self.overrides = dict(overrides or {})
        self.lib = lib
        self.format_args = list(format_args)  # e.g. ["--feature", "group.version=0"]
        self.die_with_parent = die_with_parent
        self.cluster_id = new_cluster_id()
        self.format_s: float | None = None
        self.startup_s: float | None = None
        self.nodes: list[KafkaNode] = []
        self._directory_ids: dict[int, str] = {}
        if self.combined:  # N combined nodes: N brokers and a quorum of N controllers (3: the HA setup)
            for i in range(1, brokers + 1):
                self.nodes.append(KafkaNode(i, ("broker", "controller"), self.base_dir / f"node-{i}", free_port(host), free_port(host)))
        elif self.zookeeper:  # the ZooKeeper's client port is its controller_port
            self.nodes.append(KafkaNode(0, ("zookeeper",), self.base_dir / "zookeeper", None, free_port(host)))
            for i in range(1, brokers + 1):
                self.nodes.append(KafkaNode(i, ("broker",), self.base_dir / f"node-{i}", free_port(host), None))
        else:
            self.nodes.append(KafkaNode(0, ("controller",), self.base_dir / "node-0", None, free_port(host)))
            for i in range(1, brokers + 1):
                self.nodes.append(KafkaNode(i, ("broker",), self.base_dir / f"node-{i}", free_port(host), None))
        self.extra_listeners = {name.upper(): proto.upper() for name, proto in (extra_listeners or {}).items()}
        for node in self.brokers:
            node.extra_ports = {name: free_port(host) for name in self.extra_listeners}
        if self.log4j_v1:
            for node in self.nodes:
                node.log4j_name = "log4j.properties"

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

    @property
    def running_bootstrap(self) -> str:
        """``bootstrap`` without the brokers stopped here. kafka-python's bootstrap picks an address at random
        and, once it picks a dead one, waits out that one's backoff: with a node down it can time out."""
        return ",".join(f"{self.host}:{n.broker_port}" for n in self.brokers if n.is_running()) or self.bootstrap

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
    def log4j_v1(self) -> bool:
        return version_key(self.version) < (4,)

    def zookeeper_properties(self, node: KafkaNode) -> dict[str, str]:
        return {
            "dataDir": str(node.directory / "data"),
            "clientPort": str(node.controller_port),
            "clientPortAddress": self.host,
            # Sessions from 1 s: a SIGKILLed broker is noticed within zookeeper.session.timeout.ms.
            "tickTime": "500",
            "maxClientCnxns": "0",
            "admin.enableServer": "false",
            "4lw.commands.whitelist": "srvr",
        }

    @property
    def quorum(self) -> list[KafkaNode]:
        return [n for n in self.nodes if "controller" in n.roles]

    def properties(self, node: KafkaNode) -> dict[str, str]:
        if node.is_zookeeper:
            return self.zookeeper_properties(node)
        listeners = []
        if node.is_broker:
            listeners.append(f"PLAINTEXT://{self.host}:{node.broker_port}")
            listeners += [f"{name}://{self.host}:{port}" for name, port in node.extra_ports.items()]
        if "controller" in node.roles:
            listeners.append(f"CONTROLLER://{self.host}:{node.controller_port}")
        n_brokers = len(self.brokers)
        rf = str(min(3, n_brokers))
        min_isr = "1" if n_brokers < 3 else "2"
        if self.zookeeper:
            props = {
                "broker.id": str(node.node_id),
                "zookeeper.connect": f"{self.host}:{self.node(0).controller_port}",
                "zookeeper.connection.timeout.ms": "60000",
                # As broker.session.timeout.ms below: a killed broker is fenced after 3 s.
                "zookeeper.session.timeout.ms": "3000",
            }
        else:
            c_port = self.controller.controller_port
            props = {
                "process.roles": ",".join(node.roles),
                "node.id": str(node.node_id),
                "controller.listener.names": "CONTROLLER",
            }
            if self.dynamic_quorum:
                props["controller.quorum.bootstrap.servers"] = ",".join(f"{self.host}:{n.controller_port}" for n in self.quorum)
            else:
                props["controller.quorum.voters"] = f"{self.controller.node_id}@{self.host}:{c_port}"
        props |= {
            "listeners": ",".join(listeners),
            # Never let Kafka advertise (or fall back to) anything but loopback. Before the dynamic
            # quorum a broker must not advertise the controller's listener.
            "advertised.listeners": ",".join(
                listeners if self.dynamic_quorum else [x for x in listeners if not x.startswith("CONTROLLER:")]
            ),
            "listener.security.protocol.map": ",".join(
                ["PLAINTEXT:PLAINTEXT"] + ([] if self.zookeeper else ["CONTROLLER:PLAINTEXT"])
                + [f"{n}:{p}" for n, p in self.extra_listeners.items()]
            ),
            "log.dirs": str(node.log_dir),
            "num.partitions": "1",
            "default.replication.factor": "1",
            "offsets.topic.replication.factor": rf,
            "offsets.topic.num.partitions": "5",
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": min_isr,
            "transaction.state.log.num.partitions": "5",
            "group.initial.rebalance.delay.ms": "0",
            "num.network.threads": "2",
            "num.io.threads": "2",
            "background.threads": "2",
            "num.recovery.threads.per.data.dir": "1",
            "log.cleaner.threads": "1",
            "log.cleaner.dedupe.buffer.size": str(8 * 1024 * 1024),
        }
        if version_key(self.version) >= (4,):
            props |= {
                "share.coordinator.state.topic.replication.factor": rf,
                "share.coordinator.state.topic.min.isr": min_isr,
                "share.coordinator.state.topic.num.partitions": "3",
            }
        if not self.zookeeper:
            # A restarted broker re-registers only once its old session has expired (9 s by
            # default), and a killed one is fenced only then: 3 s keeps restarts quick.
            props |= {"broker.heartbeat.interval.ms": "500", "broker.session.timeout.ms": "3000"}
        if n_brokers > 1:
            props["inter.broker.listener.name"] = "PLAINTEXT"
        props.update(self.overrides)
        return props

    def _write_config(self, node: KafkaNode) -> None:
        node.directory.mkdir(parents=True, exist_ok=True)
        node.properties_path.write_text("".join(f"{k}={v}\n" for k, v in self.properties(node).items()))
        template = LOG4J1 if self.log4j_v1 else LOG4J2
        node.log4j_path.write_text(template.format(level="WARN", path=node.server_log))

    def format(self) -> None:
        """Formats every node's storage with Kafka's StorageTool (in parallel: each is a JVM)."""
        t0 = time.monotonic()
        procs = []
        for node in self.nodes:
            self._write_config(node)
            if self.zookeeper or (node.log_dir / "meta.properties").exists():
                continue  # on ZooKeeper a broker writes its meta.properties itself
            args = ["format", "-t", self.cluster_id, "-c", str(node.properties_path), "--ignore-formatted"]
            if self.dynamic_quorum:
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
            cmd = java_command(STORAGE_TOOL, args, lib=self.lib, version=self.jar_version)
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
        main, heap = (ZOOKEEPER_MAIN, ZOOKEEPER_HEAP) if node.is_zookeeper else (BROKER_MAIN, self.heap)
        cmd = java_command(main, [str(node.properties_path)], heap=heap, log4j=node.log4j_path, lib=self.lib,
                           version=self.jar_version)  # fmt: skip
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
                elif node.is_zookeeper:
                    ok = zookeeper_serving(self.host, node.controller_port or 0)
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
