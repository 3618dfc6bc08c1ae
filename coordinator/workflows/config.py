"""A cluster mirror's settings, with the prototype's names and defaults.

Keys are accepted with or without the prototype's ``mirror.`` prefix (``groups.include`` and
``mirror.groups.include`` are the same setting). Lists are comma-separated, as Kafka's LIST type.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from records.redact import REDACTED, is_sensitive
from coordinator.topic_filter import EXCLUDE_CONFIG, INCLUDE_CONFIG, pattern_list_problem, split_patterns
from coordinator.workflows.sync_acls import AclRule

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

    # Stored keys this config could not use, with why (read back from an older version's
    # metadata, say): the value of each was left at its default, or its unusable patterns or ACL
    # rules left out, so only what the key touches is affected. ``--describe`` and the metrics show them.
    problems: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> MirrorConfig:
        """Build from ``key=value`` properties (``mirror.`` prefix optional); unknown keys are
        ignored, values that cannot be used are left out and listed in ``problems``."""
        values: dict[str, object] = {}
        problems: list[tuple[str, str]] = []
        for raw_key, raw in props.items():
            name = _field(raw_key)
            if name is None or raw is None:
                continue
            value, reason = _read(raw_key, name, raw)
            if reason is not None:
                problems.append((raw_key, _invalid(raw_key, raw, reason)))
            if value is not None:
                values[name] = value
        return cls(**values, problems=tuple(sorted(problems)))  # type: ignore[arg-type]

    def problems_of(self, kind: str) -> list[str]:
        """Why the sync ``kind`` (``streams.runner.syncer.SYNC_KINDS``) runs with settings left out."""
        return [why for key, why in self.problems if kind in SYNC_KINDS_OF.get(_field(key) or "", ())]


# Prototype spellings that do not map by replacing dots.
_ALIASES = {
    "acl.include": "acls_include",
    "num.replica.fetchers": "num_fetchers",
    "replica.fetch.response.max.bytes": "fetch_response_max_bytes",
    "replica.fetch.max.bytes": "fetch_partition_max_bytes",
    "replica.fetch.wait.max.ms": "fetch_max_wait_ms",
}


_DEFAULTS = MirrorConfig()
# Settings that are lists of Java regexes, and the syncs each one steers.
PATTERN_FIELDS = frozenset({"groups_include", "groups_exclude", "topic_properties_exclude"})
_GROUP_KINDS = ("consumer_group_offset", "share_group_offset")
SYNC_KINDS_OF: dict[str, tuple[str, ...]] = {
    "groups_include": _GROUP_KINDS, "groups_exclude": _GROUP_KINDS,
    "topic_properties_exclude": ("topic_config",), "acls_include": ("acl",),
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
    return name if name in MirrorConfig.__struct_fields__ and name != "problems" else None


def config_problems(changes: Mapping[str, str | None]) -> dict[str, str]:
    """Why each refused key of a change is refused (``None`` deletes the key); empty: all valid.

    As Kafka's ConfigDef: an unknown name, or a value its type does not parse, is refused; so is
    a pattern (Java regex, ``coordinator.java_regex``) or ACL rule that cannot be used. The value
    rules are MirrorConfig.from_properties's, so a mirror never takes a value it cannot use, and
    the same call on a stored config says what an older version let in.
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
        reason = _value_problem(key, field, value)
        if reason:
            problems[key] = _invalid(key, value, reason)
    return problems


def stored_config_problems(configs: Mapping[str, str | None]) -> dict[str, str]:
    """What a mirror's stored configs hold that it cannot use (an older version let it in):
    ``config_problems`` of the stored values, shown by ``--describe`` and the worker's metrics."""
    return config_problems({k: v for k, v in configs.items() if v is not None})


def _value_problem(key: str, field: str | None, value: str) -> str | None:
    if key == BOOTSTRAP_CONFIG:
        return None if value.strip() else "a cluster mirror needs its source's bootstrap servers"
    if key == "security.protocol":
        return None if value.strip().upper() in SECURITY_PROTOCOLS else f"must be one of {sorted(SECURITY_PROTOCOLS)}"
    if key == "sasl.mechanism":
        return None if value.strip().upper() in SASL_MECHANISMS else f"must be one of {sorted(SASL_MECHANISMS)}"
    if key in (INCLUDE_CONFIG, EXCLUDE_CONFIG):
        return pattern_list_problem(split_patterns(value))
    return None if field is None else _read(key, field, value)[1]


def _invalid(key: str, value: str, reason: str) -> str:
    shown = REDACTED if is_sensitive(key) else value
    return f"Invalid value {shown} for configuration {key}: {reason}"


def _read(key: str, field: str, raw: str) -> tuple[object | None, str | None]:
    """(the value MirrorConfig takes for ``raw``, None for its default; why ``raw`` cannot be
    used, or None): the one rule of a value, at write time and when read back."""
    default = getattr(_DEFAULTS, field)
    if isinstance(default, bool):
        v = raw.strip().lower()
        return (v == "true", None) if v in ("true", "false") else (None, "Expected value to be either true or false")
    if isinstance(default, int):
        try:
            n = int(raw)
        except ValueError:
            return None, "Not a number of type INT"
        return (n, None) if n >= 0 else (None, "Value must be at least 0")
    items = tuple(p.strip() for p in raw.split(",") if p.strip())
    if field == "acls_include":
        check = _acl_rule_problem
    elif field in PATTERN_FIELDS:
        def check(p: str) -> str | None:
            return pattern_list_problem((p,))
    else:
        return items, None
    reasons = {p: why for p in items if (why := check(p)) is not None}
    usable = tuple(p for p in items if p not in reasons)
    return usable, ("; ".join(reasons.values()) if reasons else None)


def _acl_rule_problem(rule: str) -> str | None:
    try:
        AclRule.parse(rule)
    except ValueError as e:
        return str(e)
    return None
