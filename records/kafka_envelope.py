"""Kafka request/response envelopes: size framing, request header v1-v2, response header v0-v1.

Pure wire code, no I/O. A listener hands :func:`split_frames` the bytes it read, gets whole
request frames back, parses each with :func:`parse_request` and writes what
:func:`encode_response` returns. Every decision that is common to all APIs lives here:

- the request header version follows the API's flexibleVersions (v2 when the request version
  is flexible, else v1); the response header is v1 for flexible versions, v0 otherwise, and
  always v0 for ApiVersions (KIP-511: a client must read it before it knows what we speak);
- an API or version outside the :class:`ApiTable` is :class:`UnsupportedRequest`: for
  ApiVersions Kafka answers v0 with UNSUPPORTED_VERSION (35) and its table
  (:func:`api_versions_fallback`); other known APIs get error 35 where their error codes are;
- bytes that do not parse are :class:`MalformedRequest`: the listener closes that connection
  (Kafka's InvalidRequestException) and keeps serving the others. Bytes left after a whole
  body are ignored, as Kafka ignores them.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

import msgspec

from records.codec import CodecError
from records.registry import SchemaSet, default_schemas
from records.varint import read_uvarint

UNSUPPORTED_VERSION = 35
API_VERSIONS_KEY = 18
SIZE_BYTES = 4
# Kafka's socket.request.max.bytes default (100 MiB).
MAX_REQUEST_BYTES = 104_857_600

_SIZE = struct.Struct(">i")
_KEY_VERSION_CID = struct.Struct(">hhi")
_CID = struct.Struct(">i")


class MalformedRequest(ValueError):
    """The bytes are not a Kafka request: the connection is closed, as Kafka does."""


class UnsupportedRequest(Exception):
    """A well-framed request whose API or version this listener does not serve."""

    def __init__(self, api_key: int, api_version: int, correlation_id: int, known: bool, body: Any = None) -> None:
        super().__init__(f"API {api_key} version {api_version} is not supported")
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.known = known  # a schema exists, so an error response can be encoded
        self.body = body  # the request body, when the schema knows this version and it decoded


class Request(msgspec.Struct, frozen=True):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    name: str  # the schema name, e.g. "ProduceRequest"
    body: Any


class ApiTable:
    """Which APIs and versions a listener serves, checked against the schemas it decodes with."""

    def __init__(self, versions: Mapping[int, tuple[int, int]], schemas: SchemaSet | None = None) -> None:
        self.schemas = schemas or default_schemas()
        self.versions: dict[int, tuple[int, int]] = {}
        self.request_names: dict[int, str] = {}
        self.response_names: dict[int, str] = {}
        for key, (lo, hi) in sorted(versions.items()):
            req = self.schemas.by_api_key(key, "request")
            resp = self.schemas.by_api_key(key, "response")
            if req is None or resp is None:
                raise ValueError(f"no request/response schema for API key {key}")
            valid = req.versions()
            if lo > hi or lo not in valid or hi not in valid:
                raise ValueError(f"{req.name}: versions {lo}-{hi} outside the schema's {valid.start}-{valid.stop - 1}")
            self.versions[key] = (lo, hi)
            self.request_names[key] = req.name
            self.response_names[key] = resp.name

    def supports(self, api_key: int, api_version: int) -> bool:
        r = self.versions.get(api_key)
        return r is not None and r[0] <= api_version <= r[1]

    def is_flexible_request(self, api_key: int, api_version: int) -> bool:
        return self.schemas.spec(self.request_names[api_key]).is_flexible(api_version)

    def api_versions_body(self, error_code: int = 0) -> Any:
        """An ApiVersionsResponse struct listing this table."""
        s = self.schemas
        entry = s.nested("ApiVersionsResponse", "ApiVersion")
        keys = [entry(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in self.versions.items()]
        return s.struct("ApiVersionsResponse")(error_code=error_code, api_keys=keys)


def split_frames(buf: bytearray, max_bytes: int = MAX_REQUEST_BYTES) -> list[bytes]:
    """Removes and returns every whole size-prefixed frame at the start of ``buf``.

    A negative or oversized size is MalformedRequest (Kafka's InvalidReceiveException).
    """
    frames: list[bytes] = []
    pos = 0
    n = len(buf)
    while n - pos >= SIZE_BYTES:
        (size,) = _SIZE.unpack_from(buf, pos)
        if size < 0 or size > max_bytes:
            del buf[:pos]
            raise MalformedRequest(f"invalid request size {size} (limit {max_bytes})")
        if n - pos - SIZE_BYTES < size:
            break
        frames.append(bytes(buf[pos + SIZE_BYTES : pos + SIZE_BYTES + size]))
        pos += SIZE_BYTES + size
    if pos:
        del buf[:pos]
    return frames


def peek_header(frame: bytes) -> tuple[int, int, int]:
    """(api key, api version, correlation id): the fixed start of every request header."""
    if len(frame) < _KEY_VERSION_CID.size:
        raise MalformedRequest(f"request of {len(frame)} bytes is shorter than a request header")
    return _KEY_VERSION_CID.unpack_from(frame, 0)


def parse_request(frame: bytes, table: ApiTable) -> Request:
    """The header and decoded body of one request frame (without its size prefix)."""
    api_key, api_version, correlation_id = peek_header(frame)
    if not table.supports(api_key, api_version):
        spec = table.schemas.by_api_key(api_key, "request")
        raise UnsupportedRequest(api_key, api_version, correlation_id, spec is not None,
                                 _decode_if_known(table.schemas, spec, api_version, frame))
    header_version = 2 if table.is_flexible_request(api_key, api_version) else 1
    s = table.schemas
    name = table.request_names[api_key]
    # Bytes after a whole body are ignored, as Kafka's RequestContext.parseRequest does (it reads
    # the generated message from the buffer and never checks what remains): librdkafka 2.x sends
    # 3 such bytes after a Metadata v12 body that asks for every topic.
    try:
        header, pos = s.codec("RequestHeader").decode_prefix(frame, header_version, 0)
        body, _ = s.codec(name).decode_prefix(frame, api_version, pos)
    except CodecError as exc:
        raise MalformedRequest(f"{name} v{api_version}: {exc}") from None
    return Request(api_key, api_version, correlation_id, header.client_id, name, body)


def _decode_if_known(schemas: SchemaSet, spec: Any, api_version: int, frame: bytes) -> Any:
    """The body of a request the table does not serve, if its schema knows the version (so the
    error answer can name what was asked about); None otherwise."""
    if spec is None or api_version not in spec.versions():
        return None
    try:
        _, pos = schemas.codec("RequestHeader").decode_prefix(frame, 2 if spec.is_flexible(api_version) else 1, 0)
        return schemas.codec(spec.name).decode_prefix(frame, api_version, pos)[0]
    except CodecError:
        return None


def response_header_version(table: ApiTable, api_key: int, api_version: int) -> int:
    if api_key == API_VERSIONS_KEY:
        return 0
    resp = table.schemas.spec(table.response_names[api_key])
    return 1 if resp.is_flexible(api_version) else 0


_HEADER_V0 = struct.Struct(">ii")  # size, correlation id


class _Fitter:
    """Resets fields a version does not have to their defaults, so one handler body serves every version.

    The codec refuses a non-default value in a field the version lacks (as Kafka's generated
    code does for non-ignorable fields); a handler fills the newest form and this trims it.
    """

    def __init__(self, codec: Any) -> None:
        self.classes = codec.classes
        self.root = codec.spec.struct
        self._plans: dict[tuple[int, int], tuple[list[tuple[str, Any]], list[tuple[str, Any, bool]]] | None] = {}

    def _plan(self, spec: Any, version: int) -> Any:
        key = (id(spec), version)
        if key in self._plans:
            return self._plans[key]
        self._plans[key] = None  # recursion guard
        resets = [(f.attr, self.classes.field_default(f)) for f in spec.fields if version not in f.versions]
        nested = [(f.attr, f.struct, f.type.is_array) for f in spec.fields
                  if version in f.versions and f.struct is not None and self._plan(f.struct, version) is not None]
        plan = (resets, nested) if resets or nested else None
        self._plans[key] = plan
        return plan

    def fit(self, value: Any, version: int) -> Any:
        return self._fit(self.root, value, version)

    def _fit(self, spec: Any, value: Any, version: int) -> Any:
        plan = self._plan(spec, version)
        if plan is None or value is None:
            return value
        resets, nested = plan
        changes: dict[str, Any] = {}
        for attr, default in resets:
            if getattr(value, attr) != default:
                changes[attr] = default
        for attr, sub, is_array in nested:
            v = getattr(value, attr)
            if v is None:
                continue
            changes[attr] = [self._fit(sub, x, version) for x in v] if is_array else self._fit(sub, v, version)
        return msgspec.structs.replace(value, **changes) if changes else value


_FITTERS: dict[int, _Fitter] = {}


def fit_to_version(codec: Any, value: Any, version: int) -> Any:
    fitter = _FITTERS.get(id(codec))
    if fitter is None:
        fitter = _FITTERS[id(codec)] = _Fitter(codec)
    return fitter.fit(value, version)


def encode_response(table: ApiTable, api_key: int, api_version: int, correlation_id: int, body: Any) -> bytes:
    """A whole response frame: size, response header, body."""
    codec = table.schemas.codec(table.response_names[api_key])
    payload = codec.encode(fit_to_version(codec, body, api_version), api_version)
    if response_header_version(table, api_key, api_version) == 1:
        return _HEADER_V0.pack(len(payload) + 5, correlation_id) + b"\x00" + payload
    return _HEADER_V0.pack(len(payload) + 4, correlation_id) + payload


def api_versions_fallback(table: ApiTable, correlation_id: int) -> bytes:
    """Kafka's answer to an ApiVersions version it does not know: v0, UNSUPPORTED_VERSION, the table."""
    return encode_response(table, API_VERSIONS_KEY, 0, correlation_id, table.api_versions_body(UNSUPPORTED_VERSION))


def unsupported_response(table: ApiTable, exc: UnsupportedRequest) -> bytes | None:
    """An error response for an unsupported request, or None when none can be encoded.

    ApiVersions: the v0 fallback. Another API at a version its schema knows: 35 where Kafka's
    getErrorResponse would put an error (``error_body``), or in the top-level error code if the
    body did not decode. Anything else (an unknown API key, a version the schema does not know,
    or no body and no top-level error code) has no answer a client could parse, so the listener
    closes the connection, as Kafka does.
    """
    if exc.api_key == API_VERSIONS_KEY:
        return api_versions_fallback(table, exc.correlation_id)
    return error_response(table.schemas, exc.api_key, exc.api_version, exc.correlation_id, UNSUPPORTED_VERSION, exc.body)


def error_response(schemas: SchemaSet, api_key: int, api_version: int, correlation_id: int, code: int,
                   request: Any = None) -> bytes | None:
    """A response frame with ``code`` as its error, or None if none can be encoded.

    Without ``request`` only a top-level error code can carry it (None if that version has none).
    With the decoded request body, the response mirrors it as Kafka's getErrorResponse does: one
    entry per topic, partition, group or resource asked about, keys copied, ``code`` in every
    error code (``error_body``).
    """
    resp = schemas.by_api_key(api_key, "response")
    if resp is None or api_version not in resp.versions():
        return None
    if request is not None:
        body = error_body(schemas, api_key, api_version, request, code)
    else:
        field = next((f for f in resp.fields if f.name == "ErrorCode"), None)
        if field is None or api_version not in field.versions:
            return None
        body = schemas.struct(resp.name)(error_code=code)
    codec = schemas.codec(resp.name)
    payload = codec.encode(fit_to_version(codec, body, api_version), api_version)
    flexible = resp.is_flexible(api_version) and api_key != API_VERSIONS_KEY
    if flexible:
        return _HEADER_V0.pack(len(payload) + 5, correlation_id) + b"\x00" + payload
    return _HEADER_V0.pack(len(payload) + 4, correlation_id) + payload


def error_body(schemas: SchemaSet, api_key: int, api_version: int, request: Any, code: int) -> Any:
    """The response struct of an error answer to ``request`` (a decoded request body).

    Each array of structs in the response is filled from the request's array of the same name
    (or its only array, e.g. Produce's topic_data -> responses), fields copied by name (topic
    names, partition indexes, group IDs); an array of strings in the request (DeleteTopics'
    names, DescribeGroups' IDs, AddPartitionsToTxn's partitions) fills the response struct's first
    field of that type. Every error code gets ``code``; other fields keep their defaults.
    """
    req_spec = schemas.by_api_key(api_key, "request")
    resp_spec = schemas.by_api_key(api_key, "response")
    assert req_spec is not None and resp_spec is not None
    classes = schemas.codec(resp_spec.name).classes
    v = api_version

    def is_error_code(f: Any) -> bool:  # ErrorCode, or e.g. AddPartitionsToTxn's PartitionErrorCode
        return f.name.endswith("ErrorCode") and f.type.name == "int16" and not f.type.is_array

    def arrays_of(spec_fields: list[Any]) -> dict[str, Any]:
        return {f.attr: f for f in spec_fields if v in f.versions and f.type.is_array and f.tag is None}

    def pairs(fields: list[Any], source_fields: list[Any]) -> dict[str, Any]:
        """Response array -> request array: by name, else the one left on each side."""
        mine, theirs = arrays_of(fields), arrays_of(source_fields)
        out = {name: theirs[name] for name in mine if name in theirs}
        left_mine = [n for n in mine if n not in out and mine[n].struct is not None]
        left_theirs = [n for n in theirs if n not in out]
        if len(left_mine) == 1 and len(left_theirs) == 1:
            out[left_mine[0]] = theirs[left_theirs[0]]
        return out

    def build(fields: list[Any], cls: Any, source: Any, source_fields: list[Any]) -> Any:
        values: dict[str, Any] = {}
        paired = pairs(fields, source_fields)
        for f in fields:
            if v not in f.versions:
                continue
            if is_error_code(f):
                values[f.attr] = code
            elif f.type.is_array and f.struct is not None:
                match = paired.get(f.attr)
                items = getattr(source, match.attr, None) if match is not None else None
                if items is not None:
                    sub = classes.struct_class(f.struct)
                    sub_source = match.struct.fields if match.struct is not None else []
                    values[f.attr] = [build(f.struct.fields, sub, item, sub_source) if match.struct is not None
                                      else build_from_key(f.struct.fields, sub, item, match.type.name) for item in items]
            elif not f.type.is_array and f.struct is None and any(sf.attr == f.attr and v in sf.versions
                                                                   for sf in source_fields):
                values[f.attr] = getattr(source, f.attr)
        return cls(**values)

    def build_from_key(fields: list[Any], cls: Any, key: Any, key_type: str) -> Any:
        values: dict[str, Any] = {}
        keyed = False
        for f in fields:
            if v not in f.versions:
                continue
            if is_error_code(f):
                values[f.attr] = code
            elif not keyed and f.type.name == key_type and not f.type.is_array:
                values[f.attr] = key
                keyed = True
        return cls(**values)

    return build(resp_spec.fields, schemas.struct(resp_spec.name), request, req_spec.fields)


def request_header(api_key: int, api_version: int, correlation_id: int, client_id: str | None,
                   schemas: SchemaSet | None = None) -> bytes:  # fmt: skip
    """RequestHeader v1 (v2 for a flexible request version), encoded: a client's side of the header."""
    s = schemas or default_schemas()
    req = s.by_api_key(api_key, "request")
    if req is None:
        raise ValueError(f"no request schema for API key {api_key}")
    header = s.struct("RequestHeader")(
        request_api_key=api_key, request_api_version=api_version, correlation_id=correlation_id, client_id=client_id
    )
    return s.codec("RequestHeader").encode(header, 2 if req.is_flexible(api_version) else 1)


def response_header_size(data: bytes | bytearray | memoryview, api_key: int, api_version: int,
                         schemas: SchemaSet | None = None) -> tuple[int, int]:  # fmt: skip
    """(correlation id, header length) of the response ``data`` starts with (a client reading a reply)."""
    (correlation_id,) = _CID.unpack_from(data, 0)
    pos = 4
    resp = (schemas or default_schemas()).by_api_key(api_key, "response")
    if resp is None:
        raise ValueError(f"no response schema for API key {api_key}")
    if api_key != API_VERSIONS_KEY and resp.is_flexible(api_version):
        count, pos = read_uvarint(data, pos)
        for _ in range(count):
            _, pos = read_uvarint(data, pos)
            size, pos = read_uvarint(data, pos)
            pos += size
    return correlation_id, pos


def encode_request(api_key: int, api_version: int, correlation_id: int, client_id: str | None, body: Any,
                   schemas: SchemaSet | None = None) -> bytes:
    """A whole request frame (tests and tools use it to speak to a listener)."""
    s = schemas or default_schemas()
    header = request_header(api_key, api_version, correlation_id, client_id, s)  # checks the API exists
    payload = header + s.codec(s.by_api_key(api_key, "request").name).encode(body, api_version)
    return _SIZE.pack(len(payload)) + payload


def decode_response(frame: bytes, api_key: int, api_version: int, schemas: SchemaSet | None = None) -> tuple[int, Any]:
    """(correlation id, body) of a response frame without its size prefix (tests and tools)."""
    s = schemas or default_schemas()
    resp = s.by_api_key(api_key, "response")
    if resp is None:
        raise ValueError(f"no response schema for API key {api_key}")
    header_version = 0 if api_key == API_VERSIONS_KEY or not resp.is_flexible(api_version) else 1
    header, pos = s.codec("ResponseHeader").decode_prefix(frame, header_version, 0)
    body, _ = s.codec(resp.name).decode_prefix(frame, api_version, pos)
    return header.correlation_id, body


# The model listener's table: each range lies inside what aiokafka 0.14, kafka-python 3.x and
# librdkafka 2.x send, and stops below versions whose meaning the listener does not implement
# (Produce v12 / EndTxn v5: transactions v2; Fetch v13+ / Produce v13: topic IDs in place of
# names; InitProducerId v5+: 2PC; OffsetCommit/OffsetFetch v9+: the consumer group protocol).
MODEL_LISTENER_VERSIONS: dict[int, tuple[int, int]] = {
    0: (3, 11),   # Produce
    1: (4, 12),   # Fetch
    2: (1, 7),    # ListOffsets
    3: (0, 12),   # Metadata
    8: (2, 8),    # OffsetCommit
    9: (1, 8),    # OffsetFetch
    10: (0, 4),   # FindCoordinator
    11: (0, 9),   # JoinGroup
    12: (0, 4),   # Heartbeat
    13: (0, 5),   # LeaveGroup
    14: (0, 5),   # SyncGroup
    15: (0, 5),   # DescribeGroups
    16: (0, 5),   # ListGroups (v5: group types)
    18: (0, 4),   # ApiVersions
    19: (2, 7),   # CreateTopics
    20: (1, 6),   # DeleteTopics
    21: (0, 2),   # DeleteRecords
    22: (0, 4),   # InitProducerId
    23: (2, 4),   # OffsetForLeaderEpoch
    24: (0, 3),   # AddPartitionsToTxn
    25: (0, 3),   # AddOffsetsToTxn
    26: (0, 3),   # EndTxn
    28: (0, 3),   # TxnOffsetCommit
    29: (1, 3),   # DescribeAcls
    30: (1, 3),   # CreateAcls
    31: (1, 3),   # DeleteAcls
    32: (1, 4),   # DescribeConfigs
    35: (1, 4),   # DescribeLogDirs
    37: (0, 3),   # CreatePartitions
    44: (0, 1),   # IncrementalAlterConfigs
    75: (0, 0),   # DescribeTopicPartitions
}
