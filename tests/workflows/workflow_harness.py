"""Helpers for the workflow tests: two (or three) model clusters, runners, log views, invariants.

``World`` owns the clusters and the runners, moves the logical clock of all of them together
and can restart a runner from its persisted state only (same ``InMemoryStateStore`` and
``DesiredStateLog``, everything else new). ``CrashingPort`` wraps a port and raises ``Crash``
(a BaseException, so no handler in the runner swallows it) after a given number of calls: a
coordinator killed in the middle of a workflow.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from clustermodel import ClusterModel
from clustermodel.records import read_committed_values
from coordinator.partition_state import MirrorPartitionKey
from coordinator.ports import Batch, ControlType, TopicPartition
from coordinator.states import DesiredState, MirrorState
from coordinator.workflows.config import MirrorConfig
from streams.runner.stores import DesiredStateLog, InMemoryStateStore
from streams.runner.runner import MirrorRunner

# A source outage fails partitions at its first failed call (source.unavailable.timeout.ms=0): the
# tests of the grace a source gets before FAILED set it themselves (test_workflows_source_outage).
FAST = MirrorConfig(metadata_refresh_interval_ms=0, fetch_backoff_ms=0, failed_retry_initial_backoff_ms=100,
                    failed_retry_max_backoff_ms=1_000, source_unavailable_timeout_ms=0)

_MUTATING = {
    "create_topic", "create_partitions", "set_read_only", "set_mirror", "append_mirror_batches",
    "truncate_to", "truncate_fully_and_start_at", "bump_leader_epoch", "append_control_batch",
    "set_last_mirrored_epoch", "commit_group_offsets", "alter_configs", "create_acls", "delete_acls",
}


class Crash(BaseException):
    """The coordinator process died."""


class CrashingPort:
    """A port proxy that dies at its ``calls_left``-th mutating call (reads are free): before the call,
    or with ``after_call`` once the call took effect (executed but never persisted by the runner)."""

    def __init__(self, port: Any, calls_left: int, after_call: bool = False) -> None:
        self._port = port
        self.calls_left = calls_left
        self.after_call = after_call

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._port, name)
        if name not in _MUTATING or not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            if self.calls_left <= 0:
                if self.after_call:
                    attr(*args, **kwargs)
                raise Crash(name)
            self.calls_left -= 1
            return attr(*args, **kwargs)

        return call


class Mirror:
    """A runner with the durable parts kept apart, so it can be rebuilt after a crash."""

    def __init__(self, name: str, source: ClusterModel, dest: ClusterModel, config: MirrorConfig) -> None:
        self.name, self.source, self.dest, self.config = name, source, dest, config
        self.store = InMemoryStateStore()
        self.metadata = DesiredStateLog()
        self.runner = self.build()

    def build(self, dest: Any = None) -> MirrorRunner:
        return MirrorRunner(self.name, self.source, dest or self.dest, self.config, self.store, self.metadata)

    def restart(self) -> MirrorRunner:
        self.runner = self.build()
        return self.runner

    def set_desired(self, topic_id: uuid.UUID, desired: DesiredState) -> None:
        self.runner.set_desired(topic_id, desired)

    def round(self, now: int) -> None:
        self.runner.tick(now)

    @property
    def history(self) -> list[tuple[Any, MirrorState, MirrorState]]:
        return self.store.history


class WorkerMirror(Mirror):
    """A runner as the stream worker drives it: ``WorkerStateStore`` (writes queued, collapsed
    and only durable once committed, the durability gate), a round in phases, then the commit.
    A crash loses every write not committed yet."""

    def __init__(self, name: str, source: ClusterModel, dest: ClusterModel, config: MirrorConfig) -> None:
        from streams.worker.state_store import WorkerStateStore

        self.name, self.source, self.dest, self.config = name, source, dest, config
        self.store = WorkerStateStore(4)  # type: ignore[assignment]
        self.store.owned = set(range(4))
        self.metadata = DesiredStateLog()
        self._history: list[tuple[Any, MirrorState, MirrorState]] = []
        self.runner = self.build()

    def restart(self) -> MirrorRunner:
        self.store.drop_pending()  # type: ignore[attr-defined]
        return super().restart()

    def round(self, now: int, max_rounds: int = 10) -> None:
        """As the worker steps a table partition: rounds until one writes nothing (each round's
        writes durable before the next round's commands; the topic level first in each)."""
        for _ in range(max_rounds):
            if not self._one_round(now):
                return

    def _one_round(self, now: int) -> int:
        r, store = self.runner, self.store
        desired = self.metadata.latest(self.name)
        r.reconcile_topics(now, desired)
        keys = {MirrorPartitionKey(self.name, t, p) for t in desired for p in r.partitions.get(t, ())}
        keys.update(store.keys(self.name))
        r.step_partitions(now, sorted(keys), desired)
        r.fetch_round(now, {k.topic_partition for k in keys if not store.has_pending(k)}, desired)  # type: ignore[attr-defined]
        r.sync_if_due(now, desired)
        written = 0
        for p in range(store.num_partitions):  # type: ignore[attr-defined]
            ready, lmes, _ = store.prepare(p)  # type: ignore[attr-defined]
            for key, state in ready:
                before = store.durable.get(key)  # type: ignore[attr-defined]
                self._history.append((key, before.state if before else MirrorState.UNKNOWN, state.state))
            store.land(ready)  # type: ignore[attr-defined]
            store.land_impacts(store.take_impacts(p))  # type: ignore[attr-defined]
            written += len(ready) + len(lmes)
        return written

    @property
    def history(self) -> list[tuple[Any, MirrorState, MirrorState]]:
        return [h for h in self._history if h[1] != h[2]]


class World:
    """Model clusters on one logical clock, and the mirrors between them."""

    def __init__(self, *names: str, seed: int = 0, brokers: int = 3, worker: bool = False) -> None:
        self.clusters = {n: ClusterModel(n, seed=seed + i, brokers=brokers) for i, n in enumerate(names or ("a", "b"))}
        self.mirrors: dict[str, Mirror] = {}
        self.now = 0
        self.worker = worker  # mirrors driven as the stream worker drives them (WorkerMirror)

    def __getitem__(self, name: str) -> ClusterModel:
        return self.clusters[name]

    def mirror(self, source: str, dest: str, config: MirrorConfig = FAST) -> Mirror:
        name = f"{source}-to-{dest}"
        m = self.mirrors.get(name)
        if m is None:
            cls = WorkerMirror if self.worker else Mirror
            m = self.mirrors[name] = cls(name, self.clusters[source], self.clusters[dest], config)
        return m

    def step(self, ms: int = 100, rounds: int = 1) -> None:
        for _ in range(rounds):
            self.now += ms
            for c in self.clusters.values():
                c.tick(ms)
            for m in self.mirrors.values():
                m.round(self.now)


# ---------------------------------------------------------------------------------------------
# Log views
# ---------------------------------------------------------------------------------------------


def batches(cluster: ClusterModel, tp: TopicPartition) -> list[Batch]:
    return list(cluster.partition(tp).leader_log.batches)


def shape(bs: list[Batch]) -> list[tuple[Any, ...]]:
    """What "the same log" means: offsets, batch epochs, producer fields, control type, payload."""
    return [(b.base_offset, b.last_offset, b.leader_epoch, b.producer_id, b.producer_epoch, b.base_sequence,
             b.is_transactional, b.control_type, b.payload) for b in bs]


def prefix(cluster: ClusterModel, tp: TopicPartition, upto: int) -> list[tuple[Any, ...]]:
    return shape([b for b in batches(cluster, tp) if b.last_offset < upto])


def committed_values(cluster: ClusterModel, tp: TopicPartition) -> list[bytes | None]:
    """What a read_committed consumer reads from the log start to the LSO (model payload values)."""
    return read_committed_values(cluster, tp)


def control_types(cluster: ClusterModel, tp: TopicPartition) -> list[ControlType]:
    return [b.control_type for b in batches(cluster, tp) if b.is_control and b.control_type is not None]


def dle(cluster: ClusterModel, tp: TopicPartition) -> int:
    return cluster.partition(tp).leader_epoch


def states_of(m: Mirror) -> dict[TopicPartition, MirrorState]:
    return {tp: s.state for tp, s in m.runner.states().items()}


def run_until(world: World, predicate: Any, max_rounds: int = 60, ms: int = 100) -> int:
    for i in range(max_rounds):
        if predicate():
            return i
        world.step(ms)
    assert predicate(), "condition not reached"
    return max_rounds


def all_in(m: Mirror, state: MirrorState) -> bool:
    st = states_of(m)
    return bool(st) and all(s is state for s in st.values())


def source_topics(w: World, topics: Sequence[tuple[Sequence[tuple[int, bool]], Any]]) -> list[Any]:
    """Topics ``t0``, ``t1``... on cluster ``a``, one per ``(partitions, _)`` of ``topics``: each
    partition ``(records, open_txn)`` gets that many records and, with ``open_txn``, a transaction left open."""
    a = w["a"]
    made = []
    for i, (parts, _) in enumerate(topics):
        t = a.add_topic(f"t{i}", partitions=len(parts))
        made.append(t)
        for p, (records, open_txn) in enumerate(parts):
            for r in range(records):
                a.produce(t.name, p, [(b"k", f"{i}-{p}-{r}".encode())])
            if open_txn:
                tid = f"tx-{i}-{p}"
                a.init_producer_id(tid)
                a.begin_transaction(tid)
                a.produce_transactional(tid, t.name, p, [(b"k", b"open")])
    return made
