"""ConfigRecords redacted by Kafka's RecordRedactor rule, from a table generated from Kafka's own
ConfigDefs (records/kafka_configs.json, by tools/kafka/src/KafkaConfigTable.java)."""

from __future__ import annotations

import base64
import io
import json
import subprocess
from pathlib import Path

import pytest
from kafka_fixtures import require_apache_kafka

from records.cli import main
from records.framing import MetadataRecordSerde
from records.redact import KAFKA_CONFIGS, REDACTED, is_sensitive_config
from records.registry import default_schemas
from records.segments import Record, build_batch, encode_segment
from streams.brokers.kafka_jars import java_command, kafka_version

GENERATOR = Path(__file__).parents[1] / "tools" / "kafka" / "src" / "KafkaConfigTable.java"
TOPIC, BROKER, GROUP = 2, 4, 32  # ConfigResource.Type ids
SERDE = MetadataRecordSerde(default_schemas())
LDAP_PW = "ldap-bind-pw-1279"


def test_the_table_is_what_kafka_generates_now() -> None:
    require_apache_kafka()
    cmd = java_command(str(GENERATOR), [])  # Java 17 runs a single source file; the jars on its classpath
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == KAFKA_CONFIGS.read_text(), "regenerate: see tools/kafka/src/KafkaConfigTable.java"


@pytest.mark.parametrize(
    ("resource_type", "name", "sensitive"),
    [
        (BROKER, "custom.plugin.ldap.bind.pw", True),  # unknown to Kafka: a plugin's config
        (BROKER, "listener.name.plaintext.ssl.keystore.certificate.chain", True),  # listener-prefixed: unknown as such
        (BROKER, "ssl.keystore.certificate.chain", True),  # PASSWORD-typed
        (BROKER, "sasl.jaas.config", True),
        (BROKER, "max.connections", False),
        (TOPIC, "retention.ms", False),
        (TOPIC, "sasl.jaas.config", True),  # not a topic config
        (GROUP, "consumer.session.timeout.ms", True),  # no ConfigDef for groups in Kafka 4.4.0's schema
        (99, "retention.ms", True),  # no such resource type
    ],
)
def test_kafkas_rule(resource_type: int, name: str, sensitive: bool) -> None:
    assert is_sensitive_config(resource_type, name) is sensitive


def test_the_table_holds_kafkas_password_configs() -> None:
    table = json.loads(KAFKA_CONFIGS.read_text())
    broker = table["resourceTypes"]["BROKER"]["configs"]
    assert table["kafkaVersion"] == kafka_version() and len(broker) > 300
    assert {n for n, t in broker.items() if t == "PASSWORD"} >= {"ssl.key.password", "ssl.keystore.password", "sasl.jaas.config"}


def _segment(tmp_path: Path, values: list[bytes]) -> Path:
    batch = build_batch([Record(i, 0, None, v) for i, v in enumerate(values)], base_offset=0, base_timestamp=0,
                        partition_leader_epoch=1)  # fmt: skip
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(encode_segment([batch]))
    return path


def _config(resource_type: int, name: str, value: str) -> bytes:
    record = default_schemas().struct("ConfigRecord")(resource_type=resource_type, resource_name="1", name=name, value=value)
    return SERDE.encode(record, 0)


def _dump(path: Path, *options: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(["dump-log", str(path), *options], out=out)
    return code, out.getvalue()


@pytest.mark.parametrize("view", [(), ("--format", "kafka", "--cluster-metadata-decoder")])
def test_dump_log_hides_what_kafka_cannot_type_and_shows_the_rest(tmp_path: Path, view: tuple[str, ...]) -> None:
    path = _segment(tmp_path, [
        _config(BROKER, "custom.plugin.ldap.bind.pw", LDAP_PW),
        _config(BROKER, "listener.name.plaintext.ssl.keystore.certificate.chain", "-----BEGIN CERTIFICATE-----"),
        _config(BROKER, "max.connections", "1000"),
    ])  # fmt: skip
    code, out = _dump(path, *view)
    assert code == 0 and LDAP_PW not in out and "BEGIN CERTIFICATE" not in out
    assert out.count(REDACTED) == 2 and "1000" in out
    code, out = _dump(path, *view, "--include-secrets")
    assert LDAP_PW in out and "BEGIN CERTIFICATE" in out and REDACTED not in out


@pytest.mark.parametrize("view", [(), ("--raw",), ("--format", "kafka", "--cluster-metadata-decoder")])
def test_dump_log_never_prints_the_bytes_of_an_undecodable_record(tmp_path: Path, view: tuple[str, ...]) -> None:
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required password="jaas-pw-1279";'
    broken = _config(BROKER, "sasl.jaas.config", jaas) + b"\x00"  # a byte after the body: does not decode
    path = _segment(tmp_path, [broken, b"\x01\x7f\x00" + jaas.encode()])  # and a record type that does not exist
    code, out = _dump(path, *view)
    assert "jaas-pw-1279" not in out
    assert code == (0 if view == ("--raw",) else 3)  # --raw decodes nothing, so finds no damage
    for encoded in (broken, b"\x01\x7f\x00" + jaas.encode()):
        assert base64.b64encode(encoded).decode() not in out and encoded.hex() not in out
