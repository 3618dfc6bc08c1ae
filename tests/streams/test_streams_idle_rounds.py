"""A settled mirror's rounds cost nothing per topic, and its periodic sync is a few round trips.

- ``reconcile_topics`` over a topic level that is settled (every topic at its desired offset,
  none due for its metadata refresh) makes no pass over the topics; ``MirrorRunner.due`` says
  so to the worker's tick plan, and turns True at the refresh, or when a desired state moves.
- The metadata sync asks both clusters for every topic's configs in one pipelined wave, not two
  round trips per topic (1,000 topics held the mirror's job, and so its copying, for seconds),
  and takes the epoch check's leader epochs from one metadata request per cluster.
- With the worker's store, an idle metadata sync does not walk the partitions again (the live
  set is kept while no state and no desired state moved), and a topic-level refresh that finds
  a topic as it settled (the same observation, no state moved) decides nothing for it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from model_server import ServerProcess

from clustermodel.client import ClusterClient
from coordinator.partition_state import UNKNOWN_STATE, MirrorPartitionKey
from coordinator.ports import TopicPartition
from coordinator.states import DesiredState, MirrorState
from coordinator.workflows.config import MirrorConfig
from streams.runner import topic_level
from streams.runner.runner import MirrorRunner
from streams.worker.state_store import WorkerStateStore

REFRESH_MS = 10_000


@pytest.fixture
def port() -> Iterator[int]:
    server = ServerProcess("--cluster", "A", "--cluster", "B", "--seed", "5", "--no-kafka-listeners")
    yield server.port
    server.stop()


class RoundTrips:
    """A port that counts its round trips: each ``call_many`` is one, each direct call one."""

    def __init__(self, client: ClusterClient) -> None:
        self.client = client
        self.trips: list[tuple[str, ...]] = []

    def call_many(self, calls: Any) -> list[Any]:
        self.trips.append(tuple(sorted({method for method, _, _ in calls})))
        return self.client.call_many(calls)

    def __getattr__(self, name: str) -> Any:
        got = getattr(self.client, name)
        if not callable(got) or name in ("close", "open_watch"):
            return got

        def direct(*args: Any, **kwargs: Any) -> Any:
            self.trips.append((name,))
            return got(*args, **kwargs)

        return direct


class CountedItems(dict):  # type: ignore[type-arg]
    """Desired states that count the passes over them."""

    passes = 0

    def items(self) -> Any:
        self.passes += 1
        return super().items()


def _mirrored(port: int, topics: int, store: Any = None) -> tuple[MirrorRunner, RoundTrips, RoundTrips, ClusterClient, list[Any], int]:
    a = ClusterClient(port, "A")
    metas = [a.add_topic(f"t{i}", 2) for i in range(topics)]
    src, dst = RoundTrips(ClusterClient(port, "A")), RoundTrips(ClusterClient(port, "B"))
    r = MirrorRunner("m", src, dst, MirrorConfig(metadata_refresh_interval_ms=REFRESH_MS), store=store)
    for m in metas:
        r.set_desired(m.topic_id, DesiredState.START)
    now = 0
    for _ in range(50):
        now += 100
        r.tick(now)
        if store is not None:  # the worker's store: its queued writes made durable, as the agent does
            for p in range(store.num_partitions):
                store.land(store.prepare(p)[0])
        if all(r.state(TopicPartition(m.topic_id, p)).state is MirrorState.MIRRORING for m in metas for p in (0, 1)):
            break
    return r, src, dst, a, metas, now


def test_a_settled_topic_level_makes_no_pass_over_the_topics_until_its_refresh(port: int) -> None:
    r, src, dst, a, metas, now = _mirrored(port, 3)
    try:
        desired = CountedItems(r.metadata.latest("m"))
        r.reconcile_topics(now, desired)  # settles (or refreshes) the topic level for these desired states
        assert not r.topics_due(now + 1, desired)
        desired.passes = 0
        src.trips.clear()
        for t in range(1, 20):
            r.reconcile_topics(now + t * 100, desired)
        assert desired.passes == 0 and src.trips == []
        r.sync_if_due(now, desired)
        assert not r.due(now + 1_000, desired)  # nothing on a clock either: the worker sends no tick
        assert r.due(now + REFRESH_MS + 1, desired)  # the metadata sync (epoch checks and all) on time
        # A desired state that moves (a new dict from the image) is looked at at once.
        moved = CountedItems(desired)
        assert r.topics_due(now + 2_000, moved)
        r.reconcile_topics(now + 2_000, moved)
        assert moved.passes >= 1
        # The metadata refresh of a settled topic level still comes on time.
        assert r.topics_due(now + 2_000 + REFRESH_MS, moved)
        src.trips.clear()
        r.reconcile_topics(now + 2_000 + REFRESH_MS, moved)
        assert src.trips != []  # the topics' metadata asked again
    finally:
        r.close()
        a.close()


def test_the_metadata_sync_asks_every_topics_configs_in_one_wave(port: int) -> None:
    r, src, dst, a, metas, now = _mirrored(port, 12)
    try:
        for m in metas:
            a.alter_configs(m.topic_id, {"retention.ms": "3600000"}, [])
        src.trips.clear()
        dst.trips.clear()
        r.sync_if_due(now + REFRESH_MS)
        assert [t for t in src.trips if "describe_configs" in t] == [("describe_configs",)]
        assert [t for t in dst.trips if "describe_configs" in t] == [("describe_configs",)]
        # The periodic epoch check (DLE >= SLE) reads each cluster's metadata once, not a
        # ListOffsets per partition.
        assert [t for t in src.trips if "describe_topics" in t or "list_offsets" in t] == [("describe_topics",)]
        assert [t for t in dst.trips if "describe_topics" in t or "list_offsets" in t] == [("describe_topics",)]
        b = ClusterClient(port, "B")
        try:
            assert all(b.describe_configs(m.topic_id).get("retention.ms") == "3600000" for m in metas)
        finally:
            b.close()
    finally:
        r.close()
        a.close()


def _worker_store() -> WorkerStateStore:
    store = WorkerStateStore(4)
    store.owned = set(range(4))
    return store


def _counted_reads(store: WorkerStateStore) -> list[int]:
    reads = [0]
    get = store.get

    def counted(key: Any) -> Any:
        reads[0] += 1
        return get(key)

    store.get = counted  # type: ignore[method-assign]
    return reads


def test_an_idle_metadata_sync_does_not_walk_the_partitions_again(port: int) -> None:
    store = _worker_store()
    r, src, dst, a, metas, now = _mirrored(port, 3, store)
    try:
        desired = r.metadata.latest("m")
        reads = _counted_reads(store)
        assert r.sync_if_due(now + REFRESH_MS, desired)
        assert reads[0] >= 6  # the first sync walks every partition
        reads[0] = 0
        dst.trips.clear()
        for p in range(store.num_partitions):  # idle steps of a lone worker meanwhile: nothing written
            store.land(store.prepare(p)[0])
            store.remote = {}
        assert r.sync_if_due(now + 2 * REFRESH_MS, desired)
        assert reads[0] == 0  # nothing moved: the same live set
        assert r.stats.sync_success_ms["acl"] == now + 2 * REFRESH_MS  # the sync itself ran
        assert any("describe_topics" in t for t in dst.trips)  # with its epoch check
        # A state that moves is seen at the next sync: the pausing partition is no longer live.
        tp = TopicPartition(metas[0].topic_id, 0)
        was = r.state(tp)
        store.put(r.key(tp), was.with_(state=MirrorState.PAUSING, state_epoch=was.state_epoch + 1))
        reads[0] = 0
        assert r.sync_if_due(now + 3 * REFRESH_MS, desired)
        assert reads[0] >= 6
        assert tp not in r.live.of(desired) and TopicPartition(metas[0].topic_id, 1) in r.live.of(desired)
        # So is a desired state that moves (a new dict): the paused topic's partitions leave it.
        paused = {**desired, metas[1].topic_id: (DesiredState.PAUSE, desired[metas[1].topic_id][1] + 1)}
        assert all(TopicPartition(metas[1].topic_id, p) not in r.live.of(paused) for p in (0, 1))
    finally:
        r.close()
        a.close()


def test_a_refresh_that_finds_a_topic_as_it_settled_decides_nothing(port: int, monkeypatch: Any) -> None:
    store = _worker_store()
    r, src, dst, a, metas, now = _mirrored(port, 3, store)
    try:
        decided: list[Any] = []
        real = topic_level.decide_topic

        def counted(name: str, obs: Any, *args: Any) -> Any:
            decided.append(obs.topic_id)
            return real(name, obs, *args)

        monkeypatch.setattr(topic_level, "decide_topic", counted)
        desired = r.metadata.latest("m")
        t = now + REFRESH_MS
        r.reconcile_topics(t, desired)  # the states moved since the topics settled: decided again
        assert sorted(decided) == sorted(m.topic_id for m in metas)
        decided.clear()
        src.trips.clear()
        t += REFRESH_MS
        r.reconcile_topics(t, desired)
        assert src.trips != []  # observed on time
        assert decided == []  # as they settled: nothing to decide
        assert all(m.topic_id in r.ready for m in metas)  # and still ready to fetch
        # A topic that moved on the source (a partition more) is decided again, alone.
        a.create_partitions(metas[0].topic_id, 3)
        t += REFRESH_MS
        r.reconcile_topics(t, desired)
        assert decided == [metas[0].topic_id]
        assert 2 in r.partitions[metas[0].topic_id]
        for _ in range(2):  # its new partition's state moved the store: the others once more, then none
            decided.clear()
            t += REFRESH_MS
            r.reconcile_topics(t, desired)
        assert decided == []
        # New settings: every topic is decided again at its refresh.
        r.reconfigure(MirrorConfig(metadata_refresh_interval_ms=REFRESH_MS, fetch_backoff_ms=1234))
        decided.clear()
        t += REFRESH_MS
        r.reconcile_topics(t, desired)
        assert sorted(decided) == sorted(m.topic_id for m in metas)
    finally:
        r.close()
        a.close()


def test_the_store_version_moves_only_with_what_its_reads_see() -> None:
    store = _worker_store()
    topic_id = uuid.uuid4()
    key = MirrorPartitionKey("m", topic_id, 0)
    was = store.version()
    # An idle step: nothing queued to write, and a lone worker's empty view of the others.
    for p in range(4):
        store.land(store.prepare(p)[0])
    store.remote = {}
    store.remote = {}
    store.remote = None
    assert store.version() == was
    store.put(key, UNKNOWN_STATE.with_(state=MirrorState.PREPARING, state_epoch=1))
    queued = store.version()
    assert queued != was
    store.land(store.prepare(store.partition_of(key))[0])
    assert store.version() != queued  # durable now
    landed = store.version()
    store.remote = {("m", topic_id, 1): object()}  # another worker's states
    assert store.version() != landed
