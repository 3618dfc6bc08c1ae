"""End to end, real processes: ``--stop --consistent-cut`` (issue #26, part 3).

The model server, B's controller and a ``kip1279-worker``; the CLI's ``main`` in the test. B mirrors
two LogAppendTime topics from A whose records interleave in time, and a transaction left open
on A's payments; then A dies. A third topic, CreateTime, makes the cut refuse (nothing changes). ``--stop --consistent-cut --dry-run`` shows T and each
partition's cut and changes nothing; the real stop (the cut travels to the worker only in the
stop's metadata records) ends each log on B where the dry run said: no record after T is
readable on B, read_committed or read_uncommitted, and every record up to T is.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_streams_e2e_preview import _lines
from test_streams_e2e_source_outage import BACKOFF, MIRROR
from worker_harness import Rig

from clustermodel.records import batch_values, read_committed_values
from coordinator.ports import IsolationLevel
from coordinator.states import MirrorState
from streams.brokers.noida import LocalBroker


def _all(port, tp):
    return port.fetch(tp, 0, 1 << 20, IsolationLevel.READ_UNCOMMITTED).batches


@pytest.mark.slow
def test_consistent_cut_across_two_topics_with_the_source_dead(broker: LocalBroker, tmp_path: Path) -> None:
    rig = Rig(tmp_path, broker.bootstrap, {"orders": 1, "payments": 1, "audit": 1}, tick=0.1, seed=67)
    try:
        rig.start(("B",))
        rig.spawn_worker("B")
        a, b = rig.clients["A"], rig.clients["B"]
        for name in ("orders", "payments"):  # audit keeps CreateTime
            a.alter_configs(rig.ids[name], {"message.timestamp.type": "LogAppendTime"})
        a.produce("audit", 0, [(b"a", b"audit0")])
        rig.create_mirror("B", MIRROR, "A", BACKOFF)
        for i in range(4):  # interleaved in time (the model's clock ticks between them)
            a.produce("orders", 0, [(b"o", f"order{i}".encode())])
            a.tick(5)
            a.produce("payments", 0, [(b"p", f"payment{i}".encode())])
            a.tick(5)
        a.init_producer_id("open")
        a.begin_transaction("open")
        a.produce_transactional("open", "payments", 0, [(b"p", b"payment-open")])
        a.tick(5)
        for i in range(4, 7):
            a.produce("orders", 0, [(b"o", f"order{i}".encode())])
            a.tick(5)
        rig.start_topics("B", MIRROR)
        rig.wait("every partition MIRRORING", lambda: rig.all_in("B", MIRROR, MirrorState.MIRRORING))
        rig.wait("B to have A's log", lambda: all(b.list_offsets(tp).leo == a.list_offsets(tp).leo for tp in rig.tps))
        a.set_unreachable(True)
        before = {tp: _all(b, tp) for tp in rig.tps[:2]}

        code, text = rig.run_cli("B", "--stop", "--consistent-cut", "--dry-run", "--mirror", MIRROR,
                                 "--topics", "orders,payments")  # fmt: skip
        assert code == 3, text
        t = int(text.split("Consistent cut at T=", 1)[1].split(":", 1)[0])
        cut = {r[0]: (int(r[3]), int(r[4])) for r in _lines(text, "CUT-OFFSET")}  # topic -> (cut offset, given up)
        open_ts = next(x.timestamp for x in before[rig.tps[1]] if x.is_transactional)
        assert t < open_ts and cut["payments"][1] >= 1 and cut["orders"][1] >= 1, text
        assert "would cut at T=" in text, text
        doc = json.loads(rig.run_cli("B", "--stop", "--consistent-cut", "--dry-run", "--json", "--mirror", MIRROR,
                                     "--topics", "orders,payments")[1])  # fmt: skip
        assert doc["cut_timestamp"] == t and {p["topic"]: p["cut_offset"] for p in doc["partitions"]} == {
            k: v[0] for k, v in cut.items()}, doc
        # A CreateTime topic in the selection: refused, nothing changes.
        code, text = rig.run_cli("B", "--stop", "--consistent-cut", "--mirror", MIRROR, "--topics", "orders,payments,audit")
        assert code != 0 and "INVALID_CONFIG" in text and "CreateTime" in text, text
        assert "no consistent cut: audit-0: the batch at offset" in text and str(rig.ids["audit"]) not in text, text
        assert rig.read_only("B") == {"orders": True, "payments": True, "audit": True}
        assert rig.all_in("B", MIRROR, MirrorState.MIRRORING)
        assert {tp: _all(b, tp) for tp in rig.tps[:2]} == before, "the dry run or the refused stop changed B"

        code, text = rig.run_cli("B", "--stop", "--consistent-cut", "--mirror", MIRROR, "--topics", "orders,payments")
        assert code == 0, text
        rig.wait("orders and payments STOPPED", lambda: all(rig.latest("B", MIRROR).get(tp) is MirrorState.STOPPED
                                                           for tp in rig.tps[:2]), 60)  # fmt: skip
        for name, tp in zip(("orders", "payments"), rig.tps):
            on_b = _all(b, tp)
            offset, given_up = cut[name]
            assert all(x.is_control for x in on_b if x.base_offset >= offset) and on_b[-1].base_offset >= offset
            kept = [v for x in before[tp] if x.timestamp <= t and not x.is_control for v in batch_values(x)]
            assert len(kept) + given_up == sum(x.record_count for x in before[tp] if not x.is_control)
            assert [v for x in on_b if not x.is_control for v in batch_values(x)] == kept  # read_uncommitted
            assert read_committed_values(b, tp) == kept  # read_committed: every record up to T
    finally:
        rig.close()
