"""The worker's partition-state store over the ``mirror_state`` table: reads see the table's states plus
the writes not yet durable; writes are fenced (``check_write``) and queued per table partition until
the changelog acknowledges them (``prepare`` / ``land``)."""

from __future__ import annotations

import logging
import threading
import uuid
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from coordinator.partition_state import (
    UNKNOWN_STATE,
    LastMirrorEpoch,
    MirrorPartitionKey,
    MirrorPartitionState,
    StateWriteFenced,
    check_write,
    key_order,
)
from coordinator.state_counts import StateTally
from coordinator.states import MirrorState, is_legal_transition
from coordinator.workflows.drive import may_step_before_durable
from streams.state.mirror_state_codec import default_codec, partition_for_key

log = logging.getLogger(__name__)


class DurableStates(dict):  # type: ignore[type-arg]
    """The durable states by key, with counts per state kept as they change (``tally``): the
    sync status reports how many partitions mirror every second without a walk over them all."""

    __slots__ = ("tally", "changes")

    def __init__(self) -> None:
        super().__init__()
        self.tally = StateTally()
        self.changes = 0  # moves with every change (``WorkerStateStore.version``)

    def __setitem__(self, key: MirrorPartitionKey, state: MirrorPartitionState) -> None:
        dict.__setitem__(self, key, state)
        self.tally.set((key.mirror_name, key.topic_id, key.partition), state.state)
        self.changes += 1

    def __delitem__(self, key: MirrorPartitionKey) -> None:
        dict.__delitem__(self, key)
        self.tally.discard((key.mirror_name, key.topic_id, key.partition))
        self.changes += 1

    def pop(self, key: MirrorPartitionKey, *default: Any) -> Any:
        if key in self:
            self.changes += 1
            state = dict.pop(self, key)
            self.tally.discard((key.mirror_name, key.topic_id, key.partition))
            return state
        return dict.pop(self, key, *default)

    def clear(self) -> None:
        dict.clear(self)
        self.tally = StateTally()
        self.changes += 1

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, state in dict(*args, **kwargs).items():
            self[key] = state

    def setdefault(self, key: MirrorPartitionKey, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]


class WorkerStateStore:
    """The states of the table partitions this worker owns, decoded, plus queued writes.

    Implements the store ``MirrorRunner`` uses (``get``/``put``/``put_lme``/``keys``), for one
    mirror (``view``) or all. ``put`` is fenced and refuses illegal transitions, like the
    in-memory store; it queues the write under the key's table partition, and the partition
    agent writes the queue into the table while processing an event of that partition.
    """

    def __init__(self, num_partitions: int) -> None:
        self.num_partitions = num_partitions
        self.lock = threading.RLock()
        self.durable: DurableStates = DurableStates()
        self.pending: dict[int, dict[MirrorPartitionKey, MirrorPartitionState]] = defaultdict(dict)
        self.pending_lme: dict[int, dict[MirrorPartitionKey, LastMirrorEpoch]] = defaultdict(dict)
        # MirrorFailoverImpactValues (issue #26), written with the same partition's state writes
        self.pending_impact: dict[int, dict[MirrorPartitionKey, msgspec.Struct]] = defaultdict(dict)
        self.durable_impact: dict[MirrorPartitionKey, msgspec.Struct] = {}  # of stops under way: their outcome so far
        self.owned: set[int] = set()
        # Latest states of table partitions other workers own, from the changelog (read-only):
        # the topic level needs every partition of a topic, wherever it is owned. None: not read
        # for the stop under way (or the read failed), so a stopping topic's topic level waits.
        self._remote: Mapping[tuple[str, uuid.UUID, int], Any] | None = None
        self._remote_reads = 0  # moves with every view of other workers that may say something
        # (mirror, topic) -> metadata offset at which the topic left that mirror: state applied
        # at or before it is the old membership's, to tombstone (``deletes``) and never write.
        self.removed: dict[tuple[str, uuid.UUID], int] = {}
        self.deletes: dict[int, set[MirrorPartitionKey]] = defaultdict(set)
        self._partition: dict[MirrorPartitionKey, int] = {}
        self._state_keys: dict[MirrorPartitionKey, bytes] = {}  # encoded MirrorPartitionState keys
        self.transitions = 0
        self.writes = 0
        self._queued = 0  # moves with every change of the queued writes (``version``)
        # Told of each acknowledged change of state and write out of FAILED (``streams.worker.metrics``).
        self.on_landed: Callable[[MirrorPartitionKey, MirrorPartitionState | None, MirrorPartitionState], None] | None = None

    @property
    def remote(self) -> Mapping[tuple[str, uuid.UUID, int], Any] | None:
        return self._remote

    @remote.setter
    def remote(self, value: Mapping[tuple[str, uuid.UUID, int], Any] | None) -> None:
        if value or self._remote:  # an empty view for none (every step of a lone worker) reads the same
            self._remote_reads += 1
        self._remote = value

    def version(self) -> tuple[int, int, int, frozenset[int]]:
        """Changes whenever what ``keys`` and ``get`` give may have: a caller that walked every key
        keeps what it found while this stays (an idle metadata sync walked 50,000 for nothing)."""
        return self.durable.changes, self._queued, self._remote_reads, frozenset(self.owned)

    def partition_of(self, key: MirrorPartitionKey) -> int:
        p = self._partition.get(key)
        if p is None:
            raw = self.state_key(key)
            p = self._partition[key] = partition_for_key(raw, self.num_partitions)
        return p

    def state_key(self, key: MirrorPartitionKey) -> bytes:
        """The key's encoded MirrorPartitionState key (made once per key)."""
        raw = self._state_keys.get(key)
        if raw is None:
            raw = self._state_keys[key] = default_codec().state_key(key.mirror_name, key.topic_id, key.partition)
        return raw

    def get(self, key: MirrorPartitionKey) -> MirrorPartitionState | None:
        p = self._partition.get(key)
        if p is None:
            p = self.partition_of(key)
        # Read without the lock (the hottest read of a round): each read is one atomic dict
        # operation, and the writers never leave a key where a locked read would see otherwise
        # (between ``take`` and ``land`` of a write both see the durable state before it).
        pending = self.pending.get(p)
        if pending:
            got = pending.get(key)
            if got is not None:
                return got
        return self._durable_get(key, p)

    def durable_get(self, key: MirrorPartitionKey) -> MirrorPartitionState | None:
        """``get`` without the writes not yet durable: what a crash would leave. The topic level
        of a stop reads these: another table partition's job may run while a write is queued or
        in flight (``streams.worker.steps``), and a topic turns writable only on durable STOPPED."""
        p = self._partition.get(key)
        return self._durable_get(key, self.partition_of(key) if p is None else p)

    def _durable_get(self, key: MirrorPartitionKey, p: int) -> MirrorPartitionState | None:
        got = self.durable.get(key)
        if got is None and self.remote and p not in self.owned:
            status = self.remote.get((key.mirror_name, key.topic_id, key.partition))
            if status is not None:
                return UNKNOWN_STATE.with_(state=status.state)  # another worker's: its state only
        return got

    def step_view(self, key: MirrorPartitionKey) -> tuple[MirrorPartitionState | None, bool]:
        """``get(key)`` and ``may_run(key, it, None)`` in one lookup (a step reads both for every
        partition it looks at)."""
        p = self._partition.get(key)
        if p is None:
            p = self.partition_of(key)
        pending = self.pending.get(p)  # lock-free, as ``get``
        if pending:
            got = pending.get(key)
            if got is not None:
                return got, may_step_before_durable(got, None)
        return self.get(key), True

    def outlived(self, key: MirrorPartitionKey, applied_offset: int) -> bool:
        """Was state applied at ``applied_offset`` written for a membership the topic has left?"""
        return applied_offset <= self.removed.get((key.mirror_name, key.topic_id), -2)

    def remove(self, key: MirrorPartitionKey, offset: int) -> None:
        """The topic left the key's mirror at metadata offset ``offset``: forget the key's state
        (a mirror re-created under the same name starts from UNKNOWN) and, where this worker owns
        its table partition, queue tombstones for its state and LME."""
        with self.lock:
            mt = (key.mirror_name, key.topic_id)
            self.removed[mt] = max(offset, self.removed.get(mt, -1))
            p = self.partition_of(key)
            pending, lmes = self.pending.get(p, {}), self.pending_lme.get(p, {})
            for queue in (pending, lmes):
                if key in queue and self.outlived(key, queue[key].applied_offset):
                    del queue[key]
                    self._queued += 1
            state = self.durable.get(key)
            if state is not None and self.outlived(key, state.applied_offset):
                del self.durable[key]
            self.pending_impact.get(p, {}).pop(key, None)  # a stop of a membership that is gone
            self.durable_impact.pop(key, None)
            if p in self.owned:
                self.deletes[p].add(key)

    def put(self, key: MirrorPartitionKey, state: MirrorPartitionState) -> None:
        with self.lock:
            self._queue_write(key, state)

    def put_many(self, writes: list[tuple[MirrorPartitionKey, MirrorPartitionState]]) -> list[StateWriteFenced | None]:
        """``put`` of each write in order, under one lock (a mass stop queues tens of thousands
        per step); per write, None or the fencing that refused it."""
        out: list[StateWriteFenced | None] = []
        with self.lock:
            for key, state in writes:
                try:
                    self._queue_write(key, state)
                    out.append(None)
                except StateWriteFenced as e:
                    out.append(e)
        return out

    def _queue_write(self, key: MirrorPartitionKey, state: MirrorPartitionState) -> None:
        """``put``'s checks and queueing; the caller holds the lock."""
        p = self._partition.get(key)
        if p is None:
            p = self.partition_of(key)
        if p not in self.owned:
            return  # its partition is another worker's: the owner decides for it
        if self.removed and self.outlived(key, state.applied_offset):
            return  # a step of a membership that is gone (its mirror was deleted)
        queue = self.pending.get(p)
        stored = queue.get(key) if queue else None
        if stored is None:
            stored = self.get(key)
        check_write(key, stored, state)
        before = stored.state if stored is not None else MirrorState.UNKNOWN
        if before is not state.state and not is_legal_transition(before, state.state):
            raise AssertionError(f"{key}: illegal transition {before.name} -> {state.state.name}")
        self.pending[p][key] = state
        self._queued += 1

    def put_lme(self, record: LastMirrorEpoch) -> None:
        with self.lock:
            p = self.partition_of(record.key)
            if p in self.owned and not self.outlived(record.key, record.applied_offset):
                self.pending_lme[p][record.key] = record

    def put_impact(self, key: MirrorPartitionKey, value: msgspec.Struct) -> None:
        """A stop's prediction and outcome so far: written with the state write it accompanies."""
        with self.lock:
            p = self.partition_of(key)
            if p in self.owned:
                self.pending_impact[p][key] = value

    def take_impacts(self, partition: int) -> dict[MirrorPartitionKey, msgspec.Struct]:
        with self.lock:
            return self.pending_impact.pop(partition, {})

    def land_impacts(self, written: dict[MirrorPartitionKey, Any]) -> None:
        with self.lock:
            for key, value in written.items():
                if value.completed:
                    self.durable_impact.pop(key, None)  # done: nothing more to add to it
                else:
                    self.durable_impact[key] = value

    def get_impact(self, key: MirrorPartitionKey) -> msgspec.Struct | None:
        with self.lock:
            pending = self.pending_impact.get(self.partition_of(key), {}).get(key)
            return pending if pending is not None else self.durable_impact.get(key)

    def may_run(self, key: MirrorPartitionKey, current: MirrorPartitionState, proposed: MirrorPartitionState | None) -> bool:
        """May a step that moves ``key`` from ``current`` to ``proposed`` (None: any step) run
        before ``current`` is durable?"""
        p = self._partition.get(key)
        if p is None:
            p = self.partition_of(key)
        queued = self.pending.get(p)  # lock-free, as ``get``
        pending = queued.get(key) if queued else None
        if pending is None:
            return True
        return may_step_before_durable(pending, self.durable.get(key), proposed)

    def keys(self, mirror_name: str) -> list[MirrorPartitionKey]:
        return sorted(self.unsorted_keys(mirror_name), key=key_order)

    def unsorted_keys(self, mirror_name: str) -> set[MirrorPartitionKey]:
        """``keys`` in no order (a sort of every key is not for a caller that picks a few)."""
        with self.lock:
            found = {k for k in self.durable if k.mirror_name == mirror_name}
            for writes in self.pending.values():
                found.update(k for k in writes if k.mirror_name == mirror_name)
            return found

    def take(self, partition: int) -> tuple[dict[MirrorPartitionKey, MirrorPartitionState], dict[MirrorPartitionKey, LastMirrorEpoch]]:
        with self.lock:
            states = self.pending.pop(partition, {})
            if states:
                self._queued += 1
            return states, self.pending_lme.pop(partition, {})

    def take_deletes(self, partition: int) -> set[MirrorPartitionKey]:
        with self.lock:
            return self.deletes.pop(partition, set())

    def requeue_deletes(self, partition: int, keys: set[MirrorPartitionKey]) -> None:
        with self.lock:
            if partition in self.owned:
                self.deletes[partition] |= keys

    def requeue(self, partition: int, states: dict[MirrorPartitionKey, MirrorPartitionState],
                lmes: dict[MirrorPartitionKey, LastMirrorEpoch],
                impacts: dict[MirrorPartitionKey, msgspec.Struct] | None = None) -> None:  # fmt: skip
        """Puts back writes that were taken but not acknowledged (newer writes of a key win)."""
        with self.lock:
            if partition not in self.owned:
                return
            if states:
                self._queued += 1
            for key, state in states.items():
                self.pending[partition].setdefault(key, state)
            for key, lme in lmes.items():
                self.pending_lme[partition].setdefault(key, lme)
            for key, value in (impacts or {}).items():
                self.pending_impact[partition].setdefault(key, value)

    def prepare(self, partition: int) -> tuple[list[tuple[MirrorPartitionKey, MirrorPartitionState]],
                                               dict[MirrorPartitionKey, LastMirrorEpoch],
                                               dict[MirrorPartitionKey, MirrorPartitionState]]:
        """Takes the queued writes of ``partition`` for writing: the state writes that still pass
        fencing, each stamped N+1 of the durable state N (steps collapsed in one round are
        several puts and one write), the LastMirrorEpochs records, and everything taken (to
        ``requeue`` if the write fails)."""
        states, lmes = self.take(partition)
        ready = []
        for key, state in sorted(states.items(), key=lambda ks: key_order(ks[0])):
            stored = self.durable.get(key)
            try:
                check_write(key, stored, state)
            except StateWriteFenced as e:  # another writer moved it on
                log.warning("dropped a fenced write: %s", e)
                continue
            ready.append((key, state.with_(state_epoch=(stored or UNKNOWN_STATE).state_epoch + 1)))
        return ready, lmes, states

    def land(self, written: list[tuple[MirrorPartitionKey, MirrorPartitionState]]) -> None:
        """The writes are durable (the changelog acknowledged them): reads see them from now on."""
        with self.lock:
            for key, state in written:
                before = self.durable.get(key)
                if before is None or before.state != state.state:
                    self.transitions += 1
                    if self.on_landed is not None:
                        self.on_landed(key, before, state)
                elif self.on_landed is not None and before.state is MirrorState.FAILED:
                    self.on_landed(key, before, state)
                self.durable[key] = state
            self.writes += len(written)

    def drop_pending(self) -> None:
        """What a crash loses: every write not yet durable."""
        with self.lock:
            self._queued += 1
            self.pending.clear()
            self.pending_lme.clear()
            self.pending_impact.clear()
            self.deletes.clear()

    def drop_queued(self, partition: int) -> None:
        """Forgets the writes queued for ``partition`` (decided on states read before a fence)."""
        with self.lock:
            self._queued += 1
            self.pending.pop(partition, None)
            self.pending_lme.pop(partition, None)
            self.pending_impact.pop(partition, None)
            self.deletes.pop(partition, None)

    def has_pending(self, key: MirrorPartitionKey) -> bool:
        with self.lock:
            return key in self.pending.get(self.partition_of(key), {})

    def pending_keys(self, partition: int) -> set[MirrorPartitionKey]:
        """The keys of ``partition`` with a write not yet durable (a copy)."""
        with self.lock:
            return set(self.pending.get(partition, ()))

    def drop_partition(self, partition: int) -> list[MirrorPartitionKey]:
        with self.lock:
            self.owned.discard(partition)
            self._queued += 1
            self.pending.pop(partition, None)
            self.pending_lme.pop(partition, None)
            self.pending_impact.pop(partition, None)
            self.deletes.pop(partition, None)
            for k in [k for k in self.durable_impact if self.partition_of(k) == partition]:
                del self.durable_impact[k]
            gone = [k for k in self.durable if self.partition_of(k) == partition]
            for k in gone:
                del self.durable[k]
                self._state_keys.pop(k, None)
            return gone
