"""A worker's two sides of the stop reports (``streams.state.stop_reports``).

``StopReporter``: once every partition of a stopping topic that this worker holds is durably
STOPPED, it reports so for each table partition it owns. ``ReportedStops``: the states of the
table partitions other workers own, as the topic level of a stop reads them, from their reports.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any

from coordinator.image import MetadataImage
from coordinator.partition_state import MirrorPartitionKey
from coordinator.states import DesiredState, MirrorState
from streams.state.changelog_view import PartitionStatus
from streams.state.stop_reports import StopReport, covered_through, covers, stop_report

log = logging.getLogger(__name__)
_DONE = (MirrorState.STOPPED, MirrorState.UNKNOWN)  # as the topic level of a stop counts them
_STOPPED = PartitionStatus(MirrorState.STOPPED)
_NOT_DONE = PartitionStatus(MirrorState.STOPPING)  # not covered by a report: the topic waits


def stopping_topics(image: MetadataImage) -> dict[str, dict[uuid.UUID, int]]:
    """Per mirror, its topics desired STOP in ``image`` and the offset of each one's stop."""
    out: dict[str, dict[uuid.UUID, int]] = {}
    for m in image.mirrors.topics.values():
        if m.desired_state is DesiredState.STOP:
            out.setdefault(m.mirror_name, {})[m.topic_id] = max(m.last_change_offset, 0)
    return out


class StopReporter:
    """Publishes a report per owned table partition and mirror whose stops are all done here."""

    def __init__(self, config: Any, store: Any, worker: str, producer: Callable[[], Any],
                 clock_ms: Callable[[], int]) -> None:  # fmt: skip
        self.config, self.store, self.worker = config, store, worker
        self.producer = producer  # coroutine function: the worker's changelog producer (acks=all)
        self.clock_ms = clock_ms
        self._stopping: tuple[Any, dict[str, dict[uuid.UUID, int]]] = (None, {})
        self._reported: dict[tuple[str, int], int] = {}  # (mirror, table partition) -> through
        self._lock = asyncio.Lock()  # table partitions step side by side: one report at a time

    def due(self, image: MetadataImage) -> list[tuple[str, int]]:
        """The (mirror, table partition) pairs to report now, at ``image.offset``."""
        if self._stopping[0] is not image.mirrors:
            self._stopping = (image.mirrors, stopping_topics(image))
        tally, owned = self.store.durable.tally, self.store.owned
        out = []
        for mirror, topics in self._stopping[1].items():
            latest = max(topics.values())
            todo = [p for p in owned if self._reported.get((mirror, p), -1) < latest]
            if not todo or tally.mirror_counts(mirror).get(MirrorState.STOPPING):
                continue  # reported already, or a stop under way here (most steps of a stop end here)
            if all(s in _DONE for t in topics for s in tally.states_of(mirror, t)):
                out += [(mirror, p) for p in todo]
        return out

    async def report(self, image: MetadataImage) -> None:
        """After a step: the reports due, sent and acknowledged."""
        if not self.due(image):
            return
        async with self._lock:
            due = self.due(image)  # again: another table partition's step may have sent them
            if not due:
                return
            c, now = self.config, self.clock_ms()
            producer = await self.producer()
            sent = []
            for mirror, p in due:
                key, value = stop_report(mirror, p, image.offset, c.state_partitions, self.worker, now)
                sent.append(await producer.send(c.stop_reports_topic_name, key=key, value=value))
            await asyncio.gather(*sent)
            for mirror, p in due:
                self._reported[(mirror, p)] = image.offset
            log.info("stops done through metadata offset %d reported for %d table partition(s)", image.offset, len(due))


class ReportedStops(Mapping[tuple[str, uuid.UUID, int], PartitionStatus]):
    """Other workers' partitions of stopping topics, as ``store.remote`` gives them to the topic
    level: STOPPED where the owner's report covers the topic's stop, STOPPING (not done) where
    none does yet; nothing for the partitions of other topics (as with no view at all)."""

    def __init__(self, reports: Mapping[tuple[str, int], StopReport], image_offset: int,
                 desired: Callable[[str], Mapping[uuid.UUID, tuple[DesiredState, int]]],
                 partition_of: Callable[[MirrorPartitionKey], int]) -> None:  # fmt: skip
        self.reports, self.image_offset = dict(reports), image_offset
        self.desired, self.partition_of = desired, partition_of

    def covered(self, mirror: str, table_partition: int, stop_offset: int) -> bool:
        return covers(self.reports.get((mirror, table_partition)), stop_offset, self.image_offset)

    def covers(self, mirrors: Mapping[str, int], table_partitions: Collection[int]) -> bool:
        """Whether every stop (latest offset per mirror) is covered in every one of ``table_partitions``."""
        through = covered_through(self.reports, table_partitions, self.image_offset)
        return all(o <= through.get(m, -1) for m, o in mirrors.items())

    def get(self, key: tuple[str, uuid.UUID, int], default: Any = None) -> Any:
        mirror, topic_id, partition = key
        want = self.desired(mirror).get(topic_id)
        if want is None or want[0] is not DesiredState.STOP:
            return default
        p = self.partition_of(MirrorPartitionKey(mirror, topic_id, partition))
        return _STOPPED if self.covered(mirror, p, want[1]) else _NOT_DONE

    def __getitem__(self, key: tuple[str, uuid.UUID, int]) -> PartitionStatus:
        got = self.get(key)
        if got is None:
            raise KeyError(key)
        return got  # type: ignore[no-any-return]

    def __bool__(self) -> bool:
        return True  # a view: an empty one must not read as "no view" (then every partition is UNKNOWN)

    def __len__(self) -> int:
        return len(self.reports)

    def __iter__(self) -> Iterator[tuple[str, uuid.UUID, int]]:
        return iter(())  # answers by key only
