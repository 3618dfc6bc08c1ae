"""A stopping topic turns writable only on a view of every partition, wherever its state lives.

The worker that holds some of the table partitions learns the others' states from the
``__mirror_state`` changelog (``_read_other_workers_states``, ``streams.worker.table.OtherWorkersStates``). Until it has read them, those
partitions read as UNKNOWN, which a stop counts as stopped. The rebalance scenario once saw a
topic writable while a partition held by a paused worker still mirrored: the STOP had reached
the worker as a desired-state event (fanned out by another worker) before its own metadata image
showed it, so it never read the view, and its topic level ran on no view at all.

These tests drive the two worker methods on stand-ins for what they touch (no broker): the view
is read as soon as a STOP is known from either source, and the topic level of a stopping topic
waits while there is no view.

A stopping topic is one worker's at the topic level: the owner of the table partition of its
partition 0 (``leads_topic``). With two workers each made every topic writable, walking all its
partitions and reading the other's states for topics the other made writable too.
"""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

from coordinator.states import DesiredState, MirrorState
from coordinator.partition_state import UNKNOWN_STATE, MirrorPartitionKey
from streams.worker.app import CoordinatorWorker
from streams.worker.mirror_jobs import ask_for_the_view
from streams.worker.state_store import WorkerStateStore
from streams.worker.table import OtherWorkersStates


def topic_led_from(table_partitions: set[int]) -> uuid.UUID:
    """A topic ID whose partition 0 of mirror ``m`` lives in one of ``table_partitions`` (of 4)."""
    store = WorkerStateStore(4)
    return next(t for i in range(1, 1000) if store.partition_of(MirrorPartitionKey("m", t := uuid.UUID(int=i), 0))
                in table_partitions)  # fmt: skip


TOPIC, OTHER, ELSEWHERE = topic_led_from({0, 1}), topic_led_from({0, 1}), topic_led_from({2, 3})


class View:
    def __init__(self, states: dict[Any, Any] | Exception) -> None:
        self.states, self.reads = states, 0

    async def catch_up(self) -> dict[Any, Any]:
        self.reads += 1
        if isinstance(self.states, Exception):
            raise self.states
        return self.states


def worker(owned: set[int], event_desired: dict[Any, Any], image_stop: bool, view: View) -> Any:
    store = WorkerStateStore(4)
    store.owned = set(owned)
    topics = {TOPIC: SimpleNamespace(mirror_name="m", topic_id=TOPIC, last_change_offset=7,
                                     desired_state=DesiredState.STOP if image_stop else DesiredState.START)}
    config = SimpleNamespace(state_partitions=4, mirror_state_topic_name="t.__mirror_state")
    others = OtherWorkersStates(config, store, interval=0.1, timeout=5.0)  # type: ignore[arg-type]
    others.view = view
    return SimpleNamespace(store=store, config=config, event_desired=event_desired, other_workers=others, mirrors={},
                           image=SimpleNamespace(mirrors=SimpleNamespace(topics=topics)))  # fmt: skip


def read(w: Any) -> None:
    asyncio.run(CoordinatorWorker._read_other_workers_states(w))


def test_a_stop_known_only_from_an_event_reads_the_other_workers_states() -> None:
    status = SimpleNamespace(state="MIRRORING")
    view = View({("m", TOPIC, 0): status})
    w = worker({0, 1}, {("m", TOPIC): (DesiredState.STOP, 42)}, image_stop=False, view=view)
    read(w)
    assert view.reads == 1 and w.store.remote == {("m", TOPIC, 0): status}


def test_no_stop_anywhere_drops_the_view_and_a_failed_read_leaves_none() -> None:
    view = View({("m", TOPIC, 0): SimpleNamespace(state="STOPPED")})
    w = worker({0, 1}, {}, image_stop=False, view=view)
    w.store.remote = {("m", TOPIC, 0): SimpleNamespace(state="STOPPED")}  # from an earlier stop
    read(w)
    assert view.reads == 0 and w.store.remote is None
    w = worker({0, 1}, {}, image_stop=True, view=View(TimeoutError("changelog")))
    w.store.remote = {("m", TOPIC, 0): SimpleNamespace(state="STOPPED")}
    read(w)
    assert w.other_workers.view.reads == 1 and w.store.remote is None
    w = worker({0, 1, 2, 3}, {}, image_stop=True, view=view)  # owns every table partition: no view needed
    read(w)
    assert view.reads == 0 and w.store.remote == {}


def test_the_step_that_lands_the_last_stopped_asks_for_a_tick() -> None:
    """The step whose writes make this worker's own partitions of a topic it leads STOPPED
    asks for a tick, so the next step reads the others' states and the topic level runs: no
    other tick would come before the idle one (seconds later)."""
    w = worker({0, 1}, {}, image_stop=True, view=View({}))
    w.ticks = SimpleNamespace(asked=set())
    w.ticks.ask = w.ticks.asked.add
    key = next(MirrorPartitionKey("m", TOPIC, p) for p in range(40)
               if w.store.partition_of(MirrorPartitionKey("m", TOPIC, p)) in {0, 1})  # fmt: skip
    w.store.durable[key] = UNKNOWN_STATE.with_(state=MirrorState.STOPPING)
    ask_for_the_view(w, 1)
    assert w.ticks.asked == set()
    w.store.durable[key] = UNKNOWN_STATE.with_(state=MirrorState.STOPPED)
    w.store.remote = {}  # read already: the topic level has what it needs
    ask_for_the_view(w, 1)
    assert w.ticks.asked == set()
    w.store.remote = None
    ask_for_the_view(w, 1)
    assert w.ticks.asked == {1}


def job_topics(owned: set[int], remote: dict[Any, Any] | None) -> dict[uuid.UUID, Any]:
    desired = {TOPIC: (DesiredState.STOP, 7), OTHER: (DesiredState.START, 3), ELSEWHERE: (DesiredState.STOP, 7)}
    seen: dict[uuid.UUID, Any] = {}
    runner = SimpleNamespace(mirror_name="m", progress={}, reconcile_topics=lambda now, d: seen.update(d),
                             step_partitions=lambda *a: None, fetch_round=lambda *a: None,
                             sync_if_due=lambda *a: False, note=lambda msg: None)  # fmt: skip
    w = worker(owned, {}, image_stop=True, view=View({}))
    w.store.remote = remote
    w.desired_for = lambda name: dict(desired)
    CoordinatorWorker._job(w, SimpleNamespace(runner=runner), [], 0)
    return seen


def test_a_stopping_topic_waits_at_the_topic_level_until_the_view_is_read() -> None:
    assert job_topics({0, 1}, None) == {OTHER: (DesiredState.START, 3)}
    assert job_topics({0, 1}, {}) == {TOPIC: (DesiredState.STOP, 7), OTHER: (DesiredState.START, 3)}
    assert job_topics({0, 1, 2, 3}, None) == {TOPIC: (DesiredState.STOP, 7), OTHER: (DesiredState.START, 3),
                                              ELSEWHERE: (DesiredState.STOP, 7)}  # fmt: skip


def test_a_stopping_topic_is_one_workers_at_the_topic_level() -> None:
    """Of two workers, each takes the stopping topics whose partition 0 it holds; a topic being
    started stays with both (each creates and attaches what its partitions need)."""
    assert job_topics({0, 1}, {}) == {TOPIC: (DesiredState.STOP, 7), OTHER: (DesiredState.START, 3)}
    assert job_topics({2, 3}, {}) == {OTHER: (DesiredState.START, 3), ELSEWHERE: (DesiredState.STOP, 7)}


def test_a_worker_that_leads_no_stopping_topic_reads_no_view() -> None:
    """The other workers' states are read for the topic level of a stopping topic: a worker
    that leads none of them reads none (with two workers, half the stops' reads of the changelog)."""
    view = View({("m", TOPIC, 0): SimpleNamespace(state="MIRRORING")})
    w = worker({2, 3}, {}, image_stop=True, view=view)  # TOPIC stops; the owner of 0 and 1 leads it
    read(w)
    assert view.reads == 0 and w.store.remote is None
    w = worker({2, 3}, {("m", ELSEWHERE): (DesiredState.STOP, 9)}, image_stop=True, view=view)  # one it leads
    read(w)
    assert view.reads == 1 and w.store.remote == view.states


def test_the_others_states_are_read_once_the_topics_own_partitions_are_stopped() -> None:
    """Until this worker's own partitions of the stopping topics it leads are STOPPED durably,
    the topic level has nothing to decide: the changelog is not read (before, every step read
    the other worker's writes as they came). Nor once the topic level has settled the topic."""
    view = View({("m", TOPIC, 1): SimpleNamespace(state="STOPPED")})
    w = worker({0, 1}, {}, image_stop=True, view=view)
    mine = [MirrorPartitionKey("m", TOPIC, p) for p in range(40) if w.store.partition_of(MirrorPartitionKey("m", TOPIC, p)) in {0, 1}]
    assert len(mine) > 1
    for i, key in enumerate(mine):
        w.store.durable[key] = UNKNOWN_STATE.with_(state=MirrorState.STOPPING if i == 0 else MirrorState.STOPPED)
    read(w)
    assert view.reads == 0 and w.store.remote is None
    w.store.pending[w.store.partition_of(mine[0])][mine[0]] = UNKNOWN_STATE.with_(state=MirrorState.STOPPED)
    read(w)
    assert view.reads == 0, "a STOPPED not durable yet counts for nothing"
    w.store.durable[mine[0]] = UNKNOWN_STATE.with_(state=MirrorState.STOPPED)
    read(w)
    assert view.reads == 1 and w.store.remote == view.states
    w.mirrors["m"] = SimpleNamespace(runner=SimpleNamespace(topic_level=SimpleNamespace(settled={TOPIC: 7})))
    read(w)
    assert view.reads == 1 and w.store.remote is None  # settled at this stop: nothing more to read


def test_the_view_follows_only_the_table_partitions_other_workers_own(monkeypatch: Any) -> None:
    """Its own partitions' states a worker has already: with two workers, following every
    partition read each one's own writes back (3 records per stopped partition)."""
    from streams.state import changelog_view

    built: list[Any] = []

    class FollowingView:
        def __init__(self, bootstrap: str, topic: str, n: int, offsets: Any = None, partitions: Any = None) -> None:
            self.partitions, self.stopped = sorted(partitions if partitions is not None else range(n)), False
            built.append(self)

        async def start(self) -> None: ...

        async def stop(self) -> None:
            self.stopped = True

        async def catch_up(self) -> dict[Any, Any]:
            return {}

    monkeypatch.setattr(changelog_view, "MirrorStateChangelogView", FollowingView)
    store = WorkerStateStore(4)
    store.owned = {0, 1}
    config = SimpleNamespace(state_partitions=4, mirror_state_topic_name="t.__mirror_state", bootstrap_servers="x")
    others = OtherWorkersStates(config, store, interval=0.0, timeout=5.0)  # type: ignore[arg-type]
    for _ in range(2):  # the same assignment: the same view
        asyncio.run(others.refresh(lambda: True))
    assert [v.partitions for v in built] == [[2, 3]] and store.remote == {}
    store.owned = {0}  # a rebalance took partition 1 away: follow it too
    asyncio.run(others.refresh(lambda: True))
    assert [v.partitions for v in built] == [[2, 3], [1, 2, 3]] and built[0].stopped and store.remote == {}
