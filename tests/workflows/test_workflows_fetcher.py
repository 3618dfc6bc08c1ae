"""The fetcher: pure decisions on fetch answers, and a byte budget per fetcher whatever the partition count."""

from __future__ import annotations

import uuid

from workflow_harness import World, all_in, prefix, run_until

from coordinator.partition_state import UNKNOWN_STATE
from coordinator.ports import Batch, EpochEndOffset, FetchResult, TopicPartition
from coordinator.states import DesiredState, MirrorState
from coordinator.workflows import commands as c
from coordinator.workflows.config import MirrorConfig
from coordinator.workflows.fetcher import FetchPosition, OutOfRange, decide_fetch, fetcher_of, round_order

TP = TopicPartition(uuid.UUID(int=1), 0)
CFG = MirrorConfig()
MIRRORING = UNKNOWN_STATE.with_(state=MirrorState.MIRRORING, state_epoch=1)


def _b(base, epoch, n=1):
    return Batch(base_offset=base, last_offset=base + n - 1, leader_epoch=epoch)


def _r(*batches, sle=0, diverging=None, log_start=0):
    return FetchResult(tuple(batches), 100, 100, log_start, sle, (), diverging)


def test_appends_and_bumps_proactively():
    d = decide_fetch(MIRRORING, TP, FetchPosition(10, 2, 0, 5), _r(_b(10, 2), _b(11, 3), sle=3), 0, CFG)
    assert d.state is MIRRORING
    assert d.commands == (c.AppendBatches(TP, (_b(10, 2), _b(11, 3))), c.BumpLeaderEpoch(TP, 13))


def test_batch_above_dle_is_held_back_and_fences():
    d = decide_fetch(MIRRORING, TP, FetchPosition(10, 2, 0, 20), _r(_b(10, 2), _b(11, 25), sle=25), 0, CFG)
    assert d.commands == (c.AppendBatches(TP, (_b(10, 2),)),)
    assert d.state.state is MirrorState.EPOCH_FENCING and d.state.epoch_target == 35


def test_out_of_range_below_log_start_and_above_leo():
    low = decide_fetch(MIRRORING, TP, FetchPosition(3, 1, 0, 20), OutOfRange(50, 90), 0, CFG)
    assert low.commands == (c.TruncateFullyAndStartAt(TP, 50),)
    high = decide_fetch(MIRRORING, TP, FetchPosition(95, 1, 0, 20), OutOfRange(50, 90), 0, CFG)
    assert high.commands == (c.TruncateTo(TP, 90),)


def test_divergence_follows_the_kafka_follower_rule():
    pos = FetchPosition(40, 7, 0, 20)
    same = decide_fetch(MIRRORING, TP, pos, _r(diverging=EpochEndOffset(5, 30)), 0, CFG, EpochEndOffset(5, 35))
    assert same.commands == (c.TruncateTo(TP, 30),)
    unknown = decide_fetch(MIRRORING, TP, pos, _r(diverging=EpochEndOffset(5, 30)), 0, CFG, EpochEndOffset(4, 25))
    assert unknown.commands == (c.TruncateTo(TP, 25),)
    empty = decide_fetch(MIRRORING, TP, pos, _r(diverging=EpochEndOffset(-1, -1), log_start=12), 0, CFG)
    assert empty.commands == (c.TruncateFullyAndStartAt(TP, 12),)


def test_log_start_inside_first_batch():
    d = decide_fetch(MIRRORING, TP, FetchPosition(7, None, 7, 20), _r(_b(5, 1, n=4)), 0, CFG)
    assert d.commands == (c.TruncateFullyAndStartAt(TP, 5), c.AppendBatches(TP, (_b(5, 1, n=4),)))


def test_rotation_and_fetcher_assignment_are_stable():
    tps = [TopicPartition(uuid.UUID(int=i), p) for i in range(3) for p in range(2)]
    assert round_order(tps, 2)[:2] == sorted(tps)[2:4]
    assert [fetcher_of(tp, 4) for tp in tps] == [fetcher_of(tp, 4) for tp in tps]


def test_fetch_memory_is_bounded_by_fetchers_times_budget_not_partitions():
    w = World("a", "b")
    a, b = w["a"], w["b"]
    topic = a.add_topic("many", partitions=60, replication_factor=1)
    payload = b"x" * 200
    for i in range(600):
        a.produce("many", i % 60, [(b"k", payload)])
    batch_size = a.partition(a.tp("many", 0)).leader_log.batches[0].size_in_bytes
    total = 600 * batch_size
    cfg = MirrorConfig(metadata_refresh_interval_ms=10**9, fetch_backoff_ms=0, num_fetchers=2,
                       fetch_response_max_bytes=2_000, fetch_partition_max_bytes=700)
    m = w.mirror("a", "b", cfg)
    m.set_desired(topic.topic_id, DesiredState.START)
    rounds = run_until(w, lambda: all_in(m, MirrorState.MIRRORING) and all(
        b.list_offsets(a.tp("many", p)).leo == 10 for p in range(60)), max_rounds=400)
    assert m.runner.peak_round_bytes <= cfg.fetch_response_max_bytes + batch_size
    assert all(m.runner.sessions), "both fetchers serve partitions"
    per_round = cfg.num_fetchers * (cfg.fetch_response_max_bytes + batch_size)
    assert rounds >= total // per_round, "the budget, not the partition count, paced the copy"
    for p in range(60):
        assert prefix(b, a.tp("many", p), 10**9) == prefix(a, a.tp("many", p), 10**9)
