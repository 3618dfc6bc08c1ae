"""``to_schema_fields`` turns exactly the enum-typed fields into ints (a fixed list, for speed)."""

from __future__ import annotations

import enum
import typing

from coordinator.partition_state import _ENUM_FIELDS, MirrorPartitionState, Step, decode_state, encode_state
from coordinator.states import ErrorCode, MirrorState


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
