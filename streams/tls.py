"""TLS for the controller's admin endpoint: Kafka's ``ssl.*`` settings made into an
``ssl.SSLContext``, and the principal a client certificate stands for.

Both sides read the keys a Kafka client or listener reads, PEM only, as Kafka's
``DefaultSslEngineFactory`` reads them:

- a key store: ``ssl.keystore.location`` (one PEM file with the private key and the certificate
  chain, ``ssl.keystore.type=PEM``), or inline ``ssl.keystore.key`` and
  ``ssl.keystore.certificate.chain``; ``ssl.key.password`` decrypts an encrypted key;
- a trust store: ``ssl.truststore.location`` (PEM CA certificates, ``ssl.truststore.type=PEM``),
  or inline ``ssl.truststore.certificates``;
- ``ssl.endpoint.identification.algorithm``: ``https`` (Kafka's default) checks the server's
  host name, empty does not.

The controller reads them under ``admin.listener.`` (``admin.listener.ssl.keystore.location``
and so on) and always requires a client certificate (``ssl.client.auth=required``). The
principal is ``User:`` plus the certificate's subject as Java's ``X500Principal.getName()``
prints it (RFC 2253), which is what Kafka's ``DefaultKafkaPrincipalBuilder`` makes with the
default ``ssl.principal.mapping.rules``: ``User:CN=alice,OU=ops,O=acme``.
"""

from __future__ import annotations

import ipaddress
import os
import re
import ssl
import tempfile
from collections.abc import Mapping

from cryptography import x509
from cryptography.x509.oid import NameOID

from streams.config import ConfigError

ADMIN_SSL_PREFIX = "admin.listener."
# The attribute keywords Java's RFC 2253 form uses; any other attribute is written OID=#hex.
_RFC2253_KEYWORDS = {
    NameOID.COMMON_NAME: "CN", NameOID.COUNTRY_NAME: "C", NameOID.LOCALITY_NAME: "L",
    NameOID.STATE_OR_PROVINCE_NAME: "ST", NameOID.ORGANIZATION_NAME: "O",
    NameOID.ORGANIZATIONAL_UNIT_NAME: "OU", NameOID.STREET_ADDRESS: "STREET",
    NameOID.DOMAIN_COMPONENT: "DC", NameOID.USER_ID: "UID",
}  # fmt: skip
# The string types Java writes as text (sun.security.x509.AVA.isDerString): UTF8String,
# PrintableString, T61String, IA5String, GeneralString, BMPString.
_UTF8_STRING = 0x0C
_STRING_TAGS = {_UTF8_STRING, 0x13, 0x14, 0x16, 0x1B, 0x1E}
_ESCAPED = set(',=+<>#;"\\')  # sun.security.x509.AVA escapes these anywhere in a value
_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.S)
_SSL_KEYS = {
    "security.protocol", "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password",
    "ssl.keystore.key", "ssl.keystore.certificate.chain", "ssl.key.password", "ssl.truststore.type",
    "ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.certificates",
    "ssl.endpoint.identification.algorithm", "ssl.client.auth",
}  # fmt: skip


# ------------------------------------------------------------------------------- principals


def principal_of(der_certificate: bytes) -> str:
    """``User:`` + the certificate's subject, as Kafka's default principal builder names it."""
    cert = x509.load_der_x509_certificate(der_certificate)
    return "User:" + rfc2253_name(cert.subject)


def rfc2253_name(name: x509.Name) -> str:
    """The name as ``X500Principal.getName()`` prints it: RDNs last to first, no spaces."""
    raw = _raw_values(name.public_bytes())
    rdns = []
    for rdn, values in zip(name.rdns, raw, strict=True):
        avas = []
        for attr, der in zip(rdn, values, strict=True):
            keyword = _RFC2253_KEYWORDS.get(attr.oid)
            if keyword is None or der[0] not in _STRING_TAGS:
                avas.append(f"{attr.oid.dotted_string}=#{der.hex()}")
            else:
                start, end, _ = _tlv(der, 0)
                # Java decodes a UTF8String as UTF-8 and every other string type byte by byte
                # (a BMPString's zero bytes come out as \00): the same name as Kafka's.
                text = der[start:end].decode("utf-8" if der[0] == _UTF8_STRING else "latin-1")
                avas.append(f"{keyword}={_escape(text)}")
        rdns.append("+".join(avas))
    return ",".join(reversed(rdns))


def _escape(value: str) -> str:
    out = "".join(("\\" + c) if c in _ESCAPED else ("\\00" if c == "\0" else c) for c in value)
    # Leading and trailing blanks are escaped too (Java counts '\r' as one).
    lead = len(out) - len(out.lstrip(" \r"))
    trail = len(out.rstrip(" \r"))
    return "".join(("\\" + c) if i < lead or i >= trail else c for i, c in enumerate(out))


def _tlv(data: bytes, pos: int) -> tuple[int, int, int]:
    """(start of contents, end of contents, end of header+contents) of the DER element at pos."""
    length, pos = data[pos + 1], pos + 2
    if length & 0x80:
        n = length & 0x7F
        length, pos = int.from_bytes(data[pos : pos + n], "big"), pos + n
    return pos, pos + length, pos + length


def _raw_values(name_der: bytes) -> list[list[bytes]]:
    """Each attribute value's DER, RDN by RDN (the #hex form needs the encoded value)."""
    rdns: list[list[bytes]] = []
    pos, end, _ = _tlv(name_der, 0)  # Name ::= SEQUENCE OF RelativeDistinguishedName
    while pos < end:
        set_pos, set_end, pos = _tlv(name_der, pos)  # RDN ::= SET OF AttributeTypeAndValue
        values = []
        while set_pos < set_end:
            ava_pos, _, set_pos = _tlv(name_der, set_pos)
            _, _, value_pos = _tlv(name_der, ava_pos)  # skip the OID
            _, _, value_end = _tlv(name_der, value_pos)
            values.append(name_der[value_pos:value_end])
        rdns.append(values)
    return rdns


# ------------------------------------------------------------------------------ SSL contexts


def admin_listener_ssl(extra: Mapping[str, str]) -> dict[str, str]:
    """The ``admin.listener.ssl.*`` settings of a worker config, without the prefix."""
    return {k[len(ADMIN_SSL_PREFIX) :]: v for k, v in extra.items() if k.startswith(ADMIN_SSL_PREFIX + "ssl.")}


def server_context(settings: Mapping[str, str]) -> ssl.SSLContext | None:
    """The admin listener's context, or None when no ``admin.listener.ssl.*`` key is set."""
    if not settings:
        return None
    where = ADMIN_SSL_PREFIX
    _unknown(settings, where)
    auth = settings.get("ssl.client.auth", "required").strip().lower()
    if auth != "required":
        raise ConfigError(f"{where}ssl.client.auth={auth}: the admin listener authenticates by client "
                          f"certificate, only 'required' is supported")  # fmt: skip
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.verify_mode = ssl.CERT_REQUIRED
    if not _load_keystore(ctx, settings, where):
        raise ConfigError(f"{where}ssl.keystore.location (or {where}ssl.keystore.key and "
                          f"{where}ssl.keystore.certificate.chain) is required for TLS")  # fmt: skip
    if not _load_truststore(ctx, settings, where):
        raise ConfigError(f"{where}ssl.truststore.location (or {where}ssl.truststore.certificates) is "
                          f"required: it holds the CA that signs the clients' certificates")  # fmt: skip
    return ctx


def client_context(props: Mapping[str, str]) -> ssl.SSLContext | None:
    """The CLI's context from ``--command-config``: None for PLAINTEXT, a context for SSL."""
    protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol == "PLAINTEXT":
        return None
    if protocol != "SSL":
        raise ConfigError(f"security.protocol={protocol}: the admin endpoint takes PLAINTEXT (loopback) or SSL")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    algorithm = props.get("ssl.endpoint.identification.algorithm", "https").strip().lower()
    if algorithm not in ("https", ""):
        raise ConfigError(f"ssl.endpoint.identification.algorithm={algorithm}: use https, or empty to disable")
    ctx.check_hostname = algorithm == "https"
    ctx.verify_mode = ssl.CERT_REQUIRED
    if not _load_truststore(ctx, props, ""):
        ctx.load_default_certs()  # as a JVM falls back to its own trust store
    _load_keystore(ctx, props, "")
    return ctx


def _unknown(settings: Mapping[str, str], where: str) -> None:
    unknown = sorted(set(settings) - _SSL_KEYS - {"security.protocol"})
    if unknown:
        raise ConfigError(f"unknown setting(s) {', '.join(where + k for k in unknown)}")


def _store_type(props: Mapping[str, str], key: str, where: str) -> None:
    kind = props.get(key, "PEM").strip().upper()
    if kind != "PEM":
        raise ConfigError(f"{where}{key}={kind} is not supported: convert the store to PEM (e.g. "
                          f"`keytool -importkeystore ... -deststoretype PKCS12` then `openssl pkcs12 -nodes`) "
                          f"and set {where}{key}=PEM")  # fmt: skip


def _load_keystore(ctx: ssl.SSLContext, props: Mapping[str, str], where: str) -> bool:
    location = props.get("ssl.keystore.location", "").strip()
    key, chain = props.get("ssl.keystore.key", "").strip(), props.get("ssl.keystore.certificate.chain", "").strip()
    if not (location or key or chain):
        return False
    _store_type(props, "ssl.keystore.type", where)
    if props.get("ssl.keystore.password"):
        # As Kafka: a PEM key store has no store password, only the key's.
        raise ConfigError(f"{where}ssl.keystore.password cannot be specified with PEM format, only "
                          f"{where}ssl.key.password may be specified")  # fmt: skip
    password = props.get("ssl.key.password") or None
    if location and (key or chain):
        raise ConfigError(f"set {where}ssl.keystore.location or {where}ssl.keystore.key with "
                          f"{where}ssl.keystore.certificate.chain, not both")  # fmt: skip
    try:
        if location:
            _check_pem_file(location, f"{where}ssl.keystore.location")
            ctx.load_cert_chain(location, password=password)
            return True
        if not (key and chain):
            raise ConfigError(f"{where}ssl.keystore.key and {where}ssl.keystore.certificate.chain go together")
        # OpenSSL loads a chain from a file only: a private one, removed at once.
        with tempfile.TemporaryDirectory(prefix="kip1279-tls-") as tmp:
            path = os.path.join(tmp, "keystore.pem")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(_normalize_pem(key, f"{where}ssl.keystore.key") + _normalize_pem(chain, f"{where}ssl.keystore.certificate.chain"))
            ctx.load_cert_chain(path, password=password)
        return True
    except ssl.SSLError as e:
        hint = f" (is {where}ssl.key.password right?)" if password or "BAD_DECRYPT" in str(e) else ""
        raise ConfigError(f"{where}ssl.keystore: cannot load the key and certificate chain: {e.reason or e}{hint}") from None


def _load_truststore(ctx: ssl.SSLContext, props: Mapping[str, str], where: str) -> bool:
    location = props.get("ssl.truststore.location", "").strip()
    inline = props.get("ssl.truststore.certificates", "").strip()
    if not (location or inline):
        return False
    _store_type(props, "ssl.truststore.type", where)
    if props.get("ssl.truststore.password"):
        raise ConfigError(f"{where}ssl.truststore.password cannot be specified for PEM format")
    if location and inline:
        raise ConfigError(f"set {where}ssl.truststore.location or {where}ssl.truststore.certificates, not both")
    try:
        if location:
            _check_pem_file(location, f"{where}ssl.truststore.location")
            ctx.load_verify_locations(cafile=location)
        else:
            ctx.load_verify_locations(cadata=_normalize_pem(inline, f"{where}ssl.truststore.certificates"))
    except ssl.SSLError as e:
        raise ConfigError(f"{where}ssl.truststore: cannot load the CA certificates: {e.reason or e}") from None
    return True


def _check_pem_file(path: str, key: str) -> None:
    try:
        with open(path, "rb") as f:
            head = f.read(64 * 1024)
    except OSError as e:
        raise ConfigError(f"{key}={path}: {e.strerror}") from None
    if b"-----BEGIN " not in head:
        raise ConfigError(f"{key}={path} is not PEM (a JKS or PKCS12 store?): only PEM stores are supported")


def _normalize_pem(text: str, key: str) -> str:
    """Inline PEM as Kafka accepts it: line breaks may be lost or written as ``\\n``."""
    text = text.replace("\\n", "\n")
    blocks = _PEM_BLOCK.findall(text)
    if not blocks:
        raise ConfigError(f"{key} holds no PEM block (-----BEGIN ...-----)")
    out = []
    for label, body in blocks:
        b64 = re.sub(r"\s+", "", body)
        if ":" in body:  # an encrypted traditional key's headers: keep the block as it is
            out.append(f"-----BEGIN {label}-----{body}-----END {label}-----\n")
            continue
        lines = "\n".join(b64[i : i + 64] for i in range(0, len(b64), 64))
        out.append(f"-----BEGIN {label}-----\n{lines}\n-----END {label}-----\n")
    return "".join(out)


# ------------------------------------------------------------------------------------ binding


def parse_super_users(text: str) -> frozenset[str]:
    """Kafka's ``super.users``: principals separated by ``;``, since a certificate's principal
    holds commas (``User:CN=admin,O=acme;User:bob``). A list with no DN in it may use commas."""
    parts = text.split(";") if ";" in text or "=" in text else text.split(",")
    return frozenset(p.strip() for p in parts if p.strip())


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


def check_bind(host: str, tls: bool) -> None:
    """A listener off loopback must authenticate its clients: refuse it without TLS."""
    if not tls and not is_loopback(host):
        raise ConfigError(f"refusing to bind the admin listener to {host!r} without TLS: clients there could "
                          f"claim any principal. Set {ADMIN_SSL_PREFIX}ssl.keystore.location and "
                          f"{ADMIN_SSL_PREFIX}ssl.truststore.location, or bind a loopback address (local mode)")  # fmt: skip
