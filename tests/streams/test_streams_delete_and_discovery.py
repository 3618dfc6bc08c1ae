"""Deleting a mirror removes its state; new source topics that a started pattern selects are mirrored.

Real processes (the demo's): the cluster-model server, a controller and a worker per destination
cluster, on the session's noida-db broker; every command goes through the CLI, and
``__mirror_state`` is read back with a plain consumer.

- delete: ``--stop`` then ``--delete`` of ``a-to-b`` on B writes a tombstone for every
  MirrorPartitionState and LastMirrorEpochs key of the mirror, also when B's worker was down
  during the delete. The LME that failback needs is B's cluster's, so it survives: the reverse
  mirror on A truncates A exactly where B's copy of A ended. ``a-to-b`` re-created on B starts
  from nothing (UNKNOWN, state epoch 0), not from the deleted mirror's state.
- discovery: after ``--start --topics '.*pay.*' --exclude pay-internal``, ``pay-new`` created on A
  is mirrored on its own; ``pay-internal`` (excluded) and a topic stopped by name are not.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from coordinator.partition_state import MirrorPartitionKey, MirrorPartitionState
from coordinator.ports import TopicPartition
from coordinator.states import MirrorState, is_legal_transition
from streams.brokers.noida import LocalBroker
from streams.demo.harness import read_changelog
from streams.state.mirror_state_codec import RecordType
from worker_harness import Rig

Key = tuple[RecordType, str, uuid.UUID, int]


def changelog(rig: Rig, cluster: str) -> list[tuple[Key, Any]]:
    """Every record of the cluster's ``__mirror_state``, tombstones included (value None), in order per key."""
    records = asyncio.run(read_changelog(rig.bootstrap, rig.config(cluster).mirror_state_topic_name))
    return [((rtype, k.mirror_name, k.topic_id, k.partition), value) for rtype, k, value in records]


def latest(records: list[tuple[Key, Any]], mirror: str) -> dict[Key, Any]:
    out: dict[Key, Any] = {}
    for key, value in records:
        if key[1] == mirror:
            out[key] = value
    return out


def tombstoned(rig: Rig, cluster: str, mirror: str) -> bool:
    """Every state, LME and stop impact key of ``mirror`` (one each per partition: the mirror was
    stopped) ends with a tombstone."""
    last = latest(changelog(rig, cluster), mirror)
    want = {(t, mirror, tp.topic_id, tp.partition) for tp in rig.tps
            for t in (RecordType.MIRROR_PARTITION_STATE, RecordType.LAST_MIRROR_EPOCHS, RecordType.MIRROR_FAILOVER_IMPACT)}  # fmt: skip
    return set(last) == want and all(v is None for v in last.values())


def incarnations(records: list[tuple[Key, Any]], mirror: str) -> dict[tuple[uuid.UUID, int], list[list[MirrorPartitionState]]]:
    """Per partition of ``mirror``, its state writes split at each tombstone."""
    out: dict[tuple[uuid.UUID, int], list[list[MirrorPartitionState]]] = {}
    for (rtype, name, tid, p), value in records:
        if rtype != RecordType.MIRROR_PARTITION_STATE or name != mirror:
            continue
        runs = out.setdefault((tid, p), [[]])
        if value is None:
            runs.append([])
        else:
            runs[-1].append(MirrorPartitionState.from_schema_fields(value))
    return out


def fresh_start_problems(run: list[MirrorPartitionState]) -> list[str]:
    """A membership's writes start from UNKNOWN at state epoch 0 and go up one epoch per write."""
    problems, before = [], MirrorState.UNKNOWN
    for i, st in enumerate(run):
        if st.state_epoch != i:
            problems.append(f"write {i}: state epoch {st.state_epoch}")
        if not is_legal_transition(before, st.state):
            problems.append(f"write {i}: {before.name} -> {st.state.name}")
        before = st.state
    return problems


def stop_offsets(rig: Rig, cluster: str, mirror: str) -> dict[tuple[uuid.UUID, int], int]:
    """Per partition, the LEO at which the last stop of ``mirror`` removed the fetcher."""
    return {key: next(s.stop_offset for s in reversed(runs[-1]) if s.stop_offset >= 0)
            for key, runs in incarnations(changelog(rig, cluster), mirror).items()}


def produce(rig: Rig, cluster: str, topic: str, partitions: int, n: int, tag: str) -> None:
    for p in range(partitions):
        rig.clients[cluster].produce(topic, p, [(f"{tag}-{i}".encode(), b"v") for i in range(n)])


def test_the_worker_store_forgets_a_departed_membership_and_drops_its_late_writes() -> None:
    """What a publish with a removal does to the worker's states, without the processes around it."""
    from coordinator.partition_state import LastMirrorEpoch, transition
    from streams.worker.state_store import WorkerStateStore

    store = WorkerStateStore(4)
    key = MirrorPartitionKey("a-to-b", uuid.UUID(int=7), 0)
    p = store.partition_of(key)
    store.owned = {p}
    stopped = MirrorPartitionState(state=MirrorState.STOPPED, previous_state=MirrorState.STOPPING, state_epoch=6,
                                   applied_offset=40)  # fmt: skip
    store.land([(key, stopped)])
    store.remove(key, 50)  # the delete's detach record, at offset 50
    assert store.get(key) is None and store.take_deletes(p) == {key}
    store.put(key, stopped.with_(state_epoch=7))  # a late step of the old membership: dropped
    store.put_lme(LastMirrorEpoch(key, 3, 40))
    assert store.take(p) == ({}, {})
    # the mirror re-created and the topic started at offset 60: from UNKNOWN, state epoch 0
    first = transition(MirrorPartitionState(), MirrorState.PREPARING, 1).with_(applied_offset=60)
    store.put(key, first)
    ready, _, _ = store.prepare(p)
    assert [(k, s.state, s.previous_state, s.state_epoch) for k, s in ready] == [
        (key, MirrorState.PREPARING, MirrorState.UNKNOWN, 0)]
    store.land(ready)
    store.remove(key, 50)  # the same removal seen again (a replay): the new membership stays
    assert store.get(key) is not None and store.get(key).applied_offset == 60  # type: ignore[union-attr]
    assert not store.outlived(key, 60) and store.outlived(key, 50)


@pytest.mark.slow
def test_delete_tombstones_then_failback_finds_the_lme_and_a_recreated_mirror_starts_from_nothing(
        broker: LocalBroker, tmp_path: Path) -> None:  # fmt: skip
    rig = Rig(tmp_path, broker.bootstrap, {"orders": 2, "audit": 1}, tick=0.1)
    try:
        rig.start()
        rig.spawn_worker("B")
        rig.spawn_worker("A")
        rig.create_mirror("B", "a-to-b", "A")
        rig.start_topics("B", "a-to-b")
        for name, n in rig.topics.items():
            produce(rig, "A", name, n, 5, "a")
        rig.wait("a-to-b MIRRORING", lambda: rig.all_in("B", "a-to-b", MirrorState.MIRRORING), 90)
        rig.wait("B caught up with A", lambda: rig.caught_up("A", "B"), 60)

        # Failover, then A goes on (its extra records are not B's) and B is written to.
        rig.stop_topics("B", "a-to-b")
        rig.wait("a-to-b STOPPED", lambda: rig.all_in("B", "a-to-b", MirrorState.STOPPED), 90)
        rig.wait("B writable", lambda: not any(rig.read_only("B").values()), 30)
        for name, n in rig.topics.items():
            produce(rig, "A", name, n, 3, "a-extra")
            produce(rig, "B", name, n, 2, "b")
        stop_offset = stop_offsets(rig, "B", "a-to-b")
        lme = {tp: rig.clients["B"].last_mirrored_epoch("a-to-b", tp) for tp in rig.tps}
        assert all(v is not None for v in lme.values()), lme
        assert all(latest(changelog(rig, "B"), "a-to-b").values())  # every key live before the delete

        # Delete while B's worker is down: the restarted worker finds the orphaned state.
        rig.leave_worker("worker-B")
        rig.cli("B", "--delete", "--mirror", "a-to-b")
        assert "a-to-b" not in rig.cli("B", "--list")
        rig.spawn_worker("B")
        rig.wait("a-to-b tombstoned on B", lambda: tombstoned(rig, "B", "a-to-b"), 90)
        assert {tp: rig.clients["B"].last_mirrored_epoch("a-to-b", tp) for tp in rig.tps} == lme  # B's cluster keeps it

        # Failback: the reverse mirror on A asks B for the LME, and A is cut where B's copy ended.
        rig.create_mirror("A", "b-to-a", "B")
        rig.start_topics("A", "b-to-a")
        rig.wait("b-to-a MIRRORING", lambda: rig.all_in("A", "b-to-a", MirrorState.MIRRORING), 90)
        rig.wait("A in sync with B", lambda: rig.in_sync("B", "A"), 60)
        assert rig.log_problems("B", "A") == []
        truncated = {(tid, p): next(s.truncation_offset for s in runs[-1] if s.truncation_offset >= 0)
                     for (tid, p), runs in incarnations(changelog(rig, "A"), "b-to-a").items()}  # fmt: skip
        assert truncated == stop_offset and all(v > 0 for v in truncated.values()), (truncated, stop_offset)

        # Fail over to A again (B is written to meanwhile), then a-to-b is re-created on B under the
        # same name and started: a new membership, from UNKNOWN at state epoch 0, which asks A for
        # its LME and so cuts B exactly where A's copy of B ended.
        rig.stop_topics("A", "b-to-a")
        rig.wait("b-to-a STOPPED", lambda: rig.all_in("A", "b-to-a", MirrorState.STOPPED), 90)
        rig.wait("A writable", lambda: not any(rig.read_only("A").values()), 30)
        for name, n in rig.topics.items():
            produce(rig, "B", name, n, 2, "b-after-failback")
        a_stop_offset = stop_offsets(rig, "A", "b-to-a")
        rig.create_mirror("B", "a-to-b", "A")
        rig.start_topics("B", "a-to-b")
        rig.wait("a-to-b MIRRORING again", lambda: rig.all_in("B", "a-to-b", MirrorState.MIRRORING), 90)
        rig.wait("B in sync with A", lambda: rig.in_sync("A", "B"), 60)
        assert rig.log_problems("A", "B") == []
        runs = incarnations(changelog(rig, "B"), "a-to-b")
        assert len(runs) == len(rig.tps)
        for key, (first, second) in runs.items():
            assert first[-1].state is MirrorState.STOPPED and first[-1].state_epoch > 0, key
            assert second[0].previous_state is MirrorState.UNKNOWN, (key, second[0])
            assert fresh_start_problems(second) == [], (key, second)
            assert next(s.truncation_offset for s in second if s.truncation_offset >= 0) == a_stop_offset[key], key

        # Deleted, re-created and started at once with the worker up (the removal and the new
        # start may come in one batch of metadata): the old state is tombstoned before the start.
        rig.stop_topics("B", "a-to-b")
        rig.wait("a-to-b STOPPED again", lambda: rig.all_in("B", "a-to-b", MirrorState.STOPPED), 90)
        rig.cli("B", "--delete", "--mirror", "a-to-b")
        rig.create_mirror("B", "a-to-b", "A")
        rig.start_topics("B", "a-to-b")
        rig.wait("a-to-b MIRRORING a third time", lambda: rig.all_in("B", "a-to-b", MirrorState.MIRRORING), 90)
        for key, runs_of_key in incarnations(changelog(rig, "B"), "a-to-b").items():
            assert len(runs_of_key) == 3, (key, runs_of_key)
            assert fresh_start_problems(runs_of_key[2]) == [], (key, runs_of_key[2])

        # And deleted for good with its worker up: the tombstones follow the delete.
        rig.stop_topics("B", "a-to-b")
        rig.wait("a-to-b STOPPED a third time", lambda: rig.all_in("B", "a-to-b", MirrorState.STOPPED), 90)
        rig.cli("B", "--delete", "--mirror", "a-to-b")
        rig.wait("a-to-b tombstoned again", lambda: tombstoned(rig, "B", "a-to-b"), 60)
        assert "a-to-b" not in rig.cli("B", "--list")
        kept = latest(changelog(rig, "A"), "b-to-a")
        assert kept and all(v is not None for v in kept.values())  # the other cluster's mirror keeps its state
    finally:
        rig.close()


@pytest.mark.slow
def test_a_new_source_topic_matching_a_started_pattern_is_mirrored_and_a_stopped_one_is_not_rediscovered(
        broker: LocalBroker, tmp_path: Path) -> None:  # fmt: skip
    rig = Rig(tmp_path, broker.bootstrap, {"pay-eu": 1, "pay-us": 1, "orders": 1}, tick=0.1)
    try:
        rig.start()
        rig.spawn_worker("B")
        rig.create_mirror("B", "a-to-b", "A")
        rig.wait("source topics registered", lambda: "pay-eu" in _start(rig), 30)
        ids = dict(rig.ids)
        tp = {name: TopicPartition(tid, 0) for name, tid in ids.items()}
        rig.wait("pay-eu and pay-us MIRRORING", lambda: _states(rig, ids) == {
            "pay-eu": MirrorState.MIRRORING, "pay-us": MirrorState.MIRRORING}, 90)

        rig.cli("B", "--stop", "--mirror", "a-to-b", "--topics", "pay-us")
        rig.wait("pay-us STOPPED", lambda: _states(rig, ids).get("pay-us") is MirrorState.STOPPED, 60)

        # New topics on A: pay-new (2 partitions) matches, pay-internal is excluded.
        for name, n in (("pay-new", 2), ("pay-internal", 1)):
            ids[name] = rig.clients["A"].add_topic(name, n).topic_id
        produce(rig, "A", "pay-new", 2, 4, "new")
        produce(rig, "A", "pay-us", 1, 3, "after-stop")
        t0 = time.monotonic()
        rig.wait("pay-new MIRRORING", lambda: _states(rig, ids).get("pay-new") is MirrorState.MIRRORING, 60)
        discovered_in = time.monotonic() - t0
        new_tps = [TopicPartition(ids["pay-new"], p) for p in range(2)]
        rig.wait("pay-new copied", lambda: all(rig.clients["B"].list_offsets(t).leo == 4 for t in new_tps), 30)
        described = rig.cli("B", "--describe", "--mirror", "a-to-b")
        assert "pay-new" in described and "pay-internal" not in described and "orders" not in described

        # Two more refresh intervals (1 s each): the stopped topic stays stopped and detached from A.
        time.sleep(2.5)
        states = _states(rig, ids)
        assert states == {"pay-eu": MirrorState.MIRRORING, "pay-us": MirrorState.STOPPED,
                          "pay-new": MirrorState.MIRRORING}, states  # fmt: skip
        assert rig.clients["B"].list_offsets(tp["pay-us"]).leo < rig.clients["A"].list_offsets(tp["pay-us"]).leo
        b_topics = {t.name for t in rig.clients["B"].describe_topics()}
        assert "pay-internal" not in b_topics and "orders" not in b_topics
        print(f"pay-new MIRRORING {discovered_in:.1f}s after it was created on A")
    finally:
        rig.close()


def _start(rig: Rig) -> str:
    """``--start`` with a pattern, once the source's topics are registered (a regex selects
    registered topics only); returns the describe output."""
    from streams.demo.harness import run_cli

    code, text = run_cli(rig.endpoints["B"], "--start", "--mirror", "a-to-b", "--topics", ".*pay.*",
                         "--exclude", "pay-internal")  # fmt: skip
    return rig.cli("B", "--describe", "--mirror", "a-to-b") if code == 0 else ""


def _states(rig: Rig, ids: dict[str, uuid.UUID]) -> dict[str, MirrorState]:
    """Each topic's state (the state of all its partitions, if they agree) from B's changelog."""
    names = {tid: name for name, tid in ids.items()}
    by_topic: dict[str, set[MirrorState]] = {}
    for (mirror, tid, _), states in rig.history("B").items():
        if mirror == "a-to-b" and states:
            by_topic.setdefault(names.get(tid, str(tid)), set()).add(states[-1].state)
    return {name: next(iter(s)) if len(s) == 1 else MirrorState.UNKNOWN for name, s in by_topic.items()}
