"""End to end, real processes: ``--promote``, a planned migration that loses nothing (issue #26).

The model server, B's controller and a ``kip1279-worker``; the CLI runs as a process.

1. A down: ``--promote`` refuses, pointing to ``--stop``, and changes nothing;
2. A's producers live (records, transactions left open): ``--promote`` waits, saying for what;
   with the producers stopped (their open transactions aborted on A) it stops at lag 0, and B's
   log is A's, batch for batch, up to A's end; B's own stop batch follows, no transaction was
   aborted on B, and the group's last commit on A is B's;
3. a bounded wait: with a transaction open it gives up after ``--timeout``, naming it.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from test_streams_e2e_source_outage import BACKOFF, MIRROR
from worker_harness import Rig

from coordinator.ports import ControlType
from coordinator.states import MirrorState
from streams.brokers.noida import LocalBroker
from streams.demo.harness import ADMIN, PY, log_batches, shape


def _promote(rig: Rig, *extra: str) -> subprocess.Popen[str]:
    env = dict(os.environ, KIP1279_PRINCIPAL=ADMIN)
    return subprocess.Popen([PY, "-m", "streams.admin.cli", "--bootstrap-server", rig.endpoints["B"], "--promote",
                             "--mirror", MIRROR, "--topics", ",".join(rig.topics), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)  # fmt: skip


@pytest.mark.slow
def test_promote_refuses_without_the_source_waits_for_the_producers_and_stops_at_lag_0(
        broker: LocalBroker, tmp_path: Path) -> None:  # fmt: skip
    rig = Rig(tmp_path, broker.bootstrap, {"orders": 2, "audit": 1}, tick=0.1, seed=71)
    rig.cli_process = True
    try:
        rig.start(("B",))
        rig.spawn_worker("B")
        a, b = rig.clients["A"], rig.clients["B"]
        rig.create_mirror("B", MIRROR, "A", BACKOFF)
        rig.produce("A", 0.3, 71)
        rig.start_topics("B", MIRROR)
        rig.wait("every partition MIRRORING", lambda: rig.all_in("B", MIRROR, MirrorState.MIRRORING))

        # 1. A down: refused, nothing changed.
        a.set_unreachable(True)
        code, text = rig.run_cli("B", "--promote", "--mirror", MIRROR, "--topics", "orders,audit", "--timeout", "5")
        assert code == 1 and "Refusing to promote" in text and "--stop" in text, text
        assert rig.read_only("B") == {"orders": True, "audit": True}
        assert all(s is MirrorState.MIRRORING or s is MirrorState.FAILED for s in rig.latest("B", MIRROR).values())
        a.set_unreachable(False)
        rig.wait("every partition MIRRORING again", lambda: rig.all_in("B", MIRROR, MirrorState.MIRRORING))

        # 2. Live producers: the promote waits; once they stop, it stops at lag 0.
        rig.start_producers("A", 72)
        proc = _promote(rig, "--timeout", "90")
        time.sleep(3.0)
        assert proc.poll() is None, proc.communicate()[0]
        assert not any(s is MirrorState.STOPPING or s is MirrorState.STOPPED for s in rig.latest("B", MIRROR).values())
        rig.quiet_producers("A")  # the application drains: its open transactions end on A
        a.commit_offset("app", "orders", 0, a.list_offsets(rig.tps[0]).hw)
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, out
        assert "Waiting for: " in out, out  # it said what it waited for
        assert "Promoted: stopped audit, orders" in out and "Promote of mirror a-to-b: would lose nothing" in out, out
        assert rig.all_in("B", MIRROR, MirrorState.STOPPED)
        for tp in rig.tps:
            end = a.list_offsets(tp).leo
            assert shape(log_batches(b, tp), end) == shape(log_batches(a, tp), end), tp
            ours = [x for x in log_batches(b, tp) if x.base_offset >= end]
            assert [x.control_type for x in ours] == [ControlType.MIRROR_PID_RESET], ours  # no ABORT: nothing open
        assert [o.offset for o in b.group_offsets("app")] == [a.list_offsets(rig.tps[0]).hw]
    finally:
        rig.close()


@pytest.mark.slow
def test_promote_gives_up_after_its_timeout_and_says_what_it_waited_for(broker: LocalBroker, tmp_path: Path) -> None:
    rig = Rig(tmp_path, broker.bootstrap, {"orders": 1}, tick=0.1, seed=73)
    rig.cli_process = True
    try:
        rig.start(("B",))
        rig.spawn_worker("B")
        a = rig.clients["A"]
        rig.create_mirror("B", MIRROR, "A", BACKOFF)
        a.init_producer_id("open")
        a.begin_transaction("open")
        a.produce_transactional("open", "orders", 0, [(b"k", b"v")])
        rig.start_topics("B", MIRROR)
        rig.wait("mirrored", lambda: rig.all_in("B", MIRROR, MirrorState.MIRRORING)
                 and rig.clients["B"].list_offsets(rig.tps[0]).leo == a.list_offsets(rig.tps[0]).hw)  # fmt: skip
        code, text = rig.run_cli("B", "--promote", "--mirror", MIRROR, "--topics", "orders", "--timeout", "2")
        assert code == 1 and "Timed out after 2 s" in text and "1 open transactions on the destination" in text, text
        assert rig.read_only("B") == {"orders": True}
    finally:
        rig.close()
