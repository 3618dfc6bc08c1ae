"""The worker fetches back to back while a mirror partition is behind, as a replica fetcher does.

One fetch round per tick capped the copy at ``replica.fetch.max.bytes`` per partition per tick:
from a 1 GB Apache Kafka source, 4 partitions at a 0.1 s tick, 37 MB/s against a cap of 42 MB/s
(bench/real_source.py). A job now fetches again at once for the partitions its last round moved
on and left short of the source's HW, for up to one tick interval; a caught-up partition, one
that did not move (backoff, error, nothing new) or one with a state write pending is left for
the next tick.

The test drives ``CoordinatorWorker._job`` on stand-ins (no broker): a runner whose fetch round
moves each eligible partition on by a fixed step towards its HW.
"""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

from coordinator.partition_state import MirrorPartitionKey
from coordinator.ports import TopicPartition
from coordinator.states import DesiredState
from streams.worker.app import CoordinatorWorker
from streams.worker.state_store import WorkerStateStore

TOPIC = uuid.uuid4()


class Runner:
    def __init__(self, hws: dict[int, int], step: int, stuck: set[int] = frozenset()) -> None:  # type: ignore[assignment]
        self.mirror_name = "m"
        self.hws, self.step, self.stuck = hws, step, stuck
        self.progress: dict[TopicPartition, tuple[int, int]] = {}
        self.rounds: list[set[int]] = []

    def fetch_round(self, now_ms: int, only: set[TopicPartition], desired: Any) -> None:
        self.rounds.append({tp.partition for tp in only})
        for tp in only:
            hw = self.hws[tp.partition]
            leo = self.progress.get(tp, (hw, 0))[1]
            if tp.partition not in self.stuck:
                leo = min(hw, leo + self.step)
            self.progress[tp] = (hw, leo)

    def reconcile_topics(self, *a: Any) -> None: ...
    def step_partitions(self, *a: Any) -> None: ...
    def sync_if_due(self, *a: Any) -> bool:
        return False


def run_job(runner: Runner, tick: float = 10.0, pending: set[int] = frozenset()) -> None:  # type: ignore[assignment]
    store = WorkerStateStore(4)
    store.owned = {0, 1, 2, 3}
    keys = [MirrorPartitionKey("m", TOPIC, p) for p in sorted(runner.hws)]
    store.has_pending = lambda k: k.partition in pending  # type: ignore[method-assign]
    w = SimpleNamespace(store=store, config=SimpleNamespace(state_partitions=4), tick_interval=tick,
                        desired_for=lambda name: {TOPIC: (DesiredState.START, 1)})  # fmt: skip
    CoordinatorWorker._job(w, SimpleNamespace(runner=runner), keys, 0)  # type: ignore[arg-type]


def test_a_partition_behind_is_fetched_again_until_it_reaches_the_hw() -> None:
    r = Runner({0: 10, 1: 3, 2: 0}, step=2)
    run_job(r)
    assert r.rounds == [{0, 1, 2}, {0, 1}, {0}, {0}, {0}]  # 1 reached 3 in two rounds; 2 had nothing
    assert {tp.partition: leo for tp, (_, leo) in r.progress.items()} == {0: 10, 1: 3, 2: 0}


def test_no_second_round_for_a_partition_that_did_not_move_or_has_a_write_pending() -> None:
    r = Runner({0: 10, 1: 10}, step=2, stuck={1})
    r.progress[TopicPartition(TOPIC, 1)] = (10, 4)  # from an earlier tick; its fetches now bring nothing
    run_job(r)
    assert r.rounds[:2] == [{0, 1}, {0}]
    r = Runner({0: 10, 1: 10}, step=2)
    run_job(r, pending={1})
    assert r.rounds[0] == {0} and all(rnd == {0} for rnd in r.rounds)


def test_back_to_back_rounds_stop_after_one_tick() -> None:
    r = Runner({0: 10**9}, step=1)
    run_job(r, tick=0.05)
    assert 1 <= len(r.rounds) < 10**9 and r.progress[TopicPartition(TOPIC, 0)][1] < 10**9


class CountingDest:
    """An in-process destination that takes many calls at once (as the model server's client),
    counting the round trips: one per ``call_many``."""

    def __init__(self, model: Any) -> None:
        self.model, self.round_trips = model, []

    def call_many(self, calls: Any) -> list[Any]:
        from coordinator.ports import PortError

        self.round_trips.append(sorted({method for method, _, _ in calls}))
        out: list[Any] = []
        for method, args, kwargs in calls:
            try:
                out.append(getattr(self.model, method)(*args, **(kwargs or {})))
            except PortError as e:
                out.append(e)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)


def test_a_wave_asks_the_destination_twice_its_position_then_the_append() -> None:
    from clustermodel import ClusterModel
    from coordinator.states import MirrorState
    from coordinator.workflows.config import MirrorConfig
    from streams.runner.runner import MirrorRunner

    a, b = ClusterModel("a", seed=1), ClusterModel("b", seed=2)
    meta = a.add_topic("orders", 3)
    dest = CountingDest(b)
    r = MirrorRunner("m", a, dest, MirrorConfig(metadata_refresh_interval_ms=0, fetch_backoff_ms=0))
    r.set_desired(meta.topic_id, DesiredState.START)
    tps = [TopicPartition(meta.topic_id, p) for p in range(3)]
    now = 0
    while not all(r.state(tp).state is MirrorState.MIRRORING for tp in tps):
        now += 100
        a.tick(100)
        b.tick(100)
        r.tick(now)
        assert now < 60_000
    for p in range(3):
        a.produce("orders", p, [(b"k", b"v")] * 5)
    a.tick(100)
    dest.round_trips.clear()
    r.fetch_round(now + 100, set(tps))
    assert [b.list_offsets(tp).leo for tp in tps] == [a.list_offsets(tp).hw for tp in tps] == [5, 5, 5]
    assert dest.round_trips == [["latest_epoch", "list_offsets"], ["append_mirror_batches"]]
