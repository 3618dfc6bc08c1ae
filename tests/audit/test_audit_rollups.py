"""The export's rollups (audit.rollup): the queries that read them answer exactly what the raw
transitions answer, on histories built to break them (runs cut by snapshots, failovers of one
partition within one episode, seconds shared by two snapshots, illegal transitions)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from audit.export import export_snapshot
from audit.layout import MANIFEST_DIR
from audit.model import AuditSnapshot, PartitionRow, TransitionRow
from audit.queries import EVENT_SCHEMA, TIMELINE_SCHEMA, AuditParams, timeline_of, timeline_rows
from audit.report import _episodes, _lag_series, _state_counts
from audit.rollup import RUN_GAP_MS, failover_runs
from audit.run import run_query
from audit.spark import SnapshotStore
from coordinator.states import MirrorState as S

ROLLED_UP = ("failover_timeline", "transition_counts", "illegal_transitions")
T0 = 1_767_225_600_000


def _tr(mirror: str, topic: int, partition: int, frm: S, to: S, at_ms: int, offset: int) -> TransitionRow:
    # Topics 0 and 1 share the ID's low half, 0 and 2 its high half: a key of one half fails.
    tid = f"{topic % 2:08d}-0000-0000-0000-{topic // 2:012d}"
    return TransitionRow(mirror=mirror, topic=f"t{topic}", topic_id=tid,
                         partition=partition, from_state=int(frm), to_state=int(to), at_ms=at_ms,
                         metadata_offset=offset)  # fmt: skip


def _history(seed: int) -> list[TransitionRow]:
    """Partitions cycling through failovers and failbacks at random pace: steps from 0.3 s to
    15 minutes apart, so runs split inside episodes and episodes merge; a few illegal jumps."""
    rng = random.Random(seed)
    cycle = [(S.MIRRORING, S.STOPPING), (S.STOPPING, S.STOPPED), (S.STOPPED, S.PREPARING), (S.PREPARING, S.MIRRORING),
             (S.MIRRORING, S.PAUSING), (S.PAUSING, S.PAUSED), (S.PAUSED, S.MIRRORING)]  # fmt: skip
    out: list[TransitionRow] = []
    for mirror in ("a-to-b", "c-to-b"):
        for topic in range(3):
            for partition in range(3):
                at = T0 + rng.randrange(0, 5_000)
                out.append(_tr(mirror, topic, partition, S.UNKNOWN, S.PREPARING, at, 0))
                out.append(_tr(mirror, topic, partition, S.PREPARING, S.MIRRORING, at + 1_000, 0))
                state = S.MIRRORING
                for _ in range(rng.randrange(10, 25)):
                    at += rng.choice([300, 2_000, 30_000, 59_000, 61_000, 120_000, 400_000, 900_000])
                    if rng.random() < 0.05:
                        jump = S.PREPARING if state is S.STOPPING else S.MIRRORING
                        out.append(_tr(mirror, topic, partition, state, jump, at, 0))
                        continue  # illegal, and the state stays as it was for the next step
                    frm, to = next((f, t) for f, t in cycle if f is state) if rng.random() < 0.8 else (state, S.STOPPING)
                    if frm is not state:
                        continue
                    out.append(_tr(mirror, topic, partition, frm, to, at, 0))
                    state = to
    out.sort(key=lambda t: t.at_ms)
    return [TransitionRow(**{**{f: getattr(t, f) for f in t.__struct_fields__}, "metadata_offset": 10 + i})
            for i, t in enumerate(out)]  # fmt: skip


def _export(history: list[TransitionRow], cuts: int, root: Path) -> Path:
    """In ``cuts`` snapshots, each cut at a random point (may split a second or a run)."""
    rng = random.Random(len(history))
    ends = sorted(rng.sample(range(1, len(history)), cuts - 1)) + [len(history)]
    for end in ends:
        last = history[end - 1]
        now = {(t.mirror, t.topic, t.topic_id, t.partition): t.to_state for t in history[:end]}
        partitions = [PartitionRow(mirror=m, topic=t, topic_id=i, partition=p, state=s) for (m, t, i, p), s in now.items()]
        export_snapshot(AuditSnapshot(metadata_offset=last.metadata_offset, taken_at_ms=last.at_ms + 1,
                                      partitions=partitions, transitions=history[:end]), root)  # fmt: skip
    return root


def _both(spark: SparkSession, root: Path, name: str, **params: object) -> tuple[list[dict], list[dict]]:
    store = SnapshotStore(root)
    assert store.has("failover_runs") and store.has("transition_seconds") and store.has("topic_lag")
    fast = run_query(spark, store, name, AuditParams(**params))  # type: ignore[arg-type]
    raw = run_query(spark, store, name, AuditParams(rollups=False, **params))  # type: ignore[arg-type]
    return fast.rows, raw.rows


def test_rollups_answer_as_the_raw_history(spark: SparkSession, tmp_path: Path) -> None:
    root = _export(_history(1), 5, tmp_path)
    for gap_s in (90.0, 300.0):  # just above the run gap (runs split inside episodes), and the default
        fast, raw = _both(spark, root, "failover_timeline", episode_gap_s=gap_s)
        assert fast == raw, gap_s
        assert {r["event"] for r in fast} == {"failover started", "failover completed", "failback started",
                                              "failback completed"}  # fmt: skip
    fast, raw = _both(spark, root, "transition_counts")
    assert fast == raw and sum(r["count"] for r in fast) == len(_history(1))
    fast, raw = _both(spark, root, "illegal_transitions")
    assert fast == raw and fast  # the history does hold illegal transitions, and both paths find them


def test_report_state_counts_from_the_rollup_as_from_the_raw_history(spark: SparkSession, tmp_path: Path) -> None:
    root = _export(_history(2), 4, tmp_path)
    store = SnapshotStore(root)
    episodes = _episodes(run_query(spark, store, "failover_timeline", AuditParams()).rows, per_mirror=100)
    fast = _state_counts(spark, store, episodes, AuditParams())
    raw = _state_counts(spark, store, episodes, AuditParams(rollups=False))
    assert fast == raw
    for e in episodes:  # every episode's chart moves: partitions change state in its window
        assert any(len({y for _, y in pts}) > 1 for pts in fast[0][e["id"]].values()), e["episode"]


def test_illegal_transitions_reads_only_the_files_that_hold_them(spark: SparkSession, tmp_path: Path) -> None:
    ok = [_tr("a-to-b", 0, 0, S.UNKNOWN, S.PREPARING, T0, 10), _tr("c-to-b", 1, 0, S.UNKNOWN, S.PREPARING, T0, 11)]
    bad = _tr("c-to-b", 1, 0, S.PREPARING, S.STOPPED, T0 + 5_000, 12)
    export_snapshot(AuditSnapshot(metadata_offset=11, taken_at_ms=T0 + 1, transitions=ok), tmp_path)
    export_snapshot(AuditSnapshot(metadata_offset=12, taken_at_ms=T0 + 6_000, transitions=[*ok, bad]), tmp_path)
    fast, raw = _both(spark, tmp_path, "illegal_transitions")
    assert fast == raw and [(r["mirror"], r["from_state"], r["to_state"]) for r in fast] == [
        ("c-to-b", "PREPARING", "STOPPED")
    ]
    store = SnapshotStore(tmp_path)
    assert store.files("transitions", "all", {("c-to-b", 12, T0 + 6_000)}) == [
        str(tmp_path / f.path) for f in store.latest.files("transitions")
    ]


def test_a_store_exported_before_the_rollups_is_read_raw(spark: SparkSession, tmp_path: Path) -> None:
    root = _export(_history(3), 3, tmp_path)
    expected = {n: run_query(spark, SnapshotStore(root), n, AuditParams()).rows for n in ROLLED_UP}
    first = sorted((root / MANIFEST_DIR).glob("snapshot-*.json"))[0]
    body = json.loads(first.read_text())
    for t in ("failover_runs", "transition_seconds"):
        del body["tables"][t]  # as an older exporter wrote it
    first.write_text(json.dumps(body))
    store = SnapshotStore(root)
    assert not store.has("failover_runs")
    assert {n: run_query(spark, store, n, AuditParams()).rows for n in ROLLED_UP} == expected


def test_failover_runs_split_at_the_run_gap() -> None:
    p = dict(mirror="m", topic=0, partition=0)
    rows = [
        _tr(**p, frm=S.MIRRORING, to=S.STOPPING, at_ms=T0, offset=1),  # type: ignore[arg-type]
        _tr(**p, frm=S.STOPPING, to=S.STOPPED, at_ms=T0 + RUN_GAP_MS, offset=2),  # type: ignore[arg-type]
        _tr(**p, frm=S.STOPPED, to=S.PREPARING, at_ms=T0 + RUN_GAP_MS + 1, offset=3),  # type: ignore[arg-type]
        _tr(**p, frm=S.PREPARING, to=S.MIRRORING, at_ms=T0 + 2 * RUN_GAP_MS + 2, offset=4),  # type: ignore[arg-type]
        _tr(**p, frm=S.MIRRORING, to=S.PAUSING, at_ms=T0 + 2 * RUN_GAP_MS + 3, offset=5),  # type: ignore[arg-type]
        _tr(mirror="m", topic=0, partition=1, frm=S.PREPARING, to=S.MIRRORING, at_ms=T0 + 5, offset=6),
    ]
    cols = {f: [getattr(r, f) for r in rows] for f in rows[0].__struct_fields__}
    cols["from_state"] = pa.array(cols["from_state"], pa.int8())  # type: ignore[assignment]
    cols["to_state"] = pa.array(cols["to_state"], pa.int8())  # type: ignore[assignment]
    runs = failover_runs(pa.table(cols)).to_pylist()
    assert [(r["partition"], r["first_ms"] - T0, r["last_ms"] - T0, r["stopping"], r["stopped"], r["pm_count"])
            for r in runs] == [  # the pause is no failover event; partition 1's first start is one
        (0, 0, RUN_GAP_MS + 1, True, True, 0),
        (0, 2 * RUN_GAP_MS + 2, 2 * RUN_GAP_MS + 2, False, False, 1),
        (1, 5, 5, False, False, 1),
    ]  # fmt: skip
    assert runs[0]["failback_ms"] == T0 + RUN_GAP_MS + 1 and runs[0]["pm_first_ms"] is None
    assert runs[1]["pm_first_metadata_offset"] == 4 and runs[1]["failback_ms"] is None
    # Each run says its partition's run before and after it in the snapshot; partition 1 has none.
    assert [(r["prev_last_ms"], r["next_first_ms"]) for r in runs] == [
        (None, T0 + 2 * RUN_GAP_MS + 2), (T0 + RUN_GAP_MS + 1, None), (None, None)
    ]


def test_runs_key_the_topic_by_its_uuid_halves_and_older_runs_by_the_topic_id(spark: SparkSession, tmp_path: Path) -> None:
    root = _export(_history(4), 3, tmp_path)
    store = SnapshotStore(root)
    assert store.has("failover_runs", 2)
    expected = run_query(spark, store, "failover_timeline", AuditParams()).rows
    assert expected and expected == run_query(spark, store, "failover_timeline", AuditParams(rollups=False)).rows
    # The first snapshot as the exporter before version 2 wrote it: no halves, no version.
    first = sorted((root / MANIFEST_DIR).glob("snapshot-*.json"))[0]
    body = json.loads(first.read_text())
    entry = body["tables"]["failover_runs"]
    del entry["version"]
    for f in entry["files"]:
        path = root / f["path"]
        pq.write_table(pq.read_table(path).drop_columns(["topic_id_msb", "topic_id_lsb"]), path)
    first.write_text(json.dumps(body))
    store = SnapshotStore(root)
    assert store.has("failover_runs") and not store.has("failover_runs", 2)
    assert run_query(spark, store, "failover_timeline", AuditParams()).rows == expected


def test_runs_without_their_neighbours_are_merged_per_partition(spark: SparkSession, tmp_path: Path) -> None:
    root = _export(_history(7), 4, tmp_path)
    store = SnapshotStore(root)
    assert store.has("failover_runs", 3)
    gaps = (90.0, 300.0)
    expected = [run_query(spark, store, "failover_timeline", AuditParams(episode_gap_s=g)).rows for g in gaps]
    assert expected == [run_query(spark, store, "failover_timeline", AuditParams(rollups=False, episode_gap_s=g)).rows
                        for g in gaps]  # fmt: skip
    # The snapshots but the last as the exporter before version 3 wrote them: no neighbours.
    for manifest in sorted((root / MANIFEST_DIR).glob("snapshot-*.json"))[:-1]:
        body = json.loads(manifest.read_text())
        entry = body["tables"]["failover_runs"]
        entry["version"] = 2
        for f in entry["files"]:
            path = root / f["path"]
            pq.write_table(pq.read_table(path).drop_columns(["prev_last_ms", "next_first_ms"]), path)
        manifest.write_text(json.dumps(body))
    store = SnapshotStore(root)
    assert store.has("failover_runs", 2) and not store.has("failover_runs", 3)
    assert [run_query(spark, store, "failover_timeline", AuditParams(episode_gap_s=g)).rows for g in gaps] == expected


def test_the_timeline_put_in_order_on_the_driver_as_by_spark(spark: SparkSession) -> None:
    rng = random.Random(8)
    events = [
        (mirror, episode, f"event {i}", i, rng.randrange(1, 9), rng.randrange(1, 4), rng.randrange(1, 99), lo,
         lo + rng.choice([0, 1, 5, 999, 1_005, 61_234]), rng.randrange(0, 10**6))
        for mirror in ("b-to-a", "a-to-b", "é-to-b")
        for episode in rng.sample(range(1, 40), 5)  # numbers with gaps: the timeline renumbers them
        for i in range(4) if rng.random() < 0.8
        for lo in [T0 + episode * 3_600_000 + rng.choice([0, 1, 5, 999]) + i * rng.choice([0, 0, 61_005, 90_001])]
    ]  # fmt: skip
    rng.shuffle(events)  # and events of one episode that start together: ordered by event
    df = spark.createDataFrame(events, EVENT_SCHEMA)
    by_spark = timeline_of(df)
    on_driver = spark.createDataFrame(timeline_rows(df.collect()), TIMELINE_SCHEMA)
    assert [(f.name, f.dataType) for f in on_driver.schema] == [(f.name, f.dataType) for f in by_spark.schema]
    assert on_driver.collect() == by_spark.collect()


def test_topic_id_halves_are_kafkas_uuid_bits_or_none(spark: SparkSession, tmp_path: Path) -> None:
    def runs(topic_id: str) -> pa.Table:
        t = TransitionRow(mirror="m", topic="t", topic_id=topic_id, partition=0, from_state=int(S.MIRRORING),
                          to_state=int(S.STOPPING), at_ms=T0, metadata_offset=1)  # fmt: skip
        return pa.table({f: pa.array([getattr(t, f)], pa.int8() if f.endswith("_state") else None)
                         for f in t.__struct_fields__})  # fmt: skip

    # Kafka's Uuid: getMostSignificantBits / getLeastSignificantBits, as signed longs.
    [r] = failover_runs(runs("ffffffff-ffff-ffff-8000-000000000001")).to_pylist()
    assert (r["topic_id_msb"], r["topic_id_lsb"]) == (-1, -(2**63) + 1)
    [r] = failover_runs(runs("00000000-0000-0001-0000-000000000002")).to_pylist()
    assert (r["topic_id_msb"], r["topic_id_lsb"]) == (1, 2)
    [r] = failover_runs(runs("not-a-uuid")).to_pylist()
    assert (r["topic_id_msb"], r["topic_id_lsb"]) == (None, None)
    # A snapshot whose runs miss the halves says version 1, and is read by the topic ID string.
    rows = [_tr("m", 0, 0, S.MIRRORING, S.STOPPING, T0, 1), _tr("m", 0, 0, S.STOPPING, S.STOPPED, T0 + 1_000, 2)]
    rows.append(TransitionRow(**{**{f: getattr(rows[0], f) for f in rows[0].__struct_fields__}, "topic_id": "x"}))
    res = export_snapshot(AuditSnapshot(metadata_offset=2, taken_at_ms=T0 + 2_000, transitions=rows), tmp_path)
    assert res.manifest.tables["failover_runs"].version == 1
    fast, raw = _both(spark, tmp_path, "failover_timeline")
    assert fast == raw and [(r["event"], r["partitions"], r["topics"]) for r in fast] == [
        ("failover started", 2, 2), ("failover completed", 1, 1)
    ]


def _lag_store(root: Path, seed: int) -> Path:
    """Snapshots of partitions whose lag varies: zeros, topics with none lagging, a topic that
    appears late, partitions that leave; two mirrors share topic names."""
    rng = random.Random(seed)
    for i in range(4):
        parts = [
            PartitionRow(mirror=m, topic=f"t{t}", topic_id=f"{t:08d}-0000-0000-0000-000000000000", partition=p,
                         state=int(S.MIRRORING), lag=rng.choice([0, 0, 1, rng.randrange(2, 5_000)]) if t else 0)
            for m in ("a-to-b", "c-to-b") for t in range(4 if i else 3) for p in range(rng.randrange(1, 6))
        ]  # fmt: skip
        export_snapshot(AuditSnapshot(metadata_offset=10 + i, taken_at_ms=T0 + i * 60_000, partitions=parts), root)
    return root


def test_lag_from_the_topic_rollup_as_from_the_offsets(spark: SparkSession, tmp_path: Path) -> None:
    root = _lag_store(tmp_path, 5)
    store = SnapshotStore(root)
    assert store.has("topic_lag")
    got = {}
    for name in ("lag_per_mirror", "lag_per_topic"):
        fast, raw = _both(spark, root, name)
        assert fast == raw, name
        got[name] = fast
    assert {r["lagging_partitions"] > 0 for r in got["lag_per_topic"]} == {True, False}
    assert len({r["max_lag"] for r in got["lag_per_mirror"]}) > 1
    # The report's lag charts come from lag_per_topic's rows: the same from either.
    series = _lag_series(got["lag_per_topic"])
    assert sorted(series) == ["a-to-b", "c-to-b"] and all(len(s[0].points) == 4 for s in series.values())
    # A store whose first snapshot predates topic_lag reads the offsets, with the same rows.
    first = sorted((root / MANIFEST_DIR).glob("snapshot-*.json"))[0]
    body = json.loads(first.read_text())
    del body["tables"]["topic_lag"]
    first.write_text(json.dumps(body))
    store = SnapshotStore(root)
    assert not store.has("topic_lag") and store.has("failover_runs")
    assert {n: run_query(spark, store, n, AuditParams()).rows for n in got} == got
