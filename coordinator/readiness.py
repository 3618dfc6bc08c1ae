"""Failover readiness of a mirror: the one rule behind the worker's ``kip1279_mirror_failover_ready``
gauge and the readiness line of ``kafka-cluster-mirrors --describe``.

A mirror is ready when a failover now would lose little: it has partitions, all MIRRORING (none
FAILED), each with a known lag of at most ``max_lag``; consumer and share group offsets were
synced within two sync intervals; the last topic-config and ACL syncs ran clean as recently (no
drift left). Pure: the caller passes the clock, and whatever it knows of the syncs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from coordinator.states import MirrorState

# Sync kinds the rule looks at, and how a reason names a stale one.
SYNC_REASONS: dict[str, str] = {
    "consumer_group_offset": "consumer group offsets not synced within two sync intervals",
    "share_group_offset": "share group offsets not synced within two sync intervals",
    "topic_config": "topic config drift: no clean topic config sync within two sync intervals",
    "acl": "ACL drift: no clean ACL sync within two sync intervals",
}
SYNC_UNKNOWN = "group offset, topic config and ACL sync status is only known to the workers (kip1279_mirror_failover_ready)"
NO_SYNC_REPORT = "no worker reported its syncs within two sync intervals"


class SyncReport(NamedTuple):
    """What one worker last said of one mirror's syncs (``streams.state.sync_status``)."""

    worker: str
    at_ms: int  # the worker's clock when it said so
    partitions: int  # MIRRORING partitions of the mirror that worker syncs
    success_ms: Mapping[str, int]  # when each sync kind last ran clean there (-1: never)
    errors: Mapping[str, str] = {}  # why each sync kind's last run failed there, if it did


def combined_sync_times(reports: Iterable[SyncReport], interval_ms: int, now_ms: int) -> dict[str, int]:
    """A mirror's sync times as the rule wants them, from its workers' reports: per kind, the
    oldest clean sync over the workers that sync some partition now. A report older than two
    intervals is a worker that is gone (its partitions moved on) and is left out. Empty when no
    worker reports (see ``NO_SYNC_REPORT``)."""
    live = [r for r in reports if r.partitions > 0 and r.at_ms >= now_ms - 2 * interval_ms]
    if not live:
        return {}
    return {kind: min(r.success_ms.get(kind, -1) for r in live) for kind in SYNC_REASONS}


def combined_sync_errors(reports: Iterable[SyncReport], interval_ms: int, now_ms: int) -> dict[str, str]:
    """Why each sync kind last failed, per live worker (as ``combined_sync_times`` picks them)."""
    out: dict[str, str] = {}
    for r in sorted(reports, key=lambda r: r.worker):
        if r.partitions > 0 and r.at_ms >= now_ms - 2 * interval_ms:
            for kind, why in sorted(r.errors.items()):
                out.setdefault(kind, why)
    return out


class Readiness(NamedTuple):
    """``ready`` is None when nothing known stands in the way but the syncs were not known."""

    ready: bool | None
    reasons: tuple[str, ...]


def failover_readiness(states: Mapping[MirrorState, int], lags: Mapping[Any, int], max_lag: int,
                       sync_success_ms: Mapping[str, int] | None, interval_ms: int, now_ms: int,
                       sync_errors: Mapping[str, str] | None = None) -> Readiness:  # fmt: skip
    """``states``: partitions per state; ``lags``: source HW - destination LEO of each MIRRORING
    partition whose lag is known; ``sync_success_ms``: when each sync kind last ran clean (-1:
    never), or None when the caller cannot know; ``sync_errors``: why a kind's last sync failed."""
    errors = sync_errors or {}
    reasons = []
    total = sum(states.values())
    if total == 0:
        reasons.append("no mirror partitions")
    failed = states.get(MirrorState.FAILED, 0)
    if failed:
        reasons.append(f"{failed} partition(s) FAILED")
    others = {s: n for s, n in states.items() if n and s not in (MirrorState.MIRRORING, MirrorState.FAILED)}
    if others:
        shown = ", ".join(f"{n} {s.name}" for s, n in sorted(others.items()))
        reasons.append(f"{sum(others.values())} partition(s) not MIRRORING ({shown})")
    unknown = states.get(MirrorState.MIRRORING, 0) - len(lags)
    if unknown > 0:
        reasons.append(f"{unknown} partition(s) with unknown lag")
    over = [v for v in lags.values() if v > max_lag]
    if over:
        reasons.append(f"{len(over)} partition(s) lag over {max_lag} (max {max(over)})")
    if sync_success_ms is None:
        if reasons:
            return Readiness(False, tuple(reasons))
        return Readiness(None, (SYNC_UNKNOWN,))
    if not sync_success_ms and states.get(MirrorState.MIRRORING, 0):
        return Readiness(False, (*reasons, NO_SYNC_REPORT))
    recent = now_ms - 2 * interval_ms
    for kind, why in SYNC_REASONS.items():
        error = errors.get(kind)
        if sync_success_ms.get(kind, -1) < 0 or sync_success_ms[kind] < recent:
            reasons.append(why + (f"; last error: {error}" if error else ""))
        elif error:  # failed since its last clean run, not stale yet: said at once
            reasons.append(f"last {kind.replace('_', ' ')} sync failed: {error}")
    for kind, error in sorted(errors.items()):  # the kinds the rule does not time (topic metadata refresh)
        if kind not in SYNC_REASONS:
            reasons.append(f"last {kind.replace('_', ' ')} failed: {error}")
    return Readiness(not reasons, tuple(reasons))
