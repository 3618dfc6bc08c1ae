"""The stop's common steps, columnar: one pass over the partitions that share a step.

``MirrorRunner._drive_steps`` observes each partition through a generator, routes it through
``decide_partition`` and persists it one by one: ~20 us of objects and lookups per partition
and step, 4 steps per stopped partition. In a mass failover nearly every partition of a pass is
at the same step under the same desired STOP, so ``StopColumns`` takes those out of the pass
(``split``) and runs each step's partitions as columns (``run``): the port calls of a step as one
flat list (one pipelined wave, no generator), the decisions from ``coordinator.workflows.
stop_columns`` over plain lists, the commands through the same executor, and then per partition
exactly what the per-partition path does after a decision (the durability gate, the fenced
write, the impact outcome, the backoffs, settling), with a step's writes queued in one pass
(``persist_many``: one lock for them all, not three per partition). Anything else
(a cut, a FAILED retry, the rarer steps, another desired state, a destination without
``latest_epoch``) stays on the per-partition path, as does every other workflow.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from coordinator.impact_record import StopOutcome
from coordinator.partition_state import MirrorPartitionKey, MirrorPartitionState, Step
from coordinator.ports import PortError, UnknownTopicId
from coordinator.states import DesiredState, MirrorState
from coordinator.workflows.commands import Decision
from coordinator.workflows.fetcher import fetcher_of
from coordinator.workflows.stop_columns import ENTERS, bump_epochs, enter_stops, record_lmes, wait_isrs
from coordinator.workflows.stop import StopObservation
from coordinator.workflows.drive import PartitionObservation
from streams.runner.driver import run_calls

_STOP, _STOPPING, _STOPPED = DesiredState.STOP, MirrorState.STOPPING, MirrorState.STOPPED
_MIRRORING = MirrorState.MIRRORING
_LME, _BUMP, _WAIT = Step.STOP_RECORD_LME, Step.STOP_BUMP_EPOCH, Step.STOP_WAIT_ISR
Item = tuple[MirrorPartitionKey, MirrorPartitionState, int]  # (key, its state, the desired record's offset)
Work = tuple[MirrorPartitionKey, DesiredState, int]


class StopColumns:
    """The columnar stop steps of one runner (see the module docstring)."""

    def __init__(self, runner: Any) -> None:  # a MirrorRunner (its module imports this one)
        self.r = runner
        self.enabled = True  # False: every partition takes the per-partition path (the tests compare both)

    def split(self, active: Sequence[Work], states: dict[MirrorPartitionKey, MirrorPartitionState],
              ) -> tuple[tuple[list[Item], list[Item], list[Item], list[Item]], list[Work]]:  # fmt: skip
        """This pass's partitions by columnar step (entering STOPPING, STOP_RECORD_LME,
        STOP_BUMP_EPOCH, STOP_WAIT_ISR), and the rest for the per-partition path."""
        groups: tuple[list[Item], list[Item], list[Item], list[Item]] = ([], [], [], [])
        if not self.enabled:
            return groups, list(active)
        enter, lme, bump, wait = groups
        rest: list[Work] = []
        r = self.r
        lme_direct = getattr(r.dest, "latest_epoch", None) is not None  # else the binary search, per partition
        cuts: dict[Any, bool] = {}  # per topic: does its desired STOP carry a --consistent-cut?
        for w in active:
            key, want, offset = w
            if want is not _STOP:
                rest.append(w)
                continue
            s = states[key]
            state = s.state
            if state is _STOPPING:
                step = s.step
                group = lme if step is _LME and lme_direct else bump if step is _BUMP else wait if step is _WAIT else None
            elif state in ENTERS:
                t = key.topic_id
                cut = cuts.get(t)
                if cut is None:
                    cut = cuts[t] = r.metadata.cut(r.mirror_name, t) is not None
                group = None if cut else enter
            else:
                group = None
            if group is None:
                rest.append(w)
            else:
                group.append((key, s, offset))
        return groups, rest

    def run(self, groups: tuple[list[Item], list[Item], list[Item], list[Item]], now: int) -> list[Work]:
        """One step of each group; the partitions whose next step may follow in this pass."""
        nxt: list[Work] = []
        enter, lme, bump, wait = groups
        if enter:
            self._enter(enter, now, nxt)
        if lme:
            self._record_lme(lme, now, nxt)
        if bump:
            self._bump(bump, now, nxt)
        if wait:
            self._wait_isr(wait, now, nxt)
        return nxt

    # ------------------------------------------------------------------ the steps

    def _enter(self, items: list[Item], now: int, nxt: list[Work]) -> None:
        r = self.r
        may_run, positions, sessions = r.store.may_run, r.executor.positions, r.sessions
        n = len(sessions)
        entered = enter_stops([s for _, s, _ in items], now, [o for _, _, o in items])
        outcomes = r.impacts.outcomes
        writes, offsets = [], []
        for (key, s, offset), after in zip(items, entered):
            if not may_run(key, s, after):
                continue
            tp = key.topic_partition
            if positions:
                positions.pop(tp, None)
            sessions[fetcher_of(tp, n)].discard(tp)  # its RemoveFetcher
            writes.append((key, after, tp))
            offsets.append(offset)
        for (key, after, tp), offset, ok in zip(writes, offsets, self.persist_many(writes)):
            if ok:
                outcomes[tp] = StopOutcome()  # a new stop: nothing of an earlier one
                self._after_write(key, tp, after, offset, now, nxt)

    def _record_lme(self, items: list[Item], now: int, nxt: list[Work]) -> None:
        r = self.r
        dest = r.dest
        tps = [key.topic_partition for key, _, _ in items]
        calls = []
        for tp in tps:
            calls.append((dest, "list_offsets", (tp,), None))
            calls.append((dest, "latest_epoch", (tp,), None))
        got = run_calls(calls)
        sessions = r.sessions
        n = len(sessions)
        keep, dests, latest, fetching = [], [], [], []
        for i, (item, tp) in enumerate(zip(items, tps)):
            offsets, epoch = got[2 * i], got[2 * i + 1]
            error = _first_error(offsets, epoch)
            if error is not None:
                r.on_port_error(item[0], item[1], error, item[2])
                continue
            keep.append((item, tp))
            dests.append(offsets)
            latest.append(epoch)
            fetching.append(tp in sessions[fetcher_of(tp, n)])
        decisions = record_lmes([it[0] for it, _ in keep], [tp for _, tp in keep], [it[1] for it, _ in keep], dests,
                                latest, fetching, [it[2] for it, _ in keep])  # fmt: skip
        self._apply(keep, decisions, [None] * len(keep), now, nxt)

    def _bump(self, items: list[Item], now: int, nxt: list[Work]) -> None:
        r = self.r
        dest, observers = r.dest, r.observers
        reset_sources = observers.reset_sources
        tps = [key.topic_partition for key, _, _ in items]
        calls = []
        described: dict[Any, int] = {}  # topic -> index of its describe (one per topic, as the waves dedupe it)
        for (key, _, offset), tp in zip(items, tps):
            calls.append((dest, "list_offsets", (tp,), None))
            calls.append((dest, "open_transactions", (tp,), None))
            t = key.topic_id
            known = reset_sources.get(t)
            if t not in described and (known is None or known[0] != offset or offset < 0):
                described[t] = len(calls)
                calls.append((dest, "describe_topics", ((t,),), None))
        got = run_calls(calls)
        for t, i in described.items():  # each described topic's reset source, as the observer keeps it
            if isinstance(got[i], UnknownTopicId):
                got[i] = []
        default_id = r.observers.cluster_ids()[0] or ""
        keep, dests, opens, source_ids, observed = [], [], [], [], []
        i = 0
        for item, tp in zip(items, tps):
            key, s, offset = item
            offsets, open_txns = got[i], got[i + 1]
            i += 2
            t = key.topic_id
            at = described.get(t)
            description = None
            if at is not None:
                if at == i:
                    i += 1
                description = got[at]
                mirrored = None
                if description and not isinstance(description, PortError):
                    mirrored = description[0].mirror_source_cluster_id
                    reset_sources[t] = (offset, mirrored)
            else:
                mirrored = reset_sources[t][1]
            error = _first_error(offsets, open_txns, description)
            if error is not None:
                r.on_port_error(key, s, error, offset)
                continue
            open_txns = tuple(open_txns)
            source_id = mirrored or default_id
            keep.append((item, tp))
            dests.append(offsets)
            opens.append(open_txns)
            source_ids.append(source_id)
            # the impact outcome reads the aborted transactions' first offsets from the observation
            observed.append(PartitionObservation(stop=StopObservation(dest=offsets, open_transactions=open_txns))
                            if open_txns else None)  # fmt: skip
        decisions = bump_epochs([tp for _, tp in keep], [it[1] for it, _ in keep], dests, opens, source_ids,
                                [it[2] for it, _ in keep])  # fmt: skip
        self._apply(keep, decisions, observed, now, nxt)

    def _wait_isr(self, items: list[Item], now: int, nxt: list[Work]) -> None:
        r = self.r
        dest, final_sync = r.dest, r.final_sync
        tps = [key.topic_partition for key, _, _ in items]
        got = run_calls([(dest, "isr_status", (tp,), None) for tp in tps])
        keep, caught_up, finals = [], [], []
        for item, tp, isr in zip(items, tps, got):
            if isinstance(isr, PortError):
                r.on_port_error(item[0], item[1], isr, item[2])
                continue
            keep.append((item, tp))
            caught_up.append(isr.isr_caught_up())
            finals.append(final_sync.get(tp))
        after = wait_isrs([it[1] for it, _ in keep], caught_up, finals, now, r.config.stop_group_sync_timeout_ms,
                          [it[2] for it, _ in keep])  # fmt: skip
        moved = [(kept, Decision(a)) for kept, a in zip(keep, after) if a is not kept[0][1]]  # the rest wait: no write
        self._apply([m[0] for m in moved], [m[1] for m in moved], [None] * len(moved), now, nxt)

    # ------------------------------------------------------------------ after the decisions

    def _apply(self, keep: list[tuple[Item, Any]], decisions: list[Decision], observed: list[Any], now: int,
               nxt: list[Work]) -> None:  # fmt: skip
        """What ``_drive_steps`` does after its decisions: the durability gate, the commands,
        the LastMirrorEpochs record, the fenced write and its impact outcome."""
        r = self.r
        store, may_run = r.store, r.store.may_run
        run = {}
        for (item, _), d in zip(keep, decisions):
            key, s, _ = item
            if d.state is s or may_run(key, s, d.state):
                run[key] = d
        failed = r.executor.run_many({k: d.commands for k, d in run.items()})
        writes, written = [], []
        for (item, tp), d, obs in zip(keep, decisions, observed):
            key, s, offset = item
            if run.get(key) is not d:
                continue  # its next write must follow a durable one: the next round takes it
            if failed and key in failed:
                r.on_port_error(key, s, failed[key], offset)
                continue
            if d.last_mirror_epoch is not None:
                store.put_lme(d.last_mirror_epoch)
            if d.state is not s:
                writes.append((key, d.state, tp))
                written.append((item, d, obs))
        decided = r.impacts.decided
        for ((key, s, offset), d, obs), (_, after, tp), ok in zip(written, writes, self.persist_many(writes)):
            if ok:
                decided(key, s, d, obs, _STOP, now, tp)
                self._after_write(key, tp, after, offset, now, nxt)

    def persist_many(self, writes: list[tuple[MirrorPartitionKey, MirrorPartitionState, Any]]) -> list[bool]:
        """``MirrorRunner.persist`` of each ``(key, state, tp)``, in order, in one pass of bookkeeping."""
        r = self.r
        r.interest.mark_many([k for k, _, _ in writes], [tp for _, s, tp in writes if s.state is not _MIRRORING])
        many = getattr(r.store, "put_many", None)
        if many is None:
            return [r._put(key, state) for key, state, _ in writes]
        out = []
        for (key, _, _), fenced in zip(writes, many([(k, s) for k, s, _ in writes])):
            if fenced is not None:
                r.note(str(fenced))  # another writer moved the state on: the next round re-reads
            out.append(fenced is None)
        return out

    def _after_write(self, key: MirrorPartitionKey, tp: Any, after: MirrorPartitionState, offset: int, now: int,
                     nxt: list[Work]) -> None:  # fmt: skip
        r = self.r
        if r.backoff_until:
            r.backoff_until.pop(tp, None)
        if r.source_errors:
            r.source_errors.pop(tp, None)
        if after.state is _STOPPED:
            r.topic_level.unsettle(key.topic_id)  # the topic level makes it writable next
            r.final_sync.pop(tp, None)
            if r.store.get(key) is after:
                r._settled[key] = (_STOPPED, _STOP, offset)  # nothing more to decide under STOP
                return
        if r.store.may_run(key, after, None):
            nxt.append((key, _STOP, offset))


def _first_error(*values: Any) -> PortError | None:
    """The first failed call of a partition's step, as its observation would have raised it."""
    for v in values:
        if isinstance(v, PortError):
            return v
    return None
