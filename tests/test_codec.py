"""The schema-driven codec: round-trips for every schema version, and hand-checked bytes."""

from __future__ import annotations

import dataclasses
import re
import uuid
from typing import Any
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from record_strategies import message_values
from records.codec import CodecError, UnsupportedVersionError
from records.registry import PROJECT_SCHEMAS as PROJECT_SCHEMAS_DIR
from records.registry import SchemaSet
from records.varint import (
    VarintError,
    read_uvarint,
    read_varint,
    read_varlong,
    uvarint_bytes,
    write_varint,
    write_varlong,
)

from reference_data import REFERENCE_COUNTS, schema_dirs

SCHEMA_DIRS = schema_dirs()
SETS = {name: SchemaSet.load(path) for name, path in SCHEMA_DIRS.items()}
CASES = [
    (set_name, msg, version)
    for set_name, schemas in SETS.items()
    for msg, spec in sorted(schemas.specs.items())
    for version in spec.versions()
]
PROJECT = SETS["project"]


def _same_as_project(set_name: str, message: str) -> bool:
    """The message's definition equals the project's copy (all but the file it came from): a
    codec is built from the definition alone, so its round trip is the project's case, already run."""
    spec, mine = SETS[set_name].specs[message], PROJECT.specs.get(message)
    return set_name != "project" and mine is not None and dataclasses.replace(spec, source="") == dataclasses.replace(mine, source="")


# 424 of kafka-python's 490 RPC cases are the project's own copies of Kafka's RPCs, word for word.
# The project's own cases round-trip in test_project_round_trip_and_damaged_input, on the values
# that test draws anyway (one Hypothesis run per case instead of two: generating is the cost).
ROUND_TRIP_CASES = [(s, m, v) for s, m, v in CASES if s != "project" and not _same_as_project(s, m)]
# Kafka's RPC schemas: the reference folder's, else the same files as kafka-python ships them.
RPC = SETS["kafka-message"] if "kafka-message" in SETS else SETS["kafka-python-rpc"]
TOPIC_ID = uuid.UUID("bfd99e5e-3235-4552-81f8-d4af1741970c")


def test_every_reference_file_loads() -> None:
    for name, path in SCHEMA_DIRS.items():
        files = sorted(p.name for p in Path(path).glob("*.json"))
        assert len(files) > 0 and len(SETS[name].specs) == len(files), name
    for name, count in REFERENCE_COUNTS.items():
        if name in SETS:  # the reference folders, when present, are complete
            assert len(SETS[name].specs) == count, name


# Each case builds its own Hypothesis test: Hypothesis's pytest plugin wraps a shared
# parametrized test's settings once per case, and with the `ci` profile (database=None) the
# chain of over a thousand cases overflows the stack.
@pytest.mark.parametrize(("set_name", "message", "version"), ROUND_TRIP_CASES,
                         ids=[f"{s}-{m}-v{v}" for s, m, v in ROUND_TRIP_CASES])  # fmt: skip
def test_round_trip(set_name: str, message: str, version: int) -> None:
    schemas = SETS[set_name]
    codec = schemas.codec(message)

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(value=message_values(codec, version))
    def round_trips(value: object) -> None:
        _round_trips(schemas, message, version, value)

    round_trips()


def _round_trips(schemas: SchemaSet, message: str, version: int, value: object) -> bytes:
    """Encodes ``value`` (the fast encoder writes the general bytes), decodes it back, re-encodes
    it to the same bytes, and through JSON too; returns the bytes."""
    codec = schemas.codec(message)
    encoded = codec.encode(value, version)
    assert encoded == codec.version_codec(version).encode_general(value)  # the fast encoder, if any, writes the same bytes
    decoded = codec.decode(encoded, version)
    assert decoded == value
    assert codec.encode(decoded, version) == encoded
    # The JSON form loses nothing either.
    assert schemas.from_json(message, schemas.to_json(value, version), version) == value
    return encoded


def test_defaults_round_trip_in_every_version() -> None:
    for set_name, message, version in CASES:
        codec = SETS[set_name].codec(message)
        value = codec.cls()
        assert codec.decode(codec.encode(value, version), version) == value, (set_name, message, version)


# -- hand-checked bytes, written from the wire rules ----------------------------------------


def test_compact_string_and_uuid_in_a_flexible_version() -> None:
    topic = PROJECT.struct("TopicRecord")(name="foo", topic_id=TOPIC_ID)
    expected = bytes([0x04]) + b"foo" + TOPIC_ID.bytes + bytes([0x00])  # len+1, uuid, no tagged fields
    assert PROJECT.encode(topic, 0) == expected
    assert PROJECT.decode("TopicRecord", expected, 0) == topic


def test_non_compact_string_in_a_non_flexible_version() -> None:
    key = PROJECT.struct("MirrorPartitionStateKey")(mirror_name="ab", topic_id=TOPIC_ID, partition=7)
    expected = b"\x00\x02ab" + TOPIC_ID.bytes + b"\x00\x00\x00\x07"
    assert PROJECT.encode(key, 0) == expected
    assert PROJECT.decode("MirrorPartitionStateKey", expected, 0) == key


def test_null_string_both_encodings() -> None:
    change = PROJECT.struct("MirrorTopicStateChangeRecord")(topic_id=TOPIC_ID, mirror_name=None, desired_state=1)
    assert PROJECT.encode(change, 0) == TOPIC_ID.bytes + b"\x00" + b"\x01" + b"\x00"
    fetch = RPC
    response = fetch.struct("FetchResponse")
    partition = fetch.nested("FetchResponse", "PartitionData")(aborted_transactions=None, records=None)
    topic = fetch.nested("FetchResponse", "FetchableTopicResponse")(topic="t", partitions=(partition,))
    encoded = fetch.encode(response(responses=(topic,)), 4)
    # v4: throttle, topics count, topic name, partitions count, then the partition.
    assert encoded == (
        b"\x00\x00\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\x00\x00\x00\x01"
        + b"\x00\x00\x00\x00" + b"\x00\x00" + b"\x00" * 8      # partition index, error, HW
        + b"\xff" * 8                                         # LastStableOffset default -1
        + b"\xff\xff\xff\xff"                                 # AbortedTransactions null array
        + b"\xff\xff\xff\xff"                                 # Records null bytes
    )
    assert fetch.decode("FetchResponse", encoded, 4) == response(responses=(topic,))


def test_null_and_empty_arrays_in_a_flexible_version() -> None:
    change_cls = PROJECT.struct("PartitionChangeRecord")
    # Isr is a tagged, nullable array defaulting to null: absent when null, written when empty.
    absent = change_cls(partition_id=1, topic_id=TOPIC_ID)
    assert change_cls().isr is None
    empty = change_cls(partition_id=1, topic_id=TOPIC_ID, isr=())
    base = b"\x00\x00\x00\x01" + TOPIC_ID.bytes
    assert PROJECT.encode(absent, 0) == base + b"\x00"
    # one tagged field: tag 0 (Isr), size 1, compact length 1 = empty array
    assert PROJECT.encode(empty, 0) == base + b"\x01" + b"\x00\x01\x01"
    assert PROJECT.decode("PartitionChangeRecord", base + b"\x01\x00\x01\x01", 0).isr == ()


def test_tagged_fields_ascending_only_when_not_default_and_unknown_tags_kept() -> None:
    record_cls = PROJECT.struct("PartitionRecord")
    base = record_cls(partition_id=0, topic_id=TOPIC_ID, replicas=(1,), isr=(1,), leader=1, leader_epoch=0, partition_epoch=0)
    body = (
        b"\x00\x00\x00\x00" + TOPIC_ID.bytes
        + b"\x02\x00\x00\x00\x01" + b"\x02\x00\x00\x00\x01" + b"\x01" + b"\x01"  # replicas, isr, removing, adding
        + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00"        # leader, leader epoch, partition epoch
    )
    assert PROJECT.encode(base, 0) == body + b"\x00"
    # LeaderRecoveryState (tag 0) = 1 plus an unknown tag 9 after it.
    wire = body + b"\x02" + b"\x00\x01\x01" + b"\x09\x02\xca\xfe"
    decoded = PROJECT.decode("PartitionRecord", wire, 0)
    assert decoded.leader_recovery_state == 1
    assert decoded.unknown_tagged_fields == ((9, b"\xca\xfe"),)
    assert PROJECT.encode(decoded, 0) == wire
    # An unknown tag below a known one is written back in ascending order.
    low = base.__class__(**{**_fields(base), "unknown_tagged_fields": ((0x7F, b""),), "leader_recovery_state": 1})
    assert PROJECT.encode(low, 0) == body + b"\x02" + b"\x00\x01\x01" + b"\x7f\x00"


def _fields(value: object) -> dict[str, object]:
    return {name: getattr(value, name) for name in value.__struct_fields__}  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("value", "wire"),
    [
        (0, b"\x00"),
        (1, b"\x01"),
        (127, b"\x7f"),
        (128, b"\x80\x01"),
        (300, b"\xac\x02"),
        (16383, b"\xff\x7f"),
        (16384, b"\x80\x80\x01"),
        ((1 << 21) - 1, b"\xff\xff\x7f"),
        (1 << 21, b"\x80\x80\x80\x01"),
        ((1 << 28) - 1, b"\xff\xff\xff\x7f"),
        (1 << 28, b"\x80\x80\x80\x80\x01"),
        ((1 << 32) - 1, b"\xff\xff\xff\xff\x0f"),
    ],
)
def test_unsigned_varint_boundaries(value: int, wire: bytes) -> None:
    assert uvarint_bytes(value) == wire
    assert read_uvarint(wire, 0) == (value, len(wire))


@pytest.mark.parametrize(
    ("value", "wire"),
    [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (63, b"\x7e"), (-64, b"\x7f"), (64, b"\x80\x01"), (-(1 << 31), b"\xff\xff\xff\xff\x0f"), ((1 << 31) - 1, b"\xfe\xff\xff\xff\x0f")],
)
def test_zigzag_varint_boundaries(value: int, wire: bytes) -> None:
    out = bytearray()
    write_varint(out, value)
    assert bytes(out) == wire
    assert read_varint(wire, 0) == (value, len(wire))


def test_zigzag_varlong_extremes() -> None:
    for value, wire in [(-(1 << 63), b"\xff" * 9 + b"\x01"), ((1 << 63) - 1, b"\xfe" + b"\xff" * 8 + b"\x01")]:
        out = bytearray()
        write_varlong(out, value)
        assert bytes(out) == wire
        assert read_varlong(wire, 0) == (value, len(wire))


def test_varint_errors() -> None:
    with pytest.raises(VarintError, match="truncated varint at byte 2"):
        read_uvarint(b"\x00\x00\x80", 2)
    with pytest.raises(VarintError, match="longer than 5 bytes"):
        read_uvarint(b"\x80\x80\x80\x80\x80\x01", 0)
    with pytest.raises(VarintError, match="overflows 32 bits"):
        read_uvarint(b"\xff\xff\xff\xff\x1f", 0)


# -- errors ---------------------------------------------------------------------------------


def test_truncated_body_names_the_field_and_byte() -> None:
    wire = PROJECT.encode(PROJECT.struct("TopicRecord")(name="foo", topic_id=TOPIC_ID), 0)
    with pytest.raises(CodecError) as e:
        PROJECT.decode("TopicRecord", wire[:10], 0)
    assert e.value.field == "TopicId" and e.value.position == 4
    assert "truncated" in str(e.value)
    with pytest.raises(CodecError) as e:
        PROJECT.decode("TopicRecord", wire[:2], 0)
    assert e.value.field == "Name" and e.value.position == 0  # where the field starts
    with pytest.raises(CodecError) as e:
        PROJECT.decode("TopicRecord", wire[:-1], 0)
    assert e.value.field == "(tagged fields)" and e.value.position == len(wire) - 1
    for cut in range(len(wire)):
        with pytest.raises(CodecError):
            PROJECT.decode("TopicRecord", wire[:cut], 0)


def test_trailing_bytes_are_an_error() -> None:
    wire = PROJECT.encode(PROJECT.struct("TopicRecord")(name="foo", topic_id=TOPIC_ID), 0)
    with pytest.raises(CodecError, match=r"byte 21: 2 bytes of garbage after the TopicRecord body"):
        PROJECT.decode("TopicRecord", wire + b"\x00\x00", 0)


def test_invalid_utf8_and_null_in_non_nullable_field() -> None:
    with pytest.raises(CodecError, match="field Name, byte 0: invalid UTF-8"):
        PROJECT.decode("TopicRecord", b"\x02\xff" + TOPIC_ID.bytes + b"\x00", 0)
    with pytest.raises(CodecError, match="field Name, byte 0: non-nullable field was null"):
        PROJECT.decode("TopicRecord", b"\x00" + TOPIC_ID.bytes + b"\x00", 0)


def test_tagged_field_size_must_match() -> None:
    record_cls = PROJECT.struct("PartitionRecord")
    body = PROJECT.encode(record_cls(), 0)[:-1]
    with pytest.raises(CodecError, match="LeaderRecoveryState.*does not match"):
        PROJECT.decode("PartitionRecord", body + b"\x01\x00\x02\x01\x01", 0)


def test_non_default_value_in_a_version_without_the_field() -> None:
    record_cls = PROJECT.struct("PartitionRecord")
    value = record_cls(directories=(TOPIC_ID,))
    with pytest.raises(UnsupportedVersionError) as e:
        PROJECT.encode(value, 0)
    assert e.value.field == "Directories"
    assert PROJECT.encode(value, 1)  # v1 has it
    # An ignorable field is dropped silently: FetchResponse ErrorCode exists from v7; SessionId is not ignorable.
    fetch = RPC
    assert fetch.encode(fetch.struct("FetchResponse")(error_code=5), 4) == b"\x00\x00\x00\x00" * 2  # throttle, no topics
    with pytest.raises(UnsupportedVersionError) as e:
        fetch.encode(fetch.struct("FetchResponse")(session_id=5), 4)
    assert e.value.field == "SessionId"


def test_out_of_range_and_wrong_types_name_the_field() -> None:
    state = PROJECT.struct("MirrorPartitionStateValue")
    with pytest.raises(CodecError) as e:
        PROJECT.encode(state(state=300), 0)
    assert e.value.field == "State" and "out of range" in str(e.value)
    with pytest.raises(CodecError) as e:
        PROJECT.encode(PROJECT.struct("TopicRecord")(name=5, topic_id=TOPIC_ID), 0)  # type: ignore[arg-type]
    assert e.value.field == "Name"


def test_unknown_version_is_an_error() -> None:
    with pytest.raises(UnsupportedVersionError, match="TopicRecord has no version 3"):
        PROJECT.decode("TopicRecord", b"", 3)


def test_start_response_skipped_topics_are_tagged_so_old_clients_read_it() -> None:
    import json as _json

    from records.schema import parse_schema_text, strip_comments

    text = (PROJECT_SCHEMAS_DIR / "StartMirrorTopicsResponse.json").read_text()
    prototype = _json.loads(strip_comments(text))
    prototype["fields"] = [f for f in prototype["fields"] if f["name"] != "SkippedTopics"]
    old = SchemaSet([parse_schema_text(_json.dumps(prototype), "prototype")], "prototype")
    cls = PROJECT.struct("StartMirrorTopicsResponse")
    skipped = PROJECT.nested("StartMirrorTopicsResponse", "SkippedTopic")(name="payments", reason="start it by name")
    wire = PROJECT.encode(cls(skipped_topics=(skipped,)), 0)
    assert PROJECT.decode("StartMirrorTopicsResponse", wire, 0).skipped_topics == (skipped,)
    seen_by_old = old.decode("StartMirrorTopicsResponse", wire, 0)
    assert seen_by_old.topics == () and [tag for tag, _ in seen_by_old.unknown_tagged_fields] == [0]
    assert PROJECT.encode(cls(), 0) == old.encode(old.struct("StartMirrorTopicsResponse")(), 0)  # nothing skipped: same bytes


# -- the fast paths against the checked code --------------------------------------------------

PROJECT_CASES = [(msg, version) for msg, spec in sorted(PROJECT.specs.items()) for version in spec.versions()]


def _outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(*args)
    except CodecError as e:
        return type(e).__name__, (str(e), e.field, e.position)


# One @given function per case, as in test_round_trip.
@pytest.mark.parametrize(("message", "version"), PROJECT_CASES, ids=[f"{m}-v{v}" for m, v in PROJECT_CASES])
def test_project_round_trip_and_damaged_input(message: str, version: int) -> None:
    """Each value round-trips as in test_round_trip. Then truncated, altered or over-long input:
    the fast decoder returns what the checked one returns, or raises the same error (it hands
    what it cannot read to the checked one)."""
    codec = PROJECT.codec(message)
    vc = codec.version_codec(version)

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(value=message_values(codec, version), data=st.data())
    def agrees(value: object, data: st.DataObject) -> None:
        wire = _round_trips(PROJECT, message, version, value)
        assert vc.decode_at(wire, 0, len(wire)) == vc.decode_checked(wire, 0, len(wire)) == (value, len(wire))
        cut = data.draw(st.integers(0, len(wire)), label="cut")
        at = data.draw(st.integers(0, max(len(wire) - 1, 0)), label="at")
        byte = data.draw(st.integers(0, 255), label="byte")
        altered = wire[:at] + bytes([byte]) + wire[at + 1:] if wire else wire
        tail = data.draw(st.binary(min_size=1, max_size=40), label="tail")
        for buf, end in ((wire[:cut], cut), (altered, len(altered)), (altered + tail, len(altered)), (wire[:cut] + tail, cut)):
            assert _outcome(vc.decode_at, buf, 0, end) == _outcome(vc.decode_checked, buf, 0, end)

    agrees()


@pytest.mark.parametrize("n", [0, 1, 31, 32, 126, 127, 128, 200, 40000])
def test_fast_encoder_at_varint_and_size_boundaries(n: int) -> None:
    """Around the lengths where a compact length or a tagged size needs a second varint byte,
    and past an int16 string length: the fast encoder's bytes are the general encoder's, or
    it leaves the value to it."""
    ints = tuple(range(n))
    text = "x" * n
    values = [
        ("PartitionRecord", 0, PROJECT.struct("PartitionRecord")(topic_id=TOPIC_ID, replicas=ints, isr=ints[:3])),
        ("PartitionRecord", 1, PROJECT.struct("PartitionRecord")(topic_id=TOPIC_ID, directories=(TOPIC_ID,) * n)),
        ("PartitionChangeRecord", 0, PROJECT.struct("PartitionChangeRecord")(topic_id=TOPIC_ID, isr=ints, leader=n)),
        ("TopicRecord", 0, PROJECT.struct("TopicRecord")(name=text, topic_id=TOPIC_ID)),
        ("ConfigRecord", 0, PROJECT.struct("ConfigRecord")(resource_name=text, name="a", value=None)),
    ]
    # The project's own schemas carry Kafka's RPCs too (the reference folder holds only a few).
    handshake = PROJECT.struct("SaslHandshakeRequest")  # v1: a non-flexible int16 string
    values.append(("SaslHandshakeRequest", 1, handshake(mechanism=text)))
    for schemas, cases in ((PROJECT, values),):
        for name, version, value in cases:
            vc = schemas.codec(name).version_codec(version)
            assert vc.fast_encode_source is not None, name
            try:
                expected = vc.encode_general(value)
            except CodecError as e:
                with pytest.raises(type(e), match=re.escape(str(e))):
                    vc.encode(value)
                continue
            assert vc.encode(value) == expected, (name, version, n)
            assert schemas.codec(name).decode(expected, version) == value
