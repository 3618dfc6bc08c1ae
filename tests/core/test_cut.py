"""The consistent cut's pure planner (``coordinator.cut``), on random logs: the source's log per
partition from one clock (plain batches, transactions over several partitions, committed,
aborted or left open), the destination holding a prefix of each, the source answering or not.
A cut keeps every record stamped <= T and none after, holds everything the source had up to T,
leaves no transaction open at the cut and none committed on one side only; or it refuses, for a
stated reason only where one applies.
"""

from __future__ import annotations

import uuid

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.cut import CutObservation, CutPlan, CutRefusal, plan_cut
from coordinator.ports import Batch, ControlType, PartitionOffsets, TopicPartition
from coordinator.states import ErrorCode

TOPICS = (uuid.UUID(int=1), uuid.UUID(int=2))
TPS = [TopicPartition(TOPICS[0], 0), TopicPartition(TOPICS[0], 1), TopicPartition(TOPICS[1], 0)]
SLOTS = 3  # transactional producers, pid 100 + slot

op = st.one_of(
    st.tuples(st.just("plain"), st.integers(0, len(TPS) - 1), st.integers(1, 3)),
    st.tuples(st.just("data"), st.integers(0, SLOTS - 1), st.integers(0, len(TPS) - 1)),
    st.tuples(st.just("end"), st.integers(0, SLOTS - 1), st.sampled_from([ControlType.COMMIT, ControlType.ABORT])),
)


def build(ops, ticks, lat=True):
    """The source's logs, and for each batch the transaction instance it belongs to (None: plain)."""
    logs: dict[TopicPartition, list[Batch]] = {tp: [] for tp in TPS}
    owner: dict[tuple[TopicPartition, int], tuple[int, int]] = {}
    open_: dict[int, set[TopicPartition]] = {}
    seq = dict.fromkeys(range(SLOTS), 0)
    now = 1_000

    def add(tp, **kw):
        log = logs[tp]
        base = log[-1].next_offset if log else 0
        n = kw.pop("record_count", 1)
        b = Batch(base_offset=base, last_offset=base + n - 1, leader_epoch=0, timestamp=now, record_count=n,
                  log_append_time=lat and not kw.get("is_control", False), **kw)
        log.append(b)
        return b

    for (kind, x, y), dt in zip(ops, ticks):
        now += dt
        if kind == "plain":
            add(TPS[x], record_count=y)
        elif kind == "data":
            b = add(TPS[y], producer_id=100 + x, producer_epoch=0, is_transactional=True)
            open_.setdefault(x, set()).add(TPS[y])
            owner[(TPS[y], b.base_offset)] = (x, seq[x])
        elif x in open_:
            for tp in sorted(open_.pop(x), key=lambda t: (t.topic_id.int, t.partition)):
                b = add(tp, producer_id=100 + x, producer_epoch=0, is_transactional=True, is_control=True, control_type=y)
                owner[(tp, b.base_offset)] = (x, seq[x])
            seq[x] += 1
    return logs, owner


@st.composite
def world(draw):
    ops = draw(st.lists(op, max_size=25))
    ticks = draw(st.lists(st.integers(0, 3), min_size=len(ops), max_size=len(ops)))
    lat = draw(st.sampled_from([True] * 4 + [False]))  # the source topic's LogAppendTime, or CreateTime
    logs, owner = build(ops, ticks, lat)
    source_up = draw(st.booleans())
    observations = []
    for tp in TPS:
        log = logs[tp]
        n = draw(st.integers(0, len(log)))  # the destination's prefix, in batches
        held = tuple(log[:n])
        leo = held[-1].next_offset if held else 0
        src_leo = log[-1].next_offset if log else 0
        source = PartitionOffsets(0, src_leo, src_leo, src_leo, 0) if source_up else None
        observations.append(CutObservation(tp=tp, dest=PartitionOffsets(0, leo, leo, leo, 0), window_start=0, batches=held, source=source,
                                           first_unmirrored=log[n] if source_up and n < len(log) else None))
    return logs, owner, observations, source_up, lat


@settings(max_examples=200, deadline=None)
@given(w=world(), max_idle=st.sampled_from([0, 2, 10, 1_000]), skew=st.sampled_from([0, 1, 5]))
def test_a_cut_keeps_every_record_up_to_t_and_none_after(w, max_idle, skew):
    logs, owner, observations, source_up, lat = w
    plan = plan_cut(observations, max_idle_ms=max_idle, clock_skew_ms=skew)
    if not lat and any(not b.is_control for o in observations for b in o.batches):
        assert isinstance(plan, CutRefusal) and plan.error_code is ErrorCode.INVALID_CONFIG and "CreateTime" in plan.message
        return
    if isinstance(plan, CutRefusal):
        # The only reason left with whole logs read: the source is down and a partition's last
        # record lags the newest by more than max_idle (or it holds none).
        assert not source_up and plan.error_code is ErrorCode.INVALID_REQUEST
        newest = max((o.batches[-1].timestamp for o in observations if o.batches), default=None)
        o = next(o for o in observations if o.tp == plan.tp)
        assert not o.batches or newest - o.batches[-1].timestamp > max_idle
        return
    assert isinstance(plan, CutPlan)
    t = plan.timestamp
    kept: set[tuple[TopicPartition, int]] = set()
    for o in observations:
        cut = plan.of(o.tp)
        assert cut is not None and cut.leo == o.dest.leo
        for b in o.batches:
            if b.base_offset < cut.cut_offset:
                assert b.timestamp <= t, "a record after T is kept"
                kept.add((o.tp, b.base_offset))
            else:
                assert b.timestamp > t, "a record up to T is given up"
        # Mirrored completely up to T: everything the source had up to T is kept.
        assert all((o.tp, b.base_offset) in kept for b in logs[o.tp] if b.timestamp <= t)
        gone = [b for b in o.batches if b.base_offset >= cut.cut_offset and not b.is_control]
        assert cut.given_up_records == sum(b.record_count for b in gone)
        assert cut.newest_given_up_timestamp == (max(b.timestamp for b in gone) if gone else None)
    # Transactions: each one kept whole (data and markers, every partition) or given up whole.
    instances: dict[tuple[int, int], list[bool]] = {}
    for (tp, offset), inst in owner.items():
        instances.setdefault(inst, []).append((tp, offset) in kept)
    for inst, flags in instances.items():
        assert all(flags) or not any(flags), f"transaction {inst} is cut in two: {flags}"


def _obs(tp, stamps, *, source=None, window_start=0, log_start=0, batches=None):
    bs = batches or tuple(Batch(base_offset=window_start + i, last_offset=window_start + i, leader_epoch=0, timestamp=s,
                                log_append_time=True) for i, s in enumerate(stamps))  # fmt: skip
    leo = bs[-1].next_offset if bs else window_start
    return CutObservation(tp=tp, dest=PartitionOffsets(log_start, leo, leo, leo, 0), window_start=window_start,
                          batches=bs, source=source)  # fmt: skip


def test_with_the_source_down_an_idle_partition_is_refused_not_allowed_to_drag_t_back():
    busy, idle = _obs(TPS[0], [10, 500, 90_000]), _obs(TPS[1], [20])
    refused = plan_cut([busy, idle])
    assert isinstance(refused, CutRefusal) and refused.tp == TPS[1] and "idle or lagging" in refused.message
    plan = plan_cut([busy, idle], max_idle_ms=100_000)  # an operator's wider bound: T falls to the idle one's
    assert isinstance(plan, CutPlan) and plan.timestamp == 19



def test_an_empty_partition_is_refused_by_topic_name_in_plain_words():
    """The operator typed ``ledger``: the refusal says ``ledger-1``, not the topic ID."""
    busy, empty = _obs(TPS[0], [10, 500]), _obs(TPS[1], [])
    refused = plan_cut([busy, empty])
    assert isinstance(refused, CutRefusal) and refused.tp == TPS[1]
    said = refused.describe({TOPICS[0]: "ledger"})
    assert said.startswith("ledger-1: the source does not answer and the partition holds no record (at most 60000 ms")
    assert str(TOPICS[0]) not in said and "partition's holds" not in said
    idle = plan_cut([_obs(TPS[0], [10, 90_000]), _obs(TPS[1], [20])])
    assert isinstance(idle, CutRefusal)
    assert "ledger-1: the source does not answer and the partition's last record is 89980 ms older than the " \
           "selection's newest" in idle.describe({TOPICS[0]: "ledger"})
    assert idle.describe({}).startswith(f"{TOPICS[0]}-1: "), "the ID where no name is known"

def test_with_the_source_up_a_caught_up_partition_bounds_nothing():
    up = PartitionOffsets(0, 3, 3, 3, 0)
    busy = _obs(TPS[0], [10, 500, 90_000], source=up)
    idle = _obs(TPS[1], [20], source=PartitionOffsets(0, 1, 1, 1, 0))
    plan = plan_cut([busy, idle])
    assert isinstance(plan, CutPlan) and plan.timestamp == 90_000 and plan.given_up_records == 0


def test_timestamps_going_backwards_are_refused():
    refused = plan_cut([_obs(TPS[0], [10, 30, 20])])
    assert isinstance(refused, CutRefusal) and refused.error_code is ErrorCode.INVALID_TIMESTAMP


def test_a_cut_before_the_window_read_is_refused():
    short = _obs(TPS[0], [100, 200], window_start=50, log_start=0)
    lagging = _obs(TPS[1], [5, 6, 7], source=PartitionOffsets(0, 9, 9, 9, 0))
    lagging = CutObservation(tp=lagging.tp, dest=lagging.dest, window_start=0,
                             batches=lagging.batches, source=lagging.source,
                             first_unmirrored=Batch(base_offset=3, last_offset=3, leader_epoch=0, timestamp=8))  # fmt: skip
    refused = plan_cut([short, lagging], max_idle_ms=1_000)
    assert isinstance(refused, CutRefusal) and refused.tp == TPS[0] and "before the" in refused.message


def test_a_marker_of_a_transaction_begun_before_the_window_is_refused():
    bs = (Batch(base_offset=50, last_offset=50, leader_epoch=0, timestamp=10, log_append_time=True),
          Batch(base_offset=51, last_offset=51, leader_epoch=0, timestamp=30, producer_id=7, is_transactional=True,
                is_control=True, control_type=ControlType.COMMIT))  # fmt: skip
    o = _obs(TPS[0], [], window_start=50, batches=bs)
    src = PartitionOffsets(0, 53, 53, 53, 0)
    lag = Batch(base_offset=52, last_offset=52, leader_epoch=0, timestamp=21)
    o = CutObservation(tp=o.tp, dest=o.dest, window_start=50, batches=bs, source=src,
                       first_unmirrored=lag)  # fmt: skip
    refused = plan_cut([o])
    assert isinstance(refused, CutRefusal) and "begun before" in refused.message


def test_a_marker_kept_near_a_given_up_transaction_of_the_same_producer_moves_t_below_it():
    # Producer 7's marker on TPS[0] at 100; its data on TPS[1] at 101, given up (T=100 from the source).
    p0 = (Batch(base_offset=0, last_offset=0, leader_epoch=0, timestamp=90, producer_id=7, is_transactional=True,
                log_append_time=True),
          Batch(base_offset=1, last_offset=1, leader_epoch=0, timestamp=100, producer_id=7, is_transactional=True,
                is_control=True, control_type=ControlType.COMMIT))  # fmt: skip
    p1 = (Batch(base_offset=0, last_offset=0, leader_epoch=0, timestamp=101, producer_id=7, is_transactional=True,
            log_append_time=True),)
    up = PartitionOffsets(0, 2, 2, 2, 0)
    a = CutObservation(tp=TPS[0], dest=up, window_start=0, batches=p0, source=up)
    b = CutObservation(tp=TPS[1], dest=PartitionOffsets(0, 1, 1, 1, 0), window_start=0,
                       batches=p1, source=PartitionOffsets(0, 3, 3, 3, 0),
                       first_unmirrored=Batch(base_offset=1, last_offset=1, leader_epoch=0, timestamp=101))  # fmt: skip
    assert plan_cut([a, b], clock_skew_ms=0).timestamp == 100  # the marker came first: a later transaction
    plan = plan_cut([a, b], clock_skew_ms=5)  # within the skew: maybe one transaction, so both sides go
    assert isinstance(plan, CutPlan) and plan.timestamp == 89
    assert plan.of(TPS[0]).cut_offset == 0 and plan.of(TPS[1]).cut_offset == 0


def test_a_failback_truncates_to_the_sources_cut_at_most():
    from coordinator.ports import EpochEndOffset
    from coordinator.workflows.prepare import PrepareObservation, truncation_target

    # The old source (now the destination) has epoch 3 up to offset 20; the new source's epoch 3
    # ends at 15 in its cache, but its consistent cut ended the mirrored log at 12.
    obs = PrepareObservation(topic_ready=True, dest=PartitionOffsets(0, 20, 20, 20, 3), source_leader_epoch=4,
                             source_lme=3, source_epoch_end=EpochEndOffset(3, 15), local_epoch_end=EpochEndOffset(3, 20))  # fmt: skip
    assert truncation_target(obs) == 15
    assert truncation_target(msgspec.structs.replace(obs, source_cut=12)) == 12
    assert truncation_target(msgspec.structs.replace(obs, source_cut=18)) == 15  # never above the epoch's end
