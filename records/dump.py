"""Dumps a log segment as JSON lines, as ``kafka-dump-log --cluster-metadata-decoder`` does
(or, with ``data_records``, as ``kafka-dump-log --deep-iteration --print-data-log`` does).

One line per record: the batch's fields (base offset, leader epoch, CRC, position, flags) and
the record's own, with the value decoded. Metadata records print as
``{"type": "TOPIC_RECORD", "version": 0, "data": {...}}``; control records by their control
type, with KRaft and KIP-1279 control values decoded from their schemas. A corrupt or
truncated batch is reported with its byte position after every good batch before it.
Compressed batches (gzip, snappy, lz4, zstd) are decompressed. In data mode keys and values
print as UTF-8 text (``key``, ``payload``), undecodable bytes replaced, as Kafka's
StringDecoder does. A record whose value does not decode is printed with the error and its
raw bytes: the dump goes on, and the error is returned. Sensitive config values and key material are printed as
``(redacted)``, as Kafka's ``RecordRedactor`` does, unless ``include_secrets``; with ``--raw``
the whole payload of such a record is.
"""

from __future__ import annotations

import base64
import json
from typing import Any, TextIO

from records.codec import CodecError
from records.framing import FrameError, MetadataRecordSerde
from records.javatext import java_utf8
from records.redact import REDACTED, needs_redaction, redact_message_json
from records.segments import (
    COMPRESSION_CODECS,
    NO_SEQUENCE,
    ControlType,
    Record,
    RecordBatch,
    ScannedBatch,
    SegmentError,
    SegmentScan,
    control_type,
)

# Control values that have a schema: control type -> message name.
CONTROL_SCHEMAS = {
    ControlType.LEADER_CHANGE: "LeaderChangeMessage",
    ControlType.SNAPSHOT_HEADER: "SnapshotHeaderRecord",
    ControlType.SNAPSHOT_FOOTER: "SnapshotFooterRecord",
    ControlType.KRAFT_VERSION: "KRaftVersionRecord",
    ControlType.KRAFT_VOTERS: "VotersRecord",
    ControlType.MIRROR_PID_RESET: "MirrorPidResetRecord",
}
_INT16 = 2
_INT32_MAX = 2**31 - 1


def sequence_at(base_sequence: int, delta: int) -> int:
    """``baseSequence + delta``, wrapping past Int32.MAX_VALUE as Kafka's sequences do."""
    if base_sequence == NO_SEQUENCE:
        return NO_SEQUENCE
    seq = base_sequence + delta
    return seq - _INT32_MAX - 1 if seq > _INT32_MAX else seq


def batch_json(batch: RecordBatch, position: int, size: int, crc: int, count: int | None = None, magic: int = 2) -> dict[str, Any]:
    return {
        "baseOffset": batch.base_offset,
        "lastOffset": batch.last_offset,
        "count": len(batch.records) if count is None else count,
        "baseSequence": batch.base_sequence,
        "lastSequence": sequence_at(batch.base_sequence, batch.last_offset_delta),
        "producerId": batch.producer_id,
        "producerEpoch": batch.producer_epoch,
        "partitionLeaderEpoch": batch.partition_leader_epoch,
        "isTransactional": batch.is_transactional,
        "isControl": batch.is_control,
        "deleteHorizonMs": batch.delete_horizon_ms,
        "position": position,
        "timestampType": "LOG_APPEND_TIME" if batch.is_log_append_time else "CREATE_TIME",
        "createTime": batch.max_timestamp,
        "size": size,
        "magic": magic,
        "compressCodec": COMPRESSION_CODECS.get(batch.compression, f"unknown({batch.compression})"),
        "crc": crc,
    }


def _text(data: bytes | None) -> str | None:
    return None if data is None else java_utf8(data)


def control_payload(record: Record, serde: MetadataRecordSerde) -> dict[str, Any]:
    ctype = control_type(record)
    name = ctype.name if isinstance(ctype, ControlType) else f"UNKNOWN_{ctype}"
    value = record.value or b""
    if ctype in (ControlType.ABORT, ControlType.COMMIT):
        if len(value) < 6:
            raise CodecError(f"an end-transaction marker needs 6 bytes, found {len(value)}")
        version = int.from_bytes(value[0:2], "big", signed=True)
        epoch = int.from_bytes(value[2:6], "big", signed=True)
        return {"type": name, "version": version, "data": {"coordinatorEpoch": epoch}}
    message = CONTROL_SCHEMAS.get(ctype)  # type: ignore[call-overload]
    if message is None or message not in serde.schemas.specs:
        return {"type": name, "raw": base64.b64encode(value).decode("ascii")}
    # Control values start with their own int16 version, as Kafka's ControlRecordUtils reads them.
    if len(value) < _INT16:
        raise CodecError(f"a {name} control value needs a version, found {len(value)} bytes")
    version = int.from_bytes(value[0:2], "big", signed=True)
    spec = serde.schemas.spec(message)
    if message == "MirrorPidResetRecord" or version not in spec.valid_versions:
        # MirrorPidResetRecord keeps Version as its first field rather than a prefix.
        data = serde.schemas.decode(message, value, spec.valid_versions.highest)
        return {"type": name, "version": spec.valid_versions.highest, "data": serde.schemas.to_json(data, spec.valid_versions.highest)}
    data = serde.schemas.decode(message, value, version)
    return {"type": name, "version": version, "data": serde.schemas.to_json(data, version)}


def metadata_payload(value: bytes, serde: MetadataRecordSerde, decode: bool, include_secrets: bool) -> Any:
    """A metadata record value as dump-log prints it: decoded JSON, or base64 when not ``decode``."""
    if decode:
        record = serde.decode(value)
        payload = serde.to_json(record)
        if not include_secrets:
            payload["data"] = redact_message_json(type(record.message).__name__, payload["data"])
        return payload
    if not include_secrets:
        try:
            record = serde.decode(value)
        except (CodecError, FrameError, ValueError):
            return undecodable_payload(value, include_secrets)
        name = type(record.message).__name__
        if needs_redaction(name, serde.schemas.to_json(record.message, record.version)):
            return REDACTED
    return base64.b64encode(value).decode("ascii")


def undecodable_payload(value: bytes, include_secrets: bool) -> str:
    """What stands for a metadata record value that does not decode: its base64 only with
    ``include_secrets`` (its bytes may hold a password in clear, a JAAS config, say), else the marker."""
    return base64.b64encode(value).decode("ascii") if include_secrets else REDACTED


def dump_segment(
    data: bytes,
    serde: MetadataRecordSerde,
    out: TextIO,
    *,
    decode_payloads: bool = True,
    include_secrets: bool = False,
    data_records: bool = False,
    report_tail: bool = True,
) -> list[str]:
    """Writes one JSON line per batch and one per record; returns the damage met (invalid
    batches, records or values that do not decode, bytes after the last batch).

    A batch line holds the batch's fields with ``"kind": "batch"`` and ``isvalid`` (its CRC
    matches); its records follow, each with the batch's fields too (no ``kind``). A damaged
    batch is shown with the records that could be read, and the dump goes on with the next.
    ``data_records``: the segment is a data topic's, not ``__cluster_metadata``: keys and
    values print as text (``key``, ``payload``) rather than as metadata records.
    ``report_tail``: False when ``data`` was cut short on purpose (``--max-bytes``).
    """
    errors: list[str] = []
    scan = SegmentScan(data)
    for item in scan:
        if isinstance(item, SegmentError):
            errors.append(str(item))
            continue
        batch = item.batch
        position = item.position
        header = batch_json(batch, position, item.size_in_bytes, batch.crc, item.count, item.magic)
        errors.extend(batch_damage(item))
        out.write(json.dumps({"kind": "batch", **header, "isvalid": item.valid}, ensure_ascii=False) + "\n")
        for record in batch.records:
            line: dict[str, Any] = dict(header)
            line["offset"] = batch.base_offset + record.offset_delta
            line["timestamp"] = batch.timestamp_of(record)
            line["sequence"] = sequence_at(batch.base_sequence, record.offset_delta)
            line["keySize"] = -1 if record.key is None else len(record.key)
            line["valueSize"] = -1 if record.value is None else len(record.value)
            line["headerKeys"] = [h.key for h in record.headers]
            if data_records and not batch.is_control:
                line["key"] = _text(record.key)
            try:
                if record.value is None:
                    line["payload"] = None
                elif batch.is_control:
                    line["payload"] = control_payload(record, serde) if decode_payloads else base64.b64encode(record.value).decode("ascii")
                elif data_records:
                    line["payload"] = _text(record.value) if decode_payloads else base64.b64encode(record.value).decode("ascii")
                else:
                    line["payload"] = metadata_payload(record.value, serde, decode_payloads, include_secrets)
            except (CodecError, FrameError, SegmentError, ValueError) as e:
                message = f"offset {line['offset']} (batch at byte {position}): cannot decode the value: {e}"
                errors.append(message)
                line["payloadError"] = str(e)
                line["payload"] = (None if record.value is None else base64.b64encode(record.value).decode("ascii")
                                   if batch.is_control else undecodable_payload(record.value, include_secrets))  # fmt: skip
            out.write(json.dumps(line, ensure_ascii=False) + "\n")
    if report_tail:
        errors.extend(tail_damage(scan))
    return errors


def batch_damage(item: ScannedBatch) -> list[str]:
    """What is wrong with a batch, one message each (none for a sound batch)."""
    damage = []
    where = f"batch at byte {item.position} (offsets {item.batch.base_offset}..{item.batch.last_offset})"
    if not item.valid:
        damage.append(f"{where}: CRC mismatch (isvalid: false)")
    if item.error is not None:
        damage.append(f"{where}: {item.error}")
    return damage


def tail_damage(scan: SegmentScan) -> list[str]:
    """Bytes after the last whole batch, as Kafka's "Found N invalid bytes at the end"."""
    trailing = len(scan.data) - scan.valid_bytes
    if trailing <= 0:
        return []
    why = f": {scan.stop}" if scan.stop is not None else ""
    return [f"{trailing} invalid bytes at the end, from byte {scan.valid_bytes}{why}"]
