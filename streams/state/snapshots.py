"""Metadata-log snapshots on the worker's disk: written every N records or T ms (``SnapshotPolicy``), each a
checkpoint file and its manifest, fsynced and renamed whole, so a restart replays from the latest
snapshot and then the log's tail."""

from __future__ import annotations

import logging
import contextlib
import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

from records import segments
from records.framing import ApiMessageAndVersion, FrameError, MetadataRecordSerde
from streams.state.metadata_serde import INT16, default_serde

log = logging.getLogger(__name__)
SNAPSHOT_SUFFIX = ".checkpoint"
MANIFEST_SUFFIX = ".manifest.json"
_SNAPSHOT_BATCH_RECORDS = 1000


class SnapshotId(NamedTuple):
    end_offset: int  # exclusive: the next log offset to replay
    epoch: int

    @property
    def name(self) -> str:
        return f"{self.end_offset:020d}-{self.epoch:010d}"

    @property
    def last_offset(self) -> int:
        return self.end_offset - 1


class Snapshot(NamedTuple):
    id: SnapshotId
    records: list[ApiMessageAndVersion]
    timestamp_ms: int


class SnapshotError(ValueError):
    pass


def _fsync_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class SnapshotStore:
    """Snapshots of one metadata log in one directory (blocking file I/O: call it off-loop)."""

    def __init__(self, directory: str | os.PathLike[str], serde: MetadataRecordSerde | None = None, keep: int = 3) -> None:
        self.directory = Path(directory)
        self.serde = serde or default_serde()
        self.keep = keep

    def write(self, records: Iterable[ApiMessageAndVersion], last_offset: int, epoch: int, timestamp_ms: int) -> SnapshotId:
        sid = SnapshotId(last_offset + 1, max(epoch, 0))
        self.directory.mkdir(parents=True, exist_ok=True)
        schemas = self.serde.schemas
        header = schemas.struct("SnapshotHeaderRecord")(version=0, last_contained_log_timestamp=timestamp_ms)
        footer = schemas.struct("SnapshotFooterRecord")(version=0)

        def batch(records: list[segments.Record], base: int, attributes: int = 0) -> segments.RecordBatch:
            return segments.build_batch(records, base_offset=base, base_timestamp=timestamp_ms,
                                        partition_leader_epoch=sid.epoch, attributes=attributes)  # fmt: skip

        def control(ctype: segments.ControlType, message: Any, base: int) -> segments.RecordBatch:
            # A control value is its own int16 version, then the body (Kafka's ControlRecordUtils).
            value = INT16.pack(0) + schemas.encode(message, 0)
            return batch([segments.Record(0, 0, segments.control_key(ctype), value)], base, segments.ATTR_CONTROL)

        values = [self.serde.encode(r.message, r.version) for r in records]
        batches = [control(segments.ControlType.SNAPSHOT_HEADER, header, 0)]
        for start in range(0, len(values), _SNAPSHOT_BATCH_RECORDS):
            chunk = values[start : start + _SNAPSHOT_BATCH_RECORDS]
            batches.append(batch([segments.Record(i, 0, None, v) for i, v in enumerate(chunk)], 1 + start))
        batches.append(control(segments.ControlType.SNAPSHOT_FOOTER, footer, 1 + len(values)))
        data = segments.encode_segment(batches)
        _fsync_write(self.directory / (sid.name + SNAPSHOT_SUFFIX), data)
        manifest = {
            "format": 1,
            "end_offset": sid.end_offset,
            "last_offset": sid.last_offset,
            "epoch": sid.epoch,
            "records": len(values),
            "timestamp_ms": timestamp_ms,
            "segment": sid.name + SNAPSHOT_SUFFIX,
            "sha256": hashlib.sha256(data).hexdigest(),
        }
        _fsync_write(self.directory / (sid.name + MANIFEST_SUFFIX), json.dumps(manifest, indent=1).encode())
        self._fsync_dir()
        self.prune()
        return sid

    def _fsync_dir(self) -> None:
        with contextlib.suppress(OSError):
            fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def ids(self) -> list[SnapshotId]:
        """Committed snapshot ids (those with a manifest), oldest first."""
        if not self.directory.is_dir():
            return []
        out = []
        for path in self.directory.glob("*" + MANIFEST_SUFFIX):
            stem = path.name[: -len(MANIFEST_SUFFIX)]
            end, _, epoch = stem.partition("-")
            if end.isdigit() and epoch.isdigit():
                out.append(SnapshotId(int(end), int(epoch)))
        return sorted(out)

    def read(self, sid: SnapshotId) -> Snapshot:
        try:
            manifest = json.loads((self.directory / (sid.name + MANIFEST_SUFFIX)).read_text())
            data = (self.directory / manifest["segment"]).read_bytes()
        except (OSError, ValueError, KeyError) as e:
            raise SnapshotError(f"snapshot {sid.name}: cannot read: {e}") from None
        if hashlib.sha256(data).hexdigest() != manifest.get("sha256"):
            raise SnapshotError(f"snapshot {sid.name}: segment checksum does not match its manifest")
        records: list[ApiMessageAndVersion] = []
        try:
            for batch in segments.decode_segment(data):
                if batch.is_control:
                    continue
                for rec in batch.records:
                    if rec.value is None:
                        raise SnapshotError(f"snapshot {sid.name}: null value at offset {batch.offset_of(rec)}")
                    records.append(self.serde.decode(rec.value))
        except (segments.SegmentError, FrameError) as e:
            raise SnapshotError(f"snapshot {sid.name}: {e}") from None
        if len(records) != manifest.get("records"):
            raise SnapshotError(f"snapshot {sid.name}: {len(records)} records, manifest says {manifest.get('records')}")
        return Snapshot(sid, records, int(manifest.get("timestamp_ms", 0)))

    def latest(self) -> Snapshot | None:
        """The newest snapshot that reads back whole; a damaged one is reported and skipped."""
        for sid in reversed(self.ids()):
            try:
                return self.read(sid)
            except SnapshotError as e:
                log.error("%s; falling back to an older snapshot", e)
        return None

    def prune(self) -> None:
        for sid in self.ids()[: -self.keep] if self.keep > 0 else []:
            for suffix in (MANIFEST_SUFFIX, SNAPSHOT_SUFFIX):  # manifest first: uncommit, then delete
                with contextlib.suppress(FileNotFoundError):
                    (self.directory / (sid.name + suffix)).unlink()


class SnapshotPolicy(NamedTuple):
    """Snapshot after ``max_records`` applied records or ``max_interval_ms``, whichever first."""

    max_records: int = 10_000
    max_interval_ms: int = 3_600_000

    def due(self, records_since: int, ms_since: int) -> bool:
        return records_since >= self.max_records or (records_since > 0 and ms_since >= self.max_interval_ms)


DEFAULT_SNAPSHOT_POLICY = SnapshotPolicy()
