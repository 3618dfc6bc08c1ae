"""Retention at the source (OffsetOutOfRange below its log start) and compaction gaps."""

from __future__ import annotations

from workflow_harness import World, all_in, batches, prefix, run_until

from coordinator.states import DesiredState, MirrorState


def _start(w, topic):
    m = w.mirror("a", "b")
    m.set_desired(topic.topic_id, DesiredState.START)
    run_until(w, lambda: all_in(m, MirrorState.MIRRORING))
    w.step()
    return m


def test_source_retention_before_first_mirror_restarts_at_source_log_start():
    w = World("a", "b")
    a, b = w["a"], w["b"]
    topic = a.add_topic("r", partitions=1, configs={"retention.ms": "1000"})
    tp = a.tp("r", 0)
    for i in range(5):
        a.produce("r", 0, [(b"k", f"old{i}".encode())])
    w.step(ms=400_000)  # retention check runs: the old batches go
    a.produce("r", 0, [(b"k", b"new")])
    assert a.list_offsets(tp).log_start == 5
    _start(w, topic)
    off = b.list_offsets(tp)
    assert (off.log_start, off.leo) == (5, 6)
    assert prefix(b, tp, 10**9) == prefix(a, tp, 10**9)


def test_retention_passing_a_paused_mirror_truncates_fully_and_restarts():
    w = World("a", "b")
    a, b = w["a"], w["b"]
    topic = a.add_topic("r", partitions=1)
    tp = a.tp("r", 0)
    a.produce("r", 0, [(b"k", b"v0")])
    m = _start(w, topic)
    m.set_desired(topic.topic_id, DesiredState.PAUSE)
    w.step()
    for i in range(1, 8):
        a.produce("r", 0, [(b"k", f"v{i}".encode())])
    a.delete_records("r", 0, 6)  # the source drops what the paused mirror has not copied
    m.set_desired(topic.topic_id, DesiredState.START)
    w.step(rounds=2)
    off = b.list_offsets(tp)
    assert (off.log_start, off.leo) == (6, 8)
    assert prefix(b, tp, 10**9) == prefix(a, tp, 10**9)


def test_log_start_inside_a_batch_starts_at_the_batch_base_offset():
    w = World("a", "b")
    a, b = w["a"], w["b"]
    topic = a.add_topic("r", partitions=1)
    tp = a.tp("r", 0)
    a.produce("r", 0, [(b"k", b"x0"), (b"k", b"x1"), (b"k", b"x2")])
    a.produce("r", 0, [(b"k", b"y")])
    a.delete_records("r", 0, 1)  # inside the first batch
    _start(w, topic)
    assert [x.base_offset for x in batches(b, tp)] == [0, 3]
    assert b.list_offsets(tp).leo == a.list_offsets(tp).leo == 4


def test_compaction_gaps_are_copied_as_they_are():
    w = World("a", "b")
    a, b = w["a"], w["b"]
    topic = a.add_topic("c", partitions=1, configs={"cleanup.policy": "compact"})
    tp = a.tp("c", 0)
    for i in range(8):
        a.produce("c", 0, [(f"k{i % 3}".encode(), f"v{i}".encode()), (b"solo" + bytes([i]), b"s")])
    assert a.compact("c") > 0
    src = batches(a, tp)
    assert any(x.record_count < x.last_offset - x.base_offset + 1 for x in src), "gaps inside batches"
    _start(w, topic)
    assert prefix(b, tp, 10**9) == prefix(a, tp, 10**9)
    assert [(x.base_offset, x.last_offset, x.record_count) for x in batches(b, tp)] == [
        (x.base_offset, x.last_offset, x.record_count) for x in src]
