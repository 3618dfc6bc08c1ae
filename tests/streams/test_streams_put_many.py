"""``WorkerStateStore.put_many`` (the stop's columns queue a step's writes in one pass) leaves
what ``put`` of each write, in order, leaves: the queued writes, the durable states, and the
same writes refused (fenced, another worker's partition, a membership that is gone)."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.partition_state import UNKNOWN_STATE, MirrorPartitionKey, StateWriteFenced
from coordinator.states import MirrorState
from streams.worker.state_store import WorkerStateStore

_TOPICS = [uuid.UUID(int=i + 1) for i in range(3)]
_KEYS = [MirrorPartitionKey("m", t, p) for t in _TOPICS for p in range(3)]
_STATES = [MirrorState.PREPARING, MirrorState.MIRRORING, MirrorState.STOPPING, MirrorState.STOPPED]

# one write: (key, state, state epoch, leader epoch, applied offset)
_WRITE = st.tuples(st.sampled_from(_KEYS), st.sampled_from(_STATES), st.integers(0, 4), st.integers(0, 2),
                   st.integers(0, 20))  # fmt: skip


def _store(durable: list, owned: set[int], removed: int) -> WorkerStateStore:
    s = WorkerStateStore(4)
    s.owned = set(owned)
    for key, state, epoch, leader, applied in durable:
        s.durable[key] = UNKNOWN_STATE.with_(state=state, state_epoch=epoch, leader_epoch=leader, applied_offset=applied)
    s.removed[("m", _TOPICS[0])] = removed  # topic 0 left the mirror at this offset
    return s


@settings(max_examples=200, deadline=None)
@given(st.lists(_WRITE, max_size=6), st.lists(_WRITE, min_size=1, max_size=12),
       st.sets(st.integers(0, 3), min_size=1), st.integers(-2, 10))  # fmt: skip
def test_put_many_leaves_what_put_of_each_write_leaves(durable, writes, owned, removed):
    one, many = _store(durable, owned, removed), _store(durable, owned, removed)
    batch = [(k, UNKNOWN_STATE.with_(state=s, state_epoch=e, leader_epoch=le, applied_offset=a))
             for k, s, e, le, a in writes]  # fmt: skip
    expected: list[object] = []
    for key, state in batch:
        try:
            one.put(key, state)
            expected.append(None)
        except StateWriteFenced as e:
            expected.append(e.reason)
        except AssertionError:  # an illegal transition: put_many raises it too, having queued the ones before
            expected.append("illegal")
            break
    try:
        got = [None if f is None else f.reason for f in many.put_many(batch)]
    except AssertionError:
        got = None
    if expected and expected[-1] == "illegal":
        assert got is None
        # the writes before the illegal one are queued as put queued them
        many2 = _store(durable, owned, removed)
        many2.put_many(batch[: len(expected) - 1])
        assert dict(many2.pending) == dict(one.pending)
        return
    assert got == expected
    assert {p: q for p, q in many.pending.items() if q} == {p: q for p, q in one.pending.items() if q}
    assert dict(many.durable) == dict(one.durable)
