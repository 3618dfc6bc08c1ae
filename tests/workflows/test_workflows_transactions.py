"""Transactions across failover and failback (SPEC "Transactions", thread AS30).

The fetcher copies every batch up to the source's HW, as a follower does: open transactions,
markers and aborted data alike. The destination's producer state, LSO and aborted index are
rebuilt from the copied batches, so read_committed reads the same on both sides up to the copied
offset. STOPPING aborts exactly the transactions still open on the destination, once each; a
transaction whose COMMIT was copied is never aborted.
"""

from __future__ import annotations

from workflow_harness import World, all_in, batches, committed_values, control_types, prefix, run_until

from coordinator.ports import ControlType, IsolationLevel
from coordinator.states import DesiredState, MirrorState


def _mirrored(w, m, src, dst, tp):
    return lambda: all_in(m, MirrorState.MIRRORING) and w[dst].list_offsets(tp).leo == w[src].list_offsets(tp).hw


def test_commit_above_the_lso_is_copied_and_never_aborted():
    """The observed loss: a committed transaction whose COMMIT sits above the source LSO."""
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
    a.produce("tx", 0, [(b"k", b"plain-1")])
    src = a.list_offsets(tp)
    assert (src.lso, src.hw) == (4, 7)
    ab = w.mirror("a", "b")
    ab.set_desired(topic.topic_id, DesiredState.START)
    run_until(w, _mirrored(w, ab, "a", "b", tp))
    b = w["b"]
    # Everything up to the source HW, open transaction included; B's LSO is rebuilt, not copied.
    assert prefix(b, tp, 10**9) == prefix(a, tp, 10**9)
    dst = b.list_offsets(tp)
    assert (dst.leo, dst.lso) == (src.hw, src.lso)
    assert [r.state.name for r in ab.runner.describe()] == ["MIRRORING"]
    assert [r.lag for r in ab.runner.describe()] == [0], "lag is source HW - destination LEO"
    still_open = a.partition(tp).leader_log.batches[4].producer_id
    assert [t.producer_id for t in b.open_transactions(tp)] == [still_open]

    ab.set_desired(topic.topic_id, DesiredState.STOP)
    run_until(w, lambda: all_in(ab, MirrorState.STOPPED))
    assert b.open_transactions(tp) == []
    off = b.list_offsets(tp)
    assert off.leo == src.leo + 1 + 1, "one ABORT for the open transaction, one MIRROR_PID_RESET"
    assert off.lso == off.hw == off.leo
    assert control_types(b, tp) == [ControlType.ABORT, ControlType.COMMIT, ControlType.ABORT,
                                    ControlType.MIRROR_PID_RESET]  # fmt: skip
    ours = batches(b, tp)[-2:]
    assert ours[0].producer_id == still_open
    state = ab.runner.state(tp)
    assert all(x.leader_epoch == state.epoch_target > state.last_mirrored_epoch for x in ours)
    # The committed transaction stays committed; the acknowledged plain record is there.
    assert committed_values(b, tp) == [b"plain-0", b"late-commit-data", b"plain-1"]
    fetched = b.fetch(tp, 0, 1 << 20, IsolationLevel.READ_COMMITTED)
    assert len(fetched.aborted_transactions) == 2

    # A producer on B reusing the transactional ID commits new transactions after the PID reset.
    b.init_producer_id("still-open")
    b.begin_transaction("still-open")
    b.produce_transactional("still-open", "tx", 0, [(b"k", b"b-txn")])
    b.commit_transaction("still-open")
    assert committed_values(b, tp)[-1] == b"b-txn"


def test_stop_with_txns_prototype_arithmetic():
    """The prototype's stop_with_txns: interleaved transactions, two left open on one partition.
    B's end offset after STOPPED = A's end offset + 2 ABORT markers + 1 MIRROR_PID_RESET."""
    w = World("a", "b")
    a = w["a"]
    topic = a.add_topic("my-topic", partitions=1)
    tp = a.tp("my-topic", 0)

    def txn(tid, records=1):
        a.init_producer_id(tid)
        a.begin_transaction(tid)
        for i in range(records):
            a.produce_transactional(tid, "my-topic", 0, [(b"k", f"{tid}-{i}".encode())])

    txn("a")
    a.commit_transaction("a")
    txn("a")  # commits later, after the others began
    a.produce("my-topic", 0, [(b"k", b"plain-0")])
    txn("b")  # left pending
    txn("d")  # left pending, then fenced by d's next init (its ABORT written by A's coordinator)
    txn("c")
    txn("d")  # pending
    a.abort_transaction("c")
    a.commit_transaction("a")
    a.produce("my-topic", 0, [(b"k", b"plain-1")])
    assert len(a.open_transactions(tp)) == 2
    ab = w.mirror("a", "b")
    ab.set_desired(topic.topic_id, DesiredState.START)
    run_until(w, _mirrored(w, ab, "a", "b", tp))
    ab.set_desired(topic.topic_id, DesiredState.STOP)
    run_until(w, lambda: all_in(ab, MirrorState.STOPPED))
    b = w["b"]
    assert b.list_offsets(tp).leo == a.list_offsets(tp).leo + 2 + 1
    assert b.open_transactions(tp) == []
    # Commit new transactions on B under the same transactional IDs.
    for tid in ("b", "d"):
        b.init_producer_id(tid)
        b.begin_transaction(tid)
        b.produce_transactional(tid, "my-topic", 0, [(b"k", f"{tid}-on-b".encode())])
        b.commit_transaction(tid)
    on_a, on_b = committed_values(a, tp), committed_values(b, tp)
    # read_committed on B: A's committed records (A's own LSO holds its read back at b's data),
    # then those after it that B decided: nothing of b, c or d from A survives.
    assert on_b == [b"a-0", b"a-0", b"plain-0", b"plain-1", b"b-on-b", b"d-on-b"]
    assert on_a == [b"a-0", b"a-0", b"plain-0"]  # A still has b and d open: its LSO sits at b's data


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
    assert w["b"].list_offsets(tp).leo == 3  # the open transaction's data was copied too
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
    assert prefix(a, tp, 10**9) == prefix(b, tp, 10**9)  # A's open transaction closed by B's ABORT
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
    assert control_types(a, tp) == control_types(b, tp) == [ControlType.ABORT, ControlType.MIRROR_PID_RESET]
    assert committed_values(a, tp) == [b"v0", b"v1", b"b-side"]
