"""records.kafka_envelope: framing, header versions, unsupported APIs/versions, malformed input."""

from __future__ import annotations

import struct

import pytest

from records.kafka_envelope import (
    MODEL_LISTENER_VERSIONS,
    UNSUPPORTED_VERSION,
    ApiTable,
    MalformedRequest,
    UnsupportedRequest,
    decode_response,
    encode_request,
    encode_response,
    parse_request,
    split_frames,
    unsupported_response,
)
from records.registry import default_schemas

S = default_schemas()
TABLE = ApiTable(MODEL_LISTENER_VERSIONS)


def _frame(data: bytes) -> bytes:
    return data[4:]


def test_split_frames_keeps_partial_tail():
    a = encode_request(18, 0, 1, "c", S.struct("ApiVersionsRequest")())
    b = encode_request(18, 3, 2, "c", S.struct("ApiVersionsRequest")(client_software_name="x", client_software_version="1"))
    buf = bytearray(a + b[:7])
    assert split_frames(buf) == [a[4:]]
    assert bytes(buf) == b[:7]
    buf += b[7:]
    assert split_frames(buf) == [b[4:]]
    assert buf == bytearray()


@pytest.mark.parametrize("size", [-1, 200_000_000])
def test_bad_size_is_malformed(size):
    with pytest.raises(MalformedRequest):
        split_frames(bytearray(struct.pack(">i", size) + b"xxxx"))


@pytest.mark.parametrize("version,header_version", [(8, 1), (9, 2)])
def test_request_header_version_follows_flexible_versions(version, header_version):
    body = S.struct("ProduceRequest")(acks=-1, timeout_ms=1000)
    frame = encode_request(0, version, 77, "me", body)
    req = parse_request(_frame(frame), TABLE)
    assert (req.api_key, req.api_version, req.correlation_id, req.client_id) == (0, version, 77, "me")
    assert req.body.acks == -1
    # v2 headers carry one tagged-field byte more than v1.
    assert len(frame) - len(S.codec("ProduceRequest").encode(body, version)) == 4 + 10 + 2 + header_version - 1


def test_api_versions_response_header_is_always_v0():
    body = TABLE.api_versions_body()
    out = encode_response(TABLE, 18, 3, 5, body)
    # size, correlation id, then straight into the body (no tagged-field byte).
    size, cid = struct.unpack_from(">ii", out)
    assert (size, cid) == (len(out) - 4, 5)
    assert out[8:] == S.codec("ApiVersionsResponse").encode(body, 3)
    _, decoded = decode_response(out[4:], 18, 3)
    assert {k.api_key: (k.min_version, k.max_version) for k in decoded.api_keys} == MODEL_LISTENER_VERSIONS


def test_flexible_response_has_header_v1():
    body = S.struct("MetadataResponse")()
    out = encode_response(TABLE, 3, 9, 5, body)
    assert out[8] == 0  # empty tagged fields of the response header
    assert decode_response(out[4:], 3, 9)[0] == 5


def test_unsupported_api_versions_version_answers_v0_with_error_35_and_the_table():
    frame = struct.pack(">hhi", 18, 99, 42) + struct.pack(">h", 1) + b"c" + b"\x00garbage"
    with pytest.raises(UnsupportedRequest) as info:
        parse_request(frame, TABLE)
    out = unsupported_response(TABLE, info.value)
    cid, body = decode_response(out[4:], 18, 0)
    assert cid == 42 and body.error_code == UNSUPPORTED_VERSION
    assert {k.api_key for k in body.api_keys} == set(MODEL_LISTENER_VERSIONS)


def test_unsupported_version_with_top_level_error_code():
    # FindCoordinator v6 (share groups) is beyond the table but has a top-level error code at v0-v3 only;
    # InitProducerId v5 is beyond the table and has one.
    with pytest.raises(UnsupportedRequest) as info:
        parse_request(_frame(encode_request(22, 5, 9, "c", S.struct("InitProducerIdRequest")())), TABLE)
    cid, body = decode_response(unsupported_response(TABLE, info.value)[4:], 22, 5)
    assert (cid, body.error_code) == (9, UNSUPPORTED_VERSION)


def test_unknown_api_key_has_no_parsable_answer():
    with pytest.raises(UnsupportedRequest) as info:
        parse_request(struct.pack(">hhi", 9999, 0, 1) + b"\x00\x00", TABLE)
    assert not info.value.known
    assert unsupported_response(TABLE, info.value) is None


@pytest.mark.parametrize("frame", [b"\x00", struct.pack(">hhi", 3, 9, 1) + b"\xff\xff", struct.pack(">hhi", 0, 8, 1) + b"\x00\x00" + b"\x01"])
def test_malformed_request(frame):
    with pytest.raises(MalformedRequest):
        parse_request(frame, TABLE)


def test_table_refuses_versions_outside_the_schema():
    with pytest.raises(ValueError):
        ApiTable({0: (0, 11)})
