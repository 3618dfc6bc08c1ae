"""The model's record payload formats, and control record bodies.

A model batch's payload is a msgpack array of ``[offset_delta, key, value]`` records, or (for
batches Kafka clients produced through the model's Kafka listener) a Kafka-records payload:
a 0x00 marker, the batch's base timestamp (int64), its record count (int32) and the v2 record
section as the client sent it, headers and per-record timestamps included; or, for a batch
whose attributes say more than that (a compression codec, LogAppendTime), a 0x01 marker, those
attributes (int16), then the same fields, the section still compressed as sent, so the batch goes
out to consumers byte for byte. A msgpack payload starts with an array byte, never 0x00 or 0x01.
Payloads are opaque to the ports (mirrors copy them byte for byte); only the model decodes them,
to compact by key and to let demos read values back.
Control batches hold one record whose key is Kafka's control key (version int16, type int16)
and whose value is the marker body.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import msgspec

from coordinator.ports import AbortedTransaction, Batch, ClusterPort, ControlType, IsolationLevel, TopicPartition
from records.segments import (
    ATTR_COMPRESSION_MASK,
    ATTR_TIMESTAMP_TYPE,
    compress_records,
    decode_record_section,
    decompress_records,
    encode_record_section,
)
from records.segments import Record as SegmentRecord

Record = tuple[int, bytes | None, bytes | None]

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(list[tuple[int, bytes | None, bytes | None]])

MIRROR_PID_RESET_VERSION = 0


def encode_records(records: Iterable[Record]) -> bytes:
    """Records as ``(offset_delta, key, value)`` to payload bytes."""
    return _encoder.encode([list(r) for r in records])


KAFKA_PAYLOAD_MARKER = 0
KAFKA_BATCH_MARKER = 1
_KAFKA_PREFIX = struct.Struct(">bqi")
_KAFKA_BATCH_PREFIX = struct.Struct(">bhqi")
# The attribute bits a payload keeps: the batch's own (transactional, control) are the Batch's.
PAYLOAD_ATTRIBUTES = ATTR_COMPRESSION_MASK | ATTR_TIMESTAMP_TYPE


class KafkaRecords(NamedTuple):
    """A Kafka-records payload's fields; ``section`` as stored (compressed when ``codec`` says so)."""

    attributes: int
    base_timestamp: int
    count: int
    section: memoryview

    @property
    def codec(self) -> int:
        return self.attributes & ATTR_COMPRESSION_MASK

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & ATTR_TIMESTAMP_TYPE)

    def records_section(self) -> bytes:
        """The uncompressed record section; ValueError if it does not decompress."""
        if not self.codec:
            return bytes(self.section)
        return decompress_records(self.codec, bytes(self.section))

    def records(self) -> tuple[SegmentRecord, ...]:
        """The records; SegmentError or ValueError if they do not decode."""
        return decode_record_section(self.records_section(), self.count)


def kafka_payload(base_timestamp: int, record_count: int, record_section: bytes, attributes: int = 0) -> bytes:
    """A Kafka-records payload: marker, [attributes,] base timestamp, record count, the v2 record section."""
    attributes &= PAYLOAD_ATTRIBUTES
    if not attributes:
        return _KAFKA_PREFIX.pack(KAFKA_PAYLOAD_MARKER, base_timestamp, record_count) + record_section
    return _KAFKA_BATCH_PREFIX.pack(KAFKA_BATCH_MARKER, attributes, base_timestamp, record_count) + record_section


def kafka_records(payload: bytes) -> KafkaRecords | None:
    """The fields of a Kafka-records payload, None for msgpack."""
    if len(payload) >= _KAFKA_PREFIX.size and payload[0] == KAFKA_PAYLOAD_MARKER:
        _, base_timestamp, count = _KAFKA_PREFIX.unpack_from(payload, 0)
        return KafkaRecords(0, base_timestamp, count, memoryview(payload)[_KAFKA_PREFIX.size :])
    if len(payload) >= _KAFKA_BATCH_PREFIX.size and payload[0] == KAFKA_BATCH_MARKER:
        _, attributes, base_timestamp, count = _KAFKA_BATCH_PREFIX.unpack_from(payload, 0)
        return KafkaRecords(attributes, base_timestamp, count, memoryview(payload)[_KAFKA_BATCH_PREFIX.size :])
    return None


def decode_records(payload: bytes) -> list[Record]:
    """Payload bytes back to records; raises msgspec.DecodeError for a foreign payload."""
    parts = kafka_records(payload)
    if parts is None:
        return _decoder.decode(payload)
    try:
        return [(r.offset_delta, r.key, r.value) for r in parts.records()]
    except ValueError as exc:  # SegmentError is one
        raise msgspec.DecodeError(f"bad Kafka-records payload: {exc}") from None


def payload_keeping(payload: bytes, survivors: list[Record]) -> bytes:
    """The payload with only ``survivors`` (a subset of its decoded records) left, in its own format:
    a Kafka-records payload keeps the survivors' headers and timestamps, and its codec (Kafka's
    cleaner compresses what it retains with the batch's codec)."""
    parts = kafka_records(payload)
    if parts is None:
        return encode_records(survivors)
    keep = {r[0] for r in survivors}
    kept = [r for r in parts.records() if r.offset_delta in keep]
    section = encode_record_section(kept)
    if parts.codec:
        section = compress_records(parts.codec, section)
    return kafka_payload(parts.base_timestamp, len(kept), section, parts.attributes)


def keyed_payload(pairs: Sequence[tuple[bytes | None, bytes | None]]) -> bytes:
    """Consecutive key/value pairs as records with offset deltas 0..n-1."""
    return encode_records((i, k, v) for i, (k, v) in enumerate(pairs))


def control_key(control_type: ControlType) -> bytes:
    """Kafka's control record key: version 0 and the control type, both int16."""
    return struct.pack(">hh", 0, int(control_type))


def end_txn_marker_value(coordinator_epoch: int = 0) -> bytes:
    """EndTransactionMarker value: version int16 0, coordinator epoch int32."""
    return struct.pack(">hi", 0, coordinator_epoch)


@functools.lru_cache(maxsize=64)  # a mass stop resets every partition with the same source cluster id
def mirror_pid_reset_value(source_cluster_id: str) -> bytes:
    """MirrorPidResetRecord v0 value: Version int16, SourceClusterId as a compact string, no tags."""
    raw = source_cluster_id.encode()
    return struct.pack(">h", MIRROR_PID_RESET_VERSION) + _uvarint(len(raw) + 1) + raw + b"\x00"


def decode_mirror_pid_reset(value: bytes) -> tuple[int, str]:
    """(version, source cluster id) from a MirrorPidResetRecord value."""
    (version,) = struct.unpack_from(">h", value, 0)
    length, pos = _read_uvarint(value, 2)
    return version, value[pos : pos + length - 1].decode()


@functools.lru_cache(maxsize=256)  # the same few markers, written for every partition of a stop
def control_payload(control_type: ControlType, value: bytes) -> bytes:
    return encode_records([(0, control_key(control_type), value)])


def batch_values(batch: Batch) -> list[bytes | None]:
    """The values of a data batch written in the model's format (demos and tests read them back)."""
    return [v for _, _, v in decode_records(batch.payload)]


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def filter_aborted(batches: Sequence[Batch], aborted: Sequence[AbortedTransaction]) -> list[Batch]:
    """What a read_committed consumer delivers: data batches minus aborted transactions and markers.

    Kafka's consumer algorithm: an aborted transaction becomes active for its producer once the
    fetch reaches its first offset; that producer's transactional batches are skipped until its
    ABORT marker.
    """
    pending = sorted(aborted, key=lambda a: a.first_offset)
    active: set[int] = set()
    out: list[Batch] = []
    i = 0
    for batch in batches:
        while i < len(pending) and pending[i].first_offset <= batch.last_offset:
            active.add(pending[i].producer_id)
            i += 1
        if batch.is_control:
            if batch.control_type == ControlType.ABORT:
                active.discard(batch.producer_id)
            continue
        if batch.is_transactional and batch.producer_id in active:
            continue
        out.append(batch)
    return out


def read_committed_values(port: ClusterPort, tp: TopicPartition) -> list[bytes | None]:
    """What a read_committed consumer reads of a partition, from the log start to the LSO.

    Works on any port (the in-process model or a server client): fetches READ_COMMITTED and drops
    the aborted transactions the fetch reports, as a Kafka consumer does.
    """
    values: list[bytes | None] = []
    for b in read_committed_batches(port, tp):
        values.extend(batch_values(b))
    return values


def read_committed_batches(port: ClusterPort, tp: TopicPartition, upto: int | None = None) -> list[Batch]:
    """The batches a read_committed consumer keeps, from the log start to the LSO (or until it
    has fetched past ``upto``): READ_COMMITTED fetches, the aborted transactions they report dropped."""
    offset = port.list_offsets(tp).log_start
    got: list[Batch] = []
    aborted: list[AbortedTransaction] = []
    while upto is None or offset < upto:
        r = port.fetch(tp, offset, 1 << 20, IsolationLevel.READ_COMMITTED)
        if not r.batches:
            break
        got.extend(r.batches)
        aborted.extend(r.aborted_transactions)
        offset = r.batches[-1].next_offset
    return filter_aborted(got, sorted(set(aborted), key=lambda a: a.first_offset))
