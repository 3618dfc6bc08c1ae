"""Dumps a log segment as JSON lines, as ``kafka-dump-log --cluster-metadata-decoder`` does.

One line per record: the batch's fields (base offset, leader epoch, CRC, position, flags) and
the record's own, with the value decoded. Metadata records print as
``{"type": "TOPIC_RECORD", "version": 0, "data": {...}}``; control records by their control
type, with KRaft and KIP-1279 control values decoded from their schemas. A corrupt or
truncated batch is reported with its byte position after every good batch before it.
A record whose value does not decode is printed with the error and its raw bytes: the dump
goes on, and the error is returned. Sensitive config values and key material are printed as
``(redacted)``, as Kafka's ``RecordRedactor`` does, unless ``include_secrets``; with ``--raw``
the whole payload of such a record is.
"""

from __future__ import annotations

import base64
import json
from typing import Any, TextIO

from records.codec import CodecError
from records.framing import FrameError, MetadataRecordSerde
from records.redact import REDACTED, may_hold_secrets, needs_redaction, redact_message_json
from records.segments import ControlType, Record, RecordBatch, SegmentError, control_type, iter_segment

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


def batch_json(batch: RecordBatch, position: int, size: int, crc: int) -> dict[str, Any]:
    return {
        "baseOffset": batch.base_offset,
        "lastOffset": batch.last_offset,
        "count": len(batch.records),
        "baseSequence": batch.base_sequence,
        "producerId": batch.producer_id,
        "producerEpoch": batch.producer_epoch,
        "partitionLeaderEpoch": batch.partition_leader_epoch,
        "isTransactional": batch.is_transactional,
        "isControl": batch.is_control,
        "position": position,
        "createTime": batch.max_timestamp,
        "size": size,
        "magic": 2,
        "crc": crc,
    }


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
            return undecodable_payload(value, serde, include_secrets)
        name = type(record.message).__name__
        if needs_redaction(name, serde.schemas.to_json(record.message, record.version)):
            return REDACTED
    return base64.b64encode(value).decode("ascii")


def undecodable_payload(value: bytes, serde: MetadataRecordSerde, include_secrets: bool) -> str:
    """The base64 of a metadata record value that does not decode, or the marker when its header
    names a record type that can carry a secret (a ConfigRecord with a broken body, say)."""
    if not include_secrets:
        try:
            api_key, _, _ = serde.read_header(value)
            spec = serde.schemas.by_api_key(api_key, serde.message_type)
        except (CodecError, FrameError, ValueError):
            spec = None
        if spec is not None and may_hold_secrets(spec.name):
            return REDACTED
    return base64.b64encode(value).decode("ascii")


def dump_segment(
    data: bytes, serde: MetadataRecordSerde, out: TextIO, *, decode_payloads: bool = True, include_secrets: bool = False
) -> list[str]:
    """Writes one JSON line per record; returns the errors met (the segment's last, if corrupt)."""
    errors: list[str] = []
    position = 0
    for item in iter_segment(data):
        if isinstance(item, SegmentError):
            errors.append(str(item))
            next_position = getattr(item, "next_position", None)
            if next_position is not None:
                position = next_position
            continue
        batch = item
        size = batch.size_in_bytes
        header = batch_json(batch, position, size, batch.crc)
        for record in batch.records:
            line: dict[str, Any] = dict(header)
            line["offset"] = batch.base_offset + record.offset_delta
            line["keySize"] = -1 if record.key is None else len(record.key)
            line["valueSize"] = -1 if record.value is None else len(record.value)
            line["headerKeys"] = [h.key for h in record.headers]
            try:
                if record.value is None:
                    line["payload"] = None
                elif batch.is_control:
                    line["payload"] = control_payload(record, serde) if decode_payloads else base64.b64encode(record.value).decode("ascii")
                else:
                    line["payload"] = metadata_payload(record.value, serde, decode_payloads, include_secrets)
            except (CodecError, FrameError, SegmentError, ValueError) as e:
                message = f"offset {line['offset']} (batch at byte {position}): cannot decode the value: {e}"
                errors.append(message)
                line["payloadError"] = str(e)
                line["payload"] = (None if record.value is None else base64.b64encode(record.value).decode("ascii")
                                   if batch.is_control else undecodable_payload(record.value, serde, include_secrets))  # fmt: skip
            out.write(json.dumps(line, ensure_ascii=False) + "\n")
        position += size
    return errors
