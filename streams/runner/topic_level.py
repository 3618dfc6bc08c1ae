"""The topic level of a mirror's round: create the destination topic, keep it read-only, attach
it, and make it writable once a stop has every partition STOPPED (``coordinator.workflows.topic``).

Only topics whose desired state moved, that are not settled yet, or that are due for their
metadata refresh are looked at: a pass over every topic was 1,000 topics x 40 rounds a second
at 50,000 partitions.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from coordinator.partition_state import MirrorPartitionKey, MirrorPartitionState, stamp_applied
from coordinator.ports import PortError, TopicPartition
from coordinator.states import DesiredState, MirrorState
from coordinator.workflows.topic import TopicDecision, decide_topic
from streams.runner.driver import drive_all

if TYPE_CHECKING:
    from coordinator.workflows.config import MirrorConfig
    from streams.runner.executor import Executor
    from streams.runner.observers import MirrorObservers
    from streams.runner.syncer import MirrorStats

Desired = dict[uuid.UUID, tuple[DesiredState, int]]
_NEVER = -(1 << 62)
STOP_DONE = (MirrorState.STOPPED, MirrorState.UNKNOWN)  # a stop's topic turns writable once every partition is in one
_PART = 25  # topics per part of a reconcile; ``TopicLevel.between`` runs between the parts
# A topic's refresh is taken with an earlier one when due within this share of the interval: the
# refreshes gather into few passes, not one pass over every desired topic for each few topics.
_GATHER = 0.1


class TopicHost(Protocol):
    """What the topic level reads and changes of its runner (``streams.runner.runner.MirrorRunner``)."""

    mirror_name: str
    config: MirrorConfig
    executor: Executor
    observers: MirrorObservers
    stats: MirrorStats
    now_ms: int
    partitions: dict[uuid.UUID, set[int]]
    ready: set[uuid.UUID]  # topics whose destination topic is ready for mirror partitions

    def key(self, tp: TopicPartition) -> MirrorPartitionKey: ...

    def state(self, tp: TopicPartition) -> MirrorPartitionState: ...

    def persist(self, key: MirrorPartitionKey, state: MirrorPartitionState) -> bool: ...

    def note(self, message: str) -> None: ...


class TopicLevel:
    def __init__(self, host: TopicHost) -> None:
        self.r = host
        self.settled: dict[uuid.UUID, int] = {}  # topic -> desired offset its topic level settled at
        self._not_stopped: dict[uuid.UUID, int] = {}  # topic -> a partition ``all_stopped`` last found not stopped
        self.checked_ms: dict[uuid.UUID, int] = {}
        # topic -> (the observation it settled on, the store's version then, the config): a refresh
        # that observes the same, with no state and no setting changed since, has nothing to decide.
        self._seen: dict[uuid.UUID, tuple[object, object, object]] = {}
        # (the desired states, until when): every topic of them settled at its desired offset, none
        # due for its metadata refresh before then, so ``reconcile`` has nothing to look at.
        self.quiet: tuple[object, int] | None = None
        # Called between the parts of a reconcile (on its thread): the worker's copy path goes on
        # meanwhile (a metadata refresh of 1,000 topics held the copy path 0.4-1.6 s).
        self.between: Callable[[], object] | None = None

    def unsettle(self, topic_id: uuid.UUID) -> None:
        """The topic level has work again for ``topic_id`` (a partition of a stop reached STOPPED)."""
        self.settled.pop(topic_id, None)
        self._seen.pop(topic_id, None)
        self.quiet = None

    def due(self, now_ms: int, desired: object) -> bool:
        """Whether ``reconcile(now_ms, desired)`` would look at any topic (False: all settled at
        these desired states, none due for its refresh yet)."""
        quiet = self.quiet
        return quiet is None or quiet[0] is not desired or now_ms >= quiet[1]

    def reconcile(self, now_ms: int, desired: Desired) -> None:
        """The topics whose desired state moved or that are not settled yet (and every metadata
        refresh interval the rest)."""
        due = []
        refresh = self.r.config.metadata_refresh_interval_ms
        early = refresh - int(refresh * _GATHER) if self.quiet is not None and now_ms >= self.quiet[1] else refresh
        for topic_id, (want, offset) in desired.items():
            stale = now_ms - self.checked_ms.get(topic_id, _NEVER) >= early
            if self.settled.get(topic_id) == offset and not stale:
                continue
            if want is DesiredState.STOP and not stale and not self.all_stopped(topic_id):
                continue  # a stop has nothing to do at the topic level until every partition is STOPPED
            self.checked_ms[topic_id] = now_ms
            due.append((topic_id, want, offset))
        due.sort()  # in topic order, as before: only the due ones sorted
        observers = self.r.observers
        observers.listing_pass(True)  # the destination's topics listed at most once for all the parts
        try:
            for i in range(0, len(due), _PART):
                self.run(due[i : i + _PART])  # each part's topics are done (ready again) before the next
                if self.between is not None and i + _PART < len(due):
                    self.between()
        finally:
            observers.listing_pass(False)
        settled, checked = self.settled, self.checked_ms
        if all(settled.get(t) == offset for t, (_, offset) in desired.items()):
            self.quiet = (desired, min((checked.get(t, _NEVER) + refresh for t in desired), default=1 << 62))

    def reconcile_stopped(self, desired: Desired) -> None:
        """Stopping topics whose partitions are all STOPPED now."""
        self.run([(t, want, offset) for t, (want, offset) in sorted(desired.items())
                  if want is DesiredState.STOP and self.settled.get(t) != offset and self.all_stopped(t)])  # fmt: skip

    def stop_state(self, tp: TopicPartition) -> MirrorPartitionState:
        """A partition's state as a stop's topic level reads it: durable only (a write queued or in
        flight, of another table partition's job, counts for nothing until it is acknowledged)."""
        durable = getattr(self.r, "durable_state", None)
        return durable(tp) if durable is not None else self.r.state(tp)

    def all_stopped(self, topic_id: uuid.UUID) -> bool:
        state = self.stop_state
        # The partition that was not stopped at the last look is looked at first: while a stop
        # goes on it mostly still is not, and a topic's answer costs one read, not a walk (each
        # round asks for every stopping topic: 4,000 of them at 200,000 partitions).
        blocker = self._not_stopped.get(topic_id)
        parts = self.r.partitions.get(topic_id, ())
        if blocker is not None and blocker in parts and state(TopicPartition(topic_id, blocker)).state not in STOP_DONE:
            return False
        for p in parts:
            if state(TopicPartition(topic_id, p)).state not in STOP_DONE:
                self._not_stopped[topic_id] = p
                return False
        self._not_stopped.pop(topic_id, None)
        return True

    def run(self, topics: Sequence[tuple[uuid.UUID, DesiredState, int]]) -> None:
        """Observe every topic at once (pipelined), decide each, then run every topic's commands
        side by side (pipelined, each topic's in its order: one topic's decision reads only its
        own observation), and apply each topic's outcome."""
        r = self.r
        for topic_id, _, _ in topics:
            r.ready.discard(topic_id)
        observed = drive_all({t: r.observers.topic(t, want) for t, want, _ in topics})
        if topics:
            failed = next((f"{type(o).__name__}: {o}" for o in observed.values() if isinstance(o, PortError)), None)
            r.stats.synced("topic_metadata_refresh", r.now_ms, failed)
        decided = []
        version = self._version()
        for topic_id, want, offset in topics:
            obs = observed[topic_id]
            if version is not None and self.settled.get(topic_id) == offset and self._seen.get(topic_id) == (obs, version, r.config):
                r.ready.add(topic_id)  # as it settled: the same observation, no state moved since
                continue
            if isinstance(obs, PortError):
                r.note(f"topic {topic_id}: {obs}")
            elif obs is not None:
                parts = set(r.partitions.get(topic_id, ()))
                if want is DesiredState.STOP and obs.dest_topic is not None:
                    parts.update(range(len(obs.dest_topic.partitions)))  # writable once every one is STOPPED, wherever its state lives
                state = self.stop_state if want is DesiredState.STOP else r.state
                states = {p: state(TopicPartition(topic_id, p)) for p in sorted(parts)}
                decided.append((topic_id, want, offset, states,
                                decide_topic(r.mirror_name, obs, want, states, r.now_ms, r.config)))
        # One round trip per command position, not one per command: making 4,000 topics
        # writable at the end of a failover took ~2 s one by one.
        failed_topics = r.executor.run_many({t: d.commands for t, _, _, _, d in decided})
        for topic_id, want, offset, states, decision in decided:
            if topic_id in failed_topics:
                r.note(f"topic {topic_id}: {failed_topics[topic_id]}")
            else:
                self._apply(topic_id, want, offset, states, decision)
        version = self._version()
        for topic_id, want, offset, _, _ in decided:
            if version is not None and self.settled.get(topic_id) == offset and topic_id in r.ready:
                self._seen[topic_id] = (observed[topic_id], version, r.config)

    def _version(self) -> object:
        """The store's version (``WorkerStateStore.version``), None where it has none."""
        version = getattr(getattr(self.r, "store", None), "version", None)
        return None if version is None else version()

    def _apply(self, topic_id: uuid.UUID, want: DesiredState, offset: int,
               states: dict[int, MirrorPartitionState], decision: TopicDecision) -> None:  # fmt: skip
        r = self.r
        for p, s in decision.states.items():
            r.partitions.setdefault(topic_id, set()).add(p)
            if s is not states.get(p):
                r.persist(r.key(TopicPartition(topic_id, p)), stamp_applied(s, offset))
        if decision.ready:
            r.ready.add(topic_id)
        if not decision.commands and (decision.ready or (
                want is DesiredState.STOP and all(st.state in (MirrorState.STOPPED, MirrorState.UNKNOWN)
                                                  for st in decision.states.values()))):
            self.settled[topic_id] = offset
        else:
            self.unsettle(topic_id)
