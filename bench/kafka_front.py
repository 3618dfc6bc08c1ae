"""Produce and fetch throughput of aiokafka through the model's Kafka listener vs a noida-db broker
and Apache Kafka.

    .venv/bin/python bench/kafka_front.py [--records 50000] [--value-bytes 100] [--quick] [--no-kafka]

The same client code runs against all three in one run: a clustermodel-server with one cluster of
one broker, a noida-db started as streams/brokers/noida.py starts it, and one combined-mode Apache Kafka
node (streams/brokers/apache_kafka.py; its column is left out, with the reason, where Java or the jars
are missing, or with ``--no-kafka``). Produce:
records/s of ``send`` calls awaited together (acks=1, the client's default batching). Fetch: a
consumer assigned the partition reads every record from the start (the second of two reads: the
first warms both sides up); MB/s counts keys and values.
The LAST line is one JSON object with the figures, the model/noida ratios and the model/Kafka ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from clustermodel.client import ClusterClient  # noqa: E402
from streams.brokers.apache_kafka import ApacheKafkaCluster
from streams.brokers.kafka_jars import missing_reason
from streams.brokers.noida import LocalBroker  # noqa: E402

TOPIC = "bench"


async def produce(bootstrap: str, n: int, value: bytes) -> float:
    from aiokafka import AIOKafkaProducer

    p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5, max_batch_size=256 * 1024)
    await p.start()
    try:
        await (await p.send(TOPIC, value, key=b"warm-up", partition=0))
        start = time.perf_counter()
        futures = [await p.send(TOPIC, value, key=b"k%08d" % i, partition=0) for i in range(n)]
        await asyncio.gather(*futures)
        return n / (time.perf_counter() - start)
    finally:
        await p.stop()


async def fetch(bootstrap: str, n: int) -> tuple[float, int]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
                         fetch_max_bytes=8 * 1024 * 1024, max_partition_fetch_bytes=4 * 1024 * 1024)
    await c.start()
    try:
        tp = TopicPartition(TOPIC, 0)
        c.assign([tp])
        await c.seek_to_beginning(tp)
        got = size = 0
        start = time.perf_counter()
        while got < n + 1:
            for msgs in (await c.getmany(timeout_ms=1000, max_records=100_000)).values():
                got += len(msgs)
                size += sum(len(m.value or b"") + len(m.key or b"") for m in msgs)
        elapsed = time.perf_counter() - start
        return size / elapsed / 1e6, got
    finally:
        await c.stop()


async def create_topic(bootstrap: str) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(TOPIC, 1, 1)])
    finally:
        await admin.close()


def run_against(name: str, bootstrap: str, n: int, value: bytes) -> dict[str, float]:
    asyncio.run(create_topic(bootstrap))
    rps = asyncio.run(produce(bootstrap, n, value))
    asyncio.run(fetch(bootstrap, n))  # warm-up: codecs compiled, caches filled, on both sides
    mbps, got = asyncio.run(fetch(bootstrap, n))
    assert got >= n, f"{name}: read {got} of {n} records"
    print(f"{name:7s} produce {rps:10.0f} records/s   fetch {mbps:7.2f} MB/s", flush=True)
    return {"produce_records_per_s": rps, "fetch_mb_per_s": mbps}


def start_model() -> tuple[subprocess.Popen[str], str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(
        [sys.executable, "-m", "clustermodel.server", "--port", "0", "--cluster", "A", "--brokers", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT, env=env,
    )
    assert proc.stdout is not None
    port = int(proc.stdout.readline().split()[1])
    with ClusterClient(port, "A") as client:
        return proc, client.bootstrap_servers()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="10,000 records")
    parser.add_argument("--no-kafka", action="store_true", help="leave out the Apache Kafka column")
    args = parser.parse_args(argv)
    n = 10_000 if args.quick else args.records
    value = b"v" * args.value_bytes

    proc, bootstrap = start_model()
    try:
        model = run_against("model", bootstrap, n, value)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    with tempfile.TemporaryDirectory() as tmp, LocalBroker(tmp) as broker:
        noida = run_against("noida", broker.bootstrap, n, value)
    result = {
        "records": n,
        "value_bytes": args.value_bytes,
        "produce_records_per_s": round(model["produce_records_per_s"]),
        "fetch_mb_per_s": round(model["fetch_mb_per_s"], 2),
        "noida_produce_records_per_s": round(noida["produce_records_per_s"]),
        "noida_fetch_mb_per_s": round(noida["fetch_mb_per_s"], 2),
        "produce_ratio_vs_noida": round(model["produce_records_per_s"] / noida["produce_records_per_s"], 3),
        "fetch_ratio_vs_noida": round(model["fetch_mb_per_s"] / noida["fetch_mb_per_s"], 3),
    }
    kafka_reason = "--no-kafka" if args.no_kafka else missing_reason()
    if kafka_reason is None:
        with tempfile.TemporaryDirectory() as tmp, ApacheKafkaCluster(tmp, brokers=1) as cluster:
            kafka = run_against("kafka", cluster.bootstrap, n, value)
        result.update({
            "kafka_produce_records_per_s": round(kafka["produce_records_per_s"]),
            "kafka_fetch_mb_per_s": round(kafka["fetch_mb_per_s"], 2),
            "produce_ratio_vs_kafka": round(model["produce_records_per_s"] / kafka["produce_records_per_s"], 3),
            "fetch_ratio_vs_kafka": round(model["fetch_mb_per_s"] / kafka["fetch_mb_per_s"], 3),
        })  # fmt: skip
    else:
        result["kafka_skipped"] = kafka_reason
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
