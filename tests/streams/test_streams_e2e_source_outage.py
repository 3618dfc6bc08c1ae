"""End to end, real processes: the source A unreachable while B mirrors it (issue 11, section 3).

The model server, B's controller and a ``kip1279-worker`` on the session's broker, driven through
the CLI, with producers writing on A all along (they are not behind the faulty link):

1. mirroring, then A unreachable: ``--describe`` shows every partition FAILED with the error and
   its RetryAttempt counting up, ``--describe --failed`` lists them;
2. A back: every partition returns to MIRRORING by itself, and B ends with exactly A's batches
   (nothing lost, nothing twice); the changelog holds one write per state or retry attempt;
3. A unreachable again, and ``--stop`` during the outage: every partition STOPPED, B writable.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from worker_harness import Rig, history_problems

from coordinator.states import MirrorState
from streams.brokers.noida import LocalBroker

MIRROR = "a-to-b"
# Short FAILED backoffs so that a retry lands within a few seconds of A coming back; A unreachable
# for 1 s (not the default 15 s) fails the partitions.
BACKOFF = "failed.retry.initial.backoff.ms=300\nfailed.retry.max.backoff.ms=1500\nsource.unavailable.timeout.ms=1000\n"


@pytest.mark.slow
def test_source_outage_fails_partitions_then_they_mirror_again_and_a_stop_works_without_the_source(
        broker: LocalBroker, tmp_path: Path) -> None:  # fmt: skip
    rig = Rig(tmp_path, broker.bootstrap, {"orders": 2, "audit": 1}, tick=0.1, seed=31)
    try:
        rig.start(("B",))
        rig.spawn_worker("B")
        a = rig.clients["A"]
        rig.create_mirror("B", MIRROR, "A", BACKOFF)
        rig.produce("A", 0.8, 31)
        rig.start_topics("B", MIRROR)
        rig.wait("every partition MIRRORING", lambda: rig.all_in("B", MIRROR, MirrorState.MIRRORING))
        rig.wait("B to match A", lambda: rig.in_sync("A", "B"))
        assert rig.describe("B", MIRROR, "--failed") == []

        # 1. A unreachable; A's producers go on (started while A answers: the workload reads its topics).
        rig.start_producers("A", 32)
        a.set_unreachable(True)
        rig.wait("every partition FAILED, retried twice",
                 lambda: len(rows := rig.describe("B", MIRROR)) == len(rig.tps)
                 and all(r["state"] == "FAILED" and r["retryAttempt"] >= 2 for r in rows), 60)  # fmt: skip
        rows = rig.describe("B", MIRROR)
        for r in rows:
            assert r["errorMessage"].startswith("NETWORK_EXCEPTION") and "unreachable" in r["errorMessage"], r
        failed = rig.describe("B", MIRROR, "--failed")
        assert {(r["topic"], r["partition"]) for r in failed} == {(r["topic"], r["partition"]) for r in rows}
        table = rig.cli("B", "--describe", "--mirror", MIRROR)
        partition_lines = table.split("\n\n")[0].splitlines()[1:]  # the readiness section follows
        assert [ln.split()[6] for ln in partition_lines] == ["FAILED"] * len(rig.tps) and "NETWORK_EXCEPTION" in table, table
        assert f"{len(rig.tps)} partition(s) FAILED" in table.split("\n\n")[1], table  # why not ready

        # 2. A back: MIRRORING by itself, the data count right.
        b_leo = {tp: rig.clients["B"].list_offsets(tp).leo for tp in rig.tps}
        a.set_unreachable(False)
        time.sleep(0.5)  # A's producers go on for a moment while the partitions come back
        rig.quiet_producers("A")
        rig.wait("every partition MIRRORING again", lambda: rig.all_in("B", MIRROR, MirrorState.MIRRORING), 60)
        rig.wait("B to match A", lambda: rig.in_sync("A", "B"), 60)
        assert rig.log_problems("A", "B") == []
        for tp in rig.tps:
            assert a.list_offsets(tp).hw == rig.clients["B"].list_offsets(tp).hw
        assert any(a.list_offsets(tp).hw > b_leo[tp] for tp in rig.tps), "what A took during the outage came after"
        assert rig.describe("B", MIRROR, "--failed") == []
        history = rig.history("B")
        assert history_problems(history) == [], history
        for key, states in history.items():
            seq = [s.state for s in states]
            first = seq.index(MirrorState.FAILED)
            last = len(seq) - 1 - seq[::-1].index(MirrorState.FAILED)
            assert set(seq[first : last + 1]) == {MirrorState.FAILED}, (key, seq)  # no flapping back meanwhile
            attempts = [s.retry_attempt for s in states[first : last + 1]]
            assert attempts == list(range(len(attempts))), (key, attempts)  # one write per attempt
            assert seq[last + 1] is MirrorState.MIRRORING, (key, seq)
        # Full jitter: the first retry waits a random share of failed.retry.initial.backoff.ms (300).
        waits = [(h := [s for s in states if s.state is MirrorState.FAILED][0]).retry_at_ms - h.entered_at_ms
                 for states in history.values()]  # fmt: skip
        assert all(0 <= w <= 300 for w in waits) and len(set(waits)) > 1, waits

        # 3. A unreachable again; a failover needs nothing from it.
        a.set_unreachable(True)
        rig.wait("every partition FAILED", lambda: all(r["state"] == "FAILED" for r in rig.describe("B", MIRROR)), 60)
        rig.stop_topics("B", MIRROR)
        rig.wait("every partition STOPPED", lambda: rig.all_in("B", MIRROR, MirrorState.STOPPED), 60)
        rig.wait("B's topics writable", lambda: not any(rig.read_only("B").values()), 30)
        assert rig.describe("B", MIRROR, "--failed") == []
        assert history_problems(rig.history("B")) == []
    finally:
        rig.close()  # the model server goes with it, A's cut link too
