"""The effect executor and ``MirrorRunner``: observe -> decide -> execute -> persist, synchronously.

One runner drives one cluster mirror (source -> destination) over any number of topics and
partitions. Desired states go in directly (``set_desired``); the metadata-image integration
feeds the same ``DesiredStateLog`` later. ``tick(now_ms)`` runs one round:

1. topic level (create, grow, read-only/attach, loops, foreign IDs, deleted sources);
2. every partition's workflow step until it settles (bounded), commands first, then the state
   write (fenced) and the LastMirrorEpochs record;
3. one fetch round per fetcher under its response byte budget;
4. the settle loop again (EPOCH_FENCING -> MIRRORING in the same round), and the topic level
   again for stopped topics, so a topic is writable in the round its last partition stopped;
5. when due, the metadata sync: periodic epoch check, topic configs, group offsets, ACLs.

Partitions move side by side, not one after another: an observation is a generator of port
calls, and ``drive_all`` sends each wave of every partition's calls at once (``run_calls``: one
batched request per method on the model-server client), then the commands in waves by position.

A restart is a new runner over the same ``InMemoryStateStore`` and ``DesiredStateLog``: fetch
sessions, lag and backoffs are rebuilt from the persisted states, nothing else survives.
Port errors: a source call failing for a partition (a dead or moving leader, a broker or the
whole source not answering) backs the partition off with the client's backoff and leaves its
state as it is; only a partition the source failed for ``source.unavailable.timeout.ms`` in a row
goes to FAILED, retried with the mirror's backoff once the source answers again
(``coordinator.retry.source_failed``); other retriable errors, the destination's included, back
the partition off and leave its state as it is; the rest send it to FAILED with backoff.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import msgspec

from coordinator.partition_state import (
    UNKNOWN_STATE,
    MirrorPartitionKey,
    MirrorPartitionState,
    StateWriteFenced,
    Step,
    StopCut,
)
from coordinator.ports import (
    DestinationCluster,
    PortError,
    SourceCluster,
    TopicMetadata,
    TopicPartition,
)
from coordinator.image import TopicCut
from coordinator.states import DesiredState, MirrorState
from coordinator.workflows import commands as c
from coordinator.workflows.config import MirrorConfig
from coordinator.workflows.drive import decide_partition
from coordinator.workflows.fetcher import fetcher_of, lag
from coordinator.workflows.prepare import TOPIC_NOT_READY
from coordinator.workflows.stop import FinalSync
from streams.runner.data_watch import DEFAULT_MAX_WAIT_MS, DataWatch
from streams.runner.fetch_round import fetch_round
from streams.runner.interest import Interest
from streams.runner.port_errors import on_port_error
from streams.runner.observers import MirrorObservers
from streams.runner.driver import drive_all
from streams.runner.topic_level import TopicLevel
from streams.runner.syncer import MirrorStats, MirrorSyncer
from streams.runner.executor import Executor
from streams.runner.stop_impact import StopImpacts
from streams.runner.stop_columns import StopColumns
from streams.runner.live import LivePartitions
from streams.runner.stores import DesiredStateLog, InMemoryStateStore

_SETTLE_STEPS = 12  # workflow steps per partition per round; every workflow is shorter

log = logging.getLogger(__name__)
# (state, desired) pairs whose step, once it changed nothing, decides nothing else until the
# state or the desired state changes: it reads no clock and asks no cluster (``decide_partition``;
# MIRRORING only while its partition is in its fetcher, which ``step_partitions`` checks).
_SETTLED = frozenset({(MirrorState.MIRRORING, DesiredState.START), (MirrorState.PAUSED, DesiredState.PAUSE),
                      (MirrorState.STOPPED, DesiredState.STOP), (MirrorState.UNKNOWN, DesiredState.STOP)})  # fmt: skip
# Settled pairs whose step observes nothing (``needs``) and decides ``unchanged``: a write that
# lands a partition in one is settled with it (the step after it would only find that).
_SETTLES_AT_ONCE = frozenset({(MirrorState.PAUSED, DesiredState.PAUSE), (MirrorState.STOPPED, DesiredState.STOP),
                              (MirrorState.UNKNOWN, DesiredState.STOP)})  # fmt: skip
# The states a desired STOP moves into STOPPING: only they take a --consistent-cut's offset.
_ENTERS_STOP = frozenset(set(MirrorState) - {MirrorState.STOPPING, MirrorState.STOPPED, MirrorState.UNKNOWN})


class PartitionStatus(msgspec.Struct, frozen=True):
    """Describe output for one partition: state, source HW, destination LEO, lag, retries, error."""

    tp: TopicPartition
    state: MirrorState
    source_hw: int
    dest_leo: int
    lag: int
    retry_attempt: int
    error: str | None


class MirrorRunner:
    """One cluster mirror's coordinator loop over the ports (see the module docstring)."""

    def __init__(
        self,
        mirror_name: str,
        source: SourceCluster,
        dest: DestinationCluster,
        config: MirrorConfig | None = None,
        store: InMemoryStateStore | None = None,
        metadata: DesiredStateLog | None = None,
        jitter: Callable[[], float] | None = None,
        settle_steps: int = _SETTLE_STEPS,
        stats: MirrorStats | None = None,
        long_poll: bool = False,
    ) -> None:
        self.mirror_name = mirror_name
        self.stats = stats if stats is not None else MirrorStats()
        self.settle_steps = settle_steps
        self.source = source
        self.dest = dest
        self.config = config or MirrorConfig()
        self.store = store if store is not None else InMemoryStateStore()
        self.metadata = metadata if metadata is not None else DesiredStateLog()
        self.jitter = jitter or (lambda: 1.0)
        n = max(1, self.config.num_fetchers)
        self.sessions: list[set[TopicPartition]] = [set() for _ in range(n)]
        self.rotation = [0] * n
        self.executor = Executor(dest, self.sessions, n)
        self.partitions: dict[uuid.UUID, set[int]] = {}
        self.source_topics: dict[uuid.UUID, TopicMetadata] = {}
        self.ready: set[uuid.UUID] = set()
        self.backoff_until: dict[TopicPartition, int] = {}
        self.idle_until: dict[TopicPartition, int] = {}  # caught up: no fetch before (fetch_max_wait_ms)
        self.progress: dict[TopicPartition, tuple[int, int]] = {}  # (source HW, destination LEO)
        # Source calls failed in a row: (when the first failed, how many).
        self.source_errors: dict[TopicPartition, tuple[int, int]] = {}
        self.final_sync: dict[TopicPartition, FinalSync] = {}  # last group sync outcomes at STOP_WAIT_ISR, until STOPPED
        self.peak_round_bytes = 0
        self.warnings: list[str] = []
        self.errors: list[str] = []
        self.observers = MirrorObservers(mirror_name, source, dest, self.sessions, self.ready, self.source_topics,
                                         self.final_sync, lambda: (self._source_cluster_id, self._dest_cluster_id))
        self.syncer = MirrorSyncer(mirror_name, source, dest, self.config, self.executor, self.stats,
                                   self._topic_name, self.note, self.warnings)  # fmt: skip
        self.impacts = StopImpacts(mirror_name, source, self.store)  # a stop's prediction and outcome (issue #26)
        self.now_ms = 0
        self._next_sync_ms = 0
        self._source_cluster_id: str | None = None
        self._dest_cluster_id: str | None = None
        # Partitions whose last step left them as they were, with nothing to do and nothing to
        # wait for (``_SETTLED``): the state and the desired state it was decided from. While both
        # are the same, a step would decide the same again: ``step_partitions`` skips it (an idle
        # table partition of 6,250 mirror partitions was ~0.2 s of CPU a round). The state alone
        # decides a settled pair, not the object: the write that lands it durable (its state
        # epoch stamped) is a new object, and the round after a mass stop re-stepped them all.
        self._settled: dict[MirrorPartitionKey, tuple[MirrorState, DesiredState, int]] = {}
        self.topic_level = TopicLevel(self)
        self.columns = StopColumns(self)  # a mass stop's common steps, columnar
        self.live = LivePartitions(mirror_name, self.store)  # the periodic sync's partitions
        # Caught-up partitions park on the source's long poll (with ``long_poll`` and a source
        # that offers one): only what changed is stepped and fetched (``streams.runner.interest``).
        opener = getattr(source, "open_watch", None) if long_poll else None
        self.interest = Interest(mirror_name, None if opener is None else DataWatch(
            opener, self.config.fetch_max_wait_ms or DEFAULT_MAX_WAIT_MS, mirror_name),
            getattr(self.store, "partition_of", None))  # the worker's: hot keys counted per table partition
        # Rebuild from persisted state only: partitions known, fetchers for those that mirror.
        for key in self.store.keys(mirror_name):
            self.adopt(key)

    # ------------------------------------------------------------------ ownership (the stream worker)

    def adopt(self, key: MirrorPartitionKey) -> None:
        """Take a persisted partition on (at start, or when its state partition is assigned)."""
        self.partitions.setdefault(key.topic_id, set()).add(key.partition)
        self.interest.mark(key)
        state = self.store.get(key)
        if state is not None and state.state in (MirrorState.MIRRORING, MirrorState.EPOCH_FENCING):
            self.executor.run_one(c.AddFetcher(key.topic_partition))

    def release(self, key: MirrorPartitionKey) -> None:
        """Forget a partition whose state moved to another worker (no port call, no write)."""
        self._settled.pop(key, None)
        self.interest.forget(key)
        tp = key.topic_partition
        parts = self.partitions.get(key.topic_id)
        if parts is not None:
            parts.discard(key.partition)
        self.sessions[fetcher_of(tp, len(self.sessions))].discard(tp)
        self.backoff_until.pop(tp, None)
        self.idle_until.pop(tp, None)
        self.progress.pop(tp, None)
        self.executor.positions.pop(tp, None)
        self.source_errors.pop(tp, None)

    def reconfigure(self, config: MirrorConfig) -> None:
        """New settings from the next round (not new connections nor fetchers: those need a new runner)."""
        self.config = config
        self.syncer.config = config
        self.topic_level.quiet = None  # the refresh interval may have moved

    # ------------------------------------------------------------------ operator side

    def set_desired(self, topic_id: uuid.UUID, desired: DesiredState, cut: TopicCut | None = None) -> int:
        """Append a desired-state record for a topic (start/resume, stop, pause); returns its offset."""
        return self.metadata.append(self.mirror_name, topic_id, desired, cut)

    def _stop_cut(self, key: MirrorPartitionKey) -> StopCut | None:
        """The partition's part of the ``--consistent-cut`` its desired STOP carries, if any."""
        cut = self.metadata.cut(self.mirror_name, key.topic_id)
        offset = None if cut is None else cut.offset_of(key.partition)
        return None if cut is None or offset is None else StopCut(offset, cut.timestamp)

    def key(self, tp: TopicPartition) -> MirrorPartitionKey:
        return MirrorPartitionKey(self.mirror_name, tp.topic_id, tp.partition)

    def state(self, tp: TopicPartition) -> MirrorPartitionState:
        return self.store.get(self.key(tp)) or UNKNOWN_STATE

    def durable_state(self, tp: TopicPartition) -> MirrorPartitionState:
        """``state`` as a crash would leave it (a store without writes pending: the same)."""
        get = getattr(self.store, "durable_get", None)
        return (get(self.key(tp)) if get is not None else self.store.get(self.key(tp))) or UNKNOWN_STATE

    def states(self) -> dict[TopicPartition, MirrorPartitionState]:
        return {k.topic_partition: self.store.get(k) or UNKNOWN_STATE for k in self.store.keys(self.mirror_name)}

    def describe(self) -> list[PartitionStatus]:
        out = []
        for tp, s in sorted(self.states().items()):
            hw, leo = self.progress.get(tp, (-1, -1))
            out.append(PartitionStatus(tp, s.state, hw, leo, lag(hw, leo) if hw >= 0 else -1, s.retry_attempt, s.error_message))
        return out

    # ------------------------------------------------------------------ the round

    def tick(self, now_ms: int) -> None:
        self.now_ms = now_ms
        desired = self.metadata.latest(self.mirror_name)
        self._cluster_ids()
        self.topic_level.run([(t, want, offset) for t, (want, offset) in sorted(desired.items())])
        self._settle(desired)
        fetch_round(self, desired)
        self._settle(desired)
        self.reconcile_stopped(now_ms, desired)
        self.sync_if_due(now_ms, desired)

    # ------------------------------------------------------------------ the round, in phases
    #
    # The stream worker runs a round in phases so that it can make each state write durable
    # (the changelog acknowledged) before the next step's commands run: ``reconcile_topics``,
    # ``step_partitions`` (``settle_steps`` steps each), ``fetch_round``, ``sync_if_due``.

    def reconcile_topics(self, now_ms: int, desired: dict[uuid.UUID, tuple[DesiredState, int]] | None = None) -> None:
        """The topic level (``streams.runner.topic_level``), for topics whose desired state moved
        or that are not settled yet (and every metadata refresh interval for the rest)."""
        self.now_ms = now_ms
        desired = self.metadata.latest(self.mirror_name) if desired is None else desired
        if self.topic_level.due(now_ms, desired):
            self._cluster_ids()
            self.topic_level.reconcile(now_ms, desired)

    def topics_due(self, now_ms: int, desired: object) -> bool:
        """Whether ``reconcile_topics(now_ms, desired)`` would look at any topic."""
        return self.topic_level.due(now_ms, desired)

    def due(self, now_ms: int, desired: object) -> bool:
        """Work on a clock is due (the metadata sync, the topic level): the next round must run."""
        return now_ms >= self._next_sync_ms or self.topic_level.due(now_ms, desired)

    def reconcile_stopped(self, now_ms: int, desired: dict[uuid.UUID, tuple[DesiredState, int]] | None = None) -> None:
        """The topic level again for stopping topics whose partitions are all STOPPED now, so a
        topic turns writable in the round its last partition stopped. Only where a write is
        durable when made (``tick``): the stream worker runs the topic level at the start of its
        next round, once the STOPPED writes are durable, as a STOPPING partition is not writable."""
        self.now_ms = now_ms
        self.topic_level.reconcile_stopped(self.metadata.latest(self.mirror_name) if desired is None else desired)

    def step_partitions(self, now_ms: int, keys: Iterable[MirrorPartitionKey],
                        desired: dict[uuid.UUID, tuple[DesiredState, int]] | None = None) -> None:
        """Drive ``keys`` (at most ``settle_steps`` steps each); keys of topics with no desired state are left be."""
        self.now_ms = now_ms
        desired = self.metadata.latest(self.mirror_name) if desired is None else desired
        work = []
        settled, get, sessions = self._settled, self.store.get, self.sessions
        for key in keys:
            got = desired.get(key.topic_id)
            if got is not None:
                self.partitions.setdefault(key.topic_id, set()).add(key.partition)
                was = settled.get(key)
                if was is not None:
                    state, want, offset = was
                    if (want is got[0] and offset == got[1] and (get(key) or UNKNOWN_STATE).state is state and (
                            state is not MirrorState.MIRRORING
                            or key.topic_partition in sessions[fetcher_of(key.topic_partition, len(sessions))])):
                        continue  # as it was when last decided: the same decision again
                    del settled[key]
                work.append((key, got[0], got[1]))
        self._drive_many(work)

    def fetch_round(self, now_ms: int, only: set[TopicPartition] | None = None,
                    desired: dict[uuid.UUID, tuple[DesiredState, int]] | None = None) -> None:
        self.now_ms = now_ms
        fetch_round(self, self.metadata.latest(self.mirror_name) if desired is None else desired, only)

    def sync_if_due(self, now_ms: int, desired: dict[uuid.UUID, tuple[DesiredState, int]] | None = None) -> bool:
        self.now_ms = now_ms
        if now_ms < self._next_sync_ms:
            return False
        self._next_sync_ms = now_ms + self.config.metadata_refresh_interval_ms
        # The destination's positions kept from our appends are asked again once a sync period:
        # what changes there without a command of ours (a new leader of B) is seen in that time.
        self.executor.positions.clear()
        desired = self.metadata.latest(self.mirror_name) if desired is None else desired
        self.syncer.run(self.live.of(desired), self.now_ms)
        return True

    def _cluster_ids(self) -> None:
        for attr, port in (("_source_cluster_id", self.source), ("_dest_cluster_id", self.dest)):
            try:
                setattr(self, attr, getattr(self, attr) or port.cluster_id())
            except PortError as e:
                self.note(f"cluster id: {e}")

    def note(self, message: str) -> None:
        self.errors.append(f"{self.now_ms}: {message}")
        del self.errors[:-200]

    # ------------------------------------------------------------------ topic level

    def _topic_name(self, topic_id: uuid.UUID) -> str:
        topic = self.source_topics.get(topic_id)
        return topic.name if topic is not None else str(topic_id)

    def _final_group_sync(self, states: dict[TopicPartition, MirrorPartitionState]) -> None:
        """STOPPING's last group offset sync (``MirrorSyncer.final_group_sync``) of the partitions
        at STOP_WAIT_ISR in ``states``; the outcome goes to each partition's next stop observation."""
        if not states:
            return
        tps = list(states)
        outcome = self.syncer.final_group_sync(states, self.now_ms)
        self.observers.dest_offsets = self.syncer.final_dest  # this step's observations take them
        for tp in tps:
            self.final_sync[tp] = outcome
        self.impacts.final_sync(states, self.syncer.final_positions if outcome is FinalSync.RAN else None)

    # ------------------------------------------------------------------ partition level

    def _settle(self, desired: dict[uuid.UUID, tuple[DesiredState, int]]) -> None:
        self._drive_many([(self.key(TopicPartition(topic_id, p)), want, offset)
                          for topic_id, (want, offset) in sorted(desired.items())
                          for p in sorted(self.partitions.get(topic_id, ()))])  # fmt: skip

    def _drive_many(self, work: Sequence[tuple[MirrorPartitionKey, DesiredState, int]]) -> None:
        """Up to ``settle_steps`` workflow steps for each partition, side by side: per step, one
        pipelined wave of observations, the decisions, one pipelined wave per command position,
        then the (fenced) state writes. A partition leaves the loop when its state settles, on a
        port error, or when the store says its next decision must wait for durability. The
        stops' impact values are queued after the steps (each with its partition's last write)."""
        try:
            self._drive_steps(work)
        finally:
            self.impacts.flush()

    def _drive_steps(self, work: Sequence[tuple[MirrorPartitionKey, DesiredState, int]]) -> None:
        active = list(work)
        store, observers, settled = self.store, self.observers, self._settled
        view, may_run = store.step_view, store.may_run
        for _ in range(self.settle_steps):
            if not active:
                return
            now = self.now_ms
            states: dict[MirrorPartitionKey, MirrorPartitionState] = {}
            runnable, wait_isr = [], {}
            for w in active:
                key = w[0]
                s, ok = view(key)
                s = states[key] = s or UNKNOWN_STATE
                if not ok:
                    continue  # nothing to observe for it yet
                runnable.append(w)
                if s.step is Step.STOP_WAIT_ISR and s.state is MirrorState.STOPPING:
                    tp = key.topic_partition
                    if self.final_sync.get(tp) is not FinalSync.RAN:
                        wait_isr[tp] = s
            self._final_group_sync(wait_isr)
            bulk, active = self.columns.split(runnable, states)  # the stop's common steps, as columns
            later = self.columns.run(bulk, now)
            # What needs no port call is observed at once; the rest as generators, in waves.
            observed: dict[MirrorPartitionKey, Any] = {}
            asking = {}
            for key, want, offset in active:
                got = observers.immediate(key, states[key], want, now)
                if got is None:
                    asking[key] = observers.partition(key, states[key], want, now, offset)
                else:
                    observed[key] = got
            if asking:
                observed.update(drive_all(asking))
            if observers.dest_offsets:
                observers.dest_offsets = {}  # read in this step only
            decisions = {}
            for key, want, offset in active:
                obs = observed[key]
                if isinstance(obs, PortError):
                    self.on_port_error(key, states[key], obs, offset)
                    continue
                if obs is None:
                    continue
                if obs.prepare is not None and obs.prepare is not TOPIC_NOT_READY:
                    self.source_errors.pop(key.topic_partition, None)  # the source answered
                cut = self._stop_cut(key) if want is DesiredState.STOP and states[key].state in _ENTERS_STOP else None
                decision = decide_partition(key, states[key], want, offset, obs, now, self.config, cut)
                if decision.state is not states[key] and not may_run(key, states[key], decision.state):
                    continue  # its next write must follow a durable one: the next round takes it
                decisions[key] = decision
            failed = self.executor.run_many({k: d.commands for k, d in decisions.items()})
            nxt = []
            for key, want, offset in active:
                decision = decisions.get(key)
                if decision is None:
                    continue
                before, after = states[key], decision.state
                if (after is before and not decision.commands and decision.last_mirror_epoch is None
                        and (before.state, want) in _SETTLED and key not in failed):
                    settled[key] = (before.state, want, offset)
                if key in failed:
                    self.on_port_error(key, before, failed[key], offset)
                    continue
                if decision.last_mirror_epoch is not None:
                    store.put_lme(decision.last_mirror_epoch)
                if after is before or not self.persist(key, after):
                    continue
                self.impacts.decided(key, before, decision, observed[key], want, now)
                tp = key.topic_partition
                if self.backoff_until:
                    self.backoff_until.pop(tp, None)
                if self.source_errors:
                    self.source_errors.pop(tp, None)
                if want is DesiredState.STOP and after.state is MirrorState.STOPPED:
                    self.topic_level.unsettle(key.topic_id)  # the topic level makes it writable next
                    self.final_sync.pop(tp, None)
                # The step after this one, known without another pass: for these pairs it would
                # observe nothing and decide nothing (settled), and a step that must wait for
                # this write to be durable waits for the next round.
                if (after.state, want) in _SETTLES_AT_ONCE and store.get(key) is after:
                    settled[key] = (after.state, want, offset)
                    continue
                if not may_run(key, after, None):
                    continue
                nxt.append((key, want, offset))
            active = nxt + later

    def persist(self, key: MirrorPartitionKey, state: MirrorPartitionState, tp: TopicPartition | None = None) -> bool:
        """The fenced write of ``state`` (``tp``: the key's partition, when the caller has it)."""
        self.interest.mark(key, state.state is MirrorState.MIRRORING, tp)
        return self._put(key, state)  # fenced: another writer moved the state on, the next round re-reads

    def _put(self, key: MirrorPartitionKey, state: MirrorPartitionState) -> bool:
        try:
            self.store.put(key, state)
            return True
        except StateWriteFenced as e:
            self.note(str(e))
            return False

    def on_port_error(self, key: MirrorPartitionKey, state: MirrorPartitionState, e: PortError, offset: int) -> None:
        on_port_error(self, key, state, e, offset)

    # ------------------------------------------------------------------ fetching

    def quiet(self, key: MirrorPartitionKey, tp: TopicPartition | None = None) -> bool:
        """Settled, and when MIRRORING parked in its fetcher: nothing to do until something changes.
        ``tp``: the key's partition, when the caller has it (a new one hashes its UUID in Python)."""
        was = self._settled.get(key)
        if was is None:
            return False
        s = self.store.get(key)
        if s is None or s.state is not was[0]:
            return False
        if tp is None:
            tp = key.topic_partition
        return s.state is not MirrorState.MIRRORING or (
            tp in self.interest.parked and tp in self.sessions[fetcher_of(tp, len(self.sessions))])

    def close(self) -> None:
        self.interest.close()
