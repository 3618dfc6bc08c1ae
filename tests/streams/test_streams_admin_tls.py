"""The admin endpoint over TLS with client certificates, against a real controller process on the
session's noida-db broker: who gets in, which principal a certificate stands for, what it may do.
Certificates come from a trustme CA made per test."""

from __future__ import annotations

import asyncio
import datetime
import io
import logging
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from coordinator.image import AclOperation
from coordinator.states import ErrorCode
from records.framing import ApiMessageAndVersion
from records.registry import default_schemas
from streams import tls as admin_tls
from streams.admin import cli
from streams.admin.client import ClusterMirrorAdmin
from streams.config import ConfigError, WorkerConfig
from streams.admin.controller import ClusterMirrorController
from streams.demo.harness import PY, Processes

S = default_schemas()
ADMIN = "User:CN=admin,OU=ops,O=acme"
ALICE = "User:CN=alice,OU=ops,O=acme"
TOPICS = {"orders": uuid.UUID(int=101), "payments": uuid.UUID(int=102)}


def amv(_message: str, /, **fields: object) -> ApiMessageAndVersion:
    return ApiMessageAndVersion(S.struct(_message)(**fields), 0, S.spec(_message).api_key)  # type: ignore[arg-type]


class Certs:
    """A CA, the controller's certificate and clients' key stores, as PEM files."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ca = trustme.CA()
        self.ca_pem = self._write("ca.pem", self.ca.cert_pem.bytes())
        server = self.ca.issue_cert("127.0.0.1", "localhost", common_name="controller", organization_name="acme")
        self.server_keystore = self._write("controller.pem", server.private_key_and_cert_chain_pem.bytes())

    def _write(self, name: str, data: bytes) -> Path:
        path = self.root / name
        path.write_bytes(data)
        return path

    def client(self, cn: str, ca: trustme.CA | None = None) -> trustme.LeafCert:
        return (ca or self.ca).issue_cert(f"{cn}.clients.acme", common_name=cn, organization_name="acme",
                                          organization_unit_name="ops")  # fmt: skip

    def command_config(self, name: str, leaf: trustme.LeafCert | None, *, trust: Path | None = None,
                       password: str | None = None, extra: str = "") -> Path:  # fmt: skip
        lines = ["security.protocol=SSL", "ssl.truststore.type=PEM", f"ssl.truststore.location={trust or self.ca_pem}"]
        if leaf is not None:
            key = leaf.private_key_pem.bytes()
            if password is not None:  # an encrypted PKCS#8 key, as Kafka's PEM key stores take it
                loaded = serialization.load_pem_private_key(key, None)
                key = loaded.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.BestAvailableEncryption(password.encode()))  # fmt: skip
                lines.append(f"ssl.key.password={password}")
            chain = b"".join(b.bytes() for b in leaf.cert_chain_pems)
            store = self._write(f"{name}.keystore.pem", key + chain)
            lines += ["ssl.keystore.type=PEM", f"ssl.keystore.location={store}"]
        return self._write(f"{name}.properties", ("\n".join(lines) + "\n" + extra).encode())


@pytest.fixture
def certs(tmp_path: Path) -> Certs:
    return Certs(tmp_path)


async def seed(cfg: WorkerConfig, caplog: pytest.LogCaptureFixture) -> None:
    """The destination's topics and alice's ACL in the metadata log, before the TLS controller starts
    (the log has one writer at a time). This controller is local mode: it says so."""
    c = ClusterMirrorController(cfg)
    with caplog.at_level(logging.INFO, logger="streams.admin.controller"):
        await c.start()
    try:
        assert "PLAINTEXT, local mode" in caplog.text
        records = []
        for name, tid in TOPICS.items():
            records.append(amv("TopicRecord", name=name, topic_id=tid))
            records.append(amv("PartitionRecord", partition_id=0, topic_id=tid, replicas=(1,), isr=(1,), leader=1))
        await c.append(records)
        await c.create_acls(ALICE, [AclOperation.ALTER], mirror="a-to-b")
    finally:
        await c.stop()


@pytest.fixture
def tls_controller(worker_config: WorkerConfig, certs: Certs, tmp_path: Path,
                   caplog: pytest.LogCaptureFixture) -> Iterator[str]:  # fmt: skip
    """A ``kip1279-worker --controller`` process whose admin listener requires client certificates."""
    asyncio.run(seed(worker_config, caplog))
    config = tmp_path / "controller.properties"
    config.write_text(
        f"bootstrap.servers={worker_config.bootstrap_servers}\n"
        f"cluster.name={worker_config.cluster_name}\n"
        f"data.dir={worker_config.data_dir}\n"
        f"mirror.state.topic.num.partitions={worker_config.state_partitions}\n"
        "controller.listener=127.0.0.1:0\n"
        "admin.listener.ssl.keystore.type=PEM\n"
        f"admin.listener.ssl.keystore.location={certs.server_keystore}\n"
        "admin.listener.ssl.truststore.type=PEM\n"
        f"admin.listener.ssl.truststore.location={certs.ca_pem}\n"
        "admin.listener.ssl.client.auth=required\n"
    )
    procs = Processes(tmp_path)
    try:
        _, line = procs.spawn("controller", [PY, "-m", "streams.worker.main", "--controller", "--config", str(config),
                                             "--super-users", ADMIN], ready="LISTENING")  # fmt: skip
        yield line.split()[1]
        assert "SSL, client certificates required" in (tmp_path / "controller.log").read_text()
    finally:
        procs.close()


def run_cli(endpoint: str, command_config: Path, *argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["--bootstrap-server", endpoint, "--command-config", str(command_config), *argv], out=out, err=err)
    return code, out.getvalue() + err.getvalue()


def mirror_config(tmp_path: Path) -> Path:
    path = tmp_path / "a-to-b.properties"
    path.write_text("bootstrap.servers=127.0.0.1:19092\n")
    return path


def test_who_gets_in_and_what_each_principal_may_do(tls_controller: str, certs: Certs, tmp_path: Path) -> None:
    ep = tls_controller
    # A super user (an encrypted key and its ssl.key.password) creates the mirror.
    admin = certs.command_config("admin", certs.client("admin"), password="k3y-pa55")
    code, out = run_cli(ep, admin, "--create", "--mirror", "a-to-b", "--mirror-config", str(mirror_config(tmp_path)))
    assert code == 0, out

    # No certificate: the handshake fails, nothing is served.
    code, out = run_cli(ep, certs.command_config("anon", None), "--list")
    assert code == 1 and "SSL handshake failed" in out, out
    # A certificate from another CA: refused the same way.
    rogue = certs.command_config("rogue", certs.client("admin", ca=trustme.CA()))
    code, out = run_cli(ep, rogue, "--list")
    assert code == 1 and "SSL handshake failed" in out, out
    # A client that does not trust the controller's CA refuses the controller.
    other_ca = certs._write("other-ca.pem", trustme.CA().cert_pem.bytes())
    code, out = run_cli(ep, certs.command_config("wary", certs.client("admin"), trust=other_ca), "--list")
    assert code == 1 and "SSL handshake with the controller" in out and "the controller's certificate" in out, out

    # A principal without an ACL: authenticated, not authorized.
    bob = certs.command_config("bob", certs.client("bob"))
    code, out = run_cli(ep, bob, "--start", "--mirror", "a-to-b", "--topics", "orders")
    assert code == 1 and "CLUSTER_MIRROR_AUTHORIZATION_FAILED" in out, out
    code, out = run_cli(ep, bob, "--list")
    assert code == 0 and "a-to-b" not in out, out
    # ...and claiming the super user's principal changes nothing: the certificate decides.
    code, out = run_cli(ep, certs.command_config("bob-claims", certs.client("bob"), extra=f"principal={ADMIN}\n"),
                        "--describe", "--mirror", "a-to-b")  # fmt: skip
    assert code == 1 and "CLUSTER_MIRROR_AUTHORIZATION_FAILED" in out and "is ignored" in out, out

    async def claim() -> int:
        ctx = admin_tls.client_context(admin_tls_props(certs, "bob"))
        async with ClusterMirrorAdmin(ep, principal=ADMIN, ssl_context=ctx) as c:  # sent on the wire this time
            return (await c.delete("a-to-b")).response.error_code  # type: ignore[attr-defined, no-any-return]

    assert asyncio.run(claim()) == ErrorCode.CLUSTER_MIRROR_AUTHORIZATION_FAILED

    # alice holds ALTER on a-to-b (given as CN=alice,OU=ops,O=acme): exactly that, and the DESCRIBE it implies.
    alice = certs.command_config("alice", certs.client("alice"))
    code, out = run_cli(ep, alice, "--start", "--mirror", "a-to-b", "--topics", "orders")
    assert code == 0 and "orders: started" in out, out
    code, out = run_cli(ep, alice, "--describe", "--mirror", "a-to-b")
    assert code == 0 and "orders" in out, out
    code, out = run_cli(ep, alice, "--delete", "--mirror", "a-to-b")
    assert code == 1 and "CLUSTER_MIRROR_AUTHORIZATION_FAILED" in out, out
    code, out = run_cli(ep, alice, "--create", "--mirror", "b-to-a", "--mirror-config", str(mirror_config(tmp_path)))
    assert code == 1 and "CLUSTER_MIRROR_AUTHORIZATION_FAILED" in out, out

    # The super user again, with the PEM inline keys Kafka takes (line breaks lost, as in a properties file).
    leaf = certs.client("admin")
    inline = certs._write("admin-inline.properties", (
        "security.protocol=SSL\n"
        f"ssl.keystore.key={_one_line(leaf.private_key_pem.bytes())}\n"
        f"ssl.keystore.certificate.chain={_one_line(b''.join(b.bytes() for b in leaf.cert_chain_pems))}\n"
        f"ssl.truststore.certificates={_one_line(certs.ca.cert_pem.bytes())}\n"
    ).encode())  # fmt: skip
    code, out = run_cli(ep, inline, "--delete", "--mirror", "a-to-b")
    assert code == 1 and "AUTHORIZATION" not in out, out  # authorized; refused only because orders is not stopped


def admin_tls_props(certs: Certs, name: str) -> dict[str, str]:
    from streams.config import load_properties

    return load_properties(certs.root / f"{name}.properties")


def _one_line(pem: bytes) -> str:
    return " ".join(pem.decode().split())


def test_a_listener_off_loopback_without_tls_is_refused(worker_config: WorkerConfig) -> None:
    for argv in ([PY, "-m", "streams.worker.main", "--controller"], [PY, "-c", "import sys; from streams.admin.cli import "
                                                                "controller_main; sys.exit(controller_main())"]):
        done = subprocess.run([*argv, "--bootstrap-server", worker_config.bootstrap_servers, "--listener", "0.0.0.0:0"],
                              capture_output=True, text=True, timeout=60)  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert "refusing to bind the admin listener to '0.0.0.0' without TLS" in done.stderr
    admin_tls.check_bind("0.0.0.0", tls=True)  # with TLS it may
    admin_tls.check_bind("::1", tls=False)


def test_bad_tls_settings_get_clear_errors(certs: Certs, tmp_path: Path) -> None:
    jks = tmp_path / "store.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02")
    cases = [
        ({"security.protocol": "SASL_SSL"}, "takes PLAINTEXT (loopback) or SSL"),
        ({"security.protocol": "SSL", "ssl.truststore.type": "JKS", "ssl.truststore.location": str(jks)},
         "ssl.truststore.type=JKS is not supported"),
        ({"security.protocol": "SSL", "ssl.truststore.location": str(jks)}, "is not PEM"),
        ({"security.protocol": "SSL", "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(jks)},
         "ssl.keystore.type=PKCS12 is not supported"),
        ({"security.protocol": "SSL", "ssl.keystore.location": str(certs.server_keystore), "ssl.keystore.password": "x"},
         "ssl.keystore.password cannot be specified with PEM format"),
        ({"security.protocol": "SSL", "ssl.truststore.location": str(tmp_path / "missing.pem")}, "No such file"),
        ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "ldap"}, "use https, or empty"),
    ]  # fmt: skip
    for props, message in cases:
        with pytest.raises(ConfigError, match=re.escape(message)):
            admin_tls.client_context(props)
    base = {"ssl.keystore.location": str(certs.server_keystore), "ssl.truststore.location": str(certs.ca_pem)}
    assert admin_tls.server_context(base) is not None
    with pytest.raises(ConfigError, match="only 'required' is supported"):
        admin_tls.server_context({**base, "ssl.client.auth": "none"})
    with pytest.raises(ConfigError, match="admin.listener.ssl.truststore.location .* is required"):
        admin_tls.server_context({"ssl.keystore.location": str(certs.server_keystore)})
    with pytest.raises(ConfigError, match="unknown setting"):
        admin_tls.server_context({**base, "ssl.keystore.locaton": "x"})
    with pytest.raises(ConfigError, match="ssl.key.password right"):
        encrypted = certs.command_config("enc", certs.client("enc"), password="right")
        props = admin_tls_props(certs, "enc")
        admin_tls.client_context({**props, "ssl.key.password": "wrong"})
    assert encrypted.exists()


_JAVA = """
import java.io.FileInputStream;
import java.security.cert.CertificateFactory;
import java.security.cert.X509Certificate;

public class PrincipalNames {
    public static void main(String[] args) throws Exception {
        CertificateFactory cf = CertificateFactory.getInstance("X.509");
        for (String path : args) {
            try (FileInputStream in = new FileInputStream(path)) {
                X509Certificate c = (X509Certificate) cf.generateCertificate(in);
                System.out.println("User:" + c.getSubjectX500Principal().getName());
            }
        }
    }
}
"""


@pytest.mark.skipif(shutil.which("java") is None, reason="needs a JDK (java) to compare with")
def test_principal_is_the_subject_as_kafka_names_it(tmp_path: Path) -> None:
    """Kafka's DefaultKafkaPrincipalBuilder makes ``User:`` + ``X500Principal.getName()``; Java itself
    names these subjects, escapes, unknown attributes, multi-valued RDNs and string types included."""
    from cryptography.x509.name import _ASN1Type

    a = x509.NameAttribute
    rdn = x509.RelativeDistinguishedName
    names = [
        x509.Name([a(NameOID.ORGANIZATION_NAME, "acme"), a(NameOID.ORGANIZATIONAL_UNIT_NAME, "ops"),
                   a(NameOID.COMMON_NAME, "alice")]),
        x509.Name([a(NameOID.COUNTRY_NAME, "US"), a(NameOID.COMMON_NAME, 'a,b+c"d\\e<f>g;h=i#j')]),
        x509.Name([a(NameOID.COMMON_NAME, " #lead and trail  "), a(NameOID.EMAIL_ADDRESS, "alice@example.com")]),
        x509.Name([rdn([a(NameOID.DOMAIN_COMPONENT, "com")]), rdn([a(NameOID.DOMAIN_COMPONENT, "example")]),
                   rdn([a(NameOID.USER_ID, "u1"), a(NameOID.SERIAL_NUMBER, "42")])]),
        x509.Name([a(NameOID.COMMON_NAME, "Zoë ünïcode 日本"), a(NameOID.STREET_ADDRESS, "1 Main St"),
                   a(NameOID.STATE_OR_PROVINCE_NAME, "CA"), a(NameOID.LOCALITY_NAME, "Palo Alto")]),
        x509.Name([a(NameOID.COMMON_NAME, "bmp", _type=_ASN1Type.BMPString), a(NameOID.GIVEN_NAME, "Al")]),
    ]  # fmt: skip
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    paths, ours = [], []
    for i, name in enumerate(names):
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                .serial_number(i + 1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
                .sign(key, hashes.SHA256()))  # fmt: skip
        der = cert.public_bytes(serialization.Encoding.DER)
        (path := tmp_path / f"c{i}.der").write_bytes(der)
        paths.append(str(path))
        ours.append(admin_tls.principal_of(der))
    (tmp_path / "PrincipalNames.java").write_text(_JAVA)
    done = subprocess.run(["java", "-Dfile.encoding=UTF-8", "-Dsun.stdout.encoding=UTF-8", str(tmp_path / "PrincipalNames.java"), *paths], capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert ours == done.stdout.decode("utf-8").splitlines()
    assert ours[0] == ALICE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-x", "-q"]))
