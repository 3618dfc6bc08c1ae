"""A dead source is visible and retried (issue 11, section 3).

A source that cannot serve a partition (unreachable, every broker down) for
source.unavailable.timeout.ms sends it to FAILED with the error and its RetryAttempt; until then
the partition stays as it is. Each retry first asks the source, so an outage costs one state
write per retry attempt, at the mirror's backoff. Once the source answers, the partitions go
back to MIRRORING by themselves and the destination ends with exactly the source's batches.
A failover needs nothing from the source. Leadership moving on the source, a source flapping
faster than the timeout and a destination outage do not fail partitions.
"""

from __future__ import annotations

import uuid

import pytest
from workflow_harness import FAST, World, all_in, batches, committed_values, prefix, run_until, shape, states_of

from coordinator.partition_state import NON_RETRYABLE, MirrorPartitionState
from coordinator.ports import FencedLeaderEpoch, NotLeader, SourceUnavailable, TopicPartition, UnknownTopicId
from coordinator.retry import backoff_ms, source_failed, source_retry_backoff_ms
from coordinator.states import DesiredState, ErrorCode, MirrorState
from coordinator.workflows.config import MirrorConfig

PARTITIONS = 2
# Half a second of grace before FAILED (5 rounds of 100 ms); retries at 100 ms doubling to 200 ms.
GRACE = MirrorConfig(metadata_refresh_interval_ms=0, fetch_backoff_ms=0, failed_retry_initial_backoff_ms=100,
                     failed_retry_max_backoff_ms=1_000, source_unavailable_timeout_ms=500, retry_backoff_ms=100,
                     retry_backoff_max_ms=200)  # fmt: skip


def _mirroring(worker: bool = False, config: MirrorConfig = FAST):
    w = World("a", "b", worker=worker)
    topic = w["a"].add_topic("o", partitions=PARTITIONS)
    for i in range(10):
        w["a"].produce("o", i % PARTITIONS, [(b"k", f"v{i}".encode())])
    m = w.mirror("a", "b", config)
    m.set_desired(topic.topic_id, DesiredState.START)
    run_until(w, lambda: all_in(m, MirrorState.MIRRORING))
    tps = [w["a"].tp("o", p) for p in range(PARTITIONS)]
    run_until(w, lambda: all(w["b"].list_offsets(tp).leo == w["a"].list_offsets(tp).leo for tp in tps))
    return w, topic, m, tps


def _same_logs(w: World, tps: list[TopicPartition]) -> None:
    a, b = w["a"], w["b"]
    for tp in tps:
        assert b.list_offsets(tp).leo == a.list_offsets(tp).leo, tp
        assert shape(batches(b, tp)) == shape(batches(a, tp)), f"{tp}: nothing lost, nothing twice"
        assert committed_values(b, tp) == committed_values(a, tp), tp


@pytest.mark.parametrize("worker", [False, True], ids=["runner", "worker-store"])
def test_unreachable_source_fails_partitions_retries_at_backoff_and_recovers(worker):
    w, topic, m, tps = _mirroring(worker, GRACE)
    a = w["a"]
    epochs = {tp: m.runner.state(tp).state_epoch for tp in tps}
    a.set_unreachable(True)
    w.step()
    went_down = w.now - 100
    # Within source.unavailable.timeout.ms the partitions keep mirroring (retried, nothing written),
    # then FAILED at the next retry (one backoff later at most).
    while w.now - went_down < GRACE.source_unavailable_timeout_ms:
        assert all_in(m, MirrorState.MIRRORING), (w.now - went_down, states_of(m))
        assert {tp: m.runner.state(tp).state_epoch for tp in tps} == epochs
        w.step()
    run_until(w, lambda: all_in(m, MirrorState.FAILED), max_rounds=GRACE.retry_backoff_max_ms // 100 + 1)
    for tp in tps:
        s = m.runner.state(tp)
        assert s.state is MirrorState.FAILED and s.previous_state is MirrorState.MIRRORING
        assert s.error_code is ErrorCode.NETWORK_EXCEPTION and s.retry_attempt == 0
        assert "unreachable" in (s.error_message or "") and s.error_message.startswith("NETWORK_EXCEPTION")
    shown = {st.tp: st for st in m.runner.describe()}
    assert all(shown[tp].state is MirrorState.FAILED and "unreachable" in (shown[tp].error or "") for tp in tps)

    # 6 s of outage in 100 ms rounds, producers still writing on A (they are not behind the link).
    seen = {tp: [(0, m.runner.state(tp).retry_at_ms - w.now)] for tp in tps}
    for i in range(60):
        a.produce("o", i % PARTITIONS, [(b"k", f"during{i}".encode())])
        w.step()
        for tp in tps:
            s = m.runner.state(tp)
            assert s.state is MirrorState.FAILED, "no flapping back to MIRRORING while the source is down"
            if not seen[tp] or seen[tp][-1][0] != s.retry_attempt:
                seen[tp].append((s.retry_attempt, s.retry_at_ms - w.now))
    for tp in tps:
        attempts = [x for x, _ in seen[tp]]
        assert attempts == list(range(len(attempts))) and len(attempts) >= 5, attempts
        # each failed retry waits the mirror's next backoff (100 ms doubling to 1 s)
        assert [wait for _, wait in seen[tp]] == [backoff_ms(n, GRACE) for n in attempts]
        s = m.runner.state(tp)
        # one write to enter FAILED, then one per retry attempt: no storm of states
        assert s.state_epoch - epochs[tp] == 1 + s.retry_attempt
        assert w["b"].list_offsets(tp).leo < a.partition(tp).leader_log.leo

    a.set_unreachable(False)
    run_until(w, lambda: all_in(m, MirrorState.MIRRORING), max_rounds=30)
    run_until(w, lambda: all(w["b"].list_offsets(tp).leo == a.list_offsets(tp).leo for tp in tps))
    _same_logs(w, tps)
    moves = [(x, y) for _, x, y in m.history]
    assert moves.count((MirrorState.MIRRORING, MirrorState.FAILED)) == PARTITIONS
    assert moves.count((MirrorState.FAILED, MirrorState.MIRRORING)) == PARTITIONS
    w.step()
    assert all(m.runner.state(tp).retry_attempt == 0 for tp in tps), "progress ends the retry streak"


def test_every_source_broker_crashed_fails_after_the_timeout_and_recovers():
    w, topic, m, tps = _mirroring(config=GRACE)
    a = w["a"]
    for broker in sorted(a.live):
        a.crash_broker(broker)
    w.step(rounds=4)
    assert all_in(m, MirrorState.MIRRORING), "no leader for 400 ms: not yet"
    w.step(rounds=2)
    for tp in tps:
        s = m.runner.state(tp)
        assert s.state is MirrorState.FAILED and s.error_code is ErrorCode.LEADER_NOT_AVAILABLE, s
        assert "no leader" in (s.error_message or "")
    w.step(rounds=20)
    assert all(m.runner.state(tp).retry_attempt >= 3 for tp in tps)
    for broker in sorted(a.brokers):
        a.restart_broker(broker)
    a.produce("o", 0, [(b"k", b"after-restart")])
    run_until(w, lambda: all_in(m, MirrorState.MIRRORING), max_rounds=30)
    run_until(w, lambda: all(w["b"].list_offsets(tp).leo == a.list_offsets(tp).leo for tp in tps))
    _same_logs(w, tps)


def test_stop_during_the_outage_reaches_stopped_without_the_source():
    w, topic, m, tps = _mirroring()
    a, b = w["a"], w["b"]
    mirrored = {tp: prefix(a, tp, b.list_offsets(tp).leo) for tp in tps}
    a.set_unreachable(True)
    w.step(rounds=5)
    assert all_in(m, MirrorState.FAILED)
    m.set_desired(topic.topic_id, DesiredState.STOP)
    # Within the last group sync's bound (it waits that long for the source at most).
    run_until(w, lambda: all_in(m, MirrorState.STOPPED), max_rounds=m.runner.config.stop_group_sync_timeout_ms // 100 + 5)
    assert not b.topic("o").read_only
    for tp in tps:
        s = m.runner.state(tp)
        assert s.retry_attempt == 0 and s.error_message is None
        assert prefix(b, tp, s.stop_offset) == mirrored[tp], "everything mirrored before the outage stays"
    b.produce("o", 0, [(b"k", b"written-on-b")])
    a.set_unreachable(False)
    w.step(rounds=5)
    assert all_in(m, MirrorState.STOPPED), "the source coming back does not restart a stopped topic"


def test_flapping_source_fails_once_per_down_window_and_ends_in_sync():
    w, topic, m, tps = _mirroring()
    a = w["a"]
    a.set_flapping(300, 300)
    for i in range(40):
        a.produce("o", i % PARTITIONS, [(b"k", f"f{i}".encode())])
        w.step()
    a.clear_faults()
    moves = [(x, y) for _, x, y in m.history]
    # With no grace (source.unavailable.timeout.ms=0), 4 s of 100 ms rounds are 7 down windows of
    # 300 ms: one FAILED per window and partition, each left once the source answers (one write
    # per failed retry in between, see above)
    entered = moves.count((MirrorState.MIRRORING, MirrorState.FAILED))
    assert PARTITIONS <= entered <= 7 * PARTITIONS, moves
    run_until(w, lambda: all_in(m, MirrorState.MIRRORING), max_rounds=30)
    run_until(w, lambda: all(w["b"].list_offsets(tp).leo == a.list_offsets(tp).leo for tp in tps))
    _same_logs(w, tps)


def test_source_down_for_less_than_the_timeout_at_a_time_never_fails_a_partition():
    w, topic, m, tps = _mirroring(config=GRACE)
    a = w["a"]
    a.set_flapping(300, 300)  # down windows shorter than the 500 ms grace, the retries see the up ones
    for i in range(40):
        a.produce("o", i % PARTITIONS, [(b"k", f"f{i}".encode())])
        w.step()
        assert all_in(m, MirrorState.MIRRORING), states_of(m)
    a.clear_faults()
    assert not [x for x in m.history if x[2] is MirrorState.FAILED]
    run_until(w, lambda: all_in(m, MirrorState.MIRRORING), max_rounds=30)
    run_until(w, lambda: all(w["b"].list_offsets(tp).leo == a.list_offsets(tp).leo for tp in tps))
    _same_logs(w, tps)


def test_leadership_moving_on_the_source_does_not_fail_partitions():
    w, topic, m, tps = _mirroring(config=GRACE)
    a = w["a"]
    for i in range(3):
        a.change_leader_on_next_fetch("o", 0)
        a.produce("o", 0, [(b"k", f"moved{i}".encode())])
        w.step()
        assert all_in(m, MirrorState.MIRRORING), states_of(m)
    run_until(w, lambda: w["b"].list_offsets(tps[0]).leo == a.list_offsets(tps[0]).leo)
    _same_logs(w, tps)


def test_destination_outage_is_not_the_sources_fault():
    w, topic, m, tps = _mirroring()
    w["a"].produce("o", 0, [(b"k", b"pending")])
    w["b"].set_unreachable(True)
    w.step(rounds=10)
    assert all_in(m, MirrorState.MIRRORING)
    w["b"].set_unreachable(False)
    run_until(w, lambda: w["b"].list_offsets(tps[0]).leo == w["a"].list_offsets(tps[0]).leo)
    _same_logs(w, tps)


# ------------------------------------------------------------------ the policy, on its own

MIRRORING = MirrorPartitionState(state=MirrorState.MIRRORING, previous_state=MirrorState.PREPARING, state_epoch=4)
TP = TopicPartition(uuid.UUID(int=7), 0)


def test_source_errors_fail_a_partition_only_after_the_timeout():
    cfg = MirrorConfig(source_unavailable_timeout_ms=15_000)
    for error, code in ((NotLeader(TP, 2, 7), ErrorCode.NOT_LEADER_OR_FOLLOWER),
                        (FencedLeaderEpoch(TP, 6, 7), ErrorCode.FENCED_LEADER_EPOCH),
                        (NotLeader(TP, -1, 7), ErrorCode.LEADER_NOT_AVAILABLE),
                        (SourceUnavailable("a", "NodeNotReadyError: node 3"), ErrorCode.NETWORK_EXCEPTION)):  # fmt: skip
        for now in (1_000, 10_000, 15_999):
            assert source_failed(MIRRORING, error, 1_000, now, cfg) is MIRRORING, (error, now)
        failed = source_failed(MIRRORING, error, 1_000, 16_000, cfg)
        assert failed is not None and (failed.state, failed.error_code, failed.retry_attempt) == (
            MirrorState.FAILED, code, 0)  # fmt: skip
        assert "failing for 15000 ms" in (failed.error_message or ""), failed.error_message
    # 0: the first failure fails the partition.
    at_once = source_failed(MIRRORING, SourceUnavailable("a", "down"), 5, 5, MirrorConfig(source_unavailable_timeout_ms=0))
    assert at_once is not None and at_once.state is MirrorState.FAILED


def test_retries_of_the_source_back_off_as_a_kafka_client():
    cfg = MirrorConfig(retry_backoff_ms=100, retry_backoff_max_ms=1_000)
    assert [source_retry_backoff_ms(n, cfg) for n in range(1, 7)] == [100, 200, 400, 800, 1_000, 1_000]
    assert MirrorConfig.from_properties({"retry.backoff.ms": "50", "retry.backoff.max.ms": "400",
                                         "source.unavailable.timeout.ms": "3000"}) == MirrorConfig(
        retry_backoff_ms=50, retry_backoff_max_ms=400, source_unavailable_timeout_ms=3_000)  # fmt: skip


def test_a_failed_retry_counts_the_attempt_and_exhaustion_stops_it():
    cfg = MirrorConfig(failed_retry_initial_backoff_ms=100, failed_retry_max_backoff_ms=1_000, failed_retry_max_attempts=2,
                       source_unavailable_timeout_ms=0)  # fmt: skip
    down = SourceUnavailable("a", "unreachable")
    s = source_failed(MIRRORING, down, 0, 0, cfg)
    assert s is not None and (s.state, s.retry_attempt, s.retry_at_ms) == (MirrorState.FAILED, 0, 100)
    assert source_failed(s, down, 0, 50, cfg) is s, "not due: nothing written"
    s2 = source_failed(s, down, 0, 100, cfg)
    assert s2 is not None and (s2.state, s2.retry_attempt, s2.retry_at_ms, s2.state_epoch) == (
        MirrorState.FAILED, 1, 300, s.state_epoch + 1)  # fmt: skip
    s3 = source_failed(s2, down, 0, 300, cfg)
    assert s3 is not None and s3.retry_attempt == 2
    s4 = source_failed(s3, down, 0, 10_000, cfg)
    assert s4 is not None and s4.retry_attempt == NON_RETRYABLE and "retries exhausted" in (s4.error_message or "")


def test_other_source_errors_and_other_states_are_not_outages():
    assert source_failed(MIRRORING, UnknownTopicId(TP.topic_id), 0, 10**9, FAST) is None
    paused = MIRRORING.with_(state=MirrorState.PAUSED)
    assert source_failed(paused, SourceUnavailable("a", "unreachable"), 0, 10**9, FAST) is paused
