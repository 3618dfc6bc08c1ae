"""The counts a progress poll answers (``--wait``: a describe of counts only).

Each poll read ``__mirror_state`` up to its end: in a mass failover the controller read every
state the workers wrote as they wrote it (4 records per stopped partition; 4.7 CPU-s of a
200,000-partition failover on this 2-core machine, beside the workers doing the failover). Now:

- a stopping topic that the workers' stop reports cover in every table partition
  (``streams.state.stop_reports``) counts as done without reading the changelog: each of its
  partitions that had a state is STOPPED;
- otherwise the changelog is read, at most every ``interval`` seconds; a poll in between
  answers the counts of the last read (progress moves in steps of ``interval``).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Collection
from typing import Any

from coordinator.image import MetadataImage
from coordinator.states import DesiredState, MirrorState
from streams.state.stop_reports import covered_through

PROGRESS_READ_INTERVAL_S = 2.0
REPORTS_TIMEOUT_S = 5.0


class ReportedTally:
    """A ``StateTally`` whose covered stopping topics count as done: the partitions with a state in
    the last read are STOPPED, the others (never started) UNKNOWN."""

    def __init__(self, tally: Any, covered: set[tuple[str, int]]) -> None:
        self.tally, self.covered = tally, covered

    def topic_counts(self, mirror: str, topic_id: uuid.UUID, partitions: Collection[int]) -> dict[MirrorState, int]:
        counts = self.tally.topic_counts(mirror, topic_id, partitions)
        if (mirror, topic_id.int) not in self.covered:
            return counts  # type: ignore[no-any-return]
        unknown = counts.get(MirrorState.UNKNOWN, 0)
        out = {MirrorState.STOPPED: sum(counts.values()) - unknown, MirrorState.UNKNOWN: unknown}
        return {s: n for s, n in out.items() if n}


class ProgressCounts:
    def __init__(self, status: Any, reports: Any, num_partitions: int, interval: float = PROGRESS_READ_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self.status, self.reports, self.num_partitions = status, reports, num_partitions
        self.interval, self.clock = interval, clock
        self._read_at: float | None = None

    async def counts(self, image: MetadataImage, mirrors: Collection[str] | None) -> Any:
        """A tally for ``describe_cluster_mirrors`` of ``mirrors`` (None: all)."""
        try:
            reports = await asyncio.wait_for(self.reports.reports(), REPORTS_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - no reports: the changelog says it all
            reports = {}
        through = covered_through(reports, range(self.num_partitions), image.offset)
        covered: set[tuple[str, int]] = set()
        uncovered = False  # a stopping topic not covered yet
        for m in image.mirrors.topics.values():
            if m.desired_state is not DesiredState.STOP or (mirrors is not None and m.mirror_name not in mirrors):
                continue
            if max(m.last_change_offset, 0) <= through.get(m.mirror_name, -1):
                covered.add((m.mirror_name, m.topic_id.int))
            else:
                uncovered = True
        # Read when nothing is stopping (the poll waits for other states than a stop's) or never
        # read; while a stop is not covered, at most every interval; once covered, not at all.
        if not (covered or uncovered) or self._read_at is None or (
                uncovered and self.clock() - self._read_at >= self.interval):  # fmt: skip
            tally = await self.status.state_counts()
            self._read_at = self.clock()
        else:
            tally = self.status.tally()
        return ReportedTally(tally, covered) if covered else tally
