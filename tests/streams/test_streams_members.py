"""The controller's removal of dead workers from their group (``streams.admin.members``): the rule
on a clock of the test's, then the removal itself against real static members on each broker;
and the workers' presence it relies on (``streams.worker.presence``)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import NewTopic
from aiokafka.errors import GroupCoordinatorNotAvailableError

from streams.admin.members import DeadMemberRemover, Member, silent_members
from streams.config import WorkerConfig, ensure_topics
from streams.state.sync_status import SyncStatusView, presence_report, publish, sync_status_topic_spec
from streams.worker.presence import PresencePublisher
from worker_harness import group_members

pytestmark = pytest.mark.brokers("noida-db", "apache-kafka")

DEAD, LIVE, NEW, DYNAMIC = Member("m1", "w-dead", "c"), Member("m2", "w-live", "c"), Member("m3", "w-new", "c"), Member("m4", "", "c")


def test_a_member_is_silent_only_after_its_own_session_timeout_without_any_sign_of_life() -> None:
    members = [DEAD, LIVE, NEW, DYNAMIC]
    joined = {(m.instance_id, m.member_id): 0.0 for m in members} | {("w-new", "m3"): 8.0}
    seen = {"w-dead": 1.0, "w-live": 9.0}
    sessions = {"w-dead": 6000, "w-live": 6000}

    def silent(now: float, watching_since: float = 0.0, session: dict[str, int] = sessions) -> list[Member]:
        return silent_members(members, now, watching_since, joined, seen, session, 10_000)

    assert silent(7.0) == []  # w-dead's last publication was 6 s ago: not yet more than its session
    assert silent(7.1) == [DEAD]
    assert silent(7.1, watching_since=2.0) == []  # a controller that started since waits a whole session
    assert silent(14.9) == [DEAD]  # w-live published at 9; w-new joined at 8 and counts by the default 10 s
    assert silent(15.1) == [DEAD, LIVE]
    assert silent(18.1) == [DEAD, LIVE, NEW]  # a member that never published: the controller's own timeout
    assert silent(50.0, session={"w-dead": 60_000}) == [LIVE, NEW]  # its own, longer, session
    assert DYNAMIC not in silent(1e9)  # no instance id: the broker expires it itself


async def _joined(bootstrap: str, topic: str, group: str, instance: str) -> AIOKafkaConsumer:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, group_instance_id=instance,
                                enable_auto_commit=False, session_timeout_ms=30000, heartbeat_interval_ms=500)  # fmt: skip
    await consumer.start()
    deadline = time.monotonic() + 30
    while not consumer.assignment():
        assert time.monotonic() < deadline, "no assignment within 30 s"
        await asyncio.sleep(0.1)
    return consumer


def test_the_controller_removes_the_silent_member_and_never_the_live_one(kafka_broker: Any) -> None:
    """Two static members; one stops without leaving (as a SIGKILLed worker), the other stays and
    publishes its presence. Past the session timeout only the silent one is removed; a member id
    its instance has rejoined since is refused by the broker, not removed."""
    bootstrap = kafka_broker.bootstrap
    config = WorkerConfig(bootstrap_servers=bootstrap, cluster_name=f"r{uuid.uuid4().hex[:6]}", session_timeout_ms=6000)
    group, topic = config.faust_app_id, f"{config.cluster_name}.in"
    now = [0.0]

    async def scenario() -> tuple[Any, ...]:
        await ensure_topics(bootstrap, [NewTopic(topic, 2, 1), sync_status_topic_spec(config)])
        view = SyncStatusView(bootstrap, config.sync_status_topic_name, clock=lambda: now[0])
        await view.start()
        remover = DeadMemberRemover(config, view, clock=lambda: now[0])
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        consumers: list[AIOKafkaConsumer] = []
        try:
            first = await _joined(bootstrap, topic, group, "w-live")
            old_live = first._coordinator.member_id
            await first.stop()  # a static member's close does not leave: its next start replaces it
            live = await _joined(bootstrap, topic, group, "w-live")
            consumers.append(live)
            dead = await _joined(bootstrap, topic, group, "w-dead")
            consumers.append(dead)
            dead_id, live_id = dead._coordinator.member_id, live._coordinator.member_id
            await dead.stop()  # no LeaveGroup: a dead member, until a broker expires it
            consumers.remove(dead)
            await publish(producer, config.sync_status_topic_name, [presence_report("w-live", 0, 6000)])
            early = await remover.check()
            now[0] = 5.0
            await publish(producer, config.sync_status_topic_name, [presence_report("w-live", 5000, 6000)])
            before = await remover.check()
            now[0] = 7.0
            await publish(producer, config.sync_status_topic_name, [presence_report("w-live", 7000, 6000)])
            removed = await remover.check()
            fenced = await remover.leave(Member(old_live, "w-live", ""))  # an instance that rejoined since
            members = [m for m, _, _ in await group_members(bootstrap, group)]
            return early, before, removed, fenced, members, dead_id, live_id
        finally:
            for c in consumers:
                await c.stop()
            await producer.stop()
            await view.stop()
            await remover._close()

    early, before, removed, fenced, members, dead_id, live_id = asyncio.run(scenario())
    assert early == [] and before == []
    assert [(m.member_id, m.instance_id) for m in removed] == [(dead_id, "w-dead")]
    assert fenced is False
    assert members == [live_id]


def test_a_worker_publishes_its_presence_every_second_whatever_its_event_loop_does_and_a_tombstone_at_its_stop(
        kafka_broker: Any) -> None:  # fmt: skip
    bootstrap = kafka_broker.bootstrap
    config = WorkerConfig(bootstrap_servers=bootstrap, cluster_name=f"p{uuid.uuid4().hex[:6]}", session_timeout_ms=6000)
    asyncio.run(ensure_topics(bootstrap, [sync_status_topic_spec(config)]))
    presence = PresencePublisher(config, "w-1").start()
    first = time.monotonic()
    while presence.sent == 0:
        assert time.monotonic() - first < 30, "no presence published within 30 s"
        time.sleep(0.05)
    sent_before = presence.sent
    time.sleep(3.5)  # this thread, and any event loop it would run, blocked
    during = presence.sent - sent_before
    presence.stop()

    async def read() -> list[tuple[Any, Any]]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
        await consumer.start()
        try:
            tp = TopicPartition(config.sync_status_topic_name, 0)
            consumer.assign([tp])
            end = (await consumer.end_offsets([tp]))[tp]
            out = []
            while await consumer.position(tp) < end:
                for msgs in (await consumer.getmany(tp, timeout_ms=1000)).values():
                    out += [(json.loads(m.key), m.value and json.loads(m.value)) for m in msgs]
            return out
        finally:
            await consumer.stop()

    records = asyncio.run(read())
    assert 3 <= during <= 5, during  # one a second
    assert all(key == ["", "w-1"] for key, _ in records)
    assert [v["session_timeout_ms"] for _, v in records[:-1]] == [6000] * (len(records) - 1)
    assert len(records) - 1 == presence.sent and records[-1][1] is None  # the tombstone last


def _count_requests(client: Any, counts: dict[int, int]) -> None:
    """Counts ``client``'s requests by API key from now on (aiokafka's ``AIOKafkaClient.send``)."""
    original = client.send

    async def counting(node_id: Any, request: Any, *a: Any, **k: Any) -> Any:
        counts[request.API_KEY] = counts.get(request.API_KEY, 0) + 1
        return await original(node_id, request, *a, **k)

    client.send = counting


FETCH, FIND_COORDINATOR, DESCRIBE_GROUPS = 1, 10, 15


def test_an_idle_controller_fetches_the_presence_topic_only_when_it_checks_and_finds_the_coordinator_once(
        kafka_broker: Any) -> None:  # fmt: skip
    """Between two checks the controller's view of the presence topic sends nothing (it kept the
    broker answering 30-90 empty fetches a second), a check asks the group coordinator's address
    only once per connection, and a presence published meanwhile is read by the next check."""
    bootstrap = kafka_broker.bootstrap
    config = WorkerConfig(bootstrap_servers=bootstrap, cluster_name=f"i{uuid.uuid4().hex[:6]}", session_timeout_ms=6000)

    async def scenario() -> tuple[dict[int, int], dict[int, int], set[str], set[str]]:
        await ensure_topics(bootstrap, [sync_status_topic_spec(config)])
        view = SyncStatusView(bootstrap, config.sync_status_topic_name)
        await view.start()
        remover = DeadMemberRemover(config, view)
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            await publish(producer, config.sync_status_topic_name, [presence_report("w-1", 0, 6000)])
            for _ in range(100):  # a fresh broker has no group coordinator yet: retried, as ``run`` does
                try:
                    await remover.check()
                    break
                except (GroupCoordinatorNotAvailableError, RuntimeError):  # NOT_COORDINATOR while it loads
                    await remover._close()
                    await asyncio.sleep(0.1)
            first = set(view.seen)
            idle: dict[int, int] = {}
            checks: dict[int, int] = {}
            assert view._consumer is not None
            _count_requests(view._consumer._client, idle)
            await asyncio.sleep(1.0)  # idle: nothing to read, no check
            idle = dict(idle)
            _count_requests(remover._client, checks)
            await publish(producer, config.sync_status_topic_name, [presence_report("w-2", 1000, 6000)])
            await remover.check()
            await remover.check()
            return idle, checks, first, set(view.seen)
        finally:
            await producer.stop()
            await view.stop()
            await remover._close()

    idle, checks, first, seen = asyncio.run(scenario())
    assert first == {"w-1"} and seen == {"w-1", "w-2"}
    assert idle.get(FETCH, 0) == 0, idle
    assert checks.get(FIND_COORDINATOR, 0) == 0 and checks.get(DESCRIBE_GROUPS) == 2, checks


def test_presence_and_checks_keep_ten_per_session_timeout_and_at_most_one_a_second() -> None:
    """Idle cost scales with the session: the default 60 s session publishes and checks every 6 s
    (it did every second); a short one still every second; a member is then removed within a tenth
    of its session past it."""
    from streams.worker.presence import presence_interval_s

    assert presence_interval_s(60_000) == 6.0 and presence_interval_s(6_000) == 1.0 == presence_interval_s(1_000)
    config = WorkerConfig(bootstrap_servers="127.0.0.1:1", cluster_name="c", session_timeout_ms=60_000)
    view = SyncStatusView("127.0.0.1:1", config.sync_status_topic_name)
    remover = DeadMemberRemover(config, view)
    assert remover.next_check_s() == 6.0  # the controller's own session: nothing published yet
    view._apply(*presence_report("w-1", 0, 20_000)[1:], 0)
    assert remover.next_check_s() == 2.0  # the shortest session published
    view._apply(*presence_report("w-2", 0, 3_000)[1:], 1)
    assert remover.next_check_s() == 1.0
    assert DeadMemberRemover(config, view, interval_s=0.25).next_check_s() == 0.25
