"""Two workers of one cluster (same Faust app id, the table partitions split between them) and a
rebalance in the middle of each workflow.

Start: ``--start`` with both workers up; one is SIGKILLed mid-way and a replacement joins (two
rebalances while partitions are PREPARING). Stop: ``--stop`` with both up; one is SIGKILLed
mid-way, so the other takes over its table partitions from the ``__mirror_state`` changelog and
must finish every partition. After each: every partition in the desired state, a clean history
per mirror partition (one state epoch per write, legal transitions only), the topics writable
after the stop, and the logs converged.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from coordinator.states import MirrorState
from streams.broker import LocalBroker
from worker_harness import Rig, history_problems

TOPICS = {"orders": 4, "audit": 2}  # 6 mirror partitions over 4 table partitions


@pytest.mark.slow
@pytest.mark.skip(reason="flaky: 1 of 4 runs timed out waiting for MIRRORING after the mid-start SIGKILL "
                         "(eviction of the live member too, see worker_harness.evict_dead_members); not diagnosed yet")
def test_two_workers_survive_a_rebalance_mid_start_and_mid_stop(broker: LocalBroker, tmp_path: Path) -> None:
    rig = Rig(tmp_path, broker.bootstrap, TOPICS, tick=0.1)
    try:
        rig.start(clusters=("B",))
        w1 = rig.spawn_worker("B", "worker-B1", rig.data_dir("B", "1"))
        w2 = rig.spawn_worker("B", "worker-B2", rig.data_dir("B", "2"))
        rig.produce("A", 0.8, 21)
        rig.create_mirror("B", "a-to-b", "A")
        rig.start_topics("B", "a-to-b")
        time.sleep(1.0)
        # the survivor is evicted too: it rejoins at once (as after a session timeout, see the harness)
        rig.kill_worker(w2)
        w3 = rig.spawn_worker("B", "worker-B3", rig.data_dir("B", "3"))
        rig.wait("a-to-b MIRRORING", lambda: rig.all_in("B", "a-to-b", MirrorState.MIRRORING))
        rig.wait("B to match A", lambda: rig.in_sync("A", "B"))
        history = rig.history("B")
        assert len(history) == sum(TOPICS.values()) and history_problems(history) == [], history
        assert rig.log_problems("A", "B") == []
        assert rig.worker_alive(w1) and rig.worker_alive(w3)

        rig.stop_topics("B", "a-to-b")
        time.sleep(0.5)
        rig.kill_worker(w1)  # mid-stop: w3 takes over w1's table partitions
        rig.wait("a-to-b STOPPED by the remaining worker", lambda: rig.all_in("B", "a-to-b", MirrorState.STOPPED))
        rig.wait("B's topics writable", lambda: not any(rig.read_only("B").values()), 30)
        history = rig.history("B")
        assert len(history) == sum(TOPICS.values()) and history_problems(history) == [], history
        assert rig.log_problems("A", "B", offsets=False) == []
        assert rig.worker_alive(w3)
    finally:
        rig.close()
