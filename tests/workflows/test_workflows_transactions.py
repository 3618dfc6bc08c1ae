"""Transactions across failover and failback (SPEC "Transactions", thread AS30).

The fetcher reads up to the source LSO, so a transaction still open on the source is never
copied; a transaction left open on the destination at failover is one whose marker had not
been copied yet. STOPPING aborts it, so a read_committed consumer on the destination never sees
part of a transaction and is never stuck behind an open one.
"""

from __future__ import annotations

from workflow_harness import World, all_in, batches, committed_values, control_types, prefix, run_until

from coordinator.ports import ControlType, IsolationLevel
from coordinator.states import DesiredState, MirrorState


def _mirrored(w, m, src, dst, tp):
    return lambda: all_in(m, MirrorState.MIRRORING) and w[dst].list_offsets(tp).leo == w[src].list_offsets(tp).lso


def test_stop_aborts_open_transactions_read_committed_sees_no_partial_transaction():
    w = World("a", "b")
    a = w["a"]
    topic = a.add_topic("tx", partitions=1)
    tp = a.tp("tx", 0)
    a.produce("tx", 0, [(b"k", b"plain-0")])
    for tid in ("aborted", "late-commit", "still-open"):
        a.init_producer_id(tid)
    a.begin_transaction("aborted")
    a.produce_transactional("aborted", "tx", 0, [(b"k", b"aborted-data")])
    a.abort_transaction("aborted")
    a.begin_transaction("late-commit")
    a.produce_transactional("late-commit", "tx", 0, [(b"k", b"late-commit-data")])
    a.begin_transaction("still-open")
    a.produce_transactional("still-open", "tx", 0, [(b"k", b"still-open-data")])
    a.commit_transaction("late-commit")  # its COMMIT sits above the LSO, held back by "still-open"
    ab = w.mirror("a", "b")
    ab.set_desired(topic.topic_id, DesiredState.START)
    run_until(w, _mirrored(w, ab, "a", "b", tp))
    lso = a.list_offsets(tp).lso
    assert w["b"].list_offsets(tp).leo == lso == 4  # plain, aborted txn + its marker, late-commit data
    assert [t.producer_id for t in w["b"].open_transactions(tp)] == [a.partition(tp).leader_log.batches[3].producer_id]

    ab.set_desired(topic.topic_id, DesiredState.STOP)
    run_until(w, lambda: all_in(ab, MirrorState.STOPPED))
    b = w["b"]
    assert b.open_transactions(tp) == []
    off = b.list_offsets(tp)
    assert off.lso == off.hw == off.leo, "no open transaction holds the destination LSO back"
    assert control_types(b, tp) == [ControlType.ABORT, ControlType.ABORT, ControlType.MIRROR_PID_RESET]
    ours = batches(b, tp)[-2:]
    state = ab.runner.state(tp)
    assert all(x.leader_epoch == state.epoch_target > state.last_mirrored_epoch for x in ours)
    # A read_committed consumer on B sees no transactional data: one txn aborted on the source,
    # the other (committed on A after the mirror read it) aborted by the failover.
    assert committed_values(b, tp) == [b"plain-0"]
    assert committed_values(a, tp)[:2] == [b"plain-0", b"late-commit-data"]  # the documented async loss
    fetched = b.fetch(tp, 0, 1 << 20, IsolationLevel.READ_COMMITTED)
    assert len(fetched.aborted_transactions) == 2


def _failed_over_with_open_txn(w):
    """A has an open transaction at failover; B took over and has written its own records."""
    a = w["a"]
    topic = a.add_topic("tx", partitions=1)
    tp = a.tp("tx", 0)
    a.produce("tx", 0, [(b"k", b"v0")])
    a.produce("tx", 0, [(b"k", b"v1")])
    a.init_producer_id("long")
    a.begin_transaction("long")
    a.produce_transactional("long", "tx", 0, [(b"k", b"long-running")])
    ab = w.mirror("a", "b")
    ab.set_desired(topic.topic_id, DesiredState.START)
    run_until(w, _mirrored(w, ab, "a", "b", tp))
    assert w["b"].list_offsets(tp).leo == 2  # the open transaction was not copied
    ab.set_desired(topic.topic_id, DesiredState.STOP)
    run_until(w, lambda: all_in(ab, MirrorState.STOPPED))
    w["b"].produce("tx", 0, [(b"k", b"b-side")])
    return topic, tp


def test_as30_transaction_completing_after_failback_does_not_corrupt_the_log():
    w = World("a", "b")
    topic, tp = _failed_over_with_open_txn(w)
    a, b = w["a"], w["b"]
    ba = w.mirror("b", "a")
    ba.set_desired(topic.topic_id, DesiredState.START)
    run_until(w, _mirrored(w, ba, "b", "a", tp))
    assert prefix(a, tp, 10**9) == prefix(b, tp, 10**9)  # A's open transaction was truncated away
    assert a.open_transactions(tp) == []

    # What happens: A's transaction coordinator completes the old transaction late. Its marker
    # bypasses the read-only check and lands in A's mirror log, where B has no such batch.
    a.commit_transaction("long")
    assert control_types(a, tp)[-1] is ControlType.COMMIT
    assert prefix(a, tp, 10**9) != prefix(b, tp, 10**9)

    # Made safe: the marker carries A's own leader epoch, which B's log does not have, so the next
    # fetch reports a diverging epoch and the mirror truncates it (as a Kafka follower would).
    b.produce("tx", 0, [(b"k", b"b-after")])
    rounds = run_until(w, lambda: prefix(a, tp, 10**9) == prefix(b, tp, 10**9), max_rounds=5)
    assert rounds >= 1
    assert ControlType.COMMIT not in control_types(a, tp)
    assert committed_values(a, tp) == committed_values(b, tp) == [b"v0", b"v1", b"b-side", b"b-after"]


def test_as30_transaction_completing_before_failback_is_truncated_no_duplicate_markers():
    w = World("a", "b")
    topic, tp = _failed_over_with_open_txn(w)
    a, b = w["a"], w["b"]
    a.commit_transaction("long")  # completes on the old source while B is the writable side
    ba = w.mirror("b", "a")
    ba.set_desired(topic.topic_id, DesiredState.START)
    run_until(w, _mirrored(w, ba, "b", "a", tp))
    assert prefix(a, tp, 10**9) == prefix(b, tp, 10**9)
    assert control_types(a, tp) == control_types(b, tp) == [ControlType.MIRROR_PID_RESET]
    assert committed_values(a, tp) == [b"v0", b"v1", b"b-side"]
