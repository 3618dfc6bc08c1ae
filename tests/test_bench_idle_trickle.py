"""The idle bench's trickle reaches many topics: its producer learns them all before it sends.

aiokafka's producer asks the metadata of a topic it does not know when its first record is sent,
and waits for the answer: one round trip per new topic, one after another. With 500 trickle
topics (50,000 partitions, 1%) the producer sent ~8 records a second, and the bench read that as
the mirror's trickle path choking. ``trickle_clients`` asks for every topic at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from model_server import ServerProcess

from bench.idle import trickle_clients
from clustermodel.client import ClusterClient

TOPICS = 50


@pytest.fixture
def port() -> Iterator[int]:
    server = ServerProcess("--cluster", "A", "--cluster", "B", "--seed", "5")
    yield server.port
    server.stop()


def test_the_trickle_producer_knows_every_topic_before_its_first_send(port: int) -> None:
    parts = [(f"trickle-{i:03d}", 0) for i in range(TOPICS)]
    with ClusterClient(port, "A") as a, ClusterClient(port, "B") as b:
        for cluster in (a, b):
            cluster.pipeline([("add_topic", (t, 1)) for t, _ in parts])
        boot_a, boot_b = a.bootstrap_servers("A"), b.bootstrap_servers("B")

    async def run() -> None:
        producer, consumer, ends_a = await trickle_clients(boot_a, boot_b, parts)
        try:
            cluster = producer.client.cluster
            unknown = [t for t, _ in parts if cluster.partitions_for_topic(t) is None]
            assert unknown == []  # no send waits for a metadata round trip of its own
            sends = [await producer.send(t, b"x", partition=p) for t, p in parts]
            acks = await asyncio.wait_for(asyncio.gather(*sends), 30)
            assert len(acks) == TOPICS
            assert sum((await ends_a.end_offsets(list(ends_a.assignment()))).values()) == TOPICS
        finally:
            await producer.stop()
            await consumer.stop()
            await ends_a.stop()

    asyncio.run(run())
