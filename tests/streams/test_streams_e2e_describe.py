"""End to end, real processes: ``--describe`` as the prototype's ``kafka-cluster-mirrors.sh`` prints it,
with offsets no older than asked and the failover readiness of each mirror (issue 14, section 3).

The model server, B's controller and a ``kip1279-worker``; the CLI runs as in a shell. The
staleness repro of the issue: new records on the source while the mirror does not copy them (the
worker is stopped with SIGSTOP), and describe must show the source HW of now, not of the last
describe, unless ``--max-age`` allows older offsets.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from test_streams_e2e_source_outage import BACKOFF, MIRROR
from worker_harness import Rig

from coordinator.readiness import NO_SYNC_REPORT
from coordinator.states import MirrorState
from streams.brokers.noida import LocalBroker

# The prototype's headers and JSON keys (ClusterMirrorCommand, aiven/inkless inkless-linking).
DESCRIBE = ["MIRROR", "TOPIC", "PARTITION", "SOURCE-OFFSET", "DESTINATION-OFFSET", "LAG", "STATE"]
FAILED = ["MIRROR", "TOPIC", "PARTITION", "RETRY", "ERROR"]
LIST = ["MIRROR", "TOPICS", "SOURCE-CLUSTER-ID", "SOURCE-BOOTSTRAP-SERVER"]
KEYS = ["mirror", "topic", "partition", "sourceOffset", "destinationOffset", "lag", "state", "retryAttempt", "errorMessage"]


def sections(table: str) -> tuple[list[list[str]], list[str]]:
    """The partition rows (split on blanks) and the readiness lines of a ``--describe`` table."""
    partitions, readiness = table.split("\n\n")
    return [ln.split() for ln in partitions.splitlines()], readiness.splitlines()


@pytest.mark.slow
def test_describe_matches_the_prototype_is_fresh_and_says_why_not_ready(
        broker: LocalBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("KIP1279_METRICS_FAILOVER_READY_MAX_LAG", "0")  # the controller reads it: any lag is too much
    rig = Rig(tmp_path, broker.bootstrap, {"orders": 2, "audit": 1}, tick=0.1, seed=43)
    rig.cli_process = True  # as a script would run it
    try:
        rig.start(("B",))
        worker = rig.spawn_worker("B")
        a, b = rig.clients["A"], rig.clients["B"]
        names = {tid: name for name, tid in rig.ids.items()}
        assert rig.cli("B", "--list") == "No mirrors found\n"
        rig.create_mirror("B", MIRROR, "A", BACKOFF)
        rig.produce("A", 0.5, 43)
        rig.start_topics("B", MIRROR)
        rig.wait("every partition MIRRORING", lambda: rig.all_in("B", MIRROR, MirrorState.MIRRORING))
        rig.wait("B to match A", lambda: rig.in_sync("A", "B"))

        # The prototype's formats: headers, column order, '%-30s %-10d ...' widths, JSON keys.
        listed = rig.cli("B", "--list").splitlines()
        assert listed[0].split() == LIST and listed[0].startswith("MIRROR" + " " * 25 + "TOPICS")
        assert listed[1].split() == [MIRROR, "2", a.cluster_id(), "model://A"] and listed[1][31:42] == "2".ljust(10) + " "
        assert rig.cli("B", "--describe", "--mirror", MIRROR, "--failed") == "No failed partitions found\n"
        assert json.loads(rig.cli("B", "--describe", "--mirror", MIRROR, "--json", "--failed")) == []
        rows = rig.describe("B", MIRROR)
        assert [list(r)[: len(KEYS)] for r in rows] == [KEYS] * len(rig.tps)  # theirs first, ours after
        assert [(r["topic"], r["partition"]) for r in rows] == sorted((names[tp.topic_id], tp.partition) for tp in rig.tps)
        parts, _ = sections(rig.cli("B", "--describe", "--mirror", MIRROR))
        assert parts[0][: len(DESCRIBE)] == DESCRIBE
        for r, line in zip(rows, parts[1:], strict=True):
            assert line[:7] == [MIRROR, r["topic"], str(r["partition"]), str(r["sourceOffset"]),
                                str(r["destinationOffset"]), str(r["lag"]), "MIRRORING"]  # fmt: skip

        # The staleness repro: the worker stops copying, the source gets new records.
        rig.pause_worker(worker)
        try:
            before = {(r["topic"], r["partition"]): r for r in rig.describe("B", MIRROR)}
            described_at = time.monotonic()
            rig.produce("A", 0.6, 44)
            rig.wait("A's HW past what was described", lambda: sum(
                a.list_offsets(tp).hw for tp in rig.tps) > sum(r["sourceOffset"] for r in before.values()), 30)
            now = rig.describe("B", MIRROR)
            for r in now:
                tp = next(tp for tp in rig.tps if (names[tp.topic_id], tp.partition) == (r["topic"], r["partition"]))
                hw, leo = a.list_offsets(tp).hw, b.list_offsets(tp).leo
                assert (r["sourceOffset"], r["destinationOffset"], r["lag"]) == (hw, leo, hw - leo), r
                assert 0 <= r["offsetsAgeMs"] < 5000
            assert any(r["lag"] > 0 for r in now), now
            # --max-age: the offsets of the earlier describe will do, and their age says so.
            old = rig.describe("B", MIRROR, "--max-age", "600000")
            waited = (time.monotonic() - described_at) * 1000
            assert [r["sourceOffset"] for r in old] == [r["sourceOffset"] for r in now]  # the last lookup's
            assert all(r["offsetsAgeMs"] <= waited for r in old)

            # Readiness: a line per mirror in the table, an object in each JSON row; the lag is why.
            lagging = sum(1 for r in now if r["lag"] > 0)
            _, ready = sections(rig.cli("B", "--describe", "--mirror", MIRROR))
            assert ready[0].split() == ["MIRROR", "FAILOVER-READY", "REASONS"]
            assert ready[1].split()[:2] == [MIRROR, "no"] and f"{lagging} partition(s) lag over 0" in ready[1], ready
            readiness = rig.describe("B", MIRROR)[0]["failoverReadiness"]
            assert readiness["ready"] is False and any("lag over 0" in why for why in readiness["reasons"])
        finally:
            rig.workers[worker][1].send_signal(signal.SIGCONT)

        # Caught up again, and the worker has reported clean syncs (streams.state.sync_status): ready.
        rig.wait("B to match A", lambda: rig.in_sync("A", "B"), 60)
        rig.wait("lag 0 in describe", lambda: {r["lag"] for r in rig.describe("B", MIRROR)} == {0}, 30)
        rig.wait("ready", lambda: rig.describe("B", MIRROR)[0]["failoverReadiness"] == {"ready": True, "reasons": []}, 30)
        _, ready = sections(rig.cli("B", "--describe", "--mirror", MIRROR))
        assert ready[1].split()[:2] == [MIRROR, "yes"], ready
        # A worker that stops reporting (stopped: no syncs either) makes it not ready within two
        # sync intervals (metadata.refresh.interval.ms=1000), with the lag still 0.
        rig.pause_worker(worker)
        try:
            rig.wait("not ready: no sync report", lambda: rig.describe("B", MIRROR)[0]["failoverReadiness"] == {
                "ready": False, "reasons": [NO_SYNC_REPORT]}, 30)  # fmt: skip
        finally:
            rig.workers[worker][1].send_signal(signal.SIGCONT)
        rig.wait("ready again", lambda: rig.describe("B", MIRROR)[0]["failoverReadiness"]["ready"] is True, 30)

        # A paused topic: not MIRRORING is a reason; a FAILED one is not there.
        rig.cli("B", "--pause", "--mirror", MIRROR, "--topics", "audit", "--wait", "30")
        _, ready = sections(rig.cli("B", "--describe", "--mirror", MIRROR))
        assert "1 partition(s) not MIRRORING (1 PAUSED)" in ready[1] and "FAILED" not in ready[1], ready
    finally:
        rig.close()
