"""The broker of the coordinator's own topics in the main job and the benches (``streams.brokers.own``):
Apache Kafka by default, noida-db on request or, saying why, where Kafka cannot run."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafka_fixtures import require_apache_kafka
from streams.brokers.noida import BrokerError, LocalBroker, probe
from streams.brokers.own import OWN_KAFKA_OVERRIDES, start_own_broker
from streams.demo.__main__ import main as demo_main


def _port(bootstrap: str) -> int:
    return int(bootstrap.split(",")[0].rsplit(":", 1)[1])


def test_noida_on_request(tmp_path: Path) -> None:
    broker, what = start_own_broker("noida", tmp_path)
    try:
        assert isinstance(broker, LocalBroker) and probe("127.0.0.1", _port(broker.bootstrap))
        assert what == f"noida-db broker on {broker.bootstrap}"
    finally:
        broker.stop()


def test_without_kafka_the_default_is_noida_and_says_why_and_kafka_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("KIP1279_KAFKA_LIB", str(tmp_path / "no-jars"))
    broker, what = start_own_broker(None, tmp_path / "default")
    try:
        assert isinstance(broker, LocalBroker)
        assert what.startswith(f"noida-db broker on {broker.bootstrap} (Apache Kafka cannot run here: ")
        assert str(tmp_path / "no-jars") in what
    finally:
        broker.stop()
    with pytest.raises(BrokerError, match="--broker kafka: .*no-jars"):
        start_own_broker("kafka", tmp_path / "kafka")


def test_the_demo_takes_only_the_known_brokers(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        demo_main(["--broker", "redpanda"])
    assert "invalid choice: 'redpanda'" in capsys.readouterr().err


@pytest.mark.slow
def test_the_default_is_apache_kafka_where_it_can_run(tmp_path: Path) -> None:
    require_apache_kafka()
    broker, what = start_own_broker(None, tmp_path)
    try:
        assert type(broker).__name__ == "ApacheKafkaCluster"
        assert what.startswith(f"Apache Kafka {broker.version} (one KRaft node) on {broker.bootstrap}")
        assert probe("127.0.0.1", _port(broker.bootstrap))
        # Idle costs: Kafka's broker heartbeat, a KRaft no-op record every 5 s (not every 500 ms).
        props = dict(line.split("=", 1) for line in broker.nodes[0].properties_path.read_text().splitlines() if "=" in line)
        assert {k: props[k] for k in OWN_KAFKA_OVERRIDES} == OWN_KAFKA_OVERRIDES
        assert int(props["metadata.max.idle.interval.ms"]) >= 5000 and int(props["broker.heartbeat.interval.ms"]) >= 2000
    finally:
        broker.stop()
