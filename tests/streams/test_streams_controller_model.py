"""The controller role against a real cluster-model server.

Describe's source HW and destination LEO: looked up in pipelines (one per cluster and chunk,
never one round trip per partition), off the event loop, right per partition, reused only for a
moment, and not looked up at all for commands. Source topic registration: new topics land in
the metadata log, and a source with nothing new is described less and less often."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from model_server import ServerProcess

from clustermodel.client import ClusterClient
from coordinator import admin
from coordinator.delta import Replayer
from coordinator.ports import TopicPartition
from coordinator.states import DesiredState, MirrorState
from records.registry import default_schemas
from streams.admin import controller as controller_module
from streams.state import changelog_view
from streams.state.changelog_view import MirrorStateChangelogView
from streams.state.changelog_view import PartitionStatus
from streams.worker.controller_role import _ModelOffsets, _register_topics

TOPICS, PARTITIONS = 3, 4


@pytest.fixture(scope="module")
def model_port() -> Iterator[int]:
    server = ServerProcess("--cluster", "A", "--cluster", "B", stderr=None)
    try:
        yield server.port
    finally:
        server.stop()


def _stall_followers(client: ClusterClient, md: Any) -> None:
    for p in md.partitions:
        for b in p.replicas:
            if b != p.leader:
                client.set_follower_stalled(b, True)


@pytest.fixture(scope="module")
def topics(model_port: int) -> dict[str, uuid.UUID]:
    """Source topics on A and their destination copies on B, each partition with its own HW and
    LEO (followers stalled, acks=1, so HW < LEO on both clusters)."""
    a, b = ClusterClient(model_port, "A"), ClusterClient(model_port, "B")
    ids: dict[str, uuid.UUID] = {}
    try:
        for i in range(TOPICS):
            name = f"orders-{i}"
            md = a.add_topic(name, PARTITIONS)
            ids[name] = md.topic_id
            dst = b.create_topic(name, md.topic_id, PARTITIONS, None, None, False, "a-to-b", None)
            for p in range(PARTITIONS):
                a.produce(name, p, [(b"k", b"v")] * (1 + i * PARTITIONS + p))  # replicated: the HW
                b.produce(name, p, [(b"k", b"v")] * (1 + p))
            _stall_followers(a, md)
            _stall_followers(b, dst)
            for p in range(PARTITIONS):
                a.produce(name, p, [(b"k", b"v")] * 2, acks=1)  # past the HW: LEO only
                b.produce(name, p, [(b"k", b"v")] * 3, acks=1)
    finally:
        a.close()
        b.close()
    return ids


def _truth(port: int, cluster: str, tid: uuid.UUID, p: int) -> Any:
    with ClusterClient(port, cluster) as c:
        return c.list_offsets(TopicPartition(tid, p))


class _Spy:
    """Counts model-server calls per cluster and the threads they ran on."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.pipelines: list[tuple[str, int]] = []  # (cluster, calls in the pipeline)
        self.single_calls: list[str] = []
        self.threads: set[int] = set()
        spy = self
        pipeline, call = ClusterClient.pipeline, ClusterClient.call

        def counting_pipeline(client: ClusterClient, calls: Any) -> list[Any]:
            # (cluster, calls carried): a batch request carries many calls of one method
            spy.pipelines.append((client.cluster, sum(len(c[1][1]) if c[0] == "batch" else 1 for c in calls)))
            spy.threads.add(threading.get_ident())
            return pipeline(client, calls)

        def counting_call(client: ClusterClient, method: str, *args: Any, **kwargs: Any) -> Any:
            spy.single_calls.append(method)
            spy.threads.add(threading.get_ident())
            return call(client, method, *args, **kwargs)

        monkeypatch.setattr(ClusterClient, "pipeline", counting_pipeline)
        monkeypatch.setattr(ClusterClient, "call", counting_call)


def _controller(mirrors: dict[str, str]) -> Any:
    """What _ModelOffsets reads of the controller: image.mirrors.get(name).source_bootstrap and configs."""
    found = {n: SimpleNamespace(source_bootstrap=b, configs={"bootstrap.servers": b}) for n, b in mirrors.items()}
    return SimpleNamespace(image=SimpleNamespace(mirrors=SimpleNamespace(get=found.get)))


def _view(port: int, states: dict[Any, PartitionStatus], **kwargs: Any) -> MirrorStateChangelogView:
    offsets = _ModelOffsets(_controller({"a-to-b": "model://A", "elsewhere": "127.0.0.1:1"}), port, "B")
    view = MirrorStateChangelogView("127.0.0.1:1", "unused", 1, offsets=offsets, **kwargs)
    view._states = dict(states)  # as if read from __mirror_state (no consumer: nothing to catch up)
    return view


def _states(ids: dict[str, uuid.UUID]) -> dict[Any, PartitionStatus]:
    return {("a-to-b", tid, p): PartitionStatus(MirrorState.MIRRORING) for tid in ids.values() for p in range(PARTITIONS)}


@pytest.mark.parametrize("inline", [True, False], ids=["few-partitions", "many-partitions"])
async def test_describe_offsets_are_batched_off_the_loop_and_right_per_partition(
        model_port: int, topics: dict[str, uuid.UUID], monkeypatch: pytest.MonkeyPatch, inline: bool) -> None:  # fmt: skip
    monkeypatch.setattr(_ModelOffsets, "CHUNK", 5)  # 12 partitions: 3 pipelines per cluster
    if not inline:  # the merge and the staleness scan go to a thread too, as for 50k partitions
        monkeypatch.setattr(changelog_view, "_INLINE", 0)
    missing = uuid.UUID(int=999)  # a topic neither cluster has
    states = _states(topics) | {("a-to-b", missing, 0): PartitionStatus(MirrorState.PREPARING),
                                ("elsewhere", topics["orders-0"], 0): PartitionStatus(MirrorState.MIRRORING)}
    view = _view(model_port, states)
    spy = _Spy(monkeypatch)
    got = await view.statuses()

    assert spy.single_calls == []  # no round trip per partition
    on_a = TOPICS * PARTITIONS + 1  # a-to-b's 13 partitions on A; all 14 on B, in chunks of 5
    assert sorted(spy.pipelines) == [("A", on_a - 10), ("A", 5), ("A", 5), ("B", on_a + 1 - 10), ("B", 5), ("B", 5)]
    assert threading.get_ident() not in spy.threads  # the lookups ran on a worker thread
    for name, tid in topics.items():
        for p in range(PARTITIONS):
            st = got[("a-to-b", tid, p)]
            src, dst = _truth(model_port, "A", tid, p), _truth(model_port, "B", tid, p)
            assert src.hw < src.leo and dst.hw < dst.leo  # HW and LEO differ: the right one is shown
            assert (st.source_hw, st.destination_leo) == (src.hw, dst.leo), (name, p)
            assert st.state is MirrorState.MIRRORING
    assert got[("a-to-b", missing, 0)][3:5] == (-1, -1)  # unknown topic: -1, the rest still answered
    assert got[("a-to-b", missing, 0)].state is MirrorState.PREPARING
    elsewhere = got[("elsewhere", topics["orders-0"], 0)]
    assert elsewhere.source_hw == -1  # its source, a Kafka broker, is not there
    assert elsewhere.destination_leo == _truth(model_port, "B", topics["orders-0"], 0).leo


async def test_describes_look_offsets_up_unless_a_max_age_allows_older(
        model_port: int, topics: dict[str, uuid.UUID], monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    view = _view(model_port, _states(topics))
    spy = _Spy(monkeypatch)
    first = await view.statuses(max_age=3600.0)
    assert view.offsets_lookups == 1 and len(spy.pipelines) == 2  # one pipeline per cluster
    tid = topics["orders-1"]
    with ClusterClient(model_port, "A") as a:
        a.produce("orders-1", 2, [(b"k", b"v")] * 4, acks=1)
        for b in {r for t in a.describe_topics() for p in t.partitions for r in p.replicas}:
            a.set_follower_stalled(b, False)
        a.run_replication()  # the followers catch up: the HW moves
    moved = _truth(model_port, "A", tid, 2)
    assert moved.hw != first[("a-to-b", tid, 2)].source_hw
    second = await view.statuses(max_age=3600.0)  # --max-age allows these: no lookup
    assert second == first and view.offsets_lookups == 1 and len(spy.pipelines) == 2
    third = await view.statuses()  # by default, looked up for the call
    assert view.offsets_lookups == 2 and third[("a-to-b", tid, 2)].source_hw == moved.hw


async def test_states_only_and_one_mirror_only(model_port: int, topics: dict[str, uuid.UUID],
                                               monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    states = _states(topics) | {("other", topics["orders-0"], 1): PartitionStatus(MirrorState.STOPPED)}
    view = _view(model_port, states)
    spy = _Spy(monkeypatch)
    plain = await view.statuses(offsets=False)  # what a command validates against
    assert spy.pipelines == [] and spy.single_calls == [] and view.offsets_lookups == 0
    assert plain == states
    some = await view.statuses(mirrors={"other"})
    assert [n for n, _ in spy.pipelines] == ["B"]  # "other" has no source mirror on record: B only
    assert some[("other", topics["orders-0"], 1)].destination_leo == _truth(model_port, "B", topics["orders-0"], 1).leo
    assert all(st.source_hw == st.destination_leo == -1 for k, st in some.items() if k[0] == "a-to-b")


class _NoStates:
    async def statuses(self, offsets: bool = True, mirrors: Any = None) -> dict[Any, PartitionStatus]:
        return {}


class _Controller:
    """What _register_topics uses of the controller: the image, the command lock, append, and
    the controller's own discovery (no partition has a state yet)."""

    discover = controller_module.ClusterMirrorController.discover
    status = _NoStates()
    schemas = default_schemas()
    active = True  # the active controller (a standby registers nothing)

    def __init__(self, mirror: str, configs: dict[str, str]) -> None:
        self.replayer = Replayer(schemas=default_schemas())
        self.offset = 0
        self._lock = asyncio.Lock()
        self.appended: list[Any] = []
        self.source_cluster_ids: dict[str, str] = {}  # what the sources answered, for --list
        who = admin.Principal("User:admin", "127.0.0.1", frozenset({"User:admin"}))
        self._apply(admin.create_cluster_mirror(self.image, mirror, configs, principal=who, schemas=default_schemas()).records)

    @property
    def image(self) -> Any:
        return self.replayer.publish()[1]

    def _apply(self, records: Any) -> None:
        for r in records:
            self.replayer.replay(r, self.offset, 1)
            self.offset += 1

    async def append(self, records: Any, timeout: float = 30.0) -> None:
        self.appended += records
        self._apply(records)


async def test_register_topics_adds_new_source_topics_and_backs_off_while_nothing_changes(
        model_port: int, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    with ClusterClient(model_port, "A") as c:
        c.add_cluster("C")
    c = ClusterClient(model_port, "C")
    first = c.add_topic("first", 3)
    controller = _Controller("c-to-b", {"bootstrap.servers": "model://C", "metadata.refresh.interval.ms": "400"})
    described: list[float] = []
    call = ClusterClient.call

    def counting_call(client: ClusterClient, method: str, *args: Any, **kwargs: Any) -> Any:
        if method == "describe_topics" and client.cluster == "C":
            described.append(time.monotonic())
        return call(client, method, *args, **kwargs)

    monkeypatch.setattr(ClusterClient, "call", counting_call)

    async def registered(name: str, partitions: int, within: float) -> None:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            t = controller.image.topics.get_by_name(name)
            if t is not None and len(t.partitions) == partitions:
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"{name} with {partitions} partitions not registered within {within}s")

    stop = asyncio.Event()
    task = asyncio.create_task(_register_topics(controller, model_port, stop, tick=0.05))
    try:
        await registered("first", 3, within=5.0)
        assert controller.image.topics.get_by_name("first").topic_id == first.topic_id  # the source's topic ID
        assert controller.source_cluster_ids == {"c-to-b": c.cluster_id()}  # the source said who it is
        quiet_from = len(described)
        await asyncio.sleep(2.0)
        quiet = len(described) - quiet_from
        # Every tick would be 40 describes; backing off (0.05 s doubling up to 0.4 s) about 7.
        assert 2 <= quiet <= 12, quiet
        assert all(b - a >= 0.35 for a, b in zip(described[-3:], described[-2:])), described[-3:]  # at the cap
        count = len(controller.appended)
        c.add_topic("second", 2)
        await registered("second", 2, within=3.0)  # within the refresh interval, plus slack
        assert len(controller.appended) == count + 1 + 2  # a TopicRecord and its PartitionRecords, once
    finally:
        stop.set()
        await asyncio.wait_for(task, 5.0)
        c.close()


async def test_unreachable_source_says_why_in_the_error_column(model_port: int, topics: dict[str, uuid.UUID]) -> None:
    tid = topics["orders-0"]
    failed = PartitionStatus(MirrorState.FAILED, 2, "NETWORK_EXCEPTION: source cluster A unavailable: unreachable")
    states = _states(topics) | {("a-to-b", tid, 1): failed}
    view = _view(model_port, states)
    with ClusterClient(model_port, "A") as a:
        a.set_unreachable(True)
        try:
            got = await view.statuses()
        finally:
            a.set_unreachable(False)
    plain = got[("a-to-b", tid, 0)]
    assert plain.source_hw == -1 and plain.error_message is not None
    assert plain.error_message.startswith("source A: ") and "unreachable" in plain.error_message
    assert plain.destination_leo == _truth(model_port, "B", tid, 0).leo  # B still answers
    assert got[("a-to-b", tid, 1)].error_message == failed.error_message  # the state's own error comes first
    again = await view.statuses()  # A back: no error left over
    assert again[("a-to-b", tid, 0)].error_message is None
    assert again[("a-to-b", tid, 0)].source_hw == _truth(model_port, "A", tid, 0).hw


async def test_register_topics_starts_new_topics_a_pattern_selects_and_never_a_stopped_one(model_port: int) -> None:
    with ClusterClient(model_port, "A") as c:
        c.add_cluster("D")
    c = ClusterClient(model_port, "D")
    c.add_topic("orders", 1)
    controller = _Controller("d-to-b", {"bootstrap.servers": "model://D", "metadata.refresh.interval.ms": "300",
                                        "mirror.topics.include": "pay-.*", "mirror.topics.exclude": "pay-internal"})  # fmt: skip

    def desired(name: str) -> Any:
        t = controller.image.topics.get_by_name(name)
        m = controller.image.mirror_topic(t.topic_id) if t is not None else None
        return None if m is None else m.desired_state

    async def until(what: str, predicate: Any, within: float) -> float:
        started = time.monotonic()
        while not predicate():
            assert time.monotonic() - started < within, what
            await asyncio.sleep(0.02)
        return time.monotonic() - started

    stop = asyncio.Event()
    task = asyncio.create_task(_register_topics(controller, model_port, stop, tick=0.05))
    try:
        await until("orders registered", lambda: controller.image.topics.get_by_name("orders") is not None, 5.0)
        await asyncio.sleep(1.0)  # the describe period backs off to the refresh interval
        c.add_topic("pay-eu", 2)
        c.add_topic("pay-internal", 1)
        took = await until("pay-eu started", lambda: desired("pay-eu") is DesiredState.START, 3.0)
        assert took < 1.0, took  # one refresh interval (0.3 s), plus slack for a loaded machine
        assert desired("orders") is None and desired("pay-internal") is None
        who = admin.Principal("User:admin", "127.0.0.1", frozenset({"User:admin"}))
        await controller.append(admin.stop_mirror_topics(controller.image, "d-to-b", ["pay-eu"], principal=who).records)
        assert desired("pay-eu") is DesiredState.STOP
        count = len(controller.appended)
        await asyncio.sleep(1.0)  # three refresh intervals
        assert desired("pay-eu") is DesiredState.STOP and len(controller.appended) == count  # not rediscovered
    finally:
        stop.set()
        await asyncio.wait_for(task, 5.0)
        c.close()
