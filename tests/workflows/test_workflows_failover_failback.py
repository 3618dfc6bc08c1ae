"""Failover (stop) and failback (start the reverse mirror) on the model: A -> B, B -> A, and back.

Every test asserts the end state of both logs: offsets, batches and batch epochs are the same
up to the new source's HW, and the coordinator's own STOPPING writes (ABORT markers, one
MIRROR_PID_RESET) are where the workflow says.
"""

from __future__ import annotations

from workflow_harness import (
    World,
    all_in,
    batches,
    committed_values,
    control_types,
    dle,
    prefix,
    run_until,
)

from coordinator.ports import ControlType
from coordinator.states import DesiredState, MirrorState


def _produce(c, topic, n, tag, partitions=2):
    for i in range(n):
        c.produce(topic, i % partitions, [(f"k{i}".encode(), f"{tag}{i}".encode())])


def _start(world, src, dst, topic_id):
    m = world.mirror(src, dst)
    m.set_desired(topic_id, DesiredState.START)
    return m


def _converged(world, m, src, dst, tps):
    def ok():
        return all_in(m, MirrorState.MIRRORING) and all(
            world[dst].list_offsets(tp).leo == world[src].list_offsets(tp).hw for tp in tps)
    return ok


def test_failover_then_failback_twice_logs_converge():
    w = World("a", "b")
    topic = w["a"].add_topic("orders", partitions=2)
    tps = [w["a"].tp("orders", p) for p in range(2)]
    _produce(w["a"], "orders", 10, "a")
    ab = _start(w, "a", "b", topic.topic_id)
    run_until(w, _converged(w, ab, "a", "b", tps))
    for tp in tps:
        assert prefix(w["b"], tp, 10**9) == prefix(w["a"], tp, 10**9)
        assert dle(w["b"], tp) >= dle(w["a"], tp)

    # Failover: B stops mirroring and becomes writable; A keeps taking writes (split brain).
    ab.set_desired(topic.topic_id, DesiredState.STOP)
    run_until(w, lambda: all_in(ab, MirrorState.STOPPED) and not w["b"].topic("orders").read_only)
    stop_offsets = {tp: ab.runner.state(tp).stop_offset for tp in tps}
    for tp in tps:
        assert control_types(w["b"], tp) == [ControlType.MIRROR_PID_RESET]
        assert w["b"].last_mirrored_epoch("a-to-b", tp) == 0
    _produce(w["b"], "orders", 6, "b")
    _produce(w["a"], "orders", 4, "lost-on-a")

    # Failback: A mirrors B ("b-to-a"); A's divergent writes after the LME boundary go.
    ba = _start(w, "b", "a", topic.topic_id)
    run_until(w, _converged(w, ba, "b", "a", tps))
    for tp in tps:
        hw = w["b"].list_offsets(tp).hw
        assert prefix(w["a"], tp, hw) == prefix(w["b"], tp, hw)
        assert w["a"].list_offsets(tp).leo == hw
        assert b"lost-on-a" not in b"".join(v or b"" for v in committed_values(w["a"], tp))
        assert dle(w["a"], tp) >= dle(w["b"], tp)
        # The boundary A truncated to is where B's own epoch starts.
        assert ba.runner.state(tp).truncation_offset == stop_offsets[tp]

    # Second round trip: A takes over again, then B follows A.
    ba.set_desired(topic.topic_id, DesiredState.STOP)
    run_until(w, lambda: all_in(ba, MirrorState.STOPPED) and not w["a"].topic("orders").read_only)
    _produce(w["a"], "orders", 5, "a2")
    _produce(w["b"], "orders", 3, "lost-on-b")
    ab.set_desired(topic.topic_id, DesiredState.START)
    run_until(w, _converged(w, ab, "a", "b", tps))
    for tp in tps:
        hw = w["a"].list_offsets(tp).hw
        assert prefix(w["b"], tp, hw) == prefix(w["a"], tp, hw)
        assert w["b"].list_offsets(tp).leo == hw
        assert control_types(w["b"], tp).count(ControlType.MIRROR_PID_RESET) == 2
        assert dle(w["b"], tp) >= dle(w["a"], tp)
        epochs = [b.leader_epoch for b in batches(w["b"], tp)]
        assert epochs == sorted(epochs), "batch epochs never go down in a log"


def test_unclean_election_on_source_converges():
    """The source loses acknowledged data to an unclean election; the mirror follows it down."""
    w = World("a", "b")
    topic = w["a"].add_topic("t", partitions=1, configs={"unclean.leader.election.enable": "true"})
    tp = w["a"].tp("t", 0)
    _produce(w["a"], "t", 5, "x", partitions=1)
    ab = _start(w, "a", "b", topic.topic_id)
    run_until(w, _converged(w, ab, "a", "b", [tp]))
    part = w["a"].partition(tp)
    lagging = [r for r in part.replicas if r != part.leader][0]
    w["a"].set_follower_stalled(lagging, True)
    _produce(w["a"], "t", 3, "y", partitions=1)  # the stalled follower never gets these
    w.step(ms=1_000, rounds=32)  # it leaves the ISR, the HW moves on, and the mirror copies them
    assert lagging not in w["a"].partition(tp).isr
    assert w["b"].list_offsets(tp).leo == 8
    for r in part.replicas:
        if r != lagging and r in w["a"].live:
            w["a"].crash_broker(r)  # unclean.leader.election.enable: the stalled replica takes over
    w["a"].set_follower_stalled(lagging, False)
    assert w["a"].partition(tp).leader == lagging and w["a"].list_offsets(tp).leo == 5
    _produce(w["a"], "t", 2, "z", partitions=1)
    run_until(w, _converged(w, ab, "a", "b", [tp]))
    hw = w["a"].list_offsets(tp).hw
    assert hw == 7
    assert prefix(w["b"], tp, 10**9) == prefix(w["a"], tp, hw)
    assert b"y0" not in b"".join(v or b"" for v in committed_values(w["b"], tp))
    assert dle(w["b"], tp) >= dle(w["a"], tp)
