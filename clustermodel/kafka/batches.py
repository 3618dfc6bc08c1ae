"""Model batches to Kafka RecordBatch v2 bytes and back.

A batch a Kafka client produced keeps its record section as it came (a Kafka-records payload,
clustermodel/records.py), compressed or not: headers, per-record timestamps and offset deltas
reach consumers, on A and, copied by the mirror, on B, in the producer's bytes. Only the header
is the broker's: base offset and leader epoch assigned, the max timestamp as Kafka's
LogValidator sets it, the CRC32C computed again. Batches the model wrote itself (its msgpack
payload) are encoded record by record, with the batch timestamp for every record and no headers.

Produced batches are checked as Kafka 4.1 checks them, with its error codes (ProduceRequest's
validateRecords, UnifiedLog's analyzeAndValidateRecords, LogValidator): one v2 batch per
partition, base offset 0, CRC32C, record count and offsets, then every record's framing after
decompressing (gzip, snappy, lz4, zstd). A section that does not decompress is Kafka's
UNKNOWN_SERVER_ERROR (its codecs' IOException surfaces as a KafkaException).
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from typing import NamedTuple

from crc32c import crc32c

from coordinator.ports import Batch
from records.segments import (  # the v2 batch layout, defined once in records/
    _ATTRIBUTES_OFFSET,
    _HEADER,
    _MIN_BATCH_LENGTH,
    _PREFIX,
    _TAIL,
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    COMPRESSION_CODECS,
    LOG_OVERHEAD,
    Record,
    RecordBatch,
    decode_record_section,
    decompress_records,
    encode_batch,
)
from records.varint import VarintError, read_varint, read_varlong

from ..records import PAYLOAD_ATTRIBUTES, decode_records, kafka_payload, kafka_records


class BatchRejected(Exception):
    """A produced batch the broker refuses; ``code`` is the Kafka error code. ``request_level``:
    found by ProduceRequest.validateRecords, before Kafka looks for the partition's leader."""

    def __init__(self, code: int, message: str, request_level: bool = False,
                 record_errors: list[tuple[int, str]] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.request_level = request_level
        self.record_errors = record_errors or []  # (index in the batch, why), Produce v8+'s RecordErrors


UNKNOWN_SERVER_ERROR = -1
CORRUPT_MESSAGE = 2
INVALID_TIMESTAMP = 32
INVALID_RECORD = 87
NO_TIMESTAMP = -1
UNSUPPORTED_COMPRESSION_TYPE = 76
LZ4, ZSTD = 3, 4
_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_INDEPENDENT_BLOCKS = 0x20  # in the frame's FLG byte
LEGACY_MIN_SIZE = 14  # Kafka's LegacyRecord.RECORD_OVERHEAD_V0: the smallest size it reads as a batch
_INT32 = struct.Struct(">i")
_UP_TO_MAGIC = struct.Struct(">qiib")  # what Kafka reads before it knows a batch's format


class ProducedBatch(NamedTuple):
    """A produced v2 batch's header fields and its record section as sent (compressed or not)."""

    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int  # the largest record timestamp, as Kafka's LogValidator sets it
    producer_id: int
    producer_epoch: int
    base_sequence: int
    count: int
    section: bytes

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def codec(self) -> int:
        return self.attributes & ATTR_COMPRESSION_MASK


def _batch_spans(data: bytes) -> list[tuple[int, int, int]]:
    """(start, end, magic) of each whole batch, as Kafka's ByteBufferLogInputStream finds them: a
    partial batch at the end is not a batch; a size below a v0 message or a bad magic is
    CORRUPT_MESSAGE."""
    spans = []
    pos, n = 0, len(data)
    while n - pos >= LOG_OVERHEAD:
        (size,) = _INT32.unpack_from(data, pos + 8)
        if size < LEGACY_MIN_SIZE:
            raise BatchRejected(CORRUPT_MESSAGE, f"Record size {size} is less than the minimum record overhead ({LEGACY_MIN_SIZE})", True)
        if n - pos < _UP_TO_MAGIC.size:
            break
        magic = _UP_TO_MAGIC.unpack_from(data, pos)[3]
        if not 0 <= magic <= 2:
            raise BatchRejected(CORRUPT_MESSAGE, f"Invalid magic found in record: {magic}", True)
        end = pos + LOG_OVERHEAD + size
        if end > n:
            break
        spans.append((pos, end, magic))
        pos = end
    return spans


def decode_produced(data: bytes, produce_version: int, topic_partition: str = "", compacted: bool = False,
                    timestamp_range: tuple[int, int] | None = None) -> ProducedBatch:
    """The one v2 batch of a partition's produce data, checked in Kafka's order: exactly one v2
    batch (zstd only from Produce v7), base offset 0, CRC32C, count and offsets, no control batch,
    a sequence with a producer ID, each record's framing in the (decompressed) section, then each
    record as LogValidator.validateRecord sees it: a key on a compacted topic, and (CreateTime)
    a timestamp inside ``timestamp_range``."""
    spans = _batch_spans(data)
    v = produce_version
    if not spans:
        raise BatchRejected(INVALID_RECORD, f"Produce requests with version {v} must have at least one record batch per partition", True)
    pos, end, magic = spans[0]
    if magic != 2:
        raise BatchRejected(INVALID_RECORD, f"Produce requests with version {v} are only allowed to contain record batches with magic version 2", True)
    if end - pos < _HEADER.size:
        raise BatchRejected(CORRUPT_MESSAGE, f"Record batch is corrupt (the size {end - pos} is smaller than the minimum allowed overhead {_HEADER.size})")
    (base, _, _, _, crc, attributes, last_delta, base_ts, _, pid, epoch, seq, count) = _HEADER.unpack_from(data, pos)
    codec = attributes & ATTR_COMPRESSION_MASK
    if codec not in COMPRESSION_CODECS:
        # Kafka's CompressionType.forId throws IllegalArgumentException: not an ApiException
        raise BatchRejected(UNKNOWN_SERVER_ERROR, f"Unknown compression type id: {codec}", True)
    if v < 7 and codec == ZSTD:
        raise BatchRejected(UNSUPPORTED_COMPRESSION_TYPE, f"Produce requests with version {v} are not allowed to use ZStandard compression", True)
    if len(spans) > 1:
        raise BatchRejected(INVALID_RECORD, f"Produce requests with version {v} are only allowed to contain exactly one record batch per partition", True)
    if base != 0:
        raise BatchRejected(INVALID_RECORD, f"The baseOffset of the record batch in the append should be 0, but it is {base}")
    if crc32c(data[pos + _ATTRIBUTES_OFFSET : end]) != crc:
        raise BatchRejected(CORRUPT_MESSAGE, f"Record is corrupt (stored crc = {crc})")
    if last_delta < 0:
        raise BatchRejected(INVALID_RECORD, f"Batch has an invalid offset range: [0, {last_delta}]")
    if count <= 0:
        raise BatchRejected(INVALID_RECORD, f"Invalid reported count for record batch: {count}")
    if count != last_delta + 1:
        raise BatchRejected(INVALID_RECORD, f"Inconsistent batch offset range [0, {last_delta}] and count of records {count}")
    if attributes & ATTR_CONTROL:
        raise BatchRejected(INVALID_RECORD, "Clients are not allowed to write control records")
    if pid >= 0 and seq < 0:
        raise BatchRejected(INVALID_RECORD, f"Invalid sequence number {seq} in record batch with producerId {pid}")
    section = data[pos + _HEADER.size : end]
    records = section
    if codec == LZ4 and section[:4] == _LZ4_MAGIC and len(section) > 4 and not section[4] & _LZ4_INDEPENDENT_BLOCKS:
        # Kafka's KafkaLZ4BlockInputStream decompresses each block alone: a linked-block frame fails
        raise BatchRejected(UNKNOWN_SERVER_ERROR, "Failed to decompress record stream: lz4 block dependency is not supported")
    if codec:
        try:
            records = decompress_records(codec, section)
        except ValueError as exc:
            raise BatchRejected(UNKNOWN_SERVER_ERROR, f"Failed to decompress record stream: {exc}") from None
    low, high = _check_framing(records, count)
    max_timestamp = base_ts + high
    if compacted or (timestamp_range is not None and not timestamp_range[0] <= base_ts + low <= base_ts + high <= timestamp_range[1]):
        _check_records(records, count, base_ts, topic_partition, compacted, timestamp_range)
    return ProducedBatch(attributes & ~ATTR_CONTROL, last_delta, base_ts, max_timestamp, pid, epoch, seq, count, section)


def _check_framing(section: bytes, count: int) -> tuple[int, int]:
    """The smallest and largest timestamp deltas of ``count`` (> 0) records framed as Kafka's
    DefaultRecord reads them: each a positive length that fits, an attributes byte and a
    timestamp delta, nothing after."""
    pos = 0
    n = len(section)
    top: int | None = None
    bottom = 0
    try:
        for _ in range(count):
            # Zig-zag varints, one- and two-byte ones inline (record lengths and timestamp deltas
            # are almost always that short): this loop runs for every produced record.
            b = section[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif section[pos + 1] < 0x80:
                raw = (b & 0x7F) | (section[pos + 1] << 7)
                length = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                length, pos = read_varint(section, pos)
            if length <= 0 or pos + length > n:
                raise BatchRejected(INVALID_RECORD, f"Invalid record size: expected {length} bytes, {n - pos} remain")
            b = section[pos + 1]  # after the record's attributes byte
            if b < 0x80:
                delta = (b >> 1) ^ -(b & 1)
            elif section[pos + 2] < 0x80:
                raw = (b & 0x7F) | (section[pos + 2] << 7)
                delta = (raw >> 1) ^ -(raw & 1)
            else:
                delta, _ = read_varlong(section, pos + 1)
            if top is None:
                top = bottom = delta
            elif delta > top:
                top = delta
            elif delta < bottom:
                bottom = delta
            pos += length
    except (IndexError, VarintError):
        raise BatchRejected(INVALID_RECORD, "Incorrect declared batch size, premature EOF reached") from None
    if pos != n:
        raise BatchRejected(INVALID_RECORD, "Incorrect declared batch size, records still remaining in file")
    return bottom, top if top is not None else 0


def _check_records(section: bytes, count: int, base_ts: int, topic_partition: str, compacted: bool,
                   timestamp_range: tuple[int, int] | None) -> None:
    """LogValidator's per-record errors, gathered as it gathers them (a key error before a
    timestamp error for the same record), raised as its RecordValidationException."""
    errors: list[tuple[int, str, bool]] = []
    for index, r in enumerate(decode_record_section(section, count)):
        ts = base_ts + r.timestamp_delta
        if compacted and r.key is None:
            errors.append((index, f"Compacted topic cannot accept message without key in topic partition {topic_partition}", False))
        elif timestamp_range is not None and ts != NO_TIMESTAMP and not timestamp_range[0] <= ts <= timestamp_range[1]:
            errors.append((index, f"Timestamp {ts} of message with offset {r.offset_delta} is out of range. "
                                  f"The timestamp should be within [{timestamp_range[0]}, {timestamp_range[1]}]", True))
    if not errors:
        return
    listed = [(i, m) for i, m, _ in errors]
    if any(bad_time for *_, bad_time in errors):
        raise BatchRejected(INVALID_TIMESTAMP, "One or more records have been rejected due to invalid timestamp", record_errors=listed)
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in listed[:3])
    raise BatchRejected(INVALID_RECORD, f"One or more records have been rejected due to {len(listed)} record errors in total, "
                                        f"and only showing the first three errors at most: [{shown}]", record_errors=listed)


def model_payload(batch: ProducedBatch, attributes: int | None = None) -> bytes:
    """The Kafka-records payload a produced batch is kept as: its section as sent, with its codec
    and timestamp type (``attributes`` in place of its own, for LogAppendTime)."""
    attrs = batch.attributes if attributes is None else attributes
    return kafka_payload(batch.base_timestamp, batch.count, batch.section, attrs & PAYLOAD_ATTRIBUTES)


class WireCache:
    """Encoded bytes of recently fetched model batches (a batch is immutable once written).

    Keyed by the Batch object's id; the entry holds the batch itself so the id cannot be reused
    while it is cached.
    """

    def __init__(self, size: int = 65536) -> None:
        self.size = size
        self._entries: OrderedDict[int, tuple[Batch, bytes]] = OrderedDict()

    def wire(self, batch: Batch) -> bytes:
        key = id(batch)
        hit = self._entries.get(key)
        if hit is not None and hit[0] is batch:
            return hit[1]
        data = to_wire(batch)
        self._entries[key] = (batch, data)
        if len(self._entries) > self.size:
            self._entries.popitem(last=False)
        return data


def whole_record_batch(batch: Batch) -> bytes | None:
    """The payload itself if it is a whole RecordBatch v2 for this batch (what the Kafka source port
    mirrors: the source's batch, header included), CRC32C checked; else None."""
    p = batch.payload
    if len(p) < 61 or p[16] != 2:
        return None
    base, length, _epoch, _magic, crc = _PREFIX.unpack_from(p, 0)
    if base != batch.base_offset or length + 12 != len(p) or crc32c(p[21:]) != crc:
        return None
    return p


def to_wire(batch: Batch) -> bytes:
    """A model batch as Kafka RecordBatch v2 bytes, CRC32C included. A mirrored Kafka batch goes out
    byte for byte, as the source served it (Kafka's mirror keeps the source's batches)."""
    whole = whole_record_batch(batch)
    if whole is not None:
        return whole
    attributes = (ATTR_TRANSACTIONAL if batch.is_transactional else 0) | (ATTR_CONTROL if batch.is_control else 0)
    parts = kafka_records(batch.payload)
    if parts is not None:
        section = parts.section
        tail = _TAIL.pack(attributes | parts.attributes, batch.last_offset - batch.base_offset, parts.base_timestamp,
                          batch.timestamp, batch.producer_id, batch.producer_epoch, batch.base_sequence, parts.count)
        crc = crc32c(section, crc32c(tail))
        prefix = _PREFIX.pack(batch.base_offset, _MIN_BATCH_LENGTH + len(section), batch.leader_epoch, 2, crc)
        return b"".join((prefix, tail, section))
    try:
        recs = decode_records(batch.payload)
    except Exception:  # noqa: BLE001 - a foreign payload: hand it out as one opaque value
        recs = [(0, None, batch.payload)]
    rb = RecordBatch(
        base_offset=batch.base_offset,
        partition_leader_epoch=batch.leader_epoch,
        attributes=attributes,
        last_offset_delta=batch.last_offset - batch.base_offset,
        base_timestamp=batch.timestamp,
        max_timestamp=batch.timestamp,
        producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence,
        records=tuple(Record(delta, 0, key, value) for delta, key, value in recs),
    )
    return encode_batch(rb)
