"""``--stop --consistent-cut`` at the controller (issue #26, part 3): the cut is planned, the
stop's records carry it.

Before a StopMirrorTopics with ConsistentCut is appended, the controller runs the very dry run
of that stop (``predict`` with ConsistentCut: ``coordinator.cut.plan_cut`` on fresh reads
of both clusters) and either refuses the stop with the planner's error (nothing is appended) or
puts T and each partition's cut offset into the stop's MirrorTopicStateChangeRecords. The
workers learn the cut only by replaying those records (``coordinator.delta``); the workflow
truncates to it (``coordinator.workflows.stop``, STOP_CUT). The dry run and the stop share one
code path, so what ``--dry-run`` printed is what the stop cuts, unless a log moved in between.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Sequence
from typing import Any

import msgspec

from coordinator import admin
from coordinator.image import MetadataImage, TopicCut
from coordinator.states import DesiredState
from records.framing import ApiMessageAndVersion
from records.registry import SchemaSet
from coordinator.impact import StopImpact
from streams.admin.preview import (PreviewPorts, Refused, StopAsPreview, StopPrediction, impact_response, predict,
                                   preview_rows)

log = logging.getLogger(__name__)


async def plan_stop_cut(image: MetadataImage, body: Any, principal: admin.Principal, states: Any,
                        ports: PreviewPorts | None, schemas: SchemaSet,
                        ) -> tuple[dict[uuid.UUID, TopicCut], StopPrediction] | Refused:  # fmt: skip
    """The cut of a StopMirrorTopics (ConsistentCut), per topic ID, and the stop's prediction at
    that cut (one dry run gives both); or the dry run's refusal, which is the stop's. Logged as
    the stop's impact. Not bounded as a plain stop's prediction is: the cut needs its plan."""
    preview = StopAsPreview(body.mirror_name, [t.topic_name for t in body.topics], list(body.patterns),
                            consistent_cut=True)  # fmt: skip
    got = await predict(image, preview, principal, states, ports, schemas)
    if isinstance(got, Refused):
        log.warning("consistent cut of %s refused: %s", body.mirror_name, got.message)
        return got
    impact, names, selected, now_ms, plan = got
    assert isinstance(impact, StopImpact)
    response = impact_response(schemas, impact, names, selected, False, plan)
    cuts: dict[uuid.UUID, TopicCut] = {}
    for t in response.topics:
        topic = image.topics.get_by_name(t.name)
        if t.error_code or topic is None:
            continue
        cuts[topic.topic_id] = TopicCut(response.cut_timestamp,
                                        tuple(sorted((p.partition_index, p.cut_offset) for p in t.partitions)))  # fmt: skip
    for row in preview_rows(response):
        log.info("failover impact %s", json.dumps({"mirror": body.mirror_name, "cut_timestamp": response.cut_timestamp,
                                                   **row}, sort_keys=True))  # fmt: skip
    log.info("failover impact of %s: %s", body.mirror_name, response.verdict)
    return cuts, StopPrediction(impact, now_ms)


def attach_cuts(records: Sequence[ApiMessageAndVersion], cuts: dict[uuid.UUID, TopicCut],
                schemas: SchemaSet) -> list[ApiMessageAndVersion]:  # fmt: skip
    """The stop's records, each STOP of a cut topic carrying its cut (tagged fields)."""
    part = schemas.nested("MirrorTopicStateChangeRecord", "CutPartition")
    out = []
    for r in records:
        m: Any = r.message
        cut = cuts.get(getattr(m, "topic_id", None)) if hasattr(m, "cut_partitions") else None
        if cut is not None and m.desired_state == DesiredState.STOP:
            m = msgspec.structs.replace(m, cut_timestamp=cut.timestamp,
                                        cut_partitions=[part(partition_index=p, cut_offset=o) for p, o in cut.offsets])  # fmt: skip
            r = ApiMessageAndVersion(m, r.version, r.api_key)
        out.append(r)
    return out
