"""The controller's side of a stop's impact record (issue #26), in process: the prediction goes
first in the stop's own append, names only the topics the stop sets to STOP, and a stop with no
prediction still carries a record that says why. Replayed, the append keeps the prediction and
sets the stop, and nothing else."""

from __future__ import annotations

import asyncio
import uuid

from coordinator.delta import MetadataDelta
from coordinator.image import ConfigResourceType
from coordinator.impact import AbortImpact, PartitionImpact, StopImpact
from coordinator.ports import TopicPartition
from coordinator.states import DesiredState
from records.framing import ApiMessageAndVersion
from records.registry import default_schemas
from streams.admin.preview import StopPrediction, predict_stop, with_impact_record

S = default_schemas()
T1, T2, T3 = (uuid.UUID(int=i) for i in (1, 2, 3))


def _amv(record: str, /, **fields: object) -> ApiMessageAndVersion:
    return ApiMessageAndVersion(S.struct(record)(**fields), 0, S.spec(record).api_key)  # type: ignore[arg-type]


def _base() -> list[ApiMessageAndVersion]:
    out = [_amv("ConfigRecord", resource_type=int(ConfigResourceType.CLUSTER_MIRROR), resource_name="m",
                name="bootstrap.servers", value="a:9092")]  # fmt: skip
    for t in (T1, T2, T3):
        out += [_amv("TopicRecord", name=f"t{t.int}", topic_id=t),
                _amv("PartitionRecord", partition_id=0, topic_id=t, replicas=[1], isr=[1], leader=1, leader_epoch=0,
                     partition_epoch=0),
                _amv("MirrorTopicStateChangeRecord", topic_id=t, mirror_name="m", desired_state=int(DesiredState.START))]  # fmt: skip
    return out


def _stop(*topics: uuid.UUID) -> list[ApiMessageAndVersion]:
    return [_amv("MirrorTopicStateChangeRecord", topic_id=t, mirror_name="m", desired_state=int(DesiredState.STOP)) for t in topics]


def _replay(records: list[ApiMessageAndVersion]) -> MetadataDelta:
    d = MetadataDelta()
    for i, r in enumerate(records):
        d.replay(r, i)
    assert d.problems == []
    return d


def test_the_prediction_goes_first_in_the_stops_append_for_the_topics_it_stops_only() -> None:
    impact = StopImpact(tuple(PartitionImpact(TopicPartition(t, 0), 10, 12, 2, 50, (AbortImpact(7, 0, 9, 1),))
                              for t in (T1, T2, T3)))  # fmt: skip
    stop = _stop(T1, T2)
    got = with_impact_record(S, "m", StopPrediction(impact, 1_000), stop)
    assert got[1:] == stop and type(got[0].message).__name__ == "MirrorFailoverImpactRecord"
    assert [t.topic_id for t in got[0].message.topics] == [T1, T2]  # T3 is not stopped by this append
    base = _base()
    image = _replay(base + got).apply()
    assert sorted(image.mirrors.impacts, key=lambda u: u.int) == [T1, T2]
    assert image.mirrors.impacts[T1].offset == len(base) and image.mirrors.impacts[T1].partition(0).lost_records == 2
    assert {t: m.desired_state for t, m in image.mirrors.topics.items()} == {
        T1: DesiredState.STOP, T2: DesiredState.STOP, T3: DesiredState.START}
    # an append with no stop in it carries no prediction
    start = [_amv("MirrorTopicStateChangeRecord", topic_id=T1, mirror_name="m", desired_state=int(DesiredState.START))]
    assert with_impact_record(S, "m", StopPrediction(impact, 1_000), start) == start


def test_a_stop_without_a_prediction_still_carries_a_record_that_says_why() -> None:
    prediction = asyncio.run(predict_stop(None, None, None, {}, None, S))  # type: ignore[arg-type]
    assert prediction.impact is None and "no cluster ports" in (prediction.missing_reason or "")
    got = with_impact_record(S, "m", prediction, _stop(T1))
    image = _replay(_base() + got).apply()
    pred = image.mirrors.impacts[T1]
    assert pred.missing_reason == prediction.missing_reason and pred.partitions == ()
