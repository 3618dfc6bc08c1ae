"""The audit queries on real Spark: a clean history passes, hand-planted violations are caught."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import msgspec
import pytest
from pyspark.sql import SparkSession

from audit.export import export_snapshot
from audit.model import AuditSnapshot, GroupSyncRow, PartitionRow, TransitionRow
from audit.queries import FAILBACK_STARTED, FAILOVER_COMPLETED, FAILOVER_STARTED, QUERIES, AuditParams
from audit.run import run_query
from audit.spark import SnapshotStore
from coordinator.states import MirrorState as S

VIOLATIONS = [n for n, q in QUERIES.items() if q.kind == "violation"]


def rows(spark: SparkSession, root: Path, name: str, **params: object) -> list[dict[str, object]]:
    r = run_query(spark, SnapshotStore(root), name, AuditParams(**params))  # type: ignore[arg-type]
    assert r.row_count == len(r.rows)
    return r.rows


def _replace_partition(snap: AuditSnapshot, match: PartitionRow, **changes: object) -> AuditSnapshot:
    parts = [msgspec.structs.replace(p, **changes) if p is match else p for p in snap.partitions]
    return msgspec.structs.replace(snap, partitions=parts)


def _export_all(snaps: list[AuditSnapshot], root: Path) -> Path:
    for s in snaps:
        export_snapshot(s, root)
    return root


@pytest.mark.parametrize("name", VIOLATIONS)
def test_clean_history_passes(spark: SparkSession, sample_store: Path, name: str) -> None:
    assert rows(spark, sample_store, name) == []


def test_planted_violations_are_caught(spark: SparkSession, sample: list[AuditSnapshot], tmp_path: Path) -> None:
    last = sample[-1]
    mirroring = [p for p in last.partitions if p.state == S.MIRRORING]
    dle_victim, stuck_victim, fencing = mirroring[0], mirroring[1], mirroring[2]
    snap = _replace_partition(last, dle_victim, dest_leader_epoch=dle_victim.source_leader_epoch - 1)
    snap = _replace_partition(
        snap, next(p for p in snap.partitions if p.partition == stuck_victim.partition and p.topic == stuck_victim.topic),
        state=int(S.PREPARING), previous_state=int(S.STOPPED), state_entered_ms=last.taken_at_ms - 600_000,
        error_message="waiting for ISR truncation",
    )  # fmt: skip
    # EPOCH_FENCING with DLE < SLE is the repair in progress, not a violation
    snap = _replace_partition(
        snap, next(p for p in snap.partitions if p.partition == fencing.partition and p.topic == fencing.topic),
        state=int(S.EPOCH_FENCING), state_entered_ms=last.taken_at_ms - 1_000,
        dest_leader_epoch=fencing.source_leader_epoch - 2,
    )  # fmt: skip
    g0, g1 = snap.group_syncs[0], snap.group_syncs[1]
    syncs = [
        msgspec.structs.replace(g0, synced_offset=g0.dest_leo + 5),  # beyond the destination LEO
        msgspec.structs.replace(g1, dest_log_start=100, synced_offset=40),  # below its log start
        *snap.group_syncs[2:],
    ]
    snap = msgspec.structs.replace(snap, group_syncs=syncs)
    root = _export_all([*sample[:-1], snap], tmp_path)

    dle = rows(spark, root, "dle_sle_violations")
    assert [(r["mirror"], r["topic"], r["partition"]) for r in dle] == [
        (dle_victim.mirror, dle_victim.topic, dle_victim.partition)
    ]
    assert dle[0]["dest_leader_epoch"] == dle_victim.source_leader_epoch - 1 and dle[0]["max_epoch_gap"] == 1
    assert dle[0]["snapshots"] == 1 and dle[0]["last_snapshot_offset"] == last.metadata_offset

    stuck = rows(spark, root, "stuck_partitions")
    assert [(r["topic"], r["partition"], r["state"]) for r in stuck] == [
        (stuck_victim.topic, stuck_victim.partition, "PREPARING")
    ]
    assert stuck[0]["seconds_in_state"] == 600.0 and stuck[0]["previous_state"] == "STOPPED"
    assert rows(spark, root, "stuck_partitions", stuck_after_s=900.0) == []  # under a longer threshold

    bad = rows(spark, root, "synced_offsets_out_of_range")
    assert {(r["group_id"], r["topic"], r["partition"], r["problem"]) for r in bad} == {
        (g0.group_id, g0.topic, g0.partition, "above dest LEO"),
        (g1.group_id, g1.topic, g1.partition, "below dest log start"),
    }
    assert rows(spark, root, "illegal_transitions") == []


def test_a_violation_in_an_old_snapshot_is_still_reported(
    spark: SparkSession, sample: list[AuditSnapshot], tmp_path: Path
) -> None:
    """"Did any partition *ever* break DLE >= SLE?": fixed later does not mean it never happened."""
    old = sample[5]
    victim = next(p for p in old.partitions if p.state == S.MIRRORING)
    broken = _replace_partition(old, victim, source_leader_epoch=victim.dest_leader_epoch + 3)
    root = _export_all([*sample[:5], broken, *sample[6:]], tmp_path)
    [r] = rows(spark, root, "dle_sle_violations")
    assert (r["topic"], r["partition"], r["max_epoch_gap"]) == (victim.topic, victim.partition, 3)
    assert r["first_snapshot_offset"] == r["last_snapshot_offset"] == old.metadata_offset
    assert rows(spark, root, "dle_sle_violations", mirrors=("c-to-b",) if victim.mirror == "a-to-b" else ("a-to-b",)) == []


def test_illegal_transition_is_caught(spark: SparkSession, sample: list[AuditSnapshot], tmp_path: Path) -> None:
    last = sample[-1]
    p = last.partitions[0]
    bad = TransitionRow(mirror=p.mirror, topic=p.topic, topic_id=p.topic_id, partition=p.partition,
                        from_state=int(S.STOPPED), to_state=int(S.MIRRORING), at_ms=last.taken_at_ms - 10,
                        metadata_offset=last.metadata_offset, reason="skipped log alignment")  # fmt: skip
    root = _export_all([msgspec.structs.replace(last, transitions=[*last.transitions, bad])], tmp_path)
    [r] = rows(spark, root, "illegal_transitions")
    assert (r["from_state"], r["to_state"], r["topic"], r["count"]) == ("STOPPED", "MIRRORING", p.topic, 1)


def test_transition_counts_match_the_history(spark: SparkSession, sample: list[AuditSnapshot], sample_store: Path) -> None:
    expected = Counter((t.mirror, S(t.from_state).name, S(t.to_state).name) for t in sample[-1].transitions)
    got = {(r["mirror"], r["from_state"], r["to_state"]): r["count"] for r in rows(spark, sample_store, "transition_counts")}
    assert got == dict(expected)


def test_lag_per_mirror_over_time(spark: SparkSession, sample: list[AuditSnapshot], sample_store: Path) -> None:
    expected: dict[tuple[str, int], int] = defaultdict(int)
    for s in sample:
        for p in s.partitions:
            expected[(p.mirror, s.taken_at_ms)] += p.effective_lag()
    got = rows(spark, sample_store, "lag_per_mirror")
    assert len(got) == len(expected) == 2 * len(sample)
    assert {(r["mirror"], r["snapshot_offset"], r["total_lag"]) for r in got} == {
        (m, next(s.metadata_offset for s in sample if s.taken_at_ms == t), v) for (m, t), v in expected.items()
    }
    per_topic = rows(spark, sample_store, "lag_per_topic", mirrors=("c-to-b",))
    assert {r["topic"] for r in per_topic} == {"payments", "refunds"}


def test_failover_timeline(spark: SparkSession, sample: list[AuditSnapshot], sample_store: Path) -> None:
    history = sample[-1].transitions
    stopping = [t for t in history if t.to_state == S.STOPPING]
    stopped = [t for t in history if t.to_state == S.STOPPED]
    failback = [t for t in history if t.from_state == S.STOPPED and t.to_state == S.PREPARING]
    assert stopping and failback  # the sample does fail over and back

    got = rows(spark, sample_store, "failover_timeline")
    by_event = {(r["mirror"], r["episode"], r["event"]): r for r in got}
    fo = by_event[("a-to-b", 1, FAILOVER_STARTED)]
    assert fo["partitions"] == len({(t.topic_id, t.partition) for t in stopping})
    assert fo["first_ms"] == min(t.at_ms for t in stopping) and fo["last_ms"] == max(t.at_ms for t in stopping)
    assert by_event[("a-to-b", 1, FAILOVER_COMPLETED)]["last_ms"] == max(t.at_ms for t in stopped)
    fb = by_event[("a-to-b", 2, FAILBACK_STARTED)]  # 8 minutes later: a new episode
    assert fb["partitions"] == len(failback) and fb["starts_after_s"] == 0.0
    done = [r for r in got if r["event"] == "failback completed"]
    assert [r["partitions"] for r in done] == [len(failback)]  # first starts are not failbacks
    assert {r["mirror"] for r in got} == {"a-to-b"}
    # one long episode when the gap allows it
    merged = rows(spark, sample_store, "failover_timeline", episode_gap_s=3600.0)
    assert {r["episode"] for r in merged} == {1}


def test_drift_queries_show_latest_drift(spark: SparkSession, sample: list[AuditSnapshot], sample_store: Path) -> None:
    [c] = rows(spark, sample_store, "config_drift")
    d = sample[-1].config_drift[0]
    assert (c["topic"], c["config_name"], c["source_value"], c["dest_value"], c["drift"]) == (
        d.topic, d.config_name, d.source_value, d.dest_value, "different",
    )  # fmt: skip
    [a] = rows(spark, sample_store, "acl_drift")
    assert (a["principal"], a["operation"], a["drift"]) == ("User:reporting", "READ", "missing")


def test_group_sync_row_seen_in_many_snapshots_is_reported_once(spark: SparkSession, tmp_path: Path) -> None:
    sync = GroupSyncRow(mirror="m", group_id="g", group_type="consumer", topic="t",
                        topic_id="00000000-0000-0000-0000-000000000009", partition=0, source_committed=500,
                        synced_offset=90, dest_log_start=0, dest_leo=80, synced_at_ms=1_000)  # fmt: skip
    for i in range(3):
        export_snapshot(AuditSnapshot(metadata_offset=10, taken_at_ms=2_000 + i, group_syncs=[sync]), tmp_path)
    [r] = rows(spark, tmp_path, "synced_offsets_out_of_range")
    assert r["problem"] == "above dest LEO" and r["first_snapshot_offset"] == 10
