"""The impact preview (issue #26) against the real workflows over the model: for random source
and destination logs, transactions and groups, what the preview predicts before a stop (records
lost, their age, transactions aborted, groups re-reading, active groups left alone) is what the
stop then does; and what it predicts before a failback (the old source's truncation) is what
PREPARING cuts. The preview itself writes nothing (both clusters' journals are unchanged).
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from workflow_harness import FAST, World, all_in, batches, run_until

from coordinator.impact_record import differences, impact_record, predictions
from coordinator.partition_state import MirrorPartitionKey
from coordinator.ports import ControlType, GroupType
from records.registry import default_schemas
from coordinator.states import DesiredState, MirrorState
from streams.runner.preview import preview_failback, preview_stop

PARTITIONS = 2

# One producer operation on A: plain records, or a transaction of n records left open, committed or aborted.
op = st.tuples(st.sampled_from(["plain", "open", "commit", "abort"]), st.integers(0, PARTITIONS - 1), st.integers(1, 3))


def _apply(a, ops, tag, opened):
    for i, (kind, p, n) in enumerate(ops):
        recs = [(b"k", f"{tag}{i}-{j}".encode()) for j in range(n)]
        if kind == "plain":
            a.produce("t", p, recs)
            continue
        tid = f"{tag}-tx{i}"
        pid = a.init_producer_id(tid).producer_id
        a.begin_transaction(tid)
        a.produce_transactional(tid, "t", p, recs)
        if kind == "commit":
            a.commit_transaction(tid)
        elif kind == "abort":
            a.abort_transaction(tid)
        else:
            opened[pid] = n
        a.tick(1)  # distinct timestamps


def _journals(w):
    return {n: c.snapshot() for n, c in w.clusters.items()}


def _mirrored(w, m, tps):
    return lambda: all_in(m, MirrorState.MIRRORING) and all(w["b"].list_offsets(tp).leo == w["a"].list_offsets(tp).hw for tp in tps)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(before=st.lists(op, max_size=5), after=st.lists(op, max_size=5), data=st.data())
def test_stop_preview_is_what_the_stop_does(before, after, data):
    w = World("a", "b")
    a, b = w["a"], w["b"]
    topic = a.add_topic("t", partitions=PARTITIONS)
    tps = [a.tp("t", p) for p in range(PARTITIONS)]
    mirrored_open: dict[int, int] = {}
    _apply(a, before, "m", mirrored_open)
    ab = w.mirror("a", "b")
    ab.set_desired(topic.topic_id, DesiredState.START)
    run_until(w, _mirrored(w, ab, tps))
    _apply(a, after, "u", {})  # written on A after B's last fetch: the failover's RPO
    groups = ["g0", "g1", "g2"]  # g1 a share group
    active = data.draw(st.sets(st.sampled_from(groups)), label="active on B")
    committed = {}
    for g in groups:
        for tp in tps:
            off = data.draw(st.integers(0, a.list_offsets(tp).hw), label=f"{g} {tp.partition}")
            a.commit_offset(g, "t", tp.partition, off, group_type=GroupType.SHARE if g == "g1" else GroupType.CONSUMER)
            committed[(g, tp)] = off
    for g in active:
        b.join_group(g, "member-1")

    journals = _journals(w)
    now = a.now()
    impact = preview_stop(a, b, tps, now, FAST)
    assert _journals(w) == journals, "the preview wrote to a cluster"

    # the prediction as the metadata log carries it (record at offset 41), as a worker's image hands it out
    (pred,) = predictions(impact_record(default_schemas(), ab.name, [topic.topic_id], now, impact), 41)
    ab.runner.impacts.prediction = lambda topic_id: pred if topic_id == topic.topic_id else None
    ab.set_desired(topic.topic_id, DesiredState.STOP)
    run_until(w, lambda: all_in(ab, MirrorState.STOPPED))

    # __mirror_state keeps the prediction beside what the stop did: for a stop in the model, the same
    for tp in tps:
        v = ab.store.impacts[MirrorPartitionKey(ab.name, tp.topic_id, tp.partition)]
        assert (v.completed, v.metadata_offset, v.missing_reason) == (True, 41, None)
        assert differences(v) == []
        assert v.lost_records == v.predicted_lost_records == a.list_offsets(tp).hw - ab.runner.state(tp).stop_offset
        assert v.stop_offset == v.predicted_end_offset == ab.runner.state(tp).stop_offset
        assert sorted((t.producer_id, t.first_offset) for t in v.aborts) == sorted(
            (t.producer_id, t.first_offset) for t in v.predicted_aborts)
        synced = sorted((g.group_id, g.offset) for g in v.synced_groups)
        assert synced == sorted((g.group_id, g.offset) for g in v.predicted_groups)
        assert synced == sorted((g, o.offset) for g in groups if g not in active
                                for o in b.group_offsets(g) if o.partition == tp.partition)

    by_tp = {p.tp: p for p in impact.partitions}
    for tp in tps:
        stop_offset = ab.runner.state(tp).stop_offset
        src = a.list_offsets(tp)
        p = by_tp[tp]
        assert p.lost_records == src.hw - stop_offset
        if p.lost_records:
            first = next(x for x in batches(a, tp) if x.last_offset >= stop_offset)
            assert p.oldest_lost_age_ms == now - first.timestamp
        else:
            assert p.oldest_lost_age_ms is None
        aborted = [x.producer_id for x in batches(b, tp)
                   if x.is_control and x.control_type == ControlType.ABORT and x.base_offset >= stop_offset]  # fmt: skip
        assert sorted(t.producer_id for t in p.aborts) == sorted(aborted)
        for t in p.aborts:
            assert t.record_count == mirrored_open[t.producer_id]
    assert set(impact.active_groups) == active
    predicted = {(g.group_id, g.tp): g for g in impact.groups}
    for g in groups:
        on_b = {o.partition: o.offset for o in b.group_offsets(g)}
        for tp in tps:
            if g in active:
                assert (g, tp) not in predicted
                continue
            got = predicted[(g, tp)]
            assert got.group_type is (GroupType.SHARE if g == "g1" else GroupType.CONSUMER)
            assert got.synced == on_b[tp.partition]
            assert got.reread == committed[(g, tp)] - on_b[tp.partition]
    assert impact.rereading_groups == len({g for (g, _), x in predicted.items() if x.reread})


def test_stop_preview_with_the_source_down_counts_what_the_destination_knows():
    w = World("a", "b")
    a, b = w["a"], w["b"]
    topic = a.add_topic("t", partitions=1)
    tp = a.tp("t", 0)
    opened: dict[int, int] = {}
    _apply(a, [("plain", 0, 2), ("open", 0, 3)], "m", opened)
    ab = w.mirror("a", "b")
    ab.set_desired(topic.topic_id, DesiredState.START)
    a.commit_offset("g", "t", 0, 1)
    run_until(w, lambda: _mirrored(w, ab, [tp])() and [o.offset for o in b.group_offsets("g")] == [1])
    b.join_group("busy", "m1")
    a.set_unreachable(True)
    impact = preview_stop(a, b, [tp], a.now(), FAST)
    assert not impact.source_available
    (p,) = impact.partitions
    assert (p.lost_records, p.oldest_lost_age_ms, p.source_hw) == (None, None, None)
    assert [(t.producer_id, t.record_count) for t in p.aborts] == list(opened.items())
    assert impact.active_groups == ("busy",)
    assert [(g.group_id, g.synced, g.reread) for g in impact.groups] == [("g", 1, None)]
    assert impact.loses_something
    assert impact.verdict().startswith("would lose an unknown number of records on 1 partitions; would abort 1 transactions")


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(before=st.lists(op, max_size=4), unmirrored=st.lists(op, max_size=4), on_b=st.lists(op, max_size=4),
       on_a=st.lists(op, max_size=4))
def test_failback_preview_is_what_preparing_cuts(before, unmirrored, on_b, on_a):
    w = World("a", "b")
    a, b = w["a"], w["b"]
    topic = a.add_topic("t", partitions=PARTITIONS)
    tps = [a.tp("t", p) for p in range(PARTITIONS)]
    _apply(a, before, "m", {})
    ab = w.mirror("a", "b")
    ab.set_desired(topic.topic_id, DesiredState.START)
    run_until(w, _mirrored(w, ab, tps))
    _apply(a, unmirrored, "u", {})
    ab.set_desired(topic.topic_id, DesiredState.STOP)
    run_until(w, lambda: all_in(ab, MirrorState.STOPPED) and not b.topic("t").read_only)
    _apply(b, on_b, "b", {})
    _apply(a, on_a, "a", {})  # split brain: more on the old source after the failover

    before_cut = {tp: (a.list_offsets(tp), batches(a, tp)) for tp in tps}
    journals = _journals(w)
    impact = preview_failback(b, a, "b-to-a", tps)
    assert _journals(w) == journals, "the preview wrote to a cluster"

    ba = w.mirror("b", "a", FAST)
    ba.set_desired(topic.topic_id, DesiredState.START)
    run_until(w, lambda: all(ba.runner.state(tp) is not None and ba.runner.state(tp).state is MirrorState.MIRRORING
                             for tp in tps))  # fmt: skip
    for t in impact.partitions:
        off, old = before_cut[t.tp]
        cut = ba.runner.state(t.tp).truncation_offset
        assert t.target == cut
        kept = max(cut, off.log_start)
        assert t.removed == max(0, off.leo - kept)
        stamps = [x.timestamp for x in old if x.last_offset >= kept]
        assert t.newest_timestamp == (max(stamps) if t.removed else None)
    assert impact.loses_something == any(before_cut[tp][0].leo > ba.runner.state(tp).truncation_offset for tp in tps)
