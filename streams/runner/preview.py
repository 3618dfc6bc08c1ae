"""The impact preview's reads (``coordinator.impact`` decides): fresh observations of both
clusters, over the same ports the runner uses, and nothing written anywhere.

Only reads are called (list_offsets, fetch, open_transactions, groups, OffsetsForLeaderEpoch,
the LME): a preview must be safe to run at any time, also against a mirror in the middle of a
stop. A source call that fails makes the source's figures unknown; the destination's must answer.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from coordinator.cut import CUT_WINDOW_OFFSETS, CutObservation, CutPlan, CutRefusal, plan_cut
from coordinator.impact import (
    FailbackImpact,
    StopImpact,
    StopPreviewObservation,
    stop_impact,
    truncation_impact,
)
from coordinator.ports import Batch, IsolationLevel, PortError, TopicPartition
from coordinator.workflows.config import MirrorConfig
from coordinator.workflows.prepare import PrepareObservation, truncation_target
from coordinator.workflows.sync_groups import group_selected, name_pattern

log = logging.getLogger(__name__)


def read_batches(port: Any, tp: TopicPartition, start: int, end: int) -> tuple[Batch, ...]:
    """Whole batches covering [start, end), read uncommitted (open transactions included)."""
    out: list[Batch] = []
    offset = start
    while offset < end:
        got = port.fetch(tp, offset, 1 << 20, IsolationLevel.READ_UNCOMMITTED).batches
        if not got:
            break
        out.extend(got)
        offset = got[-1].next_offset
    return tuple(out)


def observe_stop(source: Any, dest: Any, tp: TopicPartition, source_up: bool = True,
                 cut: int | None = None) -> StopPreviewObservation:  # fmt: skip
    """``cut``: a consistent cut's offset: the stop sees the log as ending there, with no
    transaction open (the cut never falls inside one, ``coordinator.cut``)."""
    dest_off = dest.list_offsets(tp)
    if cut is not None:
        dest_off = msgspec.structs.replace(dest_off, leo=cut, hw=min(dest_off.hw, cut), lso=min(dest_off.lso, cut))
    opens = tuple(dest.open_transactions(tp)) if cut is None else ()
    open_batches = read_batches(dest, tp, min(t.first_offset for t in opens), dest_off.leo) if opens else ()
    src, first = _source_ahead(source, tp, dest_off.leo, "preview") if source_up else (None, None)
    return StopPreviewObservation(tp=tp, dest=dest_off, open_transactions=opens, open_batches=open_batches,
                                  source=src, first_unmirrored=first)  # fmt: skip


def preview_stop(source: Any, dest: Any, tps: Sequence[TopicPartition], now_ms: int, config: MirrorConfig,
                 cuts: Mapping[TopicPartition, int] | None = None) -> StopImpact:  # fmt: skip
    """What a stop of ``tps`` would cost now (with ``cuts``: a consistent cut's offsets). Reads only."""
    source_groups = None
    source_offsets: dict[str, Any] = {}
    try:
        inc, exc = name_pattern(config.groups_include), name_pattern(config.groups_exclude)
        source_groups = [g for g in source.list_groups() if group_selected(g.group_id, inc, exc)]
        source_offsets = {g.group_id: source.group_offsets(g.group_id) for g in source_groups}
    except PortError as e:
        log.info("preview: source did not answer its groups: %s", e)
        source_groups, source_offsets = None, {}
    observations = [observe_stop(source, dest, tp, source_up=source_groups is not None,
                                 cut=None if cuts is None else cuts.get(tp)) for tp in tps]  # fmt: skip
    dest_groups = {g.group_id: g for g in dest.list_groups()}
    active = [g for g, d in dest_groups.items() if d.active]
    wanted = dest_groups.keys() if source_groups is None else {g.group_id for g in source_groups} & dest_groups.keys()
    dest_committed = {g: dest.group_offsets(g) for g in sorted(wanted)}
    return stop_impact(observations, now_ms, source_groups=source_groups, source_offsets=source_offsets,
                       dest_active=active, dest_committed=dest_committed,
                       include=config.groups_include, exclude=config.groups_exclude)  # fmt: skip


def preview_failback(source: Any, dest: Any, mirror_name: str, tps: Sequence[TopicPartition]) -> FailbackImpact:
    """What a start of the reverse mirror ``mirror_name`` (``dest`` is the old source) would cut
    from ``dest``: PREPARING's observation, read as ``streams.runner.observers`` reads it."""
    topics = {t.topic_id: t for t in source.describe_topics(sorted({tp.topic_id for tp in tps}))}
    out = []
    for tp in tps:
        src_topic = topics.get(tp.topic_id)
        lme_mirror = (src_topic.mirror_name if src_topic is not None else None) or mirror_name
        dest_off = dest.list_offsets(tp)
        src = source.list_offsets(tp)
        lme = source.last_mirrored_epoch(lme_mirror, tp)
        cut = source.last_mirror_cut(lme_mirror, tp)
        src_end = local_end = None
        if lme is not None:
            src_end = source.end_offset_for_epoch(tp, lme)
            if not src_end.undefined:
                local_end = dest.end_offset_for_epoch(tp, src_end.epoch)
        obs = PrepareObservation(topic_ready=True, dest=dest_off, source_leader_epoch=src.leader_epoch, source_lme=lme,
                                 source_epoch_end=src_end, local_epoch_end=local_end, source_cut=cut)  # fmt: skip
        target = truncation_target(obs)
        first = max(target, dest_off.log_start)
        removed = read_batches(dest, tp, first, dest_off.leo) if first < dest_off.leo else ()
        out.append(truncation_impact(tp, obs, removed))
    return FailbackImpact(tuple(out))


def _source_ahead(source: Any, tp: TopicPartition, dest_leo: int, what: str) -> tuple[Any, Any]:
    """The source's offsets and its first batch past the destination's LEO (None when there is
    none); (None, None) when the source does not answer."""
    try:
        src = source.list_offsets(tp)
        if src.hw <= dest_leo:
            return src, None
        got = source.fetch(tp, max(dest_leo, src.log_start), 1, IsolationLevel.READ_UNCOMMITTED).batches
        return src, (got[0] if got else None)
    except PortError as e:
        log.info("%s: source did not answer for %s: %s", what, tp, e)
        return None, None


def observe_cut(source: Any, dest: Any, tp: TopicPartition, source_up: bool = True) -> CutObservation:
    """The consistent cut's reads of one partition: the destination's tail (from its LSO, or the
    window's start if that is nearer the end), the source's HW and first unmirrored batch."""
    dest_off = dest.list_offsets(tp)
    start = max(dest_off.log_start, min(dest_off.lso, dest_off.leo - CUT_WINDOW_OFFSETS))
    got = read_batches(dest, tp, start, dest_off.leo)
    src, first = _source_ahead(source, tp, dest_off.leo, "cut") if source_up else (None, None)
    # A batch holding the window's start begins before it: the window is where the batches begin.
    window_start = got[0].base_offset if got else start
    return CutObservation(tp=tp, dest=dest_off, window_start=window_start, batches=got, source=src,
                          first_unmirrored=first)  # fmt: skip


def preview_cut(source: Any, dest: Any, tps: Sequence[TopicPartition], source_up: bool = True) -> CutPlan | CutRefusal:
    """The consistent cut a ``--stop --consistent-cut`` of ``tps`` would make now. Reads only."""
    if source_up:
        try:
            source.cluster_id()
        except PortError as e:
            log.info("cut: the source does not answer: %s", e)
            source_up = False
    return plan_cut([observe_cut(source, dest, tp, source_up) for tp in tps])
