"""Rollups written beside a snapshot's tables by the export (pure Arrow, no Spark).

Two small tables per snapshot, built from exactly the transitions that snapshot appends, so they
are as incremental as the history itself:

- ``transition_seconds``: one row per (mirror, second, from state, to state): how many, first and
  last time, first metadata offset. ``transition_counts`` and the per-event figures of
  ``failover_timeline`` sum it up, and ``illegal_transitions`` reads the raw history only of
  the (mirror, snapshot) files it names an illegal pair in.
- ``failover_runs``: one row per *run* of one partition's failover/failback transitions, each
  at most ``RUN_GAP_MS`` after the previous one. A run never spans two episodes of any query
  whose episode gap is at least ``RUN_GAP_MS`` (a gap that splits episodes has no event of the
  mirror inside it, so none of the partition either), so ``failover_timeline`` counts partitions
  per episode from runs (about a tenth of the transitions) instead of every transition. Its
  partition key is numeric too (version 2, ``model.TABLE_VERSIONS``): the topic ID's two 64-bit
  halves, so the query hashes three numbers per row and not a 36-character string. Each run also
  says the same partition's previous run's end and next run's start within the snapshot
  (version 3), so the query merges only the runs that may share an episode and counts the
  rest as they are.

A run cut by a snapshot boundary is two rows; the query merges rows of one (episode, partition),
so that only costs a row.

And one from the snapshot's offsets (``SNAPSHOT_ROLLUPS``), a picture like them:

- ``topic_lag``: one row per (mirror, topic): partitions, lagging partitions, total and largest
  lag. ``lag_per_mirror``, ``lag_per_topic`` and the report's lag charts sum it (a row per topic
  where the offsets have one per partition). Snapshots exported before it existed do not list
  it; the queries then read the offsets.
"""

from __future__ import annotations

import uuid
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

from coordinator.states import MirrorState

# Runs join a partition's failover events at most this far apart. Queries with a smaller episode
# gap read the raw transitions instead.
RUN_GAP_MS: Final = 60_000

# Kinds of failover transition, in the order a failover and failback run.
FO_START, FO_DONE, FB_START, PM = range(4)


def failover_kind(frm: int, to: int) -> int | None:
    """-> STOPPING, STOPPING -> STOPPED, STOPPED -> PREPARING, PREPARING -> MIRRORING; else None.
    (The last completes a failback only after a STOPPED -> PREPARING of the same episode.)"""
    S = MirrorState
    if to == S.STOPPING and frm != S.STOPPING:
        return FO_START
    if frm == S.STOPPING and to == S.STOPPED:
        return FO_DONE
    if frm == S.STOPPED and to == S.PREPARING:
        return FB_START
    if frm == S.PREPARING and to == S.MIRRORING:
        return PM
    return None


# (from byte + 128) * 256 + (to byte + 128) -> kind: one take() classifies a whole column.
_KINDS: Final = pa.array(
    [failover_kind(f - 128, t - 128) for f in range(256) for t in range(256)], pa.int8()
)

_I64 = pa.int64()
_MAX: Final = pa.scalar(2**63 - 1, _I64)
_MIN: Final = pa.scalar(-(2**63), _I64)


def _codes(col: pa.ChunkedArray) -> tuple[pa.Array, pa.Array]:
    """(int32 codes, values): equal values, equal codes."""
    if pa.types.is_dictionary(col.type):
        arr = col.unify_dictionaries().combine_chunks()
    else:
        arr = pc.dictionary_encode(col.combine_chunks())
    return arr.indices.cast(pa.int32()), arr.dictionary


def _uuid_halves(values: pa.Array) -> tuple[pa.Array, pa.Array] | None:
    """Topic IDs (distinct values) -> their most and least significant 64 bits, signed as Kafka's
    ``Uuid`` holds them; None if one is not a UUID."""
    msb, lsb = [], []
    for v in values.to_pylist():
        try:
            b = uuid.UUID(v).bytes
        except (TypeError, ValueError):
            return None
        msb.append(int.from_bytes(b[:8], "big", signed=True))
        lsb.append(int.from_bytes(b[8:], "big", signed=True))
    return pa.array(msb, _I64), pa.array(lsb, _I64)


def _pair_code(t: pa.Table) -> pa.Array:
    f = pc.add(t.column("from_state").combine_chunks().cast(pa.int32()), pa.scalar(128, pa.int32()))
    to = pc.add(t.column("to_state").combine_chunks().cast(pa.int32()), pa.scalar(128, pa.int32()))
    return pc.add(pc.multiply(f, pa.scalar(256, pa.int32())), to)


def _neighbours(keys: list[pa.Array], first: pa.Array, last: pa.Array) -> tuple[pa.Array, pa.Array]:
    """Per run (sorted by ``keys``, then time): the previous run's last and the next run's first
    time where that run has the same keys, else null."""
    n = len(first)
    if n == 0:
        return pa.array([], _I64), pa.array([], _I64)
    same = pc.equal(keys[0].slice(1), keys[0].slice(0, n - 1))
    for k in keys[1:]:
        same = pc.and_(same, pc.equal(k.slice(1), k.slice(0, n - 1)))
    none, nulls = pa.nulls(1, _I64), pa.nulls(n - 1, _I64)
    prev_last = pa.concat_arrays([none, pc.if_else(same, last.slice(0, n - 1), nulls)])
    next_first = pa.concat_arrays([pc.if_else(same, first.slice(1), nulls), none])
    return prev_last, next_first


def transition_seconds(t: pa.Table) -> pa.Table:
    """``transitions`` (normalised) -> one row per (mirror, second, from_state, to_state)."""
    m_codes, m_values = _codes(t.column("mirror"))
    sec = pc.divide(t.column("at_ms"), pa.scalar(1000, _I64))  # at_ms >= 0: floor
    g = pa.table(
        {"m": m_codes, "sec": sec, "from_state": t.column("from_state"), "to_state": t.column("to_state"),
         "at_ms": t.column("at_ms"), "mo": t.column("metadata_offset")}  # fmt: skip
    ).group_by(["m", "sec", "from_state", "to_state"], use_threads=False).aggregate(
        [("at_ms", "count"), ("at_ms", "min"), ("at_ms", "max"), ("mo", "min")]
    )
    return pa.table(
        {
            "mirror": pa.DictionaryArray.from_arrays(g.column("m").combine_chunks(), m_values),
            "sec": g.column("sec"),
            "from_state": g.column("from_state"),
            "to_state": g.column("to_state"),
            "transitions": g.column("at_ms_count"),
            "first_ms": g.column("at_ms_min"),
            "last_ms": g.column("at_ms_max"),
            "first_metadata_offset": g.column("mo_min"),
        }
    )


def failover_runs(t: pa.Table) -> pa.Table:
    """``transitions`` (normalised) -> one row per run of a partition's failover transitions."""
    kind = pc.take(_KINDS, _pair_code(t))
    ev = t.filter(pc.is_valid(kind)) if t.num_rows else t
    kind = kind.filter(pc.is_valid(kind)) if t.num_rows else kind
    n = ev.num_rows
    m_codes, m_values = _codes(ev.column("mirror"))
    t_codes, t_values = _codes(ev.column("topic_id"))
    e = pa.table(
        {"m": m_codes, "t": t_codes, "p": ev.column("partition").combine_chunks(), "at": ev.column("at_ms").combine_chunks(),
         "mo": ev.column("metadata_offset").combine_chunks(), "k": kind}  # fmt: skip
    )
    e = e.take(pc.sort_indices(e, sort_keys=[(c, "ascending") for c in ("m", "t", "p", "at")]))
    if n == 0:
        starts = pa.array([], pa.bool_())
    else:
        def changed(c: str) -> pa.Array:
            col = e.column(c).combine_chunks()
            return pc.not_equal(col.slice(1), col.slice(0, n - 1))

        at = e.column("at").combine_chunks()
        gap = pc.greater(pc.subtract(at.slice(1), at.slice(0, n - 1)), pa.scalar(RUN_GAP_MS, _I64))
        later = pc.or_(pc.or_(pc.or_(changed("m"), changed("t")), changed("p")), gap)
        starts = pa.concat_arrays([pa.array([True]), later])
    k = e.column("k")
    at = e.column("at")
    is_pm = pc.equal(k, pa.scalar(PM, pa.int8()))
    g = pa.table(
        {
            "run": pc.cumulative_sum(starts.cast(_I64)),
            "at": at,
            "stop": pc.equal(k, pa.scalar(FO_START, pa.int8())),
            "stopped": pc.equal(k, pa.scalar(FO_DONE, pa.int8())),
            "fb": pc.if_else(pc.equal(k, pa.scalar(FB_START, pa.int8())), at, _MAX),
            "pm": is_pm.cast(_I64),
            "pm_lo": pc.if_else(is_pm, at, _MAX),
            "pm_hi": pc.if_else(is_pm, at, _MIN),
            "pm_mo": pc.if_else(is_pm, e.column("mo"), _MAX),
        }
    ).group_by("run", use_threads=False).aggregate(  # first appearance: run order, as ``starts``
        [("at", "min"), ("at", "max"), ("stop", "any"), ("stopped", "any"), ("fb", "min"), ("pm", "sum"),
         ("pm_lo", "min"), ("pm_hi", "max"), ("pm_mo", "min")]  # fmt: skip
    )
    first = e.filter(starts)

    def unless(c: str, sentinel: pa.Scalar) -> pa.Array:
        col = g.column(c).combine_chunks()
        return pc.if_else(pc.equal(col, sentinel), pa.scalar(None, _I64), col)

    first_t = first.column("t").combine_chunks()
    # The same partition's run before and after it within this snapshot (runs are in partition,
    # then time order): failover_timeline merges only the runs that may share an episode.
    prev_last, next_first = _neighbours([first.column(c).combine_chunks() for c in ("m", "t", "p")],
                                        g.column("at_min").combine_chunks(), g.column("at_max").combine_chunks())
    halves = _uuid_halves(t_values)
    msb, lsb = (pc.take(h, first_t) for h in halves) if halves else (pa.nulls(len(first_t), _I64),) * 2
    return pa.table(
        {
            "mirror": pa.DictionaryArray.from_arrays(first.column("m").combine_chunks(), m_values),
            "topic_id": pa.DictionaryArray.from_arrays(first_t, t_values),
            "topic_id_msb": msb,
            "topic_id_lsb": lsb,
            "partition": first.column("p"),
            "first_ms": g.column("at_min"),
            "last_ms": g.column("at_max"),
            "stopping": g.column("stop_any"),
            "stopped": g.column("stopped_any"),
            "failback_ms": unless("fb_min", _MAX),
            "pm_count": g.column("pm_sum"),
            "pm_first_ms": unless("pm_lo_min", _MAX),
            "pm_last_ms": unless("pm_hi_max", _MIN),
            "pm_first_metadata_offset": unless("pm_mo_min", _MAX),
            "prev_last_ms": prev_last,
            "next_first_ms": next_first,
        }
    )


def topic_lag(offsets: pa.Table) -> pa.Table:
    """``offsets`` (normalised, one snapshot) -> one row per (mirror, topic)."""
    m_codes, m_values = _codes(offsets.column("mirror"))
    t_codes, t_values = _codes(offsets.column("topic"))
    lag = offsets.column("lag").combine_chunks()
    g = pa.table(
        {"m": m_codes, "t": t_codes, "lag": lag, "lagging": pc.greater(lag, pa.scalar(0, _I64)).cast(_I64)}
    ).group_by(["m", "t"], use_threads=False).aggregate(
        [("lag", "count", pc.CountOptions(mode="all")), ("lagging", "sum"), ("lag", "sum"), ("lag", "max")]
    )
    return pa.table(
        {
            "mirror": pa.DictionaryArray.from_arrays(g.column("m").combine_chunks(), m_values),
            "topic": pa.DictionaryArray.from_arrays(g.column("t").combine_chunks(), t_values),
            "partitions": g.column("lag_count"),
            "lagging_partitions": g.column("lagging_sum"),
            "total_lag": g.column("lag_sum"),
            "max_lag": g.column("lag_max"),
        }
    )


# Rollups of the transitions a snapshot appends (history: read from every snapshot).
ROLLUPS: Final = {"transition_seconds": transition_seconds, "failover_runs": failover_runs}
# Rollups of one of a snapshot's pictures: name -> (the table it sums, how).
SNAPSHOT_ROLLUPS: Final = {"topic_lag": ("offsets", topic_lag)}
