"""The audit snapshot: the input model the coordinator hands over, and the Parquet table schemas.

The coordinator (or the worker) builds one ``AuditSnapshot`` per export from its state at one
metadata-log offset. Everything in it is plain data: ints, strings, state bytes. The export
(``audit.export``) turns it into Arrow tables with the schemas below, redacts secrets, and
writes one Parquet snapshot.

Tables (``TABLES``), one row per ...:

- ``partition_states``: mirror partition, its state and previous state (byte and name), when
  the state was entered, retry attempt and error;
- ``transitions``: state transition (history, appended incrementally across snapshots);
- ``epochs``: mirror partition: source leader epoch (SLE), destination leader epoch (DLE) and
  last mirrored epoch (LME);
- ``offsets``: mirror partition: source log start, LSO and HW; destination log start, HW and
  LEO; LME; lag;
- ``group_syncs``: (group, partition) offset sync: source committed, synced, destination bounds;
- ``config_drift`` / ``acl_drift``: a difference between source and destination still present;
- ``mirror_configs``: a mirror's config entry, secrets redacted;
- ``consistent_cuts``: mirror partition stopped with ``--consistent-cut``: T, the cut offset and
  what it gave up (``[cut_offset, given_up_end_offset)``, its records, their newest timestamp).
- ``failover_impacts``: (mirror partition, stop): the stop's prediction (the metadata log's
  ``MirrorFailoverImpactRecord``) beside its outcome, as ``__mirror_state`` keeps them (the
  latest stop of each partition; -1 is unknown or none; lists as sorted text).

Every table has a ``mirror`` column in memory; on disk it becomes the ``mirror=`` directory
(hive layout), under which come ``date=``, ``snapshot_offset=`` and ``taken_at_ms=`` (see
``audit.layout``); Spark reads all four back as columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import msgspec
import pyarrow as pa

from coordinator.states import MirrorState

SCHEMA_VERSION: Final = 1
UNDEFINED: Final = -1  # Kafka's "no epoch" / "no offset"


class PartitionRow(msgspec.Struct, frozen=True, kw_only=True):
    """One mirror partition at the snapshot's metadata offset."""

    mirror: str
    topic: str
    topic_id: str  # str(uuid.UUID) as the coordinator keys it
    partition: int
    state: int  # MirrorState byte
    previous_state: int = int(MirrorState.UNKNOWN)
    state_entered_ms: int = 0
    retry_attempt: int = 0  # -1: FAILED and non-retryable
    error_message: str | None = None
    source_leader_epoch: int = UNDEFINED  # SLE
    dest_leader_epoch: int = UNDEFINED  # DLE
    last_mirrored_epoch: int = UNDEFINED  # LME recorded in __mirror_state on stop
    source_log_start: int = UNDEFINED
    source_lso: int = UNDEFINED
    source_hw: int = UNDEFINED
    dest_log_start: int = UNDEFINED
    dest_hw: int = UNDEFINED
    dest_leo: int = UNDEFINED
    lag: int | None = None  # None: max(0, source HW - destination LEO)

    def effective_lag(self) -> int:
        if self.lag is not None:
            return self.lag
        if self.source_hw < 0 or self.dest_leo < 0:
            return 0
        return max(0, self.source_hw - self.dest_leo)


class TransitionRow(msgspec.Struct, frozen=True, kw_only=True):
    """One state transition, stamped with the metadata offset the coordinator had applied."""

    mirror: str
    topic: str
    topic_id: str
    partition: int
    from_state: int
    to_state: int
    at_ms: int
    metadata_offset: int
    reason: str = ""


class GroupSyncRow(msgspec.Struct, frozen=True, kw_only=True):
    """The last group-offset sync of one (group, partition): synced must lie in [log start, LEO]."""

    mirror: str
    group_id: str
    group_type: str  # "consumer" or "share"
    topic: str
    topic_id: str
    partition: int
    source_committed: int
    synced_offset: int
    dest_log_start: int  # destination bounds the sync clamped against
    dest_leo: int
    leader_epoch: int = UNDEFINED
    synced_at_ms: int = 0


class ConfigDriftRow(msgspec.Struct, frozen=True, kw_only=True):
    """A topic config that differs between source and destination (excluded names are not drift)."""

    mirror: str
    topic: str
    config_name: str
    source_value: str | None  # None: absent on the source
    dest_value: str | None  # None: absent on the destination
    observed_ms: int = 0

    @property
    def drift(self) -> str:
        if self.dest_value is None:
            return "missing"
        if self.source_value is None:
            return "extra"
        return "different"


class AclDriftRow(msgspec.Struct, frozen=True, kw_only=True):
    """An ACL present on one side only. ``drift``: missing (to add) or extra (to remove)."""

    mirror: str
    resource_type: str
    resource_name: str
    pattern_type: str
    principal: str
    host: str
    operation: str
    permission_type: str
    drift: str  # "missing" or "extra" on the destination
    observed_ms: int = 0


class CutRow(msgspec.Struct, frozen=True, kw_only=True):
    """A partition's part of a ``--consistent-cut`` stop, as its state in ``__mirror_state`` holds it."""

    mirror: str
    topic: str
    topic_id: str
    partition: int
    state: int  # MirrorState byte (STOPPING until the cut is done, then STOPPED)
    cut_timestamp: int  # T
    cut_offset: int
    given_up_end_offset: int = UNDEFINED  # -1: not recorded yet
    given_up_records: int = UNDEFINED
    newest_given_up_timestamp: int = UNDEFINED  # -1: none given up


class FailoverImpactRow(msgspec.Struct, frozen=True, kw_only=True):
    """One partition's stop: what it was predicted to cost and what it did (issue #26).

    ``*aborts``: ``producer_id@first_offset`` sorted, comma-joined; ``*groups``: ``group=offset``."""

    mirror: str
    topic: str
    topic_id: str
    partition: int
    metadata_offset: int  # of the MirrorFailoverImpactRecord; -1: none
    predicted_at_ms: int = UNDEFINED
    missing_reason: str | None = None
    completed: bool = False
    completed_at_ms: int = UNDEFINED
    predicted_end_offset: int = UNDEFINED
    stop_offset: int = UNDEFINED
    predicted_source_hw: int = UNDEFINED
    predicted_lost_records: int = UNDEFINED
    lost_records: int = UNDEFINED
    predicted_oldest_lost_age_ms: int = UNDEFINED
    predicted_aborts: str = ""
    aborts: str = ""
    predicted_groups: str = ""
    synced_groups: str = ""


class AuditSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """Everything one export writes, all taken at ``metadata_offset`` of the metadata log.

    ``transitions`` may hold the full history or only the recent part: the export keeps those
    after the previous snapshot's offset, and refuses any beyond ``metadata_offset``.
    ``mirror_configs`` values are redacted on export (see ``audit.redact``).
    """

    metadata_offset: int
    taken_at_ms: int
    schema_version: int = SCHEMA_VERSION
    partitions: list[PartitionRow] = []
    transitions: list[TransitionRow] = []
    group_syncs: list[GroupSyncRow] = []
    config_drift: list[ConfigDriftRow] = []
    acl_drift: list[AclDriftRow] = []
    mirror_configs: dict[str, dict[str, str]] = {}
    consistent_cuts: list[CutRow] = []
    failover_impacts: list[FailoverImpactRow] = []


# ---------------------------------------------------------------------------------------------
# Arrow schemas: the in-memory tables handed to ``export_tables``. Columns named in
# ``DERIVED`` (state names) are filled by the export and may be left out.
# ---------------------------------------------------------------------------------------------

_S = pa.string()
_I8, _I32, _I64 = pa.int8(), pa.int32(), pa.int64()


def _key(*extra: pa.Field) -> list[pa.Field]:
    return [
        pa.field("mirror", _S, False),
        pa.field("topic", _S, False),
        pa.field("topic_id", _S, False),
        pa.field("partition", _I32, False),
        *extra,
    ]


TABLES: Final[dict[str, pa.Schema]] = {
    "partition_states": pa.schema(
        _key(
            pa.field("state", _I8, False),
            pa.field("state_name", _S, False),
            pa.field("previous_state", _I8, False),
            pa.field("previous_state_name", _S, False),
            pa.field("state_entered_ms", _I64, False),
            pa.field("retry_attempt", _I32, False),
            pa.field("error_message", _S, True),
        )
    ),
    "transitions": pa.schema(
        _key(
            pa.field("from_state", _I8, False),
            pa.field("from_state_name", _S, False),
            pa.field("to_state", _I8, False),
            pa.field("to_state_name", _S, False),
            pa.field("at_ms", _I64, False),
            pa.field("metadata_offset", _I64, False),
            pa.field("reason", _S, False),
        )
    ),
    "epochs": pa.schema(
        _key(
            pa.field("state", _I8, False),
            pa.field("state_name", _S, False),
            pa.field("source_leader_epoch", _I32, False),
            pa.field("dest_leader_epoch", _I32, False),
            pa.field("last_mirrored_epoch", _I32, False),
        )
    ),
    "offsets": pa.schema(
        _key(
            pa.field("source_log_start", _I64, False),
            pa.field("source_lso", _I64, False),
            pa.field("source_hw", _I64, False),
            pa.field("dest_log_start", _I64, False),
            pa.field("dest_hw", _I64, False),
            pa.field("dest_leo", _I64, False),
            pa.field("last_mirrored_epoch", _I32, False),
            pa.field("lag", _I64, False),
        )
    ),
    "group_syncs": pa.schema(
        [
            pa.field("mirror", _S, False),
            pa.field("group_id", _S, False),
            pa.field("group_type", _S, False),
            pa.field("topic", _S, False),
            pa.field("topic_id", _S, False),
            pa.field("partition", _I32, False),
            pa.field("source_committed", _I64, False),
            pa.field("synced_offset", _I64, False),
            pa.field("dest_log_start", _I64, False),
            pa.field("dest_leo", _I64, False),
            pa.field("leader_epoch", _I32, False),
            pa.field("synced_at_ms", _I64, False),
        ]
    ),
    "config_drift": pa.schema(
        [
            pa.field("mirror", _S, False),
            pa.field("topic", _S, False),
            pa.field("config_name", _S, False),
            pa.field("source_value", _S, True),
            pa.field("dest_value", _S, True),
            pa.field("drift", _S, False),
            pa.field("observed_ms", _I64, False),
        ]
    ),
    "acl_drift": pa.schema(
        [
            pa.field("mirror", _S, False),
            pa.field("resource_type", _S, False),
            pa.field("resource_name", _S, False),
            pa.field("pattern_type", _S, False),
            pa.field("principal", _S, False),
            pa.field("host", _S, False),
            pa.field("operation", _S, False),
            pa.field("permission_type", _S, False),
            pa.field("drift", _S, False),
            pa.field("observed_ms", _I64, False),
        ]
    ),
    "consistent_cuts": pa.schema(
        _key(
            pa.field("state", _I8, False),
            pa.field("state_name", _S, False),
            pa.field("cut_timestamp", _I64, False),
            pa.field("cut_offset", _I64, False),
            pa.field("given_up_end_offset", _I64, False),
            pa.field("given_up_records", _I64, False),
            pa.field("newest_given_up_timestamp", _I64, False),
        )
    ),
    "mirror_configs": pa.schema(
        [
            pa.field("mirror", _S, False),
            pa.field("config_name", _S, False),
            pa.field("config_value", _S, True),
            pa.field("redacted", pa.bool_(), False),
        ]
    ),
    "failover_impacts": pa.schema(
        _key(
            pa.field("metadata_offset", _I64, False),
            pa.field("predicted_at_ms", _I64, False),
            pa.field("missing_reason", _S, True),
            pa.field("completed", pa.bool_(), False),
            pa.field("completed_at_ms", _I64, False),
            pa.field("predicted_end_offset", _I64, False),
            pa.field("stop_offset", _I64, False),
            pa.field("predicted_source_hw", _I64, False),
            pa.field("predicted_lost_records", _I64, False),
            pa.field("lost_records", _I64, False),
            pa.field("predicted_oldest_lost_age_ms", _I64, False),
            pa.field("predicted_aborts", _S, False),
            pa.field("aborts", _S, False),
            pa.field("predicted_groups", _S, False),
            pa.field("synced_groups", _S, False),
        )
    ),
}

# Derived by the export from the tables it writes (``audit.rollup``); never handed in.
ROLLUP_TABLES: Final[dict[str, pa.Schema]] = {
    "transition_seconds": pa.schema(
        [
            pa.field("mirror", _S, False),
            pa.field("sec", _I64, False),  # at_ms // 1000
            pa.field("from_state", _I8, False),
            pa.field("from_state_name", _S, False),
            pa.field("to_state", _I8, False),
            pa.field("to_state_name", _S, False),
            pa.field("transitions", _I64, False),
            pa.field("first_ms", _I64, False),
            pa.field("last_ms", _I64, False),
            pa.field("first_metadata_offset", _I64, False),
        ]
    ),
    "failover_runs": pa.schema(
        [
            pa.field("mirror", _S, False),
            pa.field("topic_id", _S, False),
            # The topic ID's most and least significant bits, as Kafka's Uuid: a numeric key.
            # Null (and the table version 1) where a topic ID is not a UUID.
            pa.field("topic_id_msb", _I64, True),
            pa.field("topic_id_lsb", _I64, True),
            pa.field("partition", _I32, False),
            pa.field("first_ms", _I64, False),
            pa.field("last_ms", _I64, False),
            pa.field("stopping", pa.bool_(), False),  # holds a -> STOPPING
            pa.field("stopped", pa.bool_(), False),  # holds a STOPPING -> STOPPED
            pa.field("failback_ms", _I64, True),  # first STOPPED -> PREPARING
            pa.field("pm_count", _I64, False),  # PREPARING -> MIRRORING: how many, first, last
            pa.field("pm_first_ms", _I64, True),
            pa.field("pm_last_ms", _I64, True),
            pa.field("pm_first_metadata_offset", _I64, True),
            # The same partition's previous run's last and next run's first time, within this
            # snapshot (null: none in it); version 3.
            pa.field("prev_last_ms", _I64, True),
            pa.field("next_first_ms", _I64, True),
        ]
    ),
    "topic_lag": pa.schema(  # from the snapshot's offsets: one row per (mirror, topic)
        [
            pa.field("mirror", _S, False),
            pa.field("topic", _S, False),
            pa.field("partitions", _I64, False),
            pa.field("lagging_partitions", _I64, False),  # lag > 0
            pa.field("total_lag", _I64, False),
            pa.field("max_lag", _I64, False),
        ]
    ),
}
ALL_TABLES: Final[dict[str, pa.Schema]] = TABLES | ROLLUP_TABLES

# A table's version, kept per table in each manifest (``layout.TableEntry.version``; 1 where a
# manifest does not say): readers use a newer column only when every snapshot has it.
# failover_runs 2: topic_id_msb and topic_id_lsb; 3: prev_last_ms and next_first_ms. topic_lag 1: new (issue #25); a snapshot from
# before does not list it, and the lag queries read its offsets (``SnapshotStore.has``).
TABLE_VERSIONS: Final[dict[str, int]] = {"failover_runs": 3, "topic_lag": 1}

# state byte column -> its name column, filled by the export from MirrorState.
STATE_NAME_COLUMNS: Final[dict[str, str]] = {
    "state": "state_name",
    "previous_state": "previous_state_name",
    "from_state": "from_state_name",
    "to_state": "to_state_name",
}
DERIVED: Final = frozenset(STATE_NAME_COLUMNS.values())

# Hive partition columns on disk, not stored inside the Parquet files. A snapshot is
# identified by (snapshot_offset, taken_at_ms): the metadata log may stay idle while offsets
# and lag move, so two snapshots can share an offset but never a time.
PARTITION_COLUMNS: Final = ("mirror", "date", "snapshot_offset", "taken_at_ms")

# State history is appended; everything else is a full picture at the snapshot's offset.
INCREMENTAL_TABLES: Final = frozenset({"transitions", "transition_seconds", "failover_runs"})


def state_name(value: int) -> str:
    try:
        return MirrorState(value).name
    except ValueError:
        return f"INVALID({value})"


def file_schema(table: str) -> pa.Schema:
    """The schema inside the Parquet files: the table's minus the hive partition columns."""
    schema = ALL_TABLES[table]
    return pa.schema([f for f in schema if f.name not in PARTITION_COLUMNS])


def snapshot_to_arrow(snapshot: AuditSnapshot) -> dict[str, pa.Table]:
    """Row structs -> column-wise Arrow tables (without the derived columns)."""
    parts = snapshot.partitions

    def col(rows: Sequence[msgspec.Struct], name: str) -> list[object]:
        return [getattr(r, name) for r in rows]

    def build(table: str, columns: dict[str, list[object]]) -> pa.Table:
        schema = TABLES[table]
        fields = [schema.field(n) for n in columns]
        return pa.table({n: pa.array(v, f.type) for (n, v), f in zip(columns.items(), fields)})

    key = ("mirror", "topic", "topic_id", "partition")
    tables: dict[str, pa.Table] = {
        "partition_states": build(
            "partition_states",
            {
                **{k: col(parts, k) for k in key},
                **{
                    k: col(parts, k)
                    for k in ("state", "previous_state", "state_entered_ms", "retry_attempt")
                },
                "error_message": col(parts, "error_message"),
            },
        ),
        "epochs": build(
            "epochs",
            {
                **{k: col(parts, k) for k in key},
                "state": col(parts, "state"),
                "source_leader_epoch": col(parts, "source_leader_epoch"),
                "dest_leader_epoch": col(parts, "dest_leader_epoch"),
                "last_mirrored_epoch": col(parts, "last_mirrored_epoch"),
            },
        ),
        "offsets": build(
            "offsets",
            {
                **{k: col(parts, k) for k in key},
                **{
                    k: col(parts, k)
                    for k in (
                        "source_log_start",
                        "source_lso",
                        "source_hw",
                        "dest_log_start",
                        "dest_hw",
                        "dest_leo",
                        "last_mirrored_epoch",
                    )
                },
                "lag": [p.effective_lag() for p in parts],
            },
        ),
    }
    tr = snapshot.transitions
    tables["transitions"] = build(
        "transitions",
        {
            k: col(tr, k)
            for k in (*key, "from_state", "to_state", "at_ms", "metadata_offset", "reason")
        },
    )
    gs = snapshot.group_syncs
    tables["group_syncs"] = build(
        "group_syncs",
        {n: col(gs, n) for n in TABLES["group_syncs"].names},
    )
    cd = snapshot.config_drift
    tables["config_drift"] = build(
        "config_drift",
        {
            **{n: col(cd, n) for n in ("mirror", "topic", "config_name", "source_value", "dest_value")},
            "drift": [r.drift for r in cd],
            "observed_ms": col(cd, "observed_ms"),
        },
    )
    ad = snapshot.acl_drift
    tables["acl_drift"] = build(
        "acl_drift",
        {n: col(ad, n) for n in TABLES["acl_drift"].names},
    )
    cuts = snapshot.consistent_cuts
    tables["consistent_cuts"] = build(
        "consistent_cuts",
        {n: col(cuts, n) for n in TABLES["consistent_cuts"].names if n != "state_name"},
    )
    items = [(m, k, v) for m, cfg in sorted(snapshot.mirror_configs.items()) for k, v in sorted(cfg.items())]
    tables["mirror_configs"] = build(
        "mirror_configs",
        {
            "mirror": [i[0] for i in items],
            "config_name": [i[1] for i in items],
            "config_value": [i[2] for i in items],
            "redacted": [False] * len(items),
        },
    )
    fi = snapshot.failover_impacts
    tables["failover_impacts"] = build("failover_impacts", {n: col(fi, n) for n in TABLES["failover_impacts"].names})
    return tables
