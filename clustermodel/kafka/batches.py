"""Model batches to Kafka RecordBatch v2 bytes and back.

A batch a Kafka client produced keeps its record section as it came (a Kafka-records payload,
clustermodel/records.py): headers, per-record timestamps and offset deltas reach consumers, on
A and, copied by the mirror, on B. Only the header is the broker's: base offset and leader epoch
assigned, the CRC32C computed again. Batches the model wrote itself (its msgpack payload) are
encoded record by record, with the batch timestamp for every record and no headers.

Produced batches are checked as a broker does (CRC32C, magic 2, record count and framing); gzip
is inflated, the other codecs are refused with UNSUPPORTED_COMPRESSION_TYPE.
"""

from __future__ import annotations

import zlib
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
    encode_batch,
)
from records.varint import VarintError, read_varint

from ..records import decode_records, kafka_payload, kafka_payload_parts


class BatchRejected(Exception):
    """A produced batch the broker refuses; ``code`` is the Kafka error code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


CORRUPT_MESSAGE = 2
INVALID_RECORD = 87
UNSUPPORTED_COMPRESSION_TYPE = 76


class ProducedBatch(NamedTuple):
    """A produced v2 batch's header fields and its uncompressed record section."""

    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
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


def decode_produced(data: bytes) -> list[ProducedBatch]:
    """The v2 batches of one partition's produce data: CRC32C checked, gzip inflated, record
    framing checked (``count`` records, each a positive length that fits, nothing left over).

    The records themselves are kept as sent; the model decodes keys and values only when it
    needs them (compaction, demos).
    """
    out: list[ProducedBatch] = []
    pos = 0
    n = len(data)
    while pos < n:
        if n - pos < _HEADER.size:
            raise BatchRejected(CORRUPT_MESSAGE, f"truncated batch header at byte {pos}")
        (_, length, _, magic, crc, attributes, last_delta, base_ts, max_ts, pid, epoch, seq, count) = _HEADER.unpack_from(data, pos)
        end = pos + LOG_OVERHEAD + length
        if magic != 2:
            raise BatchRejected(INVALID_RECORD, f"magic {magic}: only v2 record batches are accepted")
        if end > n or length < _HEADER.size - LOG_OVERHEAD:
            raise BatchRejected(CORRUPT_MESSAGE, f"batch at byte {pos} declares {length} bytes, {n - pos - LOG_OVERHEAD} remain")
        if crc32c(data[pos + _ATTRIBUTES_OFFSET : end]) != crc:
            raise BatchRejected(CORRUPT_MESSAGE, f"CRC mismatch in the batch at byte {pos}")
        codec = attributes & ATTR_COMPRESSION_MASK
        section = data[pos + _HEADER.size : end]
        if codec == 1:
            try:
                section = zlib.decompress(section, wbits=31)
            except zlib.error as exc:
                raise BatchRejected(CORRUPT_MESSAGE, f"bad gzip data: {exc}") from None
            attributes &= ~ATTR_COMPRESSION_MASK
        elif codec:
            raise BatchRejected(
                UNSUPPORTED_COMPRESSION_TYPE,
                f"compression {COMPRESSION_CODECS.get(codec, codec)} is not supported (none and gzip are)",
            )
        if count < 0 or last_delta < count - 1:
            raise BatchRejected(INVALID_RECORD, f"{count} records do not fit last offset delta {last_delta}")
        _check_framing(section, count, pos)
        out.append(ProducedBatch(attributes, last_delta, base_ts, max_ts, pid, epoch, seq, count, section))
        pos = end
    return out


def _check_framing(section: bytes, count: int, batch_pos: int) -> None:
    pos = 0
    n = len(section)
    try:
        for _ in range(count):
            b = section[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                length, pos = read_varint(section, pos)
            if length <= 0:
                raise BatchRejected(CORRUPT_MESSAGE, f"record of length {length} in the batch at byte {batch_pos}")
            pos += length
    except (IndexError, VarintError):
        pos = n + 1
    if pos != n:
        raise BatchRejected(CORRUPT_MESSAGE, f"the batch at byte {batch_pos} does not hold exactly {count} records")


def model_payload(batch: ProducedBatch) -> bytes:
    """The Kafka-records payload a produced batch is kept as."""
    return kafka_payload(batch.base_timestamp, batch.count, batch.section)


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
