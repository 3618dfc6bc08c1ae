"""The files of a Kafka log directory besides segments, read as ``kafka-dump-log`` reads them:
offset indexes (``.index``), time indexes (``.timeindex``), transaction indexes (``.txnindex``)
and producer state snapshots (``.snapshot``). Each reader returns plain entries; the CLI prints
them as JSON lines or as Kafka's text (``--format kafka``).

Layouts (Kafka's storage module): an offset index entry is relative offset int32 + position
int32; a time index entry timestamp int64 + relative offset int32; an aborted transaction
version int16 + producerId, firstOffset, lastOffset, lastStableOffset int64; a producer
snapshot version int16 (1), CRC32C uint32 of what follows, then an int32-counted array of
producerId int64, epoch int16, lastSequence int32, lastOffset int64, offsetDelta int32,
timestamp int64, coordinatorEpoch int32, currentTxnFirstOffset int64.
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from crc32c import crc32c

from records.segments import SegmentScan

OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")
ABORTED_TXN = struct.Struct(">hqqqq")
SNAPSHOT_HEADER = struct.Struct(">hI")
SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")
SNAPSHOT_VERSION = 1
NO_TIMESTAMP = -1
_INT32_MAX = 2**31 - 1


class LogFileError(ValueError):
    """A file that is not what its name says (Kafka's CorruptIndexException, CorruptSnapshotException)."""


def base_offset_of(path: Path) -> int:
    """The offset a segment file's name starts with (``00000000000000000042.index`` -> 42)."""
    stem = path.name.split(".")[0]
    try:
        return int(stem)
    except ValueError:
        raise LogFileError(f"{path.name}: the name does not start with an offset") from None


class OffsetEntry(NamedTuple):
    offset: int
    position: int


class TimeEntry(NamedTuple):
    timestamp: int
    offset: int


class AbortedTxn(NamedTuple):
    version: int
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class ProducerEntry(NamedTuple):
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int

    @property
    def first_sequence(self) -> int:
        """Kafka's DefaultRecordBatch.decrementSequence(lastSequence, offsetDelta)."""
        if self.last_sequence < self.offset_delta:
            return _INT32_MAX - (self.offset_delta - self.last_sequence) + 1
        return self.last_sequence - self.offset_delta


def _used(entries: Iterator[tuple[int, ...]], offset_at: int) -> Iterator[tuple[int, ...]]:
    """Entries up to the first zero one: an index is preallocated with zeros, and Kafka stops at
    an entry whose relative offset is 0 after the first (the file may be 10 MB of them)."""
    for i, entry in enumerate(entries):
        if i > 0 and entry[offset_at] == 0:
            return
        yield entry


def read_offset_index(data: bytes, base_offset: int) -> list[OffsetEntry]:
    """The entries in use (Kafka's dump stops at the first zero entry)."""
    whole = data[: len(data) // OFFSET_ENTRY.size * OFFSET_ENTRY.size]
    return [OffsetEntry(base_offset + rel, pos) for rel, pos in _used(OFFSET_ENTRY.iter_unpack(whole), 0)]


def read_time_index(data: bytes, base_offset: int) -> list[TimeEntry]:
    whole = data[: len(data) // TIME_ENTRY.size * TIME_ENTRY.size]
    return [TimeEntry(ts, base_offset + rel) for ts, rel in _used(TIME_ENTRY.iter_unpack(whole), 1)]


def entry_count(data: bytes, entry: struct.Struct) -> int:
    """Kafka's ``index.entries`` for a file opened read-only: its whole entries, zeros included."""
    return len(data) // entry.size


def offset_index_sanity(data: bytes, base_offset: int, path: Path) -> None:
    """Kafka's OffsetIndex.sanityCheck: raises LogFileError with Kafka's message."""
    n = entry_count(data, OFFSET_ENTRY)
    if n:
        last = base_offset + OFFSET_ENTRY.unpack_from(data, (n - 1) * OFFSET_ENTRY.size)[0]
        if last < base_offset:
            raise LogFileError(f"Corrupt index found, index file ({path}) has non-zero size but the last offset is "
                               f"{last} which is less than the base offset {base_offset}")  # fmt: skip
    if len(data) % OFFSET_ENTRY.size:
        raise LogFileError(f"Index file {path} is corrupt, found {len(data)} bytes which is neither positive nor a multiple of 8")


def time_index_sanity(data: bytes, base_offset: int, path: Path) -> None:
    """Kafka's TimeIndex.sanityCheck (on every entry the file holds, zeros included)."""
    n = entry_count(data, TIME_ENTRY)
    if n:
        first_ts, _ = TIME_ENTRY.unpack_from(data, 0)
        last_ts, last_rel = TIME_ENTRY.unpack_from(data, (n - 1) * TIME_ENTRY.size)
        if last_ts < first_ts:
            raise LogFileError(f"Corrupt time index found, time index file ({path}) has non-zero size but the last "
                               f"timestamp is {last_ts} which is less than the first timestamp {first_ts}")  # fmt: skip
        if base_offset + last_rel < base_offset:
            raise LogFileError(f"Corrupt time index found, time index file ({path}) has non-zero size but the last "
                               f"offset is {base_offset + last_rel} which is less than the first offset {base_offset}")  # fmt: skip
    if len(data) % TIME_ENTRY.size:
        raise LogFileError(f"Time index file {path} is corrupt, found {len(data)} bytes which is neither positive nor a multiple of 12")


def index_lookup(entries: list[OffsetEntry], offsets: list[int], target: int) -> int:
    """The position of the largest indexed offset <= target (OffsetIndex.lookup), else 0;
    ``offsets`` are the entries' offsets, in order."""
    i = bisect_right(offsets, target)
    return entries[i - 1].position if i else 0


def first_batch_last_offset(log: bytes, position: int, max_bytes: int) -> int | None:
    """The last offset of the batch at ``position`` (Kafka: ``slice(position, maxMessageSize)``'s first batch)."""
    for item in SegmentScan(log[position : position + max_bytes]):
        return getattr(getattr(item, "batch", None), "last_offset", None)
    return None


def read_txn_index(data: bytes) -> list[AbortedTxn]:
    whole = len(data) // ABORTED_TXN.size * ABORTED_TXN.size
    entries = [AbortedTxn(*e) for e in ABORTED_TXN.iter_unpack(data[:whole])]
    if whole != len(data):
        raise LogFileError(f"transaction index ends in {len(data) - whole} bytes that are not a whole entry")
    return entries


def read_producer_snapshot(data: bytes) -> list[ProducerEntry]:
    """ProducerStateManager.readSnapshot; raises LogFileError with Kafka's CorruptSnapshotException message."""
    if len(data) < SNAPSHOT_HEADER.size + 4:
        raise LogFileError(f"Snapshot failed schema validation: {len(data)} bytes is too short for a producer snapshot")
    version, stored = SNAPSHOT_HEADER.unpack_from(data)
    if version != SNAPSHOT_VERSION:
        raise LogFileError(f"Snapshot contained an unknown file version {version}")
    computed = crc32c(data[SNAPSHOT_HEADER.size :])
    if stored != computed:
        raise LogFileError(f"Snapshot is corrupt (CRC is no longer valid). Stored crc: {stored}. Computed crc: {computed}")
    (count,) = struct.unpack_from(">i", data, SNAPSHOT_HEADER.size)
    start = SNAPSHOT_HEADER.size + 4
    if count < 0 or start + count * SNAPSHOT_ENTRY.size > len(data):
        raise LogFileError(f"Snapshot failed schema validation: {count} entries do not fit {len(data)} bytes")
    return [ProducerEntry(*SNAPSHOT_ENTRY.unpack_from(data, start + i * SNAPSHOT_ENTRY.size)) for i in range(count)]


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class OffsetCheckpointEntry(NamedTuple):
    topic: str
    partition: int
    offset: int


def read_checkpoint(text: str, fields: int) -> list[list[str]]:
    """Kafka's CheckpointFile text: version line (0), count line, then ``count`` lines of
    ``fields`` space-separated values; raises LogFileError as Kafka's reader would refuse it."""
    lines = text.splitlines()
    if len(lines) < 2:
        raise LogFileError("a checkpoint file starts with a version line and a count line")
    if lines[0].strip() != "0":
        raise LogFileError(f"unrecognised checkpoint version {lines[0].strip()!r}")
    try:
        count = int(lines[1])
    except ValueError:
        raise LogFileError(f"the entry count {lines[1]!r} is not a number") from None
    entries = [line.split() for line in lines[2:] if line.strip()]
    if len(entries) != count or any(len(e) != fields for e in entries):
        raise LogFileError(f"expected {count} entries of {fields} values, found {[' '.join(e) for e in entries]}")
    return entries


def read_leader_epoch_checkpoint(text: str) -> list[EpochEntry]:
    try:
        return [EpochEntry(int(e), int(o)) for e, o in read_checkpoint(text, 2)]
    except ValueError as e:
        raise LogFileError(f"leader-epoch-checkpoint: {e}") from None


def read_offset_checkpoint(text: str) -> list[OffsetCheckpointEntry]:
    try:
        return [OffsetCheckpointEntry(t, int(p), int(o)) for t, p, o in read_checkpoint(text, 3)]
    except ValueError as e:
        raise LogFileError(f"offset checkpoint: {e}") from None
