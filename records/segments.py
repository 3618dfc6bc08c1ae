"""Kafka log segments: RecordBatch v2 (magic 2) encoding, decoding and scanning.

A segment file is a plain concatenation of record batches. Each v2 batch is a
61-byte header followed by varint-framed records (Kafka's ``DefaultRecordBatch``)::

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8
    | crc uint32 | attributes int16 | lastOffsetDelta int32 | baseTimestamp int64
    | maxTimestamp int64 | producerId int64 | producerEpoch int16 | baseSequence int32
    | recordsCount int32 | records...

``batchLength`` counts the bytes after itself; the CRC32C covers ``attributes``
through the end of the batch. Encoding writes uncompressed batches only; decoding reads
compressed ones (gzip, snappy, lz4, zstd) when asked to (``decompress=True``), and
:func:`compress_records` compresses a record section for a caller that keeps a batch's codec.

Every decoding problem is a :class:`SegmentError` (a ``ValueError``) carrying the
byte ``position`` from the start of the buffer, so a reader can report exactly where
a segment went bad and still show every good batch before it (:func:`iter_segment`).
"""

from __future__ import annotations

import enum
import gzip
import os
import struct
import zlib
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar

import msgspec
from crc32c import crc32c

from records.codec import CodecError, MessageCodec
from records.javatext import java_utf8
from records.registry import default_schemas
from records.varint import (
    VarintError,
    read_varint,
    read_varlong,
    write_varint,
    write_varlong,
)

__all__ = [
    "ATTR_COMPRESSION_MASK",
    "ATTR_CONTROL",
    "ATTR_DELETE_HORIZON",
    "ATTR_TIMESTAMP_TYPE",
    "ATTR_TRANSACTIONAL",
    "COMPRESSION_CODECS",
    "CorruptBatchError",
    "ControlRecordError",
    "ControlType",
    "EncodeError",
    "EndTxnMarker",
    "Header",
    "LOG_OVERHEAD",
    "MIRROR_PID_RESET_VERSION",
    "MirrorPidReset",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "RECORD_BATCH_OVERHEAD",
    "Record",
    "RecordBatch",
    "ScannedBatch",
    "SegmentScan",
    "SegmentError",
    "TruncatedBatchError",
    "UnsupportedBatchError",
    "abort_marker_batch",
    "build_batch",
    "commit_marker_batch",
    "control_key",
    "control_type",
    "decode_batch",
    "decode_record_section",
    "encode_record_section",
    "decode_segment",
    "compress_records",
    "decompress_records",
    "encode_batch",
    "encode_end_txn_marker",
    "encode_mirror_pid_reset",
    "encode_segment",
    "iter_segment",
    "mirror_pid_reset_batch",
    "parse_end_txn_marker",
    "parse_mirror_pid_reset",
    "read_segment",
    "write_segment",
]

# --- wire layout -------------------------------------------------------------

LOG_OVERHEAD = 12  # baseOffset + batchLength: the frame shared by every magic
RECORD_BATCH_OVERHEAD = 61  # full v2 header, records excluded
_HEADER_UP_TO_MAGIC = 17  # enough to learn the length and the magic of any batch
_MAGIC_OFFSET = 16
_CRC_OFFSET = 17
_ATTRIBUTES_OFFSET = 21  # the CRC covers from here to the end of the batch
_MIN_BATCH_LENGTH = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD  # 49: an empty batch
# Legacy (magic 0/1) message: crc, magic, attributes, [timestamp], key len, value len.
_LEGACY_MIN_SIZE = {0: 14, 1: 22}

# Header split where the CRC starts, so encoding can checksum the tail first.
_PREFIX = struct.Struct(">qiibI")  # baseOffset .. crc (21 bytes)
_TAIL = struct.Struct(">hiqqqhii")  # attributes .. recordsCount (40 bytes)
_HEADER = struct.Struct(">qiibIhiqqqhii")  # all 61 bytes, for decoding
_UP_TO_MAGIC = struct.Struct(">qiib")
_INT16 = struct.Struct(">h")
_INT16_PAIR = struct.Struct(">hh")
_END_TXN_VALUE = struct.Struct(">hi")
_UINT32 = struct.Struct(">I")

# Attribute bits (Kafka's DefaultRecordBatch).
ATTR_COMPRESSION_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08  # set: LOG_APPEND_TIME, clear: CREATE_TIME
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40  # base_timestamp holds the delete horizon (KIP-534)

COMPRESSION_CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1


# --- errors ------------------------------------------------------------------


class SegmentError(ValueError):
    """A segment or batch that cannot be read or written.

    ``position`` is the byte offset where the problem was found, counted from the
    start of the buffer handed to the decoder (the segment start for
    :func:`iter_segment`); ``batch_position`` is where the enclosing batch starts,
    which is where a log recovery would truncate.
    """

    def __init__(self, what: str, position: int, detail: str = "", batch_position: int | None = None) -> None:
        message = f"{what} at byte {position}"
        if detail:
            message += f": {detail}"
        super().__init__(message)
        self.what = what
        self.detail = detail
        self.position = position
        self.batch_position = position if batch_position is None else batch_position


class TruncatedBatchError(SegmentError):
    """The buffer ends inside a batch (typical of a crash mid-append)."""


class CorruptBatchError(SegmentError):
    """Bytes that are not a valid batch: bad length, magic, CRC or record framing."""


class UnsupportedBatchError(SegmentError):
    """A well-framed batch this module does not decode (magic 0/1, or compressed).

    Its frame is intact, so a scanner may skip to ``next_position`` and go on.
    """

    def __init__(self, what: str, position: int, detail: str, next_position: int) -> None:
        super().__init__(what, position, detail)
        self.next_position = next_position


class EncodeError(SegmentError):
    """A batch that cannot be encoded; ``position`` is where it would start in the output."""


class ControlRecordError(SegmentError):
    """A control record key or value that does not parse; ``position`` is within that key or value."""


# --- data model --------------------------------------------------------------


class Header(msgspec.Struct, frozen=True, gc=False):
    key: str
    value: bytes | None


class Record(msgspec.Struct, frozen=True, gc=False):
    """One record of a v2 batch; offset and timestamp are deltas from the batch's bases."""

    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    attributes: int = 0  # int8, unused by Kafka but kept for exact round-trips


_STORED = "_stored_length_and_crc"  # a decoded batch's (batchLength, crc) as read; not a field


class RecordBatch(msgspec.Struct, frozen=True, dict=True):
    """A v2 record batch. ``magic``, ``batch_length`` and ``crc`` are derived.

    ``crc`` and ``batch_length`` are not fields, so a batch built in memory equals the
    same batch read back from disk. For a batch built in memory they are computed from
    its encoding; a decoded batch keeps the ones it was read with (verified by
    :func:`decode_batch`), since a valid batch need not encode its varints canonically
    and a re-encoding would then be shorter.
    ``last_offset_delta`` is a real field: compaction can remove the last records
    of a batch but keeps its offset range (and may leave a batch with no records).
    """

    magic: ClassVar[int] = 2

    base_offset: int
    partition_leader_epoch: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    base_sequence: int = NO_SEQUENCE
    records: tuple[Record, ...] = ()

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & ATTR_COMPRESSION_MASK

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & ATTR_TIMESTAMP_TYPE)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & ATTR_DELETE_HORIZON)

    @property
    def delete_horizon_ms(self) -> int | None:
        return self.base_timestamp if self.attributes & ATTR_DELETE_HORIZON else None

    @property
    def batch_length(self) -> int:
        """The on-disk batchLength field: bytes after baseOffset and batchLength."""
        stored = self.__dict__.get(_STORED)
        if stored is not None:
            return stored[0]
        return _MIN_BATCH_LENGTH + len(_encode_records(self.records))

    @property
    def size_in_bytes(self) -> int:
        return LOG_OVERHEAD + self.batch_length

    @property
    def crc(self) -> int:
        """The stored CRC32C of attributes through the end, or the one encode_batch writes."""
        stored = self.__dict__.get(_STORED)
        if stored is not None:
            return stored[1]
        (crc,) = _UINT32.unpack_from(encode_batch(self), _CRC_OFFSET)
        return crc

    def offset_of(self, record: Record) -> int:
        return self.base_offset + record.offset_delta

    def timestamp_of(self, record: Record) -> int:
        # With LOG_APPEND_TIME the broker stamps every record with maxTimestamp.
        if self.attributes & ATTR_TIMESTAMP_TYPE:
            return self.max_timestamp
        return self.base_timestamp + record.timestamp_delta


def build_batch(
    records: Iterable[Record],
    *,
    base_offset: int,
    base_timestamp: int,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    attributes: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
) -> RecordBatch:
    """A batch whose last_offset_delta and max_timestamp are derived from its records, as Kafka's builder does."""
    recs = tuple(records)
    last_offset_delta = max((r.offset_delta for r in recs), default=0)
    max_timestamp = base_timestamp + max((r.timestamp_delta for r in recs), default=0)
    return RecordBatch(
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        attributes=attributes,
        last_offset_delta=last_offset_delta,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        records=recs,
    )


# --- encoding ----------------------------------------------------------------


def _write_nullable_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        write_varint(out, -1)
    else:
        write_varint(out, len(data))
        out += data


def _encode_records(records: tuple[Record, ...]) -> bytearray:
    out = bytearray()
    body = bytearray()
    for r in records:
        body.clear()
        if not -128 <= r.attributes <= 127:
            raise ValueError(f"record attributes {r.attributes} do not fit an int8")
        body.append(r.attributes & 0xFF)
        write_varlong(body, r.timestamp_delta)
        write_varint(body, r.offset_delta)
        _write_nullable_bytes(body, r.key)
        _write_nullable_bytes(body, r.value)
        write_varint(body, len(r.headers))
        for h in r.headers:
            key = h.key.encode()
            write_varint(body, len(key))
            body += key
            _write_nullable_bytes(body, h.value)
        write_varint(out, len(body))
        out += body
    return out


def encode_batch(batch: RecordBatch) -> bytes:
    """The batch's exact on-disk bytes, with batchLength and CRC32C computed."""
    codec = batch.attributes & ATTR_COMPRESSION_MASK
    if codec:
        raise EncodeError(
            "unsupported compression",
            0,
            f"batch at offset {batch.base_offset} asks for codec {_codec_name(codec)}; only none (0) is supported",
        )
    try:
        records = _encode_records(batch.records)
        tail = _TAIL.pack(
            batch.attributes,
            batch.last_offset_delta,
            batch.base_timestamp,
            batch.max_timestamp,
            batch.producer_id,
            batch.producer_epoch,
            batch.base_sequence,
            len(batch.records),
        )
        crc = crc32c(records, crc32c(tail))
        prefix = _PREFIX.pack(
            batch.base_offset,
            _MIN_BATCH_LENGTH + len(records),
            batch.partition_leader_epoch,
            2,
            crc,
        )
    except (struct.error, ValueError, TypeError, AttributeError) as e:
        raise EncodeError("cannot encode batch", 0, f"batch at offset {batch.base_offset}: {e}") from e
    return b"".join((prefix, tail, records))


def encode_segment(batches: Iterable[RecordBatch]) -> bytes:
    out = bytearray()
    for batch in batches:
        try:
            out += encode_batch(batch)
        except EncodeError as e:
            raise EncodeError(e.what, len(out), e.detail) from e
    return bytes(out)


def write_segment(path: str | os.PathLike[str], batches: Iterable[RecordBatch]) -> int:
    """Write the batches as a segment file; returns the number of bytes written."""
    data = encode_segment(batches)  # encode first so a bad batch leaves no partial file
    with open(path, "wb") as f:
        f.write(data)
    return len(data)


# --- decoding ----------------------------------------------------------------


def _codec_name(codec: int) -> str:
    return f"{COMPRESSION_CODECS.get(codec, 'unknown')} ({codec})"


_XERIAL_MAGIC = b"\x82SNAPPY\x00"  # snappy-java's stream header, which Kafka's producer writes
_XERIAL_HEADER = 16  # magic, version int32, compatible version int32


def decompress_records(codec: int, data: bytes) -> bytes:
    """The records section of a compressed batch, decompressed (Kafka's codecs 1-4).

    Raises ValueError with the reason (unknown codec, missing library, corrupt data).
    """
    if codec == 1:
        try:
            return zlib.decompress(data, 16 + zlib.MAX_WBITS)
        except zlib.error as e:
            raise ValueError(f"gzip: {e}") from None
    if codec not in (2, 3, 4):
        raise ValueError(f"unknown compression codec {codec}")
    try:
        import cramjam
    except ImportError:
        raise ValueError(f"decompressing {_codec_name(codec)} needs the cramjam package (pip install cramjam)") from None
    try:
        if codec == 2:
            if not data.startswith(_XERIAL_MAGIC):
                return bytes(cramjam.snappy.decompress_raw(data))
            out = bytearray()
            pos = _XERIAL_HEADER
            while pos < len(data):
                if pos + 4 > len(data):
                    raise ValueError("truncated snappy block length")
                (size,) = _UINT32.unpack_from(data, pos)
                pos += 4
                if pos + size > len(data):
                    raise ValueError(f"snappy block of {size} bytes runs past the batch")
                out += bytes(cramjam.snappy.decompress_raw(data[pos : pos + size]))
                pos += size
            return bytes(out)
        if codec == 3:
            return bytes(cramjam.lz4.decompress(data))
        return bytes(cramjam.zstd.decompress(data))
    except cramjam.DecompressionError as e:
        raise ValueError(f"{COMPRESSION_CODECS[codec]}: {e}") from None


def compress_records(codec: int, data: bytes) -> bytes:
    """A record section compressed with Kafka's codec 1-4 (snappy unframed, lz4 and zstd as frames:
    what Kafka's and librdkafka's readers take). The model's compaction uses it."""
    if codec == 1:
        return gzip.compress(data, mtime=0)
    if codec not in (2, 3, 4):
        raise ValueError(f"unknown compression codec {codec}")
    import cramjam

    if codec == 2:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == 3:
        # Independent blocks: Kafka's KafkaLZ4BlockInputStream decompresses each block alone.
        lz4 = cramjam.lz4.Compressor(block_linked=False)
        lz4.compress(data)
        return bytes(lz4.finish())
    return bytes(cramjam.zstd.compress(data))


def decode_batch(buf: bytes | bytearray | memoryview, pos: int = 0, decompress: bool = False) -> tuple[RecordBatch, int]:
    """Decode the batch starting at ``pos``; returns it and the position after it.

    Checks, in order: enough bytes for the header, the magic, the length, that the
    whole batch is present, the CRC32C, the compression codec, then every record.
    A compressed batch is an :class:`UnsupportedBatchError` unless ``decompress``: then its
    records are decompressed and decoded (the batch keeps its stored length, CRC and
    attributes, so it is not re-encodable as is).
    """
    if not isinstance(buf, bytes):
        buf = bytes(buf)  # bytes slicing is the fast path for keys and values
    return _decode_batch(buf, pos, decompress)


def _decode_batch(buf: bytes, pos: int, decompress: bool = False) -> tuple[RecordBatch, int]:
    remaining = len(buf) - pos
    if remaining < _HEADER_UP_TO_MAGIC:
        raise TruncatedBatchError(
            "truncated batch header",
            pos,
            f"need {_HEADER_UP_TO_MAGIC} bytes for offset, length, leader epoch and magic, {remaining} remain",
        )
    base_offset, length, leader_epoch, magic = _UP_TO_MAGIC.unpack_from(buf, pos)
    if magic in _LEGACY_MIN_SIZE:
        _check_legacy(buf, pos, base_offset, length, magic)  # always raises
    if magic != 2:
        raise CorruptBatchError("bad magic", pos, f"magic byte {magic} at byte {pos + _MAGIC_OFFSET}, expected 2")
    if length < _MIN_BATCH_LENGTH:
        raise CorruptBatchError(
            "bad batch length", pos, f"header says {length} bytes, a v2 batch needs at least {_MIN_BATCH_LENGTH}"
        )
    end = pos + LOG_OVERHEAD + length
    if end > len(buf):
        raise TruncatedBatchError(
            "truncated batch", pos, f"header says {LOG_OVERHEAD + length} bytes, {remaining} remain"
        )
    (
        _,
        _,
        _,
        _,
        stored_crc,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    ) = _HEADER.unpack_from(buf, pos)
    computed = crc32c(buf[pos + _ATTRIBUTES_OFFSET : end])
    if computed != stored_crc:
        raise CorruptBatchError("CRC mismatch", pos, f"stored 0x{stored_crc:08x}, computed 0x{computed:08x}")
    codec = attributes & ATTR_COMPRESSION_MASK
    if codec and decompress:
        try:
            inner = decompress_records(codec, buf[pos + RECORD_BATCH_OVERHEAD : end])
        except ValueError as e:
            raise UnsupportedBatchError(
                "undecompressable batch", pos, f"batch at offset {base_offset} ({_codec_name(codec)}): {e}", end
            ) from None
        if count < 0:
            raise CorruptBatchError("bad record count", pos, f"batch declares {count} records")
        try:
            records = _decode_records(inner, 0, len(inner), count, 0)
        except SegmentError as e:
            # Positions inside decompressed bytes mean nothing in the file: report the batch.
            raise CorruptBatchError(e.what, pos, f"in the decompressed records of the batch at offset {base_offset}: {e.detail}") from None
    elif codec:
        raise UnsupportedBatchError(
            "unsupported compression",
            pos,
            f"batch at offset {base_offset} uses codec {_codec_name(codec)}; only none (0) is supported",
            end,
        )
    else:
        if count < 0:
            raise CorruptBatchError("bad record count", pos, f"batch declares {count} records")
        records = _decode_records(buf, pos + RECORD_BATCH_OVERHEAD, end, count, pos)
    batch = RecordBatch(
        base_offset=base_offset,
        partition_leader_epoch=leader_epoch,
        attributes=attributes,
        last_offset_delta=last_offset_delta,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        records=records,
    )
    msgspec.structs.force_setattr(batch, _STORED, (length, stored_crc))
    return batch, end


def _check_legacy(buf: bytes, pos: int, base_offset: int, size: int, magic: int) -> None:
    """Raise for a magic 0/1 message: unsupported if intact, else truncated or corrupt."""
    remaining = len(buf) - pos
    if size < _LEGACY_MIN_SIZE[magic]:
        raise CorruptBatchError(
            "bad batch length",
            pos,
            f"magic {magic} message says {size} bytes, it needs at least {_LEGACY_MIN_SIZE[magic]}",
        )
    end = pos + LOG_OVERHEAD + size
    if end > len(buf):
        raise TruncatedBatchError("truncated batch", pos, f"header says {LOG_OVERHEAD + size} bytes, {remaining} remain")
    # Legacy messages carry a CRC32 (not C) over magic onwards: check it, so that
    # skipping the message is only offered when its frame is trustworthy.
    (stored,) = _UINT32.unpack_from(buf, pos + LOG_OVERHEAD)
    computed = zlib.crc32(buf[pos + _MAGIC_OFFSET : end])
    if stored != computed:
        raise CorruptBatchError("CRC mismatch", pos, f"magic {magic} message: stored 0x{stored:08x}, computed 0x{computed:08x}")
    raise UnsupportedBatchError(
        "unsupported magic",
        pos,
        f"magic {magic} (pre-0.11 message format) at offset {base_offset}, {LOG_OVERHEAD + size} bytes; only magic 2 is supported",
        end,
    )


def _decode_records(
    buf: bytes, pos: int, end: int, count: int, batch_pos: int, records: list[Record] | None = None
) -> tuple[Record, ...]:
    """The ``count`` records in ``buf[pos:end]``; ``records``, if given, keeps those read before an error."""
    if records is None:
        records = []
    append = records.append
    index = 0
    start = pos
    try:
        for index in range(count):
            start = pos
            if pos >= end:
                raise CorruptBatchError(
                    "record count mismatch",
                    pos,
                    f"batch declares {count} records but holds only {index}",
                    batch_pos,
                )
            length, pos = read_varint(buf, pos)
            body = pos
            rec_end = pos + length
            if length <= 0 or rec_end > end:
                raise CorruptBatchError(
                    "bad record length",
                    start,
                    f"record {index} declares {length} bytes, {end - body} remain in the batch at byte {batch_pos}",
                    batch_pos,
                )
            attributes = buf[pos]
            if attributes > 127:
                attributes -= 256
            timestamp_delta, pos = read_varlong(buf, pos + 1)
            offset_delta, pos = read_varint(buf, pos)
            key, pos = _read_nullable(buf, pos, rec_end, "key", start, index, length, batch_pos)
            value, pos = _read_nullable(buf, pos, rec_end, "value", start, index, length, batch_pos)
            header_count, pos = read_varint(buf, pos)
            if header_count < 0:
                raise CorruptBatchError(
                    "bad header count", start, f"record {index} declares {header_count} headers", batch_pos
                )
            headers: tuple[Header, ...] = ()
            if header_count:
                hs = []
                for _ in range(header_count):
                    if pos >= rec_end:
                        _overrun(start, index, length, "headers", batch_pos)
                    key_len, pos = read_varint(buf, pos)
                    if key_len < 0:
                        raise CorruptBatchError(
                            "bad header key", start, f"record {index} has a header key of length {key_len}", batch_pos
                        )
                    if pos + key_len > rec_end:
                        _overrun(start, index, length, "header key", batch_pos)
                    try:
                        hkey = buf[pos : pos + key_len].decode()
                    except UnicodeDecodeError:
                        # Kafka reads header keys with Java's decoder: bad bytes become U+FFFD, the batch stays readable.
                        hkey = java_utf8(buf[pos : pos + key_len])
                    pos += key_len
                    hvalue, pos = _read_nullable(buf, pos, rec_end, "header value", start, index, length, batch_pos)
                    hs.append(Header(hkey, hvalue))
                headers = tuple(hs)
            if pos != rec_end:
                if pos < rec_end:
                    detail = f"record {index} declares {length} bytes but its fields take {pos - body}"
                    raise CorruptBatchError("record length mismatch", start, detail, batch_pos)
                _overrun(start, index, length, "fields", batch_pos)
            append(Record(offset_delta, timestamp_delta, key, value, headers, attributes))
    except VarintError as e:
        raise CorruptBatchError(
            "malformed record", e.position, f"record {index} of the batch at byte {batch_pos}: {e}", batch_pos
        ) from None
    if pos != end:
        raise CorruptBatchError(
            "record count mismatch",
            pos,
            f"batch declares {count} records but {end - pos} bytes remain after them",
            batch_pos,
        )
    return tuple(records)


def decode_record_section(buf: bytes, count: int) -> tuple[Record, ...]:
    """The ``count`` records of an uncompressed v2 batch's record section (the bytes after its header)."""
    return _decode_records(bytes(buf), 0, len(buf), count, 0)


def encode_record_section(records: Iterable[Record]) -> bytes:
    """The record section of an uncompressed v2 batch holding ``records``."""
    return bytes(_encode_records(tuple(records)))


def _overrun(start: int, index: int, length: int, what: str, batch_pos: int) -> None:
    raise CorruptBatchError(
        "record length mismatch",
        start,
        f"record {index} declares {length} bytes but its {what} run past them",
        batch_pos,
    )


def _read_nullable(
    buf: bytes, pos: int, limit: int, what: str, start: int, index: int, length: int, batch_pos: int
) -> tuple[bytes | None, int]:
    size, pos = read_varint(buf, pos)
    if size < 0:
        if size == -1:
            return None, pos
        raise CorruptBatchError("bad length", start, f"record {index} has a {what} of length {size}", batch_pos)
    new_pos = pos + size
    if new_pos > limit:
        _overrun(start, index, length, what, batch_pos)
    return buf[pos:new_pos], new_pos


# --- segments ----------------------------------------------------------------


def iter_segment(
    data: bytes | bytearray | memoryview, start: int = 0, decompress: bool = False
) -> Iterator[RecordBatch | SegmentError]:
    """Every batch of a segment, in order, with errors yielded in place rather than raised.

    An :class:`UnsupportedBatchError` (magic 0/1, compressed without ``decompress``) is
    yielded and the scan goes on past it, since its frame is intact. Any other error is
    yielded last: nothing after a corrupt or truncated batch can be trusted.
    """
    if not isinstance(data, bytes):
        data = bytes(data)
    pos = start
    n = len(data)
    while pos < n:
        try:
            batch, pos = _decode_batch(data, pos, decompress)
        except UnsupportedBatchError as e:
            yield e
            pos = e.next_position
            continue
        except SegmentError as e:
            yield e
            return
        yield batch


class ScannedBatch(msgspec.Struct, frozen=True):
    """One batch as ``kafka-dump-log`` sees it: framed by its length, whatever its content.

    ``batch`` holds the header as stored (its records those that decoded, in order);
    ``valid`` is Kafka's ``isValid`` (the stored CRC32C matches); ``error`` is the damage the
    CRC does not show (a record that does not parse, a codec that fails, a magic byte other
    than 2, which the CRC does not cover), else None.
    """

    position: int
    magic: int
    count: int
    valid: bool
    batch: RecordBatch
    error: SegmentError | None = None

    @property
    def size_in_bytes(self) -> int:
        return self.batch.size_in_bytes


class SegmentScan:
    """The batches of a segment as Kafka's ``FileRecords.batches()`` frames them: a batch is
    ``LOG_OVERHEAD + batchLength`` bytes, read whether its CRC matches or not, so that one damaged
    batch does not hide the rest. After iterating, ``valid_bytes`` counts the bytes framed as
    batches and ``stop`` says why the scan ended early (None at the end of the data); the bytes
    after ``valid_bytes`` are what Kafka reports as "invalid bytes at the end".
    """

    def __init__(self, data: bytes | bytearray | memoryview, max_bytes: int | None = None) -> None:
        self.data = bytes(data) if max_bytes is None else bytes(data[:max_bytes])
        self.valid_bytes = 0
        self.stop: SegmentError | None = None

    def __iter__(self) -> Iterator[ScannedBatch | UnsupportedBatchError]:
        buf = self.data
        n = len(buf)
        pos = 0
        # Kafka's FileLogInputStream.nextBatch: stop when no frame up to the magic byte fits.
        while pos < n - _HEADER_UP_TO_MAGIC:
            base_offset, length, _, magic = _UP_TO_MAGIC.unpack_from(buf, pos)
            if length < _LEGACY_MIN_SIZE[0]:
                self.stop = CorruptBatchError(
                    "bad batch length", pos, f"header says {length} bytes, less than the minimum record overhead (14)"
                )
                return
            end = pos + LOG_OVERHEAD + length
            if end > n:
                self.stop = TruncatedBatchError("truncated batch", pos, f"header says {LOG_OVERHEAD + length} bytes, {n - pos} remain")
                return
            if magic in _LEGACY_MIN_SIZE:
                try:
                    _check_legacy(buf, pos, base_offset, length, magic)
                except UnsupportedBatchError as e:
                    yield e
                except SegmentError as e:
                    yield UnsupportedBatchError(e.what, pos, e.detail, end)
            elif length < _MIN_BATCH_LENGTH:
                self.stop = CorruptBatchError(
                    "bad batch length", pos, f"header says {length} bytes, a v2 batch needs at least {_MIN_BATCH_LENGTH}"
                )
                return
            else:
                yield _scan_batch(buf, pos, end, magic)
            pos = end
            self.valid_bytes = pos
        if pos < n:
            self.stop = TruncatedBatchError(
                "truncated batch header", pos, f"need more than {_HEADER_UP_TO_MAGIC} bytes for a batch, {n - pos} remain"
            )


def _scan_batch(buf: bytes, pos: int, end: int, magic: int) -> ScannedBatch:
    (base_offset, length, leader_epoch, _, stored_crc, attributes, last_offset_delta, base_timestamp,
     max_timestamp, producer_id, producer_epoch, base_sequence, count) = _HEADER.unpack_from(buf, pos)  # fmt: skip
    valid = crc32c(buf[pos + _ATTRIBUTES_OFFSET : end]) == stored_crc
    records: list[Record] = []
    error: SegmentError | None = None
    codec = attributes & ATTR_COMPRESSION_MASK
    try:
        if count < 0:
            raise CorruptBatchError("bad record count", pos, f"batch declares {count} records")
        if codec:
            try:
                inner = decompress_records(codec, buf[pos + RECORD_BATCH_OVERHEAD : end])
            except ValueError as e:
                raise CorruptBatchError("undecompressable batch", pos, f"batch at offset {base_offset} ({_codec_name(codec)}): {e}") from None
            try:
                _decode_records(inner, 0, len(inner), count, 0, records)
            except SegmentError as e:
                raise CorruptBatchError(e.what, pos, f"in the decompressed records of the batch at offset {base_offset}: {e.detail}") from None
        else:
            _decode_records(buf, pos + RECORD_BATCH_OVERHEAD, end, count, pos, records)
    except SegmentError as e:
        error = e
    batch = RecordBatch(
        base_offset=base_offset,
        partition_leader_epoch=leader_epoch,
        attributes=attributes,
        last_offset_delta=last_offset_delta,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        records=tuple(records),
    )
    msgspec.structs.force_setattr(batch, _STORED, (length, stored_crc))
    if magic != 2 and error is None:
        error = CorruptBatchError("bad magic", pos, f"magic byte {magic} at byte {pos + _MAGIC_OFFSET}, expected 2")
    return ScannedBatch(pos, magic, count, valid, batch, error)


def decode_segment(data: bytes | bytearray | memoryview) -> list[RecordBatch]:
    """Every batch of a segment; raises the first SegmentError (strict)."""
    batches = []
    for item in iter_segment(data):
        if isinstance(item, SegmentError):
            raise item
        batches.append(item)
    return batches


def read_segment(path: str | os.PathLike[str]) -> list[RecordBatch]:
    """Every batch of a segment file; raises the first SegmentError (use iter_segment to salvage)."""
    with open(path, "rb") as f:
        return decode_segment(f.read())


# --- control records -----------------------------------------------------------


class ControlType(enum.IntEnum):
    """Control record types (Kafka's ControlRecordType, plus KIP-1279's MIRROR_PID_RESET)."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6
    MIRROR_PID_RESET = 7


_CONTROL_KEY_VERSION = 0
_END_TXN_MARKER_VERSION = 0
MIRROR_PID_RESET_VERSION = 0


def control_key(ctype: ControlType | int, version: int = _CONTROL_KEY_VERSION) -> bytes:
    """A control record key: version int16, type int16."""
    return _INT16_PAIR.pack(version, ctype)


def control_type(record: Record) -> ControlType | int:
    """The control type of a control batch's record; an unknown type comes back as its raw int.

    As Kafka does, a newer key version is read as version 0 (the schema may only grow).
    """
    key = record.key
    if key is None or len(key) < 4:
        size = "null" if key is None else f"{len(key)} bytes"
        raise ControlRecordError("bad control key", 0, f"a control record key needs 4 bytes, found {size}")
    version, ctype = _INT16_PAIR.unpack_from(key)
    if version < 0:
        raise ControlRecordError("bad control key", 0, f"negative control key version {version}")
    try:
        return ControlType(ctype)
    except ValueError:
        return ctype


class EndTxnMarker(msgspec.Struct, frozen=True):
    """The value of an ABORT or COMMIT control record."""

    control_type: ControlType
    coordinator_epoch: int
    version: int = _END_TXN_MARKER_VERSION


def encode_end_txn_marker(coordinator_epoch: int, version: int = _END_TXN_MARKER_VERSION) -> bytes:
    return _END_TXN_VALUE.pack(version, coordinator_epoch)


def parse_end_txn_marker(record: Record) -> EndTxnMarker:
    ctype = control_type(record)
    if ctype not in (ControlType.ABORT, ControlType.COMMIT):
        raise ControlRecordError("not an end-transaction marker", 0, f"control type is {ctype!r}")
    value = record.value
    if value is None or len(value) < _END_TXN_VALUE.size:
        size = "null" if value is None else f"{len(value)} bytes"
        raise ControlRecordError("bad end-transaction marker", 0, f"value needs 6 bytes, found {size}")
    version, epoch = _END_TXN_VALUE.unpack_from(value)
    if version < 0:
        raise ControlRecordError("bad end-transaction marker", 0, f"negative version {version}")
    # A newer version may append fields; like Kafka, read the ones we know.
    return EndTxnMarker(ControlType(ctype), epoch, version)


def _pid_reset_codec() -> MessageCodec:
    return default_schemas().codec("MirrorPidResetRecord")


# The value of a MIRROR_PID_RESET control record: the generated MirrorPidResetRecord Struct
# (Version int16, SourceClusterId compact string, tagged fields; flexible from v0).
MirrorPidReset = _pid_reset_codec().cls


def encode_mirror_pid_reset(value: msgspec.Struct) -> bytes:
    return _pid_reset_codec().encode(value, MIRROR_PID_RESET_VERSION)


def parse_mirror_pid_reset(record: Record) -> msgspec.Struct:
    ctype = control_type(record)
    if ctype != ControlType.MIRROR_PID_RESET:
        raise ControlRecordError("not a MIRROR_PID_RESET record", 0, f"control type is {ctype!r}")
    value = record.value
    if value is None:
        raise ControlRecordError("bad MIRROR_PID_RESET value", 0, "value is null")
    try:
        return _pid_reset_codec().decode(value, MIRROR_PID_RESET_VERSION)
    except CodecError as e:
        detail = f"field {e.field}: {e.detail}" if e.field else e.detail
        raise ControlRecordError("bad MIRROR_PID_RESET value", e.position or 0, detail) from None


def _control_batch(
    ctype: ControlType,
    value: bytes,
    *,
    base_offset: int,
    timestamp: int,
    partition_leader_epoch: int,
    producer_id: int,
    producer_epoch: int,
    transactional: bool,
) -> RecordBatch:
    # One record at offset delta 0, as Kafka's MemoryRecordsBuilder.appendControlRecord writes it.
    attributes = ATTR_CONTROL | (ATTR_TRANSACTIONAL if transactional else 0)
    record = Record(offset_delta=0, timestamp_delta=0, key=control_key(ctype), value=value)
    return RecordBatch(
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        attributes=attributes,
        last_offset_delta=0,
        base_timestamp=timestamp,
        max_timestamp=timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
        records=(record,),
    )


def end_txn_marker_batch(
    marker: ControlType,
    *,
    base_offset: int,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp: int,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> RecordBatch:
    """A transactional control batch holding one ABORT or COMMIT marker for the producer."""
    if marker not in (ControlType.ABORT, ControlType.COMMIT):
        raise ValueError(f"an end-transaction marker is ABORT or COMMIT, not {marker!r}")
    return _control_batch(
        marker,
        encode_end_txn_marker(coordinator_epoch),
        base_offset=base_offset,
        timestamp=timestamp,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=True,
    )


def abort_marker_batch(**kwargs: Any) -> RecordBatch:
    """A transactional control batch holding one ABORT marker (see ``end_txn_marker_batch``)."""
    return end_txn_marker_batch(ControlType.ABORT, **kwargs)


def commit_marker_batch(**kwargs: Any) -> RecordBatch:
    """A transactional control batch holding one COMMIT marker (see ``end_txn_marker_batch``)."""
    return end_txn_marker_batch(ControlType.COMMIT, **kwargs)


def mirror_pid_reset_batch(
    *,
    base_offset: int,
    source_cluster_id: str,
    timestamp: int,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> RecordBatch:
    """A non-transactional control batch with no producer holding one MIRROR_PID_RESET record.

    Matches the KIP-1279 prototype's MemoryRecords.withMirrorPidResetRecord: a KRaft-style
    control batch (producer id/epoch/sequence -1, CREATE_TIME).
    """
    return _control_batch(
        ControlType.MIRROR_PID_RESET,
        encode_mirror_pid_reset(MirrorPidReset(source_cluster_id=source_cluster_id)),
        base_offset=base_offset,
        timestamp=timestamp,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=NO_PRODUCER_ID,
        producer_epoch=NO_PRODUCER_EPOCH,
        transactional=False,
    )
