"""The port contract against the in-process model and against the local server's client."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from clustermodel_contract import PortContract

from clustermodel import ClusterModel
from clustermodel.client import ClusterClient

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
