"""Mirror throughput from a real Kafka-protocol source: noida-db, then Apache Kafka -> model cluster B.

    python -m bench.real_source [--mb 1024] [--partitions 4] [--record-bytes 1000] [--no-kafka | --no-noida] [--broker noida]

Setup (not timed): the coordinator's own broker (Apache Kafka, or noida-db with ``--broker noida``:
``streams.brokers.own``) and a noida-db *source*, on loopback;
aiokafka producers write ``--mb`` MB of record keys and values to topic ``bench`` on the source,
in mixed batches: plain (about 70%, several records per batch), idempotent (20%) and committed
transactions (10%). Then the cluster-model server (B), B's controller and one ``kip1279-worker``.

Timed, in the same run, on the same data:

1. the mirror: from ``kafka-cluster-mirrors --start``, on a worker that answers ``/readyz``, until B's
   HW equals the source's HW on every partition (PREPARING included), copying raw RecordBatches through
   ``streams.kafka.source.KafkaSourceCluster``;
2. a plain aiokafka consumer (read_uncommitted, all partitions assigned, from the beginning)
   reading the topic up to the same HWs: the practical ceiling for pulling that data into Python
   from that broker. It decodes records; the mirror never does.

MB are the produced key and value bytes (10^6), records the produced data records, the same for
both, so the ratio is a ratio of times. The LAST line is one JSON object with
``mirror_mb_per_s``, ``mirror_records_per_s``, ``consumer_mb_per_s``, ``consumer_records_per_s``
and ``ratio_vs_aiokafka_consumer`` (mirror MB/s over consumer MB/s; goal >= 0.5).

Then the same again (same client code, same data size, a fresh B) with one combined-mode Apache
Kafka node as the source (streams/brokers/apache_kafka.py), stopping the noida-db source first: the JSON
line gains the same figures prefixed ``kafka_`` and ``kafka_mirror_vs_noida_mirror``. Where Java or
the jars are missing (or with ``--no-kafka``) ``kafka_skipped`` says why; ``--no-noida`` runs the
Apache Kafka column only.

CPU-seconds (user + system) of the mirror's processes while it copies (``*_cpu_s``: worker,
cluster-model server, Kafka source node) and of the consumer's process while it reads
(``consumer_cpu_s``) come with each column: the machine is shared, so wall-clock is noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition as KafkaTP
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from clustermodel.client import ClusterClient
from streams.brokers.apache_kafka import ApacheKafkaCluster
from streams.brokers.kafka_jars import missing_reason
from streams.brokers.noida import LocalBroker
from streams.brokers.own import CHOICES, FLAG_HELP, start_own_broker
from streams.demo.harness import ADMIN, PY, Clock, DemoError, Processes, run_cli, wait_for
from streams.kafka.source import KafkaSourceCluster

TOPIC = "bench"
MIRROR = "from-kafka"


def say(msg: str) -> None:
    print(msg, flush=True)


async def load(bootstrap: str, partitions: int, total_bytes: int, record_bytes: int) -> tuple[int, int]:
    """Produces about ``total_bytes`` of keys and values; returns (bytes, records) written."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(TOPIC, partitions, 1)])
    finally:
        await admin.close()
    value = os.urandom(record_bytes)
    written = [0, 0]

    async def run(producer: AIOKafkaProducer, share: float, txn: bool) -> None:
        await producer.start()
        try:
            budget = int(total_bytes * share)
            i = 0
            while budget > 0:
                if txn:
                    await producer.begin_transaction()
                futs = []
                for _ in range(50 if txn else 500):
                    key = f"k{i}".encode()
                    futs.append(await producer.send(TOPIC, value, key=key, partition=i % partitions))
                    budget -= len(key) + len(value)
                    written[0] += len(key) + len(value)
                    written[1] += 1
                    i += 1
                if txn:
                    await producer.commit_transaction()
                else:
                    await asyncio.gather(*futs)
        finally:
            await producer.stop()

    common = {"bootstrap_servers": bootstrap, "linger_ms": 5, "max_batch_size": 64 * 1024}
    await asyncio.gather(
        run(AIOKafkaProducer(**common), 0.7, False),
        run(AIOKafkaProducer(enable_idempotence=True, acks="all", **common), 0.2, False),
        run(AIOKafkaProducer(transactional_id="bench-txn", **common), 0.1, True),
    )
    return written[0], written[1]


async def consume(bootstrap: str, ends: dict[int, int]) -> tuple[float, int]:
    """A plain consumer reading every partition up to ``ends``: (seconds, records)."""
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    await c.start()
    try:
        tps = [KafkaTP(TOPIC, p) for p in ends]
        c.assign(tps)
        await c.seek_to_beginning(*tps)
        records = 0
        t0 = time.perf_counter()
        while True:
            got = await c.getmany(timeout_ms=500, max_records=10_000)
            records += sum(len(v) for v in got.values())
            if all([await c.position(tp) >= ends[tp.partition] for tp in tps]):
                return time.perf_counter() - t0, records
    finally:
        await c.stop()


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except OSError:  # 503 (HTTPError) until ready, or not listening yet
        return False


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (/proc/PID/stat utime, stime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def mirror_once(kind: str, source_bootstrap: str, coord_bootstrap: str, args: argparse.Namespace,
                workdir: Path, source_pid: int | None = None) -> dict[str, Any]:  # fmt: skip
    """Loads the source, mirrors it into a fresh model cluster B, then reads it with aiokafka."""
    out: dict[str, Any] = {}
    workdir.mkdir(parents=True, exist_ok=True)
    procs = Processes(workdir)
    clock = None
    port_src = None
    try:
        t = time.perf_counter()
        nbytes, nrecords = asyncio.run(load(source_bootstrap, args.partitions, int(args.mb * 1e6), args.record_bytes))
        say(f"[{kind}] produced {nbytes / 1e6:.1f} MB, {nrecords} records to the source in {time.perf_counter() - t:.1f}s")
        port_src = KafkaSourceCluster(source_bootstrap)
        tps = [p.topic_partition for t in port_src.describe_topics() if t.name == TOPIC for p in t.partitions]
        hws = {tp: port_src.list_offsets(tp).hw for tp in tps}

        _, line = procs.spawn("model-server", [PY, "-m", "clustermodel.server", "--port", "0", "--cluster", "A",
                                               "--cluster", "B"], ready="PORT")  # fmt: skip
        port = int(line.split()[1])
        clock = Clock(port)
        clock.start()
        common = ["--bootstrap-server", coord_bootstrap, "--cluster-name", f"B{kind.replace('-', '')}",
                  "--data-dir", str(workdir / "data-B"), "--state-partitions", "4", "--model-port", str(port), "--model-cluster", "B",
                  "--loglevel", "warning"]  # fmt: skip
        _, line = procs.spawn("controller-B", [PY, "-m", "streams.worker.main", "--controller", "--listener", "127.0.0.1:0",
                                               "--super-users", ADMIN, *common], ready="LISTENING")  # fmt: skip
        endpoint = line.split()[1]
        _, line = procs.spawn("worker-B", [PY, "-m", "streams.worker.main", "--tick-interval", str(args.tick_interval),
                                           "--metrics-listener", "127.0.0.1:0", *common], ready="METRICS")  # fmt: skip
        ready = f"http://{line.split()[1]}/readyz"
        cfg = workdir / "mirror.properties"
        cfg.write_text(f"bootstrap.servers={source_bootstrap}\nclient.id=kip1279-bench\nmetadata.refresh.interval.ms=1000\n"
                       + "".join(f"{kv}\n" for kv in args.mirror_config))  # fmt: skip
        code, text = run_cli(endpoint, "--create", "--mirror", MIRROR, "--mirror-config", str(cfg))
        if code != 0:
            raise DemoError(f"create mirror failed: {text.strip()}")

        b = ClusterClient(port, "B", timeout=30)
        pids = {name: proc.pid for name, proc in procs.procs if name in ("worker-B", "model-server")}
        if source_pid is not None:
            pids["source"] = source_pid
        cpu0 = {name: cpu_seconds(pid) for name, pid in pids.items()}
        # The copy is timed from a ready worker (metadata log replayed, table recovered), as an operator
        # starts a mirror on a running coordinator: a process start-up is not copying.
        wait_for("the worker to be ready (/readyz)", lambda: _ready(ready), 60, clock)
        deadline = time.monotonic() + 60
        t0 = time.perf_counter()
        while (code := run_cli(endpoint, "--start", "--mirror", MIRROR, "--topics", TOPIC)[0]) != 0:
            if time.monotonic() > deadline:
                raise DemoError("the source's topic was never registered")
            time.sleep(0.2)
            t0 = time.perf_counter()  # timed from the --start that took
        last = 0.0
        while True:
            for name, proc in procs.procs:
                if proc.poll() is not None:
                    raise DemoError(f"{name} exited with {proc.returncode}; see {workdir / (name + '.log')}")
            try:
                done = {tp: b.list_offsets(tp).hw for tp in tps}
            except Exception:  # noqa: BLE001 - the topic is not created on B yet
                done = dict.fromkeys(tps, 0)
            now = time.perf_counter() - t0
            if all(done[tp] >= hws[tp] for tp in tps):
                break
            if now - last >= 5:
                share = sum(done.values()) / max(1, sum(hws.values()))
                say(f"  [{kind}] +{now:6.1f}s mirrored {share:6.1%} of the records")
                last = now
            if now > args.timeout:
                raise DemoError(f"the mirror did not catch up within {args.timeout:.0f}s")
            time.sleep(0.05)
        mirror_s = time.perf_counter() - t0
        cpu = {name: round(cpu_seconds(pid) - cpu0[name], 1) for name, pid in pids.items()}
        b.close()
        say(f"[{kind}] mirror: lag 0 after {mirror_s:.1f}s; CPU-seconds {cpu}")
        c0 = time.process_time()
        src0 = cpu_seconds(source_pid) if source_pid is not None else 0.0
        consumer_s, consumed = asyncio.run(consume(source_bootstrap, {tp.partition: hws[tp] for tp in tps}))
        consumer_cpu = round(time.process_time() - c0, 1)
        say(f"[{kind}] aiokafka consumer: {consumed} records in {consumer_s:.1f}s; CPU-seconds {consumer_cpu}")
        out.update({f"mirror_{name.replace('-', '_')}_cpu_s": v for name, v in cpu.items()}, consumer_cpu_s=consumer_cpu)
        if source_pid is not None:
            out["consumer_source_cpu_s"] = round(cpu_seconds(source_pid) - src0, 1)
        mb = nbytes / 1e6
        out.update(mb=round(mb, 1), records=nrecords, mirror_seconds=round(mirror_s, 2),
                   consumer_seconds=round(consumer_s, 2), consumer_records=consumed,
                   mirror_mb_per_s=round(mb / mirror_s, 2), mirror_records_per_s=round(nrecords / mirror_s),
                   consumer_mb_per_s=round(mb / consumer_s, 2), consumer_records_per_s=round(consumed / consumer_s),
                   ratio_vs_aiokafka_consumer=round(consumer_s / mirror_s, 3))  # fmt: skip
        say(f"[{kind}] {'':12} {'MB/s':>8} {'records/s':>10}")
        say(f"[{kind}] {'mirror':12} {out['mirror_mb_per_s']:8.2f} {out['mirror_records_per_s']:10d}")
        say(f"[{kind}] {'consumer':12} {out['consumer_mb_per_s']:8.2f} {out['consumer_records_per_s']:10d}")
        return out
    finally:
        if port_src is not None:
            port_src.close()
        if clock is not None:
            clock.stop()
        procs.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=1024.0, help="MB of keys and values to produce (default 1024)")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--record-bytes", type=int, default=1000)
    ap.add_argument("--tick-interval", type=float, default=0.1)
    ap.add_argument("--timeout", type=float, default=1800.0, help="bound on the mirror's catching up, seconds")
    ap.add_argument("--no-kafka", action="store_true", help="leave out the Apache Kafka column")
    ap.add_argument("--broker", choices=CHOICES, help=FLAG_HELP)
    ap.add_argument("--no-noida", action="store_true", help="leave out the noida-db source column")
    ap.add_argument("--mirror-config", action="append", default=[], metavar="KEY=VALUE",
                    help="a mirror property (e.g. replica.fetch.max.bytes=4194304); repeatable")  # fmt: skip
    args = ap.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="kip1279-real-source-"))
    brokers: list[Any] = []
    result: dict[str, Any] = {"mb_requested": args.mb, "partitions": args.partitions, "record_bytes": args.record_bytes}
    try:
        coord, what = start_own_broker(args.broker, workdir / "coordinator-broker")
        brokers.append(coord)
        say(f"coordinator broker: {what}")
        if not args.no_noida:
            source = LocalBroker(workdir / "source-broker").start()
            brokers.append(source)
            say(f"source broker {source.bootstrap} (noida-db)")
            result.update(mirror_once("noida-db", source.bootstrap, coord.bootstrap, args, workdir / "noida-db"))
            source.stop()
        kafka_reason = "--no-kafka" if args.no_kafka else missing_reason()
        if kafka_reason is None:
            kafka = ApacheKafkaCluster(workdir / "apache-kafka", brokers=1).start()
            brokers.append(kafka)
            say(f"source broker {kafka.bootstrap} (Apache Kafka {kafka.version}, one combined node)")
            k = mirror_once("apache-kafka", kafka.bootstrap, coord.bootstrap, args, workdir / "kafka",
                            source_pid=kafka.brokers[0].proc.pid)  # type: ignore[union-attr]  # fmt: skip
            result.update({f"kafka_{key}": v for key, v in k.items() if key not in ("mb", "records") or args.no_noida})
            if not args.no_noida:
                result["kafka_mirror_vs_noida_mirror"] = round(k["mirror_mb_per_s"] / result["mirror_mb_per_s"], 3)
            kafka.stop()
        else:
            result["kafka_skipped"] = kafka_reason
        rc = 0
    except (DemoError, OSError, TimeoutError) as e:
        result["error"] = str(e)
        say(f"FAILED: {e}")
        rc = 1
    finally:
        for broker in brokers:
            broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(result), flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
