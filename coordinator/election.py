"""Which controller of a destination cluster should take over (issue #36), a pure decision.

Every controller publishes a heartbeat (its id, instance, endpoint, whether it is active and in
which epoch) every fraction of ``controller.session.timeout.ms``; a heartbeat older than the
session timeout is a dead controller's. Safety does not rest on this choice: a controller takes
over by fencing the metadata log's writer (the transactional id's epoch bump), so two that
decide at once cost one extra fencing, never two writers. The choice only keeps standbys from
taking over from a live active, and from each other (the lowest id of the live standbys goes).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple


class Heartbeat(NamedTuple):
    controller_id: str
    instance: str  # one per process: a restarted controller is a new instance of its id
    endpoint: str
    active: bool
    epoch: int
    timestamp_ms: int  # when it was published (the record's timestamp)
    leaving: bool = False  # its last one: it is shutting down (as a LeaveGroup)


def live(heartbeats: Iterable[Heartbeat], now_ms: int, session_ms: int) -> list[Heartbeat]:
    """The latest heartbeat of each instance published within the session timeout, but for
    instances that have left."""
    latest: dict[str, Heartbeat] = {}
    for h in heartbeats:
        if now_ms - h.timestamp_ms <= session_ms and (h.instance not in latest or h.timestamp_ms >= latest[h.instance].timestamp_ms):
            latest[h.instance] = h
    return [h for h in latest.values() if not h.leaving]


def should_take_over(me: str, instance: str, heartbeats: Iterable[Heartbeat], now_ms: int, session_ms: int) -> bool:
    """A standby takes over when no other instance has a live active heartbeat and it is the
    lowest id among the live standbys (itself included)."""
    alive = [h for h in live(heartbeats, now_ms, session_ms) if h.instance != instance]
    if any(h.active for h in alive):
        return False
    return all(me <= h.controller_id for h in alive)
