"""Table partitions stepped side by side: a bounded pipeline.

Each owned table partition's steps run as a task of their own (``StepTasks``), one at a time per
table partition; an event of a table partition whose step runs asks for one more step after it.
A step's rounds (``step_rounds``) are: the mirror's job on the pool, then the round's writes made
durable (the changelog's acknowledgement), then the next round. A mirror still runs one job at a
time (its runner is not shared between threads), so while table partition ``p`` waits for its
writes to be acknowledged, the job of table partition ``q`` runs: the acknowledgement, the
changelog's encode and the port round trips of one overlap the other's CPU. A mass failover
stepped a worker's table partitions strictly one after the other (~0.1-0.3 s of acknowledgement
per round, two rounds each). The durability rule stands: a table partition's next round starts
only after its writes were acknowledged, and reads of keys whose writes are in flight see the
durable state before them (``WorkerStateStore``), so another table partition's job (the topic
level above all) never acts on a state that is not durable.

A step that finds its mirror busy (another table partition's job, or a copy) waits for it (at
most a step timeout per owned table partition) rather than skipping the mirror: a skipped table
partition was left to a later tick.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from coordinator.partition_state import MirrorPartitionKey

log = logging.getLogger(__name__)


class StepTasks:
    """One step task per table partition at a time; partitions step side by side.

    A rebalance waits for the jobs under way and their writes (``hold``), as Faust waits for an
    agent's event in progress before it revokes partitions: a revoked table partition's last
    writes are durable before its next owner steps it. A step waiting for its mirror gives up,
    and no step starts another round (a rebalance waits for one job per mirror, not for every
    table partition's). Steps asked for meanwhile run after the rebalance (``resume``)."""

    def __init__(self, step: Callable[[int], Awaitable[None]], rebalancing: Callable[[], bool] = lambda: False) -> None:
        self._step = step
        self._rebalancing = rebalancing
        self.tasks: dict[int, asyncio.Task[None]] = {}
        self._again: set[int] = set()  # asked for while their step ran: one more step after it
        self._held: set[int] | None = None  # during a rebalance: the steps asked for meanwhile

    @property
    def holding(self) -> bool:
        return self._held is not None

    def request(self, partition: int) -> None:
        if self._held is not None and not self._rebalancing():
            self.resume()  # an event after the rebalance, should its end not have been signalled
        if self._held is not None:
            self._held.add(partition)
        elif partition in self.tasks:
            self._again.add(partition)
        else:
            self.tasks[partition] = asyncio.get_running_loop().create_task(self._run(partition))

    async def _run(self, partition: int) -> None:
        try:
            while True:
                self._again.discard(partition)
                try:
                    await self._step(partition)
                except asyncio.CancelledError:
                    raise
                except Exception:  # noqa: BLE001 - one bad round must not stop the partition's steps
                    log.exception("stepping table partition %d failed", partition)
                if self._held is not None:  # a rebalance cut it short, or more was asked: after it
                    self._again.discard(partition)
                    self._held.add(partition)
                    return
                if partition not in self._again:
                    return
        finally:
            self.tasks.pop(partition, None)

    async def hold(self, timeout: float, *_: object, **__: object) -> None:
        """A rebalance begins: no new step, and the steps under way end (at most ``timeout``)."""
        if self._held is None:
            self._held = set()
        tasks = list(self.tasks.values())
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)

    def resume(self, *_: object, **__: object) -> None:
        """The rebalance is over: the steps asked for meanwhile run (each checks its ownership)."""
        held, self._held = self._held or set(), None
        for p in sorted(held):
            self.request(p)

    async def stop(self) -> None:
        self._held = set()
        tasks = list(self.tasks.values())
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def job_when_free(w: Any, m: Any, keys: list[MirrorPartitionKey], partition: int, waited: list[float]) -> bool:
    """Runs the mirror's job for ``partition`` once the mirror runs no other job; True once the
    job ended or ran past ``w.step_timeout`` (still running: its mirror stays busy), False if it
    never started. ``waited`` gets the seconds waited. The wait is bounded by a step timeout per
    owned table partition (ahead of it, at most one job of each other one, or a copy)."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    bound = w.step_timeout * max(1, len(w.store.owned))
    while m.busy is not None:  # another table partition's job or a copy: wait for it, do not skip
        left = start + bound - loop.time()
        if left <= 0 or w.steps.holding:
            return False  # (a rebalance: asked again after it)
        await w.copier.settle(m, left)
    waited.append(loop.time() - start)
    if w.steps.holding:
        return False
    if m.retired or w.mirrors.get(m.runner.mirror_name) is not m:
        return False  # rebuilt or closed meanwhile: the next step takes the new one
    fut = loop.run_in_executor(w.pool, w._paused_job, m, keys, w.clock_ms(), partition)
    m.busy = fut
    fut.add_done_callback(lambda f, m=m: w._job_done(m, f))
    try:
        await asyncio.wait_for(asyncio.shield(fut), w.step_timeout)
    except (asyncio.TimeoutError, Exception):  # noqa: BLE001 - a failed job is logged by _job_done
        pass
    return True


async def step_rounds(w: Any, partition: int, by_mirror: dict[str, list[MirrorPartitionKey]]) -> None:
    """Up to ``w.max_rounds`` rounds of ``partition``: every mirror's job, then the writes durable."""
    fence_of = getattr(w, "owner_fence", None)
    fence = fence_of() if fence_of is not None else None
    for _ in range(w.max_rounds):
        if partition not in w.store.owned or w.steps.holding:
            break  # released meanwhile (its new owner steps it), or a rebalance begins
        waits, waited = [], []
        for name, mkeys in by_mirror.items():
            m = await w._mirror(name)
            if m is not None:
                waits.append(asyncio.ensure_future(job_when_free(w, m, mkeys, partition, waited)))
        if not waits:
            break
        t0 = time.perf_counter()
        await asyncio.wait(waits)  # each bounded by the step timeout
        if not any(t.result() for t in waits):
            break
        t1 = time.perf_counter()
        if fence is not None and not w.still_owner(fence, partition):
            break  # woke from a pause, say: its writes wait for the new generation's view (then dropped)
        written = await w.table_partitions.persist(partition)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("table partition %d: waited %.3fs for its mirror, jobs %.3fs, %d write(s) durable in %.3fs",
                      partition, max(waited, default=0.0), t1 - t0 - max(waited, default=0.0), written,
                      time.perf_counter() - t1)  # fmt: skip
        if not written:
            break
