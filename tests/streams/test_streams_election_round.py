"""An election round: every controller publishes its heartbeat; only a standby reads the others'.

The active controller's round used to read the heartbeats topic too (a ListOffsets and a Fetch per
round, five a second at the default session timeout) and decided nothing from it. A controller
that was active for long reads the last heartbeats again once it is a standby (``skip``): its
position may be below the log start by then.
"""

from __future__ import annotations

from typing import Any

from aiokafka import TopicPartition

from records.registry import default_schemas
from streams.admin.control_plane import ControlPlane
from streams.admin.election import HISTORY, HeartbeatChannel
from streams.config import WorkerConfig


class _Host:
    address = ("127.0.0.1", 9393)
    image: Any = None


class _Beats:
    def __init__(self) -> None:
        self.published: list[Any] = []
        self.polls = self.skips = 0

    async def publish(self, beat: Any) -> None:
        self.published.append(beat)

    async def poll(self) -> list[Any]:
        self.polls += 1
        return []

    def skip(self) -> None:
        self.skips += 1


async def test_only_a_standby_reads_the_heartbeats() -> None:
    plane = ControlPlane(_Host(), WorkerConfig(bootstrap_servers="127.0.0.1:1", cluster_name="B"), default_schemas())
    plane.controller_id = "c1"
    beats = plane.heartbeats = _Beats()  # type: ignore[assignment]
    took: list[bool] = []

    async def take_over() -> None:
        took.append(True)

    plane.take_over = take_over  # type: ignore[method-assign]
    await plane._election_round()  # a standby alone: reads, takes over
    assert (beats.polls, beats.skips, took) == (1, 0, [True])
    plane.active = True
    for _ in range(3):
        await plane._election_round()
    assert (beats.polls, beats.skips, len(beats.published)) == (1, 3, 4)
    assert all(b.active for b in beats.published[1:])
    plane.active = False
    await plane._election_round()
    assert beats.polls == 2


class _Consumer:
    """What ``HeartbeatChannel.poll`` asks of its consumer: an empty topic whose log starts at ``start``."""

    def __init__(self, start: int, end: int) -> None:
        self.start, self.end, self.pos = start, end, end
        self.seeks: list[int] = []

    async def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.end for tp in tps}

    async def beginning_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.start for tp in tps}

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.seeks.append(offset)
        self.pos = self.end  # as if the records read were all older than the session

    async def position(self, tp: TopicPartition) -> int:
        return self.pos


async def test_a_skipped_channel_reads_the_last_heartbeats_again_from_the_log_start_at_least() -> None:
    channel = HeartbeatChannel("127.0.0.1:1", "t.controllers")
    consumer = channel._consumer = _Consumer(start=10_000, end=10_100)  # type: ignore[assignment]
    await channel.poll()
    assert consumer.seeks == []
    channel.skip()
    await channel.poll()
    assert consumer.seeks == [10_000]  # end - HISTORY is below the log start
    consumer.start, consumer.end = 0, 5 * HISTORY
    channel.skip()
    await channel.poll()
    assert consumer.seeks == [10_000, 4 * HISTORY]
    await channel.poll()
    assert len(consumer.seeks) == 2  # once per skip
