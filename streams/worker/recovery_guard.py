"""A watch over Faust's table recovery: a changelog partition whose records stop coming is sought again.

Faust 0.15.3's recovery (``faust.tables.recovery.Recovery._restart_recovery``) reads each assigned
changelog partition's highwater, seeks the partition to where its replay starts, resumes the flow,
and then only waits for every partition to reach that highwater (``signal_recovery_end``); the
streams stay paused until then. It never seeks again. CI saw a takeover whose changelog partition
never delivered a record (Faust's "No event received for active tp ... since recovery start",
fetches going out), so the worker never stepped again. Traced: Faust's fetcher hands aiokafka its
own set of active partitions, by reference, for a getmany that waits up to a second (and through a
rebalance); the rebalance pauses every partition, which empties that set, and aiokafka reads an
empty set as "every partition". So the getmany in flight drains the changelog partition recovery
has just sought, before recovery resumes the flow, and Faust drops what it returns while the flow
is stopped: the consumer's position is at the log end, past every record recovery waits for
(robinhood/faust PR #69 named the empty set and the shared reference).

``RecoveryGuard.check`` (every second or so) finds an assigned changelog partition that has
received nothing for ``stall_s`` while its recovery offset is below its highwater, logs the
consumer's position, seeks it to the first offset recovery still needs and resumes it. Nothing
can be applied twice or lost: Faust applies a changelog record only above the partition's
recovery offset. Each further kick of a partition waits twice as long, up to ``max_backoff_s``.

It runs as a service of the app (``RecoveryGuardService``), not as an app timer: Faust starts its
timers and tasks only once the first recovery has completed (``App.on_started``), and a worker
started over a wiped RocksDB can stall in that one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from mode import Service

log = logging.getLogger(__name__)


class RecoveryGuard:
    def __init__(self, app: Any, stall_s: float, *, max_backoff_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self.app = app
        self.stall_s = stall_s
        self.max_backoff_s = max_backoff_s
        self.clock = clock
        self._kicks: dict[Any, tuple[int, float]] = {}  # tp -> (kicks so far, no kick before)
        self.kicked = 0  # kicks since start (tests, metrics)

    def _replaying(self, recovery: Any) -> bool:
        """Recovery waits for records with the flow resumed, no rebalance pending (which seeks itself)
        and none of them queued (a long replay only behind with them: a seek would fetch them again)."""
        queue = getattr(self.app.tables, "_changelog_queue", None)
        queued = queue is not None and queue.qsize() > 0
        return bool(recovery.in_recovery and self.app.consumer.flow_active
                    and not recovery.signal_recovery_start.is_set() and not queued)  # fmt: skip

    def _stalled(self, recovery: Any, tp: Any, now: float) -> tuple[int, int, float] | None:
        """(recovery offset, highwater, seconds without a record) of a partition that needs a kick."""
        highwater, offset = recovery.active_highwaters.get(tp), recovery.active_offsets.get(tp)
        if highwater is None or offset is None or offset >= highwater:
            return None
        last = recovery._active_events_received_at.get(tp, recovery._recovery_started_at)
        if last is None or now - last < self.stall_s or now < self._kicks.get(tp, (0, 0.0))[1]:
            return None
        return offset, highwater, now - last

    async def check(self) -> list[Any]:
        """Kicks the stalled changelog partitions; returns them."""
        recovery = getattr(self.app.tables, "_recovery", None)  # made on the first rebalance
        if self.stall_s <= 0 or recovery is None:
            return []
        if not recovery.in_recovery:
            self._kicks.clear()
            return []
        if not self._replaying(recovery):
            return []
        consumer = self.app.consumer
        kicked = []
        for tp in sorted(recovery.active_tps):
            got = self._stalled(recovery, tp, self.clock())
            if got is None:
                continue
            offset, highwater, idle = got
            try:  # on the consumer's thread, as Faust reads it; it waits while the position is reset
                position = await asyncio.wait_for(consumer.position(tp), timeout=max(1.0, self.stall_s))
            except asyncio.TimeoutError:
                position = None  # unknown: the seek sets it
            if not self._replaying(recovery) or self._stalled(recovery, tp, self.clock()) is None:
                continue  # a rebalance, the end of recovery or a record came meanwhile
            start = offset + 1 if offset >= 0 else 0
            log.warning("table recovery: no record of changelog partition %s[%d] for %.1fs (recovery offset %d, "
                        "highwater %d, consumer position %s): seeking it to %d", tp.topic, tp.partition, idle, offset,
                        highwater, position, start)  # fmt: skip
            await consumer.seek_wait({tp: start})
            consumer.resume_partitions({tp})
            n = self._kicks.get(tp, (0, 0.0))[0]
            self._kicks[tp] = (n + 1, self.clock() + min(self.max_backoff_s, self.stall_s * 2 ** (n + 1)))
            self.kicked += 1
            kicked.append(tp)
        return kicked

    async def watch(self) -> None:
        """One check; a failed one is logged and the next tries again."""
        try:
            await self.check()
        except Exception as e:  # noqa: BLE001 - the next check tries again
            log.warning("table recovery check failed: %r", e)


class RecoveryGuardService(Service):
    """``RecoveryGuard.watch`` every ``interval`` seconds, started and stopped with the app."""

    def __init__(self, guard: RecoveryGuard, interval: float, **kwargs: Any) -> None:
        self.guard = guard
        self.interval = interval
        super().__init__(**kwargs)

    @Service.task
    async def _watch(self) -> None:
        while not self.should_stop:
            await self.sleep(self.interval)
            if not self.should_stop:
                await self.guard.watch()
