"""End to end, real processes: broker, model server, controllers and workers for A and B.

Failover (``--stop`` through the CLI) and failback (the reverse mirror on A), with producers
using transactions (committed, aborted, left open). The same job as ``python -m streams.demo``.

The fetcher copies up to the source's HW (SPEC "Transactions"), so transactions left open on A
at the failover are on B and aborted there exactly once, and those B's producers leave open are
open on A after the failback as they are on B. The verdict: logs identical up to B's HW, LEO, HW
and LSO equal, read_committed contents equal, the same open transactions on both, DLE >= SLE.
A and B are driven only by aiokafka clients: what they saw is checked too (a consumer group that
moves from A to B with no gap and duplicates bounded by the last sync; a refused produce before
the stop).

Once per broker of the coordinators' own topics: Apache Kafka (the demo's default), with the
Spark audit at the end, and noida-db (``--broker noida``), without it.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from kafka_fixtures import require_apache_kafka
from streams.brokers.own import KAFKA, NOIDA
from streams.demo.job import Demo


@pytest.mark.slow
@pytest.mark.parametrize("broker", [KAFKA, NOIDA])
def test_failover_and_failback_through_cli_and_workers(broker: str, tmp_path: Path) -> None:
    if broker == KAFKA:
        require_apache_kafka()
    out = io.StringIO()
    demo = Demo(tmp_path, seed=11, out=out, audit=broker == KAFKA, broker=broker)
    try:
        code = demo.run()
    finally:
        demo.close(kill_workers=True)  # the run is over (the Kafka run stopped its processes itself, before Spark)
    text = out.getvalue()
    assert code == 0, text
    assert "VERDICT: OK" in text
    assert ("Apache Kafka" if broker == KAFKA else "noida-db broker") in text.splitlines()[0]
    if demo.audit_enabled:
        # The audit at the end: snapshot of both mirrors exported to Parquet, Spark's verdict on it.
        assert "AUDIT VERDICT: audit PASS" in text, text
        assert (tmp_path / "audit").is_dir() and list((tmp_path / "audit").rglob("*.parquet"))
    assert "UNEXPECTED" not in text, text
    assert "A matches B: same LEO, HW and LSO on every partition" in text
    assert "aborted there exactly once" in text
    assert text.count("STOPPED") >= 6 and "MIRRORING" in text
    rows = [line.split() for line in text.splitlines() if line.strip().startswith(("orders-", "payments-", "audit-"))]
    assert len(rows) == 6
    for name, _b_leo_at_stop, b_hw, b_lso, a_leo, a_lso, sle, dle, _committed, same in rows:
        assert b_hw == a_leo and b_lso == a_lso, name
        assert int(dle) >= int(sle) and same == "yes", name
    # What the aiokafka clients saw.
    m = re.search(r"CLIENTS \(aiokafka\): produced (\d+) records \((\d+) committed, (\d+) in aborted transactions, "
                  r"(\d+) in transactions left open\); group \S+: consumed (\d+) on A, (\d+) on B after the switch; "
                  r"duplicates (\d+) \(bound: (\d+) .*?\); gaps (\d+);.*produce to the mirror topic before the stop: "
                  r"refused \(UnknownError\)", text)
    assert m, text
    produced, committed, aborted, left_open, on_a, on_b, dups, bound, gaps = map(int, m.groups())
    assert produced == committed + aborted + left_open and min(committed, aborted, left_open) > 0
    assert gaps == 0 and dups <= bound
    assert on_a > 0 and on_b > 0 and on_a + on_b - dups >= committed  # every committed record read at least once
    assert "group demo-orders-app resumes on B from the offsets the last group offset sync wrote " \
           "(those it committed last on A: yes)" in text
