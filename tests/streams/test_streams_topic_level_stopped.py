"""``TopicLevel.all_stopped`` looks first at the partition it last found not stopped; its answer is
still the walk's (every partition STOPPED or UNKNOWN), whatever the states do between two asks."""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from coordinator.partition_state import UNKNOWN_STATE, MirrorPartitionState
from coordinator.ports import TopicPartition
from coordinator.states import MirrorState
from streams.runner.topic_level import TopicLevel

TOPICS = [uuid.UUID(int=i + 1) for i in range(2)]
_STATES = st.sampled_from([MirrorState.STOPPED, MirrorState.UNKNOWN, MirrorState.STOPPING, MirrorState.MIRRORING])


class Host:
    def __init__(self) -> None:
        self.partitions: dict[uuid.UUID, set[int]] = {}
        self.states: dict[TopicPartition, MirrorPartitionState] = {}

    def state(self, tp: TopicPartition) -> MirrorPartitionState:
        return self.states.get(tp, UNKNOWN_STATE)


# Each move: (topic, partition, its new state, or None: the partition leaves the runner), then an ask.
_MOVES = st.lists(st.tuples(st.sampled_from(TOPICS), st.integers(0, 5), st.none() | _STATES), max_size=60)


@given(_MOVES)
def test_all_stopped_answers_as_the_walk(moves: list[tuple[uuid.UUID, int, Any]]) -> None:
    host = Host()
    level = TopicLevel(host)  # type: ignore[arg-type]
    for topic_id, p, state in moves:
        tp = TopicPartition(topic_id, p)
        if state is None:
            host.partitions.get(topic_id, set()).discard(p)
        else:
            host.partitions.setdefault(topic_id, set()).add(p)
            host.states[tp] = UNKNOWN_STATE.with_(state=state)
        for t in TOPICS:
            walk = all(host.state(TopicPartition(t, q)).state in (MirrorState.STOPPED, MirrorState.UNKNOWN)
                       for q in host.partitions.get(t, ()))  # fmt: skip
            assert level.all_stopped(t) == walk
