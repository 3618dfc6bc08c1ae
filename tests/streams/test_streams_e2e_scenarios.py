"""Scenario tests of issue 11, in the style of the prototype's system tests (aiven/inkless,
``inkless-linking``, ``tests/kafkatest/tests/core/cluster_mirroring_test.py``).

Real processes: the session's noida-db broker, the cluster-model server (clusters A and B), B's
controller and a ``kip1279-worker``; every mirror command is ``kafka-cluster-mirrors`` run as a
process of its own, and A and B are read and written with the model's clients.

- ``stop_with_txns``: two transactions left open on A over one partition; the mirror reaches lag 0
  with them open; after ``--stop``, B's end offset is A's + 2 ABORT markers + 1 MIRROR_PID_RESET
  (+1 on a partition without transactions), ``read_committed`` on B reads what it reads on A once
  A aborts its open ones, and producers on B with the same transactional IDs commit.
- the last group offset sync: consumer- and share-group offsets committed on A after the last
  periodic sync reach B during STOPPING (a group active on B is left alone); with A unreachable
  the stop still ends, within ``stop.group.sync.timeout.ms``, and the worker logs the failed sync.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from worker_harness import Rig, history_problems

from clustermodel.client import ClusterClient
from clustermodel.records import batch_values, read_committed_values
from coordinator.ports import ControlType, GroupType, TopicPartition
from coordinator.states import MirrorState
from streams.brokers.noida import LocalBroker
from streams.demo.harness import log_batches

MIRROR = "my-mirror"
# The periodic metadata sync (groups among it) is due again only after this: within a test, the
# only syncs are a worker's first round and STOPPING's last one.
NO_PERIODIC_SYNC = "metadata.refresh.interval.ms=600000\n"

MakeRig = Callable[..., Rig]


@pytest.fixture
def make_rig(broker: LocalBroker, tmp_path: Path) -> Iterator[MakeRig]:
    """A started rig (model server, B's controller, one worker of B) whose CLI calls are processes."""
    rigs: list[Rig] = []

    def make(topics: dict[str, int], *, loglevel: str | None = None) -> Rig:
        rig = Rig(tmp_path, broker.bootstrap, topics, tick=0.1)
        rigs.append(rig)
        rig.cli_process = True
        rig.loglevel = loglevel or rig.loglevel
        rig.start(("B",))
        rig.spawn_worker("B")
        return rig

    try:
        yield make
    finally:
        for rig in rigs:
            rig.close()


def data_records(client: ClusterClient, tp: TopicPartition) -> list[bytes | None]:
    """What a read_uncommitted consumer reads: every data record, aborted ones too."""
    return [v for b in log_batches(client, tp) if not b.is_control for v in batch_values(b)]


def group_offsets(client: ClusterClient, *groups: str) -> dict[tuple[str, uuid.UUID, int], tuple[int, int]]:
    """(group, topic ID, partition) -> (committed offset, its leader epoch)."""
    return {(o.group_id, o.topic_id, o.partition): (o.offset, o.leader_epoch)
            for g in groups for o in client.group_offsets(g)}  # fmt: skip


def start_mirror(rig: Rig, extra: str = "") -> None:
    """Create and start ``MIRROR`` on B over every topic of the rig; wait until B has A's logs."""
    rig.create_mirror("B", MIRROR, "A", extra)
    rig.start_topics("B", MIRROR)
    rig.wait("every partition MIRRORING", lambda: rig.all_in("B", MIRROR, MirrorState.MIRRORING), 60)
    rig.wait("B to match A", lambda: rig.in_sync("A", "B"), 60)


def stop_mirror(rig: Rig) -> float:
    """``--stop --wait``: returns once every partition is STOPPED (the seconds it took), B writable."""
    t0 = time.monotonic()
    out = rig.cli("B", "--stop", "--mirror", MIRROR, "--topics", ",".join(rig.topics), "--wait", "60")
    took = time.monotonic() - t0
    assert all(r["state"] == "STOPPED" for r in rig.describe("B", MIRROR)), out
    rig.wait("B's topics writable", lambda: not any(rig.read_only("B").values()), 30)
    return took


class Txn:
    """A transactional producer on one cluster of the model (TransactionalTestProducer's modes)."""

    def __init__(self, client: ClusterClient, transactional_id: str, topic: str, partition: int) -> None:
        self.client, self.id, self.topic, self.partition = client, transactional_id, topic, partition
        client.init_producer_id(transactional_id)  # fences an older producer of the ID

    def send(self, value: bytes) -> Txn:
        self.client.begin_transaction(self.id)
        self.client.produce_transactional(self.id, self.topic, self.partition, [(None, value)])
        return self

    def commit(self) -> None:
        self.client.commit_transaction(self.id)

    def abort(self) -> None:
        self.client.abort_transaction(self.id)


@pytest.mark.slow
def test_stop_with_txns_aborts_exactly_the_open_ones_and_b_takes_new_transactions(make_rig: MakeRig) -> None:
    topic = "my-topic"
    rig = make_rig({topic: 2})
    a, b = rig.clients["A"], rig.clients["B"]
    txp, plain_tp = rig.tps

    # The prototype's send_interleaving_txns, on partition 0: a commits (before and after a leader
    # change), c aborts, d is fenced by a new producer of its ID (its first transaction aborted),
    # b and the new d stay open. Partition 1 has plain records only.
    Txn(a, f"{topic}-a", topic, 0).send(b"a-0").commit()
    a.elect_leader(topic, 0)  # the prototype bounces the source: the rest comes in a later leader epoch
    txn_a = Txn(a, f"{topic}-a", topic, 0).send(b"a-1")
    a.produce(topic, 0, [(None, b"plain-0")])
    Txn(a, f"{topic}-b", topic, 0).send(b"b-0")
    Txn(a, f"{topic}-d", topic, 0).send(b"d-0")
    txn_c = Txn(a, f"{topic}-c", topic, 0).send(b"c-0")
    Txn(a, f"{topic}-d", topic, 0).send(b"d-1")
    a.produce(topic, 0, [(None, b"plain-1")])
    txn_a.commit()
    txn_c.abort()
    a.produce(topic, 1, [(None, f"p1-{i}".encode()) for i in range(3)])
    committed = [b"a-0", b"a-1", b"plain-0", b"plain-1"]
    assert len(a.open_transactions(txp)) == 2 and a.open_transactions(plain_tp) == []  # count_ongoing_txns == 2

    # Mirrored to A's HW with both transactions open: lag 0, read_committed the same on both.
    start_mirror(rig)
    rows = rig.describe("B", MIRROR)
    assert {r["lag"] for r in rows} == {0} and all(r["state"] == "MIRRORING" for r in rows), rows
    assert [(o.producer_id, o.first_offset) for o in b.open_transactions(txp)] == \
        [(o.producer_id, o.first_offset) for o in a.open_transactions(txp)]  # fmt: skip
    for tp in rig.tps:
        assert read_committed_values(b, tp) == read_committed_values(a, tp), tp
    open_on_a = {(o.producer_id, o.producer_epoch) for o in a.open_transactions(txp)}
    a_end = {tp: a.list_offsets(tp).hw for tp in rig.tps}

    stop_mirror(rig)
    b_end = {tp: b.list_offsets(tp) for tp in rig.tps}
    assert all(o.leo == o.hw for o in b_end.values()), b_end
    assert b_end[txp].hw == a_end[txp] + 2 + 1, (a_end, b_end)  # 2 ABORT markers + 1 MIRROR_PID_RESET
    assert b_end[plain_tp].hw == a_end[plain_tp] + 1, (a_end, b_end)  # the PID reset only
    tail = [x for x in log_batches(b, txp) if x.base_offset >= a_end[txp]]
    assert [x.control_type for x in tail] == [ControlType.ABORT, ControlType.ABORT, ControlType.MIRROR_PID_RESET]
    assert {(x.producer_id, x.producer_epoch) for x in tail[:2]} == open_on_a
    assert b.open_transactions(txp) == [] and b_end[txp].lso == b_end[txp].hw
    assert read_committed_values(b, txp) == committed
    assert rig.log_problems("A", "B", offsets=False) == []  # A's batches, leader epochs too, below A's HW

    # A's transaction coordinator aborts its open ones in time (transaction.timeout.ms): then
    # read_committed reads the same on A as on B, whose log is one batch (the PID reset) longer.
    for tid in a.open_transactional_ids():
        a.abort_transaction(tid)
    for tp in rig.tps:
        assert read_committed_values(a, tp) == read_committed_values(b, tp), tp
        assert b.list_offsets(tp).hw == a.list_offsets(tp).hw + 1, tp

    # Producers on B with the transactional IDs left open on A commit new transactions there.
    Txn(b, f"{topic}-b", topic, 0).send(b"b-new").commit()
    Txn(b, f"{topic}-d", topic, 0).send(b"d-new").commit()
    source_count, dest_count = len(data_records(a, txp)), len(data_records(b, txp))
    assert dest_count == source_count + 2, (source_count, dest_count)
    # b-0, c-0, d-0 (fenced) and d-1 (open at the stop) are aborted on B
    assert len(read_committed_values(b, txp)) == dest_count - 4
    assert read_committed_values(b, txp) == [*committed, b"b-new", b"d-new"]
    assert b.open_transactions(txp) == [] and b.list_offsets(txp).lso == b.list_offsets(txp).hw
    assert history_problems(rig.history("B")) == []


@pytest.mark.slow
def test_the_last_group_offset_sync_carries_consumer_and_share_group_offsets_committed_since_the_periodic_one(
        make_rig: MakeRig) -> None:  # fmt: skip
    rig = make_rig({"orders": 2}, loglevel="info")
    a, b = rig.clients["A"], rig.clients["B"]
    for p in range(2):
        a.produce("orders", p, [(None, f"r-{p}-{i}".encode()) for i in range(12)])
    groups = {"my-group": GroupType.CONSUMER, "my-share-group": GroupType.SHARE}
    everyone = {**groups, "my-active-group": GroupType.CONSUMER}  # a consumer of it runs on B by the stop
    for group, kind in everyone.items():
        for p in range(2):
            a.commit_offset(group, "orders", p, 6, group_type=kind)
    start_mirror(rig, NO_PERIODIC_SYNC)

    # The periodic sync: a worker's first round does one. Restarted, the worker runs one with the
    # partitions MIRRORING; the next is ten minutes away.
    rig.leave_worker("worker-B")
    rig.spawn_worker("B")
    rig.wait("the periodic sync to bring 6 to B",
             lambda: group_offsets(b, *everyone) == group_offsets(a, *everyone), 60)  # fmt: skip
    synced = group_offsets(b, *everyone)
    assert {off for off, _ in synced.values()} == {6} and len(synced) == 2 * len(everyone)

    # Consumers go on on A after that sync; B does not see it before the stop. A consumer of
    # my-active-group starts on B: its group is B's own from now on.
    b.join_group("my-active-group", "consumer-on-b")
    for group, kind in everyone.items():
        a.commit_offset(group, "orders", 0, 11, group_type=kind)
        a.commit_offset(group, "orders", 1, 9, group_type=kind)
    latest = group_offsets(a, *groups)
    assert group_offsets(b, *everyone) == synced

    stop_mirror(rig)
    assert group_offsets(b, *groups) == latest
    # skipped, as a periodic sync skips a group active on the destination: B keeps its own offsets
    assert group_offsets(b, "my-active-group") == {k: v for k, v in synced.items() if k[0] == "my-active-group"}
    assert {g.group_id: g.group_type for g in b.list_groups() if g.group_id in groups} == groups
    ran = re.findall(rf"mirror {MIRROR}: last group offset sync before the stop ran for (\d+) partition\(s\) of orders",
                     rig.worker_log("worker-B"))  # fmt: skip
    assert sum(map(int, ran)) == len(rig.tps), ran  # once per partition (one line per table partition's round)
    assert history_problems(rig.history("B")) == []


@pytest.mark.slow
def test_a_stop_with_the_source_dead_ends_within_the_group_sync_bound_and_logs_the_failed_sync(
        make_rig: MakeRig) -> None:  # fmt: skip
    bound_ms = 4000  # above the default (3000): a stop that ends after it honoured the setting
    rig = make_rig({"orders": 2})
    a, b = rig.clients["A"], rig.clients["B"]
    for p in range(2):
        a.produce("orders", p, [(None, f"r-{p}-{i}".encode()) for i in range(8)])
        a.commit_offset("my-group", "orders", p, 5)
    start_mirror(rig, NO_PERIODIC_SYNC + f"stop.group.sync.timeout.ms={bound_ms}\n")
    a.commit_offset("my-group", "orders", 0, 8)

    a.set_unreachable(True)
    took = stop_mirror(rig)
    assert took < bound_ms / 1000 + 20, took

    # Per partition, from B's changelog: STOPPING began, the last sync was tried until the bound,
    # then STOPPED, a few rounds later at most.
    history = rig.history("B")
    assert history_problems(history) == []
    for key, states in history.items():
        stopping = next(s for s in states if s.state is MirrorState.STOPPING)
        stopped = states[-1]
        assert stopped.state is MirrorState.STOPPED, (key, stopped)
        waited = stopped.entered_at_ms - stopping.entered_at_ms
        assert bound_ms <= waited < bound_ms + 8000, (key, waited)
    log = rig.worker_log("worker-B")
    assert "last group offset sync before the stop failed" in log and "stop.group.sync.timeout.ms" in log, log[-3000:]
    assert all(off != 8 for off, _ in group_offsets(b, "my-group").values())  # A's last commit did not make it
