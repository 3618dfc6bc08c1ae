"""Start-up check of a destination cluster given over the Kafka protocol (``destination.bootstrap.servers``).

A coordinator's destination must have KIP-1279 in its brokers: mirror appends at the source's
offsets, truncation, leader-epoch bumps, mirror states (``records.kip1279_apis``). A plain Kafka
cluster has none of them, so neither a mirror into it nor a failback onto it (the reverse
mirror's destination is the old source) can work. The worker and the controller ask every
broker of such a destination for its ApiVersions (aiokafka's connection layer, with the
``destination.``-prefixed client settings: ``destination.security.protocol``, ``destination.sasl.*``,
``destination.ssl.*``, ``destination.client.id``) and refuse to start, naming what is missing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from records.kip1279_apis import describe_missing, missing_capabilities
from streams.config import ConfigError

DESTINATION_BOOTSTRAP = "destination.bootstrap.servers"
_PREFIX = "destination."


class DestinationError(ConfigError):
    """The destination cannot be one: unreachable, or without KIP-1279."""


async def api_versions(bootstrap: str, props: Mapping[str, str], timeout_ms: int = 10_000) -> dict[int, dict[int, tuple[int, int]]]:
    """Each broker's ApiVersions table (node id -> api key -> (min, max)), as aiokafka negotiated it."""
    from aiokafka.client import AIOKafkaClient

    from streams.kafka.source import client_settings

    settings = client_settings({"client.id": "kip1279-destination-check", **props})
    client = AIOKafkaClient(bootstrap_servers=bootstrap, request_timeout_ms=timeout_ms, **settings)
    try:
        await client.bootstrap()
        out = {}
        for broker in sorted(client.cluster.brokers(), key=lambda b: b.nodeId):
            conn = await client._get_conn(broker.nodeId)  # aiokafka keeps the versions per connection
            if conn is None:
                raise DestinationError(f"{DESTINATION_BOOTSTRAP}={bootstrap}: broker {broker.nodeId} "
                                       f"({broker.host}:{broker.port}) cannot be reached")  # fmt: skip
            out[broker.nodeId] = dict(conn._versions or {})
        return out
    finally:
        await client.close()


def require_kip1279(bootstrap: str, props: Mapping[str, str] | None = None, timeout_ms: int = 10_000) -> None:
    """Raises DestinationError unless every broker of ``bootstrap`` lists KIP-1279's APIs."""
    from aiokafka.errors import KafkaError

    try:
        tables = asyncio.run(api_versions(bootstrap, props or {}, timeout_ms))
    except DestinationError:
        raise
    except ConfigError as e:  # a bad client setting, named as the coordinator's config has it
        raise DestinationError(f"{_PREFIX}{e}") from e
    except (KafkaError, OSError, asyncio.TimeoutError) as e:
        raise DestinationError(f"{DESTINATION_BOOTSTRAP}={bootstrap}: cannot reach the destination cluster "
                               f"({type(e).__name__}: {e})") from e  # fmt: skip
    lacking = {node: missing for node, t in tables.items() if (missing := missing_capabilities(t))}
    if lacking:
        node, missing = next(iter(lacking.items()))
        others = f" (and {len(lacking) - 1} other broker(s))" if len(lacking) > 1 else ""
        raise DestinationError(
            f"{DESTINATION_BOOTSTRAP}={bootstrap} is not a KIP-1279 cluster: broker {node}{others} lacks what a "
            f"mirror's destination needs, so nothing can mirror into it and no failback can land on it: "
            f"{describe_missing(missing)}")  # fmt: skip


def check_destination(extra: Mapping[str, Any]) -> None:
    """The start-up check of a coordinator (worker or controller) whose destination is given as
    ``destination.bootstrap.servers``. Without one the destination is the model cluster
    (``cluster.model.port``), which has the KIP's APIs."""
    bootstrap = str(extra.get(DESTINATION_BOOTSTRAP, "")).strip()
    if not bootstrap:
        return
    props = {k.removeprefix(_PREFIX): str(v) for k, v in extra.items() if k.startswith(_PREFIX) and k != DESTINATION_BOOTSTRAP}
    require_kip1279(bootstrap, props)
    # Every capability is there: the coordinator still drives a destination only through the
    # cluster model's API; a destination port over the Kafka protocol is not written yet.
    raise DestinationError(f"{DESTINATION_BOOTSTRAP}={bootstrap}: the cluster lists KIP-1279's APIs, but this "
                           "coordinator reaches its destination only through the cluster model "
                           "(cluster.model.port); a destination over the Kafka protocol is not supported yet")  # fmt: skip
