"""``--stop --dry-run`` / ``--start --dry-run``: the impact preview (issue #26), both ends.

The controller serves PreviewMirrorTopics (``serve_preview``): it selects the topics exactly as
the StopMirrorTopics / StartMirrorTopics it previews would (``coordinator.admin``'s validation,
run and its records dropped, so nothing reaches the metadata log), reads both clusters over the
ports the worker uses (``streams.runner.preview``, reads only) and lets ``coordinator.impact``
decide. The CLI prints the answer (``print_preview``) as a table in ``--describe``'s style, or
JSON, then the verdict; its exit code is ``EXIT_LOSS`` when something would be lost.

Why the controller: the CLI talks only to it (KIP RPCs), and only the coordinator's side knows
how to reach the destination cluster; it opens the mirror's source the way the worker does.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TextIO

import msgspec

from coordinator import admin
from coordinator.image import ClusterMirrorImage, MetadataImage
from coordinator.cut import CutPlan, CutRefusal
from coordinator.impact import FailbackImpact, StopImpact
from coordinator.impact_record import impact_record
from coordinator.ports import PortError, TopicPartition
from coordinator.states import DesiredState, ErrorCode
from coordinator.workflows.config import MirrorConfig
from records.framing import ApiMessageAndVersion
from records.registry import SchemaSet
from streams.runner.preview import preview_cut, preview_failback, preview_stop

log = logging.getLogger(__name__)

EXIT_LOSS = 3  # the preview says the operation would lose records or abort transactions
EXIT_TOPIC_ERROR = 1  # the previewed operation would refuse a topic

# (mirror) -> (source port, destination port); set by whoever runs the controller with cluster ports.
PreviewPorts = Callable[[ClusterMirrorImage], tuple[Any, Any]]


def _selected(image: MetadataImage, body: Any, principal: admin.Principal, states: Any,
              schemas: SchemaSet) -> admin.AdminResponse:  # fmt: skip
    """What the previewed command would act on: its own validation, the records never appended."""
    if body.failback:
        r = admin.start_mirror_topics(image, body.mirror_name, list(body.topics), include_patterns=list(body.patterns),
                                      exclude_patterns=list(body.exclude_patterns), states=states,
                                      principal=principal, schemas=schemas)  # fmt: skip
    else:
        r = admin.stop_mirror_topics(image, body.mirror_name, list(body.topics), patterns=list(body.patterns),
                                     states=states, principal=principal, schemas=schemas)  # fmt: skip
    return r.response


def _response(schemas: SchemaSet, **fields: Any) -> Any:
    return schemas.struct("PreviewMirrorTopicsResponse")(throttle_time_ms=0, **fields)


class Refused(NamedTuple):
    """Why there is no preview: the error the PreviewMirrorTopics response carries."""

    code: int
    message: str


# (impact, topic names by ID, the selection, when, the consistent cut's plan if one was asked for)
Predicted = tuple["StopImpact | FailbackImpact", dict[Any, str], admin.AdminResponse, int, "CutPlan | None"]


async def predict(image: MetadataImage, body: Any, principal: admin.Principal, states: Any, ports: PreviewPorts | None,
                  schemas: SchemaSet, max_partitions: int | None = None) -> Predicted | Refused:  # fmt: skip
    """The impact of ``body``'s operation (``Predicted``), or why not."""
    selected = _selected(image, body, principal, states, schemas)
    if selected.error_code != ErrorCode.NONE:
        return Refused(selected.error_code, selected.error_message or "")
    if ports is None:
        return Refused(ErrorCode.INVALID_REQUEST, "this controller has no cluster ports to preview with (cluster.model.port)")
    mirror = image.mirrors.get(body.mirror_name)
    assert mirror is not None  # the validation refused an unknown mirror
    ok = [t.name for t in selected.topics if t.error_code == ErrorCode.NONE]
    tps: list[TopicPartition] = []
    names: dict[Any, str] = {}
    for name in ok:
        topic = image.topics.get_by_name(name)
        if topic is not None:
            names[topic.topic_id] = name
            tps.extend(TopicPartition(topic.topic_id, p) for p in sorted(topic.partitions))
    want_cut = bool(getattr(body, "consistent_cut", False)) and not body.failback
    if want_cut:
        stopped = sorted(names[t] for t in names
                         if (m := image.mirror_topic(t)) is not None and m.desired_state is DesiredState.STOP)  # fmt: skip
        if stopped:
            return Refused(ErrorCode.INVALID_REQUEST, f"a consistent cut is planned across topics still mirroring; "
                                                      f"already stopped: {', '.join(stopped)}")  # fmt: skip
    if max_partitions is not None and len(tps) > max_partitions:
        return Refused(ErrorCode.INVALID_REQUEST, f"{len(tps)} partitions, more than {max_partitions}")
    try:
        config = MirrorConfig.from_properties(dict(mirror.configs))
    except ValueError:
        config = MirrorConfig()
    try:
        source, dest = ports(mirror)
    except ValueError as e:
        return Refused(ErrorCode.INVALID_REQUEST, f"cannot open the mirror's ports: {e}")
    try:
        now_ms = int(time.time() * 1000)
        plan: CutPlan | CutRefusal | None = None
        if body.failback:
            impact: StopImpact | FailbackImpact = await asyncio.to_thread(preview_failback, source, dest, body.mirror_name, tps)
        else:
            if want_cut:
                plan = await asyncio.to_thread(preview_cut, source, dest, tps)
                if isinstance(plan, CutRefusal):
                    return Refused(plan.error_code, f"no consistent cut: {plan.describe(names)}")
            cuts = None if plan is None else {p.tp: p.cut_offset for p in plan.partitions}
            impact = await asyncio.to_thread(preview_stop, source, dest, tps, now_ms, config, cuts)
    except PortError as e:  # the destination must answer (a failback: both)
        return Refused(ErrorCode.UNKNOWN_SERVER_ERROR, f"preview failed: {e}")
    finally:
        await asyncio.to_thread(_close, source, dest)
    return impact, names, selected, now_ms, plan


async def serve_preview(image: MetadataImage, body: Any, principal: admin.Principal, states: Any,
                        ports: PreviewPorts | None, schemas: SchemaSet, max_partitions: int | None = None) -> msgspec.Struct:  # fmt: skip
    got = await predict(image, body, principal, states, ports, schemas, max_partitions)
    if isinstance(got, Refused):
        return _response(schemas, error_code=int(got.code), error_message=got.message, topics=[])
    impact, names, selected, _, plan = got
    return impact_response(schemas, impact, names, selected, body.failback, plan)


class StopAsPreview(msgspec.Struct, frozen=True):
    """A StopMirrorTopics request read as the PreviewMirrorTopics of the same topics."""

    mirror_name: str
    topics: list[str]
    patterns: list[str]
    exclude_patterns: tuple[str, ...] = ()
    failback: bool = False
    consistent_cut: bool = False


IMPACT_LOG_TIMEOUT_S = 5.0  # the stop waits at most this long for its prediction
# The reads are a few round trips per partition, one after the other: a mass failover goes
# with a record that says the prediction is missing rather than wait for it.
IMPACT_LOG_MAX_PARTITIONS = 2_000


class StopPrediction(NamedTuple):
    """A stop's prediction as the controller made it: the impact, or why there is none."""

    impact: StopImpact | None
    now_ms: int
    missing_reason: str | None = None


async def predict_stop(image: MetadataImage, body: Any, principal: admin.Principal, states: Any,
                       ports: PreviewPorts | None, schemas: SchemaSet) -> StopPrediction:  # fmt: skip
    """Before a StopMirrorTopics is appended: the preview of that very stop, also logged one
    structured line per partition (``failover impact {json}``). Bounded (a slow source must not
    hold a failover up): past the bound, the prediction is missing and says why."""
    now_ms = int(time.time() * 1000)
    if ports is None:
        return StopPrediction(None, now_ms, "this controller has no cluster ports to predict with")
    preview = StopAsPreview(body.mirror_name, [t.topic_name for t in body.topics], list(body.patterns))
    try:
        got = await asyncio.wait_for(predict(image, preview, principal, states, ports, schemas,
                                             IMPACT_LOG_MAX_PARTITIONS), IMPACT_LOG_TIMEOUT_S)  # fmt: skip
    except asyncio.TimeoutError:
        log.warning("failover impact of %s not predicted: no answer within %.0f s", body.mirror_name, IMPACT_LOG_TIMEOUT_S)
        return StopPrediction(None, now_ms, f"no answer within {IMPACT_LOG_TIMEOUT_S:.0f} s")
    if isinstance(got, Refused):
        log.info("failover impact of %s not predicted: %s", body.mirror_name, got.message)
        return StopPrediction(None, now_ms, got.message)
    impact, names, selected, now_ms, _ = got
    assert isinstance(impact, StopImpact)
    response = impact_response(schemas, impact, names, selected, False)
    for row in preview_rows(response):
        log.info("failover impact %s", json.dumps({"mirror": body.mirror_name, **row}, sort_keys=True))
    for g in response.groups:
        log.info("failover impact %s", json.dumps({"mirror": body.mirror_name, "group": g.group_id, "topic": g.topic_name,
                                                   "partition": g.partition_index, "synced_offset": g.synced_offset,
                                                   "re_read_records": _none_json(g.re_read_records)}, sort_keys=True))  # fmt: skip
    log.info("failover impact of %s: %s", body.mirror_name, response.verdict)
    return StopPrediction(impact, now_ms)


def with_impact_record(schemas: SchemaSet, mirror_name: str, prediction: StopPrediction,
                       records: Sequence[ApiMessageAndVersion]) -> list[ApiMessageAndVersion]:  # fmt: skip
    """The stop's records with its ``MirrorFailoverImpactRecord`` first (same append): for the
    topics the stop sets to STOP, so the prediction reaches the workers before the stop does."""
    state_cls = schemas.struct("MirrorTopicStateChangeRecord")
    stopped = [r.message.topic_id for r in records if isinstance(r.message, state_cls)
               and r.message.mirror_name == mirror_name and r.message.desired_state == int(DesiredState.STOP)]  # fmt: skip
    if not stopped:
        return list(records)
    impact = prediction.impact
    if impact is not None:  # only the partitions of the topics it stops
        keep = set(stopped)
        impact = msgspec.structs.replace(impact, partitions=tuple(p for p in impact.partitions if p.tp.topic_id in keep),
                                         groups=tuple(g for g in impact.groups if g.tp.topic_id in keep))  # fmt: skip
    record = impact_record(schemas, mirror_name, stopped, prediction.now_ms, impact, prediction.missing_reason)
    return [ApiMessageAndVersion(record, 0, schemas.spec("MirrorFailoverImpactRecord").api_key), *records]  # type: ignore[arg-type]


def _close(*ports: Any) -> None:
    for port in ports:
        close = getattr(port, "close", None)
        if close is not None:
            try:
                close()
            except Exception:  # noqa: BLE001 - a port that fails to close is dropped anyway
                log.debug("closing a preview port failed", exc_info=True)


def impact_response(schemas: SchemaSet, impact: StopImpact | FailbackImpact, names: dict[Any, str],
                    selected: admin.AdminResponse, failback: bool, plan: CutPlan | None = None) -> Any:  # fmt: skip
    r = "PreviewMirrorTopicsResponse"
    topic_cls, part_cls = schemas.nested(r, "TopicImpact"), schemas.nested(r, "PartitionImpact")
    txn_cls, group_cls = schemas.nested(r, "AbortedTransaction"), schemas.nested(r, "GroupImpact")
    parts: dict[str, list[Any]] = {}
    if isinstance(impact, FailbackImpact):
        for t in impact.partitions:
            parts.setdefault(names[t.tp.topic_id], []).append(part_cls(
                partition_index=t.tp.partition, destination_end_offset=t.leo, truncation_offset=t.target,
                removed_records=t.removed, first_removed_offset=t.first_removed if t.removed else -1,
                newest_removed_timestamp=-1 if t.newest_timestamp is None else t.newest_timestamp, transactions=[]))  # fmt: skip
        groups: list[Any] = []
        active: list[str] = []
        source_up = True
    else:
        for p in impact.partitions:
            cut = plan.of(p.tp) if plan is not None else None
            parts.setdefault(names[p.tp.topic_id], []).append(part_cls(
                partition_index=p.tp.partition, destination_end_offset=cut.leo if cut is not None else p.dest_leo,
                cut_offset=_or(cut and cut.cut_offset), given_up_records=_or(cut and cut.given_up_records),
                newest_given_up_timestamp=_or(cut and cut.newest_given_up_timestamp),
                source_high_watermark=_or(p.source_hw), lost_records=_or(p.lost_records),
                oldest_lost_age_ms=_or(p.oldest_lost_age_ms),
                transactions=[txn_cls(producer_id=t.producer_id, producer_epoch=t.producer_epoch,
                                      first_offset=t.first_offset, record_count=t.record_count) for t in p.aborts]))  # fmt: skip
        groups = [group_cls(group_id=g.group_id, group_type=g.group_type.value, topic_name=names[g.tp.topic_id],
                            partition_index=g.tp.partition, source_committed_offset=_or(g.source_committed),
                            synced_offset=g.synced, re_read_records=_or(g.reread),
                            destination_committed_offset=_or(g.dest_committed)) for g in impact.groups]  # fmt: skip
        groups.sort(key=lambda g: (g.group_id, g.topic_name, g.partition_index))
        active = list(impact.active_groups)
        source_up = impact.source_available
    topics = [topic_cls(name=t.name, error_code=int(t.error_code), error_message=t.error_message,
                        partitions=parts.get(t.name, [])) for t in selected.topics]  # fmt: skip
    verdict, loses = impact.verdict(), impact.loses_something
    if plan is not None:
        given_up = [p for p in plan.partitions if p.given_up_records > 0]
        head = (f"would cut at T={plan.timestamp}, giving up {plan.given_up_records} records on "
                f"{len(given_up)} partitions")  # fmt: skip
        verdict, loses = (f"{head}; {verdict}" if verdict != "would lose nothing" else head), loses or bool(given_up)
    return _response(schemas, error_code=0, error_message=None, failback=failback, source_available=source_up,
                     loses_something=loses, verdict=verdict, topics=topics, groups=groups, active_groups=active,
                     cut_timestamp=plan.timestamp if plan is not None else -1)  # fmt: skip


def _or(value: int | None) -> int:
    return -1 if value is None else value


# ------------------------------------------------------------------------------------ the CLI


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--consistent-cut", action="store_true",
                   help="stop: cut every selected partition at one timestamp T, the latest all have mirrored "
                        "completely (needs LogAppendTime); records after T are given up, and the stop records "
                        "them. With --dry-run: show T and what each partition would give up")  # fmt: skip
    p.add_argument("--dry-run", action="store_true",
                   help="stop/start: change nothing; show what it would cost (records lost and their age, "
                        "transactions aborted, groups re-reading; a failback's truncation). Exit code 0 when "
                        "nothing would be lost, 3 when something would, 1 when a topic would be refused")  # fmt: skip


async def dry_run(admin: Any, mirror: str, names: Sequence[str], patterns: Sequence[str], exclude: Sequence[str],
                  failback: bool, out: TextIO, as_json: bool, consistent_cut: bool = False) -> int:  # fmt: skip
    r: Any = (await admin.preview(mirror, names, patterns=patterns, exclude=exclude, failback=failback,
                                  consistent_cut=consistent_cut)).response  # fmt: skip
    if r.error_code:
        out.write(f"Error: {_error_name(r.error_code)}: {r.error_message}\n")
        return EXIT_TOPIC_ERROR
    return print_preview(out, mirror, r, as_json=as_json)


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"ERROR_{code}"


def _unknown(value: int) -> str:
    return "unknown" if value < 0 else str(value)


def _none(value: int) -> str:
    return "-" if value < 0 else str(value)


def preview_rows(response: Any) -> list[dict[str, Any]]:
    rows = []
    for t in response.topics:
        for p in t.partitions:
            row: dict[str, Any] = {"topic": t.name, "partition": p.partition_index, "destination_end_offset": p.destination_end_offset}
            if response.failback:
                row.update(truncation_offset=p.truncation_offset, removed_records=p.removed_records,
                           first_removed_offset=_none_json(p.first_removed_offset),
                           newest_removed_timestamp=_none_json(p.newest_removed_timestamp))  # fmt: skip
            else:
                if response.cut_timestamp >= 0:
                    row.update(cut_offset=p.cut_offset, given_up_records=p.given_up_records,
                               newest_given_up_timestamp=_none_json(p.newest_given_up_timestamp))  # fmt: skip
                row.update(source_high_watermark=_none_json(p.source_high_watermark), lost_records=_none_json(p.lost_records),
                           oldest_lost_age_ms=_none_json(p.oldest_lost_age_ms),
                           aborted_transactions=[{"producer_id": x.producer_id, "producer_epoch": x.producer_epoch,
                                                  "first_offset": x.first_offset, "record_count": x.record_count}
                                                 for x in p.transactions])  # fmt: skip
            rows.append(row)
    return rows


def _none_json(value: int) -> int | None:
    return None if value < 0 else value


def print_preview(out: TextIO, mirror: str, response: Any, as_json: bool = False, title: str | None = None) -> int:
    """Prints the preview; 0 when nothing would be lost, ``EXIT_LOSS`` when something would, 1 when
    the operation would refuse a topic (its cost is not known)."""
    errors = [t for t in response.topics if t.error_code]
    if as_json:
        doc = {
            "mirror": mirror, "operation": "start" if response.failback else "stop", "dry_run": True,
            "cut_timestamp": _none_json(response.cut_timestamp),
            "source_available": response.source_available, "verdict": response.verdict,
            "loses_something": response.loses_something, "partitions": preview_rows(response),
            "groups": [{"group": g.group_id, "type": g.group_type, "topic": g.topic_name, "partition": g.partition_index,
                        "source_committed_offset": _none_json(g.source_committed_offset),
                        "synced_offset": g.synced_offset, "re_read_records": _none_json(g.re_read_records),
                        "destination_committed_offset": _none_json(g.destination_committed_offset)}
                       for g in response.groups],
            "active_groups": list(response.active_groups),
            "errors": [{"topic": t.name, "error_code": t.error_code, "error_message": t.error_message} for t in errors],
        }  # fmt: skip
        out.write(json.dumps(doc, indent=2) + "\n")
    else:
        _print_table(out, response)
        for t in errors:
            out.write(f"Topic {t.name}: {t.error_message} (error code {t.error_code})\n")
        title = title or f"Dry run of --{'start' if response.failback else 'stop'} on mirror {mirror}"
        out.write(f"{title}: {response.verdict}\n")
    if errors:
        return EXIT_TOPIC_ERROR
    return EXIT_LOSS if response.loses_something else 0


def _table(out: TextIO, header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    for line in [header, *rows]:
        out.write(" ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() + "\n")


def _print_table(out: TextIO, r: Any) -> None:
    if r.failback:
        rows = [[t.name, str(p.partition_index), str(p.destination_end_offset), _none(p.truncation_offset),
                 str(p.removed_records), _none(p.first_removed_offset), _none(p.newest_removed_timestamp)]
                for t in r.topics for p in t.partitions]  # fmt: skip
        _table(out, ["TOPIC", "PARTITION", "LOG-END-OFFSET", "TRUNCATE-TO", "REMOVED-RECORDS", "FIRST-REMOVED",
                     "NEWEST-REMOVED-TIMESTAMP"], rows)  # fmt: skip
        return
    if r.cut_timestamp >= 0:
        out.write(f"Consistent cut at T={r.cut_timestamp}: every kept record is stamped at or before it.\n")
        rows = [[t.name, str(p.partition_index), str(p.destination_end_offset), str(p.cut_offset),
                 str(p.given_up_records), _none(p.newest_given_up_timestamp)] for t in r.topics for p in t.partitions]  # fmt: skip
        _table(out, ["TOPIC", "PARTITION", "DEST-LEO", "CUT-OFFSET", "GIVEN-UP-RECORDS", "NEWEST-GIVEN-UP-TIMESTAMP"], rows)
        out.write("\n")
    rows = [[t.name, str(p.partition_index), _unknown(p.source_high_watermark), str(p.destination_end_offset),
             _unknown(p.lost_records), _unknown(p.oldest_lost_age_ms) if p.lost_records != 0 else "-",
             str(len(p.transactions))] for t in r.topics for p in t.partitions]  # fmt: skip
    _table(out, ["TOPIC", "PARTITION", "SOURCE-HW", "DEST-LEO", "LOST-RECORDS", "OLDEST-LOST-AGE-MS",
                 "ABORTED-TXNS"], rows)  # fmt: skip
    txns = [[t.name, str(p.partition_index), str(x.producer_id), str(x.producer_epoch), str(x.first_offset), str(x.record_count)]
            for t in r.topics for p in t.partitions for x in p.transactions]  # fmt: skip
    if txns:
        out.write("\n")
        _table(out, ["TOPIC", "PARTITION", "PRODUCER-ID", "PRODUCER-EPOCH", "FIRST-OFFSET", "RECORDS"], txns)
    groups = [[g.group_id, g.group_type, g.topic_name, str(g.partition_index), _unknown(g.source_committed_offset),
               str(g.synced_offset), _unknown(g.re_read_records)] for g in r.groups]  # fmt: skip
    if groups:
        out.write("\n")
        _table(out, ["GROUP", "TYPE", "TOPIC", "PARTITION", "SOURCE-COMMITTED", "RESUMES-AT", "RE-READ"], groups)
    for g in r.active_groups:
        out.write(f"Group {g} is active on the destination: not synced.\n")
    if not r.source_available:
        out.write("The source did not answer: its figures are unknown.\n")
