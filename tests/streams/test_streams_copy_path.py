"""The copy path: a parked partition whose source moved is copied at once, with no tick.

The data watch reports a moved partition; ``CopyPath`` runs the mirror's copy job
(``run_copy``: one fetch, one append) on the pool: no tick record, no event, no workflow step.
A step of the same mirror waits for a running copy job instead of skipping the mirror.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from model_server import ServerProcess

from clustermodel.client import ClusterClient
from coordinator.partition_state import MirrorPartitionKey
from coordinator.ports import TopicPartition
from coordinator.states import DesiredState, MirrorState
from coordinator.workflows.config import MirrorConfig
from streams.runner.runner import MirrorRunner
from streams.worker.app import CoordinatorWorker
from streams.worker.copier import CopyPath
from streams.worker.mirror_jobs import MirrorJob, run_job
from streams.worker.ticks import TickPlan


@pytest.fixture
def port() -> Iterator[int]:
    server = ServerProcess("--cluster", "A", "--cluster", "B", "--seed", "5", "--no-kafka-listeners")
    yield server.port
    server.stop()


class TickTopic:
    def __init__(self) -> None:
        self.sent: list[int] = []

    async def send(self, *, key: bytes, value: bytes, partition: int) -> None:
        self.sent.append(partition)


def worker(r: MirrorRunner, pending: set[MirrorPartitionKey]) -> Any:
    """What the copy path reads of a ``CoordinatorWorker``: one mirror, one owned table partition."""
    store = SimpleNamespace(owned={0}, partition_of=lambda k: 0, has_pending=lambda k: k in pending)
    w: Any = SimpleNamespace(
        store=store, mirrors={"m": MirrorJob(r, ())}, caught_up=threading.Event(), tick_topic=TickTopic(),
        pool=concurrent.futures.ThreadPoolExecutor(2), clock_ms=lambda: int(time.time() * 1000), tick_interval=0.2,
        desired_for=r.metadata.latest, owned_partitions=lambda: {0}, tick_value=CoordinatorWorker.tick_value,
        _last_step_ms={},
    )  # fmt: skip
    w.caught_up.set()
    w.copier = CopyPath(w)
    w.ticks = TickPlan(w)
    w._job_done = lambda m, f: CoordinatorWorker._job_done(w, m, f)
    return w


def parked(r: MirrorRunner, n: int) -> int:
    """Ticks ``r`` until ``n`` partitions are parked (caught up); the tick's time."""
    now = 0
    while len(r.interest.parked) < n:
        now += 100
        assert now < 10_000, "partitions never parked"
        r.interest.wake()
        r.tick(now)
    return now


def produced_and_reported(a: ClusterClient, r: MirrorRunner, topic: str, tp: TopicPartition) -> None:
    """A record produced to partition 0 of ``topic`` on A, and ``tp`` reported moved by the watch."""
    a.produce(topic, 0, [(b"k", b"v0")])
    deadline = time.monotonic() + 10
    while tp not in r.interest.watch.peek_moved():
        assert time.monotonic() < deadline, "the watch never reported the record"
        time.sleep(0.01)


def test_a_moved_partition_is_copied_without_a_tick_and_parks_again(port: int) -> None:
    a, b = ClusterClient(port, "A"), ClusterClient(port, "B")
    meta = a.add_topic("orders", 3)
    # The runner's own clients: a client is not shared between threads.
    r = MirrorRunner("m", ClusterClient(port, "A"), ClusterClient(port, "B"), MirrorConfig(), long_poll=True)
    tps = [TopicPartition(meta.topic_id, p) for p in range(3)]
    pending = {MirrorPartitionKey("m", meta.topic_id, 1)}  # a state write not durable yet
    w = worker(r, pending)
    try:
        r.set_desired(meta.topic_id, DesiredState.START)
        parked(r, 3)
        assert all(r.state(tp).state is MirrorState.MIRRORING for tp in tps)
        r.interest.cool(list(r.interest.hot), r.quiet)
        assert r.interest.hot == set()

        async def produce_and_wait() -> None:
            w.ticks.watch("m", r, asyncio.get_running_loop())
            a.produce("orders", 0, [(b"k", b"v0"), (b"k", b"v1")])
            a.produce("orders", 1, [(b"k", b"v2")])
            deadline = time.monotonic() + 10
            while b.list_offsets(tps[0]).leo < 2 or tps[1] in r.interest.parked:
                assert time.monotonic() < deadline, "not copied"
                await asyncio.sleep(0.01)
            while w.mirrors["m"].busy is not None:
                await asyncio.sleep(0.01)

        asyncio.run(produce_and_wait())
        assert w.tick_topic.sent == []  # no tick, no event: the copy job did it
        assert w.copier.copied >= 1 and b.list_offsets(tps[0]).leo == 2
        # Caught up again by what it appended: parked, quiet, not hot.
        key0 = MirrorPartitionKey("m", meta.topic_id, 0)
        assert tps[0] in r.interest.parked and key0 not in r.interest.hot
        # A partition with a write not durable yet is left to its table partition's step: hot, not copied.
        assert b.list_offsets(tps[1]).leo == 0 and pending <= r.interest.hot
        assert b.list_offsets(tps[2]).leo == 0
    finally:
        w.pool.shutdown(wait=True)
        r.close()
        a.close()
        b.close()


def test_a_report_is_copied_at_once_and_the_linger_is_the_watchs() -> None:
    """``mirror.copy.linger.ms`` is the data watch's (it batches its reports: the long poll's
    tests): each report starts a copy job at once; one while a job runs starts when it ends."""
    r: Any = SimpleNamespace(mirror_name="m", interest=SimpleNamespace(watch=SimpleNamespace(linger_s=0.0)))
    m = MirrorJob(r, ())

    async def scenario(busy: bool) -> tuple[int, int]:
        w: Any = SimpleNamespace(mirrors={"m": m}, caught_up=threading.Event(), config=SimpleNamespace(copy_linger_ms=80))
        w.caught_up.set()
        w.copier = CopyPath(w)
        TickPlan(w).watch("m", r, asyncio.get_running_loop())
        assert r.interest.watch.linger_s == 0.08
        started: list[MirrorJob] = []
        w.copier._start = lambda job: started.append(job)
        if busy:
            m.busy = asyncio.get_running_loop().create_future()
        for _ in range(3):
            assert w.copier.moved("m")
        during = len(started)
        if busy:
            assert w.copier.wanted == {"m"}
            m.busy = None
            w.copier.job_done(m)
        return during, len(started)

    assert asyncio.run(scenario(busy=False)) == (3, 3)
    assert asyncio.run(scenario(busy=True)) == (0, 1)


def test_a_step_waits_for_a_running_copy_job_and_goes_first() -> None:
    r = SimpleNamespace(mirror_name="m")
    m = MirrorJob(r, ())  # type: ignore[arg-type]
    started: list[MirrorJob] = []

    async def scenario() -> list[str]:
        w: Any = SimpleNamespace(mirrors={"m": m}, caught_up=threading.Event())
        w.caught_up.set()
        copier = CopyPath(w)
        copier._start = lambda job: started.append(job)  # type: ignore[method-assign]
        loop = asyncio.get_running_loop()
        m.busy, m.copying = loop.create_future(), True
        order: list[str] = []
        assert copier.moved("m") and started == [] and copier.wanted == {"m"}  # busy: wanted

        async def step() -> None:
            await copier.settle(m, 5.0)
            order.append("step")

        task = asyncio.create_task(step())
        await asyncio.sleep(0.01)
        assert order == []  # waiting for the copy job
        m.busy.set_result(0)
        m.busy, m.copying = None, False
        copier.job_done(m)  # the copy ended: the waiting step goes first, no new copy yet
        assert copier.moved("m") and started == []  # nor for a report that comes meanwhile
        await task
        copier.job_done(m)  # the step's job ended: the wanted copy starts
        order.append("copy" if started == [m] else "no copy")
        return order

    assert asyncio.run(scenario()) == ["step", "copy"]


def test_a_copy_leaves_its_partitions_cold_while_it_runs(port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hot while copied, a partition made the tick timer tick its table partition for nothing
    (a produce, a Faust event and a step each): only what the copy leaves unquiet turns hot."""
    import streams.worker.mirror_jobs as mirror_jobs

    a, b = ClusterClient(port, "A"), ClusterClient(port, "B")
    meta = a.add_topic("orders", 2)
    r = MirrorRunner("m", ClusterClient(port, "A"), ClusterClient(port, "B"), MirrorConfig(), long_poll=True)
    tp0, tp1 = TopicPartition(meta.topic_id, 0), TopicPartition(meta.topic_id, 1)
    key1 = MirrorPartitionKey("m", meta.topic_id, 1)
    w = worker(r, {key1})  # a state write not durable yet: left to its step
    hot_during: list[set[MirrorPartitionKey]] = []
    fetch = mirror_jobs.fetch_while_behind
    monkeypatch.setattr(mirror_jobs, "fetch_while_behind", lambda *args: hot_during.append(set(r.interest.hot)) or fetch(*args))
    try:
        r.set_desired(meta.topic_id, DesiredState.START)
        now = parked(r, 2)
        r.interest.cool(list(r.interest.hot), r.quiet)
        a.produce("orders", 1, [(b"k", b"v")])
        produced_and_reported(a, r, "orders", tp0)
        while tp1 not in r.interest.watch.peek_moved():
            time.sleep(0.01)
        assert mirror_jobs.run_copy(w, w.mirrors["m"], now + 100) == 1
        assert hot_during == [set()] and b.list_offsets(tp0).leo == 1
        assert r.interest.hot == {key1} and tp0 in r.interest.parked
    finally:
        w.pool.shutdown(wait=True)
        r.close()
        a.close()
        b.close()


def test_a_sync_lets_the_copy_path_run_between_its_parts(port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The metadata sync holds its mirror's job for seconds at 50,000 partitions: a record
    produced meanwhile is copied between the sync's parts, not after the sync."""
    import streams.runner.syncer as syncer

    monkeypatch.setattr(syncer, "_SYNC_PART", 2)  # three parts of the epoch check over 5 partitions
    a, b = ClusterClient(port, "A"), ClusterClient(port, "B")
    meta = a.add_topic("orders", 5)
    r = MirrorRunner("m", ClusterClient(port, "A"), ClusterClient(port, "B"), MirrorConfig(), long_poll=True)
    tp0 = TopicPartition(meta.topic_id, 0)
    w = worker(r, set())
    w.store.remote, w.config = None, SimpleNamespace(state_partitions=1)
    try:
        r.set_desired(meta.topic_id, DesiredState.START)
        now = parked(r, 5)
        produced_and_reported(a, r, "orders", tp0)  # no loop here: nothing copies it but the sync's job
        calls: list[int] = []
        sync = r.syncer.run

        def run(live: Any, now_ms: int) -> None:
            between = r.syncer.between
            assert between is not None  # the worker's job hands the copy path to the sync
            r.syncer.between = lambda: calls.append(b.list_offsets(tp0).leo) or between()
            sync(live, now_ms)

        r.syncer.run = run  # type: ignore[method-assign]
        r._next_sync_ms = 0
        run_job(w, w.mirrors["m"], [], now + 100)
        # Copied after the first part (B had 0 records before it, 1 from then on).
        assert calls[:2] == [0, 1] and len(calls) >= 3 and b.list_offsets(tp0).leo == 1
        assert r.syncer.between is None and tp0 in r.interest.parked
    finally:
        w.pool.shutdown(wait=True)
        r.close()
        a.close()
        b.close()


def test_a_topic_level_refresh_lets_the_copy_path_run_between_its_parts(port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The topic level's metadata refresh of every topic runs in parts; the copy path between them."""
    import streams.runner.topic_level as topic_level

    monkeypatch.setattr(topic_level, "_PART", 1)  # one topic per part
    a, b = ClusterClient(port, "A"), ClusterClient(port, "B")
    metas = [a.add_topic(f"t{i}", 1) for i in range(3)]
    r = MirrorRunner("m", ClusterClient(port, "A"), ClusterClient(port, "B"), MirrorConfig(), long_poll=True)
    tp0 = TopicPartition(metas[0].topic_id, 0)
    w = worker(r, set())
    w.store.remote, w.config = None, SimpleNamespace(state_partitions=1)
    try:
        for meta in metas:
            r.set_desired(meta.topic_id, DesiredState.START)
        now = parked(r, 3)
        produced_and_reported(a, r, "t0", tp0)
        seen: list[int] = []
        run = r.topic_level.run
        r.topic_level.run = lambda topics: (seen.append(b.list_offsets(tp0).leo), run(topics))[1]  # type: ignore[method-assign]
        r.topic_level.checked_ms.clear()  # every topic due for its refresh
        r.topic_level.quiet = None
        r._next_sync_ms = 1 << 62
        run_job(w, w.mirrors["m"], [], now + 100)
        assert seen == [0, 1, 1] and r.topic_level.between is None and tp0 in r.interest.parked
    finally:
        w.pool.shutdown(wait=True)
        r.close()
        a.close()
        b.close()
