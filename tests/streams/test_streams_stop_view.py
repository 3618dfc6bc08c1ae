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
"""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

from coordinator.states import DesiredState
from streams.worker.app import CoordinatorWorker
from streams.worker.state_store import WorkerStateStore
from streams.worker.table import OtherWorkersStates

TOPIC, OTHER = uuid.uuid4(), uuid.uuid4()


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
    topics = {TOPIC: SimpleNamespace(desired_state=DesiredState.STOP if image_stop else DesiredState.START)}
    config = SimpleNamespace(state_partitions=4, mirror_state_topic_name="t.__mirror_state")
    others = OtherWorkersStates(config, store, interval=0.1, timeout=5.0)  # type: ignore[arg-type]
    others.view = view
    return SimpleNamespace(store=store, config=config, event_desired=event_desired, other_workers=others,
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


def job_topics(owned: set[int], remote: dict[Any, Any] | None) -> dict[uuid.UUID, Any]:
    desired = {TOPIC: (DesiredState.STOP, 7), OTHER: (DesiredState.START, 3)}
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
    assert job_topics({0, 1, 2, 3}, None) == {TOPIC: (DesiredState.STOP, 7), OTHER: (DesiredState.START, 3)}


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
