"""Classic consumer-group membership (JoinGroup/SyncGroup/Heartbeat/LeaveGroup) for a model cluster.

Kafka's GroupCoordinator states, in real time (sessions and rebalances are wall-clock timeouts,
like a broker's, not the model's logical clock): Empty -> PreparingRebalance -> CompletingRebalance
-> Stable. A rebalance completes when every member has rejoined, or when the longest rebalance
timeout passes (members that did not rejoin are removed). Membership is mirrored into the model
(join_group/leave_group) so the coordinator's group activity checks see the same members; the
committed offsets live only in the model.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from . import errors as E

if TYPE_CHECKING:
    from ..cluster import ClusterModel

EMPTY, PREPARING, COMPLETING, STABLE = "Empty", "PreparingRebalance", "CompletingRebalance", "Stable"
MIN_SESSION_TIMEOUT_MS = 1_000  # Kafka's group.min.session.timeout.ms is 6000; tests use shorter sessions
MAX_SESSION_TIMEOUT_MS = 1_800_000
EXPIRY_CHECK_S = 0.25


@dataclass
class JoinResult:
    error_code: int
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)


@dataclass
class Member:
    member_id: str
    client_id: str
    group_instance_id: str | None
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    last_seen: float
    assignment: bytes = b""
    join_future: asyncio.Future[JoinResult] | None = None
    sync_future: asyncio.Future[tuple[int, bytes]] | None = None


@dataclass
class Group:
    group_id: str
    state: str = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    timer: asyncio.TimerHandle | None = None


class GroupCoordinator:
    def __init__(self, model: ClusterModel) -> None:
        self.model = model
        self.groups: dict[str, Group] = {}
        self._task: asyncio.Task[None] | None = None

    def _ensure_expiry(self) -> None:
        """Session expiry runs only while some group has members."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._expire_loop())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        for g in self.groups.values():
            for m in g.members.values():
                for fut in (m.join_future, m.sync_future):
                    if fut is not None and not fut.done():
                        fut.cancel()

    # ---------------------------------------------------------------- membership

    async def join(
        self, group_id: str, member_id: str, client_id: str, group_instance_id: str | None, protocol_type: str,
        protocols: list[tuple[str, bytes]], session_timeout_ms: int, rebalance_timeout_ms: int,
    ) -> JoinResult:
        loop = asyncio.get_running_loop()
        if not group_id:
            return JoinResult(E.INVALID_GROUP_ID)
        if not MIN_SESSION_TIMEOUT_MS <= session_timeout_ms <= MAX_SESSION_TIMEOUT_MS:
            return JoinResult(E.INVALID_SESSION_TIMEOUT)
        g = self.groups.setdefault(group_id, Group(group_id))
        if g.members and g.protocol_type is not None and protocol_type != g.protocol_type:
            return JoinResult(E.INCONSISTENT_GROUP_PROTOCOL)
        if member_id and member_id not in g.members:
            return JoinResult(E.UNKNOWN_MEMBER_ID)
        if not member_id:
            member_id = f"{client_id or 'member'}-{uuid.uuid4()}"
        m = g.members.get(member_id)
        if m is None:
            m = g.members[member_id] = Member(member_id, client_id, group_instance_id, protocol_type, protocols,
                                              session_timeout_ms, rebalance_timeout_ms, loop.time())
            self.model.join_group(group_id, member_id)
            self._ensure_expiry()
        else:
            m.protocols, m.session_timeout_ms, m.rebalance_timeout_ms = protocols, session_timeout_ms, rebalance_timeout_ms
            m.last_seen = loop.time()
        if m.join_future is not None and not m.join_future.done():
            m.join_future.set_result(JoinResult(E.REBALANCE_IN_PROGRESS, member_id=member_id))
        fut: asyncio.Future[JoinResult] = loop.create_future()
        m.join_future = fut
        if g.protocol_type is None or not g.members or len(g.members) == 1:
            g.protocol_type = protocol_type
        if g.state != PREPARING:
            self._prepare_rebalance(g)
        self._maybe_complete_join(g)
        return await fut

    def _prepare_rebalance(self, g: Group) -> None:
        g.state = PREPARING
        for m in g.members.values():
            if m.sync_future is not None and not m.sync_future.done():
                m.sync_future.set_result((E.REBALANCE_IN_PROGRESS, b""))
            m.sync_future = None
        timeout_ms = max((m.rebalance_timeout_ms for m in g.members.values()), default=0)
        if g.timer is not None:
            g.timer.cancel()
        g.timer = asyncio.get_running_loop().call_later(timeout_ms / 1000, self._complete_join, g)

    def _maybe_complete_join(self, g: Group) -> None:
        if g.state == PREPARING and all(m.join_future is not None for m in g.members.values()):
            self._complete_join(g)

    def _complete_join(self, g: Group) -> None:
        if g.state != PREPARING:
            return
        if g.timer is not None:
            g.timer.cancel()
            g.timer = None
        for member_id in [mid for mid, m in g.members.items() if m.join_future is None]:
            self._remove(g, member_id)
        g.generation += 1
        if not g.members:
            g.state, g.leader, g.protocol_name = EMPTY, None, None
            return
        ids = list(g.members)
        if g.leader not in g.members:
            g.leader = ids[0]
        leader = g.members[g.leader]
        supported = [name for name, _ in leader.protocols
                     if all(any(n == name for n, _ in m.protocols) for m in g.members.values())]
        if not supported:
            for m in g.members.values():
                assert m.join_future is not None
                if not m.join_future.done():
                    m.join_future.set_result(JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id=m.member_id))
                m.join_future = None
            g.state = PREPARING
            return
        g.protocol_name = supported[0]
        g.state = COMPLETING
        listing = [(m.member_id, m.group_instance_id, dict(m.protocols)[g.protocol_name]) for m in g.members.values()]
        for m in g.members.values():
            assert m.join_future is not None
            if not m.join_future.done():
                m.join_future.set_result(JoinResult(
                    E.NONE, g.generation, g.protocol_type, g.protocol_name, g.leader, m.member_id,
                    listing if m.member_id == g.leader else [],
                ))
            m.join_future = None

    def _remove(self, g: Group, member_id: str) -> None:
        m = g.members.pop(member_id, None)
        if m is None:
            return
        for fut in (m.join_future, m.sync_future):
            if fut is not None and not fut.done():
                fut.set_result(JoinResult(E.UNKNOWN_MEMBER_ID) if fut is m.join_future else (E.UNKNOWN_MEMBER_ID, b""))
        self.model.leave_group(g.group_id, member_id)

    async def sync(self, group_id: str, generation: int, member_id: str, assignments: list[tuple[str, bytes]]) -> tuple[int, bytes]:
        g = self.groups.get(group_id)
        if g is None or member_id not in g.members:
            return E.UNKNOWN_MEMBER_ID, b""
        if generation != g.generation:
            return E.ILLEGAL_GENERATION, b""
        m = g.members[member_id]
        m.last_seen = asyncio.get_running_loop().time()
        if g.state == PREPARING:
            return E.REBALANCE_IN_PROGRESS, b""
        if g.state == STABLE:
            return E.NONE, m.assignment
        fut: asyncio.Future[tuple[int, bytes]] = asyncio.get_running_loop().create_future()
        m.sync_future = fut
        if member_id == g.leader:
            given = dict(assignments)
            for other in g.members.values():
                other.assignment = given.get(other.member_id, b"")
            g.state = STABLE
            for other in g.members.values():
                if other.sync_future is not None and not other.sync_future.done():
                    other.sync_future.set_result((E.NONE, other.assignment))
                other.sync_future = None
        return await fut

    def heartbeat(self, group_id: str, generation: int, member_id: str) -> int:
        g = self.groups.get(group_id)
        if g is None or member_id not in g.members:
            return E.UNKNOWN_MEMBER_ID
        g.members[member_id].last_seen = asyncio.get_running_loop().time()
        if generation != g.generation:
            return E.ILLEGAL_GENERATION
        if g.state == PREPARING:
            return E.REBALANCE_IN_PROGRESS
        return E.NONE

    def leave(self, group_id: str, member_ids: list[str]) -> list[int]:
        g = self.groups.get(group_id)
        codes = []
        left = False
        for member_id in member_ids:
            if g is None or member_id not in g.members:
                codes.append(E.UNKNOWN_MEMBER_ID)
                continue
            self._remove(g, member_id)
            codes.append(E.NONE)
            left = True
        if g is not None and left:
            self._after_departure(g)
        return codes

    def _after_departure(self, g: Group) -> None:
        if not g.members:
            if g.timer is not None:
                g.timer.cancel()
                g.timer = None
            g.state, g.leader, g.protocol_name = EMPTY, None, None
            g.generation += 1
            return
        if g.state != PREPARING:
            self._prepare_rebalance(g)
        self._maybe_complete_join(g)

    def check_commit(self, group_id: str, generation: int, member_id: str) -> int:
        """OffsetCommit's membership check: a simple commit (no member, generation -1) needs an empty group."""
        g = self.groups.get(group_id)
        if generation < 0 and not member_id:
            return E.NONE if g is None or not g.members else E.UNKNOWN_MEMBER_ID
        if g is None or member_id not in g.members:
            return E.UNKNOWN_MEMBER_ID
        if generation != g.generation:
            return E.ILLEGAL_GENERATION
        if g.state == PREPARING:
            return E.REBALANCE_IN_PROGRESS
        g.members[member_id].last_seen = asyncio.get_running_loop().time()
        return E.NONE

    async def _expire_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while any(g.members for g in self.groups.values()):
            await asyncio.sleep(EXPIRY_CHECK_S)
            now = loop.time()
            for g in list(self.groups.values()):
                expired = [mid for mid, m in g.members.items()
                           if m.join_future is None and m.sync_future is None and now - m.last_seen > m.session_timeout_ms / 1000]
                for mid in expired:
                    self._remove(g, mid)
                if expired:
                    self._after_departure(g)
