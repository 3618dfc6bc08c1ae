"""``--stop --consistent-cut`` over the model (issue #26, part 3): two topics whose records
interleave in time, a transaction across both and one left open, the source dead. The dry run's
cut (``streams.runner.preview.preview_cut``) is what the stop then does: on B no record after T
is readable (read_committed or read_uncommitted), every record up to T is, the state in
``__mirror_state`` says what was given up; a crash in the middle of the cut resumes; and a
failback leaves A a copy of B (A's records after the cut are truncated, not kept).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from workflow_harness import Crash, CrashingPort, World, all_in, batches, run_until, shape

from clustermodel.records import batch_values, read_committed_batches
from coordinator.cut import CutPlan, CutRefusal
from coordinator.partition_state import Step
from coordinator.states import DesiredState, MirrorState
from streams.runner.preview import preview_cut, preview_failback

LAT = {"message.timestamp.type": "LogAppendTime"}


def _source(w):
    a = w["a"]
    orders = a.add_topic("orders", partitions=2, configs=LAT)
    payments = a.add_topic("payments", partitions=1, configs=LAT)
    for i in range(6):  # interleaved in time across the topics
        a.produce("orders", i % 2, [(b"o", f"order{i}".encode())])
        a.tick(1)
        a.produce("payments", 0, [(b"p", f"payment{i}".encode())])
        a.tick(1)
    a.init_producer_id("tx")
    a.begin_transaction("tx")  # one transaction over both topics, committed
    a.produce_transactional("tx", "orders", 0, [(b"o", b"order-tx")])
    a.produce_transactional("tx", "payments", 0, [(b"p", b"payment-tx")])
    a.tick(1)
    a.commit_transaction("tx")
    a.tick(1)
    for i in range(6, 9):
        a.produce("orders", i % 2, [(b"o", f"order{i}".encode())])
        a.tick(1)
    a.init_producer_id("open")
    a.begin_transaction("open")  # left open: its data cannot be kept readable, so T goes before it
    a.produce_transactional("open", "payments", 0, [(b"p", b"payment-open")])
    a.tick(1)
    for i in range(9, 12):
        a.produce("orders", i % 2, [(b"o", f"order{i}".encode())])
        a.produce("payments", 0, [(b"p", f"payment{i}".encode())])
        a.tick(1)
    return [orders, payments], [a.tp("orders", 0), a.tp("orders", 1), a.tp("payments", 0)]


def _values(bs):
    return [v for b in bs if not b.is_control for v in batch_values(b)]


def _mirror_then_lose_the_source(w):
    topics, tps = _source(w)
    a, b = w["a"], w["b"]
    ab = w.mirror("a", "b")
    for t in topics:
        ab.set_desired(t.topic_id, DesiredState.START)
    run_until(w, lambda: all_in(ab, MirrorState.MIRRORING) and all(b.list_offsets(tp).leo == a.list_offsets(tp).leo for tp in tps))
    a.set_unreachable(True)  # the disaster
    return topics, tps, ab


@pytest.mark.parametrize("worker", [False, True])
def test_consistent_cut_across_two_topics_then_failback(worker):
    w = World("a", "b", worker=worker)
    a, b = w["a"], w["b"]
    topics, tps, ab = _mirror_then_lose_the_source(w)

    journals = {n: c.snapshot() for n, c in w.clusters.items()}
    plan = preview_cut(a, b, tps)
    assert {n: c.snapshot() for n, c in w.clusters.items()} == journals, "the dry run wrote to a cluster"
    assert isinstance(plan, CutPlan), plan
    t = plan.timestamp
    open_first = next(x for x in batches(b, tps[2]) if x.is_transactional and _values([x]) == [b"payment-open"])
    assert t < open_first.timestamp  # the open transaction's records are all after the cut
    assert plan.given_up_records > 0

    cuts = plan.topic_cuts()
    for topic in topics:
        ab.runner.set_desired(topic.topic_id, DesiredState.STOP, cuts[topic.topic_id])
    run_until(w, lambda: all_in(ab, MirrorState.STOPPED))

    a.set_unreachable(False)  # to read what A holds (nothing moves on A)
    for tp in tps:
        predicted = plan.of(tp)
        state = ab.runner.state(tp)
        assert (state.cut_offset, state.cut_timestamp) == (predicted.cut_offset, t)
        assert (state.given_up_end_offset, state.given_up_records) == (predicted.leo, predicted.given_up_records)
        assert state.newest_given_up_timestamp == (predicted.newest_given_up_timestamp or -1)
        on_b = batches(b, tp)
        assert on_b[-1].is_control and all(x.is_control for x in on_b if x.base_offset >= predicted.cut_offset)
        # read_uncommitted: no record after T; read_committed: every record up to T, and only those.
        assert all(x.timestamp <= t for x in on_b if not x.is_control)
        up_to_t = [x for x in read_committed_batches(a, tp) if x.timestamp <= t]
        assert _values(read_committed_batches(b, tp)) == _values(up_to_t) == _values(x for x in on_b if x.base_offset < predicted.cut_offset)
        assert [x for x in on_b if x.base_offset < predicted.cut_offset] == [x for x in batches(a, tp) if x.base_offset < predicted.cut_offset]
        assert b.open_transactions(tp) == []
    # The transaction over both topics is before T: committed and readable on both sides.
    assert b"order-tx" in _values(read_committed_batches(b, tps[0]))
    assert b"payment-tx" in _values(read_committed_batches(b, tps[2]))

    # Failback: A mirrors B; A's records after the cut (B never kept them) are truncated, as
    # the failback's dry run says.
    for tp in tps:
        assert b.last_mirror_cut("a-to-b", tp) == plan.of(tp).cut_offset
    removed = {p.tp: p for p in preview_failback(b, a, "b-to-a", tps).partitions}
    for tp in tps:
        assert (removed[tp].target, removed[tp].removed) == (plan.of(tp).cut_offset, a.list_offsets(tp).leo - plan.of(tp).cut_offset)
    ba = w.mirror("b", "a")
    for topic in topics:
        ba.set_desired(topic.topic_id, DesiredState.START)
    run_until(w, lambda: all_in(ba, MirrorState.MIRRORING) and all(a.list_offsets(tp).leo == b.list_offsets(tp).hw for tp in tps))
    for tp in tps:
        assert ba.runner.state(tp).truncation_offset == plan.of(tp).cut_offset
        assert shape(batches(a, tp)) == shape(batches(b, tp)), "A is not a copy of B after the failback"


def test_a_crash_in_the_middle_of_the_cut_resumes_it():
    w = World("a", "b")
    a, b = w["a"], w["b"]
    topics, tps, ab = _mirror_then_lose_the_source(w)
    plan = preview_cut(a, b, tps)
    assert isinstance(plan, CutPlan)
    cuts = plan.topic_cuts()
    ab.runner = ab.build(dest=CrashingPort(b, 0))  # dies at its first write to B: the first truncation
    for topic in topics:
        ab.runner.set_desired(topic.topic_id, DesiredState.STOP, cuts[topic.topic_id])
    with pytest.raises(Crash):
        for _ in range(20):
            w.step()
    cutting = [tp for tp in tps if ab.runner.state(tp).step is Step.STOP_CUT]
    assert cutting and all(ab.runner.state(tp).given_up_end_offset >= 0 for tp in cutting)
    ab.restart()
    run_until(w, lambda: all_in(ab, MirrorState.STOPPED))
    for tp in tps:
        assert ab.runner.state(tp).given_up_records == plan.of(tp).given_up_records
        assert all(x.timestamp <= plan.timestamp for x in batches(b, tp) if not x.is_control)


# One operation on A: a plain record on a topic, or a transaction over both topics, committed,
# aborted or left open; each a millisecond or more after the last (one clock: LogAppendTime).
op = st.tuples(st.sampled_from(["orders", "payments", "commit", "abort", "open"]), st.integers(0, 3))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mirrored=st.lists(op, min_size=1, max_size=8), unmirrored=st.lists(op, max_size=4), dead=st.booleans())
def test_the_dry_runs_cut_is_what_the_stop_cuts(mirrored, unmirrored, dead):
    w = World("a", "b")
    a, b = w["a"], w["b"]
    topics = [a.add_topic("orders", partitions=1, configs=LAT), a.add_topic("payments", partitions=1, configs=LAT)]
    tps = [a.tp("orders", 0), a.tp("payments", 0)]
    _apply(a, mirrored, "m")
    ab = w.mirror("a", "b")
    for t in topics:
        ab.set_desired(t.topic_id, DesiredState.START)
    run_until(w, lambda: all_in(ab, MirrorState.MIRRORING) and all(b.list_offsets(tp).leo == a.list_offsets(tp).leo for tp in tps))
    _apply(a, unmirrored, "u")  # after B's last fetch: lag the source (when it answers) reports
    a.set_unreachable(dead)
    plan = preview_cut(a, b, tps)
    event("refused" if isinstance(plan, CutRefusal) else f"cut, {'some' if plan.given_up_records else 'nothing'} given up")
    if isinstance(plan, CutRefusal):  # only with the source down: an idle or empty partition
        assert dead and "idle or lagging" in plan.message, plan
        return
    cuts = plan.topic_cuts()
    for t in topics:
        ab.runner.set_desired(t.topic_id, DesiredState.STOP, cuts[t.topic_id])
    run_until(w, lambda: all_in(ab, MirrorState.STOPPED))
    for tp in tps:
        p, state = plan.of(tp), ab.runner.state(tp)
        assert (state.cut_offset, state.given_up_end_offset, state.given_up_records) == (p.cut_offset, p.leo, p.given_up_records)
        on_b = batches(b, tp)
        assert [x for x in on_b if not x.is_control or x.base_offset < p.cut_offset] == \
               [x for x in on_b if x.base_offset < p.cut_offset]  # only the stop's markers after the cut
        assert all(x.timestamp <= plan.timestamp for x in on_b if x.base_offset < p.cut_offset)
        assert b.open_transactions(tp) == []


def _apply(a, ops, tag):
    for i, (kind, dt) in enumerate(ops):
        a.tick(1 + dt)
        if kind in ("orders", "payments"):
            a.produce(kind, 0, [(b"k", f"{tag}{i}".encode())])
            continue
        tid = f"{tag}-tx{i}"
        a.init_producer_id(tid)
        a.begin_transaction(tid)
        a.produce_transactional(tid, "orders", 0, [(b"o", f"{tag}{i}".encode())])
        a.tick(1)
        a.produce_transactional(tid, "payments", 0, [(b"p", f"{tag}{i}".encode())])
        a.tick(1)
        if kind == "commit":
            a.commit_transaction(tid)
        elif kind == "abort":
            a.abort_transaction(tid)
