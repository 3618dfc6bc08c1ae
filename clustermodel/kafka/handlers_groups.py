"""Classic group APIs: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch,
ListGroups, DescribeGroups. Membership is group_coordinator.py; offsets are the model's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from coordinator.ports import GroupType
from records.kafka_envelope import Request
from records.registry import default_schemas

from . import errors as E
from .group_coordinator import EMPTY, STABLE
from .handlers_cluster import coordinator_for, not_coordinator

if TYPE_CHECKING:
    from .context import ListenerContext

S = default_schemas()
_JoinResponse = S.struct("JoinGroupResponse")
_JoinMember = S.nested("JoinGroupResponse", "JoinGroupResponseMember")
_SyncResponse = S.struct("SyncGroupResponse")
_HeartbeatResponse = S.struct("HeartbeatResponse")
_LeaveResponse = S.struct("LeaveGroupResponse")
_LeaveMember = S.nested("LeaveGroupResponse", "MemberResponse")
_CommitResponse = S.struct("OffsetCommitResponse")
_CommitTopic = S.nested("OffsetCommitResponse", "OffsetCommitResponseTopic")
_CommitPartition = S.nested("OffsetCommitResponse", "OffsetCommitResponsePartition")
_FetchResponse = S.struct("OffsetFetchResponse")
_FetchTopic = S.nested("OffsetFetchResponse", "OffsetFetchResponseTopic")
_FetchPartition = S.nested("OffsetFetchResponse", "OffsetFetchResponsePartition")
_FetchGroup = S.nested("OffsetFetchResponse", "OffsetFetchResponseGroup")
_FetchTopics = S.nested("OffsetFetchResponse", "OffsetFetchResponseTopics")
_FetchPartitions = S.nested("OffsetFetchResponse", "OffsetFetchResponsePartitions")
_ListResponse = S.struct("ListGroupsResponse")
_Listed = S.nested("ListGroupsResponse", "ListedGroup")
_DescribeResponse = S.struct("DescribeGroupsResponse")
_Described = S.nested("DescribeGroupsResponse", "DescribedGroup")
_DescribedMember = S.nested("DescribeGroupsResponse", "DescribedGroupMember")


async def join_group(cluster: ListenerContext, broker: int, req: Request) -> object:
    b = req.body
    code = not_coordinator(cluster, broker, b.group_id)
    if code:
        return _JoinResponse(error_code=code, generation_id=-1, member_id=b.member_id)
    rebalance_timeout = b.rebalance_timeout_ms if req.api_version >= 1 and b.rebalance_timeout_ms > 0 else b.session_timeout_ms
    r = await cluster.groups.join(
        b.group_id, b.member_id, req.client_id or "", b.group_instance_id, b.protocol_type,
        [(p.name, p.metadata) for p in b.protocols], b.session_timeout_ms, rebalance_timeout,
    )
    return _JoinResponse(
        error_code=r.error_code, generation_id=r.generation_id, protocol_type=r.protocol_type,
        protocol_name=r.protocol_name, leader=r.leader, member_id=r.member_id or b.member_id,
        members=[_JoinMember(member_id=m, group_instance_id=i, metadata=md) for m, i, md in r.members],
    )


async def sync_group(cluster: ListenerContext, broker: int, req: Request) -> object:
    b = req.body
    code = not_coordinator(cluster, broker, b.group_id)
    if code:
        return _SyncResponse(error_code=code, assignment=b"")
    code, assignment = await cluster.groups.sync(
        b.group_id, b.generation_id, b.member_id, [(a.member_id, a.assignment) for a in b.assignments]
    )
    g = cluster.groups.groups.get(b.group_id)
    return _SyncResponse(error_code=code, assignment=assignment,
                         protocol_type=g.protocol_type if g else None, protocol_name=g.protocol_name if g else None)


def heartbeat(cluster: ListenerContext, broker: int, req: Request) -> object:
    b = req.body
    code = not_coordinator(cluster, broker, b.group_id) or cluster.groups.heartbeat(b.group_id, b.generation_id, b.member_id)
    return _HeartbeatResponse(error_code=code)


def leave_group(cluster: ListenerContext, broker: int, req: Request) -> object:
    b = req.body
    code = not_coordinator(cluster, broker, b.group_id)
    if code:
        return _LeaveResponse(error_code=code)
    if req.api_version >= 3:
        ids = [m.member_id for m in b.members]
        codes = cluster.groups.leave(b.group_id, ids)
        return _LeaveResponse(error_code=E.NONE, members=[
            _LeaveMember(member_id=m.member_id, group_instance_id=m.group_instance_id, error_code=c)
            for m, c in zip(b.members, codes)
        ])
    (c,) = cluster.groups.leave(b.group_id, [b.member_id])
    return _LeaveResponse(error_code=c)


def offset_commit(cluster: ListenerContext, broker: int, req: Request) -> object:
    b = req.body
    code = not_coordinator(cluster, broker, b.group_id) or cluster.groups.check_commit(
        b.group_id, b.generation_id_or_member_epoch, b.member_id)
    model = cluster.model
    topics = []
    for t in b.topics:
        parts = []
        for p in t.partitions:
            c = code
            if not c:
                topic_id = model.topic_ids.get(t.name)
                if topic_id is None or not 0 <= p.partition_index < len(model.topics[topic_id].partitions):
                    c = E.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    # Kept as sent: a client that gives no epoch (-1) gets none back, as from Kafka.
                    model.commit_offset(b.group_id, t.name, p.partition_index, p.committed_offset, p.committed_leader_epoch,
                                        metadata=p.committed_metadata or "")
            parts.append(_CommitPartition(partition_index=p.partition_index, error_code=c))
        topics.append(_CommitTopic(name=t.name, partitions=parts))
    return _CommitResponse(topics=topics)


def _committed(cluster: ListenerContext, group_id: str) -> dict[tuple[str, int], object]:
    model = cluster.model
    group = model.groups.get(group_id)
    out: dict[tuple[str, int], object] = {}
    if group is None:
        return out
    for o in group.sorted_offsets():
        topic = model.topics.get(o.topic_id)
        if topic is not None:
            out[(topic.name, o.partition)] = o
    return out


def _pending(cluster: ListenerContext, group_id: str) -> set[tuple[str, int]]:
    """Partitions with offsets of ``group_id`` waiting in an open transaction (TxnOffsetCommit)."""
    model = cluster.model
    out = set()
    for txn in model.txn_state.transactions.values():
        if txn.ongoing:
            for o in txn.pending_offsets:
                topic = model.topics.get(o.topic_id)
                if o.group_id == group_id and topic is not None:
                    out.add((topic.name, o.partition))
    return out


def _fetch_group(cluster: ListenerContext, group_id: str, topics: list[tuple[str, list[int]]] | None,
                 require_stable: bool = False) -> list[tuple[str, list[tuple[int, int, int, str, int]]]]:
    """Rows of (partition, offset, leader epoch, metadata, error); with ``require_stable`` a partition
    whose offset waits in an open transaction answers UNSTABLE_OFFSET_COMMIT, as Kafka does."""
    committed = _committed(cluster, group_id)
    pending = _pending(cluster, group_id) if require_stable else set()
    if topics is None:
        by_topic: dict[str, list[int]] = {}
        for name, part in committed:
            by_topic.setdefault(name, []).append(part)
        topics = sorted(by_topic.items())
    out = []
    for name, parts in topics:
        rows = []
        for p in parts:
            o = committed.get((name, p))
            if (name, p) in pending:
                rows.append((p, -1, -1, "", E.UNSTABLE_OFFSET_COMMIT))
            elif o is None:
                rows.append((p, -1, -1, "", E.NONE))
            else:
                rows.append((p, o.offset, o.leader_epoch, o.metadata, E.NONE))
        out.append((name, rows))
    return out


def offset_fetch(cluster: ListenerContext, broker: int, req: Request) -> object:
    b = req.body
    if req.api_version >= 8:
        groups = []
        for g in b.groups:
            code = not_coordinator(cluster, broker, g.group_id)
            wanted = None if g.topics is None else [(t.name, list(t.partition_indexes)) for t in g.topics]
            rows = [] if code else _fetch_group(cluster, g.group_id, wanted, b.require_stable)
            groups.append(_FetchGroup(group_id=g.group_id, error_code=code, topics=[
                _FetchTopics(name=name, partitions=[
                    _FetchPartitions(partition_index=p, committed_offset=o, committed_leader_epoch=e, metadata=md, error_code=c)
                    for p, o, e, md, c in parts])
                for name, parts in rows]))
        return _FetchResponse(groups=groups)
    code = not_coordinator(cluster, broker, b.group_id)
    if code:
        return _FetchResponse(error_code=code)
    wanted = None if b.topics is None else [(t.name, list(t.partition_indexes)) for t in b.topics]
    rows = _fetch_group(cluster, b.group_id, wanted, req.api_version >= 7 and b.require_stable)
    return _FetchResponse(error_code=E.NONE, topics=[
        _FetchTopic(name=name, partitions=[
            _FetchPartition(partition_index=p, committed_offset=o, committed_leader_epoch=e, metadata=md, error_code=c)
            for p, o, e, md, c in parts])
        for name, parts in rows])


def _state_of(cluster: ListenerContext, group_id: str) -> tuple[str, str]:
    """(state, protocol type) of a group the coordinator or only the model knows (e.g. a mirrored one,
    or one whose members joined through the model's control API: Stable, as Kafka shows a group
    with members)."""
    g = cluster.groups.groups.get(group_id)
    if g is not None and (g.members or g.state != EMPTY):
        return g.state, g.protocol_type or ""
    modelled = cluster.model.groups.get(group_id)
    if modelled is not None and modelled.group_type == GroupType.SHARE:
        return (STABLE if modelled.members else EMPTY), "share"
    if modelled is not None and modelled.members:
        return STABLE, "consumer"
    if modelled is not None or g is not None:
        # A group that only ever committed offsets has no protocol type: Kafka's "simple" group.
        return EMPTY, (g.protocol_type if g is not None and g.protocol_type else "")
    return "Dead", ""


def _is_share(cluster: ListenerContext, group_id: str) -> bool:
    modelled = cluster.model.groups.get(group_id)
    return modelled is not None and modelled.group_type == GroupType.SHARE


def list_groups(cluster: ListenerContext, broker: int, req: Request) -> object:
    ids = sorted(set(cluster.groups.groups) | set(cluster.model.groups))
    states = set(req.body.states_filter or ()) if req.api_version >= 4 else set()
    types = {t.lower() for t in (req.body.types_filter or ())} if req.api_version >= 5 else set()
    out = []
    for gid in ids:
        if coordinator_for(cluster, gid) != broker:
            continue
        state, ptype = _state_of(cluster, gid)
        if states and state not in states:
            continue
        # ListGroups v5's groupType: share groups (KIP-932) apart from classic ones.
        gtype = "share" if _is_share(cluster, gid) else "classic"
        if types and gtype not in types:
            continue
        out.append(_Listed(group_id=gid, protocol_type=ptype, group_state=state, group_type=gtype))
    return _ListResponse(error_code=E.NONE, groups=out)


def describe_groups(cluster: ListenerContext, broker: int, req: Request) -> object:
    out = []
    for gid in req.body.groups:
        code = not_coordinator(cluster, broker, gid)
        if code:
            out.append(_Described(error_code=code, group_id=gid, group_state="", protocol_type="", protocol_data=""))
            continue
        if _is_share(cluster, gid):
            # The classic DescribeGroups does not see share groups: Kafka answers Dead.
            out.append(_Described(error_code=E.NONE, group_id=gid, group_state="Dead", protocol_type="",
                                  protocol_data="", members=[], authorized_operations=-(2**31)))
            continue
        state, ptype = _state_of(cluster, gid)
        g = cluster.groups.groups.get(gid)
        members = []
        protocol = ""
        modelled = cluster.model.groups.get(gid)
        if (g is None or not g.members) and modelled is not None:
            # Members that joined through the model's control API: ids only, no protocol metadata.
            members = [_DescribedMember(member_id=m, group_instance_id=None, client_id="", client_host="",
                                        member_metadata=b"", member_assignment=b"") for m in modelled.members]
        if g is not None and g.members:
            protocol = g.protocol_name or ""
            for m in g.members.values():
                members.append(_DescribedMember(
                    member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                    client_host="/127.0.0.1", member_metadata=dict(m.protocols).get(protocol, b""),
                    member_assignment=m.assignment,
                ))
        out.append(_Described(error_code=E.NONE, group_id=gid, group_state=state, protocol_type=ptype,
                              protocol_data=protocol, members=members, authorized_operations=-(2**31)))
    return _DescribeResponse(groups=out)


HANDLERS = {11: join_group, 14: sync_group, 12: heartbeat, 13: leave_group, 8: offset_commit, 9: offset_fetch,
            16: list_groups, 15: describe_groups}
