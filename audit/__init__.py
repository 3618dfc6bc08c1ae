"""Audit on Spark: snapshot export to Parquet, ready audit queries, an HTML report.

- ``audit.model``: the snapshot the coordinator hands over (``AuditSnapshot`` and its rows)
  and the Parquet table schemas;
- ``audit.export``: ``export_snapshot`` / ``export_tables`` (hive layout, manifest last);
- ``audit.queries``: the ready queries (``QUERIES``), as PySpark DataFrames;
- ``audit.report``: the self-contained HTML report;
- ``audit.cli``: ``kafka-cluster-mirrors audit [QUERY ...] --snapshots DIR``;
- ``audit.verdict``: ``export_and_verdict(snapshot, out_dir) -> (text, ok)`` for the worker.

Importing ``audit`` does not import pyspark; the submodules that need it do.
"""

from audit.model import (
    SCHEMA_VERSION,
    AclDriftRow,
    AuditSnapshot,
    ConfigDriftRow,
    GroupSyncRow,
    PartitionRow,
    TransitionRow,
)

__all__ = [
    "SCHEMA_VERSION",
    "AclDriftRow",
    "AuditSnapshot",
    "ConfigDriftRow",
    "GroupSyncRow",
    "PartitionRow",
    "TransitionRow",
    "export_and_verdict",
]


def export_and_verdict(snapshot: AuditSnapshot, out_dir: str) -> tuple[str, bool]:
    """See ``audit.verdict.export_and_verdict`` (imported lazily: it starts Spark)."""
    from audit.verdict import export_and_verdict as run

    return run(snapshot, out_dir)
