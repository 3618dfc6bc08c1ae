"""The loop watchdog: a stuck event loop ends the worker (``worker.unhealthy.exit.ms``)."""

from __future__ import annotations

import asyncio
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
