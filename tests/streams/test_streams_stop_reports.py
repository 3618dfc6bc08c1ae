"""Stop reports: a worker learns that the table partitions other workers own have every partition
of a stopping topic STOPPED from one record each (``streams.state.stop_reports``), not by reading
every state they wrote to ``__mirror_state``.

The reporter and the reader run on stand-ins for the store and image; the topic's records go
through a real broker.
"""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from coordinator.partition_state import UNKNOWN_STATE, MirrorPartitionKey
from coordinator.states import DesiredState, MirrorState
from streams.config import WorkerConfig, ensure_topics
from streams.state.stop_reports import StopReport, StopReportsView, stop_report, stop_reports_topic_spec
from streams.worker.state_store import WorkerStateStore
from streams.worker.stop_reports import ReportedStops, StopReporter
from streams.worker.table import REPORT_WAIT_S, OtherWorkersStates

TOPIC, OTHER = uuid.UUID(int=1), uuid.UUID(int=2)


def image(offset: int, stops: dict[uuid.UUID, int], started: tuple[uuid.UUID, ...] = ()) -> Any:
    topics = {t: SimpleNamespace(mirror_name="m", topic_id=t, desired_state=DesiredState.STOP, last_change_offset=o)
              for t, o in stops.items()}  # fmt: skip
    topics.update({t: SimpleNamespace(mirror_name="m", topic_id=t, desired_state=DesiredState.START, last_change_offset=1)
                   for t in started})  # fmt: skip
    return SimpleNamespace(offset=offset, mirrors=SimpleNamespace(topics=topics, mirrors={"m": None}))


def keys_in(store: WorkerStateStore, topic: uuid.UUID, parts: set[int], n: int = 64) -> list[MirrorPartitionKey]:
    return [k for p in range(n) if store.partition_of(k := MirrorPartitionKey("m", topic, p)) in parts]


class Producer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes]] = []

    async def send(self, topic: str, key: bytes, value: bytes) -> Any:
        self.sent.append((topic, key, value))
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


def reporter(owned: set[int]) -> tuple[StopReporter, WorkerStateStore, Producer]:
    store = WorkerStateStore(4)
    store.owned = set(owned)
    producer = Producer()

    async def get_producer() -> Producer:
        return producer

    config = SimpleNamespace(state_partitions=4, stop_reports_topic_name="t.__mirror_stop_reports")
    return StopReporter(config, store, "w-1", get_producer, lambda: 1000), store, producer


def land(store: WorkerStateStore, keys: list[MirrorPartitionKey], state: MirrorState) -> None:
    for k in keys:
        store.durable[k] = UNKNOWN_STATE.with_(state=state)


def test_a_report_goes_out_once_every_partition_of_the_stopping_topics_here_is_durably_stopped() -> None:
    r, store, producer = reporter({0, 1})
    mine, started = keys_in(store, TOPIC, {0, 1}), keys_in(store, OTHER, {0, 1})
    land(store, mine, MirrorState.STOPPING)
    land(store, started, MirrorState.MIRRORING)  # not stopping: no say in the report
    img = image(50, {TOPIC: 40}, started=(OTHER,))
    asyncio.run(r.report(img))
    assert producer.sent == []
    land(store, mine[:-1], MirrorState.STOPPED)
    store.pending[store.partition_of(mine[-1])][mine[-1]] = UNKNOWN_STATE.with_(state=MirrorState.STOPPED)
    asyncio.run(r.report(img))
    assert producer.sent == [], "a STOPPED not yet acknowledged counts for nothing"
    land(store, mine[-1:], MirrorState.FAILED)
    asyncio.run(r.report(img))
    assert producer.sent == [], "a FAILED partition is not stopped"
    land(store, mine[-1:], MirrorState.STOPPED)
    asyncio.run(r.report(img))
    assert sorted(StopReportsView.decode(k, v)[:2] for _, k, v in producer.sent) == [
        (("m", 0), StopReport(50, "w-1", 1000)), (("m", 1), StopReport(50, "w-1", 1000))]
    asyncio.run(r.report(image(60, {TOPIC: 40}, started=(OTHER,))))
    assert len(producer.sent) == 2, "the same stop is reported once"
    asyncio.run(r.report(image(70, {TOPIC: 40, OTHER: 65})))
    assert len(producer.sent) == 2, "a later stop not done here yet"
    land(store, started, MirrorState.UNKNOWN)  # never started: a stop counts it as done
    asyncio.run(r.report(image(70, {TOPIC: 40, OTHER: 65})))
    assert [StopReportsView.decode(k, v)[1].through for _, k, v in producer.sent[2:]] == [70, 70]
    store.owned.add(2)  # a table partition gained: reported on its own
    asyncio.run(r.report(image(70, {TOPIC: 40, OTHER: 65})))
    assert [StopReportsView.decode(k, v)[0] for _, k, v in producer.sent[4:]] == [("m", 2)]


def reported(reports: dict[tuple[str, int], int], image_offset: int, desired: dict[uuid.UUID, Any]) -> ReportedStops:
    store = WorkerStateStore(4)
    return ReportedStops({k: StopReport(v, "w-2", 0) for k, v in reports.items()}, image_offset,
                         lambda name: desired if name == "m" else {}, store.partition_of)  # fmt: skip


def test_a_report_covers_a_stop_at_or_before_its_offset_and_only_once_this_worker_has_seen_that_far() -> None:
    store = WorkerStateStore(4)
    key = keys_in(store, TOPIC, {2})[0]
    stop = {TOPIC: (DesiredState.STOP, 40), OTHER: (DesiredState.START, 41)}
    k = (key.mirror_name, key.topic_id, key.partition)
    assert reported({("m", 2): 50}, 60, stop).get(k).state is MirrorState.STOPPED
    assert reported({("m", 2): 50}, 60, {TOPIC: (DesiredState.STOP, 55)}).get(k).state is MirrorState.STOPPING, \
        "a report older than the stop"
    assert reported({("m", 2): 50}, 45, stop).get(k).state is MirrorState.STOPPING, \
        "a report past this worker's image: the owner may have seen the topic restarted"
    assert reported({("m", 3): 50}, 60, stop).get(k).state is MirrorState.STOPPING, "another table partition's report"
    assert reported({}, 60, stop).get(k).state is MirrorState.STOPPING
    assert reported({("m", 2): 50}, 60, stop).get(("m", OTHER, 0)) is None, "a topic not stopping: as with no view"
    empty = reported({}, 60, stop)
    assert bool(empty) and len(empty) == 0, "no report yet is a view, not the absence of one"


def test_an_uncovered_partition_of_another_worker_is_not_done_for_the_topic_level() -> None:
    """Through the store as the topic level reads it: with no view, another worker's partition is
    UNKNOWN (done, for a stop); a view of reports that do not cover it says STOPPING."""
    store = WorkerStateStore(4)
    store.owned = {0, 1}
    key = keys_in(store, TOPIC, {2})[0]
    stop = {TOPIC: (DesiredState.STOP, 40)}
    store.remote = ReportedStops({}, 60, lambda name: stop, store.partition_of)
    assert store.durable_get(key).state is MirrorState.STOPPING
    store.remote = ReportedStops({("m", 2): StopReport(40, "w-2", 0)}, 60, lambda name: stop, store.partition_of)
    assert store.durable_get(key).state is MirrorState.STOPPED


class View:
    def __init__(self) -> None:
        self.reads = 0

    async def catch_up(self) -> dict[Any, Any]:
        self.reads += 1
        return {}


class Reports:
    def __init__(self, reports: dict[tuple[str, int], StopReport]) -> None:
        self.got = reports

    async def reports(self) -> dict[tuple[str, int], StopReport]:
        return self.got


def test_the_reports_spare_reading_the_changelog_until_they_are_overdue(monkeypatch: Any) -> None:
    store = WorkerStateStore(4)
    store.owned = {0, 1}
    stop = {TOPIC: (DesiredState.STOP, 40)}
    config = SimpleNamespace(state_partitions=4, mirror_state_topic_name="t.__mirror_state",
                             stop_reports_topic_name="t.__mirror_stop_reports", bootstrap_servers="x")  # fmt: skip
    others = OtherWorkersStates(config, store, interval=0.0, timeout=5.0, image=lambda: image(60, {TOPIC: 40}),  # type: ignore[arg-type]
                                desired=lambda name: stop)  # fmt: skip
    others.view, others.reports = View(), Reports({("m", 2): StopReport(50, "w-2", 0)})
    clock = [100.0]
    monkeypatch.setattr("streams.worker.table.time.monotonic", lambda: clock[0])
    asyncio.run(others.refresh(lambda: True))
    assert others.view.reads == 0 and isinstance(store.remote, ReportedStops), "waiting for table partition 3's report"
    first = store.remote
    clock[0] += 1
    asyncio.run(others.refresh(lambda: True))
    assert store.remote is first, "nothing moved: the same view (the store's version stays)"
    clock[0] += REPORT_WAIT_S
    asyncio.run(others.refresh(lambda: True))
    assert others.view.reads == 1 and store.remote == {}, "overdue: the changelog's states"
    others.reports.got[("m", 3)] = StopReport(45, "w-2", 0)
    clock[0] += 1
    asyncio.run(others.refresh(lambda: True))
    assert others.view.reads == 1 and isinstance(store.remote, ReportedStops), "covered: no changelog read"
    asyncio.run(others.refresh(lambda: False))
    assert store.remote is None
    clock[0] += 1
    asyncio.run(others.refresh(lambda: True))
    assert others.view.reads == 1, "a new stop waits for the reports again"


@pytest.mark.brokers("noida-db", "apache-kafka")
def test_the_reports_round_trip_through_the_compacted_topic(kafka_broker: Any) -> None:
    config = WorkerConfig(bootstrap_servers=kafka_broker.bootstrap, cluster_name=f"r{uuid.uuid4().hex[:6]}",
                          state_partitions=4)  # fmt: skip

    async def scenario() -> dict[tuple[str, int], StopReport]:
        await ensure_topics(config.bootstrap_servers, [stop_reports_topic_spec(config)])
        producer = AIOKafkaProducer(bootstrap_servers=config.bootstrap_servers, acks="all")
        await producer.start()
        view = StopReportsView(config.bootstrap_servers, config.stop_reports_topic_name, 4)
        try:
            topic = config.stop_reports_topic_name
            for key, value in (stop_report("m", 0, 10, 4, "w-1", 5), stop_report("m", 1, 10, 4, "w-1", 5),
                               stop_report("m", 0, 20, 4, "w-2", 6), stop_report("n", 2, 30, 8, "w-3", 7)):
                await producer.send_and_wait(topic, key=key, value=value)
            assert await view.reports() == {("m", 0): StopReport(20, "w-2", 6), ("m", 1): StopReport(10, "w-1", 5)}
            await producer.send_and_wait(topic, key=stop_report("m", 1, 0, 4, "", 0)[0], value=None)
            await producer.send_and_wait(topic, key=b"not json", value=b"{}")
            return dict(await view.reports())
        finally:
            await view.stop()
            await producer.stop()

    assert asyncio.run(scenario()) == {("m", 0): StopReport(20, "w-2", 6)}
