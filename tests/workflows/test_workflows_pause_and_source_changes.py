"""Pause and resume; partitions added on the source; a deleted source topic; a foreign topic ID;
topic config sync minus the exclude list."""

from __future__ import annotations

import pytest
from workflow_harness import World, all_in, batches, prefix, run_until, states_of

from coordinator.partition_state import NON_RETRYABLE
from coordinator.ports import ReadOnlyTopic
from coordinator.states import DesiredState, ErrorCode, MirrorState


def _setup(partitions=2, configs=None):
    w = World("a", "b")
    topic = w["a"].add_topic("p", partitions=partitions, configs=configs)
    for i in range(6):
        w["a"].produce("p", i % partitions, [(b"k", f"v{i}".encode())])
    m = w.mirror("a", "b")
    m.set_desired(topic.topic_id, DesiredState.START)
    run_until(w, lambda: all_in(m, MirrorState.MIRRORING))
    w.step()
    return w, topic, m


def test_pause_stops_fetch_and_sync_resume_continues_from_local_leo():
    w, topic, m = _setup()
    a, b = w["a"], w["b"]
    tps = [a.tp("p", p) for p in range(2)]
    m.set_desired(topic.topic_id, DesiredState.PAUSE)
    w.step()
    assert all_in(m, MirrorState.PAUSED)
    moves = [(x, y) for _, x, y in m.store.history]
    assert (MirrorState.MIRRORING, MirrorState.PAUSING) in moves and (MirrorState.PAUSING, MirrorState.PAUSED) in moves
    assert not any(m.runner.sessions), "fetchers removed"
    leos = {tp: b.list_offsets(tp).leo for tp in tps}
    a.produce("p", 0, [(b"k", b"while-paused")])
    a.set_topic_config("p", "retention.ms", "12345")
    w.step(rounds=5)
    assert {tp: b.list_offsets(tp).leo for tp in tps} == leos
    assert "retention.ms" not in b.describe_configs(topic.topic_id), "no config sync while paused"
    with pytest.raises(ReadOnlyTopic):
        b.produce("p", 0, [(b"k", b"local")])

    m.set_desired(topic.topic_id, DesiredState.START)  # resume
    w.step(rounds=2)
    assert all_in(m, MirrorState.MIRRORING)
    assert (MirrorState.PAUSED, MirrorState.MIRRORING) in [(x, y) for _, x, y in m.store.history]
    for tp in tps:
        assert prefix(b, tp, 10**9) == prefix(a, tp, 10**9)
    assert b.describe_configs(topic.topic_id)["retention.ms"] == "12345"


def test_new_source_partitions_are_added_and_mirrored():
    w, topic, m = _setup()
    a, b = w["a"], w["b"]
    a.create_partitions(topic.topic_id, 4)
    for p in (2, 3):
        a.produce("p", p, [(b"k", f"new{p}".encode())])
    w.step(rounds=3)
    assert len(b.topic("p").partitions) == 4
    assert len(states_of(m)) == 4 and all_in(m, MirrorState.MIRRORING)
    for p in range(4):
        tp = a.tp("p", p)
        assert prefix(b, tp, 10**9) == prefix(a, tp, 10**9)


def test_deleted_source_topic_fails_non_retryable_and_stop_still_works():
    w, topic, m = _setup()
    a, b = w["a"], w["b"]
    kept = {p: batches(b, b.tp("p", p)) for p in range(2)}
    a.delete_topic("p")
    w.step(rounds=3)
    for s in m.runner.states().values():
        assert s.state is MirrorState.FAILED
        assert s.retry_attempt == NON_RETRYABLE and s.error_code is ErrorCode.UNKNOWN_TOPIC_ID
        assert s.error_message == f"source topic p (topic ID {topic.topic_id}) was deleted"
    assert {p: batches(b, b.tp("p", p)) for p in range(2)} == kept, "nothing mirrored is lost"
    w.step(ms=10_000, rounds=3)
    assert all_in(m, MirrorState.FAILED), "no automatic retry"
    m.set_desired(topic.topic_id, DesiredState.STOP)  # the operator fails over
    w.step()
    assert all_in(m, MirrorState.STOPPED) and not b.topic("p").read_only


def test_foreign_topic_with_same_name_is_inconsistent_topic_id():
    w = World("a", "b")
    topic = w["a"].add_topic("p", partitions=1)
    w["b"].add_topic("p", partitions=1)
    w["b"].produce("p", 0, [(b"k", b"local")])
    before = batches(w["b"], w["b"].tp("p", 0))
    m = w.mirror("a", "b")
    m.set_desired(topic.topic_id, DesiredState.START)
    w.step(rounds=3)
    (s,) = m.runner.states().values()
    assert s.state is MirrorState.FAILED and s.retry_attempt == NON_RETRYABLE
    assert s.error_code is ErrorCode.INCONSISTENT_TOPIC_ID
    local = w["b"].topic("p")
    assert not local.read_only and local.mirror_name is None
    assert batches(w["b"], w["b"].tp("p", 0)) == before
    m.set_desired(topic.topic_id, DesiredState.STOP)
    w.step()
    assert all_in(m, MirrorState.FAILED), "never writes markers into a topic that is not ours"


def test_config_sync_skips_excluded_properties():
    w, topic, m = _setup(configs={"retention.ms": "1000000", "min.insync.replicas": "2",
                                  "unclean.leader.election.enable": "true", "cleanup.policy": "delete"})
    a, b = w["a"], w["b"]
    got = b.describe_configs(topic.topic_id)
    assert got == {"retention.ms": "1000000", "cleanup.policy": "delete"}
    b.alter_configs(topic.topic_id, {"min.insync.replicas": "1", "follower.replication.throttled.replicas": "*"})
    a.set_topic_config("p", "retention.ms", "2000000")
    a.set_topic_config("p", "cleanup.policy", None)
    a.set_topic_config("p", "max.message.bytes", "4096")
    w.step()
    assert b.describe_configs(topic.topic_id) == {
        "retention.ms": "2000000", "max.message.bytes": "4096",
        "min.insync.replicas": "1", "follower.replication.throttled.replicas": "*",  # the destination's own
    }
    assert any("unclean.leader.election.enable" in x for x in m.runner.warnings)
