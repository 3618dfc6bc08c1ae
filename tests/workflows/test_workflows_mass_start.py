"""A start of many topics whose creation on the destination lags (issue #38): a wait, never FAILED.

The topic level creates each mirror topic on the destination; until that topic serves, its
partitions wait in PREPARE_CHECK. Two ways a destination lags, as Kafka's can:
- ``refused``: CreateTopics is refused with a retriable error for a while (a busy controller);
- ``late``: CreateTopics is accepted and the topic shows in its metadata, but the partitions
  answer ListOffsets with UNKNOWN_TOPIC_ID for a few rounds more (metadata not propagated yet).
States are sampled after every round: FAILED must never show, and every partition ends MIRRORING.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from coordinator.partition_state import MirrorPartitionKey
from coordinator.ports import SourceUnavailable, TopicPartition, UnknownTopicId
from coordinator.states import DesiredState, MirrorState
from tests.workflows.workflow_harness import World, states_of

TOPICS, PARTITIONS, LAG_ROUNDS = 40, 5, 4


class LaggingDestination:
    """The destination port, with topic creation ``LAG_ROUNDS`` rounds behind (see the module docstring)."""

    def __init__(self, port: Any, how: str) -> None:
        self._port, self.how = port, how
        self.round = 0
        self.asked: dict[uuid.UUID, int] = {}  # topic -> round of its first CreateTopics
        self.serving_from: dict[uuid.UUID, int] = {}  # topic -> first round its partitions answer
        self.listings = 0  # describe_topics() of every topic

    def __getattr__(self, name: str) -> Any:
        return getattr(self._port, name)

    def create_topic(self, name: str, topic_id: uuid.UUID, *args: Any, **kwargs: Any) -> Any:
        first = self.asked.setdefault(topic_id, self.round)
        if self.how == "refused" and self.round < first + LAG_ROUNDS:
            raise SourceUnavailable("b", f"create {name}: the controller is busy")
        made = self._port.create_topic(name, topic_id, *args, **kwargs)
        self.serving_from[topic_id] = self.round + (LAG_ROUNDS if self.how == "late" else 0)
        return made

    def describe_topics(self, topic_ids: Any = None) -> Any:
        if topic_ids is None:
            self.listings += 1
        return self._port.describe_topics(topic_ids)

    def list_offsets(self, tp: Any) -> Any:
        if self.round < self.serving_from.get(tp.topic_id, 1 << 30):
            raise UnknownTopicId(tp.topic_id, tp.partition)
        return self._port.list_offsets(tp)


def _round(w: World, m: Any, dest: LaggingDestination, keys: list[MirrorPartitionKey]) -> None:
    """One round in the stream worker's phases. Its table partitions know their mirror partitions
    from the desired-state events, so they step them whether or not the topic level (which runs
    in any one job) has created their topic yet."""
    dest.round += 1
    w.now += 100
    for c in w.clusters.values():
        c.tick(100)
    r = m.runner
    r.reconcile_topics(w.now)
    r.step_partitions(w.now, keys)
    r.fetch_round(w.now)
    r.sync_if_due(w.now)


@pytest.mark.parametrize("how", ["refused", "late"])
def test_a_mass_start_waits_for_its_topics_and_never_fails(how: str) -> None:
    w = World()
    a = w["a"]
    for i in range(TOPICS):
        t = a.add_topic(f"t{i:02d}", partitions=PARTITIONS)
        a.produce(t.name, 0, [(b"k", f"v{i}".encode())])
    m = w.mirror("a", "b")
    dest = LaggingDestination(w["b"], how)
    m.runner = m.build(dest)
    seen: dict[MirrorState, int] = {}
    keys: list[MirrorPartitionKey] = []

    def sample() -> dict[TopicPartition, MirrorState]:
        got = states_of(m)
        for s in got.values():
            seen[s] = seen.get(s, 0) + 1
        assert MirrorState.FAILED not in got.values(), {tp: s.error_message for tp, s in m.runner.states().items()
                                                        if s.state is MirrorState.FAILED}  # fmt: skip
        return got

    for i, t in enumerate(sorted(a.topics.values(), key=lambda t: t.name)):
        m.set_desired(t.topic_id, DesiredState.START)
        keys += [MirrorPartitionKey(m.name, t.topic_id, p) for p in range(PARTITIONS)]
        if i % 10 == 9:  # the starts arrive in bursts, as a CLI's requests do
            _round(w, m, dest, keys)
            sample()
    for _ in range(30):
        _round(w, m, dest, keys)
        got = sample()
        if len(got) == TOPICS * PARTITIONS and all(s is MirrorState.MIRRORING for s in got.values()):
            break
    got = states_of(m)
    assert len(got) == TOPICS * PARTITIONS
    assert set(got.values()) == {MirrorState.MIRRORING}
    assert seen.get(MirrorState.PREPARING), "the lag must have been seen as a wait (PREPARING)"
    # Nothing was lost to the wait: the records reached the destination.
    for t in a.topics.values():
        assert w["b"].list_offsets(TopicPartition(t.topic_id, 0)).leo == 1


def test_a_topic_level_pass_lists_the_destination_once() -> None:
    """New topics are looked up on the destination by name (a same-named topic with another ID):
    one listing of its topics for a whole pass, not one per part of 25 topics (a 4,000-topic start
    listed all of B 160 times, which stalled it for minutes at 200,000 partitions)."""
    w = World()
    a = w["a"]
    topics = [a.add_topic(f"t{i:03d}", partitions=2) for i in range(110)]  # five parts
    m = w.mirror("a", "b")
    dest = LaggingDestination(w["b"], "none")
    m.runner = m.build(dest)
    for t in topics:
        m.set_desired(t.topic_id, DesiredState.START)
    _round(w, m, dest, [])
    assert dest.listings == 1
    assert len([t for t in w["b"].describe_topics() if t.read_only]) == len(topics)  # all created, read-only
