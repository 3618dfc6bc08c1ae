"""Chained mirroring A -> B -> C with B's producers reusing A's producer IDs (thread RS12, seeds/001).

Every model cluster hands out producer IDs from 1000, like two real clusters whose producer-ID
blocks overlap. MIRROR_PID_RESET written by B's failover travels to C and makes C forget A's
producers before B's own producer with the same ID shows up, so C never mistakes one for the other.
"""

from __future__ import annotations

from workflow_harness import World, all_in, batches, control_types, prefix, run_until

from coordinator.ports import ControlType
from coordinator.states import DesiredState, MirrorState


def test_chain_a_b_c_producer_state_never_confused():
    w = World("a", "b", "c")
    a, b, c = w["a"], w["b"], w["c"]
    topic = a.add_topic("chain", partitions=1)
    tp = a.tp("chain", 0)
    pid_a = a.init_producer_id().producer_id
    for i in range(3):
        a.produce_idempotent(pid_a, 0, "chain", 0, [(b"k", f"a{i}".encode())])
    a.init_producer_id("txn-a")
    a.begin_transaction("txn-a")
    a.produce_transactional("txn-a", "chain", 0, [(b"k", b"a-txn")])
    a.commit_transaction("txn-a")
    ab, bc = w.mirror("a", "b"), w.mirror("b", "c")
    ab.set_desired(topic.topic_id, DesiredState.START)
    bc.set_desired(topic.topic_id, DesiredState.START)
    run_until(w, lambda: all_in(ab, MirrorState.MIRRORING) and all_in(bc, MirrorState.MIRRORING)
              and c.list_offsets(tp).leo == a.list_offsets(tp).leo)

    # Failover on B only: A -x-> B --> C. B's producers get the same IDs A's had.
    ab.set_desired(topic.topic_id, DesiredState.STOP)
    run_until(w, lambda: all_in(ab, MirrorState.STOPPED) and not b.topic("chain").read_only)
    reset_at = next(x.base_offset for x in batches(b, tp) if x.control_type == ControlType.MIRROR_PID_RESET)
    pid_b = b.init_producer_id().producer_id
    assert pid_b == pid_a
    for i in range(4):
        b.produce_idempotent(pid_b, 0, "chain", 0, [(b"k", f"b{i}".encode())])
    # A retried batch of B's producer is recognised against B's history, not A's.
    first_b = next(x for x in batches(b, tp) if x.base_offset > reset_at)
    again = b.produce("chain", 0, [(b"k", b"b0")], producer_id=pid_b, producer_epoch=0, base_sequence=0)
    assert again.base_offset == first_b.base_offset > reset_at

    run_until(w, lambda: c.list_offsets(tp).leo == b.list_offsets(tp).leo)
    assert prefix(c, tp, 10**9) == prefix(b, tp, 10**9)
    assert control_types(c, tp).count(ControlType.MIRROR_PID_RESET) == 1
    entry = c.partition(tp).leader_log.producers.producers[pid_a]
    assert all(m.base_offset > reset_at for m in entry.batches), "C kept A's producer history"
    assert [m.first_seq for m in entry.batches] == [0, 1, 2, 3]
    assert c.open_transactions(tp) == []

    # C fails over too: its own producer 1000 starts at sequence 0 without tripping on B's.
    bc.set_desired(topic.topic_id, DesiredState.STOP)
    run_until(w, lambda: all_in(bc, MirrorState.STOPPED) and not c.topic("chain").read_only)
    pid_c = c.init_producer_id().producer_id
    assert pid_c == pid_a
    batch = c.produce_idempotent(pid_c, 0, "chain", 0, [(b"k", b"c0")])
    assert batch.base_sequence == 0 and batch.base_offset == c.list_offsets(tp).leo - 1
    assert control_types(c, tp).count(ControlType.MIRROR_PID_RESET) == 2
