"""The ready audit queries, as PySpark DataFrames over the snapshot store.

Kinds: a *violation* query returning rows fails the audit (CLI exit code 1); *drift* rows
fail it only under ``--strict`` (drift is normal between two syncs); *info* queries report.

=============================  =========  =======================================================
name                           kind       what
=============================  =========  =======================================================
dle_sle_violations             violation  DLE < SLE while the fetcher may append (any snapshot)
stuck_partitions               violation  in a transitional state longer than the threshold
synced_offsets_out_of_range    violation  group sync outside [dest log start, dest LEO] (any)
illegal_transitions            violation  a transition the state machine does not allow
lag_per_mirror                 info       lag per mirror, per snapshot (over time)
lag_per_topic                  info       lag per mirror and topic, per snapshot (over time)
failover_timeline              info       failover/failback episodes of each mirror, by event
transition_counts              info       transitions by mirror and type
impact_vs_outcome              info       partitions whose stop did otherwise than its prediction
config_drift                   drift      config differences in the latest snapshot
acl_drift                      drift      ACL differences in the latest snapshot
=============================  =========  =======================================================
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Final, Literal

from pyspark.sql import Column, DataFrame, Row, SparkSession, Window
from pyspark.sql import functions as F

from audit.impact import impact_vs_outcome
from audit.rollup import FB_START, FO_DONE, FO_START, PM, ROLLUPS, RUN_GAP_MS
from audit.spark import Scope, SnapshotStore
from coordinator.states import MirrorState, is_legal_transition

Kind = Literal["violation", "drift", "info"]

# Transitional states: a partition is not meant to stay in them.
STUCK_STATES: Final = ("UNKNOWN", "PREPARING", "EPOCH_FENCING", "PAUSING", "STOPPING", "FAILED")
# States in which the fetcher may append source batches: DLE >= SLE must hold there.
# EPOCH_FENCING is the repair in progress, and PAUSED/STOPPED no longer fetch.
DLE_STATES: Final = ("MIRRORING", "PAUSING")

FAILOVER_STARTED: Final = "failover started"
FAILOVER_COMPLETED: Final = "failover completed"
FAILBACK_STARTED: Final = "failback started"
FAILBACK_COMPLETED: Final = "failback completed"


@dataclass(frozen=True)
class AuditParams:
    stuck_after_s: float = 300.0
    stuck_states: tuple[str, ...] = STUCK_STATES
    dle_states: tuple[str, ...] = DLE_STATES
    episode_gap_s: float = 300.0  # failover events further apart than this start a new episode
    mirrors: tuple[str, ...] = ()  # empty: every mirror
    # Read the export's rollups (audit.rollup) where every snapshot has them; False: the raw
    # transitions only (the bench and tests compare the two).
    rollups: bool = True


@dataclass(frozen=True)
class Query:
    name: str
    kind: Kind
    description: str
    build: Callable[[SparkSession, SnapshotStore, AuditParams], DataFrame]
    tables: tuple[str, ...] = field(default=())


def _read(
    spark: SparkSession, store: SnapshotStore, table: str, scope: Scope, p: AuditParams,
    only: set[tuple[str, int, int]] | None = None,
) -> DataFrame:
    df = store.read(spark, table, scope, only=only)
    if p.mirrors:
        df = df.where(F.col("mirror").isin(list(p.mirrors)))
    return df


def _ts(ms_col: str) -> Column:
    """Epoch millis -> ISO-8601 UTC text: stable across driver time zones, sorts as time."""
    return F.date_format(F.timestamp_millis(F.col(ms_col)), "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'")


def dle_sle_violations(spark: SparkSession, store: SnapshotStore, p: AuditParams) -> DataFrame:
    e = _read(spark, store, "epochs", "all", p)
    bad = e.where(
        F.col("state_name").isin(list(p.dle_states))
        & (F.col("source_leader_epoch") >= 0)
        & (F.col("dest_leader_epoch") < F.col("source_leader_epoch"))
    )
    last = F.max_by(
        F.struct("state_name", "source_leader_epoch", "dest_leader_epoch", "taken_at_ms"), "snapshot_offset"
    )
    return (
        bad.groupBy("mirror", "topic", "partition", "topic_id")
        .agg(
            last.alias("last"),
            F.max(F.col("source_leader_epoch") - F.col("dest_leader_epoch")).alias("max_epoch_gap"),
            F.count("*").alias("snapshots"),
            F.min("snapshot_offset").alias("first_snapshot_offset"),
            F.max("snapshot_offset").alias("last_snapshot_offset"),
        )
        .select(
            "mirror",
            "topic",
            "partition",
            F.col("last.state_name").alias("state"),
            F.col("last.source_leader_epoch").alias("source_leader_epoch"),
            F.col("last.dest_leader_epoch").alias("dest_leader_epoch"),
            "max_epoch_gap",
            "snapshots",
            "first_snapshot_offset",
            "last_snapshot_offset",
            _ts("last.taken_at_ms").alias("last_seen"),
            "topic_id",
        )
        .orderBy("mirror", "topic", "partition")
    )


def stuck_partitions(spark: SparkSession, store: SnapshotStore, p: AuditParams) -> DataFrame:
    s = _read(spark, store, "partition_states", "latest", p)
    secs = (F.col("taken_at_ms") - F.col("state_entered_ms")) / 1000.0
    return (
        s.withColumn("seconds_in_state", F.round(secs, 3))
        .where(F.col("state_name").isin(list(p.stuck_states)) & (secs > p.stuck_after_s))
        .select(
            "mirror",
            "topic",
            "partition",
            F.col("state_name").alias("state"),
            F.col("previous_state_name").alias("previous_state"),
            "seconds_in_state",
            _ts("state_entered_ms").alias("entered_at"),
            "retry_attempt",
            "error_message",
            "snapshot_offset",
            "topic_id",
        )
        .orderBy(F.desc("seconds_in_state"), "mirror", "topic", "partition")
    )


def synced_offsets_out_of_range(spark: SparkSession, store: SnapshotStore, p: AuditParams) -> DataFrame:
    g = _read(spark, store, "group_syncs", "all", p)
    below = F.col("synced_offset") < F.col("dest_log_start")
    above = F.col("synced_offset") > F.col("dest_leo")
    key = [
        "mirror", "group_id", "group_type", "topic", "partition", "source_committed",
        "synced_offset", "dest_log_start", "dest_leo", "synced_at_ms", "topic_id",
    ]  # fmt: skip
    return (
        g.where(below | above)
        .withColumn("problem", F.when(below, F.lit("below dest log start")).otherwise(F.lit("above dest LEO")))
        .groupBy(*key, "problem")
        .agg(F.min("snapshot_offset").alias("first_snapshot_offset"))  # one sync seen in many snapshots
        .select(
            "mirror", "group_id", "group_type", "topic", "partition", "problem", "source_committed",
            "synced_offset", "dest_log_start", "dest_leo", _ts("synced_at_ms").alias("synced_at"),
            "first_snapshot_offset", "topic_id",
        )  # fmt: skip
        .orderBy("mirror", "group_id", "topic", "partition", "synced_at")
    )


def _legal_pairs() -> list[str]:
    return [f"{a.name}->{b.name}" for a in MirrorState for b in MirrorState if is_legal_transition(a, b)]


def uses_rollups(store: SnapshotStore, p: AuditParams) -> bool:
    """Read the export's rollups: asked for, and every snapshot has them."""
    return p.rollups and all(store.has(t) for t in ROLLUPS)


def _illegal(frm: str, to: str) -> Column:
    return ~F.concat_ws("->", frm, to).isin(_legal_pairs())


def illegal_transitions(spark: SparkSession, store: SnapshotStore, p: AuditParams) -> DataFrame:
    only = None
    if uses_rollups(store, p):
        # The per-second rollup names every (mirror, snapshot) holding an illegal pair: read only
        # those files of the history (none at all in a clean one).
        secs = _read(spark, store, "transition_seconds", "all", p)
        hits = secs.where(_illegal("from_state_name", "to_state_name"))
        only = {(r[0], r[1], r[2]) for r in hits.select("mirror", "snapshot_offset", "taken_at_ms").distinct().collect()}
    t = _read(spark, store, "transitions", "all", p, only=only)
    return (
        t.where(_illegal("from_state_name", "to_state_name"))
        .groupBy("mirror", "topic", "partition", "from_state_name", "to_state_name", "topic_id")
        .agg(
            F.count("*").alias("count"),
            F.min("at_ms").alias("first_ms"),
            F.max("at_ms").alias("last_ms"),
            F.min("metadata_offset").alias("first_metadata_offset"),
        )
        .select(
            "mirror", "topic", "partition", F.col("from_state_name").alias("from_state"),
            F.col("to_state_name").alias("to_state"), "count", _ts("first_ms").alias("first_at"),
            _ts("last_ms").alias("last_at"), "first_metadata_offset", "topic_id",
        )  # fmt: skip
        .orderBy("mirror", "topic", "partition", "first_at")
    )


def uses_lag_rollup(store: SnapshotStore, p: AuditParams) -> bool:
    """Read ``topic_lag`` (audit.rollup): asked for, and every snapshot has it."""
    return p.rollups and store.has("topic_lag")


def _lag(spark: SparkSession, store: SnapshotStore, p: AuditParams, by: Sequence[str]) -> DataFrame:
    if uses_lag_rollup(store, p):
        df = _read(spark, store, "topic_lag", "all", p)
        if list(by) != ["mirror", "topic"]:  # else a row each already
            df = df.groupBy("snapshot_offset", "taken_at_ms", *by).agg(
                F.sum("partitions").alias("partitions"), F.sum("total_lag").alias("total_lag"),
                F.max("max_lag").alias("max_lag"), F.sum("lagging_partitions").alias("lagging_partitions"),
            )  # fmt: skip
    else:
        df = _read(spark, store, "offsets", "all", p).groupBy("snapshot_offset", "taken_at_ms", *by).agg(
            F.count("*").alias("partitions"),
            F.sum("lag").alias("total_lag"),
            F.max("lag").alias("max_lag"),
            F.sum(F.when(F.col("lag") > 0, 1).otherwise(0)).alias("lagging_partitions"),
        )
    return df.select(
        *by, "snapshot_offset", _ts("taken_at_ms").alias("taken_at"), "partitions", "lagging_partitions",
        "total_lag", "max_lag",
    ).orderBy(*by, "snapshot_offset", "taken_at")  # fmt: skip


def lag_per_mirror(spark: SparkSession, store: SnapshotStore, p: AuditParams) -> DataFrame:
    return _lag(spark, store, p, ["mirror"])


def lag_per_topic(spark: SparkSession, store: SnapshotStore, p: AuditParams) -> DataFrame:
    return _lag(spark, store, p, ["mirror", "topic"])


_EVENTS: Final = (FAILOVER_STARTED, FAILOVER_COMPLETED, FAILBACK_STARTED, FAILBACK_COMPLETED)  # in the order they run
# Kinds of transition (audit.rollup.failover_kind), by index into _EVENTS: 0 -> STOPPING,
# 1 STOPPING -> STOPPED, 2 STOPPED -> PREPARING, 3 PREPARING -> MIRRORING (which completes a
# failback only after a 2).
_FO_START, _FO_DONE, _FB_START, _PM = FO_START, FO_DONE, FB_START, PM


def _kind(frm: Column, to: Column) -> Column:
    S = MirrorState
    return (
        F.when((to == S.STOPPING) & (frm != S.STOPPING), F.lit(_FO_START))
        .when((frm == S.STOPPING) & (to == S.STOPPED), F.lit(_FO_DONE))
        .when((frm == S.STOPPED) & (to == S.PREPARING), F.lit(_FB_START))
        .when((frm == S.PREPARING) & (to == S.MIRRORING), F.lit(_PM))
    )


def _failover_events(spark: SparkSession, store: SnapshotStore, p: AuditParams) -> DataFrame:
    return (
        _read(spark, store, "transitions", "all", p)
        .select("mirror", "topic_id", "partition", "at_ms", "metadata_offset",
                _kind(F.col("from_state"), F.col("to_state")).alias("kind"))
        .where(F.col("kind").isNotNull())
        .withColumn("sec", F.floor(F.col("at_ms") / 1000))
    )  # fmt: skip


def _per_second(spark: SparkSession, store: SnapshotStore, p: AuditParams, ev: DataFrame | None) -> DataFrame:
    """Rows of (mirror, second, kind) holding events: from the raw events ``ev``, one per
    (mirror, second, kind), or (None) the per-second rollup's as they are, one per snapshot
    holding the second (a second may straddle two; ``_Episodes`` sums them), with that
    snapshot: summing them here cost a shuffle for as many rows."""
    if ev is not None:
        return ev.groupBy("mirror", "sec", "kind").agg(
            F.count("*").alias("n"), F.min("at_ms").alias("lo"), F.max("at_ms").alias("hi"),
            F.min("metadata_offset").alias("mo"),
        )  # fmt: skip
    return (
        _read(spark, store, "transition_seconds", "all", p)
        .select("mirror", "sec", _kind(F.col("from_state"), F.col("to_state")).alias("kind"),
                F.col("transitions").alias("n"), F.col("first_ms").alias("lo"), F.col("last_ms").alias("hi"),
                F.col("first_metadata_offset").alias("mo"), "snapshot_offset", "taken_at_ms")
        .where(F.col("kind").isNotNull())
    )  # fmt: skip


class _Episodes:
    """Episodes from the per-second rows (small: a row per (mirror, second, kind) holding
    events, or a few where snapshots share the second; collected): runs of events with no gap longer than ``episode_gap_s`` (exact for gaps
    of a second or more). ``spans``: each episode's (mirror, number, first and last second), its
    index the episode's ID; ``bounds``: each episode's first and last event (ms) and whether its
    events lie in more than one snapshot (False where the rows do not say); ``seconds``: every
    (mirror, second) holding events, with the ID of its episode; ``kinds``: per (mirror,
    episode, kind), [events, first ms, last ms, first metadata offset]."""

    def __init__(self, per_sec: list[Row], p: AuditParams) -> None:
        gap = _gap_ms(p)
        by_sec: dict[tuple[str, int], list[Row]] = defaultdict(list)
        for r in per_sec:
            by_sec[(r.mirror, r.sec)].append(r)
        self.spans: list[tuple[str, int, int, int]] = []
        self.bounds: list[tuple[int, int, bool]] = []  # filled at the end
        self.seconds: list[tuple[str, int, int]] = []
        self.kinds: dict[tuple[str, int, int], list[int]] = {}
        lo_hi: list[list[int]] = []
        snapshots: list[set[tuple[int, int]]] = []
        said = bool(per_sec) and "snapshot_offset" in per_sec[0].__fields__
        mirror, episode, hi = None, 0, 0
        for (m, sec), rows in sorted(by_sec.items()):
            lo = min(r.lo for r in rows)
            # Only a second's first event can start an episode: the others are less than a second away.
            if m != mirror or lo - hi > gap:
                episode = 1 if m != mirror else episode + 1
                mirror, hi = m, lo
                self.spans.append((m, episode, sec, sec))
                lo_hi.append([lo, lo])
                snapshots.append(set())
            else:
                self.spans[-1] = (m, episode, self.spans[-1][2], sec)
            self.seconds.append((m, sec, len(self.spans) - 1))
            hi = lo_hi[-1][1] = max(hi, *(r.hi for r in rows))
            if said:
                snapshots[-1].update((r.snapshot_offset, r.taken_at_ms) for r in rows)
            for r in rows:
                k = self.kinds.get((m, episode, r.kind))
                if k is None:
                    self.kinds[(m, episode, r.kind)] = [r.n, r.lo, r.hi, r.mo]
                else:
                    k[0], k[1], k[2], k[3] = k[0] + r.n, min(k[1], r.lo), max(k[2], r.hi), min(k[3], r.mo)
        self.bounds = [(lo, hi, len(s) > 1) for (lo, hi), s in zip(lo_hi, snapshots)]


def _gap_ms(p: AuditParams) -> int:
    return max(int(p.episode_gap_s * 1000), 1000)


def _in_episodes(df: DataFrame, seconds: DataFrame) -> DataFrame:
    """``df`` (mirror, sec, ...) with the ID of the episode its second lies in (``eid``): a hash
    join on (mirror, second), as each row's second holds an event. Broadcast: the seconds are
    few, and a planned sort-merge join would shuffle every row."""
    return df.join(F.broadcast(seconds), ["mirror", "sec"])


def _per_partition(ev: DataFrame | None, runs: DataFrame | None, seconds: DataFrame, topic: list[str]) -> DataFrame:
    """One row per (episode ID, topic, partition): which events it had, and what the
    failback-completed rule needs. From the raw events, or from the runs rollup. ``topic``: the
    topic's key columns."""
    if ev is not None:
        k = F.col("kind")

        def of(kind: int, c: str) -> Column:
            return F.when(k == kind, F.col(c))

        return (
            _in_episodes(ev, seconds)
            .groupBy("eid", *topic, "partition")
            .agg(
                F.max(of(_FO_START, "kind")).alias("has0"), F.max(of(_FO_DONE, "kind")).alias("has1"),
                F.min(of(_FB_START, "at_ms")).alias("fb_lo"), F.max(of(_PM, "at_ms")).alias("pm_hi"),
                F.min(of(_PM, "at_ms")).alias("pm_lo"), F.count(of(_PM, "at_ms")).alias("pm_n"),
                F.min(of(_PM, "metadata_offset")).alias("pm_mo"),
            )
        )  # fmt: skip
    assert runs is not None
    # A run lies in one episode (audit.rollup): its first second says which. One shuffle, by
    # topic, serves the per-partition and the per-topic aggregate.
    return (
        _in_episodes(runs.withColumn("sec", F.floor(F.col("first_ms") / 1000)), seconds)
        .repartition("eid", *topic)
        .groupBy("eid", *topic, "partition")
        .agg(*_merged_runs())
    )


def _merged_runs() -> list[Column]:
    """A partition's runs in one episode, merged: the columns of ``_per_partition``."""
    return [
        F.max(F.when(F.col("stopping"), 1)).alias("has0"), F.max(F.when(F.col("stopped"), 1)).alias("has1"),
        F.min("failback_ms").alias("fb_lo"), F.max("pm_last_ms").alias("pm_hi"),
        F.min("pm_first_ms").alias("pm_lo"), F.sum("pm_count").alias("pm_n"),
        F.min("pm_first_metadata_offset").alias("pm_mo"),
    ]  # fmt: skip


def _done(fb_lo: Column, pm_hi: Column) -> Column:
    """A failback completed: a PREPARING -> MIRRORING after its first STOPPED -> PREPARING."""
    return F.coalesce(fb_lo.isNotNull() & (pm_hi > fb_lo), F.lit(False))


def _partition_counts(per_partition: DataFrame, topic: list[str]) -> DataFrame:
    """``_per_partition``'s rows as counts: per (episode ID, topic, partition) whether it had
    each event (p0-p3, 0 or 1), and the completed failback's figures (n3, lo3, hi3, mo3)."""
    done = _done(F.col("fb_lo"), F.col("pm_hi"))
    return per_partition.select(
        "eid", *topic, *[F.col(c).isNotNull().cast("long").alias(f"p{i}") for i, c in enumerate(("has0", "has1", "fb_lo"))],
        done.cast("long").alias("p3"), *[F.when(done, F.col(c)).alias(f"{o}3") for c, o in (
            ("pm_n", "n"), ("pm_lo", "lo"), ("pm_hi", "hi"), ("pm_mo", "mo"))],
    )  # fmt: skip


def _run_counts(runs: DataFrame, seconds: DataFrame, topic: list[str]) -> DataFrame:
    """``_partition_counts`` from runs that say their neighbours (``failover_runs`` version 3),
    without a group per (episode, partition). Nearly every partition has one run per episode:
    those runs are counted per (episode ID, topic) as they are. A run is merged with the rest of
    its partition's runs in the episode (a group per partition, as ``_per_partition``) only where
    it may have company: its previous or next run in the snapshot lies in its episode (between
    the episode's first and last event), or it lacks one in the snapshot and the episode has
    events in another snapshot too."""
    prev, nxt = F.col("prev_last_ms"), F.col("next_first_ms")
    company = (
        F.coalesce(prev >= F.col("ep_lo"), F.lit(False)) | F.coalesce(nxt <= F.col("ep_hi"), F.lit(False))
        | (F.col("straddles") & (prev.isNull() | nxt.isNull()))
    )  # fmt: skip
    run_done = _done(F.col("failback_ms"), F.col("pm_last_ms"))

    def if_done(c: str) -> Column:
        return F.when(run_done, F.col(c))

    g = (
        _in_episodes(runs.withColumn("sec", F.floor(F.col("first_ms") / 1000)), seconds)
        .withColumn("group", F.when(company, F.col("partition")).otherwise(F.lit(-1)))
        .groupBy("eid", *topic, "group")
        .agg(
            F.count(F.when(F.col("stopping"), 1)).alias("c0"), F.count(F.when(F.col("stopped"), 1)).alias("c1"),
            F.count("failback_ms").alias("c2"), F.count(if_done("pm_count")).alias("c3"),
            F.sum(if_done("pm_count")).alias("cn3"), F.min(if_done("pm_first_ms")).alias("clo3"),
            F.max(if_done("pm_last_ms")).alias("chi3"), F.min(if_done("pm_first_metadata_offset")).alias("cmo3"),
            *_merged_runs()[2:],  # fb_lo, pm_hi, pm_lo, pm_n, pm_mo of a partition's runs
        )
    )  # fmt: skip
    one = F.col("group") >= 0  # one partition's runs: merged; else single runs, counted
    done = _done(F.col("fb_lo"), F.col("pm_hi"))
    return g.select(
        "eid", *topic,
        *[F.when(one, F.least(F.col(f"c{i}"), F.lit(1))).otherwise(F.col(f"c{i}")).alias(f"p{i}") for i in range(3)],
        F.when(one, done.cast("long")).otherwise(F.col("c3")).alias("p3"),
        *[F.when(one, F.when(done, F.col(c))).otherwise(F.col(f"c{o}3")).alias(f"{o}3") for c, o in (
            ("pm_n", "n"), ("pm_lo", "lo"), ("pm_hi", "hi"), ("pm_mo", "mo"))],
    )  # fmt: skip


def failover_events(spark: SparkSession, store: SnapshotStore, p: AuditParams) -> list[Row]:
    """One row per (mirror, episode, event) of the failovers and failbacks that happened
    (``EVENT_SCHEMA``), on the driver.

    An *episode* is a run of failover and failback transitions in one mirror with no gap longer
    than ``episode_gap_s``; episodes holding only PREPARING -> MIRRORING (first starts) give no
    rows. A partition's failback *completed* in an episode when it has a PREPARING -> MIRRORING
    after its STOPPED -> PREPARING there.

    Counts and times of the first three events need no partition: they come from the small
    per-second table, collected: the episodes are found in it here, and only its seconds, each
    with the numeric ID of its episode, go back to Spark, so no window job runs. One hash
    aggregate per (episode ID, partition) finds what needs one (which partitions had each event,
    and the failback-completed rule), kept to the few values that rule needs. With the export's
    rollups (``audit.rollup``), the per-second table is summed from ``transition_seconds`` and
    the per-partition pass reads ``failover_runs``, about a tenth of the transitions; from
    version 3 the runs say their neighbours, and only the runs that may share an episode with
    another of their partition's are grouped per partition (``_run_counts``): the rest are
    counted per (episode, topic) as they are. Without the rollups (or for an episode gap under
    ``RUN_GAP_MS``), both come from every transition.
    """
    raw = not uses_rollups(store, p) or _gap_ms(p) < RUN_GAP_MS
    ev = _failover_events(spark, store, p) if raw else None
    eps = _Episodes(_per_second(spark, store, p, ev).collect(), p)
    seconds = spark.createDataFrame(
        [(m, sec, eid, *eps.bounds[eid]) for m, sec, eid in eps.seconds],
        "mirror string, sec long, eid long, ep_lo long, ep_hi long, straddles boolean",
    )
    runs = None if raw else _read(spark, store, "failover_runs", "all", p)
    # The topic ID's two halves where every snapshot's runs have them: numbers hash faster.
    topic = ["topic_id_msb", "topic_id_lsb"] if not raw and store.has("failover_runs", 2) else ["topic_id"]
    if runs is not None and store.has("failover_runs", 3):
        counts = _run_counts(runs, seconds, topic)
    else:
        counts = _partition_counts(_per_partition(ev, runs, seconds, topic), topic)
    per_topic = counts.groupBy("eid", *topic).agg(
        *[F.sum(f"p{i}").alias(f"p{i}") for i in range(4)],
        F.sum("n3").alias("n3"), F.min("lo3").alias("lo3"), F.max("hi3").alias("hi3"), F.min("mo3").alias("mo3"),
    )  # fmt: skip
    per_episode = per_topic.groupBy("eid").agg(
        *[F.sum(f"p{i}").alias(f"p{i}") for i in range(4)],
        *[F.count(F.when(F.col(f"p{i}") > 0, 1)).alias(f"t{i}") for i in range(4)],
        F.sum("n3").alias("n3"), F.min("lo3").alias("lo3"), F.max("hi3").alias("hi3"), F.min("mo3").alias("mo3"),
    )  # fmt: skip
    # A few rows per episode: its events are put together here, the first three's figures from
    # the per-second rows, the last one's from the per-partition pass.
    rows = []
    for r in per_episode.collect():
        mirror, episode = eps.spans[r.eid][:2]
        for i, label in enumerate(_EVENTS):
            n, lo, hi, mo = eps.kinds.get((mirror, episode, i), (None,) * 4) if i < 3 else (r.n3, r.lo3, r.hi3, r.mo3)
            if r[f"p{i}"]:
                rows.append(_Event(mirror, episode, label, i, r[f"p{i}"], r[f"t{i}"], n, lo, hi, mo))
    return rows


EVENT_SCHEMA: Final = (
    "mirror string, episode long, event string, event_order int, partitions long, topics long, "
    "transitions long, first_ms long, last_ms long, first_metadata_offset long"
)
_Event: Final = Row(*(c.split()[0] for c in EVENT_SCHEMA.split(", ")))


def failover_timeline(spark: SparkSession, store: SnapshotStore, p: AuditParams) -> DataFrame:
    # A few hundred rows, already on the driver: put in order there, not by a window job
    # (twice, when the CLI collects a limit and then counts).
    return spark.createDataFrame(timeline_rows(failover_events(spark, store, p)), TIMELINE_SCHEMA)


TIMELINE_SCHEMA: Final = (
    "mirror string, episode int, event string, partitions long, topics long, transitions long, first_at string, "
    "last_at string, starts_after_s double, spread_s double, first_metadata_offset long, first_ms long, last_ms long"
)


def _iso_ms(ms: int) -> str:
    """As ``_ts``: epoch millis -> ISO-8601 UTC text with milliseconds."""
    t = _EPOCH + timedelta(milliseconds=ms)
    return f"{t:%Y-%m-%dT%H:%M:%S}.{ms % 1000:03d}Z"


_EPOCH: Final = datetime(1970, 1, 1, tzinfo=timezone.utc)


def timeline_rows(events: Sequence[Row]) -> list[tuple]:
    """``timeline_of`` on the driver: the timeline's rows (``TIMELINE_SCHEMA``) from one row
    per (mirror, episode, event)."""
    start: dict[tuple[str, int], int] = {}
    for e in events:
        k = (e.mirror, e.episode)
        start[k] = min(start.get(k, e.first_ms), e.first_ms)
    # Episodes of first starts only left no rows: renumber 1, 2, ... per mirror.
    episodes: dict[str, list[int]] = defaultdict(list)
    for m, ep in sorted(start):
        episodes[m].append(ep)
    number = {(m, ep): i + 1 for m, eps in episodes.items() for i, ep in enumerate(eps)}
    rows = [
        (e.mirror, number[(e.mirror, e.episode)], e.event, e.partitions, e.topics,
         e.transitions, _iso_ms(e.first_ms), _iso_ms(e.last_ms),
         round((e.first_ms - start[(e.mirror, e.episode)]) / 1000.0, 3), round((e.last_ms - e.first_ms) / 1000.0, 3),
         e.first_metadata_offset, e.first_ms, e.last_ms, e.event_order)
        for e in events
    ]  # fmt: skip
    rows.sort(key=lambda r: (r[0], r[1], r[6], r[13]))
    return [r[:13] for r in rows]


def timeline_of(agg: DataFrame) -> DataFrame:
    """The timeline's rows from one row per (mirror, episode, event)."""
    ep = Window.partitionBy("mirror", "episode")
    # Episodes of first starts only left no rows: renumber 1, 2, ... per mirror (few rows here).
    number = F.dense_rank().over(Window.partitionBy("mirror").orderBy("episode"))
    return (
        agg.withColumn("episode_start_ms", F.min("first_ms").over(ep))
        .withColumn("episode", number)
        .select(
            "mirror", "episode", "event", "partitions", "topics", "transitions",
            _ts("first_ms").alias("first_at"), _ts("last_ms").alias("last_at"),
            F.round((F.col("first_ms") - F.col("episode_start_ms")) / 1000.0, 3).alias("starts_after_s"),
            F.round((F.col("last_ms") - F.col("first_ms")) / 1000.0, 3).alias("spread_s"),
            "first_metadata_offset", "first_ms", "last_ms", "event_order",
        )  # fmt: skip
        .orderBy("mirror", "episode", "first_at", "event_order")
        .drop("event_order")
    )


def transition_counts(spark: SparkSession, store: SnapshotStore, p: AuditParams) -> DataFrame:
    if uses_rollups(store, p):
        counts = (
            _read(spark, store, "transition_seconds", "all", p)
            .groupBy("mirror", "from_state_name", "to_state_name")
            .agg(F.sum("transitions").alias("count"), F.min("first_ms").alias("first_ms"),
                 F.max("last_ms").alias("last_ms"))
        )  # fmt: skip
    else:
        counts = (
            _read(spark, store, "transitions", "all", p)
            .groupBy("mirror", "from_state_name", "to_state_name")
            .agg(F.count("*").alias("count"), F.min("at_ms").alias("first_ms"), F.max("at_ms").alias("last_ms"))
        )
    return (
        counts
        .select(
            "mirror", F.col("from_state_name").alias("from_state"), F.col("to_state_name").alias("to_state"),
            "count", _ts("first_ms").alias("first_at"), _ts("last_ms").alias("last_at"),
        )  # fmt: skip
        .orderBy("mirror", F.desc("count"), "from_state", "to_state")
    )


def config_drift(spark: SparkSession, store: SnapshotStore, p: AuditParams) -> DataFrame:
    d = _read(spark, store, "config_drift", "latest", p)
    return d.select(
        "mirror", "topic", "config_name", "drift", "source_value", "dest_value",
        _ts("observed_ms").alias("observed_at"), "snapshot_offset",
    ).orderBy("mirror", "topic", "config_name")  # fmt: skip


def acl_drift(spark: SparkSession, store: SnapshotStore, p: AuditParams) -> DataFrame:
    d = _read(spark, store, "acl_drift", "latest", p)
    return d.select(
        "mirror", "drift", "resource_type", "resource_name", "pattern_type", "principal", "host",
        "operation", "permission_type", _ts("observed_ms").alias("observed_at"), "snapshot_offset",
    ).orderBy("mirror", "drift", "resource_type", "resource_name", "principal", "operation")  # fmt: skip


QUERIES: Final[dict[str, Query]] = {
    q.name: q
    for q in (
        Query("dle_sle_violations", "violation",
              "DLE < SLE while the fetcher may append (MIRRORING, PAUSING), in any snapshot",
              dle_sle_violations, ("epochs",)),
        Query("stuck_partitions", "violation",
              "partitions in a transitional state longer than --stuck-after (latest snapshot)",
              stuck_partitions, ("partition_states",)),
        Query("synced_offsets_out_of_range", "violation",
              "group offset syncs outside [dest log start, dest LEO], in any snapshot",
              synced_offsets_out_of_range, ("group_syncs",)),
        Query("illegal_transitions", "violation",
              "transitions the mirror state machine does not allow", illegal_transitions, ("transitions",)),
        Query("lag_per_mirror", "info", "lag per mirror, per snapshot", lag_per_mirror, ("offsets", "topic_lag")),
        Query("lag_per_topic", "info", "lag per mirror and topic, per snapshot", lag_per_topic,
              ("offsets", "topic_lag")),
        Query("failover_timeline", "info", "failover and failback episodes of each mirror, by event",
              failover_timeline, ("transitions",)),
        Query("transition_counts", "info", "transitions by mirror and type", transition_counts, ("transitions",)),
        Query("impact_vs_outcome", "info", "partitions whose stop did otherwise than its prediction (issue #26)",
              impact_vs_outcome, ("failover_impacts",)),
        Query("config_drift", "drift", "config drift in the latest snapshot", config_drift, ("config_drift",)),
        Query("acl_drift", "drift", "ACL drift in the latest snapshot", acl_drift, ("acl_drift",)),
    )
}  # fmt: skip
VIOLATION_QUERIES: Final = tuple(n for n, q in QUERIES.items() if q.kind == "violation")


def fails_audit(query: Query, rows: int, strict: bool = False) -> bool:
    return rows > 0 and (query.kind == "violation" or (strict and query.kind == "drift"))
