"""``kafka-records dump-log``: each file dumped by its kind, as ``kafka-dump-log`` picks it by
suffix; then, on stderr, what Kafka reports after the last file (index entries that do not
match the log, non-consecutive offsets).

The JSON view writes one JSON line per batch, record or index entry (``kind`` says which, a
record line has none). The Kafka view writes DumpLogSegments' text (records/kafka_text.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from records.dump import dump_segment
from records.framing import MetadataRecordSerde
from records.kafka_text import (
    GROUP_COORDINATOR_SCHEMAS,
    METADATA_DECODER,
    STRING_DECODER,
    TRANSACTION_COORDINATOR_SCHEMAS,
    CoordinatorRecordParser,
    LogDumpOptions,
    dump_log_kafka,
)
from records.logfiles import (
    LogFileError,
    base_offset_of,
    first_batch_last_offset,
    index_lookup,
    offset_index_sanity,
    read_leader_epoch_checkpoint,
    read_offset_checkpoint,
    read_offset_index,
    read_producer_snapshot,
    read_time_index,
    read_txn_index,
    time_index_sanity,
    OFFSET_ENTRY,
    entry_count,
)
from records.registry import SchemaSet
from records.segments import SegmentScan

EXIT_OK = 0
EXIT_UNREADABLE = 2  # as every records command: bad usage or input that cannot be read
EXIT_DAMAGED = 3
_SNAPSHOT_SUFFIX = ".checkpoint"  # KRaft snapshots: Kafka reads them as logs
_BOOTSTRAP_SNAPSHOT = "bootstrap.checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
OFFSET_CHECKPOINTS = ("recovery-point-offset-checkpoint", "replication-offset-checkpoint",
                      "log-start-offset-checkpoint", "cleaner-offset-checkpoint")  # fmt: skip


@dataclass
class DumpLogOptions:
    kafka_format: bool = False
    deep_iteration: bool = False
    print_data: bool = False
    metadata: bool = False
    coordinator: str | None = None  # "offsets" or "transaction-log": Kafka's coordinator record decoders
    raw: bool = False
    include_secrets: bool = False
    index_sanity_check: bool = False
    verify_index_only: bool = False
    max_message_size: int = 5 * 1024 * 1024
    max_bytes: int | None = None


@dataclass
class _Report:
    """What Kafka prints on stderr once every file is dumped, and the exit code so far."""

    index_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_out_of_order: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_not_found: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    non_consecutive: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    code: int = EXIT_OK

    def damaged(self) -> None:
        self.code = max(self.code, EXIT_DAMAGED) if self.code != EXIT_UNREADABLE else self.code

    def write(self, err: TextIO) -> None:
        for name, pairs in self.index_mismatches.items():
            err.write(f"Mismatches in :{name}\n")
            for index_offset, log_offset in reversed(pairs):  # Kafka prepends to its list
                err.write(f"  Index offset: {index_offset}, log offset: {log_offset}\n")
        for name, pairs in self.time_mismatches.items():
            err.write(f"Found timestamp mismatch in :{name}\n")
            for index_ts, log_ts in pairs:
                err.write(f"  Index timestamp: {index_ts}, log timestamp: {log_ts}\n")
        for name, pairs in self.time_out_of_order.items():
            err.write(f"Found out of order timestamp in :{name}\n")
            for index_ts, prev_ts in pairs:
                err.write(f"  Index timestamp: {index_ts}, Previously indexed timestamp: {prev_ts}\n")
        for pairs in self.time_not_found.values():
            err.write("The following indexed offsets are not found in the log.\n")
            for index_offset, log_offset in pairs:
                err.write(f"Indexed offset: {index_offset}, found log offset: {log_offset}\n")
        for name, pairs in self.non_consecutive.items():
            err.write(f"Non-consecutive offsets in {name}\n")
            for first, second in reversed(pairs):
                err.write(f"  {first} is followed by {second}\n")


def dump_files(files: list[str], schemas: SchemaSet, options: DumpLogOptions, out: TextIO, err: TextIO) -> int:
    """Dumps each file in turn; returns the exit code (0 sound, 2 unreadable, 3 damaged)."""
    report = _Report()
    serde = MetadataRecordSerde(schemas)
    for name in files:
        path = Path(name)
        if options.kafka_format:
            out.write(f"Dumping {name}\n")
        suffix = path.suffix
        try:
            if suffix in (".log", _SNAPSHOT_SUFFIX):
                _dump_log(path, serde, options, out, err, report)
            elif suffix == ".index":
                _dump_index(path, options, out, report)
            elif suffix == ".timeindex":
                _dump_time_index(path, options, out, report)
            elif suffix == ".snapshot":
                _dump_producer_snapshot(path, options, out, err, report)
            elif suffix == ".txnindex":
                _dump_txn_index(path, options, out)
            elif path.name == LEADER_EPOCH_CHECKPOINT or path.name in OFFSET_CHECKPOINTS:
                # Kafka 4.4.0's tool stops here (a name without a dot); ours reads the checkpoint.
                _dump_checkpoint(path, options, out)
            else:
                err.write(f"Ignoring unknown file {name}\n")
        except BrokenPipeError:
            raise
        except OSError as e:
            err.write(f"error: cannot read {name}: {e.strerror}\n")
            report.code = EXIT_UNREADABLE
        except LogFileError as e:
            err.write(f"error: {name}: {e}\n")
            report.damaged()
    report.write(err)
    return report.code


def _json(obj: dict[str, Any], out: TextIO) -> None:
    out.write(json.dumps(obj, ensure_ascii=False) + "\n")


def _dump_log(path: Path, serde: MetadataRecordSerde, options: DumpLogOptions, out: TextIO, err: TextIO, report: _Report) -> None:
    data = path.read_bytes()
    if options.kafka_format:
        if path.suffix == ".log":
            out.write(f"Log starting offset: {base_offset_of(path)}\n")
        elif path.name == _BOOTSTRAP_SNAPSHOT:
            out.write("KRaft bootstrap snapshot\n")
        else:
            end_offset, _, epoch = path.stem.partition("-")
            out.write(f"Snapshot end offset: {int(end_offset)}, epoch: {int(epoch)}\n")
        log_options = LogDumpOptions(
            deep_iteration=options.deep_iteration,
            print_data=options.print_data,
            decoder=METADATA_DECODER if options.metadata else STRING_DECODER,
            include_secrets=options.include_secrets,
            max_bytes=options.max_bytes,
            coordinator=_coordinator_parser(options.coordinator),
        )
        errors = dump_log_kafka(data, serde, out, log_options, path.name)
        if log_options.non_consecutive:
            report.non_consecutive.setdefault(str(path.absolute()), []).extend(log_options.non_consecutive)
    else:
        errors = dump_segment(
            data[: options.max_bytes] if options.max_bytes is not None else data,
            serde,
            out,
            decode_payloads=not options.raw,
            include_secrets=options.include_secrets,
            data_records=not options.metadata,
            report_tail=options.max_bytes is None,
        )
    for e in errors:
        err.write(f"error: {path}: {e}\n")
    if errors:
        report.damaged()


def _coordinator_parser(kind: str | None) -> CoordinatorRecordParser | None:
    if kind is None:
        return None
    return CoordinatorRecordParser.load(GROUP_COORDINATOR_SCHEMAS if kind == "offsets" else TRANSACTION_COORDINATOR_SCHEMAS)


def _log_of(path: Path) -> bytes:
    return (path.absolute().parent / (path.name.split(".")[0] + ".log")).read_bytes()


def _dump_index(path: Path, options: DumpLogOptions, out: TextIO, report: _Report) -> None:
    base = base_offset_of(path)
    log = _log_of(path)
    data = path.read_bytes()
    entries = read_offset_index(data, base)
    if not entry_count(data, OFFSET_ENTRY):
        out.write(f"{path} is empty.\n" if options.kafka_format else json.dumps({"kind": "index", "file": str(path), "entries": 0}) + "\n")
        return
    if options.index_sanity_check:
        offset_index_sanity(data, base, path.absolute())
        out.write(f"{path} passed sanity check.\n" if options.kafka_format else json.dumps({"kind": "index", "file": str(path), "sane": True}) + "\n")
        return
    for entry in entries:
        last = first_batch_last_offset(log, entry.position, options.max_message_size)
        if last != entry.offset:
            report.index_mismatches.setdefault(str(path.absolute()), []).append((entry.offset, -1 if last is None else last))
            report.damaged()
        if not options.verify_index_only:
            if options.kafka_format:
                out.write(f"offset: {entry.offset} position: {entry.position}\n")
            else:
                _json({"kind": "index", "offset": entry.offset, "position": entry.position, "logLastOffset": last}, out)


def _dump_time_index(path: Path, options: DumpLogOptions, out: TextIO, report: _Report) -> None:
    base = base_offset_of(path)
    log = _log_of(path)
    index_path = path.absolute().parent / (path.name.split(".")[0] + ".index")
    offsets = read_offset_index(index_path.read_bytes(), base)
    indexed = [e.offset for e in offsets]
    data = path.read_bytes()
    if options.index_sanity_check:
        time_index_sanity(data, base, path.absolute())
        out.write(f"{path} passed sanity check.\n" if options.kafka_format else json.dumps({"kind": "timeindex", "file": str(path), "sane": True}) + "\n")
        return
    name = str(path.absolute())
    prev = -1
    for entry in read_time_index(data, base):
        position = index_lookup(offsets, indexed, entry.offset)
        batch = next((b.batch for b in SegmentScan(log[position:]) if hasattr(b, "batch") and b.batch.last_offset >= entry.offset), None)
        if batch is None:
            report.time_not_found.setdefault(name, []).append((entry.offset, -1))
            report.damaged()
        elif batch.last_offset != entry.offset:
            report.time_not_found.setdefault(name, []).append((entry.offset, batch.last_offset))
            report.damaged()
        else:
            max_ts = max((batch.timestamp_of(r) for r in batch.records), default=-1)
            if max_ts != entry.timestamp:
                report.time_mismatches.setdefault(name, []).append((entry.timestamp, max_ts))
                report.damaged()
            if prev >= entry.timestamp:
                report.time_out_of_order.setdefault(name, []).append((entry.timestamp, prev))
                report.damaged()
        if not options.verify_index_only:
            if options.kafka_format:
                out.write(f"timestamp: {entry.timestamp} offset: {entry.offset}\n")
            else:
                _json({"kind": "timeindex", "timestamp": entry.timestamp, "offset": entry.offset}, out)
        prev = entry.timestamp


def _optional_long(value: int) -> str:
    return f"OptionalLong[{value}]" if value >= 0 else "OptionalLong.empty"


def _dump_producer_snapshot(path: Path, options: DumpLogOptions, out: TextIO, err: TextIO, report: _Report) -> None:
    try:
        entries = read_producer_snapshot(path.read_bytes())
    except LogFileError as e:
        err.write(f"{e}\n")  # Kafka prints the CorruptSnapshotException's message and goes on
        report.damaged()
        return
    for e in entries:
        if not options.kafka_format:
            _json({"kind": "producer", "producerId": e.producer_id, "producerEpoch": e.producer_epoch,
                   "coordinatorEpoch": e.coordinator_epoch, "currentTxnFirstOffset": e.current_txn_first_offset,
                   "lastTimestamp": e.timestamp, "firstSequence": e.first_sequence, "lastSequence": e.last_sequence,
                   "lastOffset": e.last_offset, "offsetDelta": e.offset_delta}, out)  # fmt: skip
            continue
        line = (f"producerId: {e.producer_id} producerEpoch: {e.producer_epoch} coordinatorEpoch: {e.coordinator_epoch} "
                f"currentTxnFirstOffset: {_optional_long(e.current_txn_first_offset)} lastTimestamp: {e.timestamp} ")  # fmt: skip
        if e.last_offset >= 0:
            line += (f"firstSequence: {e.first_sequence} lastSequence: {e.last_sequence} lastOffset: {e.last_offset} "
                     f"offsetDelta: {e.offset_delta} timestamp: {e.timestamp}")  # fmt: skip
        out.write(line + "\n")


def _dump_txn_index(path: Path, options: DumpLogOptions, out: TextIO) -> None:
    for t in read_txn_index(path.read_bytes()):
        if options.kafka_format:
            out.write(f"version: {t.version} producerId: {t.producer_id} firstOffset: {t.first_offset} "
                      f"lastOffset: {t.last_offset} lastStableOffset: {t.last_stable_offset}\n")  # fmt: skip
        else:
            _json({"kind": "abortedTxn", "version": t.version, "producerId": t.producer_id, "firstOffset": t.first_offset,
                   "lastOffset": t.last_offset, "lastStableOffset": t.last_stable_offset}, out)  # fmt: skip


def _dump_checkpoint(path: Path, options: DumpLogOptions, out: TextIO) -> None:
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.name == LEADER_EPOCH_CHECKPOINT:
        for e in read_leader_epoch_checkpoint(text):
            if options.kafka_format:
                out.write(f"epoch: {e.epoch} startOffset: {e.start_offset}\n")
            else:
                _json({"kind": "leaderEpoch", "epoch": e.epoch, "startOffset": e.start_offset}, out)
        return
    for c in read_offset_checkpoint(text):
        if options.kafka_format:
            out.write(f"topic: {c.topic} partition: {c.partition} offset: {c.offset}\n")
        else:
            _json({"kind": "checkpoint", "topic": c.topic, "partition": c.partition, "offset": c.offset}, out)
