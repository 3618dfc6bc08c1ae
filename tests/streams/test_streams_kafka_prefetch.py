"""The Kafka source port prefetches, as a Kafka consumer does: once a partition's fetch is served
and the partition is still behind the HW, its next fetch goes to the source at once, so the source
reads it while the mirror appends the last answer; the next ``fetch`` at that position is served
from it. Against the model server's Kafka listener (a broker that keeps to partition_max_bytes).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from model_server import ServerProcess

from clustermodel.client import ClusterClient
from coordinator.ports import IsolationLevel
from streams.kafka.source import KafkaSourceCluster

UNCOMMITTED = IsolationLevel.READ_UNCOMMITTED


@pytest.fixture
def source() -> Iterator[tuple[ClusterClient, str]]:
    server = ServerProcess("--cluster", "A", "--seed", "3")
    a = ClusterClient(server.port, "A")
    try:
        yield a, a.bootstrap_servers()
    finally:
        a.close()
        server.stop()


def _asked(port: KafkaSourceCluster) -> list[int]:
    """Records the fetch offset of every partition the port sends a Fetch for."""
    asked: list[int] = []
    reads = port.partitions
    real = reads._fetch_from

    async def fetch_from(meta: Any, node: int, isolation: int, idx: list[int], args: list[Any]) -> Any:
        asked.extend(args[i][1] for i in idx)
        return await real(meta, node, isolation, idx, args)

    reads._fetch_from = fetch_from  # type: ignore[method-assign]
    return asked


def test_the_next_fetch_of_a_partition_behind_is_sent_before_it_is_asked(source: tuple[ClusterClient, str]) -> None:
    a, bootstrap = source
    a.add_topic("t", 1)
    for i in range(6):  # six batches
        a.produce("t", 0, [(b"k", b"v%d" % i * 100)] * 3)
    port = KafkaSourceCluster(bootstrap)
    plain = KafkaSourceCluster(bootstrap)
    plain.partitions.prefetches = None
    try:
        tp = port.describe_topics()[0].partitions[0].topic_partition
        asked = _asked(port)
        first = port.fetch(tp, 0, 1, UNCOMMITTED)  # one batch at a time
        assert len(first.batches) == 1 and first.hw == 18
        nxt = first.batches[0].next_offset
        deadline = time.monotonic() + 5
        while nxt not in asked:  # sent without being asked
            assert time.monotonic() < deadline, asked
            time.sleep(0.01)
        second = port.fetch(tp, nxt, 1, UNCOMMITTED, last_fetched_epoch=first.batches[0].leader_epoch)
        assert asked.count(nxt) == 1  # served from the prefetch, not asked again
        assert second == plain.fetch(tp, nxt, 1, UNCOMMITTED, last_fetched_epoch=first.batches[0].leader_epoch)
        # Another position than the prefetched one (a truncation, say) is fetched afresh.
        again = port.fetch(tp, 0, 1, UNCOMMITTED)
        assert again.batches == first.batches and asked.count(0) == 2
        # Caught up: nothing more is prefetched.
        whole = port.fetch(tp, 0, 1 << 20, UNCOMMITTED)
        assert whole.batches[-1].next_offset == whole.hw == 18
        n = len(asked)
        time.sleep(0.2)
        assert len(asked) == n
    finally:
        port.close()
        plain.close()
