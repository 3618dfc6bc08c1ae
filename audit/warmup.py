"""Pay a new Spark session's start-up once, before the first real query.

A fresh JVM loads Spark's classes, interprets its hot paths until the JIT compiles them, and
generates and compiles code for every new plan: the first query of a session costs about 5 CPU-s
more than the same query run again (``docs/audit-performance.md``). ``warm_up`` builds the HTML
report (every query, and the report's own reads) over a tiny store of the sample history
(``audit.sample``) in a temp directory, then deletes it. The code Spark generates depends on the
plan and the schemas, not on the paths, so the real queries then find it compiled, as they would
in a long-lived session. Callers that time queries report the warm-up apart (``bench/audit.py``:
``warmup_seconds``); it saves nothing in total for a one-shot run, so the CLI does not call it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from pyspark.sql import SparkSession

from audit.export import export_snapshot
from audit.queries import AuditParams
from audit.report import build_report
from audit.sample import sample_history
from audit.spark import SnapshotStore


def warm_up(spark: SparkSession) -> int:
    """Builds the report over a two-snapshot sample store; returns its length (a check it ran)."""
    history = sample_history(steps=12, partitions=2)
    with tempfile.TemporaryDirectory(prefix="audit-warmup-") as tmp:
        for snapshot in (history[len(history) // 2], history[-1]):  # two: "all" and "latest" differ
            export_snapshot(snapshot, Path(tmp))
        return len(build_report(spark, SnapshotStore(tmp), AuditParams()))
