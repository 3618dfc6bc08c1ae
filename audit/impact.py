"""The ``impact_vs_outcome`` query (issue #26): a stop's prediction against what it did.

The ``failover_impacts`` table holds, per mirror partition, its latest stop as ``__mirror_state``
keeps it: the prediction the controller appended to the metadata log with the stop, and the
outcome the worker recorded when the partition reached STOPPED.
"""

from __future__ import annotations

from typing import Protocol

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from audit.spark import SnapshotStore

class _Params(Protocol):  # audit.queries.AuditParams (which imports this module)
    mirrors: tuple[str, ...]


def impact_vs_outcome(spark: SparkSession, store: SnapshotStore, p: _Params) -> DataFrame:
    """The partitions whose completed stop differs from its prediction: the records lost, the
    stop offset (the destination's LEO when predicted), the transactions aborted, or where the
    groups resume. Unknown figures (-1) are not compared; neither is a missing prediction."""
    f = store.read(spark, "failover_impacts", "latest")
    if p.mirrors:
        f = f.where(F.col("mirror").isin(list(p.mirrors)))
    f = f.where(F.col("completed") & F.col("missing_reason").isNull())

    def known_differ(a: str, b: str) -> Column:
        return (F.col(a) >= 0) & (F.col(b) >= 0) & (F.col(a) != F.col(b))

    checks = [
        F.when(known_differ("predicted_lost_records", "lost_records"), F.lit("lost_records")),
        F.when(known_differ("predicted_end_offset", "stop_offset"), F.lit("stop_offset")),
        F.when(F.col("predicted_aborts") != F.col("aborts"), F.lit("aborts")),
        F.when((F.col("synced_groups") != "") & (F.col("predicted_groups") != F.col("synced_groups")), F.lit("groups")),
    ]
    completed_at = F.date_format(F.timestamp_millis(F.col("completed_at_ms")), "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'")
    return (
        f.withColumn("differs", F.concat_ws(",", *checks))
        .where(F.col("differs") != "")
        .select("mirror", "topic", "partition", "differs", "predicted_lost_records", "lost_records",
                "predicted_end_offset", "stop_offset", "predicted_aborts", "aborts", "predicted_groups",
                "synced_groups", "metadata_offset", completed_at.alias("completed_at"), "topic_id")
        .orderBy("mirror", "topic", "partition")
    )  # fmt: skip
