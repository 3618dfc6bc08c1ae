"""The calls a stop makes: the MIRROR_PID_RESET's source cluster ID is described once per topic
and desired record, not once per topic and wave (the worker steps a stop table partition by table
partition, each its own wave), and a later desired record reads the destination topic again."""

from __future__ import annotations

import collections
from typing import Any

from workflow_harness import World, all_in, batches, run_until

from clustermodel.records import decode_mirror_pid_reset, decode_records
from coordinator.partition_state import MirrorPartitionKey
from coordinator.ports import ControlType, GroupOffset, TopicPartition
from coordinator.states import DesiredState, MirrorState

PARTITIONS = 6


class Counting:
    """The destination port, counting each method's calls."""

    def __init__(self, port: Any) -> None:
        self._port = port
        self.calls: collections.Counter[str] = collections.Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._port, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return attr(*args, **kwargs)

        return call


def _mirroring(topics: int = 2):
    w = World("a", "b")
    made = [w["a"].add_topic(f"t{i}", partitions=PARTITIONS) for i in range(topics)]
    for t in made:
        for p in range(PARTITIONS):
            w["a"].produce(t.name, p, [(b"k", f"{t.name}-{p}".encode())])
    m = w.mirror("a", "b")
    for t in made:
        m.set_desired(t.topic_id, DesiredState.START)
    run_until(w, lambda: all_in(m, MirrorState.MIRRORING))
    dest = Counting(w["b"])
    m.runner = m.build(dest)
    return w, m, made, dest


def _stop_one_by_one(w: World, m, topics) -> None:
    """Every partition stepped on its own (its own wave of calls), until all are STOPPED."""
    for t in topics:
        m.set_desired(t.topic_id, DesiredState.STOP)
    keys = [MirrorPartitionKey(m.name, t.topic_id, p) for t in topics for p in range(PARTITIONS)]
    for _ in range(20):
        if all_in(m, MirrorState.STOPPED):
            return
        w.now += 100
        for c in w.clusters.values():
            c.tick(100)
        for key in keys:
            m.runner.step_partitions(w.now, [key])
    assert all_in(m, MirrorState.STOPPED)


def _reset_sources(w: World, topic) -> list[str]:
    out = []
    for p in range(PARTITIONS):
        for b in batches(w["b"], TopicPartition(topic.topic_id, p)):
            if b.is_control and b.control_type == ControlType.MIRROR_PID_RESET:
                out.extend(decode_mirror_pid_reset(value)[1] for _, _, value in decode_records(b.payload))
    return out


def test_a_stop_describes_each_topic_once_however_many_waves():
    w, m, topics, dest = _mirroring()
    dest.calls.clear()
    _stop_one_by_one(w, m, topics)
    assert dest.calls["describe_topics"] == len(topics)  # was one per partition: each its own wave
    assert dest.calls["bump_leader_epoch"] == len(topics) * PARTITIONS  # every partition did its bump step
    source_id = w["a"].cluster_id()
    for t in topics:
        assert _reset_sources(w, t) == [source_id] * PARTITIONS


def test_a_later_stop_reads_the_source_cluster_id_again():
    w, m, topics, dest = _mirroring(topics=1)
    _stop_one_by_one(w, m, topics)
    (t,) = topics
    assert _reset_sources(w, t) == [w["a"].cluster_id()] * PARTITIONS
    m.set_desired(t.topic_id, DesiredState.START)
    run_until(w, lambda: all_in(m, MirrorState.MIRRORING))
    # Re-attached from another source cluster meanwhile (as a mirror whose source moved would):
    # the next stop's resets name that one, not the ID the first stop read.
    w["b"].set_mirror(t.topic_id, m.name, "moved-source")
    dest.calls.clear()
    _stop_one_by_one(w, m, topics)
    assert dest.calls["describe_topics"] == 1
    assert _reset_sources(w, t) == ["moved-source"] * PARTITIONS  # the restart truncated the first stop's away


def test_the_wait_for_the_isr_reuses_the_offsets_the_last_group_sync_read():
    """A partition with group offsets: its last group sync reads the destination's ListOffsets in
    the step that waits for the ISR, whose observation does not ask for them again."""
    w, m, topics, dest = _mirroring(topics=1)
    (t,) = topics
    w["a"].commit_group_offsets("g", [GroupOffset("g", t.topic_id, p, 1) for p in range(PARTITIONS)])
    dest.calls.clear()
    _stop_one_by_one(w, m, topics)
    # The stop's own steps read them once each (LME, bump, ISR wait); the last group sync once more.
    assert dest.calls["isr_status"] == PARTITIONS  # each waited once: the ISR was caught up
    assert dest.calls["list_offsets"] == 3 * PARTITIONS
    assert all(o.offset == 1 for o in w["b"].group_offsets("g"))
    assert _reset_sources(w, t) == [w["a"].cluster_id()] * PARTITIONS


def test_the_wait_for_the_isr_asks_the_isr_only():
    """The ISR wait decides from the ISR's status: a stop reads the destination's offsets twice
    per partition (the LME's stop offset, the bump's end check), not at the ISR wait."""
    w, m, topics, dest = _mirroring(topics=1)
    dest.calls.clear()
    _stop_one_by_one(w, m, topics)
    assert dest.calls["isr_status"] == PARTITIONS
    assert dest.calls["list_offsets"] == 2 * PARTITIONS
