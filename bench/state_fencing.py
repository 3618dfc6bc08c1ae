"""What the state writes' fencing costs (issue #35): one transactional producer per table partition.

    python -m bench.state_fencing [--broker noida|kafka] [--partitions 25] [--keys 200] [--idle-s 30]

On a broker of its own (noida-db, or Apache Kafka from the fetched jars), one worker's side of
the ``mirror_state`` table (``WorkerTable``, Faust's RocksDB, no Faust app running):

- ``takeover_seconds``: ``sync_ownership`` of ``--partitions`` table partitions, each holding
  ``--keys`` mirror partitions written by a previous owner (two states each): the fence (one
  InitProducerId per partition) and the read of each partition to its LSO, then the load;
  ``fence_seconds`` is the fence alone, measured again on the same partitions;
- ``idle_cpu_seconds``: the process's CPU over ``--idle-s`` seconds with those producers open
  and nothing to write (``idle_cpu_percent`` the same per second);
- ``persist_ms``: the median time of one ``write_durably`` of one table partition's ``--keys``
  states in a transaction of its own producer (begin, add the partition, the batch, commit)
  against ``persist_ms_idempotent``, the same batch on an idempotent producer (the write path
  before the fencing), alternating; ``persist_cpu_ms`` and ``persist_cpu_ms_idempotent`` the
  process's CPU meanwhile.

The LAST line is one JSON object of those figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

from coordinator.partition_state import MirrorPartitionKey, MirrorPartitionState
from coordinator.states import MirrorState
from streams.config import WorkerConfig, ensure_topics
from streams.state.mirror_state import make_app, make_mirror_state_table
from streams.worker.state_store import WorkerStateStore
from streams.worker.table import WorkerTable
from streams.worker.topics import worker_topic_specs

STATE_PARTITIONS = 50


def _table(cfg: WorkerConfig, data: Path, image: object) -> WorkerTable:
    c = cfg.with_overrides(data_dir=str(data))
    table = make_mirror_state_table(make_app(c), c)
    return WorkerTable(c, table, WorkerStateStore(c.state_partitions), lambda: image, lambda _: None)  # type: ignore[arg-type,return-value]


def _write_all(wt: WorkerTable, keys: dict[int, list[MirrorPartitionKey]], state: MirrorState, applied: int) -> None:
    for ks in keys.values():
        for k in ks:
            before = wt.store.get(k)
            epoch = before.state_epoch + 1 if before is not None else 0
            wt.store.put(k, MirrorPartitionState(state=state, state_epoch=epoch, applied_offset=applied))


async def run(bootstrap: str, args: argparse.Namespace, work: Path) -> dict[str, object]:
    cfg = WorkerConfig(bootstrap_servers=bootstrap, cluster_name=f"bench-{uuid.uuid4().hex[:6]}",
                       state_partitions=STATE_PARTITIONS, data_dir=str(work / "unused"))  # fmt: skip
    await ensure_topics(bootstrap, worker_topic_specs(cfg))
    parts = set(range(args.partitions))
    probe = WorkerStateStore(STATE_PARTITIONS)
    keys: dict[int, list[MirrorPartitionKey]] = {p: [] for p in parts}
    i = 0
    while any(len(ks) < args.keys for ks in keys.values()):
        i += 1
        k = MirrorPartitionKey("m", uuid.UUID(int=i), 0)
        p = probe.partition_of(k)
        if p in keys and len(keys[p]) < args.keys:
            keys[p].append(k)
    image = SimpleNamespace(offset=10, mirrors=SimpleNamespace(
        topics={k.topic_id: SimpleNamespace(mirror_name="m") for ks in keys.values() for k in ks}))  # fmt: skip
    before = _table(cfg, work / "before", image)
    after = _table(cfg, work / "after", image)
    out: dict[str, object] = {"broker": args.broker, "partitions": args.partitions, "keys_per_partition": args.keys}
    try:
        await before.sync_ownership(parts, generation=1)
        for state in (MirrorState.PREPARING, MirrorState.MIRRORING):
            _write_all(before, keys, state, 1)
            await asyncio.gather(*(before.persist(p) for p in parts))

        started = time.perf_counter()
        _, loaded = await after.sync_ownership(parts, generation=2)
        out["takeover_seconds"] = round(time.perf_counter() - started, 3)
        assert len(loaded) == args.partitions * args.keys, len(loaded)
        started = time.perf_counter()
        await after.producers.fence(parts)
        out["fence_seconds"] = round(time.perf_counter() - started, 3)

        cpu = time.process_time()
        await asyncio.sleep(args.idle_s)
        idle = time.process_time() - cpu
        out["idle_cpu_seconds"] = round(idle, 3)
        out["idle_cpu_percent"] = round(100 * idle / args.idle_s, 3)

        p = min(parts)
        producer = await after.changelog_producer()  # idempotent, as state writes were before the fencing
        txn, plain, txn_cpu, plain_cpu = [], [], [], []
        writes = [(after.store.state_key(k), b"\x00\x00" + b"x" * 120) for k in keys[p]]
        for _ in range(args.rounds):  # the same write batch both ways, alternating
            for producer_now, wall, cpu in ((after.producers.get(p), txn, txn_cpu), (producer, plain, plain_cpu)):
                t0, c0 = time.perf_counter(), time.process_time()
                await after.table.write_durably(p, writes, producer_now, keys_checked=True)
                wall.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
        out["persist_ms"] = round(1000 * statistics.median(txn), 2)
        out["persist_ms_idempotent"] = round(1000 * statistics.median(plain), 2)
        out["persist_cpu_ms"] = round(1000 * statistics.median(txn_cpu), 3)
        out["persist_cpu_ms_idempotent"] = round(1000 * statistics.median(plain_cpu), 3)
    finally:
        await before.stop()
        await after.stop()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--broker", choices=("noida", "kafka"), default="noida")
    ap.add_argument("--partitions", type=int, default=25)
    ap.add_argument("--keys", type=int, default=200)
    ap.add_argument("--idle-s", type=float, default=30.0)
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-fencing-") as tmp:
        from streams.brokers.own import start_own_broker

        broker, _ = start_own_broker(args.broker, Path(tmp) / "broker")
        try:
            out = asyncio.run(run(broker.bootstrap, args, Path(tmp)))
        finally:
            broker.stop()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
