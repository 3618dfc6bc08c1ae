"""Controller failover figures (issue #36): three ``kip1279-controller`` processes of one
destination cluster (3 topics x 8 partitions, every partition MIRRORING), on noida-db or Apache
Kafka. Per round, at each point:

- ``stop``: the active one is SIGKILLed a seeded 0-80 ms after a ``--stop`` (all three
  endpoints) was sent; ``idle``: it is SIGKILLed with nothing in flight;
- ``txn``: it is SIGKILLed inside the metadata-log transaction of a ``--stop``: the bench
  watches the log's end (read_uncommitted) and kills the moment the stop's first records are
  in, before their commit marker; whether the transaction was left open is checked after the
  kill (``txn_left_open``: the committed end below the log's end);
- ``open_txn``: it is SIGKILLed idle, and then a writer of the log's transactional id dies
  (kill -9) inside a transaction, so its restart (or a standby's takeover) meets an open
  transaction every time, as after a kill inside an append;
- ``restart``: the killed one is started again.

Reported per point: writes refused (kill to the first write a controller accepts: the
takeover as an operator sees it), the ``--stop``'s own time and exit code, the slowest
``--describe`` over all three endpoints right after the kill (reads unavailable), restart to
serving (spawn to its first answered ``--describe``, Python's start-up included), the restarted
process's CPU seconds by then, and its start once Python was up (its log). With
``--controllers 1`` (the single controller of the documented setups) no standby takes over:
the restarted one is the active one again, and restart to writes (spawn to its first accepted
write) is reported too. The last line printed is one JSON object.

    .venv/bin/python bench/controller_failover.py [--broker noida|kafka] [--rounds 3] [--seed 36] [--controllers 3]
        [--points stop,idle,txn,open_txn]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "streams"))

from aiokafka import AIOKafkaConsumer, TopicPartition  # noqa: E402
from controller_rig import ADMIN, ControllerRig, Member, die_inside_a_transaction  # noqa: E402
from streams.admin import cli  # noqa: E402
from streams.admin.client import ClusterMirrorAdmin  # noqa: E402


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    os.environ["KIP1279_PRINCIPAL"] = ADMIN
    return cli.main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()


async def describe_time(rig: ControllerRig) -> float:
    t0 = time.monotonic()
    async with ClusterMirrorAdmin(rig.bootstrap, principal=ADMIN) as a:
        assert (await a.describe(["a-to-b"], offsets=False)).response.error_code == 0  # type: ignore[attr-defined]
    return time.monotonic() - t0


POINTS = ("stop", "idle", "txn", "open_txn")
WRITES_TIMEOUT_S = 120.0


class LogEnds:
    """The metadata log's end (read_uncommitted) and its committed end (read_committed: the LSO)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.tp = TopicPartition(topic, 0)
        self.ends = {level: AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=level)
                     for level in ("read_uncommitted", "read_committed")}  # fmt: skip

    async def __aenter__(self) -> LogEnds:
        for c in self.ends.values():
            await c.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        for c in self.ends.values():
            await c.stop()

    async def end(self, level: str = "read_uncommitted") -> int:
        return int((await self.ends[level].end_offsets([self.tp]))[self.tp])


async def kill_inside_the_stops_transaction(rig: ControllerRig, active: Member, ends: LogEnds,
                                            send_stop: asyncio.Task[tuple[int, str, str]]) -> tuple[float, bool]:  # fmt: skip
    """SIGKILLs ``active`` once the stop's records are in the log and before they commit; returns
    the kill's time and whether a transaction was left open."""
    start = await ends.end()
    deadline = time.monotonic() + 30
    while await ends.end() == start:
        if time.monotonic() > deadline or send_stop.done():
            break
    killed_at = rig.kill(active)
    return killed_at, await ends.end("read_committed") < await ends.end()


async def bench(bootstrap: str, workdir: Path, rounds: int, seed: int, controllers: int = 3,
                points: tuple[str, ...] = POINTS) -> dict[str, list[float]]:  # fmt: skip
    rng = random.Random(seed)
    rig = ControllerRig.create(bootstrap, workdir, n=controllers)
    figures: dict[str, list[float]] = {}

    def note(key: str, value: float) -> None:
        figures.setdefault(key, []).append(round(value, 3))
        print(f"  {key}: {value:.2f}", flush=True)

    try:
        await rig.seed()
        for m in rig.members:
            rig.spawn(m)
        for m in rig.members:
            note("cold_start_to_serving_s", await rig.answers_reads(m, timeout=120))
        topics = iter([f"t{i}" for i in range(3)] * 100)
        async with LogEnds(bootstrap, rig.cfg.metadata_topic_name) as ends:
            for r in range(rounds):
                for point in points:
                    active = await rig.active()
                    print(f"round {r} {point}: killing {active.name}", flush=True)
                    stop = None
                    if point in ("stop", "txn"):
                        topic = next(topics)
                        sent = time.monotonic()
                        stop = asyncio.create_task(asyncio.to_thread(run_cli, "--bootstrap-server", rig.bootstrap, "--stop",
                                                                     "--mirror", "a-to-b", "--topics", topic,
                                                                     "--retry-timeout", "120"))  # fmt: skip
                    if point == "txn":
                        assert stop is not None
                        killed_at, left_open = await kill_inside_the_stops_transaction(rig, active, ends, stop)
                        note("txn_left_open", float(left_open))
                    else:
                        if stop is not None:
                            await asyncio.sleep(rng.uniform(0.0, 0.08))
                        killed_at = rig.kill(active)
                    if point == "open_txn":
                        await asyncio.to_thread(die_inside_a_transaction, rig.cfg)
                    if controllers > 1:  # the standbys serve reads, and one takes over
                        note(f"{point}_reads_worst_s", await describe_time(rig))
                        await rig.active(exclude=active)
                        note(f"{point}_writes_refused_s", time.monotonic() - killed_at)
                    rig.spawn(active)
                    note(f"{point}_restart_to_serving_s", await rig.answers_reads(active, timeout=120))
                    note(f"{point}_restart_cpu_s", active.serving_cpu_s)
                    note(f"{point}_restart_start_s", rig.start_seconds(active))
                    if controllers == 1:
                        try:
                            note(f"{point}_restart_to_writes_s", await rig.accepts_writes(active, timeout=WRITES_TIMEOUT_S))
                        except TimeoutError:  # noted as the bound, and the run ends: no controller is active
                            note(f"{point}_restart_to_writes_s", WRITES_TIMEOUT_S)
                            note(f"{point}_restart_to_writes_timed_out", 1.0)
                            return figures
                    if stop is not None:
                        code, out, err = await stop
                        note(f"{point}_stop_cli_s", time.monotonic() - sent)
                        assert code == 0, (out, err)
        return figures
    finally:
        rig.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--broker", choices=("noida", "kafka"), default="noida")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seed", type=int, default=36)
    p.add_argument("--controllers", type=int, default=3, help="controller processes (1: no standby takes over)")
    p.add_argument("--points", default=",".join(POINTS), help="the kill points of each round, in order")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kip1279-bench-ctl-"))
    if args.broker == "noida":
        from streams.brokers.noida import LocalBroker

        broker: object = LocalBroker(work / "noida")
        broker.start()  # type: ignore[attr-defined]
    else:
        from streams.brokers.apache_kafka import ApacheKafkaCluster

        broker = ApacheKafkaCluster(work / "kafka").start()
    try:
        figures = asyncio.run(bench(broker.bootstrap, work, args.rounds, args.seed, args.controllers,
                                     tuple(args.points.split(","))))  # type: ignore[attr-defined]
    finally:
        broker.stop()  # type: ignore[attr-defined]
    summary = {k: {"median": statistics.median(v), "min": min(v), "max": max(v), "n": len(v)} for k, v in figures.items()}
    print(json.dumps({"broker": args.broker, "seed": args.seed, "controllers": args.controllers, "load1": os.getloadavg()[0],
                      **summary}))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
