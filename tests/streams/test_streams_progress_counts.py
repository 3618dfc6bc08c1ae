"""A progress poll's counts (``--wait``) during a stop: from the workers' stop reports once they
cover the stop, without reading ``__mirror_state``; until then from the changelog, read at most
every interval."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

from coordinator.state_counts import StateTally
from coordinator.states import DesiredState, MirrorState
from streams.admin.progress import ProgressCounts
from streams.state.stop_reports import StopReport, covered_through

TOPIC, OTHER = uuid.UUID(int=1), uuid.UUID(int=2)


def image(offset: int, stops: dict[uuid.UUID, int]) -> Any:
    topics = {t: SimpleNamespace(mirror_name="m", topic_id=t, last_change_offset=o,
                                 desired_state=DesiredState.STOP if o >= 0 else DesiredState.START)
              for t, o in stops.items()}  # fmt: skip
    return SimpleNamespace(offset=offset, mirrors=SimpleNamespace(topics=topics))


def tally_of(states: dict[tuple[str, uuid.UUID, int], MirrorState]) -> StateTally:
    return StateTally(states.items())


class Reports:
    def __init__(self) -> None:
        self.got: dict[tuple[str, int], StopReport] = {}

    async def reports(self) -> dict[tuple[str, int], StopReport]:
        return self.got


def poll(p: ProgressCounts, img: Any) -> dict[MirrorState, int]:
    return asyncio.run(p.counts(img, {"m"})).topic_counts("m", TOPIC, range(4))


def test_a_covered_stop_counts_as_done_without_reading_the_changelog() -> None:
    status, reports, clock = SimpleNamespace(), Reports(), [0.0]
    reads = []
    stopping = tally_of({("m", TOPIC, p): MirrorState.STOPPING for p in range(3)})  # partition 3: no state

    async def state_counts() -> StateTally:
        reads.append(clock[0])
        return stopping

    status.state_counts, status.tally = state_counts, lambda: stopping
    p = ProgressCounts(status, reports, num_partitions=2, interval=2.0, clock=lambda: clock[0])
    img = image(50, {TOPIC: 40, OTHER: -1})
    assert poll(p, img) == {MirrorState.STOPPING: 3, MirrorState.UNKNOWN: 1} and reads == [0.0]
    clock[0] = 1.0
    assert poll(p, img) == {MirrorState.STOPPING: 3, MirrorState.UNKNOWN: 1} and reads == [0.0], "within the interval"
    clock[0] = 2.5
    reports.got[("m", 0)] = StopReport(45, "w-1", 0)
    assert poll(p, img) == {MirrorState.STOPPING: 3, MirrorState.UNKNOWN: 1} and reads == [0.0, 2.5], \
        "one table partition reported: not covered"
    reports.got[("m", 1)] = StopReport(60, "w-2", 0)
    clock[0] = 5.0
    assert poll(p, img) == {MirrorState.STOPPING: 3, MirrorState.UNKNOWN: 1}, "a report past the image: not yet"
    assert poll(p, image(60, {TOPIC: 40, OTHER: -1})) == {MirrorState.STOPPED: 3, MirrorState.UNKNOWN: 1}
    n = len(reads)
    clock[0] = 9.0
    assert poll(p, image(60, {TOPIC: 40, OTHER: -1})) == {MirrorState.STOPPED: 3, MirrorState.UNKNOWN: 1}
    assert len(reads) == n, "covered: no read, however long"
    assert poll(p, image(70, {TOPIC: 65, OTHER: -1})) == {MirrorState.STOPPING: 3, MirrorState.UNKNOWN: 1}, \
        "a later stop is not covered by the reports of the earlier one"


def test_with_nothing_stopping_every_poll_reads() -> None:
    reads = []
    status = SimpleNamespace(tally=lambda: StateTally())

    async def state_counts() -> StateTally:
        reads.append(1)
        return StateTally()

    status.state_counts = state_counts
    p = ProgressCounts(status, Reports(), num_partitions=2, interval=60.0, clock=lambda: 0.0)
    for _ in range(3):
        asyncio.run(p.counts(image(50, {TOPIC: -1}), {"m"}))
    assert len(reads) == 3


def test_a_mirror_is_covered_only_with_a_report_of_every_table_partition_none_past_the_image() -> None:
    r = {("m", 0): StopReport(10, "a", 0), ("m", 1): StopReport(20, "b", 0), ("n", 0): StopReport(5, "a", 0)}
    assert covered_through(r, range(2), 20) == {"m": 10}
    assert covered_through(r, range(2), 19) == {}
    assert covered_through(r, range(3), 20) == {}
