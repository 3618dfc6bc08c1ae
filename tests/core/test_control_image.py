"""The control plane in the image (issue #36): the active controller and the kept admin requests
replay in every prefix, survive a snapshot, and the oldest requests go first past the bound."""

from __future__ import annotations

import uuid

from coordinator.delta import load_snapshot, replay_log
from coordinator.image import MAX_KEPT_REQUESTS, ActiveController, AppliedRequest, MetadataProvenance
from records.registry import default_schemas

S = default_schemas()
Controller = S.struct("ClusterMirrorControllerRecord")
Request = S.struct("ClusterMirrorRequestRecord")
NoOp = S.struct("NoOpRecord")


def _log(n_requests: int) -> list[tuple[int, object]]:
    records: list[object] = [Controller(controller_id="c1", endpoint="127.0.0.1:9393", epoch=0)]
    records += [Request(request_id=uuid.UUID(int=i + 1), api_key=96, api_version=0, response=bytes([i % 256]))
                for i in range(n_requests)]  # fmt: skip
    records.insert(len(records) // 2, Controller(controller_id="c2", endpoint="127.0.0.1:9394", epoch=1))
    records.append(NoOp())
    return list(enumerate(records))


def test_the_latest_controller_record_names_the_active_one_and_requests_keep_their_answers() -> None:
    image, problems = replay_log(_log(3))
    assert problems == ()
    assert image.control.controller == ActiveController("c2", "127.0.0.1:9394", 1)
    assert list(image.control.requests) == [uuid.UUID(int=i) for i in (1, 2, 3)]
    assert image.control.requests[uuid.UUID(int=2)] == AppliedRequest(96, 0, b"\x01")


def test_every_prefix_then_the_rest_equals_the_whole_log_and_a_snapshot_round_trips() -> None:
    log = _log(6)
    whole, _ = replay_log(log)
    for cut in range(len(log) + 1):
        head, _ = replay_log(log[:cut])
        assert replay_log(log[cut:], head)[0] == whole
    again = load_snapshot(whole.to_records(S), MetadataProvenance(whole.offset, 0))
    assert again.control == whole.control


def test_past_the_bound_the_oldest_requests_go_first_and_a_snapshot_keeps_the_order() -> None:
    image, _ = replay_log(_log(MAX_KEPT_REQUESTS + 5))
    kept = list(image.control.requests)
    assert len(kept) == MAX_KEPT_REQUESTS
    assert kept[0] == uuid.UUID(int=6) and kept[-1] == uuid.UUID(int=MAX_KEPT_REQUESTS + 5)
    again = load_snapshot(image.to_records(S), MetadataProvenance(image.offset, 0))
    assert list(again.control.requests) == kept


def test_an_image_without_control_records_writes_none() -> None:
    image, _ = replay_log([(0, NoOp())])
    names = {type(r.message).__name__ for r in image.to_records(S)}
    assert not names & {"ClusterMirrorControllerRecord", "ClusterMirrorRequestRecord"}
