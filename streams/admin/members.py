"""The controller removes dead members from the workers' group (KIP-345's member removal).

A worker is a static member (``streams.worker.membership``). A worker restarted on an empty data
directory (a replaced disk, a fresh pod volume) makes a new ``group.instance.id``, so the dead
process's member is never taken over. Apache Kafka expires it after its session timeout; a broker
that never expires members (noida-db 0.2.3) keeps it, and the group waits for it forever: a
rebalance never completes, nothing mirrors, a ``--stop`` never ends.

So the controller removes a member it can prove dead, as ``kafka-consumer-groups
--delete-members`` does (LeaveGroup v3+ naming the member's ``group.instance.id``). Proof: every
worker publishes its presence every tenth of its session timeout, at least every second
(``streams.worker.presence``, on the sync status topic), with its ``worker.session.timeout.ms``. A member is removed once this controller has
neither read a publication of its instance nor seen it join (a new member id) for that session
timeout, the bound Kafka itself applies to a member's heartbeats, and for as long since the
controller began watching (a restarted controller waits a whole session first). The member id seen in the group
goes in the request too: an instance that has rejoined since is refused by the broker
(FENCED_INSTANCE_ID), not removed. A member that never published counts by the controller's own
``worker.session.timeout.ms``. Removed wrongly (a live worker whose publications cannot reach
the broker), a worker only rejoins: its table partitions move, nothing is lost.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

from records.registry import default_schemas
from streams.config import WorkerConfig
from streams.kafka.wire import UnsupportedApi, _Prepared
from streams.state.sync_status import SyncStatusView

log = logging.getLogger(__name__)

NONE = 0
GROUP_ID_NOT_FOUND = 69
FENCED_INSTANCE_ID = 82
UNKNOWN_MEMBER_ID = 25
CHECK_INTERVAL_S = 1.0  # the shortest interval between checks
CHECKS_PER_SESSION = 10


class Member(NamedTuple):
    member_id: str
    instance_id: str  # "" for a dynamic member (the broker expires those itself)
    client_id: str


def silent_members(members: Iterable[Member], now: float, watching_since: float,
                   joined: Mapping[tuple[str, str], float], seen: Mapping[str, float],
                   session_timeout_ms: Mapping[str, int], default_session_timeout_ms: int) -> list[Member]:  # fmt: skip
    """The static members with no sign of life for their session timeout: no publication read,
    no join of that member id seen, and the controller watching, for that long (seconds on the
    controller's monotonic clock)."""
    out = []
    for m in members:
        if not m.instance_id:
            continue
        timeout_s = (session_timeout_ms.get(m.instance_id) or default_session_timeout_ms) / 1000
        last = max(watching_since, joined.get((m.instance_id, m.member_id), now), seen.get(m.instance_id, watching_since))
        if now - last > timeout_s:
            out.append(m)
    return out


class _Request:
    """An aiokafka ``Request`` look-alike with our codec's body (as ``streams.kafka.wire.CodecRequest``),
    at the highest version both sides know, at least ``min_version``."""

    def __init__(self, name: str, api_key: int, min_version: int, build: Callable[[int], Any]) -> None:
        self.name, self.API_KEY, self.min_version, self.build = name, api_key, min_version, build

    def prepare(self, versions: Mapping[int, tuple[int, int]]) -> _Prepared:
        spec = default_schemas().spec(self.name + "Request")
        lo, hi = versions.get(self.API_KEY, (0, -1))
        version = min(hi, spec.valid_versions.highest)
        if version < max(lo, spec.valid_versions.lowest, self.min_version):
            raise UnsupportedApi(f"the broker has no {self.name} v{self.min_version}+ (it has {lo}-{hi})")
        return _Prepared(self.name, self.API_KEY, version, self.build(version))


class DeadMemberRemover:
    """Every tenth of the shortest session timeout (at least every second): the group's members
    (DescribeGroups v4+, for their instance ids), then every
    publication up to now (``view``), then LeaveGroup for the silent ones."""

    def __init__(self, config: WorkerConfig, view: SyncStatusView, clock: Callable[[], float] = time.monotonic,
                 interval_s: float | None = None) -> None:  # fmt: skip
        self.bootstrap, self.group = config.bootstrap_servers, config.faust_app_id
        self.default_session_timeout_ms = config.session_timeout_ms
        self.view, self.clock, self.interval_s = view, clock, interval_s
        self.client_id = f"{config.client_id}-controller-members"
        self.watching_since = clock()
        self.joined: dict[tuple[str, str], float] = {}  # (instance id, member id) -> first seen in the group
        self.removed: list[Member] = []
        self._client: Any = None
        self._coordinator: int | None = None  # the group coordinator's node id

    async def run(self) -> None:
        self.watching_since = self.clock()
        try:
            while True:
                try:
                    await self.check()
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # noqa: BLE001 - looked at again next time
                    log.warning("could not check the members of group %s: %r", self.group, e)
                    await self._close()
                await asyncio.sleep(self.next_check_s())
        finally:
            await self._close()

    def next_check_s(self) -> float:
        """The given interval, or a tenth of the shortest session timeout known (at least a second):
        a silent member is removed within a tenth of its session past it, and a controller of
        workers with the default 60 s session checks every 6 s, not every second."""
        if self.interval_s is not None:
            return self.interval_s
        shortest = min([self.default_session_timeout_ms, *(t for t in self.view.session_timeout_ms.values() if t > 0)])
        return max(CHECK_INTERVAL_S, shortest / 1000 / CHECKS_PER_SESSION)

    async def check(self) -> list[Member]:
        """One round; returns the members removed."""
        members = await self.describe()
        if await self.view.reports() is None:  # not following the topic: no proof of anything
            return []
        now = self.clock()
        for m in members:
            self.joined.setdefault((m.instance_id, m.member_id), now)
        current = {(m.instance_id, m.member_id) for m in members}
        for key in [k for k in self.joined if k not in current]:
            del self.joined[key]
        silent = silent_members(members, now, self.watching_since, self.joined, self.view.seen,
                                self.view.session_timeout_ms, self.default_session_timeout_ms)  # fmt: skip
        gone = []
        for m in silent:
            timeout_ms = self.view.session_timeout_ms.get(m.instance_id) or self.default_session_timeout_ms
            if await self.leave(m):
                log.warning("removed member %s (group.instance.id %s, client %s) from group %s: nothing "
                            "published for its session timeout (%d ms)", m.member_id, m.instance_id, m.client_id,
                            self.group, timeout_ms)  # fmt: skip
                gone.append(m)
        self.removed += gone
        return gone

    async def _connected(self) -> tuple[Any, int]:
        from aiokafka.client import AIOKafkaClient, CoordinationType

        if self._client is None:
            client = AIOKafkaClient(bootstrap_servers=self.bootstrap, client_id=self.client_id, request_timeout_ms=5000)
            try:
                await client.bootstrap()
            except BaseException:
                await client.close()
                raise
            self._client = client
        if self._coordinator is None:
            # Looked up once per connection, as a Kafka client keeps its coordinator: any failure
            # closes the client (``run``), and the next round looks it up again.
            self._coordinator = await self._client.coordinator_lookup(CoordinationType.GROUP, self.group)
        return self._client, self._coordinator

    async def _close(self) -> None:
        client, self._client, self._coordinator = self._client, None, None
        if client is not None:
            await client.close()

    async def describe(self) -> list[Member]:
        """The group's members now (none while the group does not exist)."""
        s = default_schemas()
        client, node = await self._connected()
        body = (await client.send(node, _Request("DescribeGroups", 15, 4, lambda v: s.struct("DescribeGroupsRequest")(
            groups=[self.group], include_authorized_operations=False)))).body  # fmt: skip
        (group,) = body.groups
        if group.error_code == GROUP_ID_NOT_FOUND:
            return []
        if group.error_code != NONE:
            raise RuntimeError(f"DescribeGroups {self.group}: Kafka error code {group.error_code}")
        return [Member(m.member_id, m.group_instance_id or "", m.client_id) for m in group.members]

    async def leave(self, member: Member) -> bool:
        """LeaveGroup for ``member``, by its instance id and member id; True if the broker removed it."""
        s = default_schemas()
        identity = s.nested("LeaveGroupRequest", "MemberIdentity")

        def build(version: int) -> Any:
            return s.struct("LeaveGroupRequest")(group_id=self.group, members=[identity(
                member_id=member.member_id, group_instance_id=member.instance_id,
                reason="kip1279 controller: no publication for the session timeout")])  # fmt: skip

        client, node = await self._connected()
        body = (await client.send(node, _Request("LeaveGroup", 13, 3, build))).body
        code = body.error_code or next((r.error_code for r in body.members if r.error_code), NONE)
        if code in (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID):  # expired by the broker, or rejoined since
            log.info("member %s (group.instance.id %s) of %s was not removed: error code %d", member.member_id,
                     member.instance_id, self.group, code)  # fmt: skip
            return False
        if code != NONE:
            raise RuntimeError(f"LeaveGroup {member.instance_id} from {self.group}: Kafka error code {code}")
        return True
