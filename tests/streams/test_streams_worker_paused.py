"""A worker paused longer than its session timeout, woken after another took its table partitions
over (issue #35): the operator's bad day, with real worker processes.

Two workers of B, a mirror MIRRORING. One worker is paused (SIGSTOP, as a long GC pause or a
frozen VM does) and the stop is issued: the other worker takes the paused one's table partitions
over (its session expires; on noida-db the controller removes the member) and completes the stop.
Then the paused worker is resumed (SIGCONT): whatever it had decided before the pause it may now
try to write, and it rejoins, possibly getting the same table partitions back at a new
generation. Its late writes must be refused by the broker (its transactional producers were
fenced by the takeover) and, whatever it holds after the rejoin, it must read from the changelog.

Checked on the changelog every reader sees (``read_committed``): every partition STOPPED, one
state epoch per write and legal transitions only for every mirror partition (the woken worker of
the bug wrote STOPPED again at the same state epoch, and PREPARING after MIRRORING); and B's
topics writable.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from coordinator.states import MirrorState
from streams.brokers.noida import LocalBroker
from worker_harness import Rig, history_problems

TIMING = {"--session-timeout-ms": "6000", "--heartbeat-interval-ms": "1000", "--rebalance-timeout-ms": "20000"}
PAUSE_S = 15.0  # beyond the session timeout: the member is gone when it wakes
MIRROR = "a-to-b"


@pytest.mark.slow
@pytest.mark.brokers("noida-db", "apache-kafka")
def test_a_worker_woken_after_a_takeover_writes_nothing_stale(kafka_broker: LocalBroker, tmp_path: Path) -> None:
    rig = Rig(tmp_path, kafka_broker.bootstrap, {"orders": 4, "audit": 2}, tick=0.1)
    rig.group_timing = dict(TIMING)
    t0 = time.monotonic()
    try:
        rig.start(("B",))
        w1 = rig.spawn_worker("B", "worker-B1", rig.data_dir("B", "1"))
        w2 = rig.spawn_worker("B", "worker-B2", rig.data_dir("B", "2"))
        rig.wait("both workers holding table partitions", lambda: all(rig.owners("B").get(w) for w in (w1, w2)), 60)
        rig.produce("A", 0.5, 7)
        rig.create_mirror("B", MIRROR, "A")
        rig.start_topics("B", MIRROR)
        rig.wait(f"{MIRROR} MIRRORING", lambda: rig.all_in("B", MIRROR, MirrorState.MIRRORING), 60)
        paused_holds = set(rig.owners("B")[w2])

        rig.pause_worker(w2)
        paused_at = time.monotonic()
        rig.stop_topics("B", MIRROR)
        rig.wait(f"{w1} to take {w2}'s table partitions over and stop every partition",
                 lambda: rig.all_in("B", MIRROR, MirrorState.STOPPED), 60)  # fmt: skip
        print(f"[{time.monotonic() - t0:5.1f}s] {MIRROR} STOPPED by {w1} ({w2} held {sorted(paused_holds)})")
        time.sleep(max(0.0, PAUSE_S - (time.monotonic() - paused_at)))
        rig.workers[w2][1].send_signal(signal.SIGCONT)
        print(f"[{time.monotonic() - t0:5.1f}s] {w2} resumed after {time.monotonic() - paused_at:.1f}s")

        # It rejoins (a new generation) and the two share the table partitions again.
        rig.wait("both workers back in the group with table partitions",
                 lambda: all(rig.owners("B").get(w) for w in (w1, w2)), 60)  # fmt: skip
        rig.wait("B's topics writable", lambda: not any(rig.read_only("B").values()), 30)
        time.sleep(2.0)  # any late write of the woken worker would have landed by now
        history = rig.history("B")
        assert len(history) == len(rig.tps) and history_problems(history) == [], history
        assert rig.all_in("B", MIRROR, MirrorState.STOPPED)
        assert rig.worker_alive(w1) and rig.worker_alive(w2)
        log = rig.worker_log(w2)
        fenced = [line for line in log.splitlines() if "fenced this worker's state writes" in line]
        print(f"[{time.monotonic() - t0:5.1f}s] {w2}'s writes refused by the broker after the pause: {len(fenced)}")
    finally:
        rig.close()
