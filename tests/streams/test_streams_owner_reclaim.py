"""A workers' group whose generations start again from 1: the owner epoch is claimed again.

The destination keeps the highest owner epoch per workers' group (``coordinator.fencing``) and
refuses a lower one. When an operator deletes the group (``kafka-consumer-groups --delete``, the
workers all down), the next worker joins at generation 1, below what the destination holds, and
every claim of its jobs is refused as a stale owner's. It must not stay refused forever: a worker
that a Heartbeat of its own shows in the current generation claims again, as a compare-and-set on
the epoch it was refused at (``streams.worker.ownership``), and the mirror goes on; a stop then
completes.

Run on the session's Apache Kafka node, with Kafka's own tool deleting the group, as an operator would.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from worker_harness import Rig, history_problems

from coordinator.states import MirrorState
from streams.brokers.kafka_jars import java_command

TOPICS = {"orders": 4, "audit": 2}
MIRROR = "a-to-b"
GROUPS_TOOL = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"


def delete_group(bootstrap: str, group: str, timeout: float = 60.0) -> str:
    """``kafka-consumer-groups --delete``, retried while the group still has members (a worker's
    session has to expire first: static members do not leave)."""
    cmd = java_command(GROUPS_TOOL, ["--bootstrap-server", bootstrap, "--delete", "--group", group])
    deadline = time.monotonic() + timeout
    while True:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        if done.returncode == 0 and "successful" in done.stdout:
            return done.stdout
        if time.monotonic() > deadline:
            raise AssertionError(f"could not delete group {group}: {done.stdout}{done.stderr}")
        time.sleep(1.0)


@pytest.mark.slow
def test_a_group_whose_generations_start_again_claims_its_owner_epoch_again(apache_kafka: object,
                                                                             tmp_path: Path) -> None:  # fmt: skip
    bootstrap = apache_kafka.bootstrap  # type: ignore[attr-defined]
    rig = Rig(tmp_path, bootstrap, TOPICS, tick=0.1, seed=23)
    rig.group_timing["--session-timeout-ms"] = "6000"  # the group empties 6 s after the last worker stops
    try:
        rig.start(("B",))
        b, group = rig.clients["B"], rig.config("B").faust_app_id
        rig.two_workers_mirroring("B", MIRROR, "A")
        rig.leave_worker("B2")
        # B1 alone and holding every table partition: the rebalance B2's leave began is over, so the
        # SIGTERM below is a clean stop, not one in the middle of a rebalance.
        rig.wait("B1 alone with every table partition, its owner epoch claimed past 1", lambda: b.owner_epoch(group) >= 2
                 and rig.owners("B") == {"B1": {0, 1, 2, 3}}, 60)  # fmt: skip
        held = b.owner_epoch(group)
        rig.leave_worker("B1")
        print(delete_group(bootstrap, group).strip())

        # The same worker, back: generation 1 in a new group, below the epoch the destination holds.
        rig.spawn_worker("B", "B1", rig.data_dir("B", "1"))
        rig.wait("the new generation's epoch claimed in place of the old", lambda: 0 < b.owner_epoch(group) < held, 60)
        rig.wait("the re-claim logged", lambda: "group generation started again" in rig.worker_log("B1"), 10)
        rig.produce("A", 1.0, seed=2)
        rig.wait("B in sync with A", lambda: rig.in_sync("A", "B"), 60)
        assert rig.log_problems("A", "B") == []
        rig.stop_topics("B", MIRROR)
        rig.wait("every partition STOPPED", lambda: rig.all_in("B", MIRROR, MirrorState.STOPPED), 60)
        rig.wait("B's topics writable", lambda: not any(rig.read_only("B").values()), 30)
        history = rig.history("B")
        assert len(history) == sum(TOPICS.values()) and history_problems(history) == [], history
    finally:
        rig.close()
