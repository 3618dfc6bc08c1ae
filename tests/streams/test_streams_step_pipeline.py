"""Table partitions step side by side, and each one's writes are durable before its next round.

The partition agent (``CoordinatorWorker._process``) hands each event to the table partition's
step task (``streams.worker.steps``): while one table partition waits for the changelog to
acknowledge its writes, another's job runs (a mass failover stepped them one after the other).
A mirror still runs one job at a time: a step that finds it busy waits for it instead of
skipping it. These drive the agent and the real ``step_partition`` on a stand-in worker whose
changelog acknowledges only when the test says so (no broker).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import struct
import threading
import time
import uuid
from types import SimpleNamespace
from typing import Any

from coordinator.partition_state import MirrorPartitionKey
from streams.worker.app import CoordinatorWorker
from streams.worker.copier import CopyPath
from streams.worker.state_store import WorkerStateStore
from streams.worker.steps import StepTasks

TOPIC = uuid.UUID(int=7)


class Worker:
    """What ``_process`` and ``step_partition`` touch; the changelog acknowledges on ``ack(p)``."""

    _process = CoordinatorWorker._process
    step_partition = CoordinatorWorker.step_partition
    _job_done = CoordinatorWorker._job_done

    def owner_fence(self) -> None:
        return None  # no generation here: unfenced

    async def _claim_again_if_current(self) -> None:
        pass

    def __init__(self, owned: set[int], rounds_with_writes: int = 1) -> None:
        self.tick_topic_name = "ticks"
        self.caught_up = SimpleNamespace(is_set=lambda: True)
        self.ticks = SimpleNamespace(ask=lambda p: None)
        self._last_step: dict[int, float] = {}
        self._last_step_ms: dict[int, int] = {}
        self.clock_ms = lambda: int(time.monotonic() * 1000)
        self.store = WorkerStateStore(len(owned))
        self.store.owned = set(owned)
        self.store.remote = {}
        self.config = SimpleNamespace(state_partitions=len(owned))
        self.max_rounds, self.step_timeout = 10, 5.0
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=4)
        self.m = SimpleNamespace(busy=None, retired=False, copying=False, runner=SimpleNamespace(mirror_name="m"),
                                 claim_refused=None)  # fmt: skip
        self.mirrors = {"m": self.m}
        self.image = SimpleNamespace(mirrors=SimpleNamespace(mirrors={"m": object()}, topics={}))
        self.event_desired: dict[Any, Any] = {}
        self._by_mirror: dict[int, Any] = {}
        self.copier = CopyPath(self)
        keys = {p: [MirrorPartitionKey("m", TOPIC, p)] for p in owned}
        self.table_partitions = SimpleNamespace(keys_of=lambda p: keys[p], persist=self._persist)
        self.rounds_with_writes = rounds_with_writes
        self.log: list[tuple[str, int]] = []  # ("job", p) when a job starts, ("durable", p) on an ack
        self._log_lock = threading.Lock()
        self._unwritten: dict[int, int] = {}  # per table partition: writes its jobs queued, not acked yet
        self._jobs: dict[int, int] = {}
        self._acks: dict[int, asyncio.Event] = {}
        self.rebalancing = False
        self.steps = StepTasks(self.step_partition, lambda: self.rebalancing)

    def note(self, what: str, p: int) -> None:
        with self._log_lock:
            self.log.append((what, p))

    def count(self, what: str, p: int) -> int:
        with self._log_lock:
            return self.log.count((what, p))

    async def _read_other_workers_states(self) -> None:
        pass

    async def _sync_ownership(self) -> None:
        pass

    async def _mirror(self, name: str) -> Any:
        return self.mirrors.get(name)

    def _paused_job(self, m: Any, keys: Any, now_ms: int, partition: int) -> None:
        self.note("job", partition)
        time.sleep(0.02)  # the job's CPU and port round trips
        self._jobs[partition] = self._jobs.get(partition, 0) + 1
        if self._jobs[partition] <= self.rounds_with_writes:
            self._unwritten[partition] = 1  # a state write queued for its table partition

    async def _persist(self, p: int) -> int:
        n = self._unwritten.pop(p, 0)
        if n:
            await self.ack_event(p).wait()  # the changelog's acknowledgement
            self.ack_event(p).clear()
            self.note("durable", p)
        return n

    def ack_event(self, p: int) -> asyncio.Event:
        return self._acks.setdefault(p, asyncio.Event())

    def ack(self, p: int) -> None:
        self.ack_event(p).set()


class Ticks:
    """The agent's stream: tick events pushed by the test."""

    def __init__(self) -> None:
        self.q: asyncio.Queue[Any] = asyncio.Queue()

    def push(self, p: int) -> None:
        value = struct.pack(">q", 0)
        self.q.put_nowait(SimpleNamespace(message=SimpleNamespace(topic="ticks", partition=p, value=value)))

    async def events(self) -> Any:
        while True:
            yield await self.q.get()


async def until(cond: Any, timeout: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.005)
    return True


def run(test: Any) -> None:
    async def main() -> None:
        w, ticks = Worker({0, 1}), Ticks()
        agent = asyncio.ensure_future(w._process(ticks))
        try:
            await test(w, ticks)
        finally:
            agent.cancel()
            await w.steps.stop()
            w.pool.shutdown(wait=True)

    asyncio.run(main())


def test_a_table_partitions_job_runs_while_anothers_writes_wait_for_their_ack() -> None:
    async def test(w: Worker, ticks: Ticks) -> None:
        ticks.push(0)
        ticks.push(1)
        assert await until(lambda: w.count("job", 0) == 1)
        # 0's writes are not acknowledged: 1's job runs meanwhile (the agent did not wait for
        # 0's step), after 0's job (one job per mirror at a time), not skipped for it.
        assert await until(lambda: w.count("job", 1) == 1), w.log
        assert w.count("durable", 0) == 0
        w.ack(0)
        w.ack(1)
        assert await until(lambda: not w.steps.tasks)
        assert w.count("durable", 0) == w.count("durable", 1) == 1

    run(test)


def test_a_table_partitions_next_round_waits_for_its_writes_ack_whatever_events_come() -> None:
    async def test(w: Worker, ticks: Ticks) -> None:
        w.rounds_with_writes = 2
        ticks.push(0)
        assert await until(lambda: w.count("job", 0) == 1)
        for _ in range(3):  # more events of 0 while its writes are in flight
            ticks.push(0)
        await asyncio.sleep(0.2)
        assert w.count("job", 0) == 1, w.log  # no step of 0 before its writes are durable
        w.ack(0)
        assert await until(lambda: w.count("job", 0) == 2)
        await asyncio.sleep(0.1)
        assert w.count("job", 0) == 2 and w.count("durable", 0) == 1
        w.ack(0)
        assert await until(lambda: not w.steps.tasks)
        jobs_and_acks = [what for what, p in w.log if p == 0]
        # every job after the first follows an acknowledgement of the one before it
        assert jobs_and_acks[:4] == ["job", "durable", "job", "durable"], jobs_and_acks

    run(test)


def test_a_busy_mirror_is_waited_for_not_skipped() -> None:
    async def test(w: Worker, ticks: Ticks) -> None:
        loop = asyncio.get_running_loop()
        copy: asyncio.Future[None] = loop.create_future()
        w.m.busy, w.m.copying = copy, True  # a copy job of the mirror runs
        ticks.push(1)
        await asyncio.sleep(0.1)
        assert w.count("job", 1) == 0  # one job per mirror at a time
        w.m.busy, w.m.copying = None, False
        copy.set_result(None)
        assert await until(lambda: w.count("job", 1) == 1), w.log  # the same step, no new event
        w.ack(1)
        assert await until(lambda: not w.steps.tasks)

    run(test)


def test_a_rebalance_waits_for_the_steps_under_way_and_starts_none_until_it_is_over() -> None:
    async def test(w: Worker, ticks: Ticks) -> None:
        ticks.push(0)
        assert await until(lambda: w.count("job", 0) == 1)
        w.rebalancing = True
        hold = asyncio.ensure_future(w.steps.hold(5.0))  # Faust's on_partitions_revoked
        await asyncio.sleep(0.1)
        assert not hold.done()  # 0's writes are not acknowledged: its step is under way
        w.steps.request(1)
        w.ack(0)
        await asyncio.wait_for(hold, 2.0)
        assert w.count("durable", 0) == 1 and not w.steps.tasks
        await asyncio.sleep(0.1)
        assert w.count("job", 1) == 0  # asked for during the rebalance: not run yet
        w.rebalancing = False
        w.steps.resume()  # on_rebalance_complete
        assert await until(lambda: w.count("job", 1) == 1)
        w.ack(1)
        assert await until(lambda: not w.steps.tasks)

    run(test)


def test_a_stops_topic_level_counts_only_durable_stopped_states() -> None:
    """Another table partition's job may run while a STOPPED is queued or in flight: the topic
    level of a stop reads durable states only, so a topic never turns writable on a STOPPED the
    changelog has not acknowledged (a crash would leave the partition STOPPING)."""
    from coordinator.partition_state import UNKNOWN_STATE
    from coordinator.ports import TopicPartition
    from coordinator.states import MirrorState
    from streams.runner.runner import MirrorRunner
    from streams.runner.topic_level import TopicLevel

    class Host:
        state = MirrorRunner.state
        durable_state = MirrorRunner.durable_state

        def __init__(self, store: WorkerStateStore) -> None:
            self.store, self.mirror_name, self.partitions = store, "m", {TOPIC: {0, 1}}

        def key(self, tp: TopicPartition) -> MirrorPartitionKey:
            return MirrorPartitionKey("m", tp.topic_id, tp.partition)

    store = WorkerStateStore(4)
    store.owned = {0, 1, 2, 3}
    keys = [MirrorPartitionKey("m", TOPIC, p) for p in (0, 1)]
    stopping = UNKNOWN_STATE.with_(state=MirrorState.STOPPING, state_epoch=1)
    stopped = UNKNOWN_STATE.with_(state=MirrorState.STOPPED, state_epoch=2)
    store.durable[keys[0]], store.durable[keys[1]] = stopped, stopping
    store.put(keys[1], stopped)  # queued by a job, not durable yet
    host = Host(store)
    level = TopicLevel(host)  # type: ignore[arg-type]
    assert host.state(TopicPartition(TOPIC, 1)).state is MirrorState.STOPPED  # the steps read their own writes
    assert not level.all_stopped(TOPIC)
    ready, _, _ = store.prepare(store.partition_of(keys[1]))  # in flight to the changelog
    assert not level.all_stopped(TOPIC)
    store.land(ready)  # acknowledged
    assert level.all_stopped(TOPIC)
