"""The embedded cluster model: deterministic, seedable Kafka source and destination clusters.

An adapter for the coordinator's ports (coordinator.ports). See cluster.ClusterModel for the
in-process model, server/client for the local server, workload for demo and test traffic.
"""

from .cluster import ClusterModel
from .errors import ElectionError, ModelError, NotEnoughReplicas, TransactionError, UnknownTopicName
from .records import batch_values, decode_records, filter_aborted
from .transactions_state import ProducerIdentity

__all__ = [
    "ClusterModel",
    "ElectionError",
    "ModelError",
    "NotEnoughReplicas",
    "ProducerIdentity",
    "TransactionError",
    "UnknownTopicName",
    "batch_values",
    "decode_records",
    "filter_aborted",
]
