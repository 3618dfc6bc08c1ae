"""How the worker opens a mirror's two ports: the cluster-model server (one reconnecting client per
cluster, calls serialised by a lock) or a Kafka-protocol source (``streams.kafka.source``)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from coordinator.fencing import MUTATING_METHODS
from coordinator.image import ClusterMirrorImage
from coordinator.ports import SourceUnavailable
from coordinator.workflows.config import is_connection_config
from streams.config import (
    WorkerConfig,
)


PortFactory = Callable[[str, ClusterMirrorImage], tuple[Any, Any]]


class ReconnectingClient:
    """A model-server client with a per-call timeout that reconnects after a failed call.

    A timed-out call leaves the connection out of step (its late reply would answer the next
    request), so the connection is dropped; the next call opens a new one.
    """

    def __init__(self, port: int, cluster: str, timeout: float) -> None:
        self.port, self.cluster, self.timeout = port, cluster, timeout
        self._client: Any = None

    def _get(self) -> Any:
        if self._client is None:
            from clustermodel.client import ClusterClient

            self._client = ClusterClient(self.port, self.cluster, timeout=self.timeout)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)

        def call(*args: Any, **kwargs: Any) -> Any:
            client = self._get()
            try:
                if "fence" in kwargs:  # the generic call puts the owner fence in the request frame
                    return client.call(name, *args, **kwargs)
                return getattr(client, name)(*args, **kwargs)
            except SourceUnavailable:
                self.close()
                raise

        return call


class LockedPort:
    """An in-process port (a ``ClusterModel``) shared by jobs on several threads."""

    def __init__(self, port: Any, lock: threading.RLock) -> None:
        self._port, self._lock = port, lock

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._port, name)
        if not callable(attr):
            return attr

        fenced = name in MUTATING_METHODS

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                fence = kwargs.pop("fence", None)
                if fenced:  # the cluster checks, as the model server does for its clients
                    self._port.check_owner_fence(fence)
                return attr(*args, **kwargs)

        return call


def model_cluster_of(bootstrap: str) -> str:
    """``model://A`` -> ``A`` (a mirror's ``bootstrap.servers`` naming a model cluster)."""
    if not bootstrap.startswith("model://"):
        raise ValueError(f"bootstrap.servers {bootstrap!r} does not name a model cluster (model://NAME)")
    return bootstrap.removeprefix("model://").strip("/")


def source_key(mirror: ClusterMirrorImage) -> tuple[str, tuple[tuple[str, str], ...]]:
    """What a mirror's source connection depends on: its bootstrap and its client settings."""
    return mirror.source_bootstrap, tuple(sorted((k, v) for k, v in mirror.configs.items() if is_connection_config(k)))


def open_source(mirror: ClusterMirrorImage, model_port: int, timeout: float) -> Any:
    """A mirror's source port: the model cluster for ``bootstrap.servers=model://NAME``, else a
    Kafka-protocol broker list (``host:port[,host:port]``) reached with the mirror's client
    settings (``streams.kafka.source``; bad settings fail its calls, naming the setting)."""
    from streams.kafka.source import KafkaSourceCluster, is_model_bootstrap

    bootstrap = mirror.source_bootstrap
    if is_model_bootstrap(bootstrap):
        if model_port <= 0:
            raise ValueError(f"bootstrap.servers {bootstrap!r} names a model cluster, but no cluster.model.port is set")
        return ReconnectingClient(model_port, model_cluster_of(bootstrap), timeout)
    # Kafka's request.timeout.ms default, not the model's short one: a broker that ignores Fetch
    # limits (noida-db) answers a first fetch with the whole log. A stop never waits on the source.
    return KafkaSourceCluster(bootstrap, dict(mirror.configs), request_timeout_ms=max(int(timeout * 1000), 30_000))


def model_server_ports(config: WorkerConfig, timeout: float = 5.0) -> PortFactory:
    """Ports on the cluster-model server: ``cluster.model.port``; the destination cluster is
    ``cluster.model.cluster`` (default: ``cluster.name``), the source is the mirror's
    ``bootstrap.servers``: ``model://NAME`` or a real Kafka-protocol broker list (``open_source``).
    Each cluster mirror gets its own connections."""
    port = int(config.extra.get("cluster.model.port", "0"))
    if port <= 0:
        raise ValueError("cluster.model.port is required for the model-server ports")
    dest = config.extra.get("cluster.model.cluster", config.cluster_name)

    def ports(mirror_name: str, mirror: ClusterMirrorImage) -> tuple[Any, Any]:
        return open_source(mirror, port, timeout), ReconnectingClient(port, dest, timeout)

    return ports


def in_process_ports(clusters: dict[str, Any], dest: str) -> PortFactory:
    """Ports on in-process ``ClusterModel``s (unit tests); one lock per cluster."""
    locks = {name: threading.RLock() for name in clusters}

    def ports(mirror_name: str, mirror: ClusterMirrorImage) -> tuple[Any, Any]:
        src = model_cluster_of(mirror.source_bootstrap)
        return LockedPort(clusters[src], locks[src]), LockedPort(clusters[dest], locks[dest])

    return ports
