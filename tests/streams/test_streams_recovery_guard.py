"""A worker whose table recovery stalls recovers by itself (``streams.worker.recovery_guard``).

CI saw a worker take a table partition over and Faust's recovery of its ``__mirror_state``
partition never receive a record ("No event received for active tp ... since recovery start"),
the consumer's position at the log end: Faust never seeks again and keeps the streams paused
until the replay ends, so the worker never stepped again. Traced in the rebalance scenario: a
getmany in flight since before the rebalance drained the partition right after recovery's seek,
and Faust dropped the records (see the guard's module).

Here a real worker (in this process, on a real broker) starts with an empty RocksDB over a
changelog that holds two writes per mirror partition, and that drain happens, once, right after
Faust's seek (``lose_the_records``). The worker must replay the changelog anyway, take every
table partition on with each mirror partition's latest state, and step.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from faust.types import TP

from coordinator.partition_state import MirrorPartitionKey, MirrorPartitionState, encode_state
from coordinator.states import MirrorState
from streams.config import WorkerConfig, ensure_topics
from streams.state.mirror_state_codec import default_codec, partition_for_key
from streams.worker.app import CoordinatorWorker
from streams.worker.recovery_guard import RecoveryGuard
from streams.worker.table import _VALUE_PREFIX
from streams.worker.topics import worker_topic_specs

pytestmark = pytest.mark.brokers("noida-db", "apache-kafka")
MIRROR = "a-to-b"


def ends(worker: CoordinatorWorker) -> dict[Any, int]:
    """The last offset of each changelog partition that has records (Faust's active highwaters)."""
    return {tp: hw for tp, hw in worker.app.tables.recovery.active_highwaters.items() if hw >= 0}


async def write_changelog(cfg: WorkerConfig, keys: list[MirrorPartitionKey]) -> dict[MirrorPartitionKey, MirrorPartitionState]:
    """Two states per key, as the worker writes them (lz4, idempotent, acks=all); the latest per key."""
    codec = default_codec()
    producer = AIOKafkaProducer(bootstrap_servers=cfg.bootstrap_servers, acks="all", enable_idempotence=True,
                                compression_type="lz4")  # fmt: skip
    await producer.start()
    latest = {}
    try:
        for epoch, state in ((1, MirrorState.MIRRORING), (2, MirrorState.STOPPED)):
            for k in keys:
                st = MirrorPartitionState(state=state, state_epoch=epoch, applied_offset=epoch)
                raw = codec.state_key(k.mirror_name, k.topic_id, k.partition)
                await producer.send_and_wait(cfg.mirror_state_topic_name, key=raw, value=_VALUE_PREFIX + encode_state(st),
                                             partition=partition_for_key(raw, cfg.state_partitions))  # fmt: skip
                latest[k] = st
    finally:
        await producer.stop()
    return latest


def lose_the_records(worker: CoordinatorWorker, lost: dict[Any, int]) -> None:
    """Right after Faust seeks the changelog partitions, once, what CI's stalled takeover did: a
    getmany still in flight from before the rebalance, whose partition set (Faust's own set of
    active partitions, passed by reference) the rebalance had emptied, drains every partition on
    the consumer's thread (aiokafka reads an empty set as all of them), and Faust drops the records
    as its flow is stopped. ``lost``: the last offset drained per changelog partition."""
    recovery = worker.app.tables.recovery
    seek = recovery._seek_offsets

    async def seek_then_lose(consumer: Any, tps: Any, offsets: Any, title: str) -> None:
        await seek(consumer, tps, offsets, title)
        ends = {tp: recovery.active_highwaters[tp] for tp in tps if recovery.active_highwaters.get(tp, -1) > offsets[tp]}
        if title != "active" or not ends or lost:
            return
        fetcher = consumer._thread._ensure_consumer()._fetcher

        async def in_flight_getmany() -> None:
            deadline = time.monotonic() + 5
            while any(lost.get(tp, -1) < end for tp, end in ends.items()) and time.monotonic() < deadline:
                for tp, records in (await fetcher.fetched_records(set(), timeout=0.5)).items():
                    if tp in ends:
                        lost[tp] = records[-1].offset

        await consumer._thread.call_thread(in_flight_getmany)

    recovery._seek_offsets = seek_then_lose


async def test_a_stalled_changelog_partition_is_sought_again_and_the_worker_steps(worker_config: WorkerConfig,
                                                                                   caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    cfg = worker_config.with_overrides(recovery_stall_ms=1000, heartbeat_interval_ms=500)
    await ensure_topics(cfg.bootstrap_servers, worker_topic_specs(cfg))
    keys = [MirrorPartitionKey(MIRROR, uuid.UUID(int=i), 0) for i in range(1, 9)]
    latest = await write_changelog(cfg, keys)
    assert len({partition_for_key(default_codec().state_key(k.mirror_name, k.topic_id, 0), 4) for k in keys}) > 1

    worker = CoordinatorWorker(cfg, ports=lambda *_: (None, None), tick_interval=0.1)  # type: ignore[arg-type]
    lost: dict[Any, int] = {}
    lose_the_records(worker, lost)
    caplog.set_level(logging.WARNING, logger="streams.worker.recovery_guard")
    started = asyncio.ensure_future(worker.app.start())  # returns once the first recovery has ended
    try:
        deadline = time.monotonic() + 15
        while worker.store.owned != {0, 1, 2, 3} and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert lost and all(lost[tp] == end for tp, end in ends(worker).items()), f"no stall made: {lost}"
        assert worker.store.owned == {0, 1, 2, 3}, f"recovery never ended: {worker.app.tables.recovery.active_stats()}"
        assert worker.store.durable == latest  # every mirror partition's latest state, none older, none missing
        kicks = [r.getMessage() for r in caplog.records if "seeking it to" in r.getMessage()]
        assert worker.recovery_guard.kicked >= 1 and kicks, kicks
        # The first step takes every table partition on (``WorkerTable.sync_ownership``); the
        # others' steps come on their own ticks, some ms later: waited for, not assumed.
        deadline = time.monotonic() + 5  # a tick lost is sent again after 2 s (``streams.worker.ticks``)
        while set(worker._last_step) != {0, 1, 2, 3} and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert set(worker._last_step) == {0, 1, 2, 3}  # the takeover is a step of each table partition
    finally:
        if not started.done():
            started.cancel()
        await asyncio.wait_for(worker.app.stop(), 30)
        worker.close()


class _Consumer:
    """Faust's consumer as the guard uses it."""

    def __init__(self) -> None:
        self.flow_active = True
        self.seeks: list[dict[Any, int]] = []
        self.resumed: list[set[Any]] = []

    async def position(self, tp: Any) -> int:
        return 6

    async def seek_wait(self, offsets: dict[Any, int]) -> None:
        self.seeks.append(dict(offsets))

    def resume_partitions(self, tps: Any) -> None:
        self.resumed.append(set(tps))


async def test_the_guard_kicks_only_a_stalled_partition_of_a_running_recovery_and_backs_off() -> None:
    tp, done = TP("cl", 2), TP("cl", 0)
    recovery = SimpleNamespace(in_recovery=True, active_tps={tp, done}, active_highwaters={tp: 5, done: 3},
                               active_offsets={tp: 2, done: 3}, _active_events_received_at={},
                               _recovery_started_at=0.0, signal_recovery_start=asyncio.Event())  # fmt: skip
    consumer = _Consumer()
    now = [0.0]
    queue: asyncio.Queue[Any] = asyncio.Queue()  # Faust's changelog queue: records read, not yet applied
    guard = RecoveryGuard(SimpleNamespace(tables=SimpleNamespace(_recovery=recovery, _changelog_queue=queue),
                                          consumer=consumer), 5.0, max_backoff_s=12.0, clock=lambda: now[0])  # fmt: skip

    async def at(t: float) -> list[Any]:
        now[0] = t
        return await guard.check()

    assert await at(4.9) == []
    queue.put_nowait("a record of another partition")  # recovery is busy, only behind: no seek
    assert await at(5.0) == []
    queue.get_nowait()
    assert await at(5.0) == [tp] and consumer.seeks == [{tp: 3}] and consumer.resumed == [{tp}]  # the record after 2
    assert await at(14.9) == []  # the second kick waits twice as long
    assert await at(15.0) == [tp]
    assert await at(26.9) == [] and await at(27.0) == [tp]  # then at most max_backoff_s
    recovery._active_events_received_at[tp] = 30.0  # records come again
    assert await at(34.0) == []
    recovery.signal_recovery_start.set()  # a rebalance: Faust seeks again itself
    assert await at(60.0) == []
    recovery.signal_recovery_start.clear()
    consumer.flow_active = False  # not replaying (the flow is stopped)
    assert await at(60.0) == []
    consumer.flow_active = True
    recovery.active_offsets[tp] = 5  # caught up
    assert await at(60.0) == []
    recovery.in_recovery = False  # over: the next recovery starts with no backoff
    assert await at(61.0) == []
    recovery.in_recovery, recovery._recovery_started_at = True, 61.0
    recovery.active_offsets[tp], recovery._active_events_received_at = -1, {}
    assert await at(66.0) == [tp] and consumer.seeks[-1] == {tp: 0} and guard.kicked == 4


def test_a_rig_wait_that_times_out_after_a_recovery_stall_fails(tmp_path: Any) -> None:
    """The rig no longer turns Faust's hang into an expected failure: the worker must cure it."""
    from streams.demo.harness import DemoError
    from worker_harness import Rig

    (tmp_path / "worker-B1.log").write_text("... WARNING faust.tables.recovery: [^---Recovery]: No event received for "
                                            "active tp TP(topic='B.__mirror_state', partition=2) since recovery start\n")  # fmt: skip
    try:
        Rig(tmp_path, "127.0.0.1:1", {}).wait("never", lambda: False, timeout=0.1)
    except BaseException as e:  # noqa: BLE001 - pytest's xfail outcome too: it must not be one
        got: BaseException | None = e
    else:
        got = None
    assert isinstance(got, DemoError) and "a table recovery had stalled, the last: worker-B1: " in str(got), repr(got)


def test_the_stall_setting() -> None:
    from streams.config import ConfigError, from_env, from_properties

    assert WorkerConfig().recovery_stall_ms == 5000
    assert from_properties({"worker.recovery.stall.ms": "0"}).recovery_stall_ms == 0  # never
    assert from_env({"KIP1279_WORKER_RECOVERY_STALL_MS": "2500"}).recovery_stall_ms == 2500
    with pytest.raises(ConfigError, match="worker.recovery.stall.ms"):
        WorkerConfig(recovery_stall_ms=-1)
