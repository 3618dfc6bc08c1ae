"""StateTally: counts kept as states change equal a full walk over the states, after any sequence
of changes, for any set of partitions asked about."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.state_counts import StateTally
from coordinator.states import MirrorState

MIRRORS = ("a-to-b", "c-to-b")
TOPICS = (uuid.UUID(int=1), uuid.UUID(int=2), uuid.UUID(int=3))
keys = st.tuples(st.sampled_from(MIRRORS), st.sampled_from(TOPICS), st.integers(0, 6))
ops = st.lists(st.one_of(st.tuples(st.just("set"), keys, st.sampled_from(list(MirrorState))),
                         st.tuples(st.just("discard"), keys, st.none())), max_size=80)  # fmt: skip


def _walk(states: dict, mirror: str, topic: uuid.UUID, partitions) -> dict:
    out: dict = {}
    for p in partitions:
        s = states.get((mirror, topic, p), MirrorState.UNKNOWN)
        out[s] = out.get(s, 0) + 1
    return out


@settings(max_examples=300, deadline=None)
@given(ops=ops, asked=st.lists(st.integers(0, 8), unique=True, max_size=9), as_dict=st.booleans())
def test_counts_equal_a_full_walk(ops, asked, as_dict) -> None:
    tally, states = StateTally(), {}
    for op, key, state in ops:
        if op == "set":
            tally.set(key, state)
            states[key] = state
        else:
            tally.discard(key)
            states.pop(key, None)
    partitions = dict.fromkeys(asked) if as_dict else set(asked)  # an image's partitions are a mapping
    for mirror in MIRRORS:
        for topic in TOPICS:
            assert tally.topic_counts(mirror, topic, partitions) == _walk(states, mirror, topic, asked)
            assert set(tally.states_of(mirror, topic)) == {s for (m, t, _), s in states.items() if (m, t) == (mirror, topic)}
        every = {}
        for (m, _, _), s in states.items():
            if m == mirror:
                every[s] = every.get(s, 0) + 1
        assert tally.mirror_counts(mirror) == every
    assert len(tally) == len(states)
    # Built in one go from the final states: the same answers.
    again = StateTally(states.items())
    for mirror in MIRRORS:
        assert again.mirror_counts(mirror) == tally.mirror_counts(mirror)
        for topic in TOPICS:
            assert again.topic_counts(mirror, topic, partitions) == tally.topic_counts(mirror, topic, partitions)


def test_a_partition_the_topic_does_not_list_is_not_counted() -> None:
    t = uuid.UUID(int=9)
    tally = StateTally([(("m", t, 0), MirrorState.STOPPED), (("m", t, 5), MirrorState.FAILED)])
    assert tally.topic_counts("m", t, range(2)) == {MirrorState.STOPPED: 1, MirrorState.UNKNOWN: 1}
    assert tally.topic_counts("m", t, {0, 1, 5}) == {MirrorState.STOPPED: 1, MirrorState.FAILED: 1, MirrorState.UNKNOWN: 1}
    assert tally.topic_counts("m", uuid.UUID(int=10), range(3)) == {MirrorState.UNKNOWN: 3}
    assert tally.topic_counts("m", t, ()) == {}
