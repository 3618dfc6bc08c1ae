"""A worker stopped (SIGTERM) in the middle of a rebalance stops promptly and cleanly.

An operator's rolling restart stops one worker, then the next: the second SIGTERM reaches a
worker still in the rebalance the first one's leave began. mode waited for Faust's consumer
thread with a blocking wait on the event loop, while that thread, in the rebalance, waited on the
loop for its callbacks: the worker never stopped (> 30 s, once in 5 runs on a busy machine). The
consumer thread is now waited for off the loop (``streams.state.committed_consumer``), and a stop
that hangs all the same is bounded by ``worker.shutdown.timeout.ms`` (``StopBackstop``). This
test holds the clean path: the stop ends well inside that bound, with no backstop.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from worker_harness import Rig

TOPICS = {"orders": 4, "audit": 2}
MIRROR = "a-to-b"
BACKSTOP_S = 15.0  # worker.shutdown.timeout.ms's default


@pytest.mark.slow
def test_a_worker_stopped_mid_rebalance_exits_cleanly_and_promptly(apache_kafka: object, tmp_path: Path) -> None:
    rig = Rig(tmp_path, apache_kafka.bootstrap, TOPICS, tick=0.1, seed=29)  # type: ignore[attr-defined]
    try:
        rig.start(("B",))
        rig.two_workers_mirroring("B", MIRROR, "A")
        rig.leave_worker("B2")  # B1 begins a rebalance as B2's LeaveGroup lands
        started = time.monotonic()
        code = rig.leave_worker("B1", timeout=BACKSTOP_S + 15)
        took = time.monotonic() - started
        log = rig.worker_log("B1")
        assert "has not finished" not in log, log[-3000:]
        assert code == 0 and took < BACKSTOP_S - 1, took
    finally:
        rig.close()
