"""A log segment printed exactly as Apache Kafka 4.4.0's ``kafka-dump-log`` prints it
(``org.apache.kafka.tools.DumpLogSegments``), so that the two outputs can be diffed line for line.

One line per batch (``baseOffset: ... isvalid: true``); with deep iteration one ``| offset:``
line per record; with ``--print-data-log`` its key and value (Kafka's StringDecoder, so invalid
UTF-8 becomes U+FFFD as Java cuts it), or with ``--cluster-metadata-decoder`` the metadata
record as Kafka's JSON; and "Found N invalid bytes at the end of FILE" when bytes follow the last
whole batch. A damaged batch is printed with ``isvalid: false`` and the records that could be
read, and the dump goes on (Kafka stops with a stack trace where a record does not parse).

What differs from Kafka, on purpose: secrets are ``(redacted)`` unless ``include_secrets``
(Kafka 4.4.0's tool redacts nothing), and a value Kafka cannot decode says why in our words.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from records.codec import CodecError
from records.dump import batch_damage, control_payload, sequence_at, tail_damage
from records.framing import FrameError, MetadataRecordSerde
from records.javatext import java_utf8
from records.redact import redact_message_json
from records.registry import PROJECT_SCHEMAS, SchemaSet
from records.segments import COMPRESSION_CODECS, ControlType, Record, ScannedBatch, SegmentError, SegmentScan, control_type

STRING_DECODER = "string"
METADATA_DECODER = "metadata"
OFFSETS_DECODER = "offsets"  # __consumer_offsets
TRANSACTION_LOG_DECODER = "transaction-log"  # __transaction_state

# Control types DumpLogSegments prints with their JSON, and how it names them.
_CONTROL_LABELS = {
    ControlType.LEADER_CHANGE: "LeaderChange:",
    ControlType.SNAPSHOT_HEADER: "SnapshotHeader",
    ControlType.SNAPSHOT_FOOTER: "SnapshotFooter",
    ControlType.KRAFT_VERSION: "KRaftVersion",
    ControlType.KRAFT_VOTERS: "KRaftVoters",
}
# Kafka 4.4.0's ControlRecordType: ids it does not know (KIP-1279's 7 among them) read as UNKNOWN.
_KAFKA_CONTROL_TYPES = {0: "ABORT", 1: "COMMIT", 2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER", 4: "SNAPSHOT_FOOTER",
                        5: "KRAFT_VERSION", 6: "KRAFT_VOTERS"}  # fmt: skip
_LOWER_HEX_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\u([0-9a-f]{4})")


def jackson(obj: Any) -> str:
    """JSON as Jackson's ``JsonNode.toString()`` writes it: compact, non-ASCII as is, ``\\u00XX`` in capitals."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return _LOWER_HEX_ESCAPE.sub(lambda m: m.group(1) + "\\u" + m.group(2).upper(), text)


def _drop_unknown_tagged(obj: Any) -> Any:
    """Kafka's JsonConverter drops unknown tagged fields; ours keeps them under ``_unknownTaggedFields``."""
    if isinstance(obj, dict):
        return {k: _drop_unknown_tagged(v) for k, v in obj.items() if k != "_unknownTaggedFields"}
    if isinstance(obj, list):
        return [_drop_unknown_tagged(v) for v in obj]
    return obj


def _bool(value: bool) -> str:
    return "true" if value else "false"


@dataclass
class LogDumpOptions:
    deep_iteration: bool = False
    print_data: bool = False
    decoder: str = STRING_DECODER
    include_secrets: bool = False
    max_bytes: int | None = None
    coordinator: CoordinatorRecordParser | None = None  # the offsets and transaction log decoders
    # Offset pairs that do not follow each other (Kafka prints them on stderr at the end).
    non_consecutive: list[tuple[int, int]] = field(default_factory=list)


def batch_line(item: ScannedBatch, position: int) -> str:
    b = item.batch
    horizon = f"OptionalLong[{b.base_timestamp}]" if b.has_delete_horizon else "OptionalLong.empty"
    ts_type = "LogAppendTime" if b.is_log_append_time else "CreateTime"
    codec = COMPRESSION_CODECS.get(b.compression, f"unknown({b.compression})")
    return (
        f"baseOffset: {b.base_offset} lastOffset: {b.last_offset} count: {item.count} baseSequence: {b.base_sequence}"
        f" lastSequence: {sequence_at(b.base_sequence, b.last_offset_delta)} producerId: {b.producer_id}"
        f" producerEpoch: {b.producer_epoch} partitionLeaderEpoch: {b.partition_leader_epoch}"
        f" isTransactional: {_bool(b.is_transactional)} isControl: {_bool(b.is_control)} deleteHorizonMs: {horizon}"
        f" position: {position} {ts_type}: {b.max_timestamp} size: {item.size_in_bytes} magic: {item.magic}"
        f" compresscodec: {codec} crc: {b.crc} isvalid: {_bool(item.valid)}"
    )


def _control_text(record: Record, serde: MetadataRecordSerde) -> str:
    ctype = control_type(record)
    if ctype in (ControlType.ABORT, ControlType.COMMIT):
        payload = control_payload(record, serde)
        return f" endTxnMarker: {ctype.name} coordinatorEpoch: {payload['data']['coordinatorEpoch']}"  # type: ignore[union-attr]
    label = _CONTROL_LABELS.get(ctype)  # type: ignore[call-overload]
    if label is None:
        return f" controlType: {_KAFKA_CONTROL_TYPES.get(int(ctype), 'UNKNOWN')}({int(ctype)})"
    payload = control_payload(record, serde)
    return f" {label} {jackson(_drop_unknown_tagged(payload['data']))}"


def _metadata_text(record: Record, offset: int, serde: MetadataRecordSerde, include_secrets: bool) -> tuple[str, str | None]:
    """The payload DumpLogSegments' cluster metadata parser prints, and our error if it does not decode."""
    try:
        if record.value is None:
            raise FrameError("the record has no value")
        decoded = serde.decode(record.value)
        payload = serde.to_json(decoded)
    except (CodecError, FrameError, ValueError) as e:
        # Never the bytes: an undecodable ConfigRecord may hold a password in clear.
        return f"Error at {offset}, skipping. {e}", f"offset {offset}: cannot decode the value: {e}"
    if not include_secrets:
        payload["data"] = redact_message_json(type(decoded.message).__name__, payload["data"])
    return jackson(_drop_unknown_tagged(payload)), None


def dump_log_kafka(data: bytes, serde: MetadataRecordSerde, out: TextIO, options: LogDumpOptions, file_name: str) -> list[str]:
    """Writes the lines after ``Log starting offset``; returns the damage met (as ``dump_segment``)."""
    errors: list[str] = []
    deep = options.deep_iteration or options.print_data
    scan = SegmentScan(data, options.max_bytes)
    last_offset = -1
    write = out.write
    for item in scan:
        if isinstance(item, SegmentError):
            errors.append(str(item))
            continue
        write(batch_line(item, item.position) + "\n")
        errors.extend(batch_damage(item))
        b = item.batch
        if deep:
            for record in b.records:
                offset = b.base_offset + record.offset_delta
                if last_offset != -1 and offset != last_offset + 1:
                    options.non_consecutive.append((last_offset, offset))
                last_offset = offset
                ts_type = "LogAppendTime" if b.is_log_append_time else "CreateTime"
                line = (
                    f"| offset: {offset} {ts_type}: {b.timestamp_of(record)}"
                    f" keySize: {-1 if record.key is None else len(record.key)}"
                    f" valueSize: {-1 if record.value is None else len(record.value)}"
                    f" sequence: {sequence_at(b.base_sequence, record.offset_delta)}"
                    f" headerKeys: [{','.join(h.key for h in record.headers)}]"
                )
                if b.is_control:
                    try:
                        line += _control_text(record, serde)
                    except (CodecError, FrameError, SegmentError, ValueError) as e:
                        errors.append(f"offset {offset}: cannot read the control record: {e}")
                elif options.print_data:
                    if options.coordinator is not None:
                        key_text, payload_text, error = options.coordinator.parse(record, offset)
                        if key_text is not None:
                            line += f" key: {key_text}"
                        if payload_text is not None:
                            line += f" payload: {payload_text}"
                        if error:
                            errors.append(error)
                    elif options.decoder == METADATA_DECODER:
                        text, error = _metadata_text(record, offset, serde, options.include_secrets)
                        line += f" payload: {text}"
                        if error:
                            errors.append(error)
                    else:
                        if record.key is not None:
                            line += f" key: {java_utf8(record.key)}"
                        if record.value is not None:
                            line += f" payload: {java_utf8(record.value)}"
                write(line + "\n")
    trailing = len(scan.data) - scan.valid_bytes
    if options.max_bytes is None:  # a cut made on purpose is no damage
        if trailing > 0:
            write(f"Found {trailing} invalid bytes at the end of {file_name}\n")
        errors.extend(tail_damage(scan))
    return errors


# --- __consumer_offsets and __transaction_state (--offsets-decoder, --transaction-log-decoder) ---

GROUP_COORDINATOR_SCHEMAS = PROJECT_SCHEMAS / "kafka-group-coordinator"
# Kafka's TransactionState by id: from 4.4 the transaction log's value prints its transactionStatus
# by this name (an id it does not know as the number, in quotes too).
TRANSACTION_STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort",
                      "Dead", "PrepareEpochFence")  # fmt: skip
TRANSACTION_COORDINATOR_SCHEMAS = PROJECT_SCHEMAS / "kafka-transaction-coordinator"
_CONSUMER_PROTOCOL = "consumer"
_INT16_PREFIX = 2


class CoordinatorRecordParser:
    """A coordinator record as DumpLogSegments prints it: the key (int16 record type, then the
    key message at version 0) as ``{"type":"T","data":{...}}``, the value (int16 version, then
    the message) as ``{"version":"V","data":{...}}``, ``<DELETE>`` for a tombstone. Group
    metadata members' subscription and assignment bytes are decoded as the consumer protocol's,
    as Kafka's offsets parser does."""

    def __init__(self, schemas: SchemaSet) -> None:
        self.schemas = schemas

    @classmethod
    def load(cls, folder: Path) -> CoordinatorRecordParser:
        return cls(SchemaSet.load(folder))

    def parse(self, record: Record, offset: int) -> tuple[str | None, str | None, str | None]:
        """(key text, payload text, our error or None)."""
        if record.key is None:
            return None, None, f"offset {offset}: a coordinator record needs a key"
        try:
            record_type = _int16(record.key, "key")
            key_spec = self.schemas.by_api_key(record_type, "coordinator-key")
            if key_spec is None:
                return f"Unknown record type {record_type} at offset {offset}, skipping.", None, f"offset {offset}: unknown record type {record_type}"
            key = self.schemas.to_json(self.schemas.decode(key_spec.name, record.key[_INT16_PREFIX:], 0), 0)
            key_text = jackson({"type": str(record_type), "data": _drop_unknown_tagged(key)})
            if record.value is None:
                return key_text, "<DELETE>", None
            version = _int16(record.value, "value")
            value_spec = self.schemas.by_api_key(record_type, "coordinator-value")
            if value_spec is None:
                raise CodecError(f"no value schema for record type {record_type}")
            if version not in value_spec.valid_versions:
                raise CodecError(f"unknown version {version} of {value_spec.name}")
            value = self.schemas.to_json(self.schemas.decode(value_spec.name, record.value[_INT16_PREFIX:], version), version)
            if value_spec.name == "TransactionLogValue" and isinstance(value.get("transactionStatus"), int):
                status = value["transactionStatus"]
                value["transactionStatus"] = TRANSACTION_STATES[status] if 0 <= status < len(TRANSACTION_STATES) else str(status)
            if value_spec.name == "GroupMetadataValue" and value.get("protocolType") == _CONSUMER_PROTOCOL:
                for member in value.get("members") or ():
                    self._decode_embedded(member, "subscription", "ConsumerProtocolSubscription")
                    self._decode_embedded(member, "assignment", "ConsumerProtocolAssignment")
            return key_text, jackson({"version": str(version), "data": _drop_unknown_tagged(value)}), None
        except (CodecError, ValueError) as e:
            return f"Error at offset {offset}, skipping. {e}", None, f"offset {offset}: cannot decode: {e}"

    def _decode_embedded(self, member: dict[str, Any], field: str, message: str) -> None:
        """Bytes holding an int16 version and a message, replaced by its JSON (kept as they are
        when they do not decode, as Kafka keeps them)."""
        encoded = member.get(field)
        if not isinstance(encoded, str):
            return
        try:
            data = base64.b64decode(encoded)
            version = _int16(data, field)
            member[field] = self.schemas.to_json(self.schemas.decode(message, data[_INT16_PREFIX:], version), version)
        except (CodecError, ValueError):
            pass


def _int16(data: bytes, what: str) -> int:
    if len(data) < _INT16_PREFIX:
        raise CodecError(f"the {what} needs an int16 version, found {len(data)} bytes")
    return int.from_bytes(data[:_INT16_PREFIX], "big", signed=True)
