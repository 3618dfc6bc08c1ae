"""``--stop --consistent-cut``: a point-in-time failover across topics (issue #26, part 3). Pure.

``plan_cut`` chooses T, the latest timestamp every selected partition has mirrored completely,
and the offset each partition's log on the destination ends at: the first batch stamped after
T. The dry run and the stop's controller call it on the same observations (``CutObservation``),
so what the preview shows is what the stop cuts. It refuses (``CutRefusal``: a Kafka error code
and why) every case it cannot make safe:

- **Timestamps.** Only batches stamped LogAppendTime (the batch's timestamp-type bit, which the
  mirror copies as it is: the source topic's ``message.timestamp.type``; the destination's own
  setting says nothing about mirrored batches): the leader stamps each batch, so a partition's
  timestamps do not go backwards and "every record <= T" is a prefix of the log. Under
  CreateTime producers stamp records, a later record may carry an earlier time, and no prefix
  keeps exactly the records <= T: refused (INVALID_CONFIG). A LogAppendTime window whose
  timestamps still go backwards (a leader moved to a broker with a slower clock) is refused too
  (INVALID_TIMESTAMP). Control batches (markers) count for the order, not for the type.
- **Mirrored completely up to.** From the source when it answers: caught up (its HW at the
  destination's LEO) bounds nothing; lagging, up to just before its first unmirrored batch.
  With the source down (the disaster) only the destination's own log is evidence: up to just
  before its newest batch's millisecond (the source may hold more of that millisecond). An idle
  partition would drag T back to its last record: with the source down that is refused when it
  lies more than ``max_idle_ms`` behind the newest record of the selection (exclude the topic,
  or stop without the cut), since an idle and a lagging partition cannot be told apart then.
- **Transactions.** The cut never falls inside a transaction (data before the cut, its marker
  not): T moves to just before that transaction's first batch, so no record <= T is aborted by
  the stop and every one stays readable under read_committed. Across partitions: a producer
  whose transactional data is given up in one partition while a marker of it at about that
  time (``clock_skew_ms``) is kept in another might be one transaction committed on one side
  only: T moves to before that marker. A marker whose transaction began before the window read
  is refused (its start is unknown).
- **Window.** Only the log's tail (``window_start`` to the LEO) is read; a cut that would fall
  at or before the window's start is refused, the records before it being unread.

T only moves down and each move is to a timestamp seen minus one, so the fixpoint is reached
in a bounded number of passes.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence

import msgspec

from coordinator.image import TopicCut
from coordinator.ports import Batch, ControlType, PartitionOffsets, TopicPartition
from coordinator.states import ErrorCode

CUT_WINDOW_OFFSETS = 100_000  # of the destination's tail read per partition
MAX_IDLE_MS = 60_000  # with the source down: how far a partition's last record may lag the newest
CLOCK_SKEW_MS = 1_000  # between the source's brokers' clocks, for the cross-partition transaction check


class CutObservation(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One partition: the destination's tail (always), the source's position (if it answers)."""

    tp: TopicPartition
    dest: PartitionOffsets
    window_start: int  # batches hold the destination's log from here to its LEO
    batches: tuple[Batch, ...] = ()
    source: PartitionOffsets | None = None  # None: the source did not answer
    first_unmirrored: Batch | None = None  # the source's batch at the destination's LEO, when it lags


class PartitionCut(msgspec.Struct, frozen=True, gc=False):
    tp: TopicPartition
    cut_offset: int  # the log ends here: [cut_offset, leo) is given up
    leo: int
    given_up_records: int
    newest_given_up_timestamp: int | None  # None: nothing given up
    complete_to: int | None  # mirrored completely up to this timestamp; None: bounds nothing

    @property
    def first_given_up(self) -> int:
        return self.cut_offset if self.cut_offset < self.leo else -1


class CutPlan(msgspec.Struct, frozen=True, gc=False):
    timestamp: int  # T
    partitions: tuple[PartitionCut, ...]

    def of(self, tp: TopicPartition) -> PartitionCut | None:
        return next((p for p in self.partitions if p.tp == tp), None)

    @property
    def given_up_records(self) -> int:
        return sum(p.given_up_records for p in self.partitions)

    def topic_cuts(self) -> dict[uuid.UUID, TopicCut]:
        """The cut per topic, as the stop's MirrorTopicStateChangeRecords carry it."""
        offsets: dict[uuid.UUID, list[tuple[int, int]]] = {}
        for p in self.partitions:
            offsets.setdefault(p.tp.topic_id, []).append((p.tp.partition, p.cut_offset))
        return {t: TopicCut(self.timestamp, tuple(sorted(o))) for t, o in offsets.items()}


class CutRefusal(msgspec.Struct, frozen=True, gc=False):
    """Why there is no cut: ``message`` is the reason, about the partition ``tp`` if any."""

    error_code: ErrorCode
    message: str
    tp: TopicPartition | None = None

    def describe(self, names: Mapping[uuid.UUID, str]) -> str:
        """The refusal as an operator reads it: the partition by topic name (``ledger-1``), as the
        selection named it; the topic ID only where no name is known."""
        if self.tp is None:
            return self.message
        return f"{names.get(self.tp.topic_id, str(self.tp.topic_id))}-{self.tp.partition}: {self.message}"


def complete_to(obs: CutObservation) -> int | None:
    """The timestamp up to which the destination holds everything the source has (None: no bound)."""
    src = obs.source
    if src is not None and src.hw <= obs.dest.leo:
        return None
    if src is not None and obs.first_unmirrored is not None:
        return obs.first_unmirrored.timestamp - 1
    newest = last_timestamp(obs)
    return None if newest is None else newest - 1


def last_timestamp(obs: CutObservation) -> int | None:
    return obs.batches[-1].timestamp if obs.batches else None


def cut_offset(obs: CutObservation, t: int) -> int:
    """The first batch stamped after ``t`` (the LEO when none is)."""
    return next((b.base_offset for b in obs.batches if b.timestamp > t), obs.dest.leo)


def _open_at(obs: CutObservation, cut: int) -> tuple[dict[int, Batch], int | None]:
    """Transactions open at ``cut`` (producer -> first batch), and a producer whose marker at or
    after the cut ends a transaction begun before the window (its start unread), if any."""
    open_: dict[int, Batch] = {}
    seen: set[int] = set()  # producers with a batch in the window before this point
    partial = obs.window_start > obs.dest.log_start
    for b in obs.batches:
        if _is_marker(b):
            if partial and b.producer_id not in seen and b.base_offset >= cut:
                return open_, b.producer_id
            if b.base_offset < cut:
                open_.pop(b.producer_id, None)
            seen.add(b.producer_id)
        elif b.is_transactional:
            if b.base_offset < cut:
                open_.setdefault(b.producer_id, b)
            seen.add(b.producer_id)
    return open_, None


def _is_marker(b: Batch) -> bool:
    return b.is_control and b.control_type in (ControlType.COMMIT, ControlType.ABORT)


def _refuse_timestamps(obs: CutObservation) -> CutRefusal | None:
    created = next((b for b in obs.batches if not b.is_control and not b.log_append_time), None)
    if created is not None:
        return CutRefusal(ErrorCode.INVALID_CONFIG, f"the batch at offset {created.base_offset} is stamped "
                          "CreateTime (by its producer; the source topic's message.timestamp.type is not "
                          "LogAppendTime): a log is not in CreateTime order, and no prefix of it holds exactly the "
                          "records up to T", obs.tp)  # fmt: skip
    for a, b in zip(obs.batches, obs.batches[1:]):
        if b.timestamp < a.timestamp:
            return CutRefusal(ErrorCode.INVALID_TIMESTAMP, f"LogAppendTime goes backwards at offset "
                              f"{b.base_offset} ({a.timestamp} then {b.timestamp}): a leader's clock moved back", obs.tp)  # fmt: skip
    return None


def plan_cut(observations: Sequence[CutObservation], *, max_idle_ms: int = MAX_IDLE_MS,
             clock_skew_ms: int = CLOCK_SKEW_MS) -> CutPlan | CutRefusal:  # fmt: skip
    """The consistent cut of ``observations`` (see the module docstring), or why there is none."""
    for o in observations:
        refused = _refuse_timestamps(o)
        if refused is not None:
            return refused
    stamps = [t for o in observations if (t := last_timestamp(o)) is not None]
    if not stamps:  # nothing anywhere: nothing to cut
        return CutPlan(-1, tuple(PartitionCut(o.tp, o.dest.leo, o.dest.leo, 0, None, complete_to(o))
                                 for o in observations))  # fmt: skip
    newest = max(stamps)
    for o in observations:
        last = last_timestamp(o)
        if o.source is None and (last is None or newest - last > max_idle_ms):
            idle = ("the partition holds no record" if last is None else
                    f"the partition's last record is {newest - last} ms older than the selection's newest")  # fmt: skip
            return CutRefusal(ErrorCode.INVALID_REQUEST, f"the source does not answer and {idle} (at most "
                              f"{max_idle_ms} ms allowed): idle or lagging cannot be told apart, so what it lacks is "
                              "unknown; leave the topic out of the selection, or stop without --consistent-cut", o.tp)  # fmt: skip
    bounds = [b for o in observations if (b := complete_to(o)) is not None]
    t = min([newest, *bounds])
    for _ in range(4 * sum(len(o.batches) for o in observations) + 2):
        cuts = {o.tp: cut_offset(o, t) for o in observations}
        nxt = t
        for o in observations:
            cut = cuts[o.tp]
            if cut <= o.window_start and o.window_start > o.dest.log_start and o.batches:
                return CutRefusal(ErrorCode.INVALID_REQUEST, f"T={t} lies before the {o.dest.leo - o.window_start} "
                                  f"offsets read from the log's end", o.tp)  # fmt: skip
            opened, unread = _open_at(o, cut)
            if unread is not None:
                return CutRefusal(ErrorCode.INVALID_REQUEST, f"producer {unread} ends at or after the cut a "
                                  "transaction begun before the offsets read", o.tp)  # fmt: skip
            for first in opened.values():
                nxt = min(nxt, first.timestamp - 1)
        nxt = min(nxt, _cross_partition_bound(observations, cuts, clock_skew_ms))
        if nxt >= t:
            return CutPlan(t, tuple(_partition_cut(o, cuts[o.tp]) for o in observations))
        t = nxt
    raise AssertionError("the cut did not settle")  # T strictly falls, over finitely many timestamps


def _cross_partition_bound(observations: Sequence[CutObservation], cuts: dict[TopicPartition, int], skew: int) -> int:
    """Below every kept marker that may close a transaction given up in another partition."""
    given_up: dict[int, list[tuple[TopicPartition, int]]] = {}  # producer -> (partition, first given-up data ts)
    for o in observations:
        first: dict[int, int] = {}
        for b in o.batches:
            if b.base_offset >= cuts[o.tp] and b.is_transactional and not b.is_control:
                first.setdefault(b.producer_id, b.timestamp)
        for pid, ts in first.items():
            given_up.setdefault(pid, []).append((o.tp, ts))
    bound = 1 << 62
    if not given_up:
        return bound
    for o in observations:
        for b in o.batches:
            if b.base_offset >= cuts[o.tp]:
                break
            if _is_marker(b) and b.producer_id in given_up:
                for tp, ts in given_up[b.producer_id]:
                    if tp != o.tp and b.timestamp + skew >= ts:
                        bound = min(bound, b.timestamp - 1)
    return bound


def _partition_cut(o: CutObservation, cut: int) -> PartitionCut:
    gone = [b for b in o.batches if b.base_offset >= cut and not b.is_control]
    return PartitionCut(o.tp, cut, o.dest.leo, sum(b.record_count for b in gone),
                        max(b.timestamp for b in gone) if gone else None, complete_to(o))  # fmt: skip
