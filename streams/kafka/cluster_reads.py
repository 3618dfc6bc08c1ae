"""The Kafka source port's cluster-wide reads: topics (Metadata), groups (ListGroups,
DescribeGroups at every broker; FindCoordinator then OffsetFetch, or DescribeShareGroupOffsets for a
share group, at the group's coordinator),
topic configs (DescribeConfigs, DYNAMIC_TOPIC_CONFIG entries), ACLs (DescribeAcls) and the KIP's
ReadMirrorStates (a broker without it has no LME: the partition aligns from offset 0).
"""

from __future__ import annotations

import asyncio
import enum
import uuid
from collections.abc import Sequence
from typing import Any

from coordinator.image import AclOperation, AclPermissionType, AclResourceType, PatternType
from coordinator.ports import (
    UNDEFINED_EPOCH,
    AclBinding,
    GroupDescription,
    GroupOffset,
    GroupType,
    SourceUnavailable,
    TopicMetadata,
    TopicPartition,
    UnknownTopicId,
)
from streams.kafka.connection import KafkaConnection
from streams.kafka.wire import (
    _ACTIVE_GROUP_STATES,
    _ANY,
    _COORDINATOR_MOVED,
    DYNAMIC_TOPIC_CONFIG,
    GROUP_ID_NOT_FOUND,
    INVALID_GROUP_TYPE,
    NONE,
    SECURITY_DISABLED,
    TOPIC_RESOURCE,
    UNKNOWN_TOPIC_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
    UNSUPPORTED_VERSION,
    CodecRequest,
    KafkaProtocolError,
    _n,
    _s,
)


def _connection_errors() -> tuple[type[BaseException], ...]:
    """A broker not answering (refused, closed, not ready, timed out): another may."""
    from aiokafka.errors import KafkaConnectionError, NodeNotReadyError, RequestTimedOutError

    return (KafkaConnectionError, NodeNotReadyError, RequestTimedOutError, OSError, asyncio.TimeoutError)


class ClusterReads:
    """Topic, group, config, ACL and LME reads over ``conn`` (coroutines on its loop)."""

    def __init__(self, conn: KafkaConnection) -> None:
        self.conn = conn

    async def cluster_id(self) -> str:
        return (await self.conn.metadata()).cluster_id

    async def describe_topics(self, topic_ids: Sequence[uuid.UUID] | None) -> list[TopicMetadata]:
        meta = await self.conn.metadata(force=True)
        if topic_ids is None:
            chosen = sorted((t for t in meta.topics.values() if not t.internal), key=lambda t: t.name)
        else:
            chosen = []
            for tid in topic_ids:
                if tid not in meta.topics:
                    raise UnknownTopicId(tid)
                chosen.append(meta.topics[tid])
        return [TopicMetadata(t.name, t.topic_id, tuple(t.partitions[p] for p in sorted(t.partitions)))
                for t in chosen]  # fmt: skip

    # ------------------------------------------------------------------ groups

    async def _coordinator(self, group_id: str) -> int:
        def build(version: int) -> Any:
            return _s("FindCoordinatorRequest")(key=group_id, key_type=0)

        for attempt in range(3):
            body = await self.conn.send_any(CodecRequest("FindCoordinator", build))
            if body.error_code == NONE:
                return int(body.node_id)
            if body.error_code not in _COORDINATOR_MOVED:
                break
            await asyncio.sleep(0.1 * (attempt + 1))
        raise SourceUnavailable(self.conn.cluster, f"no coordinator for group {group_id} (error code {body.error_code})")

    async def _describe_groups(self, node: int, group_ids: list[str]) -> dict[str, Any]:
        def build(version: int) -> Any:
            return _s("DescribeGroupsRequest")(groups=group_ids, include_authorized_operations=False)

        body = await self.conn.send(node, CodecRequest("DescribeGroups", build))
        return {g.group_id: g for g in body.groups if g.error_code == NONE}

    async def list_groups(self) -> list[GroupDescription]:
        meta = await self.conn.metadata()

        def build(version: int) -> Any:
            return _s("ListGroupsRequest")()

        out: dict[str, GroupDescription] = {}
        unreachable: list[BaseException] = []
        for node in sorted(meta.brokers):  # each broker lists the groups it coordinates
            try:
                body = await self.conn.send(node, CodecRequest("ListGroups", build))
            except _connection_errors() as e:
                # A dead broker's groups move to another coordinator once the controller fences
                # it: list what the others answer, as Kafka's admin client lists the valid ones.
                unreachable.append(e)
                continue
            if body.error_code != NONE:
                raise KafkaProtocolError(f"ListGroups at broker {node}: Kafka error code {body.error_code}")
            # Share groups (ListGroups v5 groupType) are listed, but the classic DescribeGroups does not
            # see them: active from the listed state (offsets: DescribeShareGroupOffsets). Other
            # protocol types (connect) commit no offsets.
            for g in body.groups:
                if (getattr(g, "group_type", None) or "").lower() == "share":
                    active = (getattr(g, "group_state", None) or "") in _ACTIVE_GROUP_STATES
                    out[g.group_id] = GroupDescription(g.group_id, GroupType.SHARE, active, 0)
            ids = [g.group_id for g in body.groups if (g.protocol_type or "consumer") == "consumer"
                   and (getattr(g, "group_type", None) or "classic").lower() in ("classic", "consumer")]  # fmt: skip
            described = await self._describe_groups(node, ids) if ids else {}
            for gid in ids:
                d = described.get(gid)
                members = len(d.members) if d is not None else 0
                active = members > 0 or (d is not None and d.group_state in _ACTIVE_GROUP_STATES)
                out[gid] = GroupDescription(gid, GroupType.CONSUMER, active, members)
        if unreachable and len(unreachable) == len(meta.brokers):
            raise unreachable[-1]  # no broker answered
        return [out[g] for g in sorted(out)]

    async def _at_coordinator(self, group_id: str, request: CodecRequest) -> tuple[int, Any]:
        """``request`` sent to the group's coordinator; once more, to the coordinator found again,
        when the one found first cannot be reached (it died, and its groups moved or will)."""
        node = await self._coordinator(group_id)
        try:
            return node, await self.conn.send(node, request)
        except _connection_errors():
            await self.conn.metadata(force=True)
            node = await self._coordinator(group_id)
            return node, await self.conn.send(node, request)

    async def group_offsets(self, group_id: str) -> list[GroupOffset]:
        meta = await self.conn.metadata()

        def build(version: int) -> Any:
            return _s("OffsetFetchRequest")(group_id=group_id, topics=None, require_stable=False)

        node, body = await self._at_coordinator(group_id, CodecRequest("OffsetFetch", build, min_version=2))
        if body.error_code not in (NONE, GROUP_ID_NOT_FOUND):
            raise KafkaProtocolError(f"OffsetFetch of group {group_id}: Kafka error code {body.error_code}")
        if not body.topics:
            # No consumer offsets: maybe a share group (Kafka 4.1 answers OffsetFetch for one with no
            # topics), whose offsets only DescribeShareGroupOffsets gives.
            return await self._share_group_offsets(group_id, node)
        out = []
        for t in body.topics:
            topic = meta.by_name.get(t.name)
            if topic is None:
                topic = (await self.conn.metadata(force=True)).by_name.get(t.name)
            if topic is None:
                continue  # a deleted topic's offsets: nothing to sync them to
            for p in t.partitions:
                if p.error_code != NONE or p.committed_offset < 0:
                    continue
                epoch = p.committed_leader_epoch if p.committed_leader_epoch is not None else UNDEFINED_EPOCH
                out.append(GroupOffset(group_id, topic.topic_id, p.partition_index, p.committed_offset, epoch,
                                       p.metadata or ""))  # fmt: skip
        return sorted(out, key=lambda o: (str(o.topic_id), o.partition))

    async def _share_group_offsets(self, group_id: str, node: int) -> list[GroupOffset]:
        """A share group's share-partition start offsets (KIP-932), as the model port gives them."""
        if not await self.conn.supports(node, "DescribeShareGroupOffsets"):
            return []  # a broker before Kafka 4.1: no share groups to read

        def build(version: int) -> Any:
            g = _n("DescribeShareGroupOffsetsRequest", "DescribeShareGroupOffsetsRequestGroup")(group_id=group_id,
                                                                                                topics=None)
            return _s("DescribeShareGroupOffsetsRequest")(groups=[g])

        body = await self.conn.send(node, CodecRequest("DescribeShareGroupOffsets", build))
        out = []
        for g in body.groups:
            if g.error_code in (GROUP_ID_NOT_FOUND, INVALID_GROUP_TYPE, UNSUPPORTED_VERSION):
                # Not a share group (or none at all), or share groups off: Kafka 4.1 lists API 90 but
                # answers UNSUPPORTED_VERSION while the share.version feature is 0 (its default).
                return []
            if g.error_code != NONE:
                raise KafkaProtocolError(f"DescribeShareGroupOffsets of group {group_id}: Kafka error code "
                                         f"{g.error_code}: {g.error_message}")  # fmt: skip
            for t in g.topics:
                for p in t.partitions:
                    if p.error_code != NONE or p.start_offset < 0:
                        continue  # -1: the share-partition is not initialised, nothing to sync
                    epoch = p.leader_epoch if p.leader_epoch >= 0 else UNDEFINED_EPOCH
                    out.append(GroupOffset(group_id, t.topic_id, p.partition_index, p.start_offset, epoch))
        return sorted(out, key=lambda o: (str(o.topic_id), o.partition))

    async def is_group_active(self, group_id: str) -> bool:
        def build(version: int) -> Any:
            return _s("DescribeGroupsRequest")(groups=[group_id], include_authorized_operations=False)

        _, body = await self._at_coordinator(group_id, CodecRequest("DescribeGroups", build))
        d = next((g for g in body.groups if g.group_id == group_id and g.error_code == NONE), None)
        return d is not None and (len(d.members) > 0 or d.group_state in _ACTIVE_GROUP_STATES)

    # ------------------------------------------------------------------ configs, ACLs, LME

    async def describe_configs(self, topic_id: uuid.UUID) -> dict[str, str]:
        meta = await self.conn.metadata()
        topic = meta.topics.get(topic_id) or (await self.conn.metadata(force=True)).topics.get(topic_id)
        if topic is None:
            raise UnknownTopicId(topic_id)
        name = topic.name

        def build(version: int) -> Any:
            r = _n("DescribeConfigsRequest", "DescribeConfigsResource")(resource_type=TOPIC_RESOURCE,
                                                                        resource_name=name, configuration_keys=None)
            return _s("DescribeConfigsRequest")(resources=[r], include_synonyms=False)

        body = await self.conn.send_any(CodecRequest("DescribeConfigs", build, min_version=1))
        out: dict[str, str] = {}
        for r in body.results:
            if r.error_code in (UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID):
                raise UnknownTopicId(topic_id)
            if r.error_code != NONE:
                raise KafkaProtocolError(f"DescribeConfigs of {name}: Kafka error code {r.error_code}")
            out.update({c.name: c.value for c in r.configs
                        if c.config_source == DYNAMIC_TOPIC_CONFIG and c.value is not None and not c.is_sensitive})  # fmt: skip
        return out

    async def describe_acls(self) -> list[AclBinding]:
        def build(version: int) -> Any:
            return _s("DescribeAclsRequest")(resource_type_filter=_ANY, resource_name_filter=None,
                                             pattern_type_filter=_ANY, principal_filter=None, host_filter=None,
                                             operation=_ANY, permission_type=_ANY)  # fmt: skip

        body = await self.conn.send_any(CodecRequest("DescribeAcls", build, min_version=1))
        if body.error_code == SECURITY_DISABLED:
            return []  # no authorizer: no ACLs to sync
        if body.error_code != NONE:
            raise KafkaProtocolError(f"DescribeAcls: Kafka error code {body.error_code}: {body.error_message}")
        out = []
        for r in body.resources:
            for a in r.acls:
                out.append(AclBinding(_name(AclResourceType, r.resource_type), r.resource_name,
                                      _name(PatternType, r.pattern_type), a.principal, a.host,
                                      _name(AclOperation, a.operation), _name(AclPermissionType, a.permission_type)))
        return out

    async def last_mirrored_epoch(self, mirror_name: str, tp: TopicPartition) -> int | None:
        meta = await self.conn.metadata()
        topic, part = meta.leader(tp)
        if not await self.conn.supports(part.leader, "ReadMirrorStates"):
            return None  # a broker without KIP-1279: no LME, the partition aligns from offset 0

        def build(version: int) -> Any:
            p = _n("ReadMirrorStatesRequest", "PartitionData")(partition_index=tp.partition)
            t = _n("ReadMirrorStatesRequest", "TopicMetadata")(name=topic.name, partitions=[p])
            return _s("ReadMirrorStatesRequest")(mirror_name=mirror_name, topics=[t])

        body = await self.conn.send(part.leader, CodecRequest("ReadMirrorStates", build))
        if body.error_code != NONE:
            raise KafkaProtocolError(f"ReadMirrorStates of {tp}: Kafka error code {body.error_code}")
        for t in body.topics:
            for p in t.partitions:
                if p.partition_index == tp.partition and p.error_code == NONE and p.last_mirror_epoch >= 0:
                    return int(p.last_mirror_epoch)
        return None


def _name(codes: type[enum.IntEnum], code: int) -> str:
    """An AclBinding string from Kafka's code (the project's enums: Kafka's, plus CLUSTER_MIRROR)."""
    try:
        return codes(code).name
    except ValueError:
        return str(code)
