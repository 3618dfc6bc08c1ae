"""Worker settings: properties, env, per-cluster topic names, and the CLI's usage errors."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest

from streams.admin import cli
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
    err = io.StringIO()
    argv = ["--bootstrap-server", "127.0.0.1:1", "--start", "--consistent-cut", "--mirror", "m", "--topics", "t"]
    assert cli.main(argv, out=out, err=err) == 2
    assert err.getvalue().strip() == "error: --consistent-cut goes with --stop"


def test_add_config_is_read_as_kafka_configs_reads_it() -> None:
    assert cli.parse_add_config("a=1, mirror.topics.include=[x.*,y], b=") == {"a": "1", "mirror.topics.include": "x.*,y", "b": ""}
    with pytest.raises(cli.UsageError, match="K=V"):
        cli.parse_add_config("a=1,oops")
    out, err = io.StringIO(), io.StringIO()
    assert cli.main(["--bootstrap-server", "127.0.0.1:1", "--alter", "--mirror", "m"], out=out, err=err) == 2
    assert "--add-config or --delete-config" in err.getvalue()
    assert cli.main(["--bootstrap-server", "127.0.0.1:1", "--describe-config"], out=out, err=err) == 2


def test_group_timing_settings_from_properties_env_and_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from streams.worker import main as worker
    path = tmp_path / "worker.properties"
    path.write_text("worker.session.timeout.ms=10000\nworker.heartbeat.interval.ms=1000\n")
    cfg = wc.load(path, env={"KIP1279_WORKER_REBALANCE_TIMEOUT_MS": "8000"})
    assert (cfg.session_timeout_ms, cfg.heartbeat_interval_ms, cfg.rebalance_timeout_ms) == (10_000, 1_000, 8_000)
    assert "worker.session.timeout.ms" not in cfg.extra
    defaults = wc.WorkerConfig()  # Faust's own defaults
    assert (defaults.session_timeout_ms, defaults.heartbeat_interval_ms, defaults.rebalance_timeout_ms) == (60_000, 3_000, 60_000)

    args = worker.build_parser().parse_args(["--config", str(path), "--session-timeout-ms", "6000",
                                             "--heartbeat-interval-ms", "500", "--rebalance-timeout-ms", "4000"])  # fmt: skip
    cfg = worker.load_config(args)
    assert (cfg.session_timeout_ms, cfg.heartbeat_interval_ms, cfg.rebalance_timeout_ms) == (6_000, 500, 4_000)

    assert worker.main(["--session-timeout-ms", "3000"]) == 2  # a usage error, before anything starts
    err = capsys.readouterr().err
    assert "worker.session.timeout.ms must be between 6000 and 1800000" in err and "Traceback" not in err


@pytest.mark.parametrize(("props", "message"), [
    ({"worker.session.timeout.ms": "5999"}, "worker.session.timeout.ms must be between 6000 and 1800000"),
    ({"worker.session.timeout.ms": "1800001"}, "worker.session.timeout.ms must be between"),
    ({"worker.session.timeout.ms": "10s"}, "session_timeout_ms: '10s' is not an integer"),
    ({"worker.session.timeout.ms": "6000"}, "worker.heartbeat.interval.ms must be > 0 and below"),  # default 3 s heartbeat is fine...
    ({"worker.heartbeat.interval.ms": "60000"}, "worker.heartbeat.interval.ms must be > 0 and below"),
    ({"worker.heartbeat.interval.ms": "0"}, "worker.heartbeat.interval.ms must be > 0"),
    ({"worker.rebalance.timeout.ms": "0"}, "worker.rebalance.timeout.ms must be >= 1"),
])  # fmt: skip
def test_bad_group_timing_is_refused(props: dict[str, str], message: str) -> None:
    if props == {"worker.session.timeout.ms": "6000"}:
        props = {**props, "worker.heartbeat.interval.ms": "6000"}  # ...one equal to the session is not
    with pytest.raises(wc.ConfigError, match=message.replace(".", r"\.")):
        wc.from_properties(props)


def test_the_faust_app_gets_the_group_timing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from streams.state import mirror_state as mss
    # Faust lets its environment beat keyword settings; the worker's settings win all the same.
    monkeypatch.setenv("BROKER_SESSION_TIMEOUT", "7")
    cfg = wc.WorkerConfig(bootstrap_servers="127.0.0.1:1", data_dir=str(tmp_path), session_timeout_ms=10_000,
                          heartbeat_interval_ms=1_000, rebalance_timeout_ms=8_000)  # fmt: skip
    conf = mss.make_app(cfg).conf
    assert (conf.broker_session_timeout, conf.broker_heartbeat_interval, conf.broker_rebalance_timeout) == (10.0, 1.0, 8.0)
    assert conf.broker_request_timeout == 90.0
    # Faust refuses a session timeout above the request timeout: that follows a long session.
    long = mss.make_app(wc.WorkerConfig(data_dir=str(tmp_path), session_timeout_ms=300_000)).conf
    assert long.broker_session_timeout == 300.0 and long.broker_request_timeout == 300.0
    # explicit overrides still beat the config
    assert mss.make_app(cfg, broker_session_timeout=20.0).conf.broker_session_timeout == 20.0
