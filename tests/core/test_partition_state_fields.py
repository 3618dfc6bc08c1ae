"""``to_schema_fields`` turns exactly the enum-typed fields into ints (a fixed list, for speed);
``encode_state`` by position encodes what the fields by name do; a key's TopicPartition is made once."""

from __future__ import annotations

import enum
import typing
import uuid

from hypothesis import given
from hypothesis import strategies as st

from coordinator.partition_state import (
    _ENUM_FIELDS,
    MirrorPartitionKey,
    MirrorPartitionState,
    Step,
    decode_state,
    encode_state,
)
from coordinator.ports import TopicPartition
from coordinator.states import ErrorCode, MirrorState
from records.registry import default_schemas


def test_the_enum_fields_are_every_enum_typed_field() -> None:
    hints = typing.get_type_hints(MirrorPartitionState)
    typed = tuple(f for f in MirrorPartitionState.__struct_fields__
                  if isinstance(hints[f], type) and issubclass(hints[f], enum.IntEnum))  # fmt: skip
    assert typed == _ENUM_FIELDS


def test_schema_fields_are_plain_values_and_round_trip() -> None:
    st = MirrorPartitionState(state=MirrorState.STOPPING, previous_state=MirrorState.MIRRORING, retry_attempt=2,
                              error_message="x", leader_epoch=4, state_epoch=9, applied_offset=11, entered_at_ms=5,
                              step=Step.STOP_BUMP_EPOCH, stop_offset=7, last_mirrored_epoch=3, epoch_target=5,
                              error_code=ErrorCode.UNKNOWN_SERVER_ERROR)  # fmt: skip
    fields = st.to_schema_fields()
    assert all(type(v) in (int, str) for v in fields.values())
    assert fields["state"] == int(MirrorState.STOPPING) and fields["step"] == int(Step.STOP_BUMP_EPOCH)
    assert decode_state(encode_state(st)) == st


_INTS = st.integers(-1, (1 << 15) - 1)  # RetryAttempt is an int16


@given(st.builds(MirrorPartitionState, state=st.sampled_from(MirrorState), previous_state=st.sampled_from(MirrorState),
                 retry_attempt=_INTS, error_message=st.none() | st.text(max_size=8), leader_epoch=_INTS,
                 state_epoch=_INTS, applied_offset=_INTS, entered_at_ms=_INTS, step=st.sampled_from(Step),
                 stop_offset=_INTS, epoch_target=_INTS, error_code=st.sampled_from(ErrorCode), cut_offset=_INTS,
                 given_up_records=_INTS))  # fmt: skip
def test_a_state_encoded_by_position_is_the_state_encoded_by_name(state: MirrorPartitionState) -> None:
    codec = default_schemas().codec("MirrorPartitionStateValue")
    by_name = codec.version_codec(0).encode(codec.cls(**state.to_schema_fields()))
    assert encode_state(state) == by_name
    assert decode_state(by_name) == state


def test_a_keys_topic_partition_is_made_once() -> None:
    key = MirrorPartitionKey("m", uuid.uuid4(), 3)
    tp = key.topic_partition
    assert tp == TopicPartition(key.topic_id, 3) and hash(tp) == hash(TopicPartition(key.topic_id, 3))
    assert MirrorPartitionKey("m", key.topic_id, 3).topic_partition is tp
