"""``kafka-cluster-mirrors audit`` (``audit.cli:main``): tables, JSON, exit codes, progress bar."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from audit.cli import EXIT_OK, EXIT_USAGE, EXIT_VIOLATIONS, main
from audit.progress import Progress
from audit.queries import QUERIES

ROOT = Path(__file__).resolve().parents[2]


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_clean_store_passes_with_tables(spark: SparkSession, sample_store: Path) -> None:
    code, out, _ = run(["stuck_partitions", "lag_per_mirror", "--snapshots", str(sample_store), "--limit", "3"])
    assert code == EXIT_OK
    assert "== stuck_partitions (violation) 0 rows ok" in out
    assert "== lag_per_mirror (info) 48 rows" in out and "... 45 more rows" in out
    header = next(line for line in out.splitlines() if line.startswith("mirror"))
    assert header.split() == ["mirror", "snapshot_offset", "taken_at", "partitions", "lagging_partitions",
                              "total_lag", "max_lag"]  # fmt: skip
    assert out.rstrip().endswith("audit PASS")


def test_violations_gate_the_exit_code_and_json(spark: SparkSession, planted) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run(["dle_sle_violations", "stuck_partitions", "config_drift", "--snapshots", str(planted.root), "--json"])
    assert code == EXIT_VIOLATIONS
    doc = json.loads(out)
    assert doc["ok"] is False and doc["failing_queries"] == ["dle_sle_violations", "stuck_partitions"]
    q = {r["name"]: r for r in doc["queries"]}
    [row] = q["dle_sle_violations"]["rows"]
    assert (row["topic"], row["partition"]) == (planted.dle_victim.topic, planted.dle_victim.partition)
    assert q["config_drift"]["row_count"] == 2 and q["config_drift"]["fails"] is False
    assert doc["snapshots"]["latest_metadata_offset"] == planted.snapshot.metadata_offset
    # stuck for 15 minutes: not stuck under a 20-minute threshold; drift fails only with --strict
    code, _, _ = run(["stuck_partitions", "config_drift", "--snapshots", str(planted.root), "--stuck-after", "20m"])
    assert code == EXIT_OK
    code, out, _ = run(["config_drift", "--snapshots", str(planted.root), "--strict"])
    assert code == EXIT_VIOLATIONS and "audit FAIL: config_drift" in out


def test_mirror_filter(spark: SparkSession, planted) -> None:  # type: ignore[no-untyped-def]
    other = "c-to-b" if planted.dle_victim.mirror == "a-to-b" else "a-to-b"
    code, _, _ = run(["dle_sle_violations", "--snapshots", str(planted.root), "--mirror", other])
    assert code == EXIT_OK


def test_usage_errors(tmp_path: Path) -> None:
    code, _, err = run(["no_such_query", "--snapshots", str(tmp_path)])
    assert code == EXIT_USAGE and "unknown query no_such_query" in err
    code, _, err = run(["--snapshots", str(tmp_path)])
    assert code == EXIT_USAGE and "no complete snapshot" in err
    code, _, err = run([])
    assert code == EXIT_USAGE and "--snapshots DIR is required" in err
    code, _, err = run(["--stuck-after", "soon", "--snapshots", str(tmp_path)])
    assert code == EXIT_USAGE


def test_progress_bar_draws_spark_task_progress(spark: SparkSession) -> None:
    stream = io.StringIO()
    bar = Progress(spark.sparkContext, 1, enabled=True, stream=stream, delay_s=0.0)
    with bar.query("slow_count"):
        spark.range(0, 3_000_000, numPartitions=8).selectExpr("sum(id * id)").collect()
    text = stream.getvalue()
    assert "[1/1] slow_count" in text and "tasks" in text and text.endswith("\n")


def test_python_m_audit_list_and_export(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    listed = subprocess.run([sys.executable, "-m", "audit", "--list"], capture_output=True, text=True, env=env, cwd=ROOT)
    assert listed.returncode == 0
    assert [line.split()[0] for line in listed.stdout.splitlines()] == list(QUERIES)
    exported = subprocess.run(
        [sys.executable, "-m", "audit", "export", "--sample", "--snapshots", str(tmp_path)],
        capture_output=True, text=True, env=env, cwd=ROOT,
    )  # fmt: skip
    assert exported.returncode == 0, exported.stderr
    assert len(list((tmp_path / "_manifests").glob("snapshot-*.json"))) == 24


def test_export_from_json(sample, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import msgspec

    src = tmp_path / "snaps.json"
    src.write_bytes(msgspec.json.encode(sample[:3]))
    code, out, _ = run(["export", "--from-json", str(src), "--snapshots", str(tmp_path / "store")])
    assert code == EXIT_OK and out.count("snapshot offset") == 3
    one = tmp_path / "one.json"
    one.write_bytes(msgspec.json.encode(sample[3]))
    code, out, _ = run(["export", "--from-json", str(one), "--snapshots", str(tmp_path / "store")])
    assert code == EXIT_OK and len(list((tmp_path / "store" / "_manifests").glob("snapshot-*.json"))) == 4
    code, _, err = run(["export", "--from-json", str(one), "--snapshots", str(tmp_path / "store")])
    assert code == EXIT_OK  # the same snapshot again: already exported
    (tmp_path / "bad.json").write_text('{"metadata_offset": "x"}')
    code, _, err = run(["export", "--from-json", str(tmp_path / "bad.json"), "--snapshots", str(tmp_path / "s2")])
    assert code == EXIT_USAGE and "Expected `int`" in err
