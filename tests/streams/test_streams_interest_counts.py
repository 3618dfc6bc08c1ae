"""``Interest.wanted`` from per-table-partition counts of hot keys answers as the walk over every
hot key did: any sequence of heats and cools, any table partitions asked about."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.partition_state import MirrorPartitionKey
from coordinator.states import DesiredState
from streams.runner.interest import Interest
from streams.worker.state_store import WorkerStateStore

TOPICS = [uuid.UUID(int=i + 1) for i in range(3)]
KEYS = [MirrorPartitionKey("m", t, p) for t in TOPICS for p in range(6)]
PARTITIONS = {t: set(range(6)) for t in TOPICS}

ops = st.lists(st.one_of(
    st.tuples(st.just("mark"), st.sampled_from(KEYS)),
    st.tuples(st.just("forget"), st.sampled_from(KEYS)),
    st.tuples(st.just("cool"), st.lists(st.sampled_from(KEYS))),
    st.tuples(st.just("desired"), st.dictionaries(st.sampled_from(TOPICS), st.sampled_from(list(DesiredState)))),
    st.tuples(st.just("select"), st.integers(0, 3)),
), max_size=40)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(ops, st.sets(st.integers(0, 3)), st.integers(0, 2))
def test_counted_wanted_equals_the_walk(steps, asked, version_seed):
    store = WorkerStateStore(4)
    by_partition = {p: [k for k in KEYS if store.partition_of(k) == p] for p in range(4)}
    counted, walked = Interest("m", None, store.partition_of), Interest("m")
    versions = {p: by_partition[p] for p in range(4)}
    for op, arg in steps:
        for i in (counted, walked):
            if op == "mark":
                i.mark(arg)
            elif op == "forget":
                i.forget(arg)
            elif op == "cool":
                i.cool(arg, lambda k: True)
            elif op == "desired":
                i.desired({t: (d, 1) for t, d in arg.items()}, PARTITIONS)
            else:
                i.select(arg, versions[arg], versions[arg], set(versions[arg]))
        assert counted.hot == walked.hot
        assert all(n == sum(1 for k in counted.hot if store.partition_of(k) == p) for p, n in counted.hot_in.items())
        ask = {p: versions[p] if (p + version_seed) % 3 else object() for p in asked}
        assert counted.wanted(store.partition_of, ask) == walked.wanted(store.partition_of, ask)
