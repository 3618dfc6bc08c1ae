"""Audit snapshots on a timer (``audit.export.dir``, ``audit.export.interval.ms``), real processes.

The session's noida-db broker, the cluster-model server, a controller and a worker per
destination cluster (``worker_harness.Rig``). Mirror ``a-to-b`` (destination B) mirrors, then
fails over; ``b-to-a`` (destination A) fails back. B's worker exports from the start; A's worker
runs first without ``audit.export.dir`` (off: nothing written) and is restarted with it for the
failback; B's worker is SIGKILLed and restarted in between. Then:

- each coordinator has its own store, ``<dir>/<cluster>``, holding only its own mirror;
- the exports are incremental: a later snapshot carries only the transitions since the
  previous one (the failover's, not the first start's again), and every transition of the
  ``__mirror_state`` changelog is in exactly one snapshot, across the restart too;
- the audit (``python -m audit --snapshots <dir>/<B>``'s main) reads B's store and passes.

And two exporters of one coordinator on a real ``__mirror_state`` topic (table partition 0
moving between workers) hand over without exporting a transition twice.
"""

from __future__ import annotations

import io
import uuid
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from audit import layout
from audit.cli import main as audit_main
from coordinator.states import MirrorState
from streams.brokers.noida import LocalBroker
from streams.config import ConfigError, WorkerConfig
from worker_harness import Rig

INTERVAL_MS = 500


def manifests(root: Path) -> list[layout.Manifest]:
    return layout.list_manifests(root)


def transitions(root: Path, m: layout.Manifest) -> list[tuple[str, str, int, str, int]]:
    """(mirror, topic ID, partition, to state, at ms) of each transition row of one snapshot."""
    out = []
    for f in m.files("transitions"):
        t = pq.read_table(root / f.path).to_pylist()
        out += [(f.mirror, r["topic_id"], r["partition"], r["to_state_name"], r["at_ms"]) for r in t]
    return out


def states(root: Path, m: layout.Manifest) -> dict[tuple[str, int], str]:
    out = {}
    for f in m.files("partition_states"):
        for r in pq.read_table(root / f.path).to_pylist():
            out[(r["topic_id"], r["partition"])] = r["state_name"]
    return out


def changelog_transitions(rig: Rig, cluster: str, mirror: str) -> Counter[tuple[str, str, int, str, int]]:
    """Every transition in the cluster's ``__mirror_state``: a write whose state differs from the last."""
    out: Counter[tuple[str, str, int, str, int]] = Counter()
    for (name, tid, p), writes in rig.history(cluster).items():
        before = MirrorState.UNKNOWN
        for st in writes:
            if name == mirror and st.state is not before:
                out[(name, str(tid), p, st.state.name, st.entered_at_ms)] += 1
            before = st.state
    return out


def all_states(root: Path, state: str, n: int, after_ms: int = 0) -> bool:
    ms = manifests(root)
    return bool(ms) and ms[-1].taken_at_ms > after_ms and list(states(root, ms[-1]).values()) == [state] * n


@pytest.mark.slow
def test_timed_export_is_incremental_per_coordinator_and_off_without_dir(broker: LocalBroker, spark: object,
                                                                          tmp_path: Path) -> None:  # fmt: skip
    export_dir = tmp_path / "audit"
    on = ["--audit-export-dir", str(export_dir), "--audit-export-interval-ms", str(INTERVAL_MS)]
    rig = Rig(tmp_path, broker.bootstrap, {"orders": 2, "audit": 1}, state_partitions=4, tick=0.1)
    try:
        rig.start()
        root_a, root_b = export_dir / rig.prefix("A"), export_dir / rig.prefix("B")
        n = len(rig.tps)
        rig.spawn_worker("B", extra=on)
        rig.spawn_worker("A")  # no audit.export.dir: off
        rig.create_mirror("B", "a-to-b", "A")
        rig.start_topics("B", "a-to-b")
        rig.produce("A", 1.5, seed=3)
        rig.wait("a-to-b to catch up", lambda: rig.caught_up("A", "B") and rig.all_in("B", "a-to-b", MirrorState.MIRRORING))
        rig.wait("B's export to show every partition MIRRORING", lambda: all_states(root_b, "MIRRORING", n), 30)
        first = manifests(root_b)
        assert not root_a.exists(), "A's worker has no audit.export.dir, yet exported"

        rig.stop_topics("B", "a-to-b")
        rig.wait("a-to-b to stop", lambda: rig.all_in("B", "a-to-b", MirrorState.STOPPED))
        rig.wait("B's export to show every partition STOPPED", lambda: all_states(root_b, "STOPPED", n), 30)

        # SIGKILL B's worker and restart it: it re-reads the changelog, exports only what is new.
        rig.kill_worker("worker-B")
        before_restart = manifests(root_b)[-1].taken_at_ms
        rig.spawn_worker("B", extra=on)
        rig.wait("the restarted worker of B to export", lambda: manifests(root_b)[-1].taken_at_ms > before_restart, 60)

        # Failback, with A's worker restarted with the export on.
        rig.stop_worker("worker-A")
        rig.spawn_worker("A", extra=on)
        rig.create_mirror("A", "b-to-a", "B")
        rig.start_topics("A", "b-to-a")
        rig.wait("b-to-a to mirror", lambda: rig.all_in("A", "b-to-a", MirrorState.MIRRORING))
        rig.wait("A's export to show every partition MIRRORING", lambda: all_states(root_a, "MIRRORING", n), 30)
        t_end = manifests(root_b)[-1].taken_at_ms
        rig.wait("one more export of B", lambda: manifests(root_b)[-1].taken_at_ms > t_end, 30)

        # Per coordinator: each store holds its own mirror only.
        ms_b, ms_a = manifests(root_b), manifests(root_a)
        assert {x for m in ms_b for x in m.mirrors} == {"a-to-b"}
        assert {x for m in ms_a for x in m.mirrors} == {"b-to-a"}
        assert sorted(p.name for p in export_dir.iterdir()) == sorted([root_a.name, root_b.name])

        # Incremental: every changelog transition in exactly one snapshot; later ones carry only new ones.
        for root, cluster, mirror, ms in ((root_b, "B", "a-to-b", ms_b), (root_a, "A", "b-to-a", ms_a)):
            exported = Counter(t for m in ms for t in transitions(root, m))
            assert exported == changelog_transitions(rig, cluster, mirror), cluster
            for prev, m in zip(ms, ms[1:]):
                assert m.previous_metadata_offset == prev.metadata_offset
                assert all(int(m.positions[p]) >= int(o) for p, o in prev.positions.items())
        first_rows = {t for m in first for t in transitions(root_b, m)}
        later = [t for m in ms_b[len(first):] for t in transitions(root_b, m)]
        assert {t[3] for t in first_rows} >= {"MIRRORING"}
        assert "STOPPED" in {t[3] for t in later} and "MIRRORING" not in {t[3] for t in later}, later
        assert not first_rows & set(later)
        assert [m for m in ms_b[len(first):] if not transitions(root_b, m)], "no export without changes (empty increment)"
    finally:
        rig.close()

    # The audit CLI (``python -m audit``'s main, on the session's Spark: a process of its own would
    # start a second Spark; tests/audit/test_audit_cli.py runs ``python -m audit`` as a process)
    # reads B's store, failover included, and passes.
    out, err = io.StringIO(), io.StringIO()
    code = audit_main(["--snapshots", str(root_b), "--no-progress"], out=out, err=err)
    assert code == 0, out.getvalue() + err.getvalue()
    assert out.getvalue().rstrip().endswith("audit PASS"), out.getvalue()


def test_export_off_unless_a_directory_is_set(tmp_path: Path) -> None:
    assert WorkerConfig(cluster_name="B").audit_export_root is None
    cfg = WorkerConfig(cluster_name="B", audit_export_dir=str(tmp_path), audit_export_interval_ms=1000)
    assert cfg.audit_export_root == tmp_path / "B"
    with pytest.raises(ConfigError, match="audit.export.interval.ms"):
        WorkerConfig(cluster_name="B", audit_export_dir=str(tmp_path), audit_export_interval_ms=0)


async def test_exporter_hands_over_between_workers_without_exporting_twice(worker_config: WorkerConfig,
                                                                           tmp_path: Path) -> None:  # fmt: skip
    """Two exporters of one coordinator (table partition 0 moving between workers) on a real
    ``__mirror_state`` topic: each export carries the transitions since the store's last snapshot,
    whoever wrote it, and none twice."""
    from aiokafka import AIOKafkaProducer

    from coordinator.image import EMPTY_IMAGE
    from coordinator.partition_state import MirrorPartitionState
    from streams.worker.topics import worker_topic_specs
    from streams.worker.audit_export import AuditExporter
    from streams.config import ensure_topics
    from streams.state.mirror_state_codec import default_codec, partition_for_key

    cfg = WorkerConfig(**{**{f: getattr(worker_config, f) for f in ("bootstrap_servers", "cluster_name", "data_dir")},
                          "state_partitions": 2, "audit_export_dir": str(tmp_path / "audit")})  # fmt: skip
    await ensure_topics(cfg.bootstrap_servers, worker_topic_specs(cfg))
    codec, tid = default_codec(), uuid.uuid4()
    producer = AIOKafkaProducer(bootstrap_servers=cfg.bootstrap_servers)
    await producer.start()
    offset = 0

    async def write(partition: int, state: MirrorState, previous: MirrorState) -> None:
        nonlocal offset
        offset += 1
        st = MirrorPartitionState(state=state, previous_state=previous, applied_offset=offset, entered_at_ms=offset)
        key = codec.state_key("m", tid, partition)
        await producer.send_and_wait(cfg.mirror_state_topic_name, key=key,
                                     value=codec.encode_value(codec.state_value(**st.to_schema_fields())),
                                     partition=partition_for_key(key, cfg.state_partitions))  # fmt: skip

    def no_ports(*_: object) -> tuple[object, object]:
        raise AssertionError("no mirror in the image: no offsets to look up")

    one = AuditExporter(cfg, no_ports, lambda: EMPTY_IMAGE)
    two = AuditExporter(cfg, no_ports, lambda: EMPTY_IMAGE)
    root = cfg.audit_export_root
    assert root is not None
    try:
        for p in (0, 1):
            await write(p, MirrorState.UNKNOWN, MirrorState.UNKNOWN)  # registration: no transition
            await write(p, MirrorState.PREPARING, MirrorState.UNKNOWN)
            await write(p, MirrorState.MIRRORING, MirrorState.PREPARING)
        r1 = await one.export_once()
        await write(0, MirrorState.STOPPING, MirrorState.MIRRORING)
        r2 = await two.export_once()  # partition 0 moved to the other worker
        await write(0, MirrorState.STOPPED, MirrorState.STOPPING)
        await write(1, MirrorState.STOPPING, MirrorState.MIRRORING)
        r3 = await one.export_once()  # and back
        r4 = await one.export_once()  # nothing new
    finally:
        await producer.stop()
        await one.stop()
        await two.stop()
    assert r1 and r2 and r3 and r4
    per_export = [sorted((t[2], t[3]) for t in transitions(root, r.manifest)) for r in (r1, r2, r3, r4)]
    assert per_export == [
        [(0, "MIRRORING"), (0, "PREPARING"), (1, "MIRRORING"), (1, "PREPARING")],
        [(0, "STOPPING")],
        [(0, "STOPPED"), (1, "STOPPING")],
        [],
    ]


def test_offsets_are_looked_up_in_one_batch_where_the_port_has_one() -> None:
    from coordinator.ports import PartitionOffsets, SourceUnavailable
    from coordinator.ports import TopicPartition as TP
    from streams.worker.audit_export import _list_offsets_all

    tps = [TP(uuid.UUID(int=1), p) for p in range(3)]
    offsets = PartitionOffsets(log_start=0, lso=5, hw=5, leo=7, leader_epoch=2)

    class Batched:  # the model client's shape: one call_many, errors as values
        calls: list[int] = []

        def call_many(self, calls: list[tuple[str, tuple[object, ...], None]]) -> list[object]:
            self.calls.append(len(calls))
            return [SourceUnavailable("A", "gone") if args[0].partition == 1 else offsets for _, args, _ in calls]

    class Single:  # an in-process port: no batches
        def list_offsets(self, tp: TP) -> PartitionOffsets:
            if tp.partition == 2:
                raise SourceUnavailable("A", "gone")
            return offsets

    batched = Batched()
    assert _list_offsets_all(batched, tps) == [offsets, None, offsets] and batched.calls == [3]
    assert _list_offsets_all(Single(), tps) == [offsets, offsets, None]


def test_a_consistent_cut_stops_states_reach_the_export(tmp_path: Path) -> None:
    """The worker's export writes a ``consistent_cuts`` row for each state that holds a cut (and none else)."""
    from clustermodel import ClusterModel
    from coordinator.partition_state import MirrorPartitionState
    from streams.worker.audit_export import AuditExporter

    a = ClusterModel("a")
    topic = a.add_topic("orders", partitions=2)
    config = WorkerConfig(bootstrap_servers="127.0.0.1:1", cluster_name="cut", audit_export_dir=str(tmp_path))
    image = _image_with(topic, "a-to-b")
    exporter = AuditExporter(config, lambda name, mirror: (a, a), lambda: image)
    try:
        cut = MirrorPartitionState(state=MirrorState.STOPPED, cut_offset=4, cut_timestamp=1_234, given_up_end_offset=9,
                                   given_up_records=5, newest_given_up_timestamp=1_300)  # fmt: skip
        plain = MirrorPartitionState(state=MirrorState.STOPPED)  # a stop without a cut: no row
        states = {("a-to-b", topic.topic_id, 0): cut, ("a-to-b", topic.topic_id, 1): plain}
        exporter._write(image, states, {}, [], {}, 1_767_225_600_000)
    finally:
        exporter.pool.shutdown()
    (f,) = (Path(config.audit_export_root) / "consistent_cuts").rglob("*.parquet")
    rows = pq.read_table(f).to_pylist()
    assert [(r["topic"], r["partition"], r["cut_offset"], r["cut_timestamp"], r["given_up_end_offset"],
             r["given_up_records"], r["newest_given_up_timestamp"]) for r in rows] == [("orders", 0, 4, 1_234, 9, 5, 1_300)]


def _image_with(topic, mirror):  # a metadata image holding the topic as a member of ``mirror``
    from coordinator.image import ClusterMirrorImage, MetadataImage, MirrorsImage, MirrorTopic, TopicImage, TopicsImage, frozen_map
    from coordinator.states import DesiredState

    t = TopicImage(topic.name, topic.topic_id, frozen_map({}))
    topics = TopicsImage(frozen_map({topic.topic_id: t}), frozen_map({topic.name: topic.topic_id}))
    mirrors = MirrorsImage(frozen_map({mirror: ClusterMirrorImage(mirror, frozen_map({}))}),
                           frozen_map({topic.topic_id: MirrorTopic(topic.topic_id, mirror, DesiredState.STOP)}))
    return MetadataImage(topics=topics, mirrors=mirrors)
