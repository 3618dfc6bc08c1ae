"""A stop's impact, prediction beside outcome, kept in ``__mirror_state`` (issue #26).

The prediction is the ``MirrorFailoverImpactRecord`` the controller appended with the stop
(``prediction``: the worker looks it up in its metadata image). The outcome is gathered as the
stop runs, from the stop's own decisions:

- the transactions it aborted: the ABORT markers its decision wrote, with each transaction's
  first offset from the observation that decision read (after a crash between those markers and
  the next durable state: the markers read back from the log's tail, ``_aborts_in_tail``);
- its stop offset: the state's, persisted at STOP_RECORD_LME;
- where its last group sync left each group (``MirrorSyncer.final_positions``);
- the records lost: the source's HW, read once with that sync, less the stop offset; unknown when
  the source does not answer, and not read for a stop that has no prediction (a mass failover
  past the controller's bound), so a big failover pays no extra round trip.

The ``MirrorFailoverImpactValue`` is queued (``store.put_impact``) with the state write of the
step it follows, so it is written in the same batch: once with the state that follows the
stop's markers (STOP_WAIT_ISR: the aborts are durable before anything else happens), once with
STOPPED (the whole outcome). After a restart the outcome so far is read back from the store.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec

from coordinator.impact_record import PredictedAbort, StopOutcome, SyncedGroup, TopicPrediction, impact_value
from coordinator.partition_state import MirrorPartitionKey, MirrorPartitionState, Step
from coordinator.ports import ControlType, PortError, TopicPartition
from coordinator.states import DesiredState, MirrorState
from coordinator.workflows.commands import AppendControl, Decision
from records.registry import default_schemas
from streams.runner.driver import run_calls


class StopImpacts:
    def __init__(self, mirror_name: str, source: Any, store: Any) -> None:
        self.mirror_name = mirror_name
        self.source = source
        self.store = store
        # topic ID -> its latest stop's prediction (set by the worker: its metadata image's)
        self.prediction: Callable[[uuid.UUID], TopicPrediction | None] = lambda topic_id: None
        self.outcomes: dict[TopicPartition, StopOutcome] = {}
        self.schemas = default_schemas()
        # Outcomes to write (``flush``): a step that lands at the ISR wait and one that lands at
        # STOPPED in the same pass are one state write, so one impact value, the later one.
        self._unwritten: dict[MirrorPartitionKey, StopOutcome] = {}

    def _prediction(self, topic_id: uuid.UUID) -> TopicPrediction | None:
        pred = self.prediction(topic_id)
        return pred if pred is not None and pred.mirror_name == self.mirror_name else None

    def _outcome(self, key: MirrorPartitionKey, stop_offset: int, tp: TopicPartition | None = None) -> StopOutcome:
        got = self.outcomes.get(key.topic_partition if tp is None else tp)
        if got is not None:
            return got
        # After a restart: the outcome so far of this stop (the same stop offset), never an earlier one's.
        stored = getattr(self.store, "get_impact", lambda k: None)(key)
        if stored is None or stored.completed or stop_offset < 0 or stored.stop_offset != stop_offset:
            return StopOutcome()
        return StopOutcome(stored.stop_offset, tuple(PredictedAbort(a.producer_id, a.producer_epoch, a.first_offset)
                                                     for a in stored.aborts))  # fmt: skip

    def _aborts_in_tail(self, tp: TopicPartition, o: StopOutcome, tail: Sequence[Any]) -> StopOutcome:
        """After a crash: the ABORT markers the stop wrote before it (the tail of the log from the
        stop offset, which only the stop writes), for those this run did not see written. A
        marker names its producer, not the transaction's first offset: that is the prediction's
        for the same producer and epoch, or -1 (unknown)."""
        seen = {(a.producer_id, a.producer_epoch) for a in o.aborts}
        pred = self._prediction(tp.topic_id)
        p = pred.partition(tp.partition) if pred is not None else None
        first = {(a.producer_id, a.producer_epoch): a.first_offset for a in (p.aborts if p is not None else ())}
        found = tuple(PredictedAbort(b.producer_id, b.producer_epoch, first.get((b.producer_id, b.producer_epoch), -1))
                      for b in tail if b.is_control and b.control_type == ControlType.ABORT
                      and (b.producer_id, b.producer_epoch) not in seen)  # fmt: skip
        return msgspec.structs.replace(o, aborts=o.aborts + found) if found else o

    def final_sync(self, states: Mapping[TopicPartition, MirrorPartitionState],
                   positions: Mapping[TopicPartition, Sequence[tuple[str, int]]] | None) -> None:  # fmt: skip
        """STOPPING's last group sync ran (``positions`` None: it failed): where it left each
        group, and the source's HW where a prediction waits to be compared."""
        predicted: dict[int, bool] = {}  # per topic (its ID's int: hashed in C), asked once
        tps = []
        for tp in states:
            t = tp.topic_id.int
            got = predicted.get(t)
            if got is None:
                got = predicted[t] = self._prediction(tp.topic_id) is not None
            if got:
                tps.append(tp)
        his = run_calls([(self.source, "list_offsets", (tp,), None) for tp in tps]) if tps else []
        hw = {tp: r.hw for tp, r in zip(tps, his) if not isinstance(r, PortError)}
        for tp, state in states.items():
            o = self.outcomes.get(tp)
            if o is None:
                o = self._outcome(MirrorPartitionKey(self.mirror_name, tp.topic_id, tp.partition), state.stop_offset)
            if positions is not None:
                groups = tuple(SyncedGroup(g, off) for g, off in sorted(positions.get(tp, ())))
                if groups != o.synced_groups:
                    o = msgspec.structs.replace(o, synced_groups=groups)
            if tp in hw and state.stop_offset >= 0:
                o = msgspec.structs.replace(o, lost_records=max(0, hw[tp] - state.stop_offset))
            self.outcomes[tp] = o

    def decided(self, key: MirrorPartitionKey, before: MirrorPartitionState, decision: Decision, obs: Any,
                want: DesiredState, now_ms: int, tp: TopicPartition | None = None) -> None:  # fmt: skip
        """After ``decision``'s commands ran and its state was queued (``tp``: the key's partition,
        when the caller has it)."""
        after = decision.state
        if tp is None:
            tp = key.topic_partition
        if want is not DesiredState.STOP or before.state is not MirrorState.STOPPING:
            if want is DesiredState.STOP and after.state is MirrorState.STOPPING:
                self.outcomes[tp] = StopOutcome()  # a new stop: nothing of an earlier one
            return
        o = self._outcome(key, before.stop_offset, tp)
        aborts = [c for c in decision.commands if isinstance(c, AppendControl) and c.control_type is ControlType.ABORT]
        stop = getattr(obs, "stop", None)
        if aborts:
            first = {(t.producer_id, t.producer_epoch): t.first_offset for t in (stop.open_transactions if stop else ())}
            o = msgspec.structs.replace(o, aborts=o.aborts + tuple(
                PredictedAbort(c.producer_id, c.producer_epoch, first.get((c.producer_id, c.producer_epoch), -1)) for c in aborts))  # fmt: skip
        tail = getattr(stop, "tail", None)
        if before.step is Step.STOP_PID_RESET and tail is not None:
            o = self._aborts_in_tail(tp, o, tail)
        if after.stop_offset >= 0 and o.stop_offset != after.stop_offset:
            o = msgspec.structs.replace(o, stop_offset=after.stop_offset)
        self.outcomes[tp] = o
        if after.state is MirrorState.STOPPED:
            o = msgspec.structs.replace(o, completed_at_ms=now_ms)
            self.outcomes.pop(tp, None)
        elif not (after.step is Step.STOP_WAIT_ISR and before.step is not Step.STOP_WAIT_ISR):
            return  # written with the step after the markers, and with STOPPED
        self._unwritten[key] = o

    def flush(self) -> None:
        """Queues the impact values of the outcomes ``decided`` since the last flush (the runner
        calls it after each pass of steps, before anything is written)."""
        if not self._unwritten:
            return
        unwritten, self._unwritten = self._unwritten, {}
        for key, o in unwritten.items():
            pred = self._prediction(key.topic_id)
            self.store.put_impact(key, impact_value(self.schemas, pred, key.partition, o))
