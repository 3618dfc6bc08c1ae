"""An idle worker sends no ticks: only a table partition with something to do gets one.

The worker's timer (``CoordinatorWorker._send_ticks``) asks ``TickPlan`` which owned table
partitions a step would find work in. Quiet ones (every mirror partition settled and parked,
nothing queued, no sync or topic level due) get none, until the last-resort idle interval.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from types import SimpleNamespace
from typing import Any

from coordinator.partition_state import MirrorPartitionKey
from coordinator.ports import TopicPartition
from coordinator.states import DesiredState
from streams.runner.data_watch import DataWatch
from streams.runner.interest import Interest
from streams.worker.app import CoordinatorWorker
from streams.worker.state_store import WorkerStateStore
from streams.worker.ticks import TickPlan

TOPIC = uuid.UUID(int=7)
DESIRED = {TOPIC: (DesiredState.START, 3)}


class Runner:
    """What the tick plan reads of a ``MirrorRunner``: its hot set and what is due on a clock."""

    def __init__(self, watch: Any = None) -> None:
        self.interest = Interest("m", watch)
        self.sync_due = False

    def due(self, now_ms: int, desired: object) -> bool:
        return self.sync_due


class TickTopic:
    def __init__(self) -> None:
        self.sent: list[int] = []

    async def send(self, *, key: bytes, value: bytes, partition: int) -> None:
        self.sent.append(partition)


def worker(partitions: int = 4, watch: Any = None) -> Any:
    store = WorkerStateStore(partitions)
    store.owned = set(range(partitions))
    keys = {p: [] for p in range(partitions)}
    for i in range(64):
        k = MirrorPartitionKey("m", TOPIC, i)
        keys[store.partition_of(k)].append(k)
    image = SimpleNamespace(mirrors=SimpleNamespace(mirrors={"m": None}, get=lambda name: None))
    w = SimpleNamespace(
        store=store, image=image, clock_ms=lambda: w.now, now=100_000, loader=None, tick_topic=TickTopic(),
        mirrors={"m": SimpleNamespace(runner=Runner(watch), retired=False, configs=None)},
        config=SimpleNamespace(state_partitions=partitions), desired_for=lambda name: DESIRED,
        table_partitions=SimpleNamespace(keys_of=lambda p: keys[p]), _last_step_ms={},
        owned_partitions=lambda: set(range(partitions)), caught_up=threading.Event(),
        tick_value=CoordinatorWorker.tick_value, keys=keys,
    )  # fmt: skip
    w.caught_up.set()
    w.ticks = TickPlan(w, idle_interval_s=5.0)
    return w


def timer(w: Any) -> list[int]:
    """One pass of the worker's tick timer; the table partitions it ticked. Each tick is then
    stepped (as the partition agent does): it cools whatever it stepped."""
    w.tick_topic.sent.clear()
    asyncio.run(CoordinatorWorker._send_ticks(w))
    sent = list(w.tick_topic.sent)
    for p in sent:
        w._last_step_ms[p] = w.now
        if "m" in w.mirrors:
            r = w.mirrors["m"].runner
            r.interest.select(p, w.keys[p], w.keys[p], set(w.keys[p]))
            r.interest.cool(w.keys[p], lambda k: True)
    w.now += 200
    return sent


def test_a_quiet_worker_sends_no_ticks_until_something_moves() -> None:
    w = worker()
    r = w.mirrors["m"].runner
    assert timer(w) == [0, 1, 2, 3]  # every table partition's keys are new to the runner
    assert timer(w) == []  # all quiet: no tick, however many passes
    assert timer(w) == []
    key = w.keys[2][0]
    r.interest.mark(key)  # its state was written, say
    assert timer(w) == [2]
    assert timer(w) == []
    w.store.pending_lme[3][key] = object()  # a write queued for table partition 3
    assert timer(w) == [3]
    w.store.pending_lme.clear()
    r.sync_due = True  # the metadata sync (epoch checks, configs, groups, ACLs) runs in any one job
    assert timer(w) == [0]
    r.sync_due = False
    assert timer(w) == []


def test_a_tick_on_its_way_is_not_sent_again_and_the_idle_interval_is_a_last_resort() -> None:
    w = worker()
    timer(w)
    r = w.mirrors["m"].runner
    r.interest.mark(w.keys[1][0])
    w.tick_topic.sent.clear()
    asyncio.run(CoordinatorWorker._send_ticks(w))
    asyncio.run(CoordinatorWorker._send_ticks(w))  # not stepped yet: in flight, not sent twice
    assert w.tick_topic.sent == [1]
    w.now += 2_000  # still not stepped (a lost record): sent again
    w.tick_topic.sent.clear()
    asyncio.run(CoordinatorWorker._send_ticks(w))
    assert w.tick_topic.sent == [1]
    w._last_step_ms[1] = w.now
    r.interest.cool(w.keys[1], lambda k: True)
    w.now += 5_000  # nothing stepped any table partition for the idle interval
    assert timer(w) == [0, 1, 2, 3]


def test_an_assignment_or_a_mirror_without_its_runner_ticks_every_owned_partition() -> None:
    w = worker()
    timer(w)
    w.owned_partitions = lambda: {0, 1, 2, 3}
    w.store.owned = {0, 1}  # two table partitions assigned, not taken on yet
    assert timer(w) == [0, 1, 2, 3]
    w.store.owned = {0, 1, 2, 3}
    del w.mirrors["m"]  # a new mirror in the image: its runner is built in a step
    assert timer(w) == [0, 1, 2, 3]


class MovedClient:
    """A source whose fetch session reports ``tp`` moved once it has been parked."""

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp

    def fetch_wait(self, session: int, add: list[Any], remove: list[Any], max_wait_ms: int) -> Any:
        return 1, [tp for tp, _, _ in add if tp == self.tp]

    def close(self) -> None: ...


def test_a_parked_partition_whose_source_moved_is_ticked_at_once() -> None:
    key = MirrorPartitionKey("m", TOPIC, 5)
    tp = key.topic_partition
    watch = DataWatch(lambda: MovedClient(tp), max_wait_ms=10)
    try:
        w = worker(watch=watch)
        r = w.mirrors["m"].runner
        timer(w)
        assert timer(w) == []

        async def park_and_wait() -> None:
            w.ticks.watch("m", r, asyncio.get_running_loop())
            r.interest.park(tp, 4, 1)
            for _ in range(200):  # no timer pass: the watch's report sends the tick
                if w.tick_topic.sent:
                    return
                await asyncio.sleep(0.01)

        w.tick_topic.sent.clear()
        asyncio.run(park_and_wait())
        assert w.tick_topic.sent == [w.store.partition_of(key)]
    finally:
        watch.close()
