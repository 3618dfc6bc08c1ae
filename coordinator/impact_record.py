"""A stop's impact record (issue #26): the prediction in the metadata log, the outcome beside it.

The controller appends a ``MirrorFailoverImpactRecord`` with a stop's own records: the impact
preview (``coordinator.impact``) of that very stop, or a record that says why it is missing.
Replay keeps, per topic, its latest stop's prediction (``TopicPrediction``) in the image, with
the metadata offset of the record it came from; a snapshot writes it back with that offset
(``RecordOffset``), so a worker that starts from a snapshot still names the record.

The worker writes what the stop did (``StopOutcome``) beside the prediction in ``__mirror_state``
(``impact_value``: record type 3), with the stop's own state writes. Pure: no I/O, no clock.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

import msgspec

from records.registry import SchemaSet

RECORD = "MirrorFailoverImpactRecord"
VALUE = "MirrorFailoverImpactValue"


class PredictedAbort(msgspec.Struct, frozen=True, gc=False):
    producer_id: int
    producer_epoch: int
    first_offset: int
    record_count: int = 0


class PredictedGroup(msgspec.Struct, frozen=True, gc=False):
    group_id: str
    group_type: str
    source_committed: int | None
    synced: int
    reread: int | None


class PartitionPrediction(msgspec.Struct, frozen=True, gc=False):
    partition: int
    dest_leo: int
    source_hw: int | None  # None: unknown
    lost_records: int | None
    oldest_lost_age_ms: int | None
    aborts: tuple[PredictedAbort, ...] = ()
    groups: tuple[PredictedGroup, ...] = ()


class TopicPrediction(msgspec.Struct, frozen=True, gc=False):
    """One topic's share of a stop's ``MirrorFailoverImpactRecord`` (``offset``: that record's)."""

    topic_id: uuid.UUID
    mirror_name: str
    offset: int
    predicted_at_ms: int
    missing_reason: str | None = None
    source_available: bool = True
    partitions: tuple[PartitionPrediction, ...] = ()
    active_groups: tuple[str, ...] = ()

    def partition(self, p: int) -> PartitionPrediction | None:
        return next((x for x in self.partitions if x.partition == p), None)


class SyncedGroup(msgspec.Struct, frozen=True, gc=False):
    group_id: str
    offset: int


class StopOutcome(msgspec.Struct, frozen=True, gc=False):
    """What one partition's stop did: known in steps, so each field has a 'not yet' value."""

    stop_offset: int = -1
    aborts: tuple[PredictedAbort, ...] = ()  # record_count is not known of an outcome: 0
    synced_groups: tuple[SyncedGroup, ...] = ()
    lost_records: int | None = None  # None: the source did not say
    completed_at_ms: int | None = None  # None: not STOPPED yet


def _n(value: int | None) -> int:
    return -1 if value is None else value


def _u(value: int) -> int | None:
    return None if value < 0 else value


def impact_record(schemas: SchemaSet, mirror_name: str, topic_ids: Iterable[uuid.UUID], now_ms: int,
                  impact: Any, missing_reason: str | None = None) -> msgspec.Struct:  # fmt: skip
    """The record a stop of ``topic_ids`` appends: ``impact``'s figures (a ``coordinator.impact.StopImpact``,
    not imported: the image imports this module), or None and the reason."""
    rec = schemas.struct(RECORD)
    topic_cls, part_cls = schemas.nested(RECORD, "TopicImpact"), schemas.nested(RECORD, "PartitionImpact")
    txn_cls, group_cls = schemas.nested(RECORD, "AbortedTransaction"), schemas.nested(RECORD, "GroupImpact")
    ids = sorted(set(topic_ids), key=lambda u: u.int)
    if impact is None:
        return rec(mirror_name=mirror_name, predicted_at_ms=now_ms, missing_reason=missing_reason or "no prediction",
                   source_available=False, topics=[topic_cls(topic_id=t, partitions=[]) for t in ids], active_groups=[])  # fmt: skip
    groups: dict[Any, list[Any]] = {}
    for g in impact.groups:
        groups.setdefault(g.tp, []).append(group_cls(
            group_id=g.group_id, group_type=g.group_type.value, source_committed_offset=_n(g.source_committed),
            synced_offset=g.synced, re_read_records=_n(g.reread)))  # fmt: skip
    parts: dict[uuid.UUID, list[Any]] = {t: [] for t in ids}
    for p in impact.partitions:
        if p.tp.topic_id not in parts:
            continue  # not a topic of this record
        parts[p.tp.topic_id].append(part_cls(
            partition_index=p.tp.partition, destination_end_offset=p.dest_leo, source_high_watermark=_n(p.source_hw),
            lost_records=_n(p.lost_records), oldest_lost_age_ms=_n(p.oldest_lost_age_ms),
            transactions=[txn_cls(producer_id=t.producer_id, producer_epoch=t.producer_epoch, first_offset=t.first_offset,
                                  record_count=t.record_count) for t in p.aborts],
            groups=sorted(groups.get(p.tp, ()), key=lambda g: g.group_id)))  # fmt: skip
    topics = [topic_cls(topic_id=t, partitions=sorted(ps, key=lambda x: x.partition_index))
              for t, ps in sorted(parts.items(), key=lambda kv: kv[0].int)]  # fmt: skip
    return rec(mirror_name=mirror_name, predicted_at_ms=now_ms, missing_reason=None,
               source_available=impact.source_available, topics=topics, active_groups=sorted(impact.active_groups))  # fmt: skip


def predictions(r: Any, offset: int) -> list[TopicPrediction]:
    """A replayed record, per topic. A snapshot's record names the offset it restates."""
    at = r.record_offset if r.record_offset >= 0 else offset
    out = []
    for t in r.topics:
        parts = tuple(PartitionPrediction(
            p.partition_index, p.destination_end_offset, _u(p.source_high_watermark), _u(p.lost_records),
            _u(p.oldest_lost_age_ms),
            tuple(PredictedAbort(x.producer_id, x.producer_epoch, x.first_offset, x.record_count) for x in p.transactions),
            tuple(PredictedGroup(g.group_id, g.group_type, _u(g.source_committed_offset), g.synced_offset,
                                 _u(g.re_read_records)) for g in p.groups)) for p in t.partitions)  # fmt: skip
        out.append(TopicPrediction(t.topic_id, r.mirror_name, at, r.predicted_at_ms, r.missing_reason,
                                   r.source_available, parts, tuple(r.active_groups)))  # fmt: skip
    return out


def snapshot_record(schemas: SchemaSet, pred: TopicPrediction) -> msgspec.Struct:
    """One topic's prediction written back (a snapshot), naming the offset of its record."""
    rec = schemas.struct(RECORD)
    topic_cls, part_cls = schemas.nested(RECORD, "TopicImpact"), schemas.nested(RECORD, "PartitionImpact")
    txn_cls, group_cls = schemas.nested(RECORD, "AbortedTransaction"), schemas.nested(RECORD, "GroupImpact")
    parts = [part_cls(
        partition_index=p.partition, destination_end_offset=p.dest_leo, source_high_watermark=_n(p.source_hw),
        lost_records=_n(p.lost_records), oldest_lost_age_ms=_n(p.oldest_lost_age_ms),
        transactions=[txn_cls(producer_id=x.producer_id, producer_epoch=x.producer_epoch, first_offset=x.first_offset,
                              record_count=x.record_count) for x in p.aborts],
        groups=[group_cls(group_id=g.group_id, group_type=g.group_type, source_committed_offset=_n(g.source_committed),
                          synced_offset=g.synced, re_read_records=_n(g.reread)) for g in p.groups])
        for p in pred.partitions]  # fmt: skip
    return rec(mirror_name=pred.mirror_name, predicted_at_ms=pred.predicted_at_ms, missing_reason=pred.missing_reason,
               source_available=pred.source_available, topics=[topic_cls(topic_id=pred.topic_id, partitions=parts)],
               active_groups=list(pred.active_groups), record_offset=pred.offset)  # fmt: skip


# ------------------------------------------------------------------------- __mirror_state


_VALUE_CLASSES: dict[int, tuple[SchemaSet, Any, Any, Any]] = {}


def impact_value(schemas: SchemaSet, pred: TopicPrediction | None, partition: int, outcome: StopOutcome) -> msgspec.Struct:
    """The ``MirrorFailoverImpactValue`` of one partition: its prediction (if any) and its outcome."""
    classes = _VALUE_CLASSES.get(id(schemas))
    if classes is None or classes[0] is not schemas:  # looked up once per schema set (a mass stop makes one per partition)
        classes = _VALUE_CLASSES[id(schemas)] = (schemas, schemas.struct(VALUE), schemas.nested(VALUE, "Transaction"),
                                                 schemas.nested(VALUE, "GroupOffset"))  # fmt: skip
    _, cls, txn, grp = classes
    p = pred.partition(partition) if pred is not None else None
    if pred is None:
        missing = "no MirrorFailoverImpactRecord for this stop"
    elif pred.missing_reason is not None:
        missing = pred.missing_reason
    elif p is None:
        missing = "the prediction does not name this partition"
    else:
        missing = None
    fields: dict[str, Any] = {}
    if p is not None:
        fields = dict(
            predicted_end_offset=p.dest_leo, predicted_source_high_watermark=_n(p.source_hw),
            predicted_lost_records=_n(p.lost_records), predicted_oldest_lost_age_ms=_n(p.oldest_lost_age_ms),
            predicted_aborts=[txn(producer_id=a.producer_id, producer_epoch=a.producer_epoch, first_offset=a.first_offset)
                              for a in p.aborts],
            predicted_groups=[grp(group_id=g.group_id, offset=g.synced, re_read_records=_n(g.reread)) for g in p.groups])  # fmt: skip
    return cls(
        metadata_offset=pred.offset if pred is not None else -1,
        predicted_at_ms=pred.predicted_at_ms if pred is not None else -1, missing_reason=missing, **fields,
        completed=outcome.completed_at_ms is not None, completed_at_ms=_n(outcome.completed_at_ms),
        stop_offset=outcome.stop_offset,
        aborts=[txn(producer_id=a.producer_id, producer_epoch=a.producer_epoch, first_offset=a.first_offset)
                for a in outcome.aborts],
        synced_groups=[grp(group_id=g.group_id, offset=g.offset) for g in outcome.synced_groups],
        lost_records=_n(outcome.lost_records))  # fmt: skip


def differences(value: Any) -> list[str]:
    """Where a completed ``MirrorFailoverImpactValue``'s outcome differs from its prediction
    (records lost, aborts, group positions); empty when they agree or there is nothing to compare."""
    if not value.completed or value.missing_reason is not None:
        return []
    out = []
    if value.predicted_lost_records >= 0 and value.lost_records >= 0 and value.predicted_lost_records != value.lost_records:
        out.append("lost_records")
    if value.predicted_end_offset >= 0 and value.stop_offset >= 0 and value.predicted_end_offset != value.stop_offset:
        out.append("stop_offset")
    if sorted((a.producer_id, a.first_offset) for a in value.predicted_aborts) != sorted(
            (a.producer_id, a.first_offset) for a in value.aborts):
        out.append("aborts")
    if value.synced_groups and sorted((g.group_id, g.offset) for g in value.predicted_groups) != sorted(
            (g.group_id, g.offset) for g in value.synced_groups):
        out.append("groups")
    return out

