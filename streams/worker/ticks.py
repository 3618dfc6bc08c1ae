"""Which table partitions get a tick, and when: a quiet table partition gets none.

A tick is a record on the tick topic, straight to one table partition: the partition agent
steps that table partition inside an event of it (the RocksDB store files a state write under
the current event's partition, and the agent's one stream orders the steps with the
desired-state events). Each one costs a produce, a fetch and a Faust event, and 8 table
partitions x 5 ticks a second were most of an idle worker's CPU and of its broker's.

So the timer ticks a table partition only when a step there would find something to do:

- its mirror partitions: a runner holds hot ones there (``Interest.wanted``: new keys, a desired
  state or a state that moved, a parked partition whose source moved, or one that waits on a
  clock: backoff, FAILED retries), or writes are queued for it;
- the worker: its assignment moved, a mirror has no runner yet, or its runner is retired or runs
  with old configs (every owned table partition);
- the clock: a runner's metadata sync (epoch checks, configs, groups, ACLs) or topic level is
  due (one table partition: either runs in any job of that runner), or nothing stepped the
  table partition for ``idle_interval_s`` (a last resort, never the way anything is meant to run);
- a desired-state event the agent left to the next tick (a burst).

A tick already on its way (sent after the table partition's last step began, not long ago) is
not sent again. A parked partition the data watch reports moved (``DataWatch.on_moved``) is
copied at once by the copy path (``streams.worker.copier``), with no tick; where the copy path
cannot take it (no runner yet), its table partition is ticked at once, not at the next timer pass.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from coordinator.partition_state import MirrorPartitionKey
from coordinator.ports import TopicPartition
from streams.worker.mirror_jobs import job_topics

log = logging.getLogger(__name__)
# As long as a metadata refresh (metadata.refresh.interval.ms): each of these ticks is a produce,
# a fetch and a commit on the broker, and 8 table partitions every 5 s were most of what an idle
# worker asked of it.
IDLE_INTERVAL_S = 30.0
_IN_FLIGHT_MS = 2000  # a tick not stepped by then is sent again (a lost record never stalls a partition)


class TickPlan:
    """The ticks of one worker (see the module docstring)."""

    def __init__(self, worker: Any, idle_interval_s: float = IDLE_INTERVAL_S) -> None:
        self.w = worker  # the ``CoordinatorWorker`` (its app module imports this one)
        self.idle_ms = int(idle_interval_s * 1000)
        self.sent_ms: dict[int, int] = {}  # per table partition: when its last tick was sent
        self.asked: set[int] = set()  # for the next pass whatever it finds (a burst of events)
        self._woken: set[int] = set()  # reported by a data watch, not sent yet
        self._task: asyncio.Task[None] | None = None
        self.sent = 0

    def ask(self, partition: int) -> None:
        self.asked.add(partition)

    def in_flight(self, partition: int, now_ms: int) -> bool:
        sent = self.sent_ms.get(partition)
        return (sent is not None and sent > self.w._last_step_ms.get(partition, -1)
                and now_ms - sent < _IN_FLIGHT_MS)  # fmt: skip

    def wanted(self, now_ms: int) -> list[int]:
        """The owned table partitions to tick now."""
        w = self.w
        owned = w.owned_partitions()
        if owned != w.store.owned:
            return self._not_in_flight(owned, now_ms)  # the next step takes the assignment on
        out = set(self.asked) & owned
        self.asked.clear()
        versions = {p: w.table_partitions.keys_of(p) for p in owned}
        mirrors = w.image.mirrors
        for name in mirrors.mirrors:
            m = w.mirrors.get(name)
            current = mirrors.get(name)
            stale = current is not None and m is not None and m.configs is not None and current.configs != m.configs
            if m is None or m.retired or stale:
                return self._not_in_flight(owned, now_ms)  # a runner to build, rebuild or reconfigure
            r = m.runner
            if owned and r.due(now_ms, job_topics(w, m, w.desired_for(name))):
                out.add(min(owned))
            # Partitions the data watch reported moved are the copy path's (``streams.worker.copier``).
            copier = getattr(w, "copier", None)
            copied = copier is not None and copier.takes(name)
            out |= r.interest.wanted(w.store.partition_of, versions, with_moved=not copied)
        store = w.store
        for p in owned:
            if (store.pending.get(p) or store.pending_lme.get(p) or store.deletes.get(p)
                    or now_ms - w._last_step_ms.get(p, -(1 << 62)) >= self.idle_ms):  # fmt: skip
                out.add(p)
        return self._not_in_flight(out, now_ms)

    def _not_in_flight(self, partitions: set[int], now_ms: int) -> list[int]:
        return sorted(p for p in partitions if not self.in_flight(p, now_ms))

    async def send(self, partitions: list[int], now_ms: int) -> None:
        value = self.w.tick_value(now_ms)
        for p in partitions:
            self.sent_ms[p] = now_ms
            await self.w.tick_topic.send(key=b"tick", value=value, partition=p)
            self.sent += 1

    # ---------------------------------------------------------------- the data watch's wake-ups

    def watch(self, name: str, runner: Any, loop: asyncio.AbstractEventLoop) -> None:
        """Ticks the table partitions of ``runner``'s parked partitions as their source moves."""
        watch = runner.interest.watch
        if watch is None:
            return

        copier = getattr(self.w, "copier", None)
        if copier is not None:
            watch.linger_s = copier.linger_s  # ``mirror.copy.linger.ms``: the watch batches its reports

        def moved(tps: set[TopicPartition]) -> None:
            if not loop.is_closed():  # shutting down: nothing to step
                loop.call_soon_threadsafe(self._moved, name, tps)

        watch.on_moved = moved

    def _moved(self, name: str, tps: set[TopicPartition]) -> None:
        copier = getattr(self.w, "copier", None)
        if copier is not None and copier.moved(name):
            return  # copied at once (``streams.worker.copier``): no tick
        partition_of = self.w.store.partition_of
        first = not self._woken
        self._woken.update(partition_of(MirrorPartitionKey(name, tp.topic_id, tp.partition)) for tp in tps)
        if first:
            self._task = asyncio.get_running_loop().create_task(self._wake())

    async def _wake(self) -> None:
        woken, self._woken = self._woken, set()
        if not self.w.caught_up.is_set():
            return
        now = self.w.clock_ms()
        try:
            await self.send(self._not_in_flight(woken & self.w.owned_partitions(), now), now)
        except Exception as e:  # noqa: BLE001 - the next timer pass finds them (the runner's hot set)
            log.warning("tick after a data watch report failed: %s", e)
