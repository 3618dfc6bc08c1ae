"""Several Apache Kafka clusters started side by side (the source version matrix's six brokers):
storage formatted in parallel, then every JVM launched, then each waited for."""

from __future__ import annotations

import time
from collections.abc import Sequence

from streams.brokers.apache_kafka import DEFAULT_READY_TIMEOUT_S, ApacheKafkaCluster


def start_clusters(clusters: Sequence[ApacheKafkaCluster], timeout: float = DEFAULT_READY_TIMEOUT_S) -> dict[int, BaseException]:
    """Starts several clusters at once: their storage formatted in parallel, every JVM launched from
    this thread (a node dies with the thread that launched it: ``_die_with_parent``), then each
    waited for. Returns the failures by index in ``clusters``; a cluster that failed is stopped."""
    import concurrent.futures

    failures: dict[int, BaseException] = {}
    with concurrent.futures.ThreadPoolExecutor(max(1, len(clusters))) as pool:
        formats = {i: pool.submit(c.format) for i, c in enumerate(clusters)}
        for i, fut in formats.items():
            if fut.exception() is not None:
                failures[i] = fut.exception()  # type: ignore[assignment]
    started = time.monotonic()
    for i, cluster in enumerate(clusters):
        if i not in failures:
            try:
                for node in cluster.nodes:
                    cluster.start_node(node.node_id, wait=False)
            except BaseException as e:  # noqa: BLE001 - reported per cluster
                failures[i] = e
    for i, cluster in enumerate(clusters):
        if i not in failures:
            try:
                cluster.wait_ready(max(1.0, timeout - (time.monotonic() - started)))
                cluster.startup_s = time.monotonic() - started
            except BaseException as e:  # noqa: BLE001 - reported per cluster
                failures[i] = e
    for i in failures:
        clusters[i].stop()
    return failures
