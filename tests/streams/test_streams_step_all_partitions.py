"""One event steps every table partition the worker owns, their writes durable side by side.

Stepping table partitions one after another made a mass failover 8 table partitions x 3 rounds
in a row, each round waiting for its own changelog acknowledgement before the next table
partition began. Now an event of any owned table partition runs one job per mirror over all of
them and makes all their writes durable together; the rule is unchanged: a round's writes are
durable before the next round's steps run.

The test drives ``CoordinatorWorker.step_partition`` over a real ``MirrorRunner`` and
``WorkerStateStore`` on in-process model clusters; the table's ``persist_many`` stands for the
changelog (it lands what is queued, as an acknowledgement does).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections import defaultdict
from types import SimpleNamespace
from typing import Any

from clustermodel import ClusterModel
from coordinator.partition_state import MirrorPartitionKey
from coordinator.states import DesiredState, MirrorState
from coordinator.workflows.config import MirrorConfig
from streams.runner.runner import MirrorRunner
from streams.worker.app import CoordinatorWorker
from streams.worker.mirror_jobs import MirrorJob
from streams.worker.state_store import WorkerStateStore

PARTITIONS = 4  # table partitions
CONFIG = MirrorConfig(metadata_refresh_interval_ms=0, fetch_backoff_ms=0)


class Table:
    """``WorkerTable`` as the step uses it: keys per table partition, and ``persist_many``,
    which makes the queued writes durable (``land``) and records which partitions it covered."""

    def __init__(self, store: WorkerStateStore) -> None:
        self.store = store
        self.keys: dict[int, list[MirrorPartitionKey]] = defaultdict(list)
        self.persisted: list[list[int]] = []

    def keys_of(self, partition: int) -> list[MirrorPartitionKey]:
        return self.keys[partition]

    def key_set(self, partition: int) -> set[MirrorPartitionKey]:
        return set(self.keys[partition])

    async def persist_many(self, partitions: list[int]) -> int:
        self.persisted.append(sorted(partitions))
        written = 0
        for p in partitions:
            ready, lmes, _ = self.store.prepare(p)
            self.store.land(ready)
            written += len(ready) + len(lmes)
        return written

    async def persist(self, partition: int) -> int:  # one table partition's writes
        return await self.persist_many([partition])


def worker(topics: int = 6, partitions: int = 4) -> Any:
    source, dest = ClusterModel("a", seed=1), ClusterModel("b", seed=2)
    store = WorkerStateStore(PARTITIONS)
    store.owned = set(range(PARTITIONS))
    runner = MirrorRunner("m", source, dest, CONFIG, store=store)  # type: ignore[arg-type]
    table = Table(store)
    for i in range(topics):
        topic_id = source.add_topic(f"t{i}", partitions).topic_id
        runner.set_desired(topic_id, DesiredState.START)
        for p in range(partitions):
            key = MirrorPartitionKey("m", topic_id, p)
            table.keys[store.partition_of(key)].append(key)
    assert len(table.keys) == PARTITIONS, "the keys spread over every table partition"
    w = SimpleNamespace(store=store, table_partitions=table, mirrors={"m": MirrorJob(runner, (source, dest))},
                        image=SimpleNamespace(mirrors=SimpleNamespace(mirrors={"m": None})), max_rounds=10,
                        step_timeout=30.0, pool=concurrent.futures.ThreadPoolExecutor(1), now=0,
                        config=SimpleNamespace(state_partitions=PARTITIONS), tick_interval=10.0,
                        _last_step={}, _last_step_ms={}, _by_mirror={}, jobs=[], runner=runner, models=(source, dest))  # fmt: skip
    w.clock_ms = lambda: w.now
    w.desired_for = runner.metadata.latest
    w._sync_ownership = lambda: None

    async def nothing() -> None:
        return None

    async def mirror(name: str) -> Any:
        return w.mirrors.get(name)

    def job(m: Any, keys: list[MirrorPartitionKey], now_ms: int, partition: int | None = None,
            shares: Any = None) -> None:  # fmt: skip
        # The durability rule across table partitions: no job starts while a write is pending.
        pending = {p: len(q) for p, q in store.pending.items() if q}
        w.jobs.append((sorted({store.partition_of(k) for k in keys}), pending))
        CoordinatorWorker._paused_job(w, m, keys, now_ms, partition, *(() if shares is None else (shares,)))  # type: ignore[arg-type]

    w._read_other_workers_states = nothing
    w._mirror = mirror
    w._paused_job = job
    w._job = lambda *a: CoordinatorWorker._job(w, *a)  # type: ignore[arg-type]
    w._grouped = lambda p: CoordinatorWorker._grouped(w, p)  # type: ignore[arg-type]
    w._job_done = lambda m, f: CoordinatorWorker._job_done(w, m, f)  # type: ignore[arg-type]
    return w


def event(w: Any, partition: int, ms: int = 100) -> None:
    """An event of table partition ``partition`` (a tick) after ``ms`` of model time."""
    w.now += ms
    for c in w.models:
        c.tick(ms)
    asyncio.run(CoordinatorWorker.step_partition(w, partition))  # type: ignore[arg-type]


def states(w: Any) -> dict[MirrorState, int]:
    counts: dict[MirrorState, int] = defaultdict(int)
    for keys in w.table_partitions.keys.values():
        for k in keys:
            s = w.store.durable.get(k)
            counts[s.state if s is not None else MirrorState.UNKNOWN] += 1
    return dict(counts)


def test_an_event_of_one_table_partition_steps_them_all() -> None:
    w = worker()
    total = sum(len(k) for k in w.table_partitions.keys.values())
    event(w, 0)
    assert MirrorState.UNKNOWN not in states(w), "partitions of table partitions 1-3 moved on an event of 0"
    assert w.jobs[0][0] == list(range(PARTITIONS)), "one job over every owned table partition"
    for _ in range(30):
        if states(w) == {MirrorState.MIRRORING: total}:
            break
        event(w, 2)
    assert states(w) == {MirrorState.MIRRORING: total}
    # A failover: every partition STOPPED, each round's writes durable before the next round ran.
    for t in w.runner.metadata.latest("m"):
        w.runner.set_desired(t, DesiredState.STOP)
    for _ in range(30):
        if states(w) == {MirrorState.STOPPED: total}:
            break
        event(w, 3)
    assert states(w) == {MirrorState.STOPPED: total}
    assert all(pending == {} for _, pending in w.jobs), "a job ran with writes not yet durable"
    assert all(p == list(range(PARTITIONS)) for p in w.table_partitions.persisted), "every owned partition persisted"
    w.pool.shutdown()


def test_ticks_of_the_other_partitions_sent_before_the_step_are_covered() -> None:
    w = worker(topics=2)
    w.now = 5_000
    event(w, 1)
    assert set(w._last_step_ms) == set(range(PARTITIONS)) and set(w._last_step_ms.values()) == {5_100}
    w.pool.shutdown()
