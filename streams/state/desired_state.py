"""Desired-state events: the worker that follows the metadata log fans each
MirrorTopicStateChangeRecord out to one event per partition on the desired-state topic, on the
partition ``streams.state.mirror_state_codec.partition_for`` gives, so the agent that owns a mirror
partition's state sees every change to it, in log order:

- key     = the MirrorPartitionStateKey key (type 2 + body), as on ``__mirror_state``;
- value   = the framed MirrorTopicStateChangeRecord (MetadataRecordSerde);
- headers = ``kip1279.offset`` (int64): the metadata-log offset, which becomes AppliedOffset;
  ``kip1279.epoch`` (int32): the metadata-log epoch.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any, NamedTuple

import msgspec

from coordinator.image import TopicCut
from coordinator.states import DesiredState
from records.framing import MetadataRecordSerde
from streams.state.mirror_state_codec import MirrorStateError, RecordType, default_codec, partition_for_key

OFFSET_HEADER = "kip1279.offset"
EPOCH_HEADER = "kip1279.epoch"
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


class DesiredStateEvent(NamedTuple):
    partition: int  # of the desired-state topic
    key: bytes
    value: bytes
    headers: list[tuple[str, bytes]]


class DesiredStateChange(NamedTuple):
    """A decoded desired-state event."""

    mirror_name: str | None  # None: the topic left its mirror
    topic_id: uuid.UUID
    partition: int
    desired_state: int
    metadata_offset: int
    metadata_epoch: int
    cut: TopicCut | None = None  # a --consistent-cut stop's


def desired_state_events(record: msgspec.Struct, partitions: int, metadata_offset: int, metadata_epoch: int,
                         num_partitions: int, mirror_name: str | None = None) -> list[DesiredStateEvent]:  # fmt: skip
    """One event per partition of the topic of a MirrorTopicStateChangeRecord.

    ``mirror_name`` is the mirror the topic belonged to, for a record that detaches it (its
    MirrorName is null) so the event still reaches the partition that holds its state.
    """
    mirror = record.mirror_name or mirror_name  # type: ignore[attr-defined]
    if mirror is None:
        raise MirrorStateError("a detaching MirrorTopicStateChangeRecord needs the mirror it left")
    value = MetadataRecordSerde(default_codec().schemas).encode(record, 0)
    headers = [(OFFSET_HEADER, _INT64.pack(metadata_offset)), (EPOCH_HEADER, _INT32.pack(metadata_epoch))]
    out = []
    for p in range(partitions):
        key = default_codec().state_key(mirror, record.topic_id, p)  # type: ignore[attr-defined]
        out.append(DesiredStateEvent(partition_for_key(key, num_partitions), key, value, headers))
    return out


def decode_desired_state(key: bytes, value: bytes, headers: Any) -> DesiredStateChange:
    rtype, k = default_codec().decode_key(key)
    if rtype != RecordType.MIRROR_PARTITION_STATE:
        raise MirrorStateError(f"a desired-state event is keyed by a MirrorPartitionStateKey, not {rtype.name}")
    record: Any = MetadataRecordSerde(default_codec().schemas).decode(value).message
    h = dict(headers or ())
    offset = _INT64.unpack(h[OFFSET_HEADER])[0] if OFFSET_HEADER in h else -1
    epoch = _INT32.unpack(h[EPOCH_HEADER])[0] if EPOCH_HEADER in h else -1
    k2: Any = k
    cut = None
    if record.desired_state == DesiredState.STOP and record.cut_timestamp >= 0:
        cut = TopicCut(record.cut_timestamp, tuple(sorted((c.partition_index, c.cut_offset) for c in record.cut_partitions)))
    return DesiredStateChange(record.mirror_name, record.topic_id, k2.partition, record.desired_state, int(offset),
                              int(epoch), cut)  # fmt: skip
