"""The model's record payload formats, and control record bodies.

A model batch's payload is a msgpack array of ``[offset_delta, key, value]`` records, or (for
batches Kafka clients produced through the model's Kafka listener) a Kafka-records payload:
a 0x00 marker, the batch's base timestamp (int64), its record count (int32) and the v2 record
section as the client sent it, headers and per-record timestamps included. A msgpack payload
starts with an array byte, never 0x00. Payloads are opaque to the ports (mirrors copy them byte
for byte); only the model decodes them, to compact by key and to let demos read values back.
Control batches hold one record whose key is Kafka's control key (version int16, type int16)
and whose value is the marker body.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence

import msgspec

from coordinator.ports import AbortedTransaction, Batch, ClusterPort, ControlType, IsolationLevel, TopicPartition

Record = tuple[int, bytes | None, bytes | None]

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(list[tuple[int, bytes | None, bytes | None]])

MIRROR_PID_RESET_VERSION = 0


def encode_records(records: Iterable[Record]) -> bytes:
    """Records as ``(offset_delta, key, value)`` to payload bytes."""
    return _encoder.encode([list(r) for r in records])


KAFKA_PAYLOAD_MARKER = 0
_KAFKA_PREFIX = struct.Struct(">bqi")


def kafka_payload(base_timestamp: int, record_count: int, record_section: bytes) -> bytes:
    """A Kafka-records payload: marker, base timestamp, record count, the v2 record section."""
    return _KAFKA_PREFIX.pack(KAFKA_PAYLOAD_MARKER, base_timestamp, record_count) + record_section


def kafka_payload_parts(payload: bytes) -> tuple[int, int, memoryview] | None:
    """(base timestamp, record count, record section) of a Kafka-records payload, None for msgpack."""
    if len(payload) < _KAFKA_PREFIX.size or payload[0] != KAFKA_PAYLOAD_MARKER:
        return None
    _, base_timestamp, count = _KAFKA_PREFIX.unpack_from(payload, 0)
    return base_timestamp, count, memoryview(payload)[_KAFKA_PREFIX.size :]


def decode_records(payload: bytes) -> list[Record]:
    """Payload bytes back to records; raises msgspec.DecodeError for a foreign payload."""
    parts = kafka_payload_parts(payload)
    if parts is None:
        return _decoder.decode(payload)
    from records.segments import SegmentError, decode_record_section

    try:
        return [(r.offset_delta, r.key, r.value) for r in decode_record_section(bytes(parts[2]), parts[1])]
    except SegmentError as exc:
        raise msgspec.DecodeError(f"bad Kafka-records payload: {exc}") from None


def payload_keeping(payload: bytes, survivors: list[Record]) -> bytes:
    """The payload with only ``survivors`` (a subset of its decoded records) left, in its own format:
    a Kafka-records payload keeps the survivors' headers and timestamps."""
    parts = kafka_payload_parts(payload)
    if parts is None:
        return encode_records(survivors)
    from records.segments import decode_record_section, encode_record_section

    base_timestamp, count, section = parts
    keep = {r[0] for r in survivors}
    kept = [r for r in decode_record_section(bytes(section), count) if r.offset_delta in keep]
    return kafka_payload(base_timestamp, len(kept), encode_record_section(kept))


def keyed_payload(pairs: Sequence[tuple[bytes | None, bytes | None]]) -> bytes:
    """Consecutive key/value pairs as records with offset deltas 0..n-1."""
    return encode_records((i, k, v) for i, (k, v) in enumerate(pairs))


def control_key(control_type: ControlType) -> bytes:
    """Kafka's control record key: version 0 and the control type, both int16."""
    return struct.pack(">hh", 0, int(control_type))


def end_txn_marker_value(coordinator_epoch: int = 0) -> bytes:
    """EndTransactionMarker value: version int16 0, coordinator epoch int32."""
    return struct.pack(">hi", 0, coordinator_epoch)


def mirror_pid_reset_value(source_cluster_id: str) -> bytes:
    """MirrorPidResetRecord v0 value: Version int16, SourceClusterId as a compact string, no tags."""
    raw = source_cluster_id.encode()
    return struct.pack(">h", MIRROR_PID_RESET_VERSION) + _uvarint(len(raw) + 1) + raw + b"\x00"


def decode_mirror_pid_reset(value: bytes) -> tuple[int, str]:
    """(version, source cluster id) from a MirrorPidResetRecord value."""
    (version,) = struct.unpack_from(">h", value, 0)
    length, pos = _read_uvarint(value, 2)
    return version, value[pos : pos + length - 1].decode()


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
