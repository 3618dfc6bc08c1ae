"""Which table partitions a worker owns, and the token its writes to the clusters carry.

The worker's view of its table partitions is loaded in one group generation (``WorkerTable.sync_ownership``
fences ``__mirror_state`` and reads it again at a new one); that generation is the owner epoch of every
destination-mutating call its jobs make (``coordinator.fencing``). A worker that woke from a pause finds
its consumer out of that generation and sends nothing more.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from coordinator.fencing import OwnerFence
from streams.worker.membership import in_generation
from streams.worker.mirror_jobs import MirrorJob, reclaim

log = logging.getLogger(__name__)


class WorkerOwnership:
    """The worker's group generation, its owner fence, and the ownership checks its jobs make."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker
        self.epoch = -1  # the group generation the table partitions' view was loaded in (``fence``)

    def group_consumer(self) -> Any:
        """The worker's aiokafka consumer (None until Faust's consumer thread has made it)."""
        return getattr(getattr(self.worker.app.consumer, "_thread", None), "_consumer", None)

    def group_generation(self) -> int:
        """The group generation the worker's consumer is in now (-1: in none, e.g. fenced out)."""
        coordinator = getattr(self.group_consumer(), "_coordinator", None)
        return getattr(coordinator, "generation", -1) if coordinator is not None else -1

    def fence(self) -> OwnerFence | None:
        """Its group and the generation its view was loaded in; None before any."""
        return OwnerFence(self.worker.config.faust_app_id, self.epoch) if self.epoch >= 0 else None

    def still_owner(self, fence: OwnerFence, partition: int | None) -> bool:
        """Checked before every wave of a job's commands: the worker is still in the generation
        its view was loaded in (a worker that woke from a pause finds it reset), and still owns
        the job's table partition."""
        if self.group_generation() != fence.epoch:
            return False
        return partition is None or partition in self.worker.store.owned

    async def sync(self, owned: set[int], rebalancing: bool) -> None:
        """Table partitions held at a new generation are fenced and read again; the jobs then
        carry that generation as their owner epoch."""
        w = self.worker
        generation = self.group_generation()
        released, loaded = await w.table_partitions.sync_ownership(owned, generation if generation >= 0 else None)
        if generation >= 0 and generation != self.epoch and not rebalancing:
            self.epoch = generation  # the view is this generation's from now on: jobs carry it
        for keys, follow in ((released, "release"), (loaded, "adopt")):
            for key in keys:
                m = w.mirrors.get(key.mirror_name)
                if m is not None:
                    getattr(m.runner, follow)(key)

    async def claim_again_if_current(self, mirrors: list[MirrorJob], pool: Any) -> None:
        """A mirror whose claim was refused at a newer epoch than ours: a stale worker (it changes
        nothing), or the workers' group started its generations again. Only a worker the group
        coordinator holds in its generation claims again (``coordinator.fencing``)."""
        refused = [(m, m.claim_refused) for m in mirrors if m.claim_refused is not None]
        fence = self.fence()
        if not refused or fence is None:
            return
        for m, _ in refused:
            m.claim_refused = None
        if any(e.request_epoch != fence.epoch or e.owner_epoch <= fence.epoch for _, e in refused):
            return  # refused for an older view: the next job claims with the current one
        member = getattr(getattr(self.group_consumer(), "_coordinator", None), "member_id", "")
        c = self.worker.config
        if not member or not await in_generation(c.bootstrap_servers, c.faust_app_id, fence.epoch, member,
                                                 f"{c.client_id}-fence-check"):  # fmt: skip
            return
        loop = asyncio.get_running_loop()
        for m, e in refused:
            try:
                await loop.run_in_executor(pool, reclaim, m, fence, e.owner_epoch)
            except Exception as err:  # noqa: BLE001 - the next job's claim asks again
                log.warning("mirror %s: claiming owner epoch %d again failed: %s", m.runner.mirror_name, fence.epoch, err)



