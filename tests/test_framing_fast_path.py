"""MetadataRecordSerde's hot paths (a known header, a known Struct type and version) against
its full path: the same records, the same bytes, the same errors."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from record_strategies import message_values
from records.framing import ApiMessageAndVersion, FrameError, MetadataRecordSerde
from records.registry import default_schemas

SCHEMAS = default_schemas()
CASES = [
    (name, version)
    for name, spec in sorted(SCHEMAS.specs.items())
    if spec.type == "metadata" and spec.api_key is not None
    for version in spec.versions()
]


def _outcome(decode: object, data: bytes) -> object:
    try:
        record = decode(data)  # type: ignore[operator]
    except FrameError as e:
        return ("FrameError", str(e), e.position, e.field)
    return ("ok", type(record).__name__, tuple(record))


# One @given function per case (see tests/test_codec.py on Hypothesis and parametrize).
@pytest.mark.parametrize(("message", "version"), CASES, ids=[f"{m}-v{v}" for m, v in CASES])
def test_hot_paths_agree_with_the_full_path(message: str, version: int) -> None:
    codec = SCHEMAS.codec(message)
    warm = MetadataRecordSerde(SCHEMAS)

    @settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(value=message_values(codec, version), data=st.data())
    def agrees(value: object, data: st.DataObject) -> None:
        wire = MetadataRecordSerde(SCHEMAS).encode(value, version)  # a new serde: the full path
        assert warm.encode(value, version) == wire
        assert warm.encode(value, version) == wire  # now through the hot path
        assert _outcome(warm.decode, wire) == _outcome(MetadataRecordSerde(SCHEMAS).decode, wire)
        assert warm.decode(wire) == (value, version, SCHEMAS.spec(message).api_key)
        cut = data.draw(st.integers(0, len(wire)), label="cut")
        at = data.draw(st.integers(0, len(wire) - 1), label="at")
        byte = data.draw(st.integers(0, 255), label="byte")
        tail = data.draw(st.binary(max_size=8), label="tail")
        for damaged in (wire[:cut], wire[:at] + bytes([byte]) + wire[at + 1:], wire + tail):
            assert _outcome(warm.decode, damaged) == _outcome(MetadataRecordSerde(SCHEMAS).decode, damaged)

    agrees()


def test_typical_records_take_the_fast_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fast path that always gave up would still pass the tests above: here the checked
    decoder and the general encoder must not be called for everyday records."""
    topic_id, dirs = uuid.UUID(int=7), (uuid.UUID(int=8), uuid.UUID(int=9), uuid.UUID(int=10))
    partition, change = SCHEMAS.struct("PartitionRecord"), SCHEMAS.struct("PartitionChangeRecord")
    values = [
        (SCHEMAS.struct("TopicRecord")(name="orders", topic_id=topic_id), 0),
        (partition(partition_id=1, topic_id=topic_id, replicas=(1, 2, 3), isr=(1, 2, 3), leader=1), 0),
        (partition(partition_id=1, topic_id=topic_id, replicas=(1, 2, 3), isr=(1, 2), directories=dirs), 1),
        (partition(partition_id=1, topic_id=topic_id, replicas=(1,), isr=(1,), leader_recovery_state=1), 0),
        (change(partition_id=1, topic_id=topic_id, isr=(1, 2), leader=2), 0),
        (change(partition_id=1, topic_id=topic_id, replicas=(1, 2, 4), isr=(1, 2), directories=dirs), 1),
        (SCHEMAS.struct("MirrorTopicStateChangeRecord")(topic_id=topic_id, mirror_name="a-to-b", desired_state=1), 0),
    ]

    def never(*args: object) -> None:
        raise AssertionError("the fast path gave up")

    for value, version in values:
        name = type(value).__name__
        api_key = SCHEMAS.spec(name).api_key
        wire = MetadataRecordSerde(SCHEMAS).encode(value, version)
        vc = SCHEMAS.codec(name).version_codec(version)
        encode = vc.record_encoder(wire[:3])
        decode = vc.record_decoder(3, ApiMessageAndVersion, (version, api_key))
        monkeypatch.setitem(encode.__globals__, "_general", never)
        monkeypatch.setitem(vc.encode.__globals__, "_general", never)
        monkeypatch.setitem(vc.decode_at.__globals__, "_checked", never)
        assert encode(value) == wire and vc.encode(value) == wire[3:], name
        assert decode(wire) == (value, version, api_key), name  # None: it gave up
        assert vc.decode_at(wire, 3, len(wire)) == (value, len(wire)), name


@pytest.mark.parametrize(("message", "version"), CASES, ids=[f"{m}-v{v}" for m, v in CASES])
def test_an_encoder_built_on_a_sample_writes_the_general_bytes(message: str, version: int) -> None:
    """The record encoder tests the shape of the value it was built on first (its hot path):
    that value, and values of other shapes, give the general encoder's bytes."""
    codec = SCHEMAS.codec(message)
    vc = codec.version_codec(version)
    prefix = MetadataRecordSerde(SCHEMAS).encode(codec.cls(), version)[:3]

    @settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(sample=message_values(codec, version), others=st.lists(message_values(codec, version), max_size=3))
    def agrees(sample: object, others: list[object]) -> None:
        encode = vc.record_encoder(prefix, sample)
        for value in (sample, *others, sample):
            assert encode(value) == prefix + vc.encode_general(value)

    agrees()


def test_the_sample_shape_skips_the_shape_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    topic_id, dirs = uuid.UUID(int=7), (uuid.UUID(int=8), uuid.UUID(int=9), uuid.UUID(int=10))
    partition = SCHEMAS.struct("PartitionRecord")
    for sample, other, version in [
        (partition(partition_id=1, topic_id=topic_id, replicas=(1, 2, 3), isr=(1, 2, 3), leader=1),
         partition(partition_id=2, topic_id=topic_id, replicas=(4, 5, 6), isr=(6, 5, 4), leader=6, leader_epoch=3), 0),
        (partition(partition_id=1, topic_id=topic_id, replicas=(1, 2, 3), isr=(1, 2), directories=dirs),
         partition(partition_id=9, topic_id=topic_id, replicas=(3, 2, 1), isr=(3, 1), directories=dirs[::-1]), 1),
    ]:
        vc = SCHEMAS.codec("PartitionRecord").version_codec(version)
        wire = MetadataRecordSerde(SCHEMAS).encode(other, version)
        encode = vc.record_encoder(wire[:3], sample)

        def never(*args: object) -> None:
            raise AssertionError("the hot path gave up")

        monkeypatch.setitem(encode.__globals__, "_general", never)
        monkeypatch.setitem(encode.__globals__, "_SH", {})
        monkeypatch.setitem(encode.__globals__, "_shape", never)
        assert encode(other) == wire
        assert encode(sample) == MetadataRecordSerde(SCHEMAS).encode(sample, version)
