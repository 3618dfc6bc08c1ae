"""SIGKILL the worker at seeded points of start, stop and failback; restart it; nothing lost or doubled.

Real processes (the demo's): the cluster-model server, a controller and a worker per destination
cluster, on the session's broker. One workflow, three phases: ``--start`` of ``a-to-b`` on B
(first mirror), ``--stop`` (failover), and ``--start`` of ``b-to-a`` on A (failback). In each
phase the worker is SIGKILLed several times, each after a seeded delay (after the command, then
after each restart, so the points fall on the command's workflow, on the worker's startup and
recovery, and on the steady state after it), and restarted on the same data directory, or, for
a seeded share of the points, on a wiped one (RocksDB and metadata snapshots gone: the state
comes back from the ``__mirror_state`` changelog and the metadata log).

After each phase: every partition reaches the desired state; the changelog history of every
mirror partition goes up one state epoch per write with legal transitions only (nothing lost,
nothing applied twice); the logs converge (the demo's verdict: batches identical, offsets,
DLE >= SLE). Reproduce a failure with ``KIP1279_CRASH_SEED=<the printed seed>``.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

from coordinator.states import MirrorState
from streams.broker import LocalBroker
from worker_harness import Rig, history_problems

SEED = int(os.environ.get("KIP1279_CRASH_SEED", "1279"))
POINTS_PER_PHASE = 7  # 3 phases: 21 crash points
MAX_DELAY = 2.5  # seconds after the command (or the previous restart)
WIPE_SHARE = 0.3


@pytest.mark.slow
def test_worker_sigkill_at_seeded_points_of_start_stop_and_failback(broker: LocalBroker, tmp_path: Path) -> None:
    rng = random.Random(SEED)
    plan = {phase: [(round(rng.uniform(0.0, MAX_DELAY), 2), rng.random() < WIPE_SHARE) for _ in range(POINTS_PER_PHASE)]
            for phase in ("start", "stop", "failback")}  # fmt: skip
    print(f"\ncrash seed {SEED} (KIP1279_CRASH_SEED); points (delay s, wipe): {plan}")
    rig = Rig(tmp_path, broker.bootstrap, {"orders": 2, "audit": 1}, tick=0.1, seed=SEED)
    t0 = time.monotonic()

    def crash(cluster: str, phase: str) -> None:
        for i, (delay, wipe) in enumerate(plan[phase]):
            time.sleep(delay)
            rig.kill_worker(f"worker-{cluster}")
            if wipe:
                rig.wipe(cluster)
            rig.spawn_worker(cluster)
            print(f"[{time.monotonic() - t0:5.1f}s] {phase} point {i}: SIGKILL after {delay}s{', wiped' if wipe else ''}")

    def check_history(cluster: str) -> None:
        history = rig.history(cluster)
        assert len(history) == len(rig.tps), history.keys()
        assert history_problems(history) == [], (SEED, history)

    try:
        rig.start()
        rig.spawn_worker("B")
        rig.spawn_worker("A")
        rig.produce("A", 0.8, SEED)

        # 1. first mirror: start a-to-b on B
        rig.create_mirror("B", "a-to-b", "A")
        rig.start_topics("B", "a-to-b")
        crash("B", "start")
        rig.wait("a-to-b: every partition MIRRORING", lambda: rig.all_in("B", "a-to-b", MirrorState.MIRRORING))
        rig.wait("B to match A", lambda: rig.in_sync("A", "B"))
        check_history("B")
        assert rig.log_problems("A", "B") == []

        # 2. failover: stop a-to-b
        rig.stop_topics("B", "a-to-b")
        crash("B", "stop")
        rig.wait("a-to-b: every partition STOPPED", lambda: rig.all_in("B", "a-to-b", MirrorState.STOPPED))
        rig.wait("B's topics writable", lambda: not any(rig.read_only("B").values()), 30)
        check_history("B")
        assert rig.log_problems("A", "B", offsets=False) == []
        rig.produce("B", 0.8, SEED + 1)

        # 3. failback: start b-to-a on A
        rig.create_mirror("A", "b-to-a", "B")
        rig.start_topics("A", "b-to-a")
        crash("A", "failback")
        rig.wait("b-to-a: every partition MIRRORING", lambda: rig.all_in("A", "b-to-a", MirrorState.MIRRORING))
        rig.wait("A to match B", lambda: rig.in_sync("B", "A"))
        check_history("A")
        assert all(rig.read_only("A").values())
        assert rig.log_problems("B", "A") == []
        check_history("B")  # B's worker wrote nothing after its stop
        assert rig.all_in("B", "a-to-b", MirrorState.STOPPED)
        print(f"[{time.monotonic() - t0:5.1f}s] done: 21 crash points, histories clean, logs converged")
    finally:
        rig.close()
