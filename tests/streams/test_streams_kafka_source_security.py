"""The Kafka source port's security settings against Apache Kafka's own TLS and SASL listeners.

noida-db has no TLS listener and takes any SASL/PLAIN credentials (``test_streams_kafka_source``
puts a TLS proxy in front of it). Apache Kafka checks for real: here one KRaft node serves, beside
PLAINTEXT,

- ``SSL``: TLS with required client certificates (mutual TLS), from a trustme CA, PEM stores;
- ``SASL_SSL``: SCRAM-SHA-512 (credentials written at format time) and PLAIN, inside TLS.

The port must read through each exactly what it reads over PLAINTEXT, and a wrong password, a
missing client certificate or an untrusted broker certificate must fail as SourceUnavailable
(the core then moves the partitions to FAILED with the reason), never hang or pass.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme
from cryptography.hazmat.primitives import serialization
from kafka import KafkaProducer

from coordinator.ports import IsolationLevel, SourceUnavailable
from kafka_fixtures import require_apache_kafka
from streams.brokers.apache_kafka import ApacheKafkaCluster
from streams.kafka.source import KafkaSourceCluster

pytestmark = pytest.mark.slow

USER, PASSWORD = "mirror", "mirror-secret"
SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN_LOGIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
TOPIC = "secured"


class Secured:
    def __init__(self, cluster: ApacheKafkaCluster, ca: trustme.CA, ca_pem: Path) -> None:
        self.cluster, self.ca, self.ca_pem = cluster, ca, ca_pem

    def trust(self) -> dict[str, str]:
        return {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.ca_pem)}

    def client_cert(self, ca: trustme.CA | None = None) -> dict[str, str]:
        leaf = (ca or self.ca).issue_cert("mirror.clients.example")
        return {"ssl.keystore.type": "PEM", "ssl.keystore.key": leaf.private_key_pem.bytes().decode(),
                "ssl.keystore.certificate.chain": "".join(c.bytes().decode() for c in leaf.cert_chain_pems)}  # fmt: skip

    def sasl(self, mechanism: str, password: str = PASSWORD) -> dict[str, str]:
        login = SCRAM_LOGIN if mechanism.startswith("SCRAM") else PLAIN_LOGIN
        return {**self.trust(), "security.protocol": "SASL_SSL", "sasl.mechanism": mechanism,
                "sasl.jaas.config": f'{login} required username="{USER}" password="{password}";'}  # fmt: skip


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    require_apache_kafka()
    base = tmp_path_factory.mktemp("kafka-security")
    ca = trustme.CA()
    ca_pem, broker_pem = base / "ca.pem", base / "broker.pem"
    ca.cert_pem.write_to_path(str(ca_pem))
    server = ca.issue_cert("127.0.0.1", "localhost")
    # Kafka's PEM key store: the private key, in PKCS#8 (the only PEM key form Kafka reads), and
    # the certificate chain in one file.
    key = serialization.load_pem_private_key(server.private_key_pem.bytes(), password=None)
    pkcs8 = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    broker_pem.write_bytes(pkcs8 + b"".join(c.bytes() for c in server.cert_chain_pems))
    overrides = {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(broker_pem),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(ca_pem),
        "listener.name.ssl.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": f"{SCRAM_LOGIN} required;",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": f'{PLAIN_LOGIN} required user_{USER}="{PASSWORD}";',
    }
    cluster = ApacheKafkaCluster(
        base / "kafka", brokers=1, overrides=overrides, extra_listeners={"SSL": "SSL", "SASL_SSL": "SASL_SSL"},
        format_args=["--add-scram", f"SCRAM-SHA-512=[name={USER},password={PASSWORD}]"],
    )  # fmt: skip
    cluster.start()
    try:
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, enable_idempotence=True, linger_ms=5)
        for i in range(200):
            producer.send(TOPIC, key=b"k%d" % (i % 7), value=b"v%d" % i)
        producer.flush()
        producer.close()
        yield Secured(cluster, ca, ca_pem)
    finally:
        cluster.stop()


def _payloads(port: KafkaSourceCluster) -> list[bytes]:
    [topic] = [t for t in port.describe_topics() if t.name == TOPIC]
    tp = topic.partitions[0].topic_partition
    return [b.payload for b in port.fetch(tp, 0, 1 << 20, IsolationLevel.READ_UNCOMMITTED).batches]


def test_every_listener_serves_the_same_batches(secured: Secured) -> None:
    c = secured.cluster
    with KafkaSourceCluster(c.bootstrap, {}) as plain:
        expected = _payloads(plain)
    assert expected, "the producer's batches are there"
    mutual = {"security.protocol": "SSL", **secured.trust(), **secured.client_cert()}
    with KafkaSourceCluster(c.listener_bootstrap("SSL"), mutual) as port:
        assert _payloads(port) == expected
    for mechanism in ("SCRAM-SHA-512", "PLAIN"):
        with KafkaSourceCluster(c.listener_bootstrap("SASL_SSL"), secured.sasl(mechanism)) as port:
            assert _payloads(port) == expected, mechanism


def test_what_the_broker_refuses_is_source_unavailable(secured: Secured, tmp_path: Path) -> None:
    c = secured.cluster
    for mechanism in ("SCRAM-SHA-512", "PLAIN"):
        with KafkaSourceCluster(c.listener_bootstrap("SASL_SSL"), secured.sasl(mechanism, "wrong"),
                                request_timeout_ms=5000) as port:  # fmt: skip
            with pytest.raises(SourceUnavailable):
                port.describe_topics()
    no_cert = {"security.protocol": "SSL", **secured.trust()}
    stranger_cert = {**no_cert, **secured.client_cert(trustme.CA())}
    for props in (no_cert, stranger_cert):
        with KafkaSourceCluster(c.listener_bootstrap("SSL"), props, request_timeout_ms=5000) as port:
            with pytest.raises(SourceUnavailable):
                port.describe_topics()
    stranger_ca = tmp_path / "stranger.pem"
    trustme.CA().cert_pem.write_to_path(str(stranger_ca))
    untrusting = {**secured.sasl("SCRAM-SHA-512"), "ssl.truststore.location": str(stranger_ca)}
    with KafkaSourceCluster(c.listener_bootstrap("SASL_SSL"), untrusting, request_timeout_ms=5000) as port:
        with pytest.raises(SourceUnavailable):  # the broker's certificate is not trusted
            port.describe_topics()
