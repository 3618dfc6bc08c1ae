"""Partitions stepped together decide as each one stepped alone, and what a pass leaves settled is settled.

The worker steps a table partition's mirror partitions side by side (``MirrorRunner._drive_many``):
one wave of observations, the decisions, the commands in waves, the writes. A pass takes the
next step of a partition without looking at it again when it can tell what that step would do:
a write that lands a partition in a settled pair needing no observation (STOPPED under STOP,
PAUSED under PAUSE) settles it with the write, and a write whose next step must wait for its
durability (STOPPING at STOP_BUMP_EPOCH) ends the partition's pass. Hypothesis: for any topics,
records, open transactions and desired states,

- stepping every partition together (the worker's rounds) leaves the same destination logs,
  states, state changes, LMEs and stop impacts as stepping each partition alone, one step per
  pass;
- once the stop and pause have settled, stepping every partition again from scratch (nothing
  remembered as settled) decides nothing, writes nothing, and finds the same partitions settled.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from workflow_harness import FAST, World, WorkerMirror, batches, source_topics, run_until, shape

from coordinator.partition_state import MirrorPartitionKey
from coordinator.states import DesiredState, MirrorState

_DESIRED = st.sampled_from([DesiredState.STOP, DesiredState.STOP, DesiredState.PAUSE, DesiredState.START])
_PARTITION = st.tuples(st.integers(0, 2), st.booleans())  # (records, an open transaction)
_TOPIC = st.tuples(st.lists(_PARTITION, min_size=1, max_size=3), _DESIRED)


def _world(topics: list[tuple[list[tuple[int, bool]], DesiredState]]) -> tuple[World, WorkerMirror, list[Any]]:
    w = World("a", "b", worker=True)
    a, made = w["a"], source_topics(w, topics)
    m = w.mirror("a", "b", FAST)
    assert isinstance(m, WorkerMirror)
    for t in made:
        m.set_desired(t.topic_id, DesiredState.START)

    def caught_up() -> bool:
        states = m.runner.states()
        return len(states) == sum(len(p) for p, _ in topics) and all(
            s.state is MirrorState.MIRRORING and w["b"].list_offsets(tp).leo == a.list_offsets(tp).hw
            for tp, s in states.items())  # fmt: skip

    run_until(w, caught_up)
    for t, (_, want) in zip(made, topics):
        if want is not DesiredState.START:
            m.set_desired(t.topic_id, want)
    return w, m, made


def _impacts(m: WorkerMirror) -> list[tuple[Any, Any]]:
    """Every stop impact value the mirror makes durable, in order."""
    landed: list[tuple[Any, Any]] = []
    store: Any = m.store
    land = store.land_impacts

    def record(written: dict[Any, Any]) -> None:
        landed.extend(sorted(written.items()))
        land(written)

    store.land_impacts = record
    return landed


def _alone(w: World, m: WorkerMirror) -> None:
    """A round as the worker's, each partition stepped on its own, one step per pass."""
    r, store = m.runner, m.store
    r.settle_steps = 1
    w.now += 100
    for c in w.clusters.values():
        c.tick(100)
    for _ in range(10):
        desired = m.metadata.latest(m.name)
        r.reconcile_topics(w.now, desired)
        for key in store.keys(m.name):
            r.step_partitions(w.now, [key], desired)
        written = 0
        for p in range(store.num_partitions):  # type: ignore[attr-defined]
            ready, lmes, _ = store.prepare(p)  # type: ignore[attr-defined]
            m._history.extend((k, (store.durable.get(k) or s).state, s.state) for k, s in ready)  # type: ignore[attr-defined]
            store.land(ready)  # type: ignore[attr-defined]
            store.land_impacts(store.take_impacts(p))  # type: ignore[attr-defined]
            written += len(ready) + len(lmes)
        if not written:
            return


def _outcome(w: World, m: WorkerMirror, made: list[Any]) -> dict[str, Any]:
    b = w["b"]
    tps = sorted(m.runner.states())
    return {
        "states": {tp: s.with_(state_epoch=0) for tp, s in m.runner.states().items()},
        "history": sorted((k, x, y) for k, x, y in m.history),
        "logs": {tp: shape(batches(b, tp)) for tp in tps},
        "lmes": {tp: b.last_mirrored_epoch(m.name, tp) for tp in tps},
        "writable": [not b.describe_topics((t.topic_id,))[0].read_only for t in made],
    }


def _settled(w: World, m: WorkerMirror) -> bool:
    done = {DesiredState.STOP: MirrorState.STOPPED, DesiredState.PAUSE: MirrorState.PAUSED,
            DesiredState.START: MirrorState.MIRRORING}  # fmt: skip
    desired = m.metadata.latest(m.name)
    return all(s.state is done[desired[tp.topic_id][0]] for tp, s in m.runner.states().items())


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_TOPIC, min_size=1, max_size=3))
def test_partitions_stepped_together_decide_as_each_alone(topics):
    w1, m1, made1 = _world(topics)
    w2, m2, made2 = _world(topics)
    impacts1, impacts2 = _impacts(m1), _impacts(m2)
    m1._history.clear()  # type: ignore[attr-defined]
    m2._history.clear()  # type: ignore[attr-defined]
    for _ in range(30):
        if _settled(w1, m1) and not any(m1.store.pending.values()):  # type: ignore[attr-defined]
            break
        w1.step(100)
    for _ in range(30):
        if _settled(w2, m2) and not any(m2.store.pending.values()):  # type: ignore[attr-defined]
            break
        _alone(w2, m2)
    w1.step(100)  # the topic level of the round after the last STOPPED
    m2.runner.settle_steps = m1.runner.settle_steps
    w2.step(100)
    assert _settled(w1, m1) and _settled(w2, m2)
    one, two = _outcome(w1, m1, made1), _outcome(w2, m2, made2)
    assert one == two
    assert bool(one["history"]) == any(want is not DesiredState.START for _, want in topics)
    assert dict(impacts1) == dict(impacts2)  # the last of each (stepped alone, the ISR wait's is written first)
    assert all(one["writable"][i] for i, (_, want) in enumerate(topics) if want is DesiredState.STOP)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_TOPIC, min_size=1, max_size=3))
def test_what_a_pass_leaves_settled_a_fresh_pass_finds_settled(topics):
    w, m, _ = _world(topics)
    run_until(w, lambda: _settled(w, m) and not any(m.store.pending.values()))  # type: ignore[attr-defined]
    r = m.runner
    remembered = dict(r._settled)
    stopped_or_paused = {k for k, (state, _, _) in remembered.items() if state is not MirrorState.MIRRORING}
    expected = {MirrorPartitionKey(m.name, tp.topic_id, tp.partition) for tp, s in r.states().items()
                if s.state in (MirrorState.STOPPED, MirrorState.PAUSED)}  # fmt: skip
    assert stopped_or_paused == expected
    calls_before = [(c.name, len(batches(c, tp))) for c in w.clusters.values() for tp in r.states()]
    r._settled.clear()
    r.step_partitions(w.now, m.store.keys(m.name))
    assert not any(m.store.pending.values())  # type: ignore[attr-defined]
    assert [(c.name, len(batches(c, tp))) for c in w.clusters.values() for tp in r.states()] == calls_before
    assert {k: v for k, v in r._settled.items() if k in stopped_or_paused} == {
        k: v for k, v in remembered.items() if k in stopped_or_paused}
