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
