"""ApiVersions, Metadata, FindCoordinator."""

from __future__ import annotations

import re
import uuid
import zlib
from typing import TYPE_CHECKING

from records.kafka_envelope import Request
from records.registry import default_schemas

from . import errors as E
from .topic_views import coordinated, topic_names, topic_view

if TYPE_CHECKING:
    from .context import ListenerContext

S = default_schemas()
_MetadataResponse = S.struct("MetadataResponse")
_Broker = S.nested("MetadataResponse", "MetadataResponseBroker")
_Topic = S.nested("MetadataResponse", "MetadataResponseTopic")
_Partition = S.nested("MetadataResponse", "MetadataResponsePartition")
_FindCoordinatorResponse = S.struct("FindCoordinatorResponse")
_Coordinator = S.nested("FindCoordinatorResponse", "Coordinator")
_DTPResponse = S.struct("DescribeTopicPartitionsResponse")
_DTPTopic = S.nested("DescribeTopicPartitionsResponse", "DescribeTopicPartitionsResponseTopic")
_DTPPartition = S.nested("DescribeTopicPartitionsResponse", "DescribeTopicPartitionsResponsePartition")
_DTPCursor = S.nested("DescribeTopicPartitionsResponse", "Cursor")
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
MAX_REQUEST_PARTITION_SIZE_LIMIT = 2000  # max.request.partition.size.limit
INVALID_TOPIC_EXCEPTION = 17
_ApiVersionsResponse = S.struct("ApiVersionsResponse")
_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


def api_versions(cluster: ListenerContext, broker: int, req: Request) -> object:
    body = req.body
    # Kafka's ApiVersionsRequest.isValid (v3+): client software name and version must match
    # its pattern, else INVALID_REQUEST and no API keys.
    if req.api_version >= 3 and not (_SOFTWARE.fullmatch(body.client_software_name)
                                     and _SOFTWARE.fullmatch(body.client_software_version)):
        return _ApiVersionsResponse(error_code=E.INVALID_REQUEST)
    return cluster.api_table.api_versions_body()


def live_brokers(cluster: ListenerContext) -> list[int]:
    return sorted(cluster.model.live)


def metadata(cluster: ListenerContext, broker: int, req: Request) -> object:
    model = cluster.model
    live = live_brokers(cluster)
    brokers = [_Broker(node_id=b, host=cluster.host, port=cluster.ports[b], rack=None) for b in live]
    wanted = req.body.topics
    if wanted is None or (req.api_version == 0 and not wanted):  # v0: an empty list means every topic
        names = topic_names(cluster)
    else:
        names = []
        for t in wanted:
            if t.name is None and t.topic_id is not None:
                topic = model.topics.get(t.topic_id)
                names.append(topic.name if topic is not None else t.topic_id)
            else:
                names.append(t.name)
    topics = []
    for name in names:
        view = topic_view(cluster, name) if isinstance(name, str) else None
        if view is None:
            code = E.UNKNOWN_TOPIC_ID if not isinstance(name, str) else E.UNKNOWN_TOPIC_OR_PARTITION
            topics.append(_Topic(error_code=code, name=name if isinstance(name, str) else None,
                                 topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
            continue
        parts = [_Partition(error_code=p.error_code, partition_index=p.index, leader_id=p.leader, leader_epoch=p.leader_epoch,
                            replica_nodes=p.replicas, isr_nodes=p.isr, offline_replicas=p.offline)
                 for p in view.partitions]  # fmt: skip
        topics.append(_Topic(error_code=E.NONE, name=name, topic_id=view.topic_id, is_internal=view.internal,
                             partitions=parts, topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
    return _MetadataResponse(
        brokers=brokers,
        cluster_id=model._cluster_id,
        controller_id=live[0] if live else -1,
        topics=topics,
        cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )


def coordinator_for(cluster: ListenerContext, key: str) -> int | None:
    """The broker coordinating a group or transactional ID: a stable hash over the live brokers."""
    live = live_brokers(cluster)
    if not live:
        return None
    return live[zlib.crc32(key.encode()) % len(live)]


def not_coordinator(cluster: ListenerContext, broker: int, key: str) -> int:
    """The error a request keyed by a group or transactional ID gets from ``broker``; NONE when it coordinates the key."""
    node = coordinator_for(cluster, key)
    if node is None:
        return E.COORDINATOR_NOT_AVAILABLE
    return E.NONE if node == broker else E.NOT_COORDINATOR


def find_coordinator(cluster: ListenerContext, broker: int, req: Request) -> object:
    body = req.body
    keys = list(body.coordinator_keys) if req.api_version >= 4 else [body.key]
    coordinated(cluster, body.key_type if req.api_version >= 1 else 0)
    results = []
    for key in keys:
        node = coordinator_for(cluster, key)
        if node is None:
            results.append(_Coordinator(key=key, node_id=-1, host="", port=-1, error_code=E.COORDINATOR_NOT_AVAILABLE))
        else:
            results.append(_Coordinator(key=key, node_id=node, host=cluster.host, port=cluster.ports[node], error_code=E.NONE))
    if req.api_version >= 4:
        return _FindCoordinatorResponse(coordinators=results)
    r = results[0]
    return _FindCoordinatorResponse(error_code=r.error_code, error_message=None, node_id=r.node_id, host=r.host, port=r.port)


def describe_topic_partitions(cluster: ListenerContext, broker: int, req: Request) -> object:
    """Kafka's DescribeTopicPartitionsRequestHandler: topics by name from the cursor on, at most
    ResponsePartitionLimit partitions, the next cursor where it stopped. The model has no ELR
    (KIP-966): both ELR lists are empty, as Kafka gives them for a partition whose ISR never shrank
    below min.insync.replicas."""
    b = req.body
    every = not b.topics
    start_topic = b.cursor.topic_name if b.cursor is not None else ""
    if every:
        names = [n for n in topic_names(cluster) if n >= start_topic]
    else:
        names = sorted({t.name for t in b.topics if t.name >= start_topic})
        if b.cursor is not None and b.cursor.topic_name not in names:
            return _dtp_invalid(b)  # Kafka: the topic list should contain the cursor topic
    if b.cursor is not None and b.cursor.partition_index < 0:
        return _dtp_invalid(b)  # Kafka: the cursor partition must be valid
    remaining = max(min(MAX_REQUEST_PARTITION_SIZE_LIMIT, b.response_partition_limit), 1)
    topics, cursor = [], None
    for name in names:
        if remaining == 0:
            cursor = _DTPCursor(topic_name=name, partition_index=0)
            break
        view = topic_view(cluster, name)
        if view is None:
            if not every:
                topics.append(_DTPTopic(error_code=_unknown_topic_error(name), name=name, is_internal=name.startswith("__"),
                                        partitions=[], topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
            continue
        first = b.cursor.partition_index if b.cursor is not None and name == b.cursor.topic_name else 0
        chosen = view.partitions[first:first + remaining]
        topics.append(_DTPTopic(error_code=E.NONE, name=name, topic_id=view.topic_id, is_internal=view.internal,
                                topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED, partitions=[
            _DTPPartition(error_code=p.error_code, partition_index=p.index, leader_id=p.leader, leader_epoch=p.leader_epoch,
                          replica_nodes=p.replicas, isr_nodes=p.isr, eligible_leader_replicas=[], last_known_elr=[],
                          offline_replicas=p.offline)
            for p in chosen]))  # fmt: skip
        if first + len(chosen) < len(view.partitions):
            cursor = _DTPCursor(topic_name=name, partition_index=first + len(chosen))
            break
        remaining -= len(chosen)
    return _DTPResponse(topics=topics, next_cursor=cursor)


def _dtp_invalid(b: object) -> object:
    """Kafka's answer to an InvalidRequestException here: every requested topic with INVALID_REQUEST."""
    return _DTPResponse(topics=[_DTPTopic(error_code=E.INVALID_REQUEST, name=t.name, topic_id=uuid.UUID(int=0), is_internal=False,
                                          partitions=[], topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)
                                for t in b.topics])  # fmt: skip


def _unknown_topic_error(name: str) -> int:
    """Kafka's Topic.validate: a name it could never create is INVALID_TOPIC_EXCEPTION, else unknown."""
    legal = 0 < len(name) <= 249 and name not in (".", "..") and all(c.isascii() and (c.isalnum() or c in "._-") for c in name)
    return E.UNKNOWN_TOPIC_OR_PARTITION if legal else INVALID_TOPIC_EXCEPTION


HANDLERS = {18: api_versions, 3: metadata, 10: find_coordinator, 75: describe_topic_partitions}
