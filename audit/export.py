"""Write one audit snapshot as Parquet: partitioned by mirror and date, manifest last.

``export_snapshot`` takes the row model (``AuditSnapshot``); ``export_tables`` takes Arrow
tables directly, for producers that already hold columns (the bench writes 10M rows this
way). Both go through the same normalisation: column check, casts, state names from
``MirrorState``, secret redaction, and the incremental cut of the transition history.

Guarantees:

- *one point in the log*: every table of a snapshot comes from one ``AuditSnapshot`` at one
  metadata offset; transitions stamped beyond it are refused; the manifest (written last,
  atomically) lists exactly the files of the snapshot, and readers go by manifests only;
- *incremental*: transitions at or before the previous snapshot's offset are dropped, so the
  history is appended once. A producer that tracks its own read position in its input (the
  worker's timed export, ``positions``) hands over only the transitions read since the previous
  snapshot, and its position goes into the manifest, written in the same rename; exporting an
  offset that already has a manifest is a no-op, so a worker restarted mid-export can simply
  export again;
- *no secrets*: see ``audit.redact``; redaction happens here, before any byte is written.

One writer per store at a time: two that race (a worker losing table partition 0 while another
gains it) both build a snapshot after the same one, but only the first claims the place after it
(``layout.claim_next``); the other's files are removed and it gets ``ExportRaceError``, so no
transition is exported twice.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Final

import msgspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from audit import layout, rollup
from audit.model import (
    ALL_TABLES,
    DERIVED,
    ROLLUP_TABLES,
    SCHEMA_VERSION,
    STATE_NAME_COLUMNS,
    TABLE_VERSIONS,
    TABLES,
    AuditSnapshot,
    snapshot_to_arrow,
    state_name,
)
from audit.redact import redact_by_name, scrub_column

ROW_GROUP_ROWS: Final = 1 << 20  # ~1M rows: several Spark splits per big file
FREE_TEXT: Final = {"partition_states": ("error_message",), "transitions": ("reason",)}

# int8 state byte + 128 -> name; a 256-entry dictionary, so names are never materialised per row.
_STATE_NAMES: Final = pa.array([state_name(b - 128) for b in range(256)], pa.string())


class ExportError(ValueError):
    """The snapshot cannot be exported as given (bad columns, offsets out of order, ...)."""


class ExportRaceError(ExportError):
    """Another writer exported the next snapshot of the store first; this one wrote nothing."""


class ExportResult(msgspec.Struct, frozen=True):
    manifest: layout.Manifest
    manifest_path: str
    rows: int
    seconds: float
    skipped: bool  # a complete snapshot at this offset already existed


def export_snapshot(
    snapshot: AuditSnapshot,
    out_dir: str | os.PathLike[str],
    *,
    compression: str = "snappy",
    positions: Mapping[str, int] | None = None,
) -> ExportResult:
    """Export the row model; see ``export_tables``."""
    return export_tables(
        snapshot_to_arrow(snapshot),
        metadata_offset=snapshot.metadata_offset,
        taken_at_ms=snapshot.taken_at_ms,
        out_dir=out_dir,
        schema_version=snapshot.schema_version,
        compression=compression,
        positions=positions,
    )


def export_tables(
    tables: Mapping[str, pa.Table],
    *,
    metadata_offset: int,
    taken_at_ms: int,
    out_dir: str | os.PathLike[str],
    schema_version: int = SCHEMA_VERSION,
    compression: str = "snappy",
    threads: int | None = None,
    positions: Mapping[str, int] | None = None,
) -> ExportResult:
    """Write one snapshot of ``tables`` (names from ``model.TABLES``; missing ones are empty).

    ``positions``: the transitions are exactly the new ones since the previous snapshot (read up
    to these input positions), so none is cut by offset: an idle metadata log keeps its offset
    while partitions still change state (PREPARING -> MIRRORING, FAILED retries).
    """
    started = time.perf_counter()
    root = Path(out_dir)
    if schema_version != SCHEMA_VERSION:
        raise ExportError(f"schema version {schema_version} is not the exporter's {SCHEMA_VERSION}")
    unknown = set(tables) - set(TABLES)
    if unknown:
        raise ExportError(f"unknown tables: {sorted(unknown)}; known: {sorted(TABLES)}")

    existing = layout.list_manifests(root)
    # A writer that crashed between its claim and its manifest: publish what it claimed.
    while (claimed := layout.unpublished_claim(root, existing[-1] if existing else None)) is not None:
        layout.write_manifest(root, claimed)
        existing.append(claimed)
    key = (metadata_offset, taken_at_ms)
    for m in existing:
        if (m.metadata_offset, m.taken_at_ms) == key:
            return ExportResult(m, str(layout.manifest_path(root, *key)), 0, 0.0, True)
    last = existing[-1] if existing else None
    previous = last.metadata_offset if last else None
    if last is not None and (last.metadata_offset, last.taken_at_ms) > key:
        raise ExportError(
            f"snapshot (metadata offset {metadata_offset}, taken at {taken_at_ms}) is older than the "
            f"latest exported one ({last.metadata_offset}, {last.taken_at_ms}); export in log order"
        )

    normalized: dict[str, pa.Table] = {}
    redacted = 0
    for name in TABLES:
        table, n_redacted = _normalize(name, tables.get(name))
        redacted += n_redacted
        if name == "transitions":
            table = _cut_transitions(table, metadata_offset, None if positions is not None else previous)
        normalized[name] = table
    # Beside the history it appends, its rollups (audit.rollup): what the big queries read.
    for name, build in rollup.ROLLUPS.items():
        normalized[name] = _rollup_columns(name, build(normalized["transitions"]))
    for name, (source, build) in rollup.SNAPSHOT_ROLLUPS.items():
        normalized[name] = _rollup_columns(name, build(normalized[source]))

    date = layout.utc_date(taken_at_ms)
    _remove_partial(root, metadata_offset, taken_at_ms)
    jobs = [
        (name, mirror, part)
        for name, table in normalized.items()
        for mirror, part in _split_by_mirror(table)
    ]
    workers = threads or min(4, os.cpu_count() or 1)

    def write(job: tuple[str, str, pa.Table]) -> tuple[str, layout.TableFile]:
        name, mirror, part = job
        rel = f"{layout.partition_dir(name, mirror, date, *key)}/part-00000.parquet"
        size = _write_parquet(root / rel, part.drop_columns(["mirror"]), compression)
        return name, layout.TableFile(rel, mirror, part.num_rows, size)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        written = list(pool.map(write, jobs))

    entries: dict[str, layout.TableEntry] = {}
    for name in ALL_TABLES:
        files = sorted((f for n, f in written if n == name), key=lambda f: f.path)
        entries[name] = layout.TableEntry(sum(f.rows for f in files), files, _version(name, normalized[name]))
    rows = sum(e.rows for n, e in entries.items() if n in TABLES)  # rows handed in, not rollups
    manifest = layout.Manifest(
        schema_version=schema_version,
        metadata_offset=metadata_offset,
        taken_at_ms=taken_at_ms,
        taken_at=layout.iso_utc(taken_at_ms),
        date=date,
        previous_metadata_offset=previous,
        previous_taken_at_ms=last.taken_at_ms if last else None,
        mirrors=sorted({f.mirror for _, f in written}),
        tables=entries,
        redacted_values=redacted,
        export_seconds=round(time.perf_counter() - started, 6),
        positions=dict(positions or {}),
    )
    if not layout.claim_next(root, last, manifest):
        winner = layout.read_manifest(layout.claim_path(root, last))
        if (winner.metadata_offset, winner.taken_at_ms) != key:  # the same key: the same files, theirs
            _remove_partial(root, metadata_offset, taken_at_ms)
        raise ExportRaceError(f"another writer exported the snapshot after ({previous}, "
                              f"{last.taken_at_ms if last else None}) to {root} first; nothing written")  # fmt: skip
    path = layout.write_manifest(root, manifest)  # last: this makes the snapshot visible
    return ExportResult(manifest, str(path), rows, time.perf_counter() - started, False)


# ---------------------------------------------------------------------------------------------


def _normalize(name: str, table: pa.Table | None) -> tuple[pa.Table, int]:
    """Check and cast the columns, derive the state names, redact. Returns (table, redactions)."""
    schema = TABLES[name]
    required = [f.name for f in schema if f.name not in DERIVED]
    if table is None:
        table = pa.table({n: pa.array([], schema.field(n).type) for n in required})
    missing = [n for n in required if n not in table.column_names]
    extra = [n for n in table.column_names if n not in schema.names]
    if missing or extra:
        raise ExportError(f"table {name}: missing columns {missing}, unknown columns {extra}")

    columns: dict[str, pa.ChunkedArray] = {}
    for fname in required:
        field = schema.field(fname)
        col = table.column(fname)
        if not field.nullable and col.null_count:
            raise ExportError(f"table {name}: column {fname} has {col.null_count} nulls")
        columns[fname] = _cast(col, field.type)

    redacted = 0
    for fname in FREE_TEXT.get(name, ()):
        columns[fname] = scrub_column(columns[fname])
    if name == "config_drift":
        for vname in ("source_value", "dest_value"):
            columns[vname], mask = redact_by_name(columns["config_name"], columns[vname])
            redacted += int(pc.sum(pc.and_(mask, pc.is_valid(table.column(vname)))).as_py() or 0)
    elif name == "mirror_configs":
        columns["config_value"], mask = redact_by_name(columns["config_name"], columns["config_value"])
        columns["redacted"] = pc.or_(columns["redacted"], mask)
        redacted += int(pc.sum(mask).as_py() or 0)

    out: dict[str, pa.ChunkedArray | pa.Array] = {}
    for field in schema:
        if field.name in columns:
            out[field.name] = columns[field.name]
        else:  # a state name column
            byte_col = next(k for k, v in STATE_NAME_COLUMNS.items() if v == field.name)
            out[field.name] = _state_names(columns[byte_col])
    return pa.table(out), redacted


def _rollup_columns(name: str, table: pa.Table) -> pa.Table:
    """A rollup in its schema's column order, with the state names."""
    out: dict[str, pa.ChunkedArray | pa.Array] = {}
    for field in ROLLUP_TABLES[name]:
        if field.name in table.column_names:
            out[field.name] = _cast(table.column(field.name), field.type)
        else:
            byte_col = next(k for k, v in STATE_NAME_COLUMNS.items() if v == field.name)
            out[field.name] = _state_names(table.column(byte_col))
    return pa.table(out)


def _version(name: str, table: pa.Table) -> int:
    """The table's version, or 1 where its numeric topic key is missing (a topic ID not a UUID)."""
    if name == "failover_runs" and table.column("topic_id_msb").null_count:
        return 1
    return TABLE_VERSIONS.get(name, 1)


def _cast(col: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    if col.type == target:
        return col
    if pa.types.is_string(target) and pa.types.is_dictionary(col.type):
        if pa.types.is_string(col.type.value_type):
            return col  # dictionary strings are written as Parquet strings anyway, and faster
    return col.cast(target)  # safe cast: an out-of-range value raises


def _state_names(states: pa.ChunkedArray) -> pa.ChunkedArray:
    chunks = []
    for chunk in states.chunks:
        idx = pc.add(chunk.cast(pa.int16()), pa.scalar(128, pa.int16()))
        chunks.append(pa.DictionaryArray.from_arrays(idx, _STATE_NAMES))
    if not chunks:
        return pa.chunked_array([], pa.dictionary(pa.int16(), pa.string()))
    return pa.chunked_array(chunks)


def _cut_transitions(table: pa.Table, offset: int, previous: int | None) -> pa.Table:
    offs = table.column("metadata_offset")
    if table.num_rows:
        newest = pc.max(offs).as_py()
        if newest > offset:
            raise ExportError(
                f"transition at metadata offset {newest} is beyond the snapshot's offset {offset}: "
                "one snapshot must not mix two points of the log"
            )
    if previous is None or table.num_rows == 0:
        return table
    return table.filter(pc.greater(offs, pa.scalar(previous, pa.int64())))


def _split_by_mirror(table: pa.Table) -> list[tuple[str, pa.Table]]:
    if table.num_rows == 0:
        return []
    col = table.column("mirror")
    if not pa.types.is_dictionary(col.type):
        col = pc.dictionary_encode(col)
    chunks = col.chunks
    dict_values = chunks[0].dictionary
    if any(not c.dictionary.equals(dict_values) for c in chunks[1:]):
        col = col.unify_dictionaries()
        chunks = col.chunks
        dict_values = chunks[0].dictionary if chunks else dict_values
    indices = pa.chunked_array([c.indices for c in chunks])
    counts = pc.value_counts(indices)
    present = [int(i) for i in counts.field("values").to_pylist()]
    if len(present) == 1:
        return [(str(dict_values[present[0]].as_py()), table)]
    return [
        (str(dict_values[i].as_py()), table.filter(pc.equal(indices, pa.scalar(i, indices.type))))
        for i in sorted(present, key=lambda i: str(dict_values[i].as_py()))
    ]


def _write_parquet(path: Path, table: pa.Table, compression: str) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(
        table,
        tmp,
        compression=compression,
        row_group_size=ROW_GROUP_ROWS,
        write_statistics=True,
    )
    os.replace(tmp, path)  # a Parquet file is whole or absent; the manifest still decides
    return path.stat().st_size


def _remove_partial(root: Path, offset: int, taken_at_ms: int) -> None:
    """Files of an export that crashed before its manifest: not visible, but not worth keeping."""
    for table in ALL_TABLES:
        base = root / table
        if base.is_dir():
            for d in base.glob(f"mirror=*/date=*/snapshot_offset={offset}/taken_at_ms={taken_at_ms}"):
                shutil.rmtree(d, ignore_errors=True)
