"""End to end, real processes: ``--stop --dry-run``, the impact preview (issue #26).

The model server, B's controller and a ``kip1279-worker``; the CLI runs as a process. B mirrors
A, with a transaction left open on A (copied to B) and a consumer group committing on A:

1. with A up: the preview names the open transaction the stop would abort, the group's
   position, exit code 3 (a transaction would be aborted), and JSON with the same figures;
2. A unreachable (the case that matters most): the RPO is "unknown", the open transaction and
   the groups the destination knows (the synced one, and one active on B) are still counted;
3. neither preview changed anything: the partitions are not stopping, B's topic is read-only,
   B's logs and group offsets are as before; the real ``--stop`` then aborts exactly the
   transaction the preview named, and logs the same impact record, one line per partition.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from test_streams_e2e_source_outage import BACKOFF, MIRROR
from worker_harness import Rig

from coordinator.ports import ControlType, IsolationLevel
from coordinator.states import MirrorState
from streams.brokers.noida import LocalBroker
from streams.demo.harness import read_changelog
from streams.state.mirror_state_codec import RecordType


def _lines(text: str, column: str) -> list[list[str]]:
    """The rows of the first table with a ``column`` header, split on spaces."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if column in ln.split())
    rows = []
    for ln in lines[start + 1:]:
        if not ln.strip() or ln.startswith(("Group ", "The source", "Dry run", "Topic ")):
            break
        rows.append(ln.split())
    return rows


def _mirrored(rig: Rig) -> bool:
    a, b = rig.clients["A"], rig.clients["B"]
    return all(b.list_offsets(tp).leo == a.list_offsets(tp).hw for tp in rig.tps)


@pytest.mark.slow
def test_stop_dry_run_with_a_dead_source_shows_unknown_and_still_counts_transactions_and_groups(
        broker: LocalBroker, tmp_path: Path) -> None:  # fmt: skip
    rig = Rig(tmp_path, broker.bootstrap, {"orders": 2}, tick=0.1, seed=61)
    rig.cli_process = True
    rig.loglevel = "warning,streams.admin.preview=info"  # the stop's impact record
    try:
        rig.start(("B",))
        rig.spawn_worker("B")
        a, b = rig.clients["A"], rig.clients["B"]
        rig.create_mirror("B", MIRROR, "A", BACKOFF)
        for i in range(6):
            a.produce("orders", i % 2, [(b"k", f"v{i}".encode())])
        pid = a.init_producer_id("left-open").producer_id
        a.begin_transaction("left-open")
        a.produce_transactional("left-open", "orders", 0, [(b"k", b"t1"), (b"k", b"t2")])
        tp0 = rig.tps[0]
        a.commit_offset("app", "orders", 0, 2)
        a.commit_offset("busy", "orders", 1, 1)
        b.join_group("busy", "member-1")  # consumers already on B: the sync leaves the group alone
        rig.start_topics("B", MIRROR)
        rig.wait("every partition MIRRORING", lambda: rig.all_in("B", MIRROR, MirrorState.MIRRORING))
        rig.wait("B to have A's log, open transaction included", lambda: _mirrored(rig))
        rig.wait("the group synced to B", lambda: [o.offset for o in b.group_offsets("app")] == [2])

        # 1. A up: nothing lost, one transaction to abort, the group resumes where it committed.
        code, text = rig.run_cli("B", "--stop", "--dry-run", "--mirror", MIRROR, "--topics", "orders")
        assert code == 3, text
        rows = {(r[0], r[1]): r for r in _lines(text, "LOST-RECORDS")}
        assert [r[4] for r in rows.values()] == ["0", "0"], text  # LOST-RECORDS
        assert rows[("orders", "0")][6] == "1" and rows[("orders", "1")][6] == "0", text  # ABORTED-TXNS
        (txn,) = _lines(text, "PRODUCER-ID")
        assert txn[2] == str(pid) and txn[5] == "2", text
        assert "Group busy is active on the destination: not synced." in text
        assert text.strip().endswith("would lose 0 records on 0 partitions; would abort 1 transactions; 0 groups re-read"), text
        code, js = rig.run_cli("B", "--stop", "--dry-run", "--json", "--mirror", MIRROR, "--topics", "orders")
        doc = json.loads(js)
        assert code == 3 and doc["source_available"] and doc["loses_something"], js
        assert [g["group"] for g in doc["groups"]] == ["app"] and doc["groups"][0]["re_read_records"] == 0, js
        assert doc["active_groups"] == ["busy"], js

        # 2. A unreachable: the RPO is unknown, the transaction and the groups are still counted.
        a.produce("orders", 1, [(b"k", b"not-mirrored")])
        a.set_unreachable(True)
        before = {tp: (b.list_offsets(tp), b.fetch(tp, 0, 1 << 20, IsolationLevel.READ_UNCOMMITTED).batches) for tp in rig.tps}
        code, text = rig.run_cli("B", "--stop", "--dry-run", "--mirror", MIRROR, "--topics", "orders")
        assert code == 3, text
        for r in _lines(text, "LOST-RECORDS"):
            assert r[2] == "unknown" and r[4] == "unknown", text  # SOURCE-HW, LOST-RECORDS
        assert "The source did not answer" in text and "Group busy is active" in text, text
        groups = _lines(text, "RESUMES-AT")
        assert [(g[0], g[5], g[6]) for g in groups] == [("app", "2", "unknown")], text
        assert "would lose an unknown number of records on 2 partitions; would abort 1 transactions" in text, text
        doc = json.loads(rig.run_cli("B", "--stop", "--dry-run", "--json", "--mirror", MIRROR, "--topics", "orders")[1])
        assert not doc["source_available"] and all(p["lost_records"] is None for p in doc["partitions"]), doc
        assert [t["producer_id"] for p in doc["partitions"] for t in p["aborted_transactions"]] == [pid], doc

        # 3. Nothing changed; then the real stop aborts what the preview named.
        assert rig.read_only("B") == {"orders": True}
        assert not any(s in (MirrorState.STOPPING, MirrorState.STOPPED) for s in rig.latest("B", MIRROR).values())
        assert {tp: (b.list_offsets(tp), b.fetch(tp, 0, 1 << 20, IsolationLevel.READ_UNCOMMITTED).batches)
                for tp in rig.tps} == before  # fmt: skip
        assert [o.offset for o in b.group_offsets("app")] == [2]
        stop_offset = before[tp0][0].leo
        rig.stop_topics("B", MIRROR)
        rig.wait("every partition STOPPED", lambda: rig.all_in("B", MIRROR, MirrorState.STOPPED), 60)
        aborts = [x.producer_id for x in b.fetch(tp0, stop_offset, 1 << 20, IsolationLevel.READ_UNCOMMITTED).batches
                  if x.is_control and x.control_type == ControlType.ABORT]  # fmt: skip
        assert aborts == [pid]
        # The stop logged the impact the preview showed, one line per partition.
        logged = [json.loads(ln.split("failover impact ", 1)[1]) for ln in rig.worker_log("controller-B").splitlines()
                  if "failover impact {" in ln]  # fmt: skip
        parts = sorted((r["topic"], r["partition"], r["lost_records"], [t["producer_id"] for t in r["aborted_transactions"]])
                       for r in logged if "partition" in r and "group" not in r)  # fmt: skip
        assert parts == [("orders", 0, None, [pid]), ("orders", 1, None, [])], logged
        # ... and the prediction went through the metadata log into __mirror_state, the outcome beside it.
        records = asyncio.run(read_changelog(broker.bootstrap, rig.config("B").mirror_state_topic_name))
        impacts = {k.partition: v for t, k, v in records if t == RecordType.MIRROR_FAILOVER_IMPACT and v is not None}
        assert sorted(impacts) == [0, 1] and all(v.completed and v.metadata_offset >= 0 for v in impacts.values()), impacts
        assert [(a.producer_id, a.first_offset) for a in impacts[0].aborts] == [
            (a.producer_id, a.first_offset) for a in impacts[0].predicted_aborts] == [(pid, before[tp0][0].leo - 2)]
        assert impacts[0].stop_offset == stop_offset and not impacts[1].aborts
    finally:
        rig.close()


@pytest.mark.slow
def test_start_dry_run_of_a_failback_shows_what_truncation_removes_from_the_old_source(
        broker: LocalBroker, tmp_path: Path) -> None:  # fmt: skip
    """A -> B, a failover, writes on both sides (split brain), then ``--start --dry-run`` of the
    reverse mirror on A: per partition where PREPARING cuts A and how many of A's records go;
    the real start then cuts exactly there."""
    rig = Rig(tmp_path, broker.bootstrap, {"orders": 2}, tick=0.1, seed=63)
    rig.cli_process = True
    try:
        rig.start(("A", "B"))
        rig.spawn_worker("B")
        rig.spawn_worker("A")
        a, b = rig.clients["A"], rig.clients["B"]
        rig.create_mirror("B", MIRROR, "A", BACKOFF)
        for i in range(6):
            a.produce("orders", i % 2, [(b"k", f"v{i}".encode())])
        rig.start_topics("B", MIRROR)
        rig.wait("mirrored", lambda: rig.all_in("B", MIRROR, MirrorState.MIRRORING) and _mirrored(rig))
        rig.stop_topics("B", MIRROR)
        rig.wait("every partition STOPPED", lambda: rig.all_in("B", MIRROR, MirrorState.STOPPED), 60)
        rig.wait("B writable", lambda: rig.read_only("B") == {"orders": False})
        stop_offsets = {tp: b.list_offsets(tp).leo - 1 for tp in rig.tps}  # B's log: A's, then its PID reset
        b.produce("orders", 0, [(b"k", b"on-b")])
        for _ in range(3):
            a.produce("orders", 0, [(b"k", b"lost-on-a")])  # split brain: these go at failback
        a_end = {tp: a.list_offsets(tp).leo for tp in rig.tps}

        reverse = "b-to-a"
        rig.create_mirror("A", reverse, "B")
        deadline = time.monotonic() + 30
        while True:  # once A's controller has registered B's topics
            code, text = rig.run_cli("A", "--start", "--dry-run", "--mirror", reverse, "--topics", "orders")
            if code in (0, 3) or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert code == 3, text
        rows = {int(r[1]): r for r in _lines(text, "TRUNCATE-TO")}
        tp0, tp1 = rig.tps
        assert rows[0][3] == str(stop_offsets[tp0]) and rows[0][4] == str(a_end[tp0] - stop_offsets[tp0]) == "3", text
        assert rows[1][3] == str(stop_offsets[tp1]) and rows[1][4] == "0", text
        assert text.strip().endswith("would lose 3 records on 1 partitions"), text
        assert a.list_offsets(tp0).leo == a_end[tp0], "the preview cut nothing"

        rig.start_topics("A", reverse)
        rig.wait("A mirrors B", lambda: rig.all_in("A", reverse, MirrorState.MIRRORING), 60)
        rig.wait("A has B's log", lambda: all(a.list_offsets(tp).leo == b.list_offsets(tp).hw for tp in rig.tps), 60)
        assert b"lost-on-a" not in b"".join(x.payload for x in a.fetch(tp0, 0, 1 << 20, IsolationLevel.READ_UNCOMMITTED).batches)
    finally:
        rig.close()
