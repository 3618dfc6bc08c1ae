"""Secrets never reach the Parquet bytes or the HTML report (planted in conftest's store)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from audit.export import export_snapshot
from audit.model import AuditSnapshot, TransitionRow
from audit.redact import REDACTED, is_sensitive_name, scrub_text
from audit.spark import SnapshotStore


def test_no_secret_in_the_parquet_bytes(planted) -> None:  # type: ignore[no-untyped-def]
    blob = b"".join(p.read_bytes() for p in sorted(planted.root.rglob("*")) if p.is_file())
    assert planted.harmless.encode() in blob, "control value missing: the grep would not see a leak either"
    assert REDACTED.encode() in blob
    assert [s for s in planted.leaks if s.encode() in blob] == []


def test_redacted_values_read_back(spark: SparkSession, planted) -> None:  # type: ignore[no-untyped-def]
    store = SnapshotStore(planted.root)
    cfg = {(r.mirror, r.config_name): (r.config_value, r.redacted) for r in store.read(spark, "mirror_configs").collect()}
    assert cfg[("a-to-b", "client.id")] == (planted.harmless, False)
    assert cfg[("a-to-b", "bootstrap.servers")] == ("a-kafka:9092", False)
    secret_names = [k for k in planted.snapshot.mirror_configs["a-to-b"] if is_sensitive_name(k)]
    assert len(secret_names) == 7
    for name in secret_names:
        assert cfg[("a-to-b", name)] == (REDACTED, True)
    assert store.latest.redacted_values == 2 * len(secret_names) + 2  # both mirrors, plus the drift pair
    [err] = [r.error_message for r in store.read(spark, "partition_states").collect() if r.error_message]
    assert err.startswith("SASL auth failed: password=") and "ErrPw" not in err and REDACTED in err


def test_no_secret_in_the_html_report(planted, planted_report: str) -> None:  # type: ignore[no-untyped-def]
    assert planted.harmless in planted_report  # mirror configs are in the report, redacted
    assert "SASL auth failed" in planted_report  # the stuck partition's error is shown, scrubbed
    assert [s for s in planted.leaks if s in planted_report] == []


@pytest.mark.parametrize(
    ("name", "sensitive"),
    [
        ("sasl.jaas.config", True),
        ("ssl.keystore.password", True),
        ("ssl.keystore.key", True),
        ("client.secret", True),
        ("aws.credentials.provider", True),
        ("sasl.oauthbearer.token.endpoint.url", True),
        ("bootstrap.servers", False),
        ("security.protocol", False),
        ("ssl.keystore.location", False),
        ("groups.include", False),
    ],
)
def test_sensitive_names(name: str, sensitive: bool) -> None:
    assert is_sensitive_name(name) is sensitive


def test_scrub_free_text() -> None:
    assert scrub_text(None) is None
    assert scrub_text("fetch failed: NOT_LEADER") == "fetch failed: NOT_LEADER"
    assert scrub_text("login password=abc123 user=bob") == f"login password={REDACTED} user=bob"
    assert scrub_text('{"api_key": "k-1", "x": 1}') == f'{{"api_key": {REDACTED}, "x": 1}}'
    jaas = 'cfg org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="p"; end'
    assert scrub_text(jaas) == f"cfg {REDACTED} end"


def test_transition_reason_is_scrubbed(spark: SparkSession, tmp_path: Path) -> None:
    t = TransitionRow(mirror="m", topic="t", topic_id="id", partition=0, from_state=16, to_state=0, at_ms=1,
                      metadata_offset=1, reason="oauth token: eyJhbGciOi.secret")  # fmt: skip
    export_snapshot(AuditSnapshot(metadata_offset=1, taken_at_ms=2, transitions=[t]), tmp_path)
    [r] = SnapshotStore(tmp_path).read(spark, "transitions").collect()
    assert r.reason == f"oauth token: {REDACTED}"
