"""The failover readiness rule shared by the worker's gauge and describe (coordinator.readiness)."""

from __future__ import annotations

from coordinator.readiness import (
    NO_SYNC_REPORT,
    SYNC_REASONS,
    SYNC_UNKNOWN,
    SyncReport,
    combined_sync_errors,
    combined_sync_times,
    failover_readiness,
)
from coordinator.states import MirrorState

NOW, INTERVAL = 100_000, 10_000
FRESH = dict.fromkeys(SYNC_REASONS, NOW - 1_000)


def counts(**by_state: int) -> dict[MirrorState, int]:
    return {MirrorState[s]: n for s, n in by_state.items()}


def test_ready_only_when_nothing_stands_in_the_way() -> None:
    assert failover_readiness(counts(MIRRORING=2), {0: 5, 1: 0}, 5, FRESH, INTERVAL, NOW) == (True, ())


def test_each_reason_is_named() -> None:
    got = failover_readiness(counts(MIRRORING=3, FAILED=1, PAUSED=2), {0: 7, 1: 1}, 5,
                             FRESH | {"consumer_group_offset": NOW - 2 * INTERVAL - 1, "acl": -1}, INTERVAL, NOW)  # fmt: skip
    assert got.ready is False
    assert got.reasons == ("1 partition(s) FAILED", "2 partition(s) not MIRRORING (2 PAUSED)",
                           "1 partition(s) with unknown lag", "1 partition(s) lag over 5 (max 7)",
                           SYNC_REASONS["consumer_group_offset"], SYNC_REASONS["acl"])  # fmt: skip


def test_no_partitions_is_not_ready() -> None:
    assert failover_readiness({}, {}, 5, FRESH, INTERVAL, NOW) == (False, ("no mirror partitions",))


def test_unknown_syncs_leave_readiness_unknown_unless_another_reason_decides() -> None:
    assert failover_readiness(counts(MIRRORING=1), {0: 0}, 5, None, 0, 0) == (None, (SYNC_UNKNOWN,))
    assert failover_readiness(counts(MIRRORING=1), {0: 9}, 5, None, 0, 0) == (False, ("1 partition(s) lag over 5 (max 9)",))


def test_the_workers_reports_combine_to_the_oldest_sync_of_the_live_ones() -> None:
    old = dict.fromkeys(SYNC_REASONS, NOW - 5_000)
    reports = [SyncReport("w1", NOW - 500, 3, FRESH),
               SyncReport("w2", NOW - 2_000, 2, old | {"acl": -1}),
               SyncReport("gone", NOW - 2 * INTERVAL - 1, 4, dict.fromkeys(SYNC_REASONS, -1)),  # a dead worker's
               SyncReport("idle", NOW, 0, dict.fromkeys(SYNC_REASONS, -1))]  # holds no MIRRORING partition
    got = combined_sync_times(reports, INTERVAL, NOW)
    assert got == old | {"acl": -1}
    assert failover_readiness(counts(MIRRORING=5), dict.fromkeys(range(5), 0), 5, got, INTERVAL, NOW) == (
        False, (SYNC_REASONS["acl"],))
    fine = combined_sync_times(reports[:1] + reports[2:], INTERVAL, NOW)
    assert failover_readiness(counts(MIRRORING=5), dict.fromkeys(range(5), 0), 5, fine, INTERVAL, NOW) == (True, ())


def test_no_live_report_is_a_reason_of_its_own() -> None:
    stale = [SyncReport("w1", NOW - 2 * INTERVAL - 1, 3, FRESH)]
    assert combined_sync_times(stale, INTERVAL, NOW) == {}
    assert failover_readiness(counts(MIRRORING=1), {0: 0}, 5, {}, INTERVAL, NOW) == (False, (NO_SYNC_REPORT,))


def test_a_failed_sync_says_why_at_once_and_when_it_is_stale() -> None:
    why = "Invalid value (x for configuration groups.exclude: invalid pattern '(x': missing ), unterminated subpattern"
    fresh = failover_readiness(counts(MIRRORING=1), {0: 0}, 5, FRESH, INTERVAL, NOW, {"consumer_group_offset": why})
    assert fresh == (False, (f"last consumer group offset sync failed: {why}",))
    stale = failover_readiness(counts(MIRRORING=1), {0: 0}, 5, FRESH | {"consumer_group_offset": -1}, INTERVAL, NOW,
                               {"consumer_group_offset": why})  # fmt: skip
    assert stale == (False, (f"{SYNC_REASONS['consumer_group_offset']}; last error: {why}",))
    reports = [SyncReport("w2", NOW, 1, FRESH, {"acl": "PortError: down"}), SyncReport("w1", NOW, 0, FRESH, {"acl": "old"})]
    assert combined_sync_errors(reports, INTERVAL, NOW) == {"acl": "PortError: down"}  # w1 holds nothing MIRRORING
    refresh = failover_readiness(counts(MIRRORING=1), {0: 0}, 5, FRESH, INTERVAL, NOW,
                                 {"topic_metadata_refresh": "SourceUnavailable: A is down"})  # fmt: skip
    assert refresh == (False, ("last topic metadata refresh failed: SourceUnavailable: A is down",))
