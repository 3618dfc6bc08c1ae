"""What a worker publishes of its syncs (streams.state.sync_status): a report when it changes or every
half sync interval, a tombstone once the worker holds none of the mirror's MIRRORING partitions."""

from __future__ import annotations

import msgspec

from streams.state.sync_status import MirrorSyncs, SyncStatusPublisher, SyncStatusView, report_key

OK = {"consumer_group_offset": 1_000, "share_group_offset": 1_000, "topic_config": 1_000, "acl": 1_000}


def test_reports_on_change_and_every_half_interval_then_a_tombstone() -> None:
    pub = SyncStatusPublisher("w1")
    mirrors = {"a-to-b": MirrorSyncs(3, 10_000, OK), "idle": MirrorSyncs(0, 10_000, {})}
    first = pub.due(1_000, mirrors)
    assert [(n, k) for n, k, _ in first] == [("a-to-b", report_key("a-to-b", "w1"))]
    assert msgspec.json.decode(first[0][2]) == {"mirror": "a-to-b", "worker": "w1", "at_ms": 1_000, "partitions": 3,
                                                "success_ms": OK}  # fmt: skip
    pub.sent(1_000, first)
    assert pub.due(5_999, mirrors) == []  # unchanged, younger than half an interval
    assert [n for n, _, _ in pub.due(6_000, mirrors)] == ["a-to-b"]  # the heartbeat of a live worker
    changed = pub.due(2_000, {"a-to-b": MirrorSyncs(3, 10_000, OK | {"acl": 1_500})})
    assert [n for n, _, _ in changed] == ["a-to-b"]
    gone = pub.due(2_000, {"a-to-b": MirrorSyncs(0, 10_000, OK)})
    assert gone == [("a-to-b", report_key("a-to-b", "w1"), None)]
    assert pub.farewell() == gone
    pub.sent(2_000, gone)
    assert pub.due(3_000, {}) == [] and pub.farewell() == []


def test_the_view_keeps_the_latest_report_per_worker_and_drops_tombstoned_ones() -> None:
    view = SyncStatusView("127.0.0.1:1", "t")
    pub1, pub2 = SyncStatusPublisher("w1"), SyncStatusPublisher("w2")
    for pub, at in ((pub1, 1_000), (pub2, 1_100), (pub1, 1_200)):
        for _, key, value in pub.due(at, {"m": MirrorSyncs(2, 10_000, OK | {"acl": at})}):
            view._apply(key, value, 0)
    view._apply(b"not json", b"{}", 7)  # logged and skipped
    got = {r.worker: (r.at_ms, r.success_ms["acl"]) for r in view._reports["m"].values()}
    assert got == {"w1": (1_200, 1_200), "w2": (1_100, 1_100)}
    view._apply(report_key("m", "w2"), None, 8)
    assert set(view._reports["m"]) == {"w1"}


def test_a_failed_sync_travels_with_its_reason_and_a_change_of_it_is_reported() -> None:
    pub = SyncStatusPublisher("w1")
    failing = {"consumer_group_offset": "Invalid value (x for configuration groups.exclude: ..."}
    first = pub.due(1_000, {"m": MirrorSyncs(2, 10_000, OK, failing)})
    pub.sent(1_000, first)
    again = pub.due(1_500, {"m": MirrorSyncs(2, 10_000, OK, {"acl": "PortError: down"})})
    assert [n for n, _, _ in again] == ["m"]  # a new reason is news, not a heartbeat
    view = SyncStatusView("unused:0", "t")
    view._apply(first[0][1], first[0][2], 0)
    assert view._reports["m"]["w1"].errors == failing
