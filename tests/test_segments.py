"""Tests for records.segments: RecordBatch v2 codec, segment scanning, control batches."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import msgspec
import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from records.segments import (
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    ControlRecordError,
    ControlType,
    CorruptBatchError,
    EncodeError,
    EndTxnMarker,
    Header,
    MirrorPidReset,
    Record,
    RecordBatch,
    SegmentError,
    TruncatedBatchError,
    UnsupportedBatchError,
    abort_marker_batch,
    build_batch,
    commit_marker_batch,
    control_key,
    control_type,
    decode_batch,
    decode_segment,
    encode_batch,
    encode_mirror_pid_reset,
    encode_segment,
    iter_segment,
    mirror_pid_reset_batch,
    parse_end_txn_marker,
    parse_mirror_pid_reset,
    read_segment,
    write_segment,
)
from records.varint import read_uvarint

from reference_data import KRAFT_SEGMENT as VECTOR
BATCH2_POS = 145  # 12-byte frame + 133-byte batchLength of the first batch


@pytest.fixture(scope="module")
def segment() -> bytes:
    data = VECTOR.read_bytes()
    assert len(data) == 311
    return data


def framing(value: bytes) -> tuple[int, int, int]:
    """(frame version, apiKey, version) of a framed KRaft metadata record value."""
    frame, pos = read_uvarint(value, 0)
    api_key, pos = read_uvarint(value, pos)
    version, pos = read_uvarint(value, pos)
    return frame, api_key, version


def frame_batch(tail: bytes, records: bytes, *, base_offset: int = 0, leader_epoch: int = 0, magic: int = 2) -> bytes:
    """Wrap a hand-made tail (attributes..recordsCount) and records with a correct length and CRC32C."""
    body = tail + records
    return struct.pack(">qiibI", base_offset, 9 + len(body), leader_epoch, magic, crc32c(body)) + body


def tail_bytes(count: int, *, attributes: int = 0, last_offset_delta: int = 0) -> bytes:
    return struct.pack(">hiqqqhii", attributes, last_offset_delta, 0, 0, -1, -1, -1, count)


# --- the real KRaft segment ----------------------------------------------------


def test_vector_decodes_to_the_expected_batches(segment: bytes) -> None:
    batches = decode_segment(segment)
    assert len(batches) == 2
    first, second = batches

    # Header fields exactly as stored.
    assert first.base_offset == 1
    assert first.batch_length == 133
    assert first.partition_leader_epoch == 1
    assert first.magic == 2
    assert first.crc == 0x9E9240F0
    assert first.attributes == 0  # the bootstrap batch is neither transactional nor control
    assert not first.is_transactional and not first.is_control
    assert first.last_offset_delta == 3
    assert first.last_offset == 4 and first.next_offset == 5
    assert first.base_timestamp == first.max_timestamp == 1726045943832
    assert (first.producer_id, first.producer_epoch, first.base_sequence) == (-1, -1, -1)

    assert second.base_offset == 34  # offsets 5..33 are not in this file
    assert second.batch_length == 154
    assert second.partition_leader_epoch == 1
    assert second.crc == 0x099CE19B
    assert second.attributes == 0
    assert second.last_offset_delta == 1 and second.next_offset == 36
    assert second.base_timestamp == second.max_timestamp == 1726045957397

    # Records: keyless, header-less framed metadata records, one offset apart.
    def summary(batch: RecordBatch) -> list[tuple[int, int, int, int]]:
        out = []
        for r in batch.records:
            assert r.key is None and r.headers == () and r.attributes == 0 and r.timestamp_delta == 0
            frame, api_key, version = framing(r.value)
            assert frame == 1
            out.append((batch.offset_of(r), api_key, version, len(r.value)))
        return out

    # BeginTransaction(23), FeatureLevel(12), ZkMigrationState(21), EndTransaction(24)
    assert summary(first) == [(1, 23, 0, 24), (2, 12, 0, 23), (3, 21, 0, 5), (4, 24, 0, 4)]
    # TopicRecord(2) v0, PartitionRecord(3) v1
    assert summary(second) == [(34, 2, 0, 24), (35, 3, 1, 65)]
    assert b"Bootstrap records" in first.records[0].value
    assert b"metadata.version" in first.records[1].value
    assert first.records[1].value.endswith(b"\x00\x14\x00")  # FeatureLevel 20, no tagged fields
    assert second.records[0].value[3:7] == b"\x04foo"  # compact string "foo"
    assert second.records[0].value[7:23] == second.records[1].value[7:23]  # same topic id


def test_vector_reencodes_byte_for_byte(segment: bytes) -> None:
    pos = 0
    while pos < len(segment):
        batch, end = decode_batch(segment, pos)
        assert encode_batch(batch) == segment[pos:end]
        pos = end
    assert pos == len(segment)
    assert encode_segment(decode_segment(segment)) == segment


def test_read_and_write_segment_files(segment: bytes, tmp_path: Path) -> None:
    batches = read_segment(VECTOR)
    out = tmp_path / "00000000000000000000.log"
    assert write_segment(out, batches) == 311
    assert out.read_bytes() == segment
    assert read_segment(out) == batches


def test_decode_batch_accepts_any_buffer(segment: bytes) -> None:
    expected, end = decode_batch(segment, 0)
    assert decode_batch(bytearray(segment), 0) == (expected, end)
    assert decode_batch(memoryview(segment), 0) == (expected, end)
    assert decode_batch(segment[BATCH2_POS:]) == (decode_batch(segment, BATCH2_POS)[0], 166)


# --- a hand-checked byte vector -----------------------------------------------


def test_hand_checked_batch_bytes() -> None:
    batch = RecordBatch(
        base_offset=5,
        partition_leader_epoch=3,
        attributes=0,
        last_offset_delta=1,
        base_timestamp=1000,
        max_timestamp=1000,
        producer_id=7,
        producer_epoch=1,
        base_sequence=0,
        records=(
            Record(0, 0, b"k", b"v", (Header("h", None),)),
            Record(1, -1, None, b""),
        ),
    )
    # Record 0: attributes 00, timestampDelta 0 -> 00, offsetDelta 0 -> 00, key len 1 -> 02 'k',
    # value len 1 -> 02 'v', 1 header -> 02, key len 1 -> 02 'h', null value -> 01: 11 bytes -> length 0x16.
    record0 = bytes.fromhex("16" "00" "00" "00" "026b" "0276" "02" "0268" "01")
    # Record 1: attributes 00, timestampDelta -1 -> 01, offsetDelta 1 -> 02, null key -> 01,
    # empty value -> 00, no headers -> 00: 6 bytes -> length 0x0c.
    record1 = bytes.fromhex("0c" "00" "01" "02" "01" "00" "00")
    tail = bytes.fromhex(
        "0000"  # attributes
        "00000001"  # lastOffsetDelta
        "00000000000003e8"  # baseTimestamp 1000
        "00000000000003e8"  # maxTimestamp 1000
        "0000000000000007"  # producerId
        "0001"  # producerEpoch
        "00000000"  # baseSequence
        "00000002"  # recordsCount
    )
    crc = crc32c(tail + record0 + record1)  # CRC32C from attributes to the end of the batch
    assert crc == 0x6C5C02C1
    expected = (
        bytes.fromhex(
            "0000000000000005"  # baseOffset
            "00000044"  # batchLength: 49 + 19 bytes of records = 68
            "00000003"  # partitionLeaderEpoch
            "02"  # magic
            "6c5c02c1"  # crc
        )
        + tail
        + record0
        + record1
    )
    assert len(expected) == 12 + 68
    assert encode_batch(batch) == expected
    assert batch.batch_length == 68 and batch.crc == 0x6C5C02C1
    assert decode_batch(expected) == (batch, len(expected))
    assert batch.timestamp_of(batch.records[1]) == 999


def test_build_batch_derives_offsets_and_timestamps() -> None:
    recs = [Record(0, 5, None, b"a"), Record(2, -3, None, b"b"), Record(1, 9, None, b"c")]
    batch = build_batch(recs, base_offset=100, base_timestamp=1_000)
    assert batch.last_offset_delta == 2 and batch.last_offset == 102
    assert batch.max_timestamp == 1_009
    assert decode_batch(encode_batch(batch))[0] == batch
    empty = build_batch([], base_offset=7, base_timestamp=3)
    assert empty.last_offset_delta == 0 and empty.batch_length == 49
    assert decode_batch(encode_batch(empty))[0] == empty


def test_attribute_flags() -> None:
    batch = build_batch(
        [Record(0, 0, None, None)],
        base_offset=0,
        base_timestamp=42,
        attributes=ATTR_TIMESTAMP_TYPE | ATTR_TRANSACTIONAL | ATTR_DELETE_HORIZON,
    )
    assert batch.is_log_append_time and batch.is_transactional and batch.has_delete_horizon
    assert not batch.is_control and batch.compression == 0
    assert batch.delete_horizon_ms == 42
    assert build_batch([], base_offset=0, base_timestamp=42).delete_horizon_ms is None


# --- corruption and truncation -------------------------------------------------


def test_crc_mismatch_reports_position_after_good_batches(segment: bytes) -> None:
    bad = bytearray(segment)
    bad[BATCH2_POS + 100] ^= 0x01  # inside a record of the second batch
    items = list(iter_segment(bad))
    assert items[0] == decode_segment(segment)[0]
    err = items[1]
    assert isinstance(err, CorruptBatchError) and isinstance(err, ValueError)
    assert err.position == BATCH2_POS == err.batch_position
    computed = crc32c(bytes(bad[BATCH2_POS + 21 :]))
    assert str(err) == f"CRC mismatch at byte 145: stored 0x099ce19b, computed 0x{computed:08x}"
    assert len(items) == 2
    with pytest.raises(CorruptBatchError, match="CRC mismatch at byte 145"):
        decode_segment(bad)


def test_crc_mismatch_in_first_batch(segment: bytes) -> None:
    bad = bytearray(segment)
    bad[17] ^= 0xFF  # the stored CRC itself
    items = list(iter_segment(bad))
    assert len(items) == 1 and isinstance(items[0], CorruptBatchError)
    assert items[0].position == 0
    assert "stored 0x619240f0, computed 0x9e9240f0" in str(items[0])


def test_every_truncation_point(segment: bytes) -> None:
    good = decode_segment(segment)
    for cut in range(1, len(segment)):
        items = list(iter_segment(segment[:cut]))
        if cut == BATCH2_POS:
            assert items == good[:1]
            continue
        batches, err = items[:-1], items[-1]
        assert isinstance(err, TruncatedBatchError), cut
        if cut < BATCH2_POS:
            assert batches == [] and err.position == 0
        else:
            assert batches == good[:1] and err.position == BATCH2_POS
        start = err.position
        if cut - start < 17:
            assert str(err) == (
                f"truncated batch header at byte {start}: need 17 bytes for offset, length, "
                f"leader epoch and magic, {cut - start} remain"
            )
        else:
            size = 145 if start == 0 else 166
            assert str(err) == f"truncated batch at byte {start}: header says {size} bytes, {cut - start} remain"


def test_truncation_message_example(segment: bytes) -> None:
    (batch, err) = list(iter_segment(segment[: BATCH2_POS + 37]))
    assert isinstance(batch, RecordBatch)
    assert str(err) == "truncated batch at byte 145: header says 166 bytes, 37 remain"


@pytest.mark.parametrize("magic", [3, 255, 0x7F])
def test_bad_magic(segment: bytes, magic: int) -> None:
    bad = bytearray(segment)
    bad[BATCH2_POS + 16] = magic
    items = list(iter_segment(bad))
    assert len(items) == 2 and isinstance(items[1], CorruptBatchError)
    signed = magic - 256 if magic > 127 else magic
    assert str(items[1]) == f"bad magic at byte 145: magic byte {signed} at byte 161, expected 2"


def test_bad_batch_length(segment: bytes) -> None:
    bad = bytearray(segment)
    bad[8:12] = struct.pack(">i", 20)
    (err,) = list(iter_segment(bad))
    assert isinstance(err, CorruptBatchError) and err.position == 0
    assert "header says 20 bytes, a v2 batch needs at least 49" in str(err)
    zeros = segment + bytes(64)  # a preallocated segment's zero tail
    items = list(iter_segment(zeros))
    assert len(items) == 3 and isinstance(items[2], CorruptBatchError) and items[2].position == 311


def test_record_length_mismatch_longer_than_fields() -> None:
    # Declares 7 bytes but its fields take 6; one stray byte keeps the batch framing consistent.
    records = bytes.fromhex("0e" "00" "00" "00" "01" "00" "00" "ff")
    data = frame_batch(tail_bytes(1), records)
    with pytest.raises(CorruptBatchError) as info:
        decode_batch(data)
    assert info.value.position == 61 and info.value.batch_position == 0
    assert str(info.value) == "record length mismatch at byte 61: record 0 declares 7 bytes but its fields take 6"


def test_record_length_mismatch_shorter_than_fields() -> None:
    # Declares 5 bytes but its value alone needs 3 after 4 bytes of other fields.
    records = bytes.fromhex("0a" "00" "00" "00" "01" "04" "6869" "00")
    with pytest.raises(CorruptBatchError, match=r"record length mismatch at byte 61: record 0 declares 5 bytes"):
        decode_batch(frame_batch(tail_bytes(1), records))
    # The record's length points past the end of the batch.
    records = bytes.fromhex("40" "00" "00" "00" "01" "00" "00")
    with pytest.raises(CorruptBatchError, match=r"bad record length at byte 61: record 0 declares 32 bytes, 6 remain"):
        decode_batch(frame_batch(tail_bytes(1), records))


def test_record_count_mismatch() -> None:
    one = bytes.fromhex("0c" "00" "00" "00" "01" "00" "00")
    with pytest.raises(CorruptBatchError, match=r"record count mismatch at byte 68: batch declares 2 records but holds only 1"):
        decode_batch(frame_batch(tail_bytes(2), one))
    with pytest.raises(CorruptBatchError, match=r"declares 1 records but 7 bytes remain after them"):
        decode_batch(frame_batch(tail_bytes(1), one + one))


def test_malformed_varint_inside_a_record() -> None:
    # Record length 3 but its timestampDelta varint never ends within the batch.
    records = bytes.fromhex("06" "00" "ff" "ff")
    with pytest.raises(CorruptBatchError) as info:
        decode_batch(frame_batch(tail_bytes(1), records))
    assert info.value.position == 63 and info.value.batch_position == 0
    assert "truncated varint at byte 63" in str(info.value)


def test_a_header_key_that_is_not_utf8_reads_as_java_reads_it() -> None:
    # Kafka decodes header keys with new String(bytes, UTF_8): the batch stays readable.
    records = bytes.fromhex("1a" "00" "00" "00" "01" "01" "02" "0a" "eda080" "41" "ff" "01")
    batch, _ = decode_batch(frame_batch(tail_bytes(1), records))
    assert [h.key for h in batch.records[0].headers] == ["\ufffdA\ufffd"]


def legacy_message(offset: int, value: bytes, magic: int = 0) -> bytes:
    body = bytes([magic, 0]) + (struct.pack(">q", 0) if magic == 1 else b"") + struct.pack(">i", -1)
    body += struct.pack(">i", len(value)) + value
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(message)) + message


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_magic_is_reported_and_skipped(segment: bytes, magic: int) -> None:
    old = legacy_message(0, b"abc", magic)
    items = list(iter_segment(old + segment))
    err = items[0]
    assert isinstance(err, UnsupportedBatchError) and err.position == 0
    assert err.next_position == len(old)
    assert str(err).startswith(f"unsupported magic at byte 0: magic {magic} (pre-0.11 message format) at offset 0")
    assert items[1:] == decode_segment(segment)
    with pytest.raises(UnsupportedBatchError):
        decode_segment(old + segment)
    # A legacy message with a bad CRC cannot be trusted to frame what follows.
    bad = bytearray(old)
    bad[-1] ^= 1
    (corrupt,) = list(iter_segment(bytes(bad) + segment))
    assert isinstance(corrupt, CorruptBatchError) and "magic " + str(magic) + " message" in str(corrupt)


def test_compressed_batch_is_reported_and_skipped(segment: bytes) -> None:
    records = bytes.fromhex("0c" "00" "00" "00" "01" "00" "00")
    gzip = frame_batch(tail_bytes(1, attributes=1), records)
    items = list(iter_segment(segment + gzip + segment[:BATCH2_POS]))
    assert len(items) == 4
    err = items[2]
    assert isinstance(err, UnsupportedBatchError) and err.position == 311
    assert "codec gzip (1); only none (0) is supported" in str(err)
    assert items[3] == items[0]
    zstd = frame_batch(tail_bytes(1, attributes=4), records)
    with pytest.raises(UnsupportedBatchError, match=r"zstd \(4\)"):
        decode_batch(zstd)


def test_encode_refuses_compression_and_out_of_range_fields() -> None:
    batch = build_batch([Record(0, 0, None, b"x")], base_offset=0, base_timestamp=0, attributes=3)
    with pytest.raises(EncodeError, match=r"lz4 \(3\)"):
        encode_batch(batch)
    bad_epoch = build_batch([], base_offset=0, base_timestamp=0, producer_epoch=40_000)
    with pytest.raises(EncodeError, match="cannot encode batch at byte 0"):
        encode_batch(bad_epoch)
    good = build_batch([], base_offset=0, base_timestamp=0)
    with pytest.raises(EncodeError) as info:
        encode_segment([good, bad_epoch])
    assert info.value.position == 61 and isinstance(info.value, ValueError)


# --- control batches -------------------------------------------------------------


@pytest.mark.parametrize(
    ("builder", "ctype"), [(abort_marker_batch, ControlType.ABORT), (commit_marker_batch, ControlType.COMMIT)]
)
def test_end_transaction_markers(builder, ctype: ControlType) -> None:
    batch = builder(
        base_offset=42,
        producer_id=1234,
        producer_epoch=5,
        coordinator_epoch=9,
        timestamp=1_700_000_000_000,
        partition_leader_epoch=3,
    )
    assert batch.is_control and batch.is_transactional
    assert batch.attributes == ATTR_CONTROL | ATTR_TRANSACTIONAL
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (1234, 5, -1)
    assert batch.last_offset_delta == 0 and batch.next_offset == 43
    (record,) = batch.records
    assert record.key == bytes([0, 0, 0, int(ctype)])
    assert record.value == bytes.fromhex("0000" "00000009")
    assert control_type(record) is ctype
    assert parse_end_txn_marker(record) == EndTxnMarker(ctype, 9, 0)

    data = encode_batch(batch)
    assert len(data) == 61 + 1 + 16  # header, record length, record
    decoded, end = decode_batch(data)
    assert decoded == batch and end == len(data)
    assert control_type(decoded.records[0]) is ctype


def test_mirror_pid_reset_batch() -> None:
    cluster_id = "Fz4kS1e3QaC7Ip2XyZ9w0A"
    batch = mirror_pid_reset_batch(base_offset=500, source_cluster_id=cluster_id, timestamp=123, partition_leader_epoch=8)
    assert batch.is_control and not batch.is_transactional
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (-1, -1, -1)
    (record,) = batch.records
    assert record.key == b"\x00\x00\x00\x07"
    assert control_type(record) is ControlType.MIRROR_PID_RESET
    # Flexible v0: Version int16, compact string (length + 1), empty tagged-field section.
    assert record.value == b"\x00\x00" + bytes([len(cluster_id) + 1]) + cluster_id.encode() + b"\x00"
    assert parse_mirror_pid_reset(record) == MirrorPidReset(source_cluster_id=cluster_id)

    segment = encode_segment([batch, abort_marker_batch(base_offset=501, producer_id=1, producer_epoch=0, coordinator_epoch=0, timestamp=124)])
    back = decode_segment(segment)
    assert back[0] == batch
    assert parse_mirror_pid_reset(back[0].records[0]).source_cluster_id == cluster_id
    assert control_type(back[1].records[0]) is ControlType.ABORT


def test_mirror_pid_reset_value_keeps_unknown_tagged_fields() -> None:
    value = MirrorPidReset(version=0, source_cluster_id="abc", unknown_tagged_fields=((3, b"\x01\x02"),))
    raw = encode_mirror_pid_reset(value)
    assert raw == bytes.fromhex("0000" "04616263" "01" "03" "02" "0102")
    record = Record(0, 0, control_key(ControlType.MIRROR_PID_RESET), raw)
    assert parse_mirror_pid_reset(record) == value
    with pytest.raises(ControlRecordError, match="byte 11: 1 bytes of garbage after the MirrorPidResetRecord body"):
        parse_mirror_pid_reset(Record(0, 0, record.key, raw + b"\x00"))
    with pytest.raises(ControlRecordError, match="at byte 2: field SourceClusterId: non-nullable field was null"):
        parse_mirror_pid_reset(Record(0, 0, record.key, b"\x00\x00\x00\x00"))
    with pytest.raises(ControlRecordError, match="at byte 2: field SourceClusterId: truncated: needs 9 more bytes, 2 remain"):
        parse_mirror_pid_reset(Record(0, 0, record.key, b"\x00\x00\x0a\x61\x62"))


def test_control_type_edges() -> None:
    for ctype in ControlType:
        assert control_type(Record(0, 0, control_key(ctype), None)) is ctype
    assert control_type(Record(0, 0, control_key(99), None)) == 99  # unknown: raw id
    assert control_type(Record(0, 0, b"\x00\x01\x00\x01\xff", None)) is ControlType.COMMIT  # newer key version
    with pytest.raises(ControlRecordError, match="needs 4 bytes, found 3 bytes"):
        control_type(Record(0, 0, b"\x00\x00\x00", None))
    with pytest.raises(ControlRecordError, match="found null"):
        control_type(Record(0, 0, None, None))
    with pytest.raises(ControlRecordError, match="negative control key version"):
        control_type(Record(0, 0, b"\xff\xff\x00\x00", None))
    with pytest.raises(ControlRecordError, match="not an end-transaction marker"):
        parse_end_txn_marker(Record(0, 0, control_key(ControlType.MIRROR_PID_RESET), b""))
    with pytest.raises(ControlRecordError, match="value needs 6 bytes, found 2 bytes"):
        parse_end_txn_marker(Record(0, 0, control_key(ControlType.ABORT), b"\x00\x00"))
    assert isinstance(ControlRecordError("x", 0), ValueError)


# --- properties ------------------------------------------------------------------

INT8 = st.integers(-(2**7), 2**7 - 1)
INT16 = st.integers(-(2**15), 2**15 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
maybe_bytes = st.none() | st.binary(max_size=40)

headers = st.builds(Header, key=st.text(max_size=10), value=maybe_bytes)
records = st.builds(
    Record,
    offset_delta=INT32,
    timestamp_delta=INT64,
    key=maybe_bytes,
    value=maybe_bytes,
    headers=st.lists(headers, max_size=3).map(tuple),
    attributes=INT8,
)
# Any attribute bits except a compression codec (bits 0-2); unknown high bits must survive.
attributes = INT16.map(lambda a: a & ~0x07)


@st.composite
def batches(draw: st.DrawFn, base_offset: st.SearchStrategy[int] = INT64) -> RecordBatch:
    return RecordBatch(
        base_offset=draw(base_offset),
        partition_leader_epoch=draw(INT32),
        attributes=draw(attributes),
        last_offset_delta=draw(INT32),
        base_timestamp=draw(INT64),
        max_timestamp=draw(INT64),
        producer_id=draw(INT64),
        producer_epoch=draw(INT16),
        base_sequence=draw(INT32),
        records=tuple(draw(st.lists(records, max_size=6))),
    )


@st.composite
def segments(draw: st.DrawFn) -> list[RecordBatch]:
    out = []
    offset = draw(st.integers(0, 2**40))
    for _ in range(draw(st.integers(1, 5))):
        batch = draw(batches(st.just(offset)))
        out.append(msgspec.structs.replace(batch, last_offset_delta=abs(batch.last_offset_delta) % 1000))
        offset = out[-1].next_offset + draw(st.integers(0, 10))
    return out


@given(batches())
def test_batch_roundtrip(batch: RecordBatch) -> None:
    data = encode_batch(batch)
    assert len(data) == 12 + batch.batch_length
    decoded, end = decode_batch(data)
    assert end == len(data)
    assert decoded == batch
    assert encode_batch(decoded) == data
    assert decoded.crc == crc32c(data[21:])


@given(batches(), st.binary(max_size=8), st.binary(max_size=8))
def test_batch_decodes_at_any_position(batch: RecordBatch, before: bytes, after: bytes) -> None:
    data = before + encode_batch(batch) + after
    decoded, end = decode_batch(data, len(before))
    assert decoded == batch and end == len(data) - len(after)


@given(segments())
def test_segment_roundtrip(batches_: list[RecordBatch]) -> None:
    data = encode_segment(batches_)
    assert decode_segment(data) == batches_
    assert encode_segment(decode_segment(data)) == data
    assert list(iter_segment(data)) == batches_


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(segments(), st.data())
def test_truncated_segment_keeps_whole_batches(batches_: list[RecordBatch], data: st.DataObject) -> None:
    encoded = [encode_batch(b) for b in batches_]
    blob = b"".join(encoded)
    cut = data.draw(st.integers(0, len(blob)))
    items = list(iter_segment(blob[:cut]))
    starts = [sum(len(e) for e in encoded[:i]) for i in range(len(encoded) + 1)]
    whole = sum(1 for s in starts[1:] if s <= cut)
    assert items[:whole] == batches_[:whole]
    if cut in starts:
        assert len(items) == whole
    else:
        (err,) = items[whole:]
        assert isinstance(err, TruncatedBatchError) and err.position == starts[whole]


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(segments(), st.data())
def test_flipped_byte_never_corrupts_earlier_batches(batches_: list[RecordBatch], data: st.DataObject) -> None:
    encoded = [encode_batch(b) for b in batches_]
    blob = bytearray(b"".join(encoded))
    where = data.draw(st.integers(0, len(blob) - 1))
    blob[where] ^= data.draw(st.integers(1, 255))
    starts = [sum(len(e) for e in encoded[:i]) for i in range(len(encoded) + 1)]
    hit = max(i for i in range(len(encoded)) if starts[i] <= where)
    items = list(iter_segment(blob))
    assert items[:hit] == batches_[:hit]
    rest = items[hit:]
    offset_in_batch = where - starts[hit]
    if offset_in_batch < 8 or 12 <= offset_in_batch < 16:
        # baseOffset and partitionLeaderEpoch are outside the CRC: the batch still decodes.
        assert isinstance(rest[0], RecordBatch)
    else:
        errors = [i for i in rest if isinstance(i, SegmentError)]
        assert errors and errors[0].position >= starts[hit]
        assert all(isinstance(e, ValueError) for e in errors)


def test_encode_refuses_record_attributes_outside_int8() -> None:
    batch = build_batch([Record(0, 0, None, None, attributes=200)], base_offset=0, base_timestamp=0)
    with pytest.raises(EncodeError, match="record attributes 200 do not fit an int8"):
        encode_batch(batch)


def non_canonical(segment: bytes) -> bytes:
    """The segment with batch 1's record 0 offsetDelta written as two bytes (80 00), CRC fixed.

    Still a valid batch: Kafka's readers accept any varint form, only its writers are canonical.
    """
    from records.segments import RECORD_BATCH_OVERHEAD
    from records.varint import read_varint, write_varint

    data = bytearray(segment)
    pos = RECORD_BATCH_OVERHEAD  # record 0: length varint, attributes, timestampDelta, offsetDelta
    length, after_length = read_varint(data, pos)
    _, after_ts = read_varint(data, after_length + 1)  # timestampDelta 0 fits a varint too
    assert data[after_ts] == 0x00, "record 0's offsetDelta is 0"
    data[after_ts : after_ts + 1] = b"\x80\x00"
    new_length = bytearray()
    write_varint(new_length, length + 1)
    assert len(new_length) == after_length - pos
    data[pos:after_length] = new_length
    (batch_length,) = struct.unpack_from(">i", data, 8)
    struct.pack_into(">i", data, 8, batch_length + 1)
    end = 12 + batch_length + 1
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:end])))
    return bytes(data)


def test_a_non_canonical_batch_keeps_its_stored_length_and_crc(segment: bytes) -> None:
    data = non_canonical(segment)
    first, second = decode_segment(data)
    assert first == decode_segment(segment)[0]  # the same records
    assert first.batch_length == 134 and first.size_in_bytes == 146  # as stored, not re-encoded (133)
    assert first.crc == struct.unpack_from(">I", data, 17)[0] != decode_segment(segment)[0].crc
    assert (second.crc, second.size_in_bytes) == (161276315, 166)
    # A batch built in memory still computes both from its encoding.
    rebuilt = msgspec.structs.replace(first)
    assert rebuilt.batch_length == 133 and rebuilt.crc == 0x9E9240F0
