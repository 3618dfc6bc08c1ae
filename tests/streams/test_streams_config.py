"""Worker settings: properties, env, per-cluster topic names, and the CLI's usage errors."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest

from streams import cli
from streams import config as wc


def test_properties_env_and_overrides(tmp_path: Path) -> None:
    path = tmp_path / "worker.properties"
    path.write_text("# a comment\nbootstrap.servers = 10.0.0.1:9092\ncluster.name=b\n"
                    "mirror.state.topic.num.partitions: 8\nsasl.mechanism=PLAIN\nlong.value=a\\\n  b\n")
    cfg = wc.load(path, env={"KIP1279_BOOTSTRAP": "127.0.0.1:1234"}, data_dir=str(tmp_path))
    assert cfg.bootstrap_servers == "127.0.0.1:1234"  # env beats the file
    assert cfg.state_partitions == 8 and cfg.extra == {"sasl.mechanism": "PLAIN", "long.value": "ab"}
    assert cfg.metadata_topic_name == "b.__kip1279_metadata"
    assert cfg.mirror_state_topic_name == "b.__mirror_state"
    assert cfg.dlq_topic_name == "b.__kip1279_metadata.dlq"
    assert cfg.snapshot_dir == tmp_path / "b" / "snapshots"
    other = cfg.with_overrides(cluster_name="a")
    assert {other.metadata_topic_name, other.mirror_state_topic_name}.isdisjoint(
        {cfg.metadata_topic_name, cfg.mirror_state_topic_name})  # two clusters never share a topic
    assert wc.WorkerConfig().mirror_state_topic_name == "__mirror_state"


def test_bad_settings_are_refused(tmp_path: Path) -> None:
    with pytest.raises(wc.ConfigError, match="not an integer"):
        wc.from_properties({"mirror.state.topic.num.partitions": "many"})
    with pytest.raises(wc.ConfigError, match="cluster.name"):
        wc.WorkerConfig(cluster_name="a/b")
    with pytest.raises(wc.ConfigError, match="cannot read"):
        wc.load(tmp_path / "missing.properties")


def test_aiokafka_debug_payloads_are_scrubbed(caplog: pytest.LogCaptureFixture) -> None:
    wc.install_payload_redaction()
    wc.install_payload_redaction()  # idempotent
    caplog.set_level(logging.DEBUG)
    logging.getLogger("aiokafka.conn").debug("Request %s", {"value": b"password=hunter2"})
    assert "hunter2" not in caplog.text and "redacted" in caplog.text


def test_cli_usage_errors_are_one_line() -> None:
    out, err = io.StringIO(), io.StringIO()
    assert cli.main(["--bootstrap-server", "127.0.0.1:1", "--start", "--mirror", "m"], out=out, err=err) == 2
    assert err.getvalue().strip() == "error: --topics is required here"
    err = io.StringIO()
    assert cli.main(["--bootstrap-server", "nonsense", "--list"], out=out, err=err) == 2
    assert "HOST:PORT" in err.getvalue() and "Traceback" not in err.getvalue()
