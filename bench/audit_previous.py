"""The audit's previous failover_timeline, kept for ``bench/audit.py`` to run side by side with the
current one in the same Spark session (the issue asks for before/after in one run).

As it was before the per-second table: one hash aggregate per (episode, partition) with every
event's count, first, last and metadata offset (16 aggregates), exploded and counted again with
a countDistinct of topics. ``previous_run`` is the old ``audit.run.run_query`` path too: rows up
to the limit, then a count that computes the query a second time.
"""

from __future__ import annotations

from typing import Final

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from audit.queries import (
    FAILBACK_COMPLETED,
    FAILBACK_STARTED,
    FAILOVER_COMPLETED,
    FAILOVER_STARTED,
    AuditParams,
    _read,
    timeline_of,
)
from audit.spark import SnapshotStore
from coordinator.states import MirrorState


def previous_run(spark: SparkSession, store: SnapshotStore, params: AuditParams, limit: int) -> int:
    df = failover_timeline(spark, store, params)
    collected = df.limit(limit + 1).collect()
    return len(collected) if len(collected) <= limit else df.count()


_EVENTS: Final = (  # (label, kind column value): the order a failover and failback run in
    (FAILOVER_STARTED, "fo_start"),
    (FAILOVER_COMPLETED, "fo_done"),
    (FAILBACK_STARTED, "fb_start"),
    (FAILBACK_COMPLETED, "pm"),
)


def failover_partitions(spark: SparkSession, store: SnapshotStore, p: AuditParams) -> DataFrame:
    """One row per (mirror, episode, topic ID, partition, event) of the failovers and failbacks.

    Kinds of transition: ``fo_start`` (-> STOPPING), ``fo_done`` (STOPPING -> STOPPED),
    ``fb_start`` (STOPPED -> PREPARING) and ``pm`` (PREPARING -> MIRRORING). An *episode* is
    a run of them in one mirror with no gap longer than ``episode_gap_s``; episodes holding
    only ``pm`` (first starts) are dropped. A partition's failback *completed* in an episode
    when it has a PREPARING -> MIRRORING after its STOPPED -> PREPARING there.

    Built without a window over events, which would sort every transition of a mirror or a
    partition: episodes are numbered on the distinct seconds that hold events (exact for gaps
    of a second or more), then a hash aggregate per (episode, partition) finds each event.
    """
    S = MirrorState
    frm, to = F.col("from_state"), F.col("to_state")
    kind = (
        F.when((to == S.STOPPING) & (frm != S.STOPPING), F.lit("fo_start"))
        .when((frm == S.STOPPING) & (to == S.STOPPED), F.lit("fo_done"))
        .when((frm == S.STOPPED) & (to == S.PREPARING), F.lit("fb_start"))
        .when((frm == S.PREPARING) & (to == S.MIRRORING), F.lit("pm"))
    )
    ev = (
        _read(spark, store, "transitions", "all", p)
        .select("mirror", "topic_id", "partition", "at_ms", "metadata_offset", kind.alias("kind"))
        .where(F.col("kind").isNotNull())
        .withColumn("sec", F.floor(F.col("at_ms") / 1000))
    )
    secs = ev.groupBy("mirror", "sec").agg(F.min("at_ms").alias("lo"), F.max("at_ms").alias("hi"))
    per_mirror = Window.partitionBy("mirror").orderBy("sec")
    prev_hi = F.lag("hi").over(per_mirror)
    gap_ms = max(int(p.episode_gap_s * 1000), 1000)
    starts = F.when(prev_hi.isNull() | (F.col("lo") - prev_hi > gap_ms), 1).otherwise(0)
    running = per_mirror.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    episodes = secs.withColumn("_s", starts).withColumn("episode", F.sum("_s").over(running)).drop("_s", "lo", "hi")

    def when_kind(k: str, c: str) -> Column:
        return F.when(F.col("kind") == k, F.col(c))

    aggs = []
    for _, k in _EVENTS:
        aggs += [
            F.count(when_kind(k, "at_ms")).alias(f"n_{k}"),
            F.min(when_kind(k, "at_ms")).alias(f"lo_{k}"),
            F.max(when_kind(k, "at_ms")).alias(f"hi_{k}"),
            F.min(when_kind(k, "metadata_offset")).alias(f"mo_{k}"),
        ]
    # Broadcast: the seconds table is small, and a planned sort-merge join would shuffle every
    # event. The key has topic_id and not the topic name: one string less to hash per event.
    pp = (
        ev.join(F.broadcast(episodes), ["mirror", "sec"])
        .groupBy("mirror", "episode", "topic_id", "partition")
        .agg(*aggs)
    )
    fb_done = (F.col("n_fb_start") > 0) & (F.col("hi_pm") > F.col("lo_fb_start"))
    events = F.array(
        *[
            F.struct(
                F.lit(label).alias("event"),
                F.lit(i).alias("event_order"),
                (fb_done if k == "pm" else F.col(f"n_{k}") > 0).alias("happened"),
                F.col(f"n_{k}").alias("n"),
                F.col(f"lo_{k}").alias("lo"),
                F.col(f"hi_{k}").alias("hi"),
                F.col(f"mo_{k}").alias("mo"),
            )
            for i, (label, k) in enumerate(_EVENTS)
        ]
    )
    return (
        pp.select("mirror", "episode", "topic_id", "partition", F.explode(events).alias("e"))
        .where(F.col("e.happened"))
        .select("mirror", "episode", "topic_id", "partition", "e.event", "e.event_order", "e.n",
                F.col("e.lo").alias("first_ms"), F.col("e.hi").alias("last_ms"), F.col("e.mo").alias("metadata_offset"))
    )  # fmt: skip


def failover_timeline(spark: SparkSession, store: SnapshotStore, p: AuditParams) -> DataFrame:
    agg = (
        failover_partitions(spark, store, p)
        .groupBy("mirror", "episode", "event", "event_order")
        .agg(
            F.count("*").alias("partitions"),
            F.countDistinct("topic_id").alias("topics"),
            F.sum("n").alias("transitions"),
            F.min("first_ms").alias("first_ms"),
            F.max("last_ms").alias("last_ms"),
            F.min("metadata_offset").alias("first_metadata_offset"),
        )
    )
    return timeline_of(agg)
