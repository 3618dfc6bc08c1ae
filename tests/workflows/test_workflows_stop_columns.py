"""The columnar stop step decides as the per-partition path.

A mass stop's common steps (entering STOPPING, STOP_RECORD_LME, STOP_BUMP_EPOCH, STOP_WAIT_ISR)
are decided over columns (``coordinator.workflows.stop_columns``) and observed, executed and
written per step for all their partitions at once (``streams.runner.stop_columns``). Hypothesis:

- each columnar decision equals ``decide_partition``'s for the same state and observation
  (any state fields, destination offsets, latest epoch, open transactions, ISR status, last
  group sync, clock and desired offset), down to returning the state itself when it waits;
- a runner with the columnar step and one without, over the same topics, records, open
  transactions and desired states, with the same destination calls failing (retriable or not)
  and the same state writes fenced by another writer, leave after every round the same states,
  backoffs, logs, LMEs, state changes, impact values and writable topics.
"""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from workflow_harness import FAST, World, WorkerMirror, batches, source_topics, shape

from coordinator.partition_state import MirrorPartitionKey, MirrorPartitionState, Step
from coordinator.ports import (
    EpochEndOffset,
    InvalidRequest,
    IsrStatus,
    NotLeader,
    OpenTransaction,
    PartitionOffsets,
    TopicPartition,
)
from coordinator.states import DesiredState, MirrorState
from coordinator.workflows.commands import Decision, RemoveFetcher
from coordinator.workflows.config import MirrorConfig
from coordinator.workflows.drive import PartitionObservation, decide_partition
from coordinator.workflows.stop import FinalSync, StopObservation
from coordinator.workflows.stop_columns import ENTERS, bump_epochs, enter_stops, record_lmes, wait_isrs

_CONFIG = MirrorConfig()
_SMALL = st.integers(-1, 6)
_OFFSET = st.integers(-1, 12)


def _states(states: Any, steps: Any = st.sampled_from(list(Step))) -> Any:
    return st.builds(
        MirrorPartitionState, state=states, previous_state=st.sampled_from(list(MirrorState)),
        retry_attempt=st.integers(-1, 3), error_message=st.none() | st.just("boom"), leader_epoch=_SMALL,
        state_epoch=_SMALL, applied_offset=_OFFSET, entered_at_ms=st.integers(0, 5_000), step=steps,
        truncation_offset=_OFFSET, stop_offset=_OFFSET, last_mirrored_epoch=_SMALL, epoch_target=st.integers(-1, 8),
        retry_at_ms=st.integers(-1, 9), cut_offset=_OFFSET, cut_timestamp=_OFFSET, given_up_end_offset=_OFFSET,
        given_up_records=_OFFSET, newest_given_up_timestamp=_OFFSET)  # fmt: skip


def _stopping(step: Step) -> Any:
    return _states(st.just(MirrorState.STOPPING), st.just(step))


_DEST = st.builds(PartitionOffsets, log_start=st.just(0), lso=_OFFSET, hw=_OFFSET, leo=_OFFSET, leader_epoch=_SMALL)
_OPEN = st.lists(st.builds(OpenTransaction, producer_id=st.integers(0, 3), producer_epoch=st.integers(0, 2),
                           first_offset=_OFFSET), max_size=2).map(tuple)  # fmt: skip


def _key(i: int) -> MirrorPartitionKey:
    return MirrorPartitionKey("a-to-b", uuid.UUID(int=1 + i // 3), i % 3)


def _same(bulk: Decision, per: Decision, state: MirrorPartitionState) -> None:
    assert bulk == per
    assert (bulk.state is state) == (per.state is state)  # the runner writes only a new object


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(_states(st.sampled_from(sorted(ENTERS))), _OFFSET, st.booleans()), min_size=1, max_size=6),
       st.integers(0, 10_000))  # fmt: skip
def test_entering_stopping_decides_as_begin_stop(items, now):
    got = enter_stops([s for s, _, _ in items], now, [o for _, o, _ in items])
    for i, ((s, offset, fetching), after) in enumerate(zip(items, got)):
        key = _key(i)
        per = decide_partition(key, s, DesiredState.STOP, offset, PartitionObservation(in_fetcher=fetching), now, _CONFIG)
        _same(Decision(after, (RemoveFetcher(key.topic_partition),)), per, s)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(_stopping(Step.STOP_RECORD_LME), _DEST, _SMALL, st.booleans(), _OFFSET), min_size=1,
                max_size=6), st.integers(0, 10_000))  # fmt: skip
def test_recording_the_lme_decides_as_decide_stop(items, now):
    keys = [_key(i) for i in range(len(items))]
    got = record_lmes(keys, [k.topic_partition for k in keys], [it[0] for it in items], [it[1] for it in items],
                      [it[2] for it in items], [it[3] for it in items], [it[4] for it in items])  # fmt: skip
    for key, (s, dest, epoch, fetching, offset), bulk in zip(keys, items, got):
        # as the observer builds it from the destination's latest_epoch answer
        latest = EpochEndOffset(epoch, dest.leo) if epoch >= 0 else EpochEndOffset(-1, -1)
        obs = StopObservation(dest=dest, dest_latest_epoch=latest, in_fetcher=fetching, source_cluster_id="A")
        per = decide_partition(key, s, DesiredState.STOP, offset, PartitionObservation(in_fetcher=fetching, stop=obs),
                               now, _CONFIG)  # fmt: skip
        _same(bulk, per, s)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(_stopping(Step.STOP_BUMP_EPOCH), _DEST, st.booleans(), _OPEN, st.sampled_from(["", "A"]),
                          _OFFSET), min_size=1, max_size=6), st.integers(0, 10_000))  # fmt: skip
def test_bumping_the_epoch_decides_as_decide_stop(items, now):
    # half the logs still end at the stop offset (the markers go with the bump), half have grown
    items = [(s, dest.__class__(dest.log_start, dest.lso, dest.hw, s.stop_offset if at_stop else dest.leo,
                                dest.leader_epoch), opens, sid, offset)
             for s, dest, at_stop, opens, sid, offset in items]  # fmt: skip
    keys = [_key(i) for i in range(len(items))]
    got = bump_epochs([k.topic_partition for k in keys], [it[0] for it in items], [it[1] for it in items],
                      [it[2] for it in items], [it[3] for it in items], [it[4] for it in items])  # fmt: skip
    for key, (s, dest, opens, sid, offset), bulk in zip(keys, items, got):
        obs = StopObservation(dest=dest, open_transactions=opens, source_cluster_id=sid)
        per = decide_partition(key, s, DesiredState.STOP, offset, PartitionObservation(stop=obs), now, _CONFIG)
        _same(bulk, per, s)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(_stopping(Step.STOP_WAIT_ISR), st.booleans(), st.sampled_from([None, *FinalSync]),
                          _OFFSET), min_size=1, max_size=6), st.integers(0, 10_000))  # fmt: skip
def test_waiting_for_the_isr_decides_as_wait_isr(items, now):
    keys = [_key(i) for i in range(len(items))]
    timeout = _CONFIG.stop_group_sync_timeout_ms
    got = wait_isrs([it[0] for it in items], [it[1] for it in items], [it[2] for it in items], now, timeout,
                    [it[3] for it in items])  # fmt: skip
    for key, (s, caught_up, final, offset), after in zip(keys, items, got):
        isr = IsrStatus(key.topic_id, key.partition, 0, 0, 10, 10 if caught_up else 9, ())
        obs = StopObservation(dest=None, isr=isr, final_sync=final)
        per = decide_partition(key, s, DesiredState.STOP, offset, PartitionObservation(stop=obs), now, _CONFIG)
        _same(Decision(after), per, s)


# ---------------------------------------------------------------------------------------------
# The runner with the columnar step and without it
# ---------------------------------------------------------------------------------------------

_METHODS = ["list_offsets", "latest_epoch", "open_transactions", "isr_status", "set_last_mirrored_epoch",
            "bump_leader_epoch", "append_control_batch"]  # fmt: skip


class FaultyPort:
    """The destination, whose calls for a partition fail (the first ``n`` of a method once
    armed) or let another writer move its state on first (a fenced write): per partition and
    method, so both runners meet the same faults whatever order they call in."""

    def __init__(self, port: Any) -> None:
        self._port = port
        self.armed = False
        self.failing: dict[tuple[str, TopicPartition], list[Any]] = {}  # -> [calls left to fail, error]
        self.fencing: dict[tuple[str, TopicPartition], Any] = {}  # -> what the other writer does

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._port, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            tp = args[0] if args and isinstance(args[0], TopicPartition) else args[1] if len(args) > 1 else None
            if self.armed and isinstance(tp, TopicPartition):
                failing = self.failing.get((name, tp))
                if failing is not None and failing[0] > 0:
                    failing[0] -= 1
                    raise failing[1]
                fence = self.fencing.pop((name, tp), None)
                if fence is not None:
                    fence()
            return attr(*args, **kwargs)

        return call


def _another_writer(m: WorkerMirror, key: MirrorPartitionKey) -> Any:
    """A write of the same state by another writer (a higher state and leader epoch): the
    runner's write built on what it read is fenced."""
    def write() -> None:
        store: Any = m.store
        p = store.partition_of(key)
        queued = store.pending.get(p, {})
        where = queued if key in queued else store.durable
        s = where.get(key)
        if s is not None:
            where[key] = s.with_(state_epoch=s.state_epoch + 3, leader_epoch=s.leader_epoch + 1)
    return write


_DESIRED = st.sampled_from([DesiredState.STOP, DesiredState.STOP, DesiredState.PAUSE, DesiredState.START])
_PARTITION = st.tuples(st.integers(0, 2), st.booleans())  # (records, an open transaction)
_TOPIC = st.tuples(st.lists(_PARTITION, min_size=1, max_size=3), _DESIRED)
_FAULT = st.tuples(st.integers(0, 20), st.sampled_from(_METHODS), st.integers(1, 2), st.booleans())
_FENCE = st.tuples(st.integers(0, 20), st.sampled_from(_METHODS))


def _world(topics: list[tuple[list[tuple[int, bool]], DesiredState]], faults: list[Any], fences: list[Any],
           columns: bool) -> tuple[World, WorkerMirror, FaultyPort, list[Any]]:  # fmt: skip
    w = World("a", "b", worker=True)
    made = source_topics(w, topics)
    m = w.mirror("a", "b", FAST)
    assert isinstance(m, WorkerMirror)
    port = FaultyPort(w["b"])
    m.runner = m.build(dest=port)
    m.runner.columns.enabled = columns
    for t in made:
        m.set_desired(t.topic_id, DesiredState.START)
    total = sum(len(p) for p, _ in topics)
    for _ in range(60):
        states = m.runner.states()
        if len(states) == total and all(s.state is MirrorState.MIRRORING for s in states.values()):
            break
        w.step(100)
    tps = [TopicPartition(t.topic_id, p) for t, (parts, _) in zip(made, topics) for p in range(len(parts))]
    for i, method, n, retriable in faults:
        tp = tps[i % len(tps)]
        port.failing[(method, tp)] = [n, NotLeader(tp, -1, 0) if retriable else InvalidRequest(f"no {method}")]
    for i, method in fences:
        tp = tps[i % len(tps)]
        port.fencing[(method, tp)] = _another_writer(m, MirrorPartitionKey(m.name, tp.topic_id, tp.partition))
    port.armed = True
    for t, (_, want) in zip(made, topics):
        if want is not DesiredState.START:
            m.set_desired(t.topic_id, want)
    return w, m, port, made


def _seen(w: World, m: WorkerMirror, made: list[Any]) -> dict[str, Any]:
    b, r = w["b"], m.runner
    tps = sorted(r.states())
    return {
        "states": r.states(),
        "backoff": dict(r.backoff_until),
        "logs": {tp: shape(batches(b, tp)) for tp in tps},
        "lmes": {tp: b.last_mirrored_epoch(m.name, tp) for tp in tps},
        "history": sorted((k, x, y) for k, x, y in m.history),
        "writable": [not b.describe_topics((t.topic_id,))[0].read_only for t in made],
        "fetching": [sorted(s) for s in r.sessions],
    }


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_TOPIC, min_size=1, max_size=3), st.lists(_FAULT, max_size=3), st.lists(_FENCE, max_size=2))
def test_the_columnar_step_leaves_what_the_per_partition_path_leaves(topics, faults, fences):
    w1, m1, _, made1 = _world(topics, faults, fences, columns=True)
    w2, m2, _, made2 = _world(topics, faults, fences, columns=False)
    landed1: list[Any] = []
    landed2: list[Any] = []
    for m, landed in ((m1, landed1), (m2, landed2)):
        store: Any = m.store
        land = store.land_impacts
        store.land_impacts = lambda written, land=land, landed=landed: (landed.extend(sorted(written.items())),
                                                                       land(written))  # fmt: skip
    assert _seen(w1, m1, made1) == _seen(w2, m2, made2)
    for _ in range(40):
        w1.step(100)
        w2.step(100)
        assert _seen(w1, m1, made1) == _seen(w2, m2, made2)
        assert landed1 == landed2
    stopped = [i for i, (_, want) in enumerate(topics) if want is DesiredState.STOP]
    assert all(m1.runner.state(tp).state in (MirrorState.STOPPED, MirrorState.FAILED)
               for tp in m1.runner.states() if any(tp.topic_id == made1[i].topic_id for i in stopped))  # fmt: skip
