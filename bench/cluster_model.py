"""Benchmarks of the embedded cluster model and its local server.

    .venv/bin/python bench/cluster_model.py [--partitions 50000] [--quick]

Reports appends/s and fetch MB/s of one model partition, the memory per idle partition of a
50,000-partition mirror cluster, and the local server's request rate on loopback (list_offsets,
pipelined over one connection, and from a few concurrent asyncio clients). The LAST line is one
JSON object with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from clustermodel import ClusterModel  # noqa: E402
from clustermodel.client import AsyncClusterClient, ClusterClient  # noqa: E402
from coordinator.ports import IsolationLevel, TopicPartition  # noqa: E402


def bench_appends(n: int, replication_factor: int) -> float:
    """Producer batches/s on one partition (10 records of 100 bytes each), with replication."""
    m = ClusterModel("bench", seed=1, brokers=3, journal=False)
    m.add_topic("t", 1, replication_factor)
    records: list[tuple[bytes | None, bytes | None]] = [(b"key-%d" % i, b"x" * 100) for i in range(10)]
    start = time.perf_counter()
    for _ in range(n):
        m.produce("t", 0, records)
    return n / (time.perf_counter() - start)


def bench_mirror_appends(n: int) -> float:
    """append_mirror_batches calls/s (one 1 KiB batch each) on a mirror partition with RF 3."""
    src = ClusterModel("src", seed=1, journal=False)
    src.add_topic("t", 1, 1)
    for _ in range(n):
        src.produce("t", 0, [(None, b"y" * 1024)])
    tp = src.tp("t")
    batches = src.partition(tp).leader_log.batches
    dst = ClusterModel("dst", seed=2, journal=False)
    dst.create_topic("t", tp.topic_id, 1)
    start = time.perf_counter()
    for b in batches:
        dst.append_mirror_batches(tp, (b,))
    return n / (time.perf_counter() - start)


def bench_fetch(batches: int, payload: int = 16 * 1024, max_bytes: int = 1 << 20) -> float:
    """read_committed fetch MB/s through a full partition with 1 MiB fetches."""
    m = ClusterModel("bench", seed=1, brokers=1, journal=False)
    m.add_topic("t", 1, 1)
    value = b"z" * payload
    for _ in range(batches):
        m.produce("t", 0, [(None, value)])
    tp = m.tp("t")
    leo = m.list_offsets(tp).leo
    total = 0
    start = time.perf_counter()
    rounds = 0
    while time.perf_counter() - start < 1.0 or rounds < 3:
        offset = 0
        while offset < leo:
            result = m.fetch(tp, offset, max_bytes, IsolationLevel.READ_COMMITTED)
            total += sum(b.size_in_bytes for b in result.batches)
            offset = result.batches[-1].next_offset
        rounds += 1
    return total / (time.perf_counter() - start) / 1e6


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def bench_idle_memory(partitions: int, per_topic: int = 50) -> tuple[float, float]:
    """(bytes per idle partition, seconds to build): an RF-3 mirror cluster of read-only topics."""
    gc.collect()
    before = _rss_bytes()
    start = time.perf_counter()
    m = ClusterModel("dst", seed=3, brokers=3, journal=False)
    for t in range(partitions // per_topic):
        m.create_topic(f"mirror-{t}", uuid.UUID(int=t + 1), per_topic, mirror_name="a-to-b")
    built = time.perf_counter() - start
    gc.collect()
    used = _rss_bytes() - before
    assert sum(len(t.partitions) for t in m.topics.values()) == partitions
    return used / partitions, built


def start_server() -> tuple[subprocess.Popen[str], int]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "clustermodel.server", "--port", "0", "--cluster", "bench"],
        stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    return proc, int(line.split()[1])


def bench_server(port: int, seconds: float) -> dict[str, float]:
    client = ClusterClient(port, "bench")
    client.add_topic("t", 1)
    client.produce("t", 0, [(b"k", b"v")])
    tp: TopicPartition = client.tp("t")
    out: dict[str, float] = {}

    n = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds / 3:
        client.list_offsets(tp)
        n += 1
    out["round_trip_per_s"] = n / (time.perf_counter() - start)

    calls = [("list_offsets", (tp,))] * 500
    n = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds / 3:
        client.pipeline(calls)
        n += len(calls)
    out["pipelined_per_s"] = n / (time.perf_counter() - start)
    client.close()

    async def concurrent(clients: int, window: int) -> float:
        conns = [await AsyncClusterClient(port, "bench").connect() for _ in range(clients)]
        done = 0
        deadline = time.perf_counter() + seconds / 3
        begin = time.perf_counter()

        async def worker(c: AsyncClusterClient) -> None:
            nonlocal done
            while time.perf_counter() < deadline:
                await asyncio.gather(*(c.list_offsets(tp) for _ in range(window)))
                done += window

        await asyncio.gather(*(worker(c) for c in conns))
        rate = done / (time.perf_counter() - begin)
        for c in conns:
            await c.close()
        return rate

    out["async_4_clients_per_s"] = asyncio.run(concurrent(4, 100))

    # Fetch throughput through the server: 1 MiB read_committed fetches of 16 KiB batches.
    client = ClusterClient(port, "bench")
    client.add_topic("f", 1, 1)
    client.pipeline([("produce", ("f", 0, [(None, b"z" * 16384)]))] * 640)
    ftp: TopicPartition = client.tp("f")
    total = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds / 6:
        offset = 0
        while offset < 640:
            result = client.fetch(ftp, offset, 1 << 20)
            total += sum(b.size_in_bytes for b in result.batches)
            offset = result.batches[-1].next_offset
    out["fetch_mb_per_s"] = total / (time.perf_counter() - start) / 1e6
    client.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--partitions", type=int, default=50_000)
    parser.add_argument("--quick", action="store_true", help="smaller runs (for CI smoke)")
    args = parser.parse_args()
    scale = 10 if args.quick else 1

    appends_rf3 = bench_appends(50_000 // scale, 3)
    appends_rf1 = bench_appends(50_000 // scale, 1)
    mirror_appends = bench_mirror_appends(50_000 // scale)
    fetch_mb = bench_fetch(4_000 // scale)
    print(f"produce appends/s, one partition, RF 3 : {appends_rf3:>12,.0f}")
    print(f"produce appends/s, one partition, RF 1 : {appends_rf1:>12,.0f}")
    print(f"mirror appends/s, one partition, RF 3  : {mirror_appends:>12,.0f}")
    print(f"fetch MB/s, read_committed, 1 MiB      : {fetch_mb:>12,.1f}  (in-process: batches are shared, not copied)")

    per_partition, built = bench_idle_memory(args.partitions)
    print(f"idle mirror partitions                 : {args.partitions:>12,} (RF 3, built in {built:.1f} s)")
    print(f"memory per idle partition              : {per_partition:>12,.0f} bytes "
          f"({per_partition * args.partitions / 2**20:,.0f} MiB in all)")

    proc, port = start_server()
    try:
        server = bench_server(port, 3.0 if args.quick else 6.0)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    print(f"server list_offsets, one at a time     : {server['round_trip_per_s']:>12,.0f} req/s")
    print(f"server list_offsets, pipelined x500    : {server['pipelined_per_s']:>12,.0f} req/s")
    print(f"server list_offsets, 4 async clients   : {server['async_4_clients_per_s']:>12,.0f} req/s")
    print(f"server fetch MB/s, 1 MiB fetches       : {server['fetch_mb_per_s']:>12,.1f}")

    print(json.dumps({
        "bytes_per_idle_partition": round(per_partition),
        "idle_partitions": args.partitions,
        "appends_per_s": round(appends_rf3),
        "appends_per_s_rf1": round(appends_rf1),
        "mirror_appends_per_s": round(mirror_appends),
        "fetch_mb_per_s": round(fetch_mb, 1),
        "server_requests_per_s": round(max(server["pipelined_per_s"], server["async_4_clients_per_s"])),
        "server_round_trip_per_s": round(server["round_trip_per_s"]),
        "server_async_4_clients_per_s": round(server["async_4_clients_per_s"]),
        "server_fetch_mb_per_s": round(server["fetch_mb_per_s"], 1),
    }))


if __name__ == "__main__":
    main()
