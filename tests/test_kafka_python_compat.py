"""Byte compatibility with kafka-python 3.x on Kafka's RPC schemas, which ship inside it.

Every schema of ``kafka/protocol/schemas/resources/`` loads in our schema loader, and for every
valid version a random value encodes to the same bytes with our codec and with kafka-python's
own encoder, and each side decodes the other's bytes back to the same value.
"""

from __future__ import annotations

import io
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from record_strategies import message_values
from records.schema import FieldSpec, StructSpec
from reference_data import KAFKA_PYTHON_RPC, kafka_python_rpc_dir, kafka_python_rpc_schemas

from kafka.protocol.api_data import JsonSchemaData
from kafka.protocol.data_container import DataContainer
from kafka.protocol.schemas.fields.base import BaseField

SCHEMAS = kafka_python_rpc_schemas()
CASES = [(name, v) for name, spec in sorted(SCHEMAS.specs.items()) for v in spec.versions()]


class _KpMessage(DataContainer, metaclass=JsonSchemaData, init=False):
    """A kafka-python message class for any schema type (its ApiMessage accepts only requests/responses)."""

    __slots__ = ()


_KP_CLASSES: dict[str, type] = {}
ZERO_UUID = uuid.UUID(int=0)


def kp_class(name: str) -> Any:
    cls = _KP_CLASSES.get(name)
    if cls is None:
        cls = _KP_CLASSES[name] = JsonSchemaData(name, (_KpMessage,), {"__module__": __name__}, load_json=KAFKA_PYTHON_RPC)
    return cls


def kp_codec_args(name: str, version: int) -> dict[str, Any]:
    spec = SCHEMAS.spec(name)
    flexible = spec.is_flexible(version)
    # kafka-python encodes headers with compact=False (ClientId is never compact), as its ApiHeader does.
    return {"version": version, "compact": flexible and spec.type != "header", "tagged": flexible}


def to_kp(struct: StructSpec, value: Any, version: int, kp_cls: Any) -> Any:
    """Our Struct value as a kafka-python DataContainer, field by field."""
    fields = {}
    for f in struct.fields_in(version):
        kp_field = kp_cls._struct.fields[BaseField.underscore_name(f.name)]
        fields[kp_field.name] = _to_kp_value(f, getattr(value, f.attr), version, kp_field)
    return kp_cls(version=version, **fields)


def _to_kp_value(f: FieldSpec, value: Any, version: int, kp_field: Any) -> Any:
    if f.is_tagged and value == ZERO_UUID:
        # Kafka leaves a tagged field at its default out; a uuid's default is the zero UUID,
        # which kafka-python spells None (it would write UUID(0) as a value).
        return None
    if value is None or not f.type.is_struct:
        if isinstance(value, tuple):
            return list(value)
        return value
    kp_inner = kp_field.array_of if f.type.is_array else kp_field
    if f.type.is_array:
        return [to_kp(f.struct, v, version, kp_inner.data_class) for v in value]  # type: ignore[arg-type]
    return to_kp(f.struct, value, version, kp_inner.data_class)  # type: ignore[arg-type]


def test_every_kafka_python_rpc_schema_loads() -> None:
    files = sorted(p.name for p in kafka_python_rpc_dir().glob("*.json"))
    assert len(files) >= 100, "kafka-python 3.x ships Kafka's RPC schemas"
    assert sorted(f"{n}.json" for n in SCHEMAS.specs) == files
    assert len(CASES) > len(files)


# One Hypothesis test per case, as in test_codec.py: a shared parametrized one overflows
# the stack under Hypothesis's `ci` profile.
@pytest.mark.parametrize(("message", "version"), CASES, ids=[f"{m}-v{v}" for m, v in CASES])
def test_same_bytes_as_kafka_python(message: str, version: int) -> None:
    codec = SCHEMAS.codec(message)
    cls = kp_class(message)

    @settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(value=message_values(codec, version, unknown_tags=False))
    def same_bytes(value: object) -> None:
        ours = codec.encode(value, version)
        theirs = bytes(cls._struct.encode(to_kp(codec.spec.struct, value, version, cls), **kp_codec_args(message, version)))
        assert theirs == ours
        # Each decodes the other's bytes back to the same value.
        decoded = cls._struct.decode(io.BytesIO(ours), data_class=cls, **kp_codec_args(message, version))
        assert bytes(cls._struct.encode(decoded, **kp_codec_args(message, version))) == ours
        assert codec.decode(theirs, version) == value

    same_bytes()


def test_a_hand_checked_request_matches() -> None:
    # ApiVersionsRequest v3: compact strings "kafka-python" / "3.0", no tagged fields.
    cls = kp_class("ApiVersionsRequest")
    value = SCHEMAS.struct("ApiVersionsRequest")(client_software_name="kafka-python", client_software_version="3.0")
    expected = bytes([13]) + b"kafka-python" + bytes([4]) + b"3.0" + bytes([0])
    assert SCHEMAS.encode(value, 3) == expected
    kp = cls(version=3, client_software_name="kafka-python", client_software_version="3.0")
    assert bytes(cls._struct.encode(kp, **kp_codec_args("ApiVersionsRequest", 3))) == expected


def test_a_field_own_flexible_versions_keeps_its_fixed_length() -> None:
    # RequestHeader v2 is flexible, but ClientId says "flexibleVersions": "none": an int16 length.
    header = SCHEMAS.struct("RequestHeader")(request_api_key=18, request_api_version=3, correlation_id=7, client_id="ab")
    expected = bytes.fromhex("0012" "0003" "00000007" "0002") + b"ab" + b"\x00"
    assert SCHEMAS.encode(header, 2) == expected
    assert SCHEMAS.decode("RequestHeader", expected, 2) == header
    null = SCHEMAS.struct("RequestHeader")(request_api_key=18, request_api_version=3, correlation_id=7, client_id=None)
    assert SCHEMAS.encode(null, 2)[8:] == b"\xff\xff\x00"
