"""A worker's way out: it exits for a supervisor to restart it once it can no longer work.

``WorkerExit`` watches the two ways a running worker stops being useful without its process
ending on its own: its consumer drops out of the group for good (``EXIT_GROUP_LOST``, checked
every heartbeat interval, from before the app starts), or its Faust app crashes (``EXIT_CRASHED``: a task, timer or service
of it raised). Either sets ``exit_code`` once and calls ``on_fatal`` (``run_worker`` sets it to a
stop as SIGTERM's, bounded in time). It keeps the group member id last held, for a static member
to leave its group with on the way out. (A stuck event loop is ``streams.worker.liveness``'s.)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from streams.worker.membership import coordination_failure, member_id

log = logging.getLogger("streams.worker.app")  # the worker's own lines, as before the split

EXIT_GROUP_LOST = 1  # the worker is out of its group for good
EXIT_CRASHED = 70  # its Faust app crashed (sysexits' EX_SOFTWARE)


class WorkerExit:
    def __init__(self, app: Any, group_id: str, group_consumer: Callable[[], Any]) -> None:
        self.app = app
        self.group_id = group_id
        self.group_consumer = group_consumer  # the worker's aiokafka consumer, None until made
        self.exit_code = 0
        self.on_fatal: Callable[[], None] = lambda: None
        self.member_id = ""  # the group member id last held: a static member leaves with it

    def note_member(self) -> None:
        self.member_id = member_id(self.group_consumer()) or self.member_id

    async def watch_membership(self) -> None:
        """``EXIT_GROUP_LOST`` once the consumer has stopped taking part in the group: the worker
        would stay up with no table partitions, and nobody would restart it."""
        consumer = self.group_consumer()
        self.member_id = member_id(consumer) or self.member_id
        reason = coordination_failure(consumer)
        if reason is None or self.exit_code:
            return
        log.critical("the worker's consumer is out of group %s: %s; exiting with code %d for a supervisor "
                     "to restart it", self.group_id, reason, EXIT_GROUP_LOST)  # fmt: skip
        self.exit_code = EXIT_GROUP_LOST
        self.on_fatal()

    async def watch_membership_every(self, seconds: float) -> None:
        """``watch_membership`` from before the app starts (``run_worker``): Faust's timers start only
        after table recovery, which a consumer whose group coordination died before its first
        assignment never ends."""
        while not self.exit_code:
            await asyncio.sleep(seconds)
            await self.watch_membership()

    async def watch_crash(self) -> None:
        """``EXIT_CRASHED`` once the Faust app has crashed: Faust then stops the app, a stop that
        can hang (a commit through the crashed consumer), and the worker would stay up doing nothing.

        Runs on the loop from before the app starts (``run_worker``): app tasks start only after
        table recovery, and a crash can come sooner. Ends quietly on a clean stop."""
        await self.app.wait_until_stopped()  # stopped or crashed: mode sets one of its two events
        if not self.app.crashed or self.exit_code:
            return
        self.note_member()
        log.error("the worker's Faust app crashed: %r; exiting with code %d for a supervisor to restart it",
                  self.app.crash_reason, EXIT_CRASHED)  # fmt: skip
        self.exit_code = EXIT_CRASHED
        self.on_fatal()
