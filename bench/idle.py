"""Idle bench: what N caught-up MIRRORING partitions cost when nothing (or little) happens.

    python -m bench.idle [--partitions 50000] [--per-topic 50] [--window 30] [--trickle-percent 1]

Sets up as ``bench.mass_failover`` does (its ``Bench.setup``: noida-db, the cluster-model server
with A and B, B's controller and worker, ``--partitions`` partitions on A mirrored to B, all
MIRRORING), lets the copy catch up, then measures:

1. **idle**: no traffic; the CPU each process spends over ``--window`` seconds (at least 30 for
   the headline figures), divided by the wall time: ``idle_worker_cores`` (B's worker) and
   ``idle_all_cores`` (worker, controller, model server, the broker of the coordinator's topics);
2. **trickle**: ``--trickle-percent`` of the partitions each receive one record a second, produced
   on A through a Kafka client (aiokafka on the model's Kafka listeners) and read on B through
   another (a consumer assigned to those partitions of the mirror topics): ``trickle_worker_cores``
   and the end-to-end latency from the produce call on A to the record read on B
   (``e2e_latency_p50_ms``, ``e2e_latency_p99_ms``).

The LAST line is one JSON object with those keys and ``load_average_1m`` (at the end: the
machine is shared, so read the figures with it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pstats
import shutil
import signal
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.mass_failover import Bench, _cpu_s
from bench.speed_index import per_1k_partitions, speed_index
from clustermodel.client import ClusterClient
from streams.brokers.own import CHOICES, FLAG_HELP
from streams.demo.harness import DemoError

_STAMP = struct.Struct(">d")  # the produce call's wall-clock time, in the record's value


def _cores(before: dict[str, float | None], after: dict[str, float | None], seconds: float) -> dict[str, float]:
    return {n: round((after[n] - b) / seconds, 3) for n, b in before.items()  # type: ignore[operator]
            if b is not None and after.get(n) is not None}  # fmt: skip


class IdleBench(Bench):
    def cpu(self) -> dict[str, float | None]:
        got: dict[str, float | None] = {n.replace("-", "_"): _cpu_s(p.pid) for n, p in self.demo.procs.procs}
        got["broker"] = self._broker_cpu()  # noida-db or the Kafka node (result "broker")
        return got

    def measure(self, label: str, seconds: float) -> dict[str, float]:
        """CPU cores per process over ``seconds`` of wall time."""
        self._check_alive()
        c0, t0 = self.cpu(), time.monotonic()
        time.sleep(seconds)
        c1, wall = self.cpu(), time.monotonic() - t0
        self._check_alive()
        cores = _cores(c0, c1, wall)
        self.say(f"{label}: {wall:.1f}s, cores {cores}")
        return cores

    def trickle_partitions(self) -> list[tuple[str, int]]:
        a_ = self.args
        total = a_.topics * a_.partitions
        step = max(1, round(100 / a_.trickle_percent))
        return [(f"bench-{i // a_.partitions:05d}", i % a_.partitions) for i in range(0, total, step)]

    async def trickle(self, seconds: float, warmup: float) -> tuple[list[float], dict[str, float]]:
        """One record a second per trickle partition, produced on A, read on B; the latencies (ms)
        of the records produced after ``warmup``, and the cores spent meanwhile."""
        port = self.demo.clock.clients["A"].address[1]  # type: ignore[union-attr]
        with ClusterClient(port, "A") as model:  # its own connection: the clock's is busy on its thread
            boot_a, boot_b = model.bootstrap_servers("A"), model.bootstrap_servers("B")
        parts = self.trickle_partitions()
        producer, consumer, ends_a = await trickle_clients(boot_a, boot_b, parts)
        tps = list(consumer.assignment())
        latencies: list[float] = []
        counts = self.trickle_counts = {"sent": 0, "acked": 0}

        def acked(f: asyncio.Future[Any]) -> None:
            if not f.cancelled() and f.exception() is None:
                counts["acked"] += 1

        async def ends() -> tuple[int, int]:
            """Records on A and on B of the trickle partitions (their end offsets' sums)."""
            a, b = await ends_a.end_offsets(tps), await consumer.end_offsets(tps)
            return sum(a.values()), sum(b.values())
        measuring = [False]
        stop = asyncio.Event()
        try:
            await consumer.seek_to_end(*tps)

            async def consume() -> None:
                while not stop.is_set():
                    got = await consumer.getmany(timeout_ms=200)
                    now = time.time()
                    for records in got.values():
                        for r in records:
                            sent = _STAMP.unpack(r.value)[0]
                            if sent > 0:
                                latencies.append((now - sent) * 1000)

            async def produce() -> None:
                # Spread over each second: one record per partition per second, not one burst.
                gap = 1.0 / len(parts)
                nxt = time.monotonic()
                while not stop.is_set():
                    for t, p in parts:
                        nxt += gap
                        if (d := nxt - time.monotonic()) > 0:
                            await asyncio.sleep(d)
                        if stop.is_set():
                            return
                        # A zero stamp during the warmup: those records are not counted.
                        stamp = time.time() if measuring[0] else 0.0
                        (await producer.send(t, _STAMP.pack(stamp), partition=p)).add_done_callback(acked)
                        counts["sent"] += 1

            a0, b0 = await ends()
            tasks = [asyncio.create_task(consume()), asyncio.create_task(produce())]
            await asyncio.sleep(warmup)
            measuring[0] = True
            prof0 = _profile_snapshot(self.workdir) if self.args.profile else None
            c0, t0 = self.cpu(), time.monotonic()
            await asyncio.sleep(seconds)
            c1, wall = self.cpu(), time.monotonic() - t0
            measuring[0] = False
            if prof0 is not None:
                await asyncio.sleep(6.0)  # the next dump of the profiles (every 5 s)
                report = _profile_diff(prof0, _profile_snapshot(self.workdir))
                (self.workdir / "profile-trickle.txt").write_text(report + "\n")
                sys.stdout.write(report + "\n")
            await asyncio.sleep(3.0)  # the last records reach B
            stop.set()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            a1, b1 = await ends()
            counts.update(on_a=a1 - a0, on_b=b1 - b0, read=len(latencies))
            self.say(f"trickle: {counts} (sent, acknowledged by A, on A, on B, read on B after the warmup)")
            return latencies, _cores(c0, c1, wall)
        finally:
            await producer.stop()
            await consumer.stop()
            await ends_a.stop()


async def trickle_clients(boot_a: str, boot_b: str, parts: list[tuple[str, int]]) -> tuple[Any, Any, Any]:
    """The trickle's clients, started: a producer on A that knows every topic of ``parts``, a
    consumer on B assigned ``parts``, and a consumer on A assigned them (for end offsets only)."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as KTP

    tps = [KTP(t, p) for t, p in parts]
    producer = AIOKafkaProducer(bootstrap_servers=boot_a, linger_ms=0, acks="all", client_id="idle-bench")
    consumer = AIOKafkaConsumer(bootstrap_servers=boot_b, enable_auto_commit=False, client_id="idle-bench",
                                fetch_max_wait_ms=100, max_partition_fetch_bytes=1 << 16)  # fmt: skip
    ends_a = AIOKafkaConsumer(bootstrap_servers=boot_a, enable_auto_commit=False, client_id="idle-bench-ends")
    await producer.start()
    await consumer.start()
    await ends_a.start()
    # Every topic's metadata in one request: aiokafka's send otherwise waits for one metadata round
    # trip per new topic, one after another (at 500 topics the producer sent ~8 records a second).
    await producer.client.set_topics(sorted({t for t, _ in parts}))
    consumer.assign(tps)
    ends_a.assign(tps)
    return producer, consumer, ends_a


def _profile_snapshot(workdir: Path) -> dict[str, dict[Any, tuple[float, float]]]:
    """Each worker profile (``KIP1279_PROFILE_DIR``) as it is now: function -> (tottime, cumtime)."""
    out: dict[str, dict[Any, tuple[float, float]]] = {}
    for f in sorted(workdir.glob("worker-*.prof")):
        try:
            stats = pstats.Stats(str(f)).stats  # type: ignore[attr-defined]
        except (OSError, EOFError, ValueError, TypeError):
            continue
        out[f.name.split("-")[1]] = {fn: (tt, ct) for fn, (_, _, tt, ct, _) in stats.items()}
    return out


def _profile_diff(before: dict[str, dict[Any, tuple[float, float]]], after: dict[str, dict[Any, tuple[float, float]]],
                  top: int = 25) -> str:
    """The functions that took the most time between two snapshots, per profile (loop, jobs)."""
    lines = []
    for kind, now in after.items():
        was = before.get(kind, {})
        rows = [(tt - was.get(fn, (0.0, 0.0))[0], ct - was.get(fn, (0.0, 0.0))[1], fn) for fn, (tt, ct) in now.items()]
        total = sum(r[0] for r in rows)
        lines.append(f"--- worker {kind} thread(s): {total:.2f} s of CPU in profiled code; top by own time (own s, cumulative s)")
        for tt, ct, (file, line, name) in sorted(rows, key=lambda r: -r[0])[:top]:
            lines.append(f"{tt:8.3f} {ct:8.3f}  {Path(file).name}:{line}({name})")
        lines.append("--- top by cumulative time")
        for tt, ct, (file, line, name) in sorted(rows, key=lambda r: -r[1])[:top]:
            lines.append(f"{tt:8.3f} {ct:8.3f}  {Path(file).name}:{line}({name})")
    return "\n".join(lines)


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return round(s[min(len(s) - 1, int(q * len(s)))], 1)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.idle", description=__doc__.splitlines()[0])
    p.add_argument("--partitions", type=int, default=50_000, help="MIRRORING partitions in all (a multiple of --per-topic)")
    p.add_argument("--per-topic", type=int, default=50, help="partitions per topic")
    p.add_argument("--window", type=float, default=30.0, help="seconds of each measurement (30 or more for the headline)")
    p.add_argument("--settle", type=float, default=20.0, help="seconds after all are MIRRORING before measuring")
    p.add_argument("--hold", type=float, default=0.0,
                   help="seconds to stay idle after the idle window, before the trickle (for an outside profiler)")
    p.add_argument("--trickle-percent", type=float, default=1.0, help="percent of partitions receiving 1 record/s")
    p.add_argument("--setup-timeout", type=float, default=900.0)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--broker", choices=CHOICES, help=FLAG_HELP)
    p.add_argument("--state-partitions", type=int, default=8)
    p.add_argument("--workers", type=int, default=1, help="workers of B (they share the table partitions)")
    p.add_argument("--tick-interval", type=float, default=0.2, help="worker tick interval (demo: 0.2)")
    p.add_argument("--metadata-refresh-ms", type=int, default=30000)
    p.add_argument("--worker-loglevel", default="warning")
    p.add_argument("--controller-loglevel", default="warning")
    p.add_argument("--profile", action="store_true",
                   help="cProfile the worker (KIP1279_PROFILE_DIR) and print where its idle window's time went")
    p.add_argument("--workdir")
    p.add_argument("--keep", action="store_true")
    args = p.parse_args(argv)
    args.topics = max(1, args.partitions // args.per_topic)
    args.partitions, args.no_offsets = args.per_topic, True  # Bench's names: partitions per topic
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="kip1279-idle-"))
    workdir.mkdir(parents=True, exist_ok=True)
    if args.profile:
        os.environ["KIP1279_PROFILE_DIR"] = str(workdir)
    bench = IdleBench(args, workdir)
    bench.result = {"partitions": args.topics * args.per_topic, "topics": args.topics, "window_s": args.window,
                    "trickle_partitions": len(bench.trickle_partitions())}  # fmt: skip
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    code = 1
    try:
        bench.setup()
        bench.say(f"all MIRRORING; settling {args.settle:.0f}s (worker pid {bench.pid('worker-B')})")
        time.sleep(args.settle)
        before = _profile_snapshot(workdir) if args.profile else {}
        idle = bench.measure("idle", args.window)
        if args.profile:
            time.sleep(6.0)  # the next dump of the profiles (every 5 s)
            report = _profile_diff(before, _profile_snapshot(workdir))
            (workdir / "profile-idle.txt").write_text(report + "\n")
            sys.stdout.write(report + "\n")
        if args.hold > 0:
            bench.say(f"holding idle {args.hold:.0f}s")
            time.sleep(args.hold)
        latencies, trickle = asyncio.run(bench.trickle(args.window, warmup=min(10.0, args.window / 3)))
        all_idle = round(sum(idle.values()), 3)
        bench.result.update(
            idle_worker_cores=idle.get("worker_B"), idle_all_cores=all_idle, idle_cores=idle,
            trickle_worker_cores=trickle.get("worker_B"), trickle_cores=trickle, trickle_records=len(latencies),
            trickle_counts=getattr(bench, "trickle_counts", None),
            e2e_latency_p50_ms=_percentile(latencies, 0.50), e2e_latency_p99_ms=_percentile(latencies, 0.99),
            e2e_latency_max_ms=round(max(latencies), 1) if latencies else None,
            # idle: every process's CPU-seconds per second per 1,000 partitions (with ``speed_index``)
            cpu_seconds_per_1k_partitions=per_1k_partitions(idle, bench.result["partitions"]),
        )  # fmt: skip
        code = 0
    except KeyboardInterrupt:
        bench.result.update(reason="interrupted")
        code = 130
    except (Exception, DemoError) as e:  # noqa: BLE001 - the reason in the JSON, non-zero exit
        bench.result.update(reason=f"{type(e).__name__}: {e}")
        bench.say(f"FAILED: {type(e).__name__}: {e} (logs in {workdir})")
        args.keep = True
    finally:
        bench.demo.close()
        if not args.workdir and not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    r = bench.result
    if "reason" not in r:
        r.pop("stage", None)  # mass_failover's setup marker: no failover here
    for k in ("idle_worker_cores", "idle_all_cores", "trickle_worker_cores", "e2e_latency_p50_ms", "e2e_latency_p99_ms"):
        r.setdefault(k, None)
    r["load_average_1m"] = round(os.getloadavg()[0], 2)
    r["speed_index"] = speed_index()  # beside the CPU figures, so that they travel between machines
    r["workdir"] = str(workdir) if (args.workdir or args.keep) else None
    sys.stdout.write(json.dumps(r) + "\n")
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())
