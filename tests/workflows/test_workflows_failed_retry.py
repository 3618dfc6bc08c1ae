"""FAILED on the model: retries with exponential backoff, exhaustion, re-arming, mirror loops."""

from __future__ import annotations

from workflow_harness import World, all_in, batches, run_until

from coordinator.partition_state import NON_RETRYABLE, Step
from coordinator.states import DesiredState, ErrorCode, MirrorState
from coordinator.workflows.config import MirrorConfig

LOOP_CFG = MirrorConfig(metadata_refresh_interval_ms=0, fetch_backoff_ms=0, failed_retry_initial_backoff_ms=1_000,
                        failed_retry_max_backoff_ms=4_000, failed_retry_max_attempts=4)


def _a_to_b(w):
    topic = w["a"].add_topic("l", partitions=1)
    w["a"].produce("l", 0, [(b"k", b"v")])
    ab = w.mirror("a", "b")
    ab.set_desired(topic.topic_id, DesiredState.START)
    run_until(w, lambda: all_in(ab, MirrorState.MIRRORING))
    return topic, ab


def test_mirror_loop_is_refused_retried_with_backoff_then_exhausted():
    w = World("a", "b")
    topic, ab = _a_to_b(w)
    a = w["a"]
    tp = a.tp("l", 0)
    before = batches(a, tp)
    ba = w.mirror("b", "a", LOOP_CFG)  # B already mirrors this topic from A: a loop
    ba.set_desired(topic.topic_id, DesiredState.START)
    w.step()
    s = ba.runner.state(tp)
    assert s.state is MirrorState.FAILED and s.retry_attempt == 0
    assert s.error_code is ErrorCode.INVALID_CLUSTER_MIRROR_STATES and "mirror loop" in (s.error_message or "")
    assert not a.topic("l").read_only and a.topic("l").mirror_name is None, "the local topic is left alone"
    retries = []
    for _ in range(200):  # 100 ms rounds: 20 s
        w.step()
        s = ba.runner.state(tp)
        if s.state is MirrorState.FAILED and (not retries or retries[-1][0] != s.retry_attempt):
            retries.append((s.retry_attempt, s.entered_at_ms, s.retry_at_ms))
    attempts = [r[0] for r in retries]
    assert attempts[:5] == [0, 1, 2, 3, 4] and attempts[-1] == NON_RETRYABLE
    waits = [r[2] - r[1] for r in retries if r[0] != NON_RETRYABLE]
    assert waits == [1_000, 2_000, 4_000, 4_000, 4_000][: len(waits)]
    assert "retries exhausted" in (ba.runner.state(tp).error_message or "")
    a.produce("l", 0, [(b"k", b"still-writable")])
    assert batches(a, tp)[: len(before)] == before

    # The loop goes away (B fails over); a new operator START re-arms the exhausted partition.
    ab.set_desired(topic.topic_id, DesiredState.STOP)
    run_until(w, lambda: all_in(ab, MirrorState.STOPPED))
    ba.set_desired(topic.topic_id, DesiredState.START)
    run_until(w, lambda: all_in(ba, MirrorState.MIRRORING))
    assert ba.runner.state(tp).retry_attempt == 0


def test_failover_works_with_the_source_unreachable():
    w = World("a", "b")
    topic, ab = _a_to_b(w)
    w["a"].set_unreachable(True)
    ab.set_desired(topic.topic_id, DesiredState.STOP)
    w.step()
    # Every step but the last group offset sync, which is tried until its bound, then skipped.
    assert [s.step for s in ab.runner.states().values()] == [Step.STOP_WAIT_ISR]
    bound = ab.runner.config.stop_group_sync_timeout_ms
    w.step(ms=bound - 100)
    assert all_in(ab, MirrorState.STOPPING)
    w.step(ms=100)
    assert all_in(ab, MirrorState.STOPPED) and not w["b"].topic("l").read_only
