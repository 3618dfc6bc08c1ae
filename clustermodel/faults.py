"""Faults on the coordinator's link to a model cluster, switchable at any moment.

They apply to port calls (what the coordinator asks), not to the cluster's own producers and
replication. Time is the model's logical clock and chance is the model's seeded Random, so a
faulty run replays exactly.
"""

from __future__ import annotations

import random

import msgspec

from coordinator.ports import TopicPartition


class FaultState(msgspec.Struct):
    """The switchable faults; all off by default. Persisted with snapshots."""

    unreachable: bool = False
    # Every port call costs this much logical time (and real time on the local server).
    slow_ms: int = 0
    # Periodic flapping on the logical clock: reachable for up_ms, then unreachable for down_ms.
    flap_up_ms: int = 0
    flap_down_ms: int = 0
    flap_since_ms: int = 0
    # Each port call fails with this probability (drawn from the model's Random).
    failure_rate: float = 0.0
    # Partitions whose next fetch sees a leader change before it is served.
    leader_change_on_fetch: list[TopicPartition] = []


class Faults:
    """Fault switches of one cluster; the cluster asks ``check`` before serving a port call."""

    __slots__ = ("state",)

    def __init__(self, state: FaultState | None = None) -> None:
        self.state = state or FaultState()

    def clear(self) -> None:
        """Switch every fault off."""
        self.state = FaultState()

    def set_unreachable(self, unreachable: bool) -> None:
        self.state.unreachable = unreachable

    def set_slow(self, delay_ms: int) -> None:
        self.state.slow_ms = max(0, delay_ms)

    def set_flapping(self, up_ms: int, down_ms: int, now_ms: int) -> None:
        """Alternate reachable ``up_ms`` / unreachable ``down_ms`` from ``now_ms`` on (0, 0 stops it)."""
        self.state.flap_up_ms = max(0, up_ms)
        self.state.flap_down_ms = max(0, down_ms)
        self.state.flap_since_ms = now_ms

    def set_failure_rate(self, rate: float) -> None:
        self.state.failure_rate = min(1.0, max(0.0, rate))

    def change_leader_on_next_fetch(self, tp: TopicPartition) -> None:
        if tp not in self.state.leader_change_on_fetch:
            self.state.leader_change_on_fetch.append(tp)

    def take_leader_change(self, tp: TopicPartition) -> bool:
        """True once for a partition armed with change_leader_on_next_fetch."""
        pending = self.state.leader_change_on_fetch
        if pending and tp in pending:
            pending.remove(tp)
            return True
        return False

    def unavailable_reason(self, now_ms: int, rng: random.Random) -> str | None:
        """Why a port call made now fails, or None if it goes through."""
        s = self.state
        if s.unreachable:
            return "unreachable"
        if s.flap_down_ms > 0:
            period = s.flap_up_ms + s.flap_down_ms
            if (now_ms - s.flap_since_ms) % period >= s.flap_up_ms:
                return "flapping (down)"
        if s.failure_rate > 0.0 and rng.random() < s.failure_rate:
            return "request failed"
        return None
