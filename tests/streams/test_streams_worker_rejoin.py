"""A worker whose disk was replaced rejoins (issue #24 item 3).

Real processes (the demo's): the cluster-model server, B's controller and one worker of B, on
the test's broker. While ``a-to-b`` mirrors with producers running on A, the worker is SIGKILLed
at seeded points and restarted on an empty data directory (a replaced disk, a fresh pod volume):
it makes a new ``group.instance.id``, so nothing of the dead process's member is taken over.
Some points kill the restarted worker again before it has settled (during its start-up and its
first rebalance), so dead members pile up.

After each settled point, within the session timeout plus the rebalance timeout of the last
restart: the group is that one worker holding every table partition, none of the dead
processes' members left, and records produced on A after the restart reach B. Nothing outside
the product touches the group: on noida-db, which never expires a member, it is the controller
that removes the dead ones (``streams.admin.members``); Apache Kafka expires them itself. At the
end a ``--stop`` completes, every mirror partition's changelog history is clean (one state epoch
per write, legal transitions) and the logs converge, and every member the controller removed
was a killed process's, removed after its kill: never a live worker. Reproduce a failure with
``KIP1279_REJOIN_SEED=<the printed seed>``.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import time
from datetime import datetime
from pathlib import Path

import pytest

from coordinator.states import MirrorState
from streams.brokers.noida import LocalBroker
from worker_harness import Rig, history_problems

SEED = int(os.environ.get("KIP1279_REJOIN_SEED", "2403"))
# Short sessions (6 s is the least a broker accepts); a rebalance timeout a loaded machine does
# not reach (see worker_harness.GROUP_TIMING).
TIMING = {"--session-timeout-ms": "6000", "--heartbeat-interval-ms": "1000", "--rebalance-timeout-ms": "20000"}
BOUND_S = (int(TIMING["--session-timeout-ms"]) + int(TIMING["--rebalance-timeout-ms"])) / 1000
POINTS = 7
MAX_DELAY = 2.5  # seconds after the worker was mirroring again (or after the previous restart)
UNSETTLED_SHARE = 0.3  # points after which the worker is killed again before it settles
STATE_PARTITIONS = 4
WORKER = "worker-B"


@pytest.mark.slow
@pytest.mark.brokers("noida-db", "apache-kafka")
def test_a_worker_restarted_on_an_empty_data_directory_is_mirroring_again_within_session_plus_rebalance_timeout(
        kafka_broker: LocalBroker, tmp_path: Path) -> None:  # fmt: skip
    rng = random.Random(SEED)
    plan = [(round(rng.uniform(0.0, MAX_DELAY), 2), i < POINTS - 1 and rng.random() < UNSETTLED_SHARE)
            for i in range(POINTS)]  # fmt: skip
    print(f"\nrejoin seed {SEED} (KIP1279_REJOIN_SEED); points (delay s, killed again before settling): {plan}")
    rig = Rig(tmp_path, kafka_broker.bootstrap, {"orders": 2, "audit": 1}, state_partitions=STATE_PARTITIONS,
              tick=0.1, seed=SEED)  # fmt: skip
    rig.group_timing = dict(TIMING)
    disk = rig.data_dir("B", "1")  # the worker's own: the controller's stays
    t0 = time.monotonic()
    took: list[float] = []
    killed_at: dict[str, float] = {}  # group.instance.id -> wall-clock time of its SIGKILL

    def sole_member(dead: set[str]) -> bool:
        members = rig.group_members("B")
        return (len(members) == 1 and members[0][0] not in dead
                and rig.owners("B") == {WORKER: set(range(STATE_PARTITIONS))})  # fmt: skip

    def identity() -> str:
        path = disk / f"B{rig.tag}" / "worker.id"
        return path.read_text().strip() if path.exists() else "-"

    try:
        rig.start(("B",))
        rig.spawn_worker("B", WORKER, disk)
        rig.start_producers("A", SEED)
        rig.create_mirror("B", "a-to-b", "A")
        rig.start_topics("B", "a-to-b")
        rig.wait("a-to-b MIRRORING", lambda: rig.all_in("B", "a-to-b", MirrorState.MIRRORING), 60)

        dead: set[str] = set()
        for i, (delay, again) in enumerate(plan):
            time.sleep(delay)
            dead |= {m for m, _, _ in rig.group_members("B")}
            was = identity()
            rig.kill_worker(WORKER)
            killed_at[was] = time.time()
            shutil.rmtree(disk, ignore_errors=True)  # the replaced disk: its group.instance.id goes with it
            rig.spawn_worker("B", WORKER, disk)
            restarted = time.monotonic()
            print(f"[{restarted - t0:5.1f}s] point {i}: SIGKILL of {was} after {delay}s, data directory wiped")
            if again:
                continue
            rig.wait(f"{WORKER}'s new member alone in its group with every table partition",
                     lambda: sole_member(dead), BOUND_S)  # fmt: skip
            assert identity() not in ("-", was)
            owned = time.monotonic() - restarted
            rig.quiet_producers("A")  # what A has now must reach B
            rig.wait("a-to-b MIRRORING, B matching A",
                     lambda: rig.all_in("B", "a-to-b", MirrorState.MIRRORING) and rig.in_sync("A", "B"),
                     max(0.0, restarted + BOUND_S - time.monotonic()))  # fmt: skip
            took.append(time.monotonic() - restarted)
            print(f"[{time.monotonic() - t0:5.1f}s] {identity()} held every table partition {owned:.1f}s after the "
                  f"restart, B matched A {took[-1]:.1f}s after it")
            rig.start_producers("A", SEED + i + 1)

        # The failover completes: no dead member holds table partitions the stop needs.
        rig.quiet_producers("A")
        rig.wait("B to match A", lambda: rig.in_sync("A", "B"), BOUND_S)
        rig.stop_topics("B", "a-to-b")
        rig.wait("a-to-b STOPPED, B's topics writable",
                 lambda: rig.all_in("B", "a-to-b", MirrorState.STOPPED) and not any(rig.read_only("B").values()),
                 BOUND_S)  # fmt: skip
        history = rig.history("B")
        assert len(history) == len(rig.tps) and history_problems(history) == [], (SEED, history)
        assert rig.log_problems("A", "B", offsets=False) == []
        removed = [(datetime.strptime(at, "%Y-%m-%d %H:%M:%S,%f").timestamp(), who) for at, who in re.findall(
            r"^(\S+ \S+) WARNING streams.admin.members: removed member \S+ \(group.instance.id (\S+),",
            (tmp_path / "controller-B.log").read_text(), re.M)]  # fmt: skip
        live = [(at, who) for at, who in removed if who not in killed_at or at < killed_at[who]]
        assert live == [], (live, killed_at)
        print(f"[{time.monotonic() - t0:5.1f}s] the controller removed {len(removed)} dead member(s)")
        print(f"[{time.monotonic() - t0:5.1f}s] done: {POINTS} points; mirroring again "
              f"{', '.join(f'{s:.1f}s' for s in took)} after each settled restart (bound {BOUND_S:.0f}s)")
    finally:
        rig.close()
