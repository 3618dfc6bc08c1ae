"""Worker settings: where the broker is, which topics belong to which destination cluster.

One worker process may serve several destination clusters. Each has its own metadata log,
its own ``__mirror_state`` and its own desired-state topic; their names all carry the
cluster's prefix, so two clusters' logs and states never mix (SPEC, "One coordinator per
destination cluster").

``ensure_topics`` creates the topics this layout needs (Faust does not create input topics);
``install_payload_redaction`` keeps record payloads (mirror credentials) out of aiokafka's logs.

Settings come from (lowest to highest precedence): defaults, a Kafka-style properties file,
``KIP1279_*`` environment variables, explicit keyword overrides.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError


ENV_PREFIX = "KIP1279_"
DEFAULT_METADATA_TOPIC = "__kip1279_metadata"
DEFAULT_MIRROR_STATE_TOPIC = "__mirror_state"
DEFAULT_DESIRED_STATE_TOPIC = "__kip1279_mirror_desired"
DEFAULT_STATE_PARTITIONS = 50
# fetch.max.wait.ms of the consumers that catch up to end offsets on demand (describe's state and
# sync-status views): a real Kafka broker answers a connection's requests in order, so each
# catch-up's ListOffsets would wait behind an idle Fetch (500 ms by default), and a describe took
# about a second on Apache Kafka (none on noida-db, which never holds a Fetch).
CATCH_UP_FETCH_MAX_WAIT_MS = 20
DEFAULT_CONTROLLER_PORT = 9393
# The worker's consumer group timing; defaults are Faust's (broker_session_timeout etc.).
DEFAULT_SESSION_TIMEOUT_MS = 60_000
DEFAULT_HEARTBEAT_INTERVAL_MS = 3_000
DEFAULT_REBALANCE_TIMEOUT_MS = 60_000
# A broker refuses a JoinGroup whose session timeout is outside its
# group.min/max.session.timeout.ms (INVALID_SESSION_TIMEOUT); these are Kafka's defaults, and
# noida-db 0.2.3 hard-codes the same range.
MIN_SESSION_TIMEOUT_MS = 6_000
MAX_SESSION_TIMEOUT_MS = 1_800_000

# Kafka's rule for group.instance.id (JoinGroupRequest.validateGroupInstanceId).
_INSTANCE_ID = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


class MembershipError(ValueError):
    pass


def validate_instance_id(instance_id: str) -> str:
    if not _INSTANCE_ID.match(instance_id) or instance_id in (".", ".."):
        raise MembershipError(f"group.instance.id {instance_id!r} is illegal: use 1 to 249 of "
                              f"letters, digits, '.', '_' or '-' (and not '.' or '..')")  # fmt: skip
    return instance_id


_CLUSTER_NAME = re.compile(r"^[A-Za-z0-9._-]{1,100}$")

# Property key -> dataclass field.
_KEYS: dict[str, str] = {
    "bootstrap.servers": "bootstrap_servers",
    "cluster.name": "cluster_name",
    "metadata.topic": "metadata_topic",
    "mirror.state.topic": "mirror_state_topic",
    "mirror.state.topic.num.partitions": "state_partitions",
    "mirror.state.topic.replication.factor": "replication_factor",
    "mirror.state.topic.min.insync.replicas": "min_insync_replicas",
    "desired.state.topic": "desired_state_topic",
    "data.dir": "data_dir",
    "metadata.snapshot.max.records": "snapshot_max_records",
    "metadata.snapshot.max.interval.ms": "snapshot_max_interval_ms",
    "controller.listener": "controller_listener",
    "controller.id": "controller_id",
    "controller.session.timeout.ms": "controller_session_timeout_ms",
    "principal": "principal",
    "client.id": "client_id",
    "worker.session.timeout.ms": "session_timeout_ms",
    "worker.heartbeat.interval.ms": "heartbeat_interval_ms",
    "worker.rebalance.timeout.ms": "rebalance_timeout_ms",
    "worker.group.instance.id": "group_instance_id",
    "worker.unhealthy.exit.ms": "unhealthy_exit_ms",
    "worker.shutdown.timeout.ms": "shutdown_timeout_ms",
    "worker.recovery.stall.ms": "recovery_stall_ms",
    "metrics.listener": "metrics_listener",
    "metrics.partition.lag.max.series": "metrics_lag_max_series",
    "metrics.failover.ready.max.lag": "failover_ready_max_lag",
    "mirror.copy.linger.ms": "copy_linger_ms",
    "audit.export.dir": "audit_export_dir",
    "audit.export.interval.ms": "audit_export_interval_ms",
}


class ConfigError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    bootstrap_servers: str = "127.0.0.1:9092"
    # The destination cluster this coordinator serves; its topics are prefixed with "<name>.".
    cluster_name: str = ""
    metadata_topic: str = DEFAULT_METADATA_TOPIC
    mirror_state_topic: str = DEFAULT_MIRROR_STATE_TOPIC
    desired_state_topic: str = DEFAULT_DESIRED_STATE_TOPIC
    state_partitions: int = DEFAULT_STATE_PARTITIONS
    replication_factor: int = 1  # of every topic the coordinator creates (3 in the HA setup)
    min_insync_replicas: int = 0  # set on those topics when > 0 (2 in the HA setup); 0: the broker's
    data_dir: str = "./kip1279-data"
    snapshot_max_records: int = 10_000
    snapshot_max_interval_ms: int = 60 * 60 * 1000
    controller_listener: str = f"127.0.0.1:{DEFAULT_CONTROLLER_PORT}"
    # Standby controllers (issue #36): this one's id (empty: its listener's HOST:PORT, or a new
    # one per start on port 0), and how long an active one may be silent before a standby takes over.
    controller_id: str = ""
    controller_session_timeout_ms: int = 2000
    principal: str = "User:ANONYMOUS"
    client_id: str = "kip1279"
    # The worker's group membership: how long the broker keeps a silent worker's table
    # partitions, how often it heartbeats, how long a rebalance waits for members to rejoin.
    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS
    heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS
    rebalance_timeout_ms: int = DEFAULT_REBALANCE_TIMEOUT_MS
    # The worker's group.instance.id (static membership, see ``streams.worker.membership``); empty:
    # the one kept in its data directory.
    group_instance_id: str = ""
    # A worker whose event loop answers nothing for this long exits non-zero (0: never).
    unhealthy_exit_ms: int = 120_000
    # A stop (SIGTERM, SIGINT) not finished after this long leaves the group and exits anyway (0: never).
    shutdown_timeout_ms: int = 15_000
    # A changelog partition that Faust's table recovery waits on but that has delivered no record
    # for this long is sought again (``streams.worker.recovery_guard``; 0: never).
    recovery_stall_ms: int = 5_000
    # /metrics, /healthz and /readyz on loopback HOST:PORT (port 0: any free one); empty: off.
    metrics_listener: str = ""
    # Per-partition lag series a worker exports at most (the max per mirror is always there).
    metrics_lag_max_series: int = 1000
    # Failover readiness needs every partition's lag (source HW - destination LEO) at most this.
    failover_ready_max_lag: int = 1000
    # As a producer's linger.ms: a mirror's data watch waits this long after reporting moved
    # partitions before its next long poll, so one report and one copy job (two round trips) take
    # the others that move meanwhile (0: a long poll right after each report).
    copy_linger_ms: int = 100
    # Audit snapshots (Parquet, ``streams.worker.audit_export``) under <dir>/<cluster.name>, one every
    # interval; empty: off.
    audit_export_dir: str = ""
    audit_export_interval_ms: int = 5 * 60 * 1000
    extra: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.cluster_name and not _CLUSTER_NAME.match(self.cluster_name):
            raise ConfigError(f"cluster.name {self.cluster_name!r}: use letters, digits, '.', '_' or '-'")
        if self.state_partitions < 1:
            raise ConfigError(f"mirror.state.topic.num.partitions must be >= 1, not {self.state_partitions}")
        if self.snapshot_max_records < 1:
            raise ConfigError("metadata.snapshot.max.records must be >= 1")
        if not MIN_SESSION_TIMEOUT_MS <= self.session_timeout_ms <= MAX_SESSION_TIMEOUT_MS:
            raise ConfigError(f"worker.session.timeout.ms must be between {MIN_SESSION_TIMEOUT_MS} and "
                              f"{MAX_SESSION_TIMEOUT_MS} (the broker's group.min/max.session.timeout.ms), "
                              f"not {self.session_timeout_ms}")  # fmt: skip
        if not 0 < self.heartbeat_interval_ms < self.session_timeout_ms:
            # A heartbeat must land within the session; Kafka advises at most a third of it.
            raise ConfigError(f"worker.heartbeat.interval.ms must be > 0 and below worker.session.timeout.ms "
                              f"({self.session_timeout_ms}), not {self.heartbeat_interval_ms}")  # fmt: skip
        if self.rebalance_timeout_ms < 1:
            raise ConfigError(f"worker.rebalance.timeout.ms must be >= 1, not {self.rebalance_timeout_ms}")
        if self.unhealthy_exit_ms < 0 or 0 < self.unhealthy_exit_ms < 4 * self.heartbeat_interval_ms:
            raise ConfigError(f"worker.unhealthy.exit.ms must be 0 (never) or at least 4 heartbeat intervals "
                              f"({4 * self.heartbeat_interval_ms}), not {self.unhealthy_exit_ms}")  # fmt: skip
        if self.shutdown_timeout_ms < 0:
            raise ConfigError(f"worker.shutdown.timeout.ms must be >= 0 (0: never), not {self.shutdown_timeout_ms}")
        if self.recovery_stall_ms < 0:
            raise ConfigError(f"worker.recovery.stall.ms must be >= 0, not {self.recovery_stall_ms}")
        if self.metrics_listener:
            self.metrics_address  # noqa: B018 - validates HOST:PORT
        if self.copy_linger_ms < 0:
            raise ConfigError(f"mirror.copy.linger.ms must be >= 0, not {self.copy_linger_ms}")
        if self.metrics_lag_max_series < 0 or self.failover_ready_max_lag < 0:
            raise ConfigError("metrics.partition.lag.max.series and metrics.failover.ready.max.lag must be >= 0")
        if self.min_insync_replicas < 0 or self.min_insync_replicas > self.replication_factor:
            raise ConfigError(f"mirror.state.topic.min.insync.replicas must be 0 to the replication factor "
                              f"({self.replication_factor}), not {self.min_insync_replicas}")  # fmt: skip
        if self.controller_session_timeout_ms < 500:
            raise ConfigError(f"controller.session.timeout.ms must be >= 500, not {self.controller_session_timeout_ms}")
        if self.audit_export_interval_ms < 100:
            raise ConfigError(f"audit.export.interval.ms must be >= 100, not {self.audit_export_interval_ms}")
        if self.group_instance_id:
            try:
                validate_instance_id(self.group_instance_id)
            except MembershipError as e:
                raise ConfigError(f"worker.{e}") from None

    # -- per-cluster names --------------------------------------------------------------------

    def _prefixed(self, name: str) -> str:
        return f"{self.cluster_name}.{name}" if self.cluster_name else name

    @property
    def metadata_topic_name(self) -> str:
        return self._prefixed(self.metadata_topic)

    @property
    def dlq_topic_name(self) -> str:
        return f"{self.metadata_topic_name}.dlq"

    @property
    def mirror_state_topic_name(self) -> str:
        return self._prefixed(self.mirror_state_topic)

    @property
    def desired_state_topic_name(self) -> str:
        return self._prefixed(self.desired_state_topic)

    @property
    def sync_status_topic_name(self) -> str:
        """Each worker's sync status per mirror (``streams.state.sync_status``)."""
        return self._prefixed("__mirror_sync_status")

    @property
    def stop_reports_topic_name(self) -> str:
        """Each table partition's owner's report of its stops done (``streams.state.stop_reports``)."""
        return self._prefixed("__mirror_stop_reports")

    @property
    def controllers_topic_name(self) -> str:
        """The controllers' heartbeats (``streams.admin.election``)."""
        return f"{self.metadata_topic_name}.controllers"

    @property
    def faust_app_id(self) -> str:
        return self._prefixed("kip1279-coordinator")

    @property
    def cluster_data_dir(self) -> Path:
        return Path(self.data_dir) / (self.cluster_name or "default")

    @property
    def snapshot_dir(self) -> Path:
        return self.cluster_data_dir / "snapshots"

    @property
    def audit_export_root(self) -> Path | None:
        """This coordinator's snapshot store: one per destination cluster, so two never mix."""
        if not self.audit_export_dir:
            return None
        return Path(self.audit_export_dir) / (self.cluster_name or "default")

    @property
    def controller_address(self) -> tuple[str, int]:
        host, _, port = self.controller_listener.rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(f"controller.listener {self.controller_listener!r} is not HOST:PORT")
        return host, int(port)

    @property
    def metrics_address(self) -> tuple[str, int] | None:
        """Where /metrics is served, None when off; loopback only (it has no authentication)."""
        if not self.metrics_listener:
            return None
        host, _, port = self.metrics_listener.rpartition(":")
        if not host or not port.isdigit() or int(port) > 65535:
            raise ConfigError(f"metrics.listener {self.metrics_listener!r} is not HOST:PORT")
        if host not in ("127.0.0.1", "localhost", "::1", "[::1]"):
            raise ConfigError(f"metrics.listener {self.metrics_listener!r}: bind a loopback address")
        return host.strip("[]"), int(port)

    def with_overrides(self, **overrides: Any) -> WorkerConfig:
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})


def parse_properties(text: str) -> dict[str, str]:
    """A Java-style properties file: ``key=value`` or ``key: value``, ``#``/``!`` comments."""
    props: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        match = re.match(r"^([^=:\s]+)\s*[=:\s]\s*(.*)$", line)
        if match is None:
            props[line] = ""
        else:
            props[match.group(1)] = match.group(2)
    return props


def load_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    try:
        return parse_properties(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror}") from None


def _coerce(name: str, value: str) -> Any:
    kind = next(f.type for f in fields(WorkerConfig) if f.name == name)
    if kind in ("int", int):
        try:
            return int(value)
        except ValueError:
            raise ConfigError(f"{name}: {value!r} is not an integer") from None
    return value


def from_properties(props: Mapping[str, str], base: WorkerConfig | None = None) -> WorkerConfig:
    known: dict[str, Any] = {}
    extra: dict[str, str] = dict(base.extra) if base else {}
    for key, value in props.items():
        attr = _KEYS.get(key)
        if attr is None:
            extra[key] = value
        else:
            known[attr] = _coerce(attr, value)
    return replace(base or WorkerConfig(), extra=extra, **known)


def from_env(env: Mapping[str, str] | None = None, base: WorkerConfig | None = None) -> WorkerConfig:
    """``KIP1279_BOOTSTRAP`` is bootstrap.servers; other keys as ``KIP1279_CLUSTER_NAME`` etc."""
    env = os.environ if env is None else env
    props: dict[str, str] = {}
    if f"{ENV_PREFIX}BOOTSTRAP" in env:
        props["bootstrap.servers"] = env[f"{ENV_PREFIX}BOOTSTRAP"]
    for key in _KEYS:
        name = ENV_PREFIX + key.replace(".", "_").upper()
        if name in env:
            props[key] = env[name]
    return from_properties(props, base) if props else (base or WorkerConfig())


# ------------------------------------------------------------------------------ topic layout


async def ensure_topics(bootstrap: str, topics: Sequence[NewTopic], client_id: str = "kip1279-admin",
                        min_insync_replicas: int = 0) -> None:  # fmt: skip
    """Create the topics that do not exist yet (Faust and our readers do not create them), each
    with ``min.insync.replicas`` when it is > 0 (and the topic sets none)."""
    if min_insync_replicas > 0:
        for t in topics:
            t.topic_configs = {"min.insync.replicas": str(min_insync_replicas), **(t.topic_configs or {})}
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id=client_id)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [t for t in topics if t.name not in existing]
        if missing:
            try:
                await admin.create_topics(missing)
            except TopicAlreadyExistsError:
                pass  # another worker won the race
    finally:
        await admin.close()


def metadata_topic_spec(name: str, replication_factor: int = 1) -> NewTopic:
    # One partition (total order), kept forever: the log is the source of truth and snapshots
    # only shorten replay.
    return NewTopic(name, 1, replication_factor, topic_configs={"retention.ms": "-1", "cleanup.policy": "delete"})


def dlq_topic_spec(metadata_topic: str, replication_factor: int = 1) -> NewTopic:
    # Keyed by the poison record's offset and compacted: a replay that quarantines it again
    # leaves one entry, not two.
    return NewTopic(f"{metadata_topic}.dlq", 1, replication_factor, topic_configs={"cleanup.policy": "compact"})


# ------------------------------------------------------------------------- client logging

# aiokafka logs whole requests, responses and record values at DEBUG. Metadata records carry
# mirror configs, credentials included, so byte payloads are scrubbed from its log records.
_AIOKAFKA_LOGGERS = (
    "aiokafka", "aiokafka.admin.client", "aiokafka.client", "aiokafka.cluster", "aiokafka.conn",
    "aiokafka.consumer.consumer", "aiokafka.consumer.fetcher", "aiokafka.consumer.group_coordinator",
    "aiokafka.consumer.subscription_state", "aiokafka.helpers", "aiokafka.producer.producer",
    "aiokafka.producer.sender",
)  # fmt: skip
_BYTES_LITERAL = re.compile(r"b'(?:[^'\\]|\\.)*'" + r'|b"(?:[^"\\]|\\.)*"')


class PayloadRedactionFilter(logging.Filter):
    """Replaces every bytes literal in a client log line with its size."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.INFO:
            message = record.getMessage()
            if "b'" in message or 'b"' in message:
                record.msg = _BYTES_LITERAL.sub(lambda m: f"<{len(m.group(0)) - 3} chars of bytes redacted>", message)
                record.args = ()
        return True


_REDACTION = PayloadRedactionFilter()


def install_payload_redaction() -> None:
    """Idempotent: attaches the filter to every aiokafka logger (filters do not inherit)."""
    for name in _AIOKAFKA_LOGGERS:
        logger = logging.getLogger(name)
        if _REDACTION not in logger.filters:
            logger.addFilter(_REDACTION)


def load(path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None, **overrides: Any) -> WorkerConfig:
    config = WorkerConfig()
    if path is not None:
        config = from_properties(load_properties(path), config)
    config = from_env(env, config)
    return config.with_overrides(**overrides)
