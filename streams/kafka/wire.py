"""The Kafka source port's wire layer: our codec's requests sent through aiokafka's connections,
the error codes the port tells apart, and RecordBatch v2 headers read from fetched bytes.

A ``CodecRequest`` is an aiokafka ``Request`` look-alike: ``prepare`` picks the highest version
both the broker and we know, capped where a newer version needs what we do not use (topic-ID
Fetch, batched FindCoordinator/OffsetFetch); the body is our schema codec's (``schemas/``).
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable, Mapping
from typing import Any

from crc32c import crc32c

from coordinator.ports import (
    UNDEFINED_EPOCH,
    Batch,
    FencedLeaderEpoch,
    NotLeader,
    PartitionMetadata,
    PortError,
    TopicPartition,
    UnknownLeaderEpoch,
    UnknownTopicId,
)
from records.kafka_envelope import request_header, response_header_size
from records.registry import default_schemas
from records.codec import CodecError
from records.segments import ControlType, control_type, decode_batch

# Kafka error codes the port tells apart (org.apache.kafka.common.protocol.Errors).
NONE = 0
UNSUPPORTED_VERSION = 35
OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
SECURITY_DISABLED = 54
GROUP_ID_NOT_FOUND = 69
INVALID_GROUP_TYPE = 129  # KIP-848/932: the group exists, of another type
KAFKA_STORAGE_ERROR = 56
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
UNKNOWN_TOPIC_ID = 100
_LEADER_MOVED = {LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR, REQUEST_TIMED_OUT}
_REFRESH = _LEADER_MOVED | {FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID}
_COORDINATOR_MOVED = {COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR}

# Highest versions we send: Fetch 12 names topics (13+ needs topic IDs in the request),
# FindCoordinator 3 and OffsetFetch 7 ask one group (later ones batch groups).
_CAPS = {"Fetch": 12, "ListOffsets": 8, "Metadata": 12, "OffsetForLeaderEpoch": 4, "ListGroups": 5,
         "DescribeGroups": 5, "FindCoordinator": 3, "OffsetFetch": 7, "DescribeConfigs": 4, "DescribeAcls": 3,
         "ReadMirrorStates": 0, "DescribeShareGroupOffsets": 0}  # fmt: skip
_API_KEYS = {"Fetch": 1, "ListOffsets": 2, "Metadata": 3, "OffsetFetch": 9, "FindCoordinator": 10,
             "DescribeGroups": 15, "ListGroups": 16, "OffsetForLeaderEpoch": 23, "DescribeAcls": 29,
             "DescribeConfigs": 32, "DescribeShareGroupOffsets": 90, "ReadMirrorStates": 100}  # fmt: skip


EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
CONSUMER_REPLICA_ID = -1
TOPIC_RESOURCE = 2
DYNAMIC_TOPIC_CONFIG = 1
_ACTIVE_GROUP_STATES = {"Stable", "PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"}
_ANY = 1

# RecordBatch v2 header: baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes,
# lastOffsetDelta, baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordCount.
_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
_ATTRIBUTES_AT = 21  # the CRC32C covers attributes to the end
_ATTR_TRANSACTIONAL = 0x10
_ATTR_CONTROL = 0x20
_ATTR_LOG_APPEND_TIME = 0x08


class UnsupportedApi(Exception):
    """The broker does not know this API (or no version both sides know)."""


class KafkaProtocolError(PortError):
    """The source answered with a Kafka error the port has no typed error for."""

    field_names = ("reason",)

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason



# ------------------------------------------------------------------ requests through aiokafka


class _Header:
    def __init__(self, data: bytes = b"", correlation_id: int = 0) -> None:
        self.data, self.correlation_id = data, correlation_id

    def encode(self) -> bytes:
        return self.data


class _Reply:
    """A decoded response: our codec's Struct and the version it was read at."""

    def __init__(self, body: Any, version: int) -> None:
        self.body, self.version = body, version


class _Decoder:
    def __init__(self, name: str, version: int) -> None:
        self.name, self.version = name, version

    def decode(self, buf: io.BytesIO) -> _Reply:
        # Read in place: aiokafka's BytesIO shares the frame's bytes (getvalue() is that object),
        # where read() would copy a Fetch response's megabytes once more.
        data, start = buf.getvalue(), buf.tell()
        codec = default_schemas().codec(self.name + "Response")
        body, end = codec.decode_prefix(data, self.version, start)
        if end != len(data):
            raise CodecError(f"{len(data) - end} bytes of garbage after the {self.name}Response body", position=end)
        return _Reply(body, self.version)


class _Prepared:
    """What aiokafka's connection sends: header, body, and how to read the answer."""

    def __init__(self, name: str, api_key: int, version: int, body: Any) -> None:
        self.name, self.API_KEY, self.API_VERSION, self.body = name, api_key, version, body
        self.RESPONSE_TYPE = _Decoder(name, version)

    def build_request_header(self, correlation_id: int, client_id: str) -> _Header:
        return _Header(request_header(self.API_KEY, self.API_VERSION, correlation_id, client_id))

    def encode(self) -> bytes:
        return default_schemas().encode(self.body, self.API_VERSION)

    def parse_response_header(self, buf: io.BytesIO) -> _Header:
        start = buf.tell()
        head = buf.read(64)
        correlation_id, size = response_header_size(head, self.API_KEY, self.API_VERSION)
        buf.seek(start + size)
        return _Header(correlation_id=correlation_id)

    def __repr__(self) -> str:
        return f"{self.name}Request v{self.API_VERSION}"


class CodecRequest:
    """An aiokafka ``Request`` look-alike built with our codec: ``prepare`` picks the highest
    version both the connection's broker and we know, then ``build(version)`` makes the body."""

    def __init__(self, name: str, build: Callable[[int], Any], min_version: int = 0) -> None:
        self.name, self.build, self.min_version = name, build, min_version
        self.API_KEY = _API_KEYS[name]
        self.offered: tuple[int, int] | None = None  # the broker's range, once prepared

    def prepare(self, versions: Mapping[int, tuple[int, int]]) -> _Prepared:
        spec = default_schemas().spec(self.name + "Request")
        if self.API_KEY not in versions:
            raise UnsupportedApi(f"the broker does not support {self.name} (api key {self.API_KEY})")
        lo, hi = self.offered = versions[self.API_KEY]
        version = min(hi, spec.valid_versions.highest, _CAPS[self.name])
        if version < max(lo, spec.valid_versions.lowest, self.min_version):
            raise UnsupportedApi(f"no {self.name} version in common with the broker ({lo}-{hi})")
        return _Prepared(self.name, self.API_KEY, version, self.build(version))


def _s(name: str) -> Any:
    """A message's Struct class."""
    return default_schemas().struct(name)


def _n(message: str, struct_name: str) -> Any:
    """A nested Struct class of a message."""
    return default_schemas().nested(message, struct_name)



def port_error(tp: TopicPartition, code: int, what: str, request_epoch: int, part: PartitionMetadata | None) -> PortError:
    """A partition's Kafka error as the port error the core handles."""
    epoch = part.leader_epoch if part is not None else UNDEFINED_EPOCH
    leader = part.leader if part is not None else -1
    if code in _LEADER_MOVED:
        return NotLeader(tp, -1 if code == LEADER_NOT_AVAILABLE else leader, epoch)
    if code == FENCED_LEADER_EPOCH:
        return FencedLeaderEpoch(tp, request_epoch, epoch)
    if code == UNKNOWN_LEADER_EPOCH:
        return UnknownLeaderEpoch(tp, request_epoch, epoch)
    if code in (UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID):
        return UnknownTopicId(tp.topic_id, tp.partition)
    return KafkaProtocolError(f"{what} of {tp}: Kafka error code {code}")


def split_batches(records: bytes | None, tp: TopicPartition) -> tuple[Batch, ...]:
    """The whole v2 RecordBatches of a fetched records blob (a partial last one is dropped, as a
    consumer drops it), each as a ``Batch`` whose payload is the raw batch, CRC checked."""
    if not records:
        return ()
    data = bytes(records)
    view = memoryview(data)
    out = []
    pos, size = 0, len(data)
    while pos + _BATCH_HEADER.size <= size:
        (base, length, epoch, magic, crc, attrs, last_delta, _base_ts, max_ts, pid, pepoch, seq,
         count) = _BATCH_HEADER.unpack_from(data, pos)  # fmt: skip
        end = pos + 12 + length
        if end > size:
            break
        if magic != 2:
            raise KafkaProtocolError(f"{tp}: message format v{magic} at offset {base}; a mirror copies v2 "
                                     "RecordBatches only (Kafka 0.11 and later)")  # fmt: skip
        if crc32c(view[pos + _ATTRIBUTES_AT : end]) != crc:  # over a view: no copy of the batch
            raise KafkaProtocolError(f"{tp}: corrupt batch at offset {base} (CRC mismatch)")
        raw = data[pos:end]
        ctype: ControlType | None = None
        if attrs & _ATTR_CONTROL:
            got = control_type(decode_batch(raw)[0].records[0])  # control batches are never compressed
            ctype = got if isinstance(got, ControlType) else None
        out.append(Batch(base_offset=base, last_offset=base + last_delta, leader_epoch=epoch, producer_id=pid,
                         producer_epoch=pepoch, base_sequence=seq, is_transactional=bool(attrs & _ATTR_TRANSACTIONAL),
                         is_control=bool(attrs & _ATTR_CONTROL), control_type=ctype, timestamp=max_ts, payload=raw,
                         record_count=count, log_append_time=bool(attrs & _ATTR_LOG_APPEND_TIME)))  # fmt: skip
        pos = end
    return tuple(out)

