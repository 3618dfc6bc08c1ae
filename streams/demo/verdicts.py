"""The main job's two verdicts, apart from its run: the clusters compared partition by partition once
A has caught up with B, and the audit (Spark) over the coordinators' exported snapshots."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clustermodel.client import ClusterClient
from clustermodel.records import read_committed_values
from coordinator.ports import TopicPartition
from streams.demo.harness import failover_aborts, log_batches, shape


def compare_clusters(a: ClusterClient, b: ClusterClient, tps: list[TopicPartition], b_at_stop: dict[Any, Any],
                     a_open: dict[Any, Any], out: Any) -> list[str]:  # fmt: skip
    """Prints a row per partition (B at the stop, B and A now) and returns what differs: the logs below
    B's HW, LEO/HW/LSO, open transactions, the failover's aborts, read_committed records, DLE < SLE."""
    problems: list[str] = []
    names = {tid: n for n, tid in ((t.name, t.topic_id) for t in a.describe_topics())}
    rows = []
    for tp in tps:
        name = f"{names[tp.topic_id]}-{tp.partition}"
        la, lb = a.list_offsets(tp), b.list_offsets(tp)
        sa, sb = shape(log_batches(a, tp), lb.hw), shape(log_batches(b, tp), lb.hw)
        same = sa == sb
        ca, cb = read_committed_values(a, tp), read_committed_values(b, tp)
        if not same:
            problems.append(f"{name}: logs differ below B's HW {lb.hw}")
        for what, va, vb in (("LEO", la.leo, lb.leo), ("HW", la.hw, lb.hw), ("LSO", la.lso, lb.lso)):
            if va != vb:
                problems.append(f"{name}: A's {what} {va} != B's {what} {vb}")
        opens_a = [(o.producer_id, o.first_offset) for o in a.open_transactions(tp)]
        opens_b = [(o.producer_id, o.first_offset) for o in b.open_transactions(tp)]
        if opens_a != opens_b:
            problems.append(f"{name}: open transactions differ: A {opens_a}, B {opens_b}")
        problems.extend(f"{name}: {p}" for p in failover_aborts(log_batches(b, tp), a_open[tp]))
        if ca != cb:
            lost = [v for v in cb if v not in set(ca)]
            problems.append(f"{name}: read_committed differs: A {len(ca)} record(s), B {len(cb)}; "
                            f"{len(lost)} of B's committed record(s) missing on A")  # fmt: skip
        if la.leader_epoch < lb.leader_epoch:
            problems.append(f"{name}: DLE {la.leader_epoch} < SLE {lb.leader_epoch}")
        rows.append((name, b_at_stop[tp].leo, lb.hw, lb.lso, la.leo, la.lso, lb.leader_epoch, la.leader_epoch,
                     len(cb), "yes" if same else "NO"))  # fmt: skip
    out.write("\n    PARTITION   B-LEO@STOP   B-HW  B-LSO  A-LEO  A-LSO  B-EPOCH(SLE)  A-EPOCH(DLE)  COMMITTED  SAME-LOG\n")
    for r in rows:
        out.write(f"    {r[0]:<11} {r[1]:>10}  {r[2]:>5}  {r[3]:>5}  {r[4]:>5}  {r[5]:>5}  {r[6]:>12}  {r[7]:>12}  "
                       f"{r[8]:>9}  {r[9]:>8}\n")  # fmt: skip
    return problems


def spark_audit(roots: dict[str, Path], say: Callable[[str], None], out: Any, workdir: Path) -> int:
    """The audit verdict over each coordinator's store, up to its latest snapshot; 0 when it passes."""
    from audit import layout

    latest = {c: layout.list_manifests(r)[-1] for c, r in roots.items()}
    say("audit: the workers' latest snapshots: " + "; ".join(
        f"{c} ({', '.join(m.mirrors)}) at metadata offset {m.metadata_offset}, "
        f"{len(layout.list_manifests(roots[c]))} incremental exports" for c, m in latest.items())
        + "; processes stopped; starting Spark")  # fmt: skip
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # loopback only (and no hostname warning)
    os.environ.setdefault("AUDIT_SPARK_MASTER", "local[2]")  # BROKER.md: local[2], loopback, no UI
    from audit.queries import VIOLATION_QUERIES, AuditParams
    from audit.run import run_queries
    from audit.spark import SnapshotStore, spark_session
    from audit.verdict import SHOWN_ROWS, verdict_text

    spark = spark_session()
    texts, ok = [], True
    try:
        for c, root in roots.items():
            results = run_queries(spark, SnapshotStore(root), [*VIOLATION_QUERIES, "impact_vs_outcome"], AuditParams(),
                                  limit=SHOWN_ROWS)  # fmt: skip
            impact = results.pop()  # impact_vs_outcome, info: reported, never failing
            text, passed = verdict_text(results, latest[c].metadata_offset, latest[c].taken_at)
            stops = latest[c].tables["failover_impacts"].rows if "failover_impacts" in latest[c].tables else 0
            text += (f"; the stop's impact record ({stops} partition(s), prediction beside outcome): "
                     f"{impact.row_count} differ ({', '.join(sorted({r['differs'] for r in impact.rows})) or 'none'})")  # fmt: skip
            texts.append(f"coordinator {c} ({', '.join(latest[c].mirrors)}): {text}")
            ok = ok and passed
    finally:
        spark.stop()
    out.write(f"\nAUDIT VERDICT: audit {'PASS' if ok else 'FAIL'}\n" + "".join(f"    {t}\n" for t in texts))
    for c, root in roots.items():
        out.write(f"    (report: python -m audit --snapshots {root} --html {workdir / f'audit-report-{c}.html'})\n")
    return 0 if ok else 1

