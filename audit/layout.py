"""On-disk layout of the snapshot store and its manifests.

::

    <root>/<table>/mirror=<m>/date=<yyyy-mm-dd>/snapshot_offset=<n>/taken_at_ms=<t>/part-00000.parquet
    <root>/_manifests/snapshot-<n, 20 digits>-<t, 15 digits>.json
    <root>/_manifests/.next-of-<n>-<t>.json   (the claim of the snapshot after n/t; .next-of-none: the first)

A snapshot is identified by its metadata-log offset ``n`` and the time ``t`` it was taken:
the log can stay idle while offsets and lag move, so periodic snapshots may share ``n``.

Hive-style directories, so Spark (or any engine) can prune by mirror, date and snapshot. The
manifest is written last, atomically (temp file, fsync, rename): a snapshot without one is
incomplete and every reader ignores its files. Readers take the file list from the manifest,
never from a directory listing, so one query never mixes two points of the metadata log.
Names starting with ``_`` are skipped by Spark and Hive when a directory is listed.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Final

import msgspec

MANIFEST_DIR: Final = "_manifests"
MANIFEST_FORMAT: Final = "kip1279-audit-snapshot"

# Characters Spark's ExternalCatalogUtils.escapePathName escapes in partition values.
_ESCAPE: Final = frozenset(
    [chr(c) for c in range(0x01, 0x20)] + list("\"#%'*/:=?\\\x7f{[]^")
)


def escape_partition_value(value: str) -> str:
    return "".join(f"%{ord(c):02X}" if c in _ESCAPE else c for c in value)


def utc_date(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%Y-%m-%d")


def iso_utc(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat(timespec="milliseconds")


def partition_dir(table: str, mirror: str, date: str, offset: int, taken_at_ms: int) -> str:
    """Relative directory of one (table, mirror) part of a snapshot."""
    m = escape_partition_value(mirror)
    return f"{table}/mirror={m}/date={date}/snapshot_offset={offset}/taken_at_ms={taken_at_ms}"


def manifest_path(root: Path, offset: int, taken_at_ms: int) -> Path:
    return root / MANIFEST_DIR / f"snapshot-{offset:020d}-{taken_at_ms:015d}.json"


class TableFile(msgspec.Struct, frozen=True):
    path: str  # relative to the store root
    mirror: str
    rows: int
    bytes: int


class TableEntry(msgspec.Struct, frozen=True):
    rows: int
    files: list[TableFile]
    version: int = 1  # of the table's columns (model.TABLE_VERSIONS); older manifests omit it


class Manifest(msgspec.Struct, frozen=True, kw_only=True):
    """What one complete snapshot holds. ``previous_metadata_offset``: where its transitions start."""

    format: str = MANIFEST_FORMAT
    schema_version: int
    metadata_offset: int
    taken_at_ms: int
    taken_at: str
    date: str
    previous_metadata_offset: int | None
    previous_taken_at_ms: int | None
    mirrors: list[str]
    tables: dict[str, TableEntry]
    redacted_values: int
    export_seconds: float = 0.0
    # Where a timed export's transitions end in its input (``__mirror_state`` partition -> next
    # offset); the next export starts there. Empty for snapshots exported by offset.
    positions: dict[str, int] = {}

    def files(self, table: str) -> list[TableFile]:
        entry = self.tables.get(table)
        return list(entry.files) if entry else []


def write_atomic(path: Path, data: bytes) -> None:
    """Temp file in the same directory, fsync, rename, fsync the directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_manifest(root: Path, manifest: Manifest) -> Path:
    path = manifest_path(root, manifest.metadata_offset, manifest.taken_at_ms)
    body: dict[str, Any] = msgspec.to_builtins(manifest)
    write_atomic(path, json.dumps(body, indent=2, sort_keys=True).encode() + b"\n")
    return path


class ManifestError(ValueError):
    pass


def read_manifest(path: Path) -> Manifest:
    try:
        manifest = msgspec.json.decode(path.read_bytes(), type=Manifest)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError) as e:
        raise ManifestError(f"{path}: not a snapshot manifest: {e}") from e
    if manifest.format != MANIFEST_FORMAT:
        raise ManifestError(f"{path}: format {manifest.format!r}, expected {MANIFEST_FORMAT!r}")
    return manifest


def claim_path(root: Path, previous: Manifest | None) -> Path:
    """The one name that the snapshot after ``previous`` (None: the first) may claim."""
    after = "none" if previous is None else f"{previous.metadata_offset:020d}-{previous.taken_at_ms:015d}"
    return root / MANIFEST_DIR / f".next-of-{after}.json"


def claim_next(root: Path, previous: Manifest | None, manifest: Manifest) -> bool:
    """Claims the place after ``previous`` in the chain of snapshots for ``manifest``, before it
    is published: False if another writer has claimed it (two writers racing over one store).
    The claim holds the whole manifest (linked in whole, never half written), so a writer that
    crashes after claiming is rolled forward by the next one (``unpublished_claim``)."""
    path = claim_path(root, previous)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f"{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(json.dumps(msgspec.to_builtins(manifest), indent=2, sort_keys=True).encode() + b"\n")
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)  # atomic and exclusive: the first writer's link wins
        except FileExistsError:
            return False
        return True
    finally:
        Path(tmp).unlink(missing_ok=True)


def unpublished_claim(root: Path, previous: Manifest | None) -> Manifest | None:
    """The snapshot claimed after ``previous`` whose manifest was never written (its writer
    crashed in between); None when there is none."""
    path = claim_path(root, previous)
    if not path.exists():
        return None
    claimed = read_manifest(path)
    return None if manifest_path(root, claimed.metadata_offset, claimed.taken_at_ms).exists() else claimed


def list_manifests(root: Path) -> list[Manifest]:
    """Complete snapshots, oldest first. Temp files (``.snapshot-*.tmp``) are not manifests."""
    mdir = root / MANIFEST_DIR
    if not mdir.is_dir():
        return []
    out = [read_manifest(p) for p in sorted(mdir.glob("snapshot-*.json"))]
    return sorted(out, key=lambda m: (m.metadata_offset, m.taken_at_ms))
