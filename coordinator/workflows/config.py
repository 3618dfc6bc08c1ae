"""A cluster mirror's settings, with the prototype's names and defaults.

Keys are accepted with or without the prototype's ``mirror.`` prefix (``groups.include`` and
``mirror.groups.include`` are the same setting). Lists are comma-separated, as Kafka's LIST type.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from records.redact import REDACTED, is_sensitive
from coordinator.topic_filter import EXCLUDE_CONFIG, INCLUDE_CONFIG, InvalidPattern, compile_patterns, split_patterns

# The prototype's MIRROR_TOPIC_PROPERTIES_EXCLUDE_DEFAULT (ClusterMirrorConfig, aiven/inkless
# inkless-linking): these describe the local cluster, not the data, so they are never copied.
DEFAULT_TOPIC_PROPERTIES_EXCLUDE: tuple[str, ...] = (
    "follower.replication.throttled.replicas",
    "leader.replication.throttled.replicas",
    "message.timestamp.difference.max.ms",
    "log.message.timestamp.before.max.ms",
    "log.message.timestamp.after.max.ms",
    "message.timestamp.type",
    "unclean.leader.election.enable",
    "min.insync.replicas",
    "mirror.name",
)
# Always excluded, whatever the setting says (the prototype's doc: "mirror.name is always excluded").
ALWAYS_EXCLUDED_PROPERTIES: tuple[str, ...] = ("mirror.name",)


class MirrorConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Settings of one cluster mirror. Defaults follow the brief and, where it is silent, the prototype."""

    # FAILED retries (brief: 100 attempts; the prototype's 0 means unlimited).
    failed_retry_initial_backoff_ms: int = 1_000
    failed_retry_max_backoff_ms: int = 300_000
    failed_retry_max_attempts: int = 100
    # Fetcher: memory is bounded by num_fetchers * fetch_response_max_bytes, whatever the partition count.
    num_fetchers: int = 1
    fetch_response_max_bytes: int = 10 * 1024 * 1024  # Kafka's replica.fetch.response.max.bytes
    fetch_partition_max_bytes: int = 1024 * 1024  # Kafka's replica.fetch.max.bytes
    fetch_backoff_ms: int = 1_000
    # A caught-up partition whose fetch came back empty is not fetched again for this long, as the
    # broker-side long poll of Kafka's replica fetcher (replica.fetch.wait.max.ms) holds an empty
    # fetch; 0 fetches every partition every round (new data is seen at the next round, not later).
    fetch_max_wait_ms: int = 0
    # A source call failing for a partition (its leader gone or moving, a fenced or unknown leader
    # epoch, a broker or the whole source not answering) is retried as a Kafka consumer retries it:
    # the metadata re-read, after retry.backoff.ms doubling up to retry.backoff.max.ms. The partition
    # goes FAILED only once its source calls have failed for source.unavailable.timeout.ms in a row:
    # the source's broker.session.timeout.ms (9 s) for the controller to fence a dead leader, plus
    # the election and the new leader reaching the metadata (README, "A dead source"). 0: at once.
    source_unavailable_timeout_ms: int = 15_000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1_000
    # Periodic work: metadata sync (periodic epoch check, configs, groups, ACLs).
    metadata_refresh_interval_ms: int = 30_000
    # STOPPING's last consumer- and share-group offset sync: retried until this long after the
    # stop began, then the failover goes on without it (a dead source never blocks a failover).
    stop_group_sync_timeout_ms: int = 3_000
    # DLE >= SLE: bump to SLE + margin when SLE comes within threshold of DLE (prototype: 3 and 10).
    epoch_bump_threshold: int = 3
    epoch_bump_margin: int = 10
    # PREPARING waits for every registered replica, not just the ISR (thread JR4, note 3).
    support_unclean_leader_election: bool = False
    topic_properties_exclude: tuple[str, ...] = DEFAULT_TOPIC_PROPERTIES_EXCLUDE
    groups_include: tuple[str, ...] = (".*",)
    groups_exclude: tuple[str, ...] = ()
    acls_include: tuple[str, ...] = ("*",)

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> MirrorConfig:
        """Build from ``key=value`` properties (``mirror.`` prefix optional); unknown keys are ignored."""
        defaults = cls()
        values: dict[str, object] = {}
        for raw_key, raw in props.items():
            key = raw_key.removeprefix("mirror.")
            name = _ALIASES.get(key, key.replace(".", "_"))
            if name not in cls.__struct_fields__:
                continue
            default = getattr(defaults, name)
            if isinstance(default, bool):
                values[name] = raw.strip().lower() == "true"
            elif isinstance(default, int):
                values[name] = int(raw)
            else:
                values[name] = tuple(p.strip() for p in raw.split(",") if p.strip())
        return cls(**values)  # type: ignore[arg-type]


# Prototype spellings that do not map by replacing dots.
_ALIASES = {
    "acl.include": "acls_include",
    "num.replica.fetchers": "num_fetchers",
    "replica.fetch.response.max.bytes": "fetch_response_max_bytes",
    "replica.fetch.max.bytes": "fetch_partition_max_bytes",
    "replica.fetch.wait.max.ms": "fetch_max_wait_ms",
}


# Keys a mirror keeps besides MirrorConfig's: its source connection (the prototype's client
# settings) and the topic patterns of its starts.
BOOTSTRAP_CONFIG = "bootstrap.servers"
CONNECTION_CONFIGS = frozenset({BOOTSTRAP_CONFIG, "security.protocol", "client.id", "mirror.source.cluster.id"})
CONNECTION_PREFIXES = ("ssl.", "sasl.")
SECURITY_PROTOCOLS = frozenset({"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"})
SASL_MECHANISMS = frozenset({"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"})  # what the source port speaks


def is_connection_config(key: str) -> bool:
    """Keys whose change needs new connections to the source (the rest apply from the next round)."""
    return key in CONNECTION_CONFIGS or key.startswith(CONNECTION_PREFIXES)


def _field(key: str) -> str | None:
    name = _ALIASES.get(key.removeprefix("mirror."), key.removeprefix("mirror.").replace(".", "_"))
    return name if name in MirrorConfig.__struct_fields__ else None


def config_problems(changes: Mapping[str, str | None]) -> dict[str, str]:
    """Why each refused key of a change is refused (``None`` deletes the key); empty: all valid.

    As Kafka's ConfigDef: an unknown name, or a value its type does not parse, is refused. The
    value rules are MirrorConfig.from_properties's, so a mirror never holds a value it cannot use.
    """
    problems: dict[str, str] = {}
    for key, value in changes.items():
        field = _field(key)
        if field is None and not is_connection_config(key) and key not in (INCLUDE_CONFIG, EXCLUDE_CONFIG):
            problems[key] = f"Unknown cluster mirror config name: {key}"
            continue
        if value is None:
            if key == BOOTSTRAP_CONFIG:
                problems[key] = f"{BOOTSTRAP_CONFIG} cannot be deleted: a cluster mirror needs its source"
            continue
        shown = REDACTED if is_sensitive(key) else value
        reason = _value_problem(key, field, value)
        if reason:
            problems[key] = f"Invalid value {shown} for configuration {key}: {reason}"
    return problems


def _value_problem(key: str, field: str | None, value: str) -> str | None:
    if key == BOOTSTRAP_CONFIG:
        return None if value.strip() else "a cluster mirror needs its source's bootstrap servers"
    if key == "security.protocol":
        return None if value.strip().upper() in SECURITY_PROTOCOLS else f"must be one of {sorted(SECURITY_PROTOCOLS)}"
    if key == "sasl.mechanism":
        return None if value.strip().upper() in SASL_MECHANISMS else f"must be one of {sorted(SASL_MECHANISMS)}"
    if key in (INCLUDE_CONFIG, EXCLUDE_CONFIG):
        try:
            compile_patterns(tuple(split_patterns(value)))
        except InvalidPattern as e:
            return str(e)
        return None
    if field is None:
        return None
    default = getattr(MirrorConfig(), field)
    if isinstance(default, bool):
        return None if value.strip().lower() in ("true", "false") else "Expected value to be either true or false"
    if isinstance(default, int):
        try:
            MirrorConfig.from_properties({key: value})
        except ValueError:
            return "Not a number of type INT"
        return None if int(value) >= 0 else "Value must be at least 0"
    return None
