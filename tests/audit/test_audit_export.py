"""Export round trip, hive layout, manifests, incremental transitions, snapshot isolation."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import msgspec
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from audit import layout
from audit.export import ExportError, ExportRaceError, export_snapshot, export_tables
from audit.model import (
    AclDriftRow,
    AuditSnapshot,
    ConfigDriftRow,
    CutRow,
    GroupSyncRow,
    PartitionRow,
    TransitionRow,
    snapshot_to_arrow,
)
from audit.spark import SnapshotStore
from coordinator.states import MirrorState as S


def _no_secrets(snap: AuditSnapshot) -> AuditSnapshot:
    """The sample without mirror configs: what is left must come back byte for byte."""
    return msgspec.structs.replace(snap, mirror_configs={})


def _partitions_back(spark: SparkSession, store: SnapshotStore) -> list[PartitionRow]:
    key = ["mirror", "topic", "topic_id", "partition"]
    st = store.read(spark, "partition_states")
    ep = store.read(spark, "epochs").drop("state", "state_name", "date", "snapshot_offset", "taken_at_ms")
    of = store.read(spark, "offsets").drop("last_mirrored_epoch", "date", "snapshot_offset", "taken_at_ms")
    rows = st.join(ep, key).join(of, key).collect()
    fields = set(PartitionRow.__struct_fields__)
    return [PartitionRow(**{k: v for k, v in r.asDict().items() if k in fields}) for r in rows]


def _key(r: msgspec.Struct) -> tuple[object, ...]:
    return tuple(getattr(r, f) for f in r.__struct_fields__)


def _sorted(rows: list[msgspec.Struct]) -> list[msgspec.Struct]:
    return sorted(rows, key=lambda r: repr(_key(r)))


def test_round_trip_every_table(spark: SparkSession, sample: list[AuditSnapshot], tmp_path: Path) -> None:
    snap = _no_secrets(sample[-1])
    result = export_snapshot(snap, tmp_path)
    assert not result.skipped and result.rows > 0
    store = SnapshotStore(tmp_path)

    back = _partitions_back(spark, store)
    # lag=None in the input means "source HW - destination LEO": compare the effective value.
    expected = [msgspec.structs.replace(p, lag=p.effective_lag()) for p in snap.partitions]
    assert _sorted(back) == _sorted(expected)

    def rows_of(table: str, cls: type[msgspec.Struct]) -> list[msgspec.Struct]:
        fields = set(cls.__struct_fields__)
        return [cls(**{k: v for k, v in r.asDict().items() if k in fields}) for r in store.read(spark, table).collect()]

    assert _sorted(rows_of("transitions", TransitionRow)) == _sorted(snap.transitions)
    assert _sorted(rows_of("group_syncs", GroupSyncRow)) == _sorted(snap.group_syncs)
    assert _sorted(rows_of("config_drift", ConfigDriftRow)) == _sorted(snap.config_drift)
    assert _sorted(rows_of("acl_drift", AclDriftRow)) == _sorted(snap.acl_drift)

    # state names are written next to the bytes, from coordinator.states.MirrorState
    names = {(r.state, r.state_name) for r in store.read(spark, "partition_states").collect()}
    assert names and all(S(b).name == n for b, n in names)
    # hive partition columns come back typed
    r = store.read(spark, "offsets").first()
    assert (r.snapshot_offset, r.taken_at_ms, str(r.date)) == (snap.metadata_offset, snap.taken_at_ms, "2026-01-01")


def test_layout_and_manifest(sample: list[AuditSnapshot], tmp_path: Path) -> None:
    snap = sample[-1]
    result = export_snapshot(snap, tmp_path)
    rel = f"snapshot_offset={snap.metadata_offset}/taken_at_ms={snap.taken_at_ms}"
    for table in ("partition_states", "transitions", "epochs", "offsets", "group_syncs"):
        for mirror in ("a-to-b", "c-to-b"):
            assert (tmp_path / table / f"mirror={mirror}" / "date=2026-01-01" / rel / "part-00000.parquet").is_file()
    manifest_file = tmp_path / "_manifests" / f"snapshot-{snap.metadata_offset:020d}-{snap.taken_at_ms:015d}.json"
    assert Path(result.manifest_path) == manifest_file
    doc = json.loads(manifest_file.read_text())
    assert doc["schema_version"] == 1 and doc["metadata_offset"] == snap.metadata_offset
    assert doc["taken_at_ms"] == snap.taken_at_ms and doc["previous_metadata_offset"] is None
    assert doc["tables"]["partition_states"]["rows"] == len(snap.partitions)
    assert doc["tables"]["transitions"]["rows"] == len(snap.transitions)
    assert doc["mirrors"] == ["a-to-b", "c-to-b"]
    listed = {f["path"] for t in doc["tables"].values() for f in t["files"]}
    on_disk = {str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*.parquet")}
    assert listed == on_disk
    assert not list(tmp_path.rglob("*.tmp"))


def test_transitions_are_appended_incrementally(spark: SparkSession, sample: list[AuditSnapshot], tmp_path: Path) -> None:
    for snap in sample:  # every snapshot carries the whole history so far
        export_snapshot(_no_secrets(snap), tmp_path)
    manifests = layout.list_manifests(tmp_path)
    assert len(manifests) == len(sample)
    prev = None
    for m, snap in zip(manifests, sample):
        new = [t for t in snap.transitions if prev is None or t.metadata_offset > prev]
        assert m.tables["transitions"].rows == len(new)
        assert m.previous_metadata_offset == prev
        prev = snap.metadata_offset
    store = SnapshotStore(tmp_path)
    back = store.read(spark, "transitions", "all").collect()
    assert len(back) == len(sample[-1].transitions)  # the history once, no duplicates
    # snapshot tables: "latest" is the newest snapshot only, "all" every one
    assert store.read(spark, "offsets", "latest").count() == len(sample[-1].partitions)
    assert store.read(spark, "offsets", "all").count() == sum(len(s.partitions) for s in sample)


def test_re_export_is_a_no_op_and_order_is_enforced(sample: list[AuditSnapshot], tmp_path: Path) -> None:
    export_snapshot(sample[5], tmp_path)
    again = export_snapshot(sample[5], tmp_path)
    assert again.skipped and len(layout.list_manifests(tmp_path)) == 1
    with pytest.raises(ExportError, match="older than the latest"):
        export_snapshot(sample[4], tmp_path)


def test_transition_beyond_the_snapshot_offset_is_refused(sample: list[AuditSnapshot], tmp_path: Path) -> None:
    snap = sample[3]
    late = msgspec.structs.replace(snap.transitions[-1], metadata_offset=snap.metadata_offset + 1)
    with pytest.raises(ExportError, match="must not mix two points"):
        export_snapshot(msgspec.structs.replace(snap, transitions=[*snap.transitions, late]), tmp_path)
    assert layout.list_manifests(tmp_path) == []


def test_snapshot_without_manifest_is_invisible(
    spark: SparkSession, sample: list[AuditSnapshot], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = _no_secrets(sample[10]), _no_secrets(sample[-1])
    export_snapshot(first, tmp_path)

    def crash(root: Path, manifest: layout.Manifest) -> Path:
        raise OSError("killed before the manifest")

    monkeypatch.setattr(layout, "write_manifest", crash)
    with pytest.raises(OSError):
        export_snapshot(second, tmp_path)
    monkeypatch.undo()
    assert any(f"snapshot_offset={second.metadata_offset}" in str(p) for p in tmp_path.rglob("*.parquet"))

    store = SnapshotStore(tmp_path)  # the half-written snapshot's files are on disk, unlisted
    assert store.latest.metadata_offset == first.metadata_offset
    offsets = {r.snapshot_offset for r in store.read(spark, "offsets", "all").collect()}
    assert offsets == {first.metadata_offset}
    assert store.read(spark, "transitions").count() == len(first.transitions)

    export_snapshot(second, tmp_path)  # the restarted worker exports it again
    store = SnapshotStore(tmp_path)
    assert store.read(spark, "transitions").count() == len(second.transitions)


def test_odd_mirror_names_survive_the_hive_layout(spark: SparkSession, tmp_path: Path) -> None:
    names = ["2024", "a/b:c=d%e", "x y"]
    parts = [
        PartitionRow(mirror=m, topic="t", topic_id="00000000-0000-0000-0000-000000000001", partition=i,
                     state=int(S.MIRRORING), source_hw=10, dest_leo=7)
        for i, m in enumerate(names)
    ]  # fmt: skip
    export_snapshot(AuditSnapshot(metadata_offset=1, taken_at_ms=1_700_000_000_000, partitions=parts), tmp_path)
    rows = SnapshotStore(tmp_path).read(spark, "offsets").collect()
    assert sorted((r.mirror, r.lag) for r in rows) == sorted((m, 3) for m in names)


def test_export_tables_checks_columns(tmp_path: Path) -> None:
    tables = snapshot_to_arrow(AuditSnapshot(metadata_offset=1, taken_at_ms=0))
    bad = tables["offsets"].drop_columns(["lag"])
    with pytest.raises(ExportError, match=r"missing columns \['lag'\]"):
        export_tables({"offsets": bad}, metadata_offset=1, taken_at_ms=0, out_dir=tmp_path)
    with pytest.raises(ExportError, match="unknown tables"):
        export_tables({"nope": pa.table({"a": [1]})}, metadata_offset=1, taken_at_ms=0, out_dir=tmp_path)
    with pytest.raises(ExportError, match="schema version"):
        export_tables({}, metadata_offset=1, taken_at_ms=0, out_dir=tmp_path, schema_version=99)


def test_two_writers_racing_export_one_snapshot_and_nothing_twice(
        sample: list[AuditSnapshot], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """A worker losing table partition 0 while another gains it: both list the store, both build
    the snapshot after the same one; only one is published, the other's files are gone."""
    first = sample[5]
    export_snapshot(first, tmp_path)
    both_listed = threading.Barrier(2, timeout=30)
    claim = layout.claim_next

    def claim_after_both_built(root: Path, previous: layout.Manifest | None, manifest: layout.Manifest) -> bool:
        both_listed.wait()
        return claim(root, previous, manifest)

    monkeypatch.setattr(layout, "claim_next", claim_after_both_built)
    a = msgspec.structs.replace(sample[-1], taken_at_ms=sample[-1].taken_at_ms + 1)
    b = msgspec.structs.replace(sample[-1], taken_at_ms=sample[-1].taken_at_ms + 2)
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(export_snapshot, snap, tmp_path) for snap in (a, b)]
    outcomes = []
    for f in futures:
        try:
            outcomes.append(f.result().manifest.taken_at_ms)
        except ExportRaceError:
            outcomes.append(None)
    assert outcomes.count(None) == 1, outcomes
    manifests = layout.list_manifests(tmp_path)
    assert [m.taken_at_ms for m in manifests] == [first.taken_at_ms, next(t for t in outcomes if t)]
    lost = a if outcomes[0] is None else b
    assert not [p for p in tmp_path.rglob("*.parquet") if f"taken_at_ms={lost.taken_at_ms}" in str(p)]


def test_a_claim_whose_writer_crashed_is_published_by_the_next_export(
        sample: list[AuditSnapshot], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    export_snapshot(sample[5], tmp_path)

    def crash(root: Path, manifest: layout.Manifest) -> Path:
        raise OSError("killed after the claim, before the manifest")

    monkeypatch.setattr(layout, "write_manifest", crash)
    with pytest.raises(OSError):
        export_snapshot(sample[8], tmp_path)
    monkeypatch.undo()
    assert [m.metadata_offset for m in layout.list_manifests(tmp_path)] == [sample[5].metadata_offset]
    # Another writer goes on: the claimed snapshot is published first, then its own follows it.
    result = export_snapshot(sample[-1], tmp_path)
    manifests = layout.list_manifests(tmp_path)
    assert [m.metadata_offset for m in manifests] == [s.metadata_offset for s in (sample[5], sample[8], sample[-1])]
    assert result.manifest.previous_metadata_offset == sample[8].metadata_offset


def test_consistent_cuts_are_kept_by_the_export(tmp_path: Path) -> None:
    """A ``--consistent-cut`` stop's figures (T, the cut, what was given up) reach the Parquet snapshot."""
    import pyarrow.parquet as pq

    cuts = [CutRow(mirror="a-to-b", topic="orders", topic_id="00000000-0000-0000-0000-000000000001", partition=p,
                   state=int(S.STOPPED), cut_timestamp=1_700, cut_offset=10 + p, given_up_end_offset=14 + p,
                   given_up_records=3, newest_given_up_timestamp=1_750) for p in range(2)]  # fmt: skip
    snap = AuditSnapshot(metadata_offset=5, taken_at_ms=1_767_225_600_000, consistent_cuts=cuts)
    export_snapshot(snap, tmp_path)
    (f,) = (tmp_path / "consistent_cuts").rglob("*.parquet")
    rows = sorted(pq.read_table(f).to_pylist(), key=lambda r: r["partition"])
    fields = set(CutRow.__struct_fields__) - {"mirror"}  # the mirror is the hive directory
    assert [{k: v for k, v in r.items() if k in fields} for r in rows] == [
        {k: getattr(c, k) for k in fields} for c in cuts]
    assert {r["state_name"] for r in rows} == {"STOPPED"}
