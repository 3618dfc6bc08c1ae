"""The port contract against the in-process model, the local server's client, and the Kafka source
port reading the server's Kafka listeners."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from clustermodel_contract import PortContract

from clustermodel import ClusterModel
from clustermodel.client import ClusterClient
from streams.kafka.source import KafkaSourceCluster

_seeds = itertools.count(100)


class TestInProcessModel(PortContract):
    def new_cluster(self, name: str) -> Any:
        return ClusterModel(name, seed=next(_seeds))


class TestServerClient(PortContract):
    @pytest.fixture(autouse=True)
    def _server(self, model_server: Any) -> Any:
        self.port = model_server.port
        self.clients: list[ClusterClient] = []
        yield
        for client in self.clients:
            client.close()

    def new_cluster(self, name: str) -> Any:
        admin = ClusterClient(self.port, "default")
        admin.add_cluster(name, next(_seeds))
        admin.close()
        client = ClusterClient(self.port, name)
        self.clients.append(client)
        return client


# The SourceCluster reads Kafka's protocol has; ReadMirrorStates (last_mirrored_epoch) is KIP-1279's,
# not Kafka's, so it stays on the model client like the control and destination calls.
_KAFKA_READS = frozenset({"cluster_id", "describe_topics", "list_offsets", "fetch", "end_offset_for_epoch",
                          "latest_epoch", "list_groups", "group_offsets", "is_group_active", "describe_configs",
                          "describe_acls"})  # fmt: skip
_DESTINATION_ONLY = "destination-only writes (append, truncate, epoch bumps, LME) have no Kafka protocol API"


class OverKafka:
    """Reads through ``KafkaSourceCluster`` at a cluster's Kafka listeners; everything else (the
    model's control methods, destination writes) on the model client."""

    def __init__(self, client: ClusterClient, port: KafkaSourceCluster) -> None:
        self.client, self.port = client, port

    def __getattr__(self, name: str) -> Any:
        return getattr(self.port if name in _KAFKA_READS else self.client, name)


class TestKafkaListener(PortContract):
    not_supported = {
        "test_mirror_topic_append_truncate_and_epochs": _DESTINATION_ONLY,
        "test_stop_sequence_markers_and_writable": _DESTINATION_ONLY,
        "test_unreachable_source": "set_unreachable is the model's switch for the coordinator's link; the Kafka "
        "listener serves clients regardless (a crashed broker is test_leadership_moves_and_crashes_are_followed)",
    }

    @pytest.fixture(autouse=True)
    def _server(self, model_server: Any) -> Any:
        self.port = model_server.port
        self.opened: list[Any] = []
        yield
        for c in self.opened:
            c.close()

    def new_cluster(self, name: str) -> Any:
        admin = ClusterClient(self.port, "default")
        admin.add_cluster(name, next(_seeds))
        admin.close()
        client = ClusterClient(self.port, name)
        # metadata_max_age_ms as a worker's: a leadership move is found by the broker's error, not by age.
        port = KafkaSourceCluster(client.bootstrap_servers(name), {"client.id": f"contract-{name}"},
                                  request_timeout_ms=5_000, metadata_max_age_ms=60_000)  # fmt: skip
        self.opened += [client, port]
        return OverKafka(client, port)
