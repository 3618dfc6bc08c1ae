"""What Metadata and DescribeTopicPartitions say of a topic: the model's topics, and Kafka's internal
topics as a Kafka cluster would have them.

Kafka creates ``__consumer_offsets`` on the first FindCoordinator for a group and
``__transaction_state`` on the first for a transactional ID; the model shows each from then on,
or once it holds groups or transactional IDs (synced groups, the control API). The model keeps
offsets and transaction state in memory, not in these logs: they exist for listing and describing
only, with Kafka's default partition counts and replication factor (capped by the brokers).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, NamedTuple

from . import errors as E

if TYPE_CHECKING:
    from .context import ListenerContext

CONSUMER_OFFSETS, TRANSACTION_STATE = "__consumer_offsets", "__transaction_state"
# offsets.topic.num.partitions, transaction.state.log.num.partitions; both replication factors are 3.
INTERNAL_PARTITIONS = {CONSUMER_OFFSETS: 50, TRANSACTION_STATE: 50}
INTERNAL_REPLICATION = 3
NO_LEADER = -1


class PartitionView(NamedTuple):
    index: int
    error_code: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline: list[int]


class TopicView(NamedTuple):
    name: str
    topic_id: uuid.UUID
    internal: bool
    partitions: list[PartitionView]


def coordinated(cluster: ListenerContext, key_type: int) -> None:
    """A FindCoordinator for a group (0) or transactional ID (1): Kafka creates the internal topic now."""
    name = {0: CONSUMER_OFFSETS, 1: TRANSACTION_STATE}.get(key_type)
    if name is not None:
        cluster.internal_topics.add(name)


def internal_topic_names(cluster: ListenerContext) -> list[str]:
    model = cluster.model
    names = set(cluster.internal_topics)
    if model.groups or cluster.groups.groups:
        names.add(CONSUMER_OFFSETS)
    if model.txn_state.transactions:
        names.add(TRANSACTION_STATE)
    return sorted(names)


def topic_names(cluster: ListenerContext) -> list[str]:
    """Every topic a client can list, internal ones included, by name."""
    return sorted({*cluster.model.topic_ids, *internal_topic_names(cluster)})


def topic_view(cluster: ListenerContext, name: str) -> TopicView | None:
    """The topic named ``name`` as Metadata shows it; None when there is none."""
    model = cluster.model
    if name in model.topic_ids:
        topic = model.topic(name)
        return TopicView(name, topic.topic_id, False, [
            PartitionView(i, E.NONE if p.online else E.LEADER_NOT_AVAILABLE, p.leader, p.leader_epoch,
                          list(p.replicas), list(p.isr), [b for b in p.replicas if b not in model.live])
            for i, p in enumerate(topic.partitions)
        ])  # fmt: skip
    if name in internal_topic_names(cluster):
        return _internal_view(cluster, name)
    return None


def internal_topic_configs(cluster: ListenerContext, name: str) -> dict[str, str] | None:
    """The configs Kafka's coordinators set on their internal topic (GroupCoordinatorService and
    TransactionStateManager, at Kafka's defaults); None for any other topic."""
    if name not in internal_topic_names(cluster):
        return None
    if name == CONSUMER_OFFSETS:
        return {"cleanup.policy": "compact", "compression.type": "producer", "segment.bytes": "104857600"}
    # transaction.state.log.min.isr is 2, capped here by the replication factor as the model caps that.
    min_isr = min(2, INTERNAL_REPLICATION, len(cluster.model.brokers))
    return {"unclean.leader.election.enable": "false", "cleanup.policy": "compact", "min.insync.replicas": str(min_isr),
            "compression.type": "uncompressed", "segment.bytes": "104857600"}


def _internal_view(cluster: ListenerContext, name: str) -> TopicView:
    model = cluster.model
    brokers = sorted(model.brokers)
    rf = min(INTERNAL_REPLICATION, len(brokers))
    parts = []
    for p in range(INTERNAL_PARTITIONS[name]):
        replicas = [brokers[(p + i) % len(brokers)] for i in range(rf)]
        live = [b for b in replicas if b in model.live]
        leader = live[0] if live else NO_LEADER
        parts.append(PartitionView(p, E.NONE if live else E.LEADER_NOT_AVAILABLE, leader, 0, replicas,
                                   live or replicas[:1], [b for b in replicas if b not in model.live]))
    # A stable ID per cluster and name, as Kafka keeps one for the topic's life.
    return TopicView(name, uuid.uuid5(uuid.NAMESPACE_URL, f"kafka:{model._cluster_id}/{name}"), True, parts)
