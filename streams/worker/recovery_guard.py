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

``__mirror_state`` is transactional, and Faust's recovery reads it ``read_committed``: its
highwater is the last stable offset less one, which is now often a commit or abort marker, no
record, so recovery (which waits for a record at that offset) would wait for good. The guard
reads each such partition's committed records up to the LSO once per recovery
(``RawLogReader``) and lowers the highwater to the last committed record's offset (to the
recovery offset when there is none): every record recovery waits for still comes, and nothing
past the last one is waited for.

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
                 clock: Callable[[], float] = time.monotonic, bootstrap: str | None = None) -> None:  # fmt: skip
        self.app = app
        self.bootstrap = bootstrap  # where the highwaters are read exactly (None: not read)
        self._reader: Any = None
        self._exact: tuple[Any, set[Any]] = (None, set())  # (recovery start, partitions whose highwater is exact)
        self.lowered = 0  # highwaters lowered to the last committed record (tests)
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
        if recovery is None:
            return []
        if not recovery.in_recovery:
            self._kicks.clear()
            return []
        if self.bootstrap is not None:
            await self._exact_highwaters(recovery)
        if self.stall_s <= 0 or not self._replaying(recovery):
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

    async def _exact_highwaters(self, recovery: Any) -> None:
        """Lowers each recovering partition's highwater to its last committed record (see the module)."""
        started = recovery._recovery_started_at
        if self._exact[0] != started:
            self._exact = (started, set())
        done = self._exact[1]
        todo = {}
        for tp in recovery.active_tps:
            highwater, offset = recovery.active_highwaters.get(tp), recovery.active_offsets.get(tp)
            if tp not in done and highwater is not None and offset is not None and offset < highwater:
                todo[tp] = (offset, highwater)
        if not todo:
            return
        last = await self._last_records(todo)
        if recovery._recovery_started_at != started:
            return  # a new recovery began meanwhile: its own highwaters
        for tp, (offset, highwater) in todo.items():
            exact = last.get(tp, offset)
            if exact < recovery.active_highwaters.get(tp, -1):
                log.debug("table recovery: %s[%d] highwater %d -> %d (the last committed record)", tp.topic,
                          tp.partition, highwater, exact)  # fmt: skip
                recovery.active_highwaters[tp] = exact
                self.lowered += 1
            done.add(tp)
        waiting = self.app.consumer.flow_active and not recovery.signal_recovery_start.is_set()
        if recovery.in_recovery and waiting and not recovery.need_recovery():
            # as Faust's own end of recovery (``_maybe_signal_recovery_end``): every record came;
            # only while it waits for them (before, it sees for itself that nothing is needed)
            recovery.flush_buffers()
            recovery._set_recovery_ended()
            recovery.signal_recovery_end.set()

    async def _last_records(self, todo: dict[Any, tuple[int, int]]) -> dict[Any, int]:
        """The offset of the last committed record after each partition's recovery offset, up to
        its highwater (the LSO less one), where there is one."""
        from aiokafka import AIOKafkaConsumer, TopicPartition

        from streams.state.raw_log import RawLogReader

        if self._reader is None:
            reader = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None, enable_auto_commit=False,
                                      isolation_level="read_committed", client_id="kip1279-recovery-guard")  # fmt: skip
            await reader.start()
            self._reader = reader
        reader = self._reader
        tps = {tp: TopicPartition(tp.topic, tp.partition) for tp in todo}
        reader.assign(list(tps.values()))
        reader.pause(*tps.values())
        for tp, (offset, _) in todo.items():
            reader.seek(tps[tp], offset + 1)
        last: dict[Any, int] = {}

        def apply_to(tp: Any) -> Callable[[bytes | None, bytes | None, int], None]:
            def apply(key: bytes | None, value: bytes | None, offset: int) -> None:
                last[tp] = offset
            return apply

        ends = {tps[tp]: highwater + 1 for tp, (_, highwater) in todo.items()}
        await RawLogReader(reader).read_to(list(tps.values()), ends, {tps[tp]: apply_to(tp) for tp in todo})
        return last

    async def stop(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            await reader.stop()

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

    async def on_stop(self) -> None:
        await self.guard.stop()

    @Service.task
    async def _watch(self) -> None:
        while not self.should_stop:
            await self.sleep(self.interval)
            if not self.should_stop:
                await self.guard.watch()
