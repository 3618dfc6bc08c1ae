"""``export_and_verdict``: what the worker calls after each snapshot."""

from __future__ import annotations

from pathlib import Path

import msgspec
from pyspark.sql import SparkSession

from audit import export_and_verdict
from audit.model import AuditSnapshot
from coordinator.states import MirrorState as S


def test_clean_then_violating_snapshot(spark: SparkSession, sample: list[AuditSnapshot], tmp_path: Path) -> None:
    text, ok = export_and_verdict(sample[-2], str(tmp_path))
    assert ok and text.startswith(f"audit PASS at metadata offset {sample[-2].metadata_offset}")

    last = sample[-1]
    victim = next(p for p in last.partitions if p.state == S.MIRRORING)
    parts = [msgspec.structs.replace(p, dest_leader_epoch=0, source_leader_epoch=4) if p is victim else p
             for p in last.partitions]  # fmt: skip
    text, ok = export_and_verdict(msgspec.structs.replace(last, partitions=parts), str(tmp_path))
    assert not ok
    assert text.startswith(f"audit FAIL at metadata offset {last.metadata_offset}")
    assert "dle_sle_violations: 1 rows" in text
    assert f"topic={victim.topic}, partition={victim.partition}" in text
