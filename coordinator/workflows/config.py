"""A cluster mirror's settings, with the prototype's names and defaults.

Keys are accepted with or without the prototype's ``mirror.`` prefix (``groups.include`` and
``mirror.groups.include`` are the same setting). Lists are comma-separated, as Kafka's LIST type.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

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
