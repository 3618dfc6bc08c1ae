"""The ``failover_impacts`` table and ``impact_vs_outcome`` (issue #26): impact values as the
worker writes them to ``__mirror_state``, folded as the timed export reads that topic, exported,
then queried on real Spark. The one stop planted to differ from its prediction is listed, and
only it: a stop that did what was predicted, one without a prediction and one under way are not."""

from __future__ import annotations

import uuid
from pathlib import Path

from pyspark.sql import SparkSession

from audit.export import export_snapshot
from audit.model import AuditSnapshot
from audit.queries import AuditParams
from audit.run import run_query
from audit.spark import SnapshotStore
from coordinator.impact_record import (
    PartitionPrediction,
    PredictedAbort,
    PredictedGroup,
    StopOutcome,
    SyncedGroup,
    TopicPrediction,
    differences,
    impact_value,
)
from records.registry import default_schemas
from streams.state.mirror_state_codec import default_codec
from streams.worker.audit_export import ChangelogFold, impact_row

TOPIC = uuid.UUID(int=7)


def _prediction() -> TopicPrediction:
    parts = tuple(PartitionPrediction(p, 100 + p, 105 + p, 5, 40, (PredictedAbort(9, 0, 90 + p, 3),),
                                      (PredictedGroup("app", "consumer", 104 + p, 100 + p, 4),)) for p in range(3))  # fmt: skip
    return TopicPrediction(TOPIC, "m", 17, 1_000, partitions=parts)


def test_export_writes_the_table_and_the_query_lists_only_the_stop_that_differs(spark: SparkSession, tmp_path: Path) -> None:
    s, codec, pred = default_schemas(), default_codec(), _prediction()

    def as_predicted(p: int, **changes: object) -> StopOutcome:
        fields = dict(stop_offset=100 + p, aborts=(PredictedAbort(9, 0, 90 + p),),
                      synced_groups=(SyncedGroup("app", 100 + p),), lost_records=5, completed_at_ms=2_000)  # fmt: skip
        return StopOutcome(**{**fields, **changes})  # type: ignore[arg-type]

    values = {
        0: impact_value(s, pred, 0, as_predicted(0)),
        1: impact_value(s, pred, 1, as_predicted(1, aborts=(), lost_records=9)),  # planted: it differs
        2: impact_value(s, pred, 2, as_predicted(2, completed_at_ms=None, aborts=())),  # under way: not compared yet
        3: impact_value(s, None, 3, as_predicted(3, lost_records=8)),  # no prediction: nothing to compare
    }
    assert [p for p, v in values.items() if differences(v)] == [1]
    fold = ChangelogFold()
    for offset, (p, v) in enumerate(values.items()):
        fold.apply(0, offset, codec.impact_key("m", TOPIC, p), codec.encode_value(v))
    rows = [impact_row(k, "orders", v) for k, v in sorted(fold.impacts.items(), key=lambda kv: kv[0][2])]
    assert fold.states == {} and len(rows) == 4  # an impact is no state
    export_snapshot(AuditSnapshot(metadata_offset=20, taken_at_ms=3_000, failover_impacts=rows), tmp_path)

    store = SnapshotStore(tmp_path)
    table = store.read(spark, "failover_impacts", "latest").orderBy("partition").collect()
    assert [(r.partition, r.metadata_offset, r.completed, r.aborts, r.synced_groups) for r in table] == [
        (0, 17, True, "9@90", "app=100"), (1, 17, True, "", "app=101"), (2, 17, False, "", "app=102"),
        (3, -1, True, "9@93", "app=103")]  # fmt: skip
    assert table[3].missing_reason and table[1].predicted_aborts == "9@91" and table[1].predicted_lost_records == 5

    r = run_query(spark, store, "impact_vs_outcome", AuditParams())
    assert [(x["topic"], x["partition"], x["differs"], x["lost_records"]) for x in r.rows] == [
        ("orders", 1, "lost_records,aborts", 9)]
