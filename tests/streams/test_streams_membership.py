"""The worker's group membership (``streams.worker.membership``) against the session's noida-db broker:
its kept identity, static members replacing a killed process, the watchdog, leaving the group."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import NewTopic

from worker_harness import group_members

from streams.worker.app import CoordinatorWorker
from streams.brokers.noida import LocalBroker
from streams.config import ConfigError, WorkerConfig, ensure_topics
from streams.worker.membership import IDENTITY_FILE, coordination_failure, in_generation, instance_id, leave_group, member_id
from streams.worker.exits import EXIT_GROUP_LOST

UNKNOWN_MEMBER_ID = 25


def test_the_identity_is_made_once_and_kept_in_the_data_directory(tmp_path: Path) -> None:
    first = instance_id(tmp_path / "w1", "B")
    assert first.startswith("B-worker-")
    assert instance_id(tmp_path / "w1", "B") == first  # a restart with the same data directory
    assert (tmp_path / "w1" / IDENTITY_FILE).read_text().strip() == first
    assert instance_id(tmp_path / "w2", "B") != first  # another worker


def test_a_bad_instance_id_is_refused_clearly(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"worker.group.instance.id 'a b' is illegal"):
        WorkerConfig(group_instance_id="a b")
    with pytest.raises(ConfigError, match="illegal"):
        WorkerConfig(group_instance_id="x" * 250)
    (tmp_path / IDENTITY_FILE).write_text("not/legal\n")
    with pytest.raises(ValueError, match="'not/legal' is illegal"):
        instance_id(tmp_path, "B")
    assert WorkerConfig(group_instance_id="B-worker-1").group_instance_id == "B-worker-1"


async def _members(bootstrap: str, group: str) -> list[str]:
    return [member for member, _, _ in await group_members(bootstrap, group)]


async def _joined(bootstrap: str, topic: str, group: str, instance: str | None) -> AIOKafkaConsumer:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, group_instance_id=instance,
                                enable_auto_commit=False, session_timeout_ms=10000, heartbeat_interval_ms=500)  # fmt: skip
    await consumer.start()
    deadline = time.monotonic() + 20
    while not consumer.assignment():
        assert time.monotonic() < deadline, "no assignment within 20 s"
        await asyncio.sleep(0.1)
    return consumer


def _names(broker: LocalBroker) -> tuple[str, str]:
    tag = uuid.uuid4().hex[:6]
    asyncio.run(ensure_topics(broker.bootstrap, [NewTopic(f"m{tag}", 2, 1)]))
    return f"m{tag}", f"g{tag}"


def test_the_watchdog_sees_a_dead_coordination_task(broker: LocalBroker) -> None:
    topic, group = _names(broker)

    async def scenario() -> tuple[Any, ...]:
        consumer = await _joined(broker.bootstrap, topic, group, None)
        alive = coordination_failure(consumer)
        held = member_id(consumer)
        task = consumer._coordinator._coordination_task
        task.cancel()  # the group protocol of this consumer ends, as an unexpected error ends it
        await asyncio.gather(task, return_exceptions=True)
        dead = coordination_failure(consumer)
        await consumer.stop()
        return alive, held, dead, coordination_failure(consumer)

    alive, held, dead, closed = asyncio.run(scenario())
    assert alive is None and held
    assert dead == "its group coordination task was cancelled"
    assert closed is None  # a consumer being closed is not a failure


def test_the_worker_exits_once_out_of_its_group(broker: LocalBroker, tmp_path: Path) -> None:
    """``WorkerExit.watch_membership`` on a real consumer whose coordination task ended: the exit code is
    set and the stop requested, once."""
    topic, group = _names(broker)
    stops: list[int] = []

    class Worker(CoordinatorWorker):
        consumer: Any = None

        def group_consumer(self) -> Any:
            return self.consumer

    worker = Worker(WorkerConfig(bootstrap_servers=broker.bootstrap, cluster_name=f"w{group}", state_partitions=2,
                                 data_dir=str(tmp_path)), ports=lambda *_: (None, None))  # fmt: skip
    worker.exit.on_fatal = lambda: stops.append(worker.exit.exit_code)

    async def scenario() -> None:
        worker.consumer = await _joined(broker.bootstrap, topic, group, "w-1")
        await worker.exit.watch_membership()
        assert (worker.exit.exit_code, stops, worker.exit.member_id) == (0, [], member_id(worker.consumer))
        worker.consumer._coordinator._coordination_task.cancel()
        await asyncio.sleep(0.1)
        await worker.exit.watch_membership()
        await worker.exit.watch_membership()
        await worker.consumer.stop()

    try:
        asyncio.run(scenario())
    finally:
        worker.close()
    assert worker.exit.exit_code == EXIT_GROUP_LOST and stops == [EXIT_GROUP_LOST]
    assert worker.exit.member_id  # kept: the worker leaves the group with it on its way out


def test_stop_self_exits_even_if_the_stop_hangs() -> None:
    """The backstop: a worker whose SIGTERM stop does not finish still exits, non-zero."""
    code = ("import signal, time\nfrom streams.worker.worker_role import _stop_self\n"
            "signal.signal(signal.SIGTERM, lambda *_: print('SIGTERM', flush=True))\n"
            "_stop_self(0.5)\ntime.sleep(30)\n")  # fmt: skip
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "SIGTERM"
    assert done.returncode == EXIT_GROUP_LOST and time.monotonic() - started < 20


def test_a_restarted_static_member_replaces_the_killed_one_and_leaves_cleanly(broker: LocalBroker) -> None:
    """A SIGKILLed static member is taken over by its restart at once (noida-db never expires it);
    a static member's own close does not leave, ``leave_group`` does."""
    topic, group = _names(broker)
    child = ("import asyncio, sys\nfrom aiokafka import AIOKafkaConsumer\n"
             "async def main():\n"
             f"    c = AIOKafkaConsumer({topic!r}, bootstrap_servers={broker.bootstrap!r}, group_id={group!r},\n"
             "                         group_instance_id='w-1', enable_auto_commit=False)\n"
             "    await c.start()\n"
             "    while not c.assignment():\n        await asyncio.sleep(0.1)\n"
             "    print(c._coordinator.member_id, flush=True)\n    await asyncio.sleep(600)\n"
             "asyncio.run(main())\n")  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        dead = proc.stdout.readline().strip()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    assert asyncio.run(_members(broker.bootstrap, group)) == [dead]  # never expired

    async def scenario() -> tuple[Any, ...]:
        started = time.monotonic()
        consumer = await _joined(broker.bootstrap, topic, group, "w-1")
        took = time.monotonic() - started
        live = member_id(consumer)
        after_join = await _members(broker.bootstrap, group)
        await consumer.stop()
        after_close = await _members(broker.bootstrap, group)
        left = await leave_group(broker.bootstrap, group, live, "test-leave")
        again = await leave_group(broker.bootstrap, group, live, "test-leave")
        return took, live, after_join, after_close, left, again, await _members(broker.bootstrap, group)

    took, live, after_join, after_close, left, again, after_leave = asyncio.run(scenario())
    assert after_join == [live] and live != dead and took < 10
    assert after_close == [live]  # aiokafka does not leave for a static member
    assert (left, again, after_leave) == (0, UNKNOWN_MEMBER_ID, [])


@pytest.mark.parametrize("kafka_broker", ["noida-db", "apache-kafka"], indirect=True)
def test_in_generation_confirms_only_the_current_generation_of_a_live_member(kafka_broker: Any) -> None:
    """The check a worker refused as a stale owner makes before it claims its epoch again
    (``streams.worker.ownership``): a Heartbeat of its own, with the member and generation its consumer
    holds, answered with no error; an older generation or another member is not confirmed."""
    bootstrap = kafka_broker.bootstrap
    tag = uuid.uuid4().hex[:6]
    topic, group = f"m{tag}", f"g{tag}"
    asyncio.run(ensure_topics(bootstrap, [NewTopic(topic, 2, 1)]))

    async def scenario() -> tuple[bool, ...]:
        consumer = await _joined(bootstrap, topic, group, "w-1")
        try:
            coordinator = consumer._coordinator
            generation, member = coordinator.generation, coordinator.member_id
            return (await in_generation(bootstrap, group, generation, member, "test-fence-check"),
                    await in_generation(bootstrap, group, generation - 1, member, "test-fence-check"),
                    await in_generation(bootstrap, group, generation, "someone-else", "test-fence-check"),
                    generation >= 1)  # fmt: skip
        finally:
            await consumer.stop()

    assert asyncio.run(scenario()) == (True, False, False, True)


def test_an_assignment_of_no_bytes_is_joined_again_not_decoded() -> None:
    """``rejoin_when_left_out``: a SyncGroup answer of no bytes (a member the leader's plan left out)
    makes aiokafka join again (its join returns None: back off, join); an encoded assignment, even
    of no partitions, is kept. In a process of its own: the patch is process-wide."""
    code = """
import asyncio
from aiokafka.consumer import group_coordinator as gc
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment
no_partitions = ConsumerProtocolMemberAssignment(0, [], b"").encode()
answers = [("roundrobin", b""), ("roundrobin", no_partitions)]
async def join(self):
    return answers.pop(0)
gc.CoordinatorGroupRebalance.perform_group_join = join
from streams.worker.membership import rejoin_when_left_out
assert rejoin_when_left_out() and rejoin_when_left_out()
r = object.__new__(gc.CoordinatorGroupRebalance)
r.group_id = "g"
print(asyncio.run(r.perform_group_join()), asyncio.run(r.perform_group_join()) == ("roundrobin", no_partitions))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["None", "True"]
    assert "left this member out" in done.stderr
