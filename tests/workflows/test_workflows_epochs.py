"""DLE >= SLE under many source leader elections: reactive, proactive and periodic bumps.

After every coordinator round the destination leader epoch of each mirroring partition is at
least the source's, and no batch in the destination log carries an epoch above the DLE.
"""

from __future__ import annotations

import random

from workflow_harness import FAST, World, all_in, batches, dle, run_until

from coordinator.states import DesiredState, MirrorState
from coordinator.workflows.config import MirrorConfig


def _mirroring(w, partitions=1, config=FAST):
    topic = w["a"].add_topic("e", partitions=partitions)
    m = w.mirror("a", "b", config)
    m.set_desired(topic.topic_id, DesiredState.START)
    run_until(w, lambda: all_in(m, MirrorState.MIRRORING))
    return topic, m


def _elect(a, n, partition=0):
    for _ in range(n):
        a.elect_leader("e", partition)


def _bumps(cluster):
    return [s for s in cluster.steps if s.method == "bump_leader_epoch"]


def test_reactive_epoch_fencing_bumps_then_mirrors_the_batch():
    w = World("a", "b")
    cfg = MirrorConfig(metadata_refresh_interval_ms=10**9, fetch_backoff_ms=0)
    _, m = _mirroring(w, config=cfg)
    tp = w["a"].tp("e", 0)
    start_dle = dle(w["b"], tp)
    _elect(w["a"], start_dle + 5)  # the source races past the destination between two rounds
    w["a"].produce("e", 0, [(b"k", b"v")])
    w.step()
    moves = [(x, y) for _, x, y in m.store.history]
    assert (MirrorState.MIRRORING, MirrorState.EPOCH_FENCING) in moves
    assert (MirrorState.EPOCH_FENCING, MirrorState.MIRRORING) in moves
    assert dle(w["b"], tp) == dle(w["a"], tp) + FAST.epoch_bump_margin
    assert batches(w["b"], tp) == []  # nothing above the DLE was appended
    w.step()
    assert batches(w["b"], tp)[-1].leader_epoch == dle(w["a"], tp)  # copied as it is, after the bump


def test_proactive_bump_keeps_mirroring_without_fencing():
    w = World("a", "b")
    cfg = MirrorConfig(metadata_refresh_interval_ms=10**9, fetch_backoff_ms=0)
    _, m = _mirroring(w, config=cfg)
    tp = w["a"].tp("e", 0)
    gap = dle(w["b"], tp) - dle(w["a"], tp)
    _elect(w["a"], gap - cfg.epoch_bump_threshold)  # SLE comes within the threshold of DLE
    before = len(_bumps(w["b"]))
    w["a"].produce("e", 0, [(b"k", b"v")])
    w.step()
    assert len(_bumps(w["b"])) == before + 1
    assert dle(w["b"], tp) == dle(w["a"], tp) + cfg.epoch_bump_margin
    assert all(y is not MirrorState.EPOCH_FENCING for _, _, y in m.store.history)


def test_periodic_check_bumps_a_partition_that_cannot_fetch():
    w = World("a", "b")
    cfg = MirrorConfig(metadata_refresh_interval_ms=0, fetch_backoff_ms=10**9)
    _, m = _mirroring(w, config=cfg)
    tp = w["a"].tp("e", 0)
    w["a"].change_leader_on_next_fetch("e", 0)  # the fetch fails: NotLeader, then a long backoff
    w.step()
    assert tp in m.runner.backoff_until
    for _ in range(5):
        _elect(w["a"], 4)
        w.step()
        assert dle(w["b"], tp) >= dle(w["a"], tp) + cfg.epoch_bump_threshold
    assert all(y is not MirrorState.EPOCH_FENCING for _, _, y in m.store.history)


def test_dle_at_least_sle_after_every_round_with_many_elections():
    w = World("a", "b", seed=11)
    _, m = _mirroring(w, partitions=3)
    rng = random.Random(5)
    tps = [w["a"].tp("e", p) for p in range(3)]
    for _ in range(150):
        for p in range(3):
            _elect(w["a"], rng.choice([0, 0, 1, 2, 7, 15]), p)
            if rng.random() < 0.7:
                w["a"].produce("e", p, [(b"k", b"v")])
        w.step()
        for tp in tps:
            assert m.runner.state(tp).state is MirrorState.MIRRORING
            assert dle(w["b"], tp) >= dle(w["a"], tp)
            assert all(x.leader_epoch <= dle(w["b"], tp) for x in batches(w["b"], tp))
    fenced = sum(1 for _, _, y in m.store.history if y is MirrorState.EPOCH_FENCING)
    assert fenced > 0, "the run exercised reactive fencing"
    w.step(rounds=2)
    for tp in tps:
        assert [x.leader_epoch for x in batches(w["b"], tp)] == [x.leader_epoch for x in batches(w["a"], tp)]
