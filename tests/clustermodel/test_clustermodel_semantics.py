"""The model against Kafka's documented semantics: HW, LSO, LEO, epochs, elections, retention, transactions."""

from __future__ import annotations

import pytest

from clustermodel import ClusterModel, batch_values, filter_aborted
from clustermodel.producers import InvalidProducerEpoch, OutOfOrderSequence
from clustermodel.reference_fetcher import mirror_partition
from coordinator.ports import (
    ControlType,
    EpochEndOffset,
    FencedLeaderEpoch,
    IsolationLevel,
    NotLeader,
    OffsetOutOfRange,
    ReadOnlyTopic,
    SourceUnavailable,
    UnknownLeaderEpoch,
)

RC = IsolationLevel.READ_COMMITTED
RU = IsolationLevel.READ_UNCOMMITTED


def recs(*values: bytes) -> list[tuple[bytes | None, bytes | None]]:
    return [(None, v) for v in values]


@pytest.fixture
def model() -> ClusterModel:
    m = ClusterModel("src", seed=11)
    m.add_topic("t", partitions=1, configs={"unclean.leader.election.enable": "true"})
    return m


def test_hw_waits_for_the_isr_and_moves_when_a_laggard_is_dropped(model: ClusterModel) -> None:
    tp = model.tp("t")
    part = model.partition(tp)
    laggard = part.replicas[2]
    model.set_follower_stalled(laggard, True)
    model.produce("t", 0, recs(b"a", b"b", b"c"))
    offs = model.list_offsets(tp)
    assert (offs.leo, offs.hw) == (3, 0)  # the stalled follower is still in the ISR
    model.tick(20_000)
    assert model.list_offsets(tp).hw == 0
    model.tick(11_000)  # past replica.lag.time.max.ms: the ISR shrinks, HW = min LEO over the ISR
    assert laggard not in part.isr
    assert model.list_offsets(tp).hw == 3
    model.set_follower_stalled(laggard, False)
    model.tick(1)
    assert laggard in part.isr and part.logs[laggard].leo == 3


def test_lso_held_by_open_transaction_and_by_unreplicated_marker(model: ClusterModel) -> None:
    tp = model.tp("t")
    model.produce("t", 0, recs(b"a", b"b"))
    model.init_producer_id("tx")
    model.begin_transaction("tx")
    model.produce_transactional("tx", "t", 0, recs(b"t1", b"t2"))
    offs = model.list_offsets(tp)
    assert (offs.lso, offs.hw, offs.leo) == (2, 4, 4)
    assert [(o.first_offset) for o in model.open_transactions(tp)] == [2]
    # read_committed stops at the LSO, read_uncommitted at the HW.
    assert model.fetch(tp, 0, 1 << 20, RC).batches[-1].last_offset == 1
    assert model.fetch(tp, 0, 1 << 20, RU).batches[-1].last_offset == 3
    # The commit marker is written but a stalled ISR member keeps it above the HW: LSO still held.
    laggard = model.partition(tp).replicas[1]
    model.set_follower_stalled(laggard, True)
    model.commit_transaction("tx")
    offs = model.list_offsets(tp)
    assert offs.leo == 5 and offs.hw == 4 and offs.lso == 2
    model.set_follower_stalled(laggard, False)
    model.tick(1)
    offs = model.list_offsets(tp)
    assert offs.hw == offs.lso == offs.leo == 5


def test_end_offset_for_epoch_across_elections(model: ClusterModel) -> None:
    tp = model.tp("t")
    model.produce("t", 0, recs(b"a", b"b", b"c"))
    model.elect_leader("t", 0)  # epoch 1 starts at 3
    model.produce("t", 0, recs(b"d", b"e"))
    model.elect_leader("t", 0)  # epoch 2 starts at 5
    model.produce("t", 0, recs(b"f"))
    assert model.end_offset_for_epoch(tp, 0) == EpochEndOffset(0, 3)
    assert model.end_offset_for_epoch(tp, 1) == EpochEndOffset(1, 5)
    assert model.end_offset_for_epoch(tp, 2) == EpochEndOffset(2, 6)
    assert model.end_offset_for_epoch(tp, 3).undefined
    with pytest.raises(FencedLeaderEpoch):
        model.end_offset_for_epoch(tp, 0, current_leader_epoch=1)
    with pytest.raises(UnknownLeaderEpoch):
        model.fetch(tp, 0, 100, current_leader_epoch=7)


def test_clean_election_loses_no_committed_data(model: ClusterModel) -> None:
    tp = model.tp("t")
    for i in range(5):
        model.produce("t", 0, recs(b"v%d" % i))
    hw_before = model.list_offsets(tp).hw
    committed = model.fetch(tp, 0, 1 << 20, RU).batches
    model.elect_leader("t", 0)
    model.elect_leader("t", 0)
    assert model.list_offsets(tp).hw == hw_before
    assert model.fetch(tp, 0, 1 << 20, RU).batches == committed
    part = model.partition(tp)
    assert {log.leo for log in part.logs.values()} == {5}


def unclean_divergence(model: ClusterModel) -> tuple[int, int]:
    """Old leader holds offsets 0..2 in epoch 0; an out-of-sync replica is elected uncleanly and
    writes offsets 0..1 in epoch 1. Returns (old leader, new leader)."""
    tp = model.tp("t")
    part = model.partition(tp)
    old, other, laggard = part.replicas
    model.set_follower_stalled(laggard, True)
    model.produce("t", 0, recs(b"a", b"b", b"c"))
    model.tick(31_000)
    assert laggard not in part.isr
    model.crash_broker(other)
    model.crash_broker(old)
    assert not part.online or part.leader == laggard  # unclean allowed by config: may already be elected
    if not part.online:
        model.elect_leader("t", 0, laggard, unclean=True)
    model.set_follower_stalled(laggard, False)
    assert part.leader == laggard
    model.produce("t", 0, recs(b"X", b"Y"))
    return old, laggard


def test_unclean_election_divergence_resolved_by_follower_truncation(model: ClusterModel) -> None:
    tp = model.tp("t")
    part = model.partition(tp)
    old, new = unclean_divergence(model)
    assert [b.leader_epoch for b in part.logs[old].batches] == [0]
    model.restart_broker(old)
    model.tick(1)
    # The old leader asked for the end of epoch 0, got 0 from the new leader, truncated, and copied.
    assert part.logs[old].batches == part.logs[new].batches
    assert batch_values(part.logs[old].batches[0]) == [b"X", b"Y"]
    assert part.logs[old].epochs.entries() == part.logs[new].epochs.entries()


def test_mirror_truncate_and_refetch_converge_after_source_unclean_election(model: ClusterModel) -> None:
    dst = ClusterModel("dst", seed=12)
    tp = model.tp("t")
    dst.create_topic("t", tp.topic_id, 1, mirror_name="a-to-b", mirror_source_cluster_id=model.cluster_id())
    part = model.partition(tp)
    laggard = part.replicas[2]
    model.set_follower_stalled(laggard, True)
    model.produce("t", 0, recs(b"p", b"q"))
    model.tick(31_000)
    assert mirror_partition(model, dst, tp) == 2
    # Now the source loses offsets 0..1 to an unclean election and writes new data there.
    model.crash_broker(part.replicas[0])
    model.crash_broker(part.replicas[1])
    # unclean.leader.election.enable: the out-of-sync replica became leader on the second crash.
    assert part.leader == laggard and part.logs[laggard].leo == 0
    model.set_follower_stalled(laggard, False)
    model.produce("t", 0, recs(b"N1", b"N2", b"N3"))
    assert mirror_partition(model, dst, tp) == 3
    src_batches = model.fetch(tp, 0, 1 << 20, RC).batches
    assert dst.fetch(tp, 0, 1 << 20, RU).batches == src_batches
    assert dst.list_offsets(tp).leader_epoch >= model.list_offsets(tp).leader_epoch


def test_retention_moves_log_start_and_pushes_fetch_out_of_range(model: ClusterModel) -> None:
    tp = model.tp("t")
    model.set_topic_config("t", "retention.ms", "1000")
    model.produce("t", 0, recs(b"old1"))
    model.produce("t", 0, recs(b"old2"))
    model.tick(5_000)
    model.produce("t", 0, recs(b"new"))
    model.tick(300_000)  # the retention check interval passes
    offs = model.list_offsets(tp)
    assert offs.log_start == 3 or offs.log_start == offs.hw
    with pytest.raises(OffsetOutOfRange) as info:
        model.fetch(tp, 0, 1 << 20)
    assert info.value.log_start == offs.log_start
    assert model.fetch(tp, offs.log_start, 1 << 20).log_start == offs.log_start


def test_retention_never_passes_the_hw(model: ClusterModel) -> None:
    tp = model.tp("t")
    model.set_topic_config("t", "retention.ms", "10")
    model.set_follower_stalled(model.partition(tp).replicas[1], True)
    model.produce("t", 0, recs(b"a"))
    model.tick(100)
    model.run_retention()
    assert model.list_offsets(tp).log_start == 0  # HW is still 0


def test_read_committed_reports_aborted_transactions(model: ClusterModel) -> None:
    tp = model.tp("t")
    model.init_producer_id("tx")
    model.produce("t", 0, recs(b"plain"))
    model.begin_transaction("tx")
    model.produce_transactional("tx", "t", 0, recs(b"bad1"))
    model.produce_transactional("tx", "t", 0, recs(b"bad2"))
    model.abort_transaction("tx")
    model.begin_transaction("tx")
    model.produce_transactional("tx", "t", 0, recs(b"good"))
    model.commit_transaction("tx")
    result = model.fetch(tp, 0, 1 << 20, RC)
    pid = result.batches[1].producer_id
    assert [(a.producer_id, a.first_offset) for a in result.aborted_transactions] == [(pid, 1)]
    # The data is not filtered (a mirror copies it); a read_committed consumer filters it.
    kinds = [b.control_type for b in result.batches]
    assert kinds == [None, None, None, ControlType.ABORT, None, ControlType.COMMIT]
    delivered = [v for b in filter_aborted(result.batches, result.aborted_transactions) for v in batch_values(b)]
    assert delivered == [b"plain", b"good"]
    assert model.fetch(tp, 4, 1 << 20, RC).aborted_transactions == ()


def test_producer_state_rebuilt_after_truncation(model: ClusterModel) -> None:
    tp = model.tp("t")
    model.produce("t", 0, recs(b"a", b"b"))
    ident = model.init_producer_id("tx")
    model.begin_transaction("tx")
    model.produce_transactional("tx", "t", 0, recs(b"t1"))  # 2
    model.produce_transactional("tx", "t", 0, recs(b"t2"))  # 3
    model.commit_transaction("tx")  # marker at 4
    model.begin_transaction("tx")
    model.produce_transactional("tx", "t", 0, recs(b"u1"))  # 5, open
    assert [o.first_offset for o in model.open_transactions(tp)] == [5]
    model.truncate_to(tp, 5)
    assert model.open_transactions(tp) == []
    assert model.list_offsets(tp).lso == 5
    model.truncate_to(tp, 4)  # the commit marker is gone: the transaction is open again
    opened = model.open_transactions(tp)
    assert [(o.producer_id, o.first_offset) for o in opened] == [(ident.producer_id, 2)]
    offs = model.list_offsets(tp)
    assert (offs.lso, offs.hw, offs.leo) == (2, 4, 4)
    for log in model.partition(tp).logs.values():  # followers truncated and rebuilt the same state
        assert log.leo == 4 and log.open_transactions() == opened
    model.truncate_to(tp, 1)  # a batch straddling the offset goes whole: the LEO lands on its base
    assert model.list_offsets(tp).leo == 0 and model.open_transactions(tp) == []


def test_idempotent_producer_dedupes_and_orders() -> None:
    m = ClusterModel("p", seed=3)
    m.add_topic("t")
    ident = m.init_producer_id()
    first = m.produce("t", 0, recs(b"a"), ident.producer_id, 0, 0)
    again = m.produce("t", 0, recs(b"a"), ident.producer_id, 0, 0)  # a retried batch
    assert again == first and m.list_offsets(m.tp("t")).leo == 1
    with pytest.raises(OutOfOrderSequence):
        m.produce("t", 0, recs(b"c"), ident.producer_id, 0, 5)
    txn = m.init_producer_id("x")
    m.begin_transaction("x")
    m.produce_transactional("x", "t", 0, recs(b"z"))
    m.init_producer_id("x")  # re-init fences the old epoch and aborts its transaction
    assert m.open_transactions(m.tp("t")) == []
    with pytest.raises(InvalidProducerEpoch):
        m.produce("t", 0, recs(b"late"), txn.producer_id, 0, 1, transactional=True)


def test_compaction_leaves_offset_gaps_that_a_mirror_copies() -> None:
    src = ClusterModel("src", seed=5)
    src.add_topic("c", configs={"cleanup.policy": "compact"})
    for k, v in [(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"c", b"1"), (b"b", b"2")]:
        src.produce("c", 0, [(k, v)])
    src.produce("c", 0, [(b"z", b"tail")])
    assert src.compact("c") == 2
    tp = src.tp("c")
    bases = [b.base_offset for b in src.fetch(tp, 0, 1 << 20).batches]
    assert bases == [2, 3, 4, 5]  # offsets 0 and 1 compacted away
    with pytest.raises(OffsetOutOfRange):
        src.fetch(tp, 9, 100)
    assert src.fetch(tp, 0, 1 << 20).batches[0].base_offset == 2  # a fetch into a gap returns the next batch
    dst = ClusterModel("dst", seed=6)
    dst.create_topic("c", tp.topic_id, 1)
    assert mirror_partition(src, dst, tp) == 6
    assert [b.base_offset for b in dst.fetch(tp, 0, 1 << 20).batches] == bases


def test_mirror_topic_epochs_come_from_batches_and_stop_sequence(model: ClusterModel) -> None:
    tp = model.tp("t")
    model.produce("t", 0, recs(b"a"))
    model.elect_leader("t", 0)
    model.produce("t", 0, recs(b"b"))
    dst = ClusterModel("dst", seed=7)
    dst.create_topic("t", tp.topic_id, 1, mirror_name="a-to-b")
    with pytest.raises(ReadOnlyTopic):
        dst.produce("t", 0, recs(b"local"))
    batches = model.fetch(tp, 0, 1 << 20).batches
    with pytest.raises(UnknownLeaderEpoch):  # batch epoch 1 > DLE 0: the coordinator must bump first
        dst.append_mirror_batches(tp, batches)
    assert dst.bump_leader_epoch(tp, 10) == 10
    assert dst.bump_leader_epoch(tp, 3) == 10  # idempotent
    dst.append_mirror_batches(tp, batches)
    leader_log = dst.partition(tp).leader_log
    assert leader_log.epochs.entries() == [(0, 0), (1, 1)]  # source batch epochs, not the DLE
    # Stop (failover): LME, bump, ABORT open transactions, PID reset, then writable.
    dst.set_last_mirrored_epoch("a-to-b", tp, dst.latest_epoch(tp))
    dst.bump_leader_epoch(tp, 11)
    reset = dst.append_control_batch(tp, ControlType.MIRROR_PID_RESET, source_cluster_id=model.cluster_id())
    assert reset.leader_epoch == 11 and reset.base_offset == 2
    dst.set_read_only(tp.topic_id, False)
    local = dst.produce("t", 0, recs(b"local"))
    assert local.leader_epoch == 11
    assert dst.end_offset_for_epoch(tp, 1) == EpochEndOffset(1, 2)
    assert dst.last_mirrored_epoch("a-to-b", tp) == 1


def test_faults_unreachable_flapping_failure_rate_and_leader_change(model: ClusterModel) -> None:
    tp = model.tp("t")
    model.produce("t", 0, recs(b"a"))
    model.set_unreachable(True)
    with pytest.raises(SourceUnavailable):
        model.list_offsets(tp)
    model.produce("t", 0, recs(b"still local"))  # the cluster itself keeps working
    model.set_unreachable(False)
    model.set_flapping(1000, 500)
    model.list_offsets(tp)
    model.tick(1200)
    with pytest.raises(SourceUnavailable):
        model.list_offsets(tp)
    model.tick(400)
    model.list_offsets(tp)
    model.clear_faults()
    epoch = model.list_offsets(tp).leader_epoch
    model.change_leader_on_next_fetch("t", 0)
    with pytest.raises(NotLeader):
        model.fetch(tp, 0, 100, current_leader_epoch=epoch)
    with pytest.raises(FencedLeaderEpoch):
        model.fetch(tp, 0, 100, current_leader_epoch=epoch)
    assert model.fetch(tp, 0, 100, current_leader_epoch=epoch + 1).batches
    model.set_failure_rate(0.5)
    outcomes = []
    for _ in range(40):
        try:
            model.cluster_id()
            outcomes.append(True)
        except SourceUnavailable:
            outcomes.append(False)
    assert 5 < sum(outcomes) < 35


def test_slow_link_costs_logical_time(model: ClusterModel) -> None:
    model.set_slow(250)
    before = model.now()
    model.cluster_id()
    assert model.now() == before + 250


def test_crash_without_eligible_replica_takes_partition_offline() -> None:
    m = ClusterModel("c", seed=1)
    m.add_topic("t")
    tp = m.tp("t")
    part = m.partition(tp)
    for b in part.replicas:
        m.crash_broker(b)
    with pytest.raises(NotLeader):
        m.list_offsets(tp)
    last = part.isr[0]
    other = next(b for b in part.replicas if b != last)
    m.restart_broker(other)  # not the last ISR member: still offline (no unclean election)
    assert not part.online
    m.restart_broker(last)
    assert part.leader == last and m.list_offsets(tp).leader_epoch >= 1


def test_determinism_replay_and_snapshot_roundtrip(tmp_path: object) -> None:
    from pathlib import Path

    from clustermodel.workload import Workload

    def run() -> ClusterModel:
        m = ClusterModel("d", seed=99)
        m.add_topic("t", partitions=2)
        Workload(m, ["t"], seed=4, election_rate=0.1, records_per_s=500).run(3000)
        return m

    a, b = run(), run()
    assert a.snapshot() == b.snapshot()
    replayed = ClusterModel.replay(a.steps, name="d", seed=99)
    assert replayed.snapshot() == a.snapshot()
    path = Path(str(tmp_path)) / "model.msgpack"
    a.save(path)
    loaded = ClusterModel.load(path)
    assert loaded.snapshot() == a.snapshot()
    for p in range(2):
        tp = a.tp("t", p)
        assert loaded.fetch(tp, 0, 1 << 20, RU) == a.fetch(tp, 0, 1 << 20, RU)
        assert loaded.list_offsets(tp) == a.list_offsets(tp)
        assert loaded.open_transactions(tp) == a.open_transactions(tp)
    assert "ClusterModel(name='d', seed=99" in a.format_repro()


def test_follower_with_an_empty_leader_epoch_still_finds_divergence() -> None:
    """Regression (found by the stateful test): a follower that led an epoch without appending
    keeps that epoch's entry at its LEO; Kafka trims it on a no-op truncation, else the follower
    never learns its log diverged from the new leader's."""
    m = ClusterModel("ep", seed=2)
    m.add_topic("t")
    tp = m.tp("t")
    part = m.partition(tp)
    f, x, _ = part.replicas  # f leads first
    m.produce("t", 0, recs(b"0"))
    m.produce("t", 0, recs(b"1"))
    m.set_follower_stalled(x, True)
    m.produce("t", 0, recs(b"2 old"))
    m.produce("t", 0, recs(b"3 old"))
    m.set_follower_stalled(f, True)
    m.elect_leader("t", 0, x)  # epoch 1 from offset 2: offsets 2..3 above the HW are lost
    m.produce("t", 0, recs(b"2 new"))
    m.elect_leader("t", 0, f)  # epoch 2 assigned at f's LEO 4, nothing appended
    m.elect_leader("t", 0, x)  # epoch 3
    m.set_follower_stalled(f, False)
    m.tick(1)
    assert part.logs[f].batches == part.logs[x].batches
    assert [v for b in part.logs[f].batches for v in batch_values(b)] == [b"0", b"1", b"2 new"]


def test_pid_reset_on_a_partition_without_producers_builds_no_producer_state() -> None:
    """A mass stop resets every partition; most never saw a producer. The reset clears producers,
    so where there are none it changes nothing and builds no producer state (on any replica),
    and producers writing after it behave exactly as after a reset of an existing state."""
    fresh, used = ClusterModel("fresh", seed=12), ClusterModel("used", seed=12)
    for dst in (fresh, used):
        dst.add_topic("t", 1)
    tp_f, tp_u = fresh.tp("t"), used.tp("t")
    # ``used`` has producer state before its reset (an idempotent producer wrote and was reset away).
    pid = used.init_producer_id()
    used.produce_idempotent(pid.producer_id, pid.producer_epoch, "t", 0, recs(b"x"))
    fresh.produce("t", 0, recs(b"x"))
    for dst, tp in ((fresh, tp_f), (used, tp_u)):
        dst.append_control_batch(tp, ControlType.MIRROR_PID_RESET, source_cluster_id="src-id")
    assert all(log.producers is None for log in fresh.partition(tp_f).logs.values())
    # Afterwards both partitions take the same transactional writes the same way.
    for dst, tp in ((fresh, tp_f), (used, tp_u)):
        dst.init_producer_id("txn")
        dst.begin_transaction("txn")
        dst.produce_transactional("txn", "t", 0, recs(b"y"))
        assert [t.first_offset for t in dst.open_transactions(tp)] == [2]
        assert dst.list_offsets(tp).lso == 2
        dst.abort_transaction("txn")
        assert dst.open_transactions(tp) == [] and dst.list_offsets(tp).lso == 4
        assert [a.first_offset for a in dst.fetch(tp, 0, 1 << 20).aborted_transactions] == [2]
