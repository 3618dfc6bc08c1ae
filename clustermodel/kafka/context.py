"""What a request handler sees of the listener that received its request.

Handlers need the model, the cluster's addresses, its group coordinator and wire cache, and a
way to wake long polls; not the sockets. ClusterListeners is the one implementation.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Protocol

from records.kafka_envelope import ApiTable

from ..cluster import ClusterModel
from .batches import WireCache
from .group_coordinator import GroupCoordinator


class ListenerContext(Protocol):
    name: str
    model: ClusterModel
    host: str
    ports: Mapping[int, int]
    api_table: ApiTable  # what ApiVersions advertises
    groups: GroupCoordinator
    wire: WireCache
    internal_topics: set[str]  # Kafka's internal topics created so far (by FindCoordinator)

    def notify(self) -> None:
        """The model changed: wake long-polling fetches."""

    async def wait_change(self, timeout_s: float, partitions: Collection[tuple[int, int]] | None = None) -> None:
        """Until the model changes (with ``partitions``, (topic ID as an int, partition) pairs:
        one of those partitions) or ``timeout_s`` passes."""
