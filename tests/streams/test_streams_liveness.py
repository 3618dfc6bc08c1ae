"""The loop watchdog: a stuck event loop ends the worker (``worker.unhealthy.exit.ms``)."""

from __future__ import annotations

import asyncio
import select
import signal
import subprocess
import sys
import threading
import time

import pytest

from streams.config import ConfigError, WorkerConfig
from streams.worker.liveness import LoopWatchdog


def _run(block_s: float, limit_ms: int) -> LoopWatchdog:
    """A real loop beating for 0.4 s, then blocked for ``block_s``, then beating again."""
    fired = threading.Event()
    dog = LoopWatchdog(limit_ms, on_stall=fired.set, beat_s=0.05)

    async def main() -> None:
        beats = asyncio.create_task(dog.beat())
        await asyncio.sleep(0.4)
        time.sleep(block_s)  # the loop stuck: no beat, no timer, no health check
        await asyncio.sleep(0.4)
        beats.cancel()

    asyncio.run(main())
    dog.stop()
    dog.stalled = fired.is_set()
    return dog


def test_a_loop_stuck_longer_than_the_limit_is_caught_and_a_short_stall_is_not() -> None:
    assert _run(block_s=1.0, limit_ms=400).stalled
    assert not _run(block_s=0.1, limit_ms=400).stalled


def test_unhealthy_exit_setting() -> None:
    assert WorkerConfig().unhealthy_exit_ms == 120_000
    assert WorkerConfig(unhealthy_exit_ms=0).unhealthy_exit_ms == 0  # never
    with pytest.raises(ConfigError, match="worker.unhealthy.exit.ms"):
        WorkerConfig(unhealthy_exit_ms=1_000)  # below 4 heartbeats: a busy loop would be killed


def test_a_stall_is_logged_once_with_the_stack_the_loop_is_stuck_in(caplog: pytest.LogCaptureFixture) -> None:
    dog = LoopWatchdog(10_000, on_stall=lambda: None, beat_s=0.05, report_s=0.3)

    def stuck_in_a_blocking_call() -> None:
        time.sleep(1.0)

    async def main() -> None:
        beats = asyncio.create_task(dog.beat())
        await asyncio.sleep(0.2)
        stuck_in_a_blocking_call()
        await asyncio.sleep(0.2)
        beats.cancel()

    with caplog.at_level("WARNING", logger="streams.worker.liveness"):
        asyncio.run(main())
    dog.stop()
    lines = [r.getMessage() for r in caplog.records if "has not answered" in r.getMessage()]
    assert len(lines) == 1 and "stuck_in_a_blocking_call" in lines[0] and not dog.stalled


def test_shutdown_timeout_setting() -> None:
    assert WorkerConfig().shutdown_timeout_ms == 15_000
    assert WorkerConfig(shutdown_timeout_ms=0).shutdown_timeout_ms == 0  # never
    with pytest.raises(ConfigError, match="worker.shutdown.timeout.ms"):
        WorkerConfig(shutdown_timeout_ms=-1)


_BLOCKED_STOP = r"""
import asyncio, faust, sys, threading
from streams.worker.worker_role import StopBackstop, _worker_class

backstop = StopBackstop(1.0, lambda: 0, lambda: print("LEFT", flush=True))
Worker = _worker_class(faust.Worker, backstop)

class Stuck(Worker):
    def install_signal_handlers(self):
        super().install_signal_handlers()
        print("READY", flush=True)

    async def stop(self):  # a stop that blocks the loop, as mode's wait for a consumer thread did
        threading.Event().wait()

app = faust.App("backstop-test", broker="memory://", web_enabled=False)
Stuck(app, loglevel="WARNING", quiet=True, redirect_stdouts=False, override_logging=False).execute_from_commandline()
"""


def test_a_stop_that_blocks_the_loop_is_ended_by_the_backstop_out_of_the_group() -> None:
    proc = subprocess.Popen([sys.executable, "-c", _BLOCKED_STOP], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and select.select([proc.stdout], [], [], 60)[0], "the worker did not start"
        assert proc.stdout.readline().strip() == "READY"
        proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        code = proc.wait(20)
        took = time.monotonic() - started
        assert code == 0 and "LEFT" in proc.stdout.read() and 0.9 <= took < 10, (code, took)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
