"""The copy path's scheduling: a parked partition whose source moved is copied at once.

The data watch reports moved partitions on its own thread; ``CopyPath.moved`` (on the loop)
starts the mirror's copy job (``streams.worker.mirror_jobs.run_copy``) on the pool, with no
tick record, no Faust event and no workflow step: a record's way from A to B is the watch's
report, one fetch and one append. A mirror runs one job at a time, so a copy wanted while
another job runs starts when it ends; a step (an event of a table partition) waits for a
running job (a copy, or another table partition's step: ``streams.worker.steps``) rather than
skipping the mirror, so a desired-state change (a STOP above all) is never left to a later tick by it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from streams.worker.mirror_jobs import MirrorJob, cyclic_gc_paused, run_copy
from streams.worker.profiling import profiled_job

log = logging.getLogger(__name__)


class CopyPath:
    """The copy jobs of one worker (see the module docstring)."""

    def __init__(self, worker: Any) -> None:
        self.w = worker  # the ``CoordinatorWorker``
        self.wanted: set[str] = set()  # mirrors with a report not copied yet (their job was busy)
        self.steps_waiting: dict[str, int] = {}  # per mirror: steps waiting for its copy job to end
        self.jobs = 0
        self.copied = 0
        self._since: dict[str, float] = {}  # per wanted mirror: when its first report waited
        self.waited_s = 0.0  # reports' waits behind another job of their mirror: the longest of the period
        self._logged = time.monotonic()
        # ``mirror.copy.linger.ms``: the data watch waits this long after a report before its next
        # long poll, so one report (one copy job) takes every partition that moves meanwhile
        # (``TickPlan.watch`` hands it over): a copy starts at once on a report.
        self.linger_s = getattr(getattr(worker, "config", None), "copy_linger_ms", 0) / 1000

    def moved(self, name: str) -> bool:
        """The data watch of mirror ``name`` reported moved partitions: copy them. False when the
        copy path cannot (no runner ready, or the worker is not caught up): the caller ticks."""
        m = self.w.mirrors.get(name)
        if m is None or not self.takes(name):
            return False
        if self._after_job(name, m):
            return True
        self._start(m)
        return True

    def _after_job(self, name: str, m: MirrorJob) -> bool:
        """Whether a job of ``m`` runs (or a step waits for one): the copy is then wanted, and
        started when that job (or the waiting step's) ends (``job_done``)."""
        if m.busy is None and not self.steps_waiting.get(name):
            return False
        self.wanted.add(name)
        self._since.setdefault(name, time.monotonic())
        return True

    def takes(self, name: str) -> bool:
        """Whether mirror ``name``'s moved partitions are copied here (else its steps fetch them)."""
        m = self.w.mirrors.get(name)
        return m is not None and not m.retired and self.w.caught_up.is_set()

    def job_done(self, m: MirrorJob) -> None:
        """A job of ``m`` ended (its ``busy`` is cleared): a copy wanted meanwhile starts now."""
        name = m.runner.mirror_name
        # A step waiting for the job goes first; its own job's end starts the copy.
        if (name in self.wanted and not self.steps_waiting.get(name) and self.w.mirrors.get(name) is m
                and not m.retired):  # fmt: skip
            self.wanted.discard(name)
            self._start(m)

    async def settle(self, m: MirrorJob, timeout: float) -> None:
        """Wait for ``m``'s job, if one runs (a copy, or another table partition's step): a step
        must not skip the mirror for it; a copy wanted meanwhile waits for the step."""
        fut = m.busy
        if fut is None:
            return
        name = m.runner.mirror_name
        self.steps_waiting[name] = self.steps_waiting.get(name, 0) + 1
        try:
            await asyncio.wait_for(asyncio.shield(fut), timeout)  # type: ignore[arg-type]
        except (asyncio.TimeoutError, Exception):  # noqa: BLE001 - its error is logged by _job_done
            pass
        finally:
            self.steps_waiting[name] -= 1

    def copying(self, name: str) -> None:
        """A copy of mirror ``name`` begins (a copy job, or one between the parts of a step's
        topic level or sync): the reports waiting for it are served."""
        now = time.monotonic()
        since = self._since.pop(name, None)
        if since is not None:
            self.waited_s = max(self.waited_s, now - since)
        if now - self._logged >= 10.0:
            polls = sum(getattr(m.runner.interest.watch, "polls", 0) for m in list(self.w.mirrors.values()))
            log.info("copy path: %d job(s), %d partition(s) copied, %d long poll(s), %d tick(s); longest wait behind another job %.0f ms",
                     self.jobs, self.copied, polls, getattr(getattr(self.w, "ticks", None), "sent", -1), self.waited_s * 1000)
            self._logged, self.waited_s = now, 0.0

    def _start(self, m: MirrorJob) -> None:
        w = self.w
        loop = asyncio.get_running_loop()
        m.copying = True
        fut = loop.run_in_executor(w.pool, self._job, m, w.clock_ms())
        m.busy = fut
        self.jobs += 1
        fut.add_done_callback(lambda f, m=m: self._done(m, f))

    def _job(self, m: MirrorJob, now_ms: int) -> int:
        with cyclic_gc_paused(), profiled_job():
            return run_copy(self.w, m, now_ms)

    def _done(self, m: MirrorJob, fut: Any) -> None:
        m.copying = False
        if not fut.cancelled() and fut.exception() is None:
            self.copied += fut.result()
        self.w._job_done(m, fut)
