"""A progress bar on stderr for long audit runs, fed by Spark's status tracker.

Each query runs under its own Spark job group; a daemon thread polls the tracker for that
group's stages and draws ``[2/10] name [#####-----] 37/80 tasks 4.2s``. Nothing is drawn
for the first ``delay_s`` of a query, so short runs stay quiet.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from pyspark import SparkContext

WIDTH = 24


class Progress:
    def __init__(
        self, sc: SparkContext, total: int, *, enabled: bool, stream: TextIO | None = None, delay_s: float = 0.5
    ) -> None:
        self.sc = sc
        self.total = total
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.delay_s = delay_s
        self.index = 0
        self.drawn = False

    def _tasks(self, group: str) -> tuple[int, int]:
        tracker = self.sc.statusTracker()
        done = total = 0
        for job_id in tracker.getJobIdsForGroup(group):
            job = tracker.getJobInfo(job_id)
            for stage_id in job.stageIds if job else ():
                stage = tracker.getStageInfo(stage_id)
                if stage is not None:
                    done += stage.numCompletedTasks
                    total += stage.numTasks
        return done, total

    def _draw(self, name: str, started: float, group: str) -> None:
        try:
            done, total = self._tasks(group)
        except Exception:  # the tracker is best effort; a bar must never fail the audit
            done, total = 0, 0
        frac = done / total if total else 0.0
        bar = "#" * int(frac * WIDTH) + "-" * (WIDTH - int(frac * WIDTH))
        line = f"[{self.index}/{self.total}] {name:<28} [{bar}] {done}/{total} tasks {time.monotonic() - started:6.1f}s"
        self.stream.write("\r" + line)
        self.stream.flush()
        self.drawn = True

    @contextmanager
    def query(self, name: str) -> Iterator[None]:
        self.index += 1
        group = f"audit-{name}-{self.index}"
        self.sc.setJobGroup(group, f"audit query {name}")
        if not self.enabled:
            yield
            return
        stop = threading.Event()
        started = time.monotonic()

        def poll() -> None:
            if stop.wait(self.delay_s):
                return
            while not stop.is_set():
                self._draw(name, started, group)
                stop.wait(0.25)

        thread = threading.Thread(target=poll, name="audit-progress", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
            if self.drawn:
                tty = getattr(self.stream, "isatty", lambda: False)()
                self.stream.write("\r\x1b[2K" if tty else "\n")  # clear the bar: tables follow
                self.stream.flush()
                self.drawn = False
