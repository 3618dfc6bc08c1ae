"""``export_and_verdict``: the worker's one call: export a snapshot, run the violation checks."""

from __future__ import annotations

import os
from collections.abc import Sequence

from pyspark.sql import SparkSession

from audit.export import export_snapshot
from audit.model import AuditSnapshot
from audit.queries import VIOLATION_QUERIES, AuditParams
from audit.run import QueryResult, run_queries
from audit.spark import SnapshotStore, spark_session

SHOWN_ROWS = 5


def _row_summary(r: QueryResult) -> list[str]:
    keys = [c for c in r.columns if c not in ("topic_id",)][:7]
    lines = ["    " + ", ".join(f"{k}={row.get(k)}" for k in keys) for row in r.rows[:SHOWN_ROWS]]
    if r.row_count > SHOWN_ROWS:
        lines.append(f"    ... and {r.row_count - SHOWN_ROWS} more")
    return lines


def verdict_text(results: Sequence[QueryResult], offset: int, taken_at: str) -> tuple[str, bool]:
    failing = [r for r in results if r.fails]
    head = f"audit {'FAIL' if failing else 'PASS'} at metadata offset {offset} (taken {taken_at}): "
    if not failing:
        return head + f"no violations in {len(results)} checks", True
    lines = [head + f"{sum(r.row_count for r in failing)} violation rows in {len(failing)} of {len(results)} checks"]
    for r in failing:
        lines.append(f"  {r.name}: {r.row_count} rows — {r.description}")
        lines += _row_summary(r)
    return "\n".join(lines), False


def export_and_verdict(
    snapshot: AuditSnapshot,
    out_dir: str | os.PathLike[str],
    *,
    spark: SparkSession | None = None,
    params: AuditParams | None = None,
    checks: Sequence[str] = VIOLATION_QUERIES,
) -> tuple[str, bool]:
    """Export ``snapshot`` to ``out_dir`` and audit the store: (one-paragraph verdict, ok).

    Uses the active Spark session, or starts one (``AUDIT_SPARK_MASTER``, else ``local[*]``).
    Violation checks cover every exported snapshot, so an old DLE < SLE keeps failing: the
    verdict answers "did it ever break", not only "is it broken now".
    """
    result = export_snapshot(snapshot, out_dir)
    spark = spark or spark_session()
    store = SnapshotStore(out_dir)
    results = run_queries(spark, store, list(checks), params or AuditParams(), limit=SHOWN_ROWS)
    return verdict_text(results, result.manifest.metadata_offset, result.manifest.taken_at)
