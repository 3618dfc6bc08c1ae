"""Kafka request and response envelopes: the header versions and the header bytes.

A request is ``RequestHeader`` then the body; a response is ``ResponseHeader`` then the body.
Flexible versions (KIP-482) use header v2 / v1 with tagged fields, except ApiVersions, whose
response header stays v0 so that any client can read it (``ApiVersionsResponse`` comment in Kafka).
Pure bytes: the connection layer (TLS, SASL, framing) is the client library's.
"""

from __future__ import annotations

import struct

from records.registry import SchemaSet, default_schemas
from records.varint import read_uvarint

API_VERSIONS_KEY = 18
_CORRELATION = struct.Struct(">i")


def is_flexible(api_key: int, version: int, schemas: SchemaSet | None = None) -> bool:
    """True when ``version`` of the request with ``api_key`` is a flexible one."""
    spec = (schemas or default_schemas()).by_api_key(api_key, "request")
    if spec is None:
        raise KeyError(f"no request schema with apiKey {api_key}")
    return spec.is_flexible(version)


def request_header(api_key: int, version: int, correlation_id: int, client_id: str | None,
                   schemas: SchemaSet | None = None) -> bytes:  # fmt: skip
    """RequestHeader v1 (or v2 for a flexible request version), encoded."""
    s = schemas or default_schemas()
    header_version = 2 if is_flexible(api_key, version, s) else 1
    cls = s.struct("RequestHeader")
    return s.encode(cls(request_api_key=api_key, request_api_version=version,
                        correlation_id=correlation_id, client_id=client_id), header_version)  # fmt: skip


def response_header_size(data: bytes | bytearray | memoryview, api_key: int, version: int,
                         schemas: SchemaSet | None = None) -> tuple[int, int]:  # fmt: skip
    """(correlation id, header length) of the response ``data`` starts with."""
    (correlation_id,) = _CORRELATION.unpack_from(data, 0)
    pos = 4
    if api_key != API_VERSIONS_KEY and is_flexible(api_key, version, schemas):
        count, pos = read_uvarint(data, pos)
        for _ in range(count):
            _, pos = read_uvarint(data, pos)
            size, pos = read_uvarint(data, pos)
            pos += size
    return correlation_id, pos
