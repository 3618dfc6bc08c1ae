"""Controller failover figures (issue #36): three ``kip1279-controller`` processes of one
destination cluster (3 topics x 8 partitions, every partition MIRRORING), on noida-db or Apache
Kafka. Per round, at each point:

- ``stop``: the active one is SIGKILLed a seeded 0-80 ms after a ``--stop`` (all three
  endpoints) was sent; ``idle``: it is SIGKILLed with nothing in flight;
- ``restart``: the killed one is started again.

Reported per point: writes refused (kill to the first write a controller accepts: the
takeover as an operator sees it), the ``--stop``'s own time and exit code, the slowest
``--describe`` over all three endpoints right after the kill (reads unavailable), restart to
serving (spawn to its first answered ``--describe``, Python's start-up included) and its start
once Python was up (its log). The last line printed is one JSON object.

    .venv/bin/python bench/controller_failover.py [--broker noida|kafka] [--rounds 3] [--seed 36]
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

from controller_rig import ADMIN, ControllerRig  # noqa: E402
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


async def bench(bootstrap: str, workdir: Path, rounds: int, seed: int) -> dict[str, list[float]]:
    rng = random.Random(seed)
    rig = ControllerRig.create(bootstrap, workdir)
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
        for r in range(rounds):
            for point in ("stop", "idle"):
                active = await rig.active()
                print(f"round {r} {point}: killing {active.name}", flush=True)
                stop = None
                if point == "stop":
                    topic = next(topics)
                    sent = time.monotonic()
                    stop = asyncio.create_task(asyncio.to_thread(run_cli, "--bootstrap-server", rig.bootstrap, "--stop",
                                                                 "--mirror", "a-to-b", "--topics", topic))  # fmt: skip
                    await asyncio.sleep(rng.uniform(0.0, 0.08))
                killed_at = rig.kill(active)
                note(f"{point}_reads_worst_s", await describe_time(rig))
                await rig.active(exclude=active)
                note(f"{point}_writes_refused_s", time.monotonic() - killed_at)
                if stop is not None:
                    code, out, err = await stop
                    note("stop_cli_s", time.monotonic() - sent)
                    assert code == 0, (out, err)
                rig.spawn(active)
                note(f"{point}_restart_to_serving_s", await rig.answers_reads(active, timeout=120))
                note(f"{point}_restart_start_s", rig.start_seconds(active))
        return figures
    finally:
        rig.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--broker", choices=("noida", "kafka"), default="noida")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seed", type=int, default=36)
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
        figures = asyncio.run(bench(broker.bootstrap, work, args.rounds, args.seed))  # type: ignore[attr-defined]
    finally:
        broker.stop()  # type: ignore[attr-defined]
    summary = {k: {"median": statistics.median(v), "min": min(v), "max": max(v), "n": len(v)} for k, v in figures.items()}
    print(json.dumps({"broker": args.broker, "seed": args.seed, "load1": os.getloadavg()[0], **summary}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
