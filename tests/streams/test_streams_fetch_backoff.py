"""An idle consumer must not busy-poll a broker that answers empty fetches at once (noida-db),
and a record produced to it is still read promptly (streams.runner.backoff)."""

from __future__ import annotations

import asyncio
import time

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from streams.runner import backoff as fetch_backoff
from streams.brokers.noida import LocalBroker


async def _fetches_while_idle(bootstrap: str, topic: str, seconds: float) -> tuple[int, float]:
    """(fetch requests sent in ``seconds`` by an idle consumer of 4 partitions, seconds until a
    record produced afterwards was read)."""
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                         auto_offset_reset="earliest")  # fmt: skip
    await c.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(4)]
        c.assign(tps)
        await c.seek_to_beginning(*tps)
        sent = [0]
        original = c._client.send

        async def counting(node_id, request, *a, **k):  # noqa: ANN001, ANN202
            if type(request).__name__.startswith("FetchRequest"):
                sent[0] += 1
            return await original(node_id, request, *a, **k)

        c._client.send = counting  # type: ignore[method-assign]
        await asyncio.sleep(seconds)
        idle = sent[0]
        p = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await p.start()
        try:
            await p.send_and_wait(topic, b"v", key=b"k", partition=2)
        finally:
            await p.stop()
        t = time.monotonic()
        got = await c.getmany(*tps, timeout_ms=5000)
        return idle, (time.monotonic() - t) if got else float("inf")
    finally:
        await c.stop()


def test_idle_consumer_backs_off_and_still_reads_promptly(broker: LocalBroker) -> None:
    topic = f"fetch-backoff-{time.monotonic_ns()}"

    async def run() -> tuple[int, float]:
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, 4, 1)])
        finally:
            await admin.close()
        return await _fetches_while_idle(broker.bootstrap, topic, 1.0)

    assert fetch_backoff.install()
    try:
        assert fetch_backoff.install()  # idempotent
        idle, latency = asyncio.run(run())
    finally:
        fetch_backoff.uninstall()
    # At most one empty fetch per BACKOFF_S (10 ms): ~100 a second, not thousands.
    assert 0 < idle <= 1.0 / fetch_backoff.BACKOFF_S * 1.5, idle
    assert latency < 1.0, latency
