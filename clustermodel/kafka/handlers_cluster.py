"""ApiVersions, Metadata, FindCoordinator."""

from __future__ import annotations

import re
import zlib
from typing import TYPE_CHECKING

from records.kafka_envelope import Request
from records.registry import default_schemas

from . import errors as E

if TYPE_CHECKING:
    from .context import ListenerContext

S = default_schemas()
_MetadataResponse = S.struct("MetadataResponse")
_Broker = S.nested("MetadataResponse", "MetadataResponseBroker")
_Topic = S.nested("MetadataResponse", "MetadataResponseTopic")
_Partition = S.nested("MetadataResponse", "MetadataResponsePartition")
_FindCoordinatorResponse = S.struct("FindCoordinatorResponse")
_Coordinator = S.nested("FindCoordinatorResponse", "Coordinator")
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
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
        names = sorted(model.topic_ids)
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
        if not isinstance(name, str) or name not in model.topic_ids:
            code = E.UNKNOWN_TOPIC_ID if not isinstance(name, str) else E.UNKNOWN_TOPIC_OR_PARTITION
            topics.append(_Topic(error_code=code, name=name if isinstance(name, str) else None,
                                 topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
            continue
        topic = model.topic(name)
        parts = []
        for i, p in enumerate(topic.partitions):
            parts.append(_Partition(
                error_code=E.NONE if p.online else E.LEADER_NOT_AVAILABLE,
                partition_index=i,
                leader_id=p.leader,
                leader_epoch=p.leader_epoch,
                replica_nodes=list(p.replicas),
                isr_nodes=list(p.isr),
                offline_replicas=[b for b in p.replicas if b not in model.live],
            ))
        topics.append(_Topic(error_code=E.NONE, name=name, topic_id=topic.topic_id, is_internal=False,
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


HANDLERS = {18: api_versions, 3: metadata, 10: find_coordinator}
