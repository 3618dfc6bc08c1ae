"""Model batches to Kafka RecordBatch v2 bytes and back.

A batch a Kafka client produced keeps its record section as it came (a Kafka-records payload,
clustermodel/records.py): headers, per-record timestamps and offset deltas reach consumers, on
A and, copied by the mirror, on B. Only the header is the broker's: base offset and leader epoch
assigned, the CRC32C computed again. Batches the model wrote itself (its msgpack payload) are
encoded record by record, with the batch timestamp for every record and no headers.

Produced batches are checked as a broker does (CRC32C, magic 2, record framing); gzip is
inflated, the other codecs are refused with UNSUPPORTED_COMPRESSION_TYPE.
"""

from __future__ import annotations

import struct
import zlib
from collections import OrderedDict

from crc32c import crc32c

from coordinator.ports import Batch
from records.segments import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    COMPRESSION_CODECS,
    Record,
    RecordBatch,
    SegmentError,
    decode_batch,
    encode_batch,
)

from ..records import decode_records, kafka_payload, kafka_payload_parts

_TAIL = struct.Struct(">hiqqqhii")  # attributes .. recordsCount
_PREFIX = struct.Struct(">qiibI")  # baseOffset .. crc
_MIN_BATCH_LENGTH = 49

_HEADER = struct.Struct(">qiibIhiqqqhii")
_ATTRIBUTES_OFFSET = 21
_LOG_OVERHEAD = 12


class BatchRejected(Exception):
    """A produced batch the broker refuses; ``code`` is the Kafka error code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


CORRUPT_MESSAGE = 2
INVALID_RECORD = 87
UNSUPPORTED_COMPRESSION_TYPE = 76


def decode_produced(data: bytes) -> list[tuple[RecordBatch, bytes]]:
    """The v2 batches of one partition's produce data, CRC-checked, gzip inflated; each with its
    uncompressed record section."""
    out: list[tuple[RecordBatch, bytes]] = []
    pos = 0
    n = len(data)
    while pos < n:
        if n - pos < _HEADER.size:
            raise BatchRejected(CORRUPT_MESSAGE, f"truncated batch header at byte {pos}")
        (_, length, _, magic, crc, attributes, *_rest) = _HEADER.unpack_from(data, pos)
        end = pos + _LOG_OVERHEAD + length
        if magic != 2:
            raise BatchRejected(INVALID_RECORD, f"magic {magic}: only v2 record batches are accepted")
        if end > n or length < _HEADER.size - _LOG_OVERHEAD:
            raise BatchRejected(CORRUPT_MESSAGE, f"batch at byte {pos} declares {length} bytes, {n - pos - _LOG_OVERHEAD} remain")
        codec = attributes & ATTR_COMPRESSION_MASK
        if codec == 0:
            try:
                batch, _ = decode_batch(data, pos)
            except SegmentError as exc:
                raise BatchRejected(CORRUPT_MESSAGE, str(exc)) from None
            section = data[pos + _HEADER.size : end]
        elif codec == 1:
            if crc32c(data[pos + _ATTRIBUTES_OFFSET : end]) != crc:
                raise BatchRejected(CORRUPT_MESSAGE, f"CRC mismatch in the batch at byte {pos}")
            batch, section = _inflate_gzip(data[pos:end])
        else:
            raise BatchRejected(
                UNSUPPORTED_COMPRESSION_TYPE,
                f"compression {COMPRESSION_CODECS.get(codec, codec)} is not supported (none and gzip are)",
            )
        out.append((batch, section))
        pos = end
    return out


def _inflate_gzip(raw: bytes) -> tuple[RecordBatch, bytes]:
    fields = list(_HEADER.unpack_from(raw, 0))
    try:
        records = zlib.decompress(raw[_HEADER.size :], wbits=31)
    except zlib.error as exc:
        raise BatchRejected(CORRUPT_MESSAGE, f"bad gzip data: {exc}") from None
    fields[5] &= ~ATTR_COMPRESSION_MASK
    tail = struct.pack(">hiqqqhii", *fields[5:]) + records
    fields[1] = len(tail) + 4 + 4 + 1  # leader epoch, magic, crc
    fields[4] = crc32c(tail)
    plain = struct.pack(">qiibI", *fields[:5]) + tail
    try:
        return decode_batch(plain, 0)[0], records
    except SegmentError as exc:
        raise BatchRejected(CORRUPT_MESSAGE, str(exc)) from None


def model_payload(batch: RecordBatch, section: bytes) -> bytes:
    """The Kafka-records payload a produced batch is kept as."""
    return kafka_payload(batch.base_timestamp, len(batch.records), section)


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


def to_wire(batch: Batch) -> bytes:
    """A model batch as Kafka RecordBatch v2 bytes, CRC32C included."""
    attributes = (ATTR_TRANSACTIONAL if batch.is_transactional else 0) | (ATTR_CONTROL if batch.is_control else 0)
    parts = kafka_payload_parts(batch.payload)
    if parts is not None:
        base_timestamp, count, section = parts
        tail = _TAIL.pack(attributes, batch.last_offset - batch.base_offset, base_timestamp, batch.timestamp,
                          batch.producer_id, batch.producer_epoch, batch.base_sequence, count)
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
