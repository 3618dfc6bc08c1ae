"""Kafka's variable-length integers.

Unsigned varints (LEB128) frame compact lengths, tagged fields and KRaft records;
zig-zag varints and varlongs encode the fields of a RecordBatch v2 record.
Readers take ``(buf, pos)`` and return ``(value, new_pos)`` so callers can parse
in place without slicing.
"""

from __future__ import annotations


class VarintError(ValueError):
    """A varint is truncated or longer than its type allows."""

    def __init__(self, message: str, position: int) -> None:
        super().__init__(f"{message} at byte {position}")
        self.position = position


def read_uvarint(buf: bytes | bytearray | memoryview, pos: int, max_bytes: int = 5) -> tuple[int, int]:
    """An unsigned varint of at most ``max_bytes`` bytes (5 for int32, 10 for int64)."""
    start = pos
    end = len(buf)
    result = 0
    shift = 0
    for _ in range(max_bytes):
        if pos >= end:
            raise VarintError("truncated varint", start)
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            if max_bytes == 5 and result > 0xFFFFFFFF:
                raise VarintError("varint overflows 32 bits", start)
            return result, pos
        shift += 7
    raise VarintError(f"varint longer than {max_bytes} bytes", start)


def read_uvarlong(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    return read_uvarint(buf, pos, 10)


def write_uvarint(out: bytearray, value: int) -> None:
    if value < 0:
        raise ValueError(f"unsigned varint cannot hold {value}")
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def uvarint_bytes(value: int) -> bytes:
    out = bytearray()
    write_uvarint(out, value)
    return bytes(out)


def uvarint_size(value: int) -> int:
    size = 1
    while value >= 0x80:
        value >>= 7
        size += 1
    return size


def read_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """A zig-zag signed int32 varint."""
    raw, pos = read_uvarint(buf, pos, 5)
    return (raw >> 1) ^ -(raw & 1), pos


def read_varlong(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """A zig-zag signed int64 varlong."""
    raw, pos = read_uvarint(buf, pos, 10)
    if raw > 0xFFFFFFFFFFFFFFFF:
        raise VarintError("varlong overflows 64 bits", pos)
    return (raw >> 1) ^ -(raw & 1), pos


def write_varint(out: bytearray, value: int) -> None:
    if not -(1 << 31) <= value < (1 << 31):
        raise ValueError(f"varint out of int32 range: {value}")
    write_uvarint(out, ((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def write_varlong(out: bytearray, value: int) -> None:
    if not -(1 << 63) <= value < (1 << 63):
        raise ValueError(f"varlong out of int64 range: {value}")
    write_uvarint(out, ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)
