"""End to end, real processes: broker, model server, controllers and workers for A and B.

Failover (``--stop`` through the CLI) and failback (the reverse mirror on A), with producers
using transactions (committed, aborted, left open). The same job as ``python -m streams.demo``.

The fetcher copies up to the source's LSO, so while a transaction is open on B, a transaction
that B closed with a marker above B's LSO is on A without its marker and holds A's LSO below
B's (expected; thread AS30, SPEC "Transactions"). The demo therefore times out B's open
transactions (ABORT, as Kafka's transaction coordinator does after transaction.timeout.ms),
waits until A's LEO, HW and LSO equal B's, and only then gives its verdict: logs identical up
to B's HW, read_committed contents equal, no transaction open on A, DLE >= SLE.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from streams.demo import Demo


@pytest.mark.slow
def test_failover_and_failback_through_cli_and_workers(tmp_path: Path) -> None:
    out = io.StringIO()
    demo = Demo(tmp_path, seed=11, out=out)
    try:
        code = demo.run()
    finally:
        demo.close()
    text = out.getvalue()
    assert code == 0, text
    assert "VERDICT: OK" in text
    # The audit at the end: snapshot of both mirrors exported to Parquet, Spark's verdict on it.
    assert "AUDIT VERDICT: audit PASS" in text, text
    assert (tmp_path / "audit").is_dir() and list((tmp_path / "audit").rglob("*.parquet"))
    assert "UNEXPECTED" not in text, text
    assert "B's transaction coordinator times out" in text
    assert "A matches B: same LEO, HW and LSO on every partition" in text
    assert text.count("STOPPED") >= 6 and "MIRRORING" in text
    rows = [line.split() for line in text.splitlines() if line.strip().startswith(("orders-", "payments-", "audit-"))]
    assert len(rows) == 6
    for name, _b_leo_at_stop, b_hw, b_lso, a_leo, a_lso, sle, dle, _committed, same in rows:
        assert b_hw == b_lso == a_leo == a_lso, name
        assert int(dle) >= int(sle) and same == "yes", name
