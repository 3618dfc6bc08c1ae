"""Idle costs nothing: caught-up partitions park on the source's long poll and leave the rounds.

A runner with ``long_poll`` on a model-server source parks each partition whose fetch came back
empty at the HW (``streams.runner.data_watch``); the source is not asked about it again until
its fetch session reports it moved, and the worker's rounds (``Interest``) skip it meanwhile.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

from types import SimpleNamespace

import pytest
from model_server import ServerProcess

from clustermodel.client import ClusterClient
from clustermodel.errors import FetchSessionIdNotFound
from coordinator.partition_state import MirrorPartitionKey
from coordinator.ports import SourceUnavailable, TopicPartition
from coordinator.states import DesiredState, MirrorState
from coordinator.workflows.config import MirrorConfig
from streams.runner.data_watch import DataWatch
from streams.runner.runner import MirrorRunner
from streams.worker.app import CoordinatorWorker


@pytest.fixture
def port() -> Iterator[int]:
    server = ServerProcess("--cluster", "A", "--cluster", "B", "--seed", "5", "--no-kafka-listeners")
    yield server.port
    server.stop()


class CountingSource:
    """The source port, counting the fetches asked of it (one by one or batched)."""

    def __init__(self, client: ClusterClient) -> None:
        self.client = client
        self.fetched: list[TopicPartition] = []

    def call_many(self, calls: Any) -> list[Any]:
        self.fetched.extend(args[0] for method, args, _ in calls if method == "fetch")
        return self.client.call_many(calls)

    def fetch(self, tp: TopicPartition, *args: Any, **kwargs: Any) -> Any:
        self.fetched.append(tp)
        return self.client.fetch(tp, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


def _until(what: str, predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_caught_up_partitions_are_not_fetched_until_their_source_moves(port: int) -> None:
    a, b = ClusterClient(port, "A"), ClusterClient(port, "B")
    meta = a.add_topic("orders", 4)
    a.produce("orders", 0, [(b"k", b"v0")])
    src = CountingSource(ClusterClient(port, "A"))
    r = MirrorRunner("m", src, b, MirrorConfig(), long_poll=True)
    try:
        r.set_desired(meta.topic_id, DesiredState.START)
        tps = [TopicPartition(meta.topic_id, p) for p in range(4)]
        keys = [MirrorPartitionKey("m", meta.topic_id, p) for p in range(4)]
        now = 0

        def tick() -> None:
            nonlocal now
            now += 100
            r.interest.wake()
            r.tick(now)

        for _ in range(100):
            tick()
            if len(r.interest.parked) == 4:
                break
        assert all(r.state(tp).state is MirrorState.MIRRORING for tp in tps)
        assert r.interest.parked == set(tps) and b.list_offsets(tps[0]).leo == 1
        # The worker's view: every key seen once, then quiet ones leave the hot set.
        version = object()  # the table partition's key list, unchanged from here on
        assert r.interest.select(0, version, keys, set(keys)) == keys
        r.interest.cool(keys, r.quiet)
        assert r.interest.hot == set() and r.interest.select(0, version, list(keys), set(keys)) == []

        src.fetched.clear()
        for _ in range(10):  # idle: the source is not asked about any of them
            tick()
            time.sleep(0.01)
        assert src.fetched == []

        a.produce("orders", 2, [(b"k", b"v1"), (b"k", b"v2")])
        _until("partition 2 reported moved", lambda: (r.interest.wake(), tps[2] not in r.interest.parked)[1])
        assert r.interest.select(0, version, keys, set(keys)) == [keys[2]]
        assert r.interest.select(0, object(), keys, set(keys)) == keys  # keys added or dropped: all looked at
        tick()
        assert set(src.fetched) == {tps[2]}
        assert b.list_offsets(tps[2]).leo == 2 and b.list_offsets(tps[1]).leo == 0
        # Caught up by what it appended: parked again at once, no empty fetch first.
        assert r.interest.parked == set(tps)
        src.fetched.clear()
        tick()
        assert src.fetched == []

        # The worker's job over the table partition: each step builds a new list of this
        # mirror's keys; once quiet, none of them is stepped or fetched.
        stepped: list[list[MirrorPartitionKey]] = []
        step = r.step_partitions
        r.step_partitions = lambda now_ms, keys, desired=None: (stepped.append(list(keys)), step(now_ms, keys, desired))[1]  # type: ignore[method-assign]
        store = SimpleNamespace(remote=None, owned={0}, pending_keys=lambda p: set(), has_pending=lambda k: False)
        table = SimpleNamespace(keys_of=lambda p: keys, key_set=lambda p: set(keys))
        w = SimpleNamespace(store=store, config=SimpleNamespace(state_partitions=1), tick_interval=10.0,
                            desired_for=r.metadata.latest, table_partitions=table)  # fmt: skip
        src.fetched.clear()
        for _ in range(3):
            now += 100
            CoordinatorWorker._job(w, SimpleNamespace(runner=r), list(keys), now, 0)  # type: ignore[arg-type]
        assert stepped[-1] == [] and src.fetched == []
    finally:
        r.close()
        a.close()
        b.close()


class FakeWatchClient:
    """A source whose fetch session answers by rule: ``lose`` drops the session the first time a
    request adds that partition; a full request (session 0) naming ``report`` reports it moved."""

    def __init__(self, lose: TopicPartition | None = None, report: TopicPartition | None = None,
                 fail: BaseException | None = None) -> None:  # fmt: skip
        self.lose, self.report, self.fail = lose, report, fail
        self.requests: list[tuple[int, list[Any], list[Any]]] = []

    def fetch_wait(self, session: int, add: list[Any], remove: list[Any], max_wait_ms: int) -> Any:
        self.requests.append((session, sorted(add), sorted(remove)))
        time.sleep(0.005)
        if self.fail is not None:
            raise self.fail
        if session and any(tp == self.lose for tp, _, _ in add):
            self.lose = None
            raise FetchSessionIdNotFound(f"fetch session {session} not found")
        if session == 0 and any(tp == self.report for tp, _, _ in add):
            return 8, [self.report]
        return session or 7, []

    def close(self) -> None: ...


def test_the_watch_sends_only_changes_and_starts_over_when_the_session_is_lost() -> None:
    t = uuid.uuid4()
    tp0, tp1 = TopicPartition(t, 0), TopicPartition(t, 1)
    client = FakeWatchClient(lose=tp1, report=tp1)
    watch = DataWatch(lambda: client, max_wait_ms=10)
    try:
        watch.park(tp0, 5, 1)
        _until("the first request", lambda: len(client.requests) >= 1)
        watch.park(tp1, 3, 1)
        moved: set[TopicPartition] = set()
        _until("tp1 reported", lambda: bool(moved.update(watch.take_moved()) or moved))
        assert moved == {tp1}
        reqs = client.requests
        assert reqs[0] == (0, [(tp0, 5, 1)], [])  # a full request starts the session
        lost = next(i for i, r in enumerate(reqs) if i and r[1])  # the next one adding something
        assert lost > 0 and reqs[lost] == (7, [(tp1, 3, 1)], [])  # only what changed
        assert all(r == (7, [], []) for r in reqs[1:lost])  # nothing changed: nothing named
        assert reqs[lost + 1] == (0, [(tp0, 5, 1), (tp1, 3, 1)], [])  # session lost: everything again
    finally:
        watch.close()


def test_a_broken_watch_reports_every_partition_moved() -> None:
    tp = TopicPartition(uuid.uuid4(), 0)
    client = FakeWatchClient(fail=SourceUnavailable("A", "model server closed the connection"))
    watch = DataWatch(lambda: client, max_wait_ms=10)
    try:
        watch.park(tp, 5, 1)
        moved: set[TopicPartition] = set()
        _until("the partition reported", lambda: bool(moved.update(watch.take_moved()) or moved))
        assert moved == {tp}  # the runner fetches it: its own error handling takes over
    finally:
        watch.close()


def test_a_moved_partition_is_reported_as_the_object_that_was_parked() -> None:
    # The source's answer decodes new objects with new UUIDs: reported as they are, every set and
    # dict lookup of the copy path hashed and compared the UUIDs in Python.
    tp = TopicPartition(uuid.uuid4(), 0)
    decoded = TopicPartition(uuid.UUID(int=tp.topic_id.int), 0)
    watch = DataWatch(lambda: FakeWatchClient(report=decoded), max_wait_ms=10)
    try:
        watch.park(tp, 5, 1)
        moved: set[TopicPartition] = set()
        _until("the partition reported", lambda: bool(moved.update(watch.take_moved()) or moved))
        assert moved == {tp} and next(iter(moved)) is tp
    finally:
        watch.close()


class MovingSource:
    """A fetch session that answers at once with the watched partitions in ``moving`` (set by the
    test), else after a short wait with none."""

    def __init__(self) -> None:
        self.moving: set[TopicPartition] = set()
        self.watched: set[TopicPartition] = set()

    def fetch_wait(self, session: int, add: list[Any], remove: list[Any], max_wait_ms: int) -> Any:
        self.watched.update(tp for tp, _, _ in add)
        deadline = time.monotonic() + max_wait_ms / 1000
        while not (got := self.watched & self.moving) and time.monotonic() < deadline:
            time.sleep(0.002)
        self.watched -= got
        return 7, sorted(got, key=lambda tp: tp.partition)

    def close(self) -> None: ...


def test_partitions_moving_within_the_linger_after_a_report_come_as_one_report() -> None:
    # As a producer's linger.ms (``mirror.copy.linger.ms``): one report, one copy job, one wake-up
    # of the worker's loop, not one long poll and report per moved partition.
    t = uuid.uuid4()
    tps = [TopicPartition(t, p) for p in range(4)]
    source = MovingSource()
    watch = DataWatch(lambda: source, max_wait_ms=20)
    watch.linger_s = 0.3
    reports: list[set[TopicPartition]] = []
    watch.on_moved = reports.append
    try:
        for tp in tps:
            watch.park(tp, 5, 1)
        _until("every partition watched", lambda: source.watched == set(tps))
        source.moving.add(tps[0])
        _until("the first report", lambda: len(reports) == 1)
        for tp in tps[1:]:  # within the linger, one after another
            source.moving.add(tp)
            time.sleep(0.02)
        _until("the rest reported", lambda: sum(map(len, reports)) == 4)
        assert reports == [{tps[0]}, set(tps[1:])]
    finally:
        watch.close()
