"""Run audit queries and collect their results as plain Python data (for CLI, report, verdict)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from audit.progress import Progress
from audit.queries import QUERIES, AuditParams, Kind, fails_audit
from audit.spark import SnapshotStore


@dataclass(frozen=True)
class QueryResult:
    name: str
    kind: Kind
    description: str
    columns: list[str]
    rows: list[dict[str, Any]]  # at most ``limit`` rows
    row_count: int  # all rows, also those beyond the limit
    seconds: float
    fails: bool  # this result fails the audit

    @property
    def truncated(self) -> bool:
        return self.row_count > len(self.rows)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "description": self.description,
            "columns": self.columns,
            "row_count": self.row_count,
            "truncated": self.truncated,
            "fails": self.fails,
            "seconds": round(self.seconds, 3),
            "rows": self.rows,
        }


def run_query(
    spark: SparkSession,
    store: SnapshotStore,
    name: str,
    params: AuditParams,
    *,
    limit: int | None = None,
    strict: bool = False,
) -> QueryResult:
    """``limit`` rows are collected; the full count is taken only when there are more."""
    query = QUERIES[name]
    started = time.perf_counter()
    df = query.build(spark, store, params)
    if limit is None:
        collected = df.collect()
        count = len(collected)
    else:
        # Not persisted: most results fit the limit, and caching them cost more JVM CPU than it
        # saved (docs/audit-performance.md). Only a result past the limit is computed again, to
        # count it (failover_timeline's aggregates run in build(), not again here).
        collected = df.limit(limit + 1).collect()
        count = len(collected) if len(collected) <= limit else df.count()
        collected = collected[:limit]
    rows = [r.asDict(recursive=True) for r in collected]
    return QueryResult(
        name=name,
        kind=query.kind,
        description=query.description,
        columns=list(df.columns),
        rows=rows,
        row_count=count,
        seconds=time.perf_counter() - started,
        fails=fails_audit(query, count, strict),
    )


def run_queries(
    spark: SparkSession,
    store: SnapshotStore,
    names: Sequence[str],
    params: AuditParams,
    *,
    limit: int | None = None,
    strict: bool = False,
    progress: bool = False,
) -> list[QueryResult]:
    bar = Progress(spark.sparkContext, len(names), enabled=progress)
    results = []
    for name in names:
        with bar.query(name):
            results.append(run_query(spark, store, name, params, limit=limit, strict=strict))
    return results
