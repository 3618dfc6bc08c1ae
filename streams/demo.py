"""The main job: failover and failback between two model clusters, end to end, on loopback.

    python -m streams.demo [--workdir DIR] [--seed N] [--keep] [--no-audit] [--from-kafka]

``--from-kafka`` runs a migration from a real noida-db broker to B instead (``streams.demo_from_kafka``).

Starts the noida-db broker, the cluster-model server (clusters A and B), and one coordinator
per destination cluster (SPEC, "One coordinator per destination cluster"): a controller and a
worker for B (mirror ``a-to-b``) and a controller and a worker for A (mirror ``b-to-a``), each
a separate process with its own topic prefix. The applications are aiokafka clients on the
model's Kafka listeners (``streams.demo_clients``); the model's own API only referees and moves
the model's clock. Then:
producers on A (keyed records, transactions committed and aborted) and consumer group
``demo-orders-app`` reading A -> ``a-to-b`` catches up; a produce to B's mirror topic is refused
-> A's producers leave transactions open and stop, the group reads to A's LSO and stops ->
failover (``--stop``, with transactions still open on A: copied to B, aborted there once each;
its last group offset sync carries the group's last commit to B) -> the group resumes on B,
producers on B (again leaving transactions open) -> failback (``b-to-a``) -> A catches up with
B's HW -> describe and a verdict computed from the two clusters' logs and what the clients saw -> the audit verdict (Spark)
on the snapshots the workers export every second (``audit.export.*``: states, transitions from
``__mirror_state``, the clusters' offsets and leader epochs) to Parquet, one store per
coordinator under ``<workdir>/audit/<cluster>``; ``--no-audit`` turns both off. Every process is stopped on exit, on failure and on Ctrl-C.
Exit 0 on success, 1 with the reason otherwise (also when the audit fails).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from clustermodel.records import read_committed_values
from clustermodel.client import ClusterClient
from clustermodel.workload import Workload
from streams import demo_clients as dc
from streams.demo_clients import ClientLoop
from coordinator.ports import ControlType, IsolationLevel, PortError, TopicPartition
from streams import cli
from streams.broker import LocalBroker

TOPICS = {"orders": 3, "payments": 2, "audit": 1}
PY = sys.executable
ADMIN = "User:demo-admin"
REFUSED_AS = "UnknownError"  # aiokafka 0.14 has no class for READ_ONLY_TOPIC (134)
GROUP = "demo-orders-app"  # the applications' consumer group, moved from A to B at the failover


class DemoError(RuntimeError):
    pass


def _die_with_parent() -> None:
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Processes:
    """Child processes, each stopped (SIGTERM, then SIGKILL after 5 s) on close."""

    def __init__(self, logdir: Path) -> None:
        self.logdir = logdir
        self.procs: list[tuple[str, subprocess.Popen[str]]] = []

    def spawn(self, name: str, argv: Sequence[str], ready: str | None = None, timeout: float = 60.0) -> tuple[subprocess.Popen[str], str]:
        err = open(self.logdir / f"{name}.log", "w")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=err, text=True, preexec_fn=_die_with_parent,
                                cwd=os.getcwd())  # fmt: skip
        self.procs.append((name, proc))
        line = ""
        if ready is not None:
            deadline = time.monotonic() + timeout
            assert proc.stdout is not None
            while time.monotonic() < deadline:
                line = proc.stdout.readline()
                if line.startswith(ready):
                    break
                if not line and proc.poll() is not None:
                    raise DemoError(f"{name} exited with {proc.returncode}; see {self.logdir / (name + '.log')}")
            else:
                raise DemoError(f"{name} did not start within {timeout:.0f}s")
        return proc, line.strip()

    def stop(self, name: str) -> None:
        for n, proc in list(self.procs):
            if n == name:
                _stop(proc)
                self.procs.remove((n, proc))

    def close(self) -> None:
        for _, proc in reversed(self.procs):
            _stop(proc)
        self.procs.clear()


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


class Clock(threading.Thread):
    """Moves the model clusters' clock (replication, ISR) and runs the producers, 100 ms a tick."""

    def __init__(self, port: int, clusters: Sequence[str] = ("A", "B")) -> None:
        super().__init__(daemon=True, name="model-clock")
        self.clients = {c: ClusterClient(port, c) for c in clusters}
        self.workload: Workload | None = None
        self.lock = threading.Lock()
        self.halt = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.halt.is_set():
                with self.lock:
                    if self.workload is not None:
                        self.workload.run(100, 100)  # ticks its own cluster
                        other = "B" if self.workload.cluster is self.clients["A"] else "A"
                        self.clients[other].tick(100)
                    else:
                        for c in self.clients.values():
                            c.tick(100)
                time.sleep(0.05)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            self.error = e

    def produce(self, cluster: str, seed: int, rate: int = 400) -> Workload:
        with self.lock:
            self.workload = Workload(self.clients[cluster], list(TOPICS), seed=seed, records_per_s=rate, batch_size=5,
                                     transactional_ratio=0.3, abort_ratio=0.3, leave_open_ratio=0.15)  # fmt: skip
            return self.workload

    def quiet(self) -> Workload | None:
        with self.lock:
            w, self.workload = self.workload, None
            return w

    def stop(self) -> None:
        self.halt.set()
        self.join(5)
        for c in self.clients.values():
            c.close()


def run_cli(endpoint: str, *argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    os.environ["KIP1279_PRINCIPAL"] = ADMIN
    code = cli.main(["--bootstrap-server", endpoint, *argv], out=out, err=err)
    return code, out.getvalue() + err.getvalue()


def wait_for(what: str, predicate: Callable[[], bool], timeout: float, clock: Clock | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if clock is not None and clock.error is not None:
            raise DemoError(f"model clock failed: {clock.error!r}")
        if predicate():
            return
        time.sleep(0.2)
    raise DemoError(f"timed out after {timeout:.0f}s waiting for {what}")


def log_batches(client: ClusterClient, tp: TopicPartition) -> list[Any]:
    off = client.list_offsets(tp)
    offset, out = off.log_start, []
    while offset < off.leo:
        got = client.fetch(tp, offset, 1 << 20, IsolationLevel.READ_UNCOMMITTED).batches
        if not got:
            break
        out.extend(got)
        offset = got[-1].next_offset
    return out


def failover_aborts(on_dest: Sequence[Any], open_at_stop: Sequence[Any]) -> list[str]:
    """What is wrong with how a failover closed the transactions open on the source at the stop:
    each must be on the destination (its first batch at the same offset, same producer) and be
    aborted there exactly once by the stop, i.e. before the stop's MIRROR_PID_RESET."""
    problems = []
    for o in open_at_stop:
        first = next((x for x in on_dest if x.base_offset == o.first_offset), None)
        if first is None or first.producer_id != o.producer_id or not first.is_transactional:
            problems.append(f"transaction of producer {o.producer_id} at {o.first_offset} open at the failover "
                            "is not on the destination")  # fmt: skip
            continue
        reset = next((x.base_offset for x in on_dest if x.base_offset > o.first_offset
                      and x.control_type == ControlType.MIRROR_PID_RESET), None)  # fmt: skip
        markers = [x.control_type for x in on_dest if x.is_control and x.producer_id == o.producer_id
                   and o.first_offset < x.base_offset and (reset is None or x.base_offset < reset)]  # fmt: skip
        if markers != [ControlType.ABORT]:
            problems.append(f"transaction of producer {o.producer_id} at {o.first_offset} open at the failover: "
                            f"markers before the PID reset {[m.name for m in markers]}, expected one ABORT")  # fmt: skip
    return problems


def shape(batches: Sequence[Any], upto: int) -> list[tuple[Any, ...]]:
    return [(b.base_offset, b.last_offset, b.leader_epoch, b.producer_id, b.producer_epoch, b.is_transactional,
             b.control_type, b.payload) for b in batches if b.last_offset < upto]  # fmt: skip


async def read_changelog(bootstrap: str, topic: str, timeout: float = 15.0) -> list[tuple[Any, Any]]:
    """Every record of ``topic`` (a ``__mirror_state`` changelog) up to its current end, decoded:
    (record type, key, value or None), partition by partition, in offset order."""
    from aiokafka import AIOKafkaConsumer, TopicPartition as KTP

    from streams.mirror_state_store import decode_changelog_record

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
                                client_id="kip1279-demo-audit")  # fmt: skip
    await consumer.start()
    try:
        # Apache Kafka answers a Metadata request for no topics with none (noida-db with all): ask
        # for this one (aiokafka's consumer has no public call for that).
        consumer._client.add_topic(topic)
        await consumer._client.force_metadata_update()
        tps = [KTP(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or set())]
        if not tps:
            raise DemoError(f"changelog topic {topic} not found")
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        records: dict[int, list[Any]] = defaultdict(list)
        deadline = time.monotonic() + timeout
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            if time.monotonic() > deadline:
                raise DemoError(f"could not read {topic} to its end within {timeout:.0f}s")
            for tp, msgs in (await consumer.getmany(timeout_ms=500)).items():
                records[tp.partition].extend(m for m in msgs if m.offset < ends[tp])
        return [decode_changelog_record(m.key, m.value) for p in sorted(records) for m in records[p] if m.key is not None]
    finally:
        await consumer.stop()


class Demo:
    def __init__(self, workdir: Path, seed: int, out: Any = sys.stdout, audit: bool = True) -> None:
        self.workdir, self.seed, self.out, self.audit_enabled = workdir, seed, out, audit
        self.procs = Processes(workdir)
        self.broker: LocalBroker | None = None
        self.clock: Clock | None = None
        self.apps: ClientLoop | None = None
        self.clients: dc.ClientReport | None = None
        self.refused: str | None = None
        self.endpoints: dict[str, str] = {}
        self.source_name = "A"  # the cluster the applications leave at the failover (client_check's wording)
        self.source_skips_open_transactions = False  # see demo_clients.account
        self.t0 = time.monotonic()

    def say(self, text: str) -> None:
        self.out.write(f"[{time.monotonic() - self.t0:5.1f}s] {text}\n")
        self.out.flush()

    def coordinator(self, cluster: str, model_port: int) -> None:
        common = ["--bootstrap-server", self.broker.bootstrap, "--cluster-name", cluster,  # type: ignore[union-attr]
                  "--data-dir", str(self.workdir / f"data-{cluster}"), "--state-partitions", "8",
                  "--model-port", str(model_port), "--loglevel", "warning"]  # fmt: skip
        _, line = self.procs.spawn(f"controller-{cluster}", [PY, "-m", "streams.worker", "--controller", "--listener",
                                                             "127.0.0.1:0", "--super-users", ADMIN, *common], ready="LISTENING")  # fmt: skip
        self.endpoints[cluster] = line.split()[1]
        audit = ["--audit-export-dir", str(self.workdir / "audit"), "--audit-export-interval-ms", "1000"]
        self.procs.spawn(f"worker-{cluster}", [PY, "-m", "streams.worker", "--tick-interval", "0.2", *common,
                                               *(audit if self.audit_enabled else [])])  # fmt: skip
        self.say(f"coordinator of cluster {cluster}: controller on {self.endpoints[cluster]}, worker started")

    def cli(self, cluster: str, *argv: str, show: bool = True) -> str:
        code, text = run_cli(self.endpoints[cluster], *argv)
        if show:
            for line in text.rstrip().splitlines():
                self.out.write(f"    {line}\n")
        if code != 0:
            raise DemoError(f"kafka-cluster-mirrors {' '.join(argv)} failed ({code}): {text.strip()}")
        return text

    def start_topics(self, cluster: str, mirror: str) -> None:
        """Starts the topics once the controller has registered them from the source."""
        deadline = time.monotonic() + 30
        while True:
            code, text = run_cli(self.endpoints[cluster], "--start", "--mirror", mirror, "--topics", ",".join(TOPICS))
            if code == 0:
                for line in text.rstrip().splitlines():
                    self.out.write(f"    {line}\n")
                return
            if time.monotonic() > deadline:
                raise DemoError(f"could not start {mirror}: {text.strip()}")
            time.sleep(0.5)

    def run(self) -> int:
        self.broker = LocalBroker(self.workdir / "broker").start()
        self.say(f"noida-db broker on {self.broker.bootstrap}")
        _, line = self.procs.spawn("model-server", [PY, "-m", "clustermodel.server", "--port", "0", "--cluster", "A",
                                                    "--cluster", "B", "--seed", str(self.seed)], ready="PORT")  # fmt: skip
        port = int(line.split()[1])
        # The referee's view (model API): offsets, logs, open transactions, the clock. The
        # applications use only the Kafka listeners.
        a, b = ClusterClient(port, "A"), ClusterClient(port, "B")
        boot = {"A": a.bootstrap_servers(), "B": b.bootstrap_servers()}
        self.say(f"cluster-model server with clusters A and B on 127.0.0.1:{port}; Kafka listeners "
                 f"A {boot['A']}, B {boot['B']}")  # fmt: skip
        apps = self.apps = ClientLoop()
        apps.run(dc.create_topics(boot["A"], TOPICS))
        ids = {t.name: t.topic_id for t in a.describe_topics() if t.name in TOPICS}
        tps = [TopicPartition(ids[t], p) for t, n in TOPICS.items() for p in range(n)]
        parts = [(t, p) for t, n in TOPICS.items() for p in range(n)]
        self.coordinator("B", port)
        self.coordinator("A", port)
        self.clock = clock = Clock(port)
        clock.start()
        stop_a, drain_a = threading.Event(), threading.Event()
        read_a: list[dc.Consumed] = []
        producing_a = apps.submit(dc.produce_mix(boot["A"], "A", list(TOPICS), stop_a, self.seed))
        group_a = apps.submit(dc.consume_group(boot["A"], GROUP, list(TOPICS), len(parts), read_a, drain_a, final_commit=False))
        self.say(f"aiokafka on A: idempotent producer (keyed records), transactional producer (committed and aborted), "
                 f"consumer group {GROUP} (read_committed, commits every second)")  # fmt: skip

        cfg_ab = self.workdir / "a-to-b.properties"
        cfg_ab.write_text("bootstrap.servers=model://A\nmetadata.refresh.interval.ms=1000\n")
        self.say("create mirror a-to-b on B and start its topics")
        self.cli("B", "--create", "--mirror", "a-to-b", "--mirror-config", str(cfg_ab))
        self.start_topics("B", "a-to-b")

        def caught_up(src: ClusterClient, dst: ClusterClient) -> Callable[[], bool]:
            def check() -> bool:  # lag 0: the destination has everything up to the source's HW
                try:
                    return all(dst.list_offsets(tp).hw >= src.list_offsets(tp).hw for tp in tps)
                except PortError:
                    return False  # the mirror topic is not created yet
            return check

        wait_for("the mirror topics on B", lambda: {t.name for t in b.describe_topics()} >= set(TOPICS), 30, clock)
        refused = apps.run(dc.refused_produce(boot["B"], "orders"), 30)
        self.say(f"produce to B's mirror topic orders before the stop: "
                 f"{'ACCEPTED' if refused is None else f'refused ({refused}: aiokafka 0.14 name for READ_ONLY_TOPIC, 134)'}")  # fmt: skip
        time.sleep(3)  # mirror under live load
        stop_a.set()
        produced = self.joined(producing_a, "A's producers")
        produced += apps.run(dc.leave_open(boot["A"], "A", list(TOPICS), 3, self.seed))
        drain_a.set()
        ends_a = self.joined(group_a, f"group {GROUP} on A")
        committed_a = apps.run(dc.committed_offsets(boot["A"], GROUP, parts))
        self.say(f"A's producers stopped: {len(produced)} records, 3 transactions left open; group {GROUP} read "
                 f"{len(read_a)} records on A up to the read_committed end (LSO) of its {len(ends_a)} partitions and "
                 "stopped without committing the last second's reads")  # fmt: skip
        wait_for("a-to-b to catch up with A's HW", caught_up(a, b), 60, clock)
        a_open = {tp: a.open_transactions(tp) for tp in tps}
        self.say(f"a-to-b caught up with A's HW, {sum(map(len, a_open.values()))} transaction(s) still open on A "
                 "(copied open); failover: stop a-to-b")  # fmt: skip
        self.cli("B", "--stop", "--mirror", "a-to-b", "--topics", ",".join(TOPICS), "--wait", "60")
        wait_for("B's topics to become writable", lambda: all(not t.read_only for t in b.describe_topics(list(ids.values()))), 30, clock)
        a_before = {tp: a.list_offsets(tp) for tp in tps}
        b_at_stop = {tp: b.list_offsets(tp) for tp in tps}
        synced_b = apps.run(dc.committed_offsets(boot["B"], GROUP, parts))
        stop_b, drain_b = threading.Event(), threading.Event()
        read_b: list[dc.Consumed] = []
        group_b = apps.submit(dc.consume_group(boot["B"], GROUP, list(TOPICS), len(parts), read_b, drain_b, final_commit=True))
        producing_b = apps.submit(dc.produce_mix(boot["B"], "B", list(TOPICS), stop_b, self.seed + 1))
        self.say(f"B is writable; group {GROUP} resumes on B from the offsets the last group offset sync wrote "
                 f"(those it committed last on A: {'yes' if synced_b == committed_a else 'NO'}); producing on B")  # fmt: skip
        time.sleep(3)
        stop_b.set()
        produced_b = self.joined(producing_b, "B's producers")
        produced_b += apps.run(dc.leave_open(boot["B"], "B", list(TOPICS), 2, self.seed + 1))
        drain_b.set()
        ends_b = self.joined(group_b, f"group {GROUP} on B")
        self.clients = dc.account(produced + produced_b, read_a, read_b, committed_a, synced_b, ends_b)
        self.refused = refused
        self.say(f"B's producers stopped: {len(produced_b)} records (2 transactions left open); group {GROUP} read "
                 f"{len(read_b)} records on B and committed")  # fmt: skip
        apps.close()

        cfg_ba = self.workdir / "b-to-a.properties"
        cfg_ba.write_text("bootstrap.servers=model://B\nmetadata.refresh.interval.ms=1000\n")
        self.say("failback: create mirror b-to-a on A and start its topics")
        self.cli("A", "--create", "--mirror", "b-to-a", "--mirror-config", str(cfg_ba))
        self.start_topics("A", "b-to-a")
        self.cli("A", "--describe", "--mirror", "b-to-a", show=False)
        wait_for("b-to-a to reach MIRRORING", lambda: {r["state"] for r in json.loads(
            self.cli("A", "--describe", "--mirror", "b-to-a", "--json", show=False))} == {"MIRRORING"}, 60, clock)  # fmt: skip
        wait_for("b-to-a to catch up with B's HW", caught_up(b, a), 60, clock)

        def in_sync() -> bool:
            for tp in tps:
                la, lb = a.list_offsets(tp), b.list_offsets(tp)
                if (la.leo, la.hw, la.lso) != (lb.leo, lb.hw, lb.lso):
                    return False
            return True

        wait_for("A to match B (LEO, HW and LSO equal)", in_sync, 60, clock)
        if self.audit_enabled:
            self.await_exports()
        clock.stop()
        left_open = sum(len(b.open_transactions(tp)) for tp in tps)
        self.say(f"A matches B: same LEO, HW and LSO on every partition ({left_open} transaction(s) B's producers "
                 "left open are open on A too, as on B)")  # fmt: skip
        self.say("describe on B (a-to-b) and on A (b-to-a):")
        self.cli("B", "--describe", "--mirror", "a-to-b")
        self.cli("A", "--describe", "--mirror", "b-to-a")
        code = self.verdict(a, b, tps, a_before, b_at_stop, a_open)
        if self.audit_enabled:
            code = max(code, self.audit())
        return code

    def await_exports(self) -> None:
        """Waits for each coordinator's timed audit export (``audit.export.*``, one store per
        destination cluster under ``<workdir>/audit/<cluster>``) taken after both mirrors settled."""
        from audit import layout

        settled = int(time.time() * 1000)

        def exported() -> bool:
            return all((ms := layout.list_manifests(r)) and ms[-1].taken_at_ms > settled for r in self.audit_roots.values())

        wait_for("both coordinators to export an audit snapshot", exported, 30, self.clock)

    @property
    def audit_roots(self) -> dict[str, Path]:
        return {c: self.workdir / "audit" / c for c in ("B", "A")}

    def audit(self) -> int:
        """The audit verdict (Spark) over both coordinators' stores, up to the snapshots
        ``await_exports`` waited for (later ones show the same settled state).

        The broker, coordinators and model server are stopped before Spark starts (on two cores
        they would slow Spark several times over).
        """
        from audit import layout

        self.close()
        roots = self.audit_roots
        latest = {c: layout.list_manifests(r)[-1] for c, r in roots.items()}
        self.say("audit: the workers' latest snapshots: " + "; ".join(
            f"{c} ({', '.join(m.mirrors)}) at metadata offset {m.metadata_offset}, "
            f"{len(layout.list_manifests(roots[c]))} incremental exports" for c, m in latest.items())
            + "; processes stopped; starting Spark")  # fmt: skip
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # loopback only (and no hostname warning)
        os.environ.setdefault("AUDIT_SPARK_MASTER", "local[2]")  # BROKER.md: local[2], loopback, no UI
        from audit.queries import VIOLATION_QUERIES, AuditParams
        from audit.run import run_queries
        from audit.spark import SnapshotStore, spark_session
        from audit.verdict import SHOWN_ROWS, verdict_text

        spark = spark_session()
        texts, ok = [], True
        try:
            for c, root in roots.items():
                results = run_queries(spark, SnapshotStore(root), list(VIOLATION_QUERIES), AuditParams(), limit=SHOWN_ROWS)
                text, passed = verdict_text(results, latest[c].metadata_offset, latest[c].taken_at)
                texts.append(f"coordinator {c} ({', '.join(latest[c].mirrors)}): {text}")
                ok = ok and passed
        finally:
            spark.stop()
        self.out.write(f"\nAUDIT VERDICT: audit {'PASS' if ok else 'FAIL'}\n" + "".join(f"    {t}\n" for t in texts))
        for c, root in roots.items():
            self.out.write(f"    (report: python -m audit --snapshots {root} --html {self.workdir / f'audit-report-{c}.html'})\n")
        return 0 if ok else 1

    def verdict(self, a: ClusterClient, b: ClusterClient, tps: list[TopicPartition], a_before: dict[Any, Any],
                b_at_stop: dict[Any, Any], a_open: dict[Any, Any]) -> int:  # fmt: skip
        """Compares the two clusters once A has caught up with B.

        Per partition: A's and B's logs are the same batches (offsets, batch leader epochs, producer
        fields, control type, payload) up to B's HW; A's LEO, HW and LSO equal B's; a read_committed
        reader gets the same records from both; the same transactions are open on A as on B; every
        transaction open on A at the failover reached B and was aborted there exactly once (before
        the stop's MIRROR_PID_RESET), none that A had committed; DLE >= SLE. Then what the clients
        saw (``client_check``): no gap, duplicates within the last sync, the produce refused.
        """
        problems: list[str] = []
        names = {tid: n for n, tid in ((t.name, t.topic_id) for t in a.describe_topics())}
        rows = []
        for tp in tps:
            name = f"{names[tp.topic_id]}-{tp.partition}"
            la, lb = a.list_offsets(tp), b.list_offsets(tp)
            sa, sb = shape(log_batches(a, tp), lb.hw), shape(log_batches(b, tp), lb.hw)
            same = sa == sb
            ca, cb = read_committed_values(a, tp), read_committed_values(b, tp)
            if not same:
                problems.append(f"{name}: logs differ below B's HW {lb.hw}")
            for what, va, vb in (("LEO", la.leo, lb.leo), ("HW", la.hw, lb.hw), ("LSO", la.lso, lb.lso)):
                if va != vb:
                    problems.append(f"{name}: A's {what} {va} != B's {what} {vb}")
            opens_a = [(o.producer_id, o.first_offset) for o in a.open_transactions(tp)]
            opens_b = [(o.producer_id, o.first_offset) for o in b.open_transactions(tp)]
            if opens_a != opens_b:
                problems.append(f"{name}: open transactions differ: A {opens_a}, B {opens_b}")
            problems.extend(f"{name}: {p}" for p in failover_aborts(log_batches(b, tp), a_open[tp]))
            if ca != cb:
                lost = [v for v in cb if v not in set(ca)]
                problems.append(f"{name}: read_committed differs: A {len(ca)} record(s), B {len(cb)}; "
                                f"{len(lost)} of B's committed record(s) missing on A")  # fmt: skip
            if la.leader_epoch < lb.leader_epoch:
                problems.append(f"{name}: DLE {la.leader_epoch} < SLE {lb.leader_epoch}")
            rows.append((name, b_at_stop[tp].leo, lb.hw, lb.lso, la.leo, la.lso, lb.leader_epoch, la.leader_epoch,
                         len(cb), "yes" if same else "NO"))  # fmt: skip
        self.out.write("\n    PARTITION   B-LEO@STOP   B-HW  B-LSO  A-LEO  A-LSO  B-EPOCH(SLE)  A-EPOCH(DLE)  COMMITTED  SAME-LOG\n")
        for r in rows:
            self.out.write(f"    {r[0]:<11} {r[1]:>10}  {r[2]:>5}  {r[3]:>5}  {r[4]:>5}  {r[5]:>5}  {r[6]:>12}  {r[7]:>12}  "
                           f"{r[8]:>9}  {r[9]:>8}\n")  # fmt: skip
        problems.extend(self.client_check())
        if problems:
            self.out.write("\nVERDICT: FAILED\n" + "".join(f"  - {p}\n" for p in problems))
            return 1
        opened = sum(map(len, a_open.values()))
        self.out.write(f"\nVERDICT: OK - {len(tps)} partitions: A's log is B's log batch for batch up to B's HW "
                       "(offsets, leader epochs, producer fields, markers, payloads); LEO, HW and LSO equal; "
                       "read_committed reads the same records on both; the same transactions open on both; "
                       f"the {opened} transaction(s) open on A at the failover reached B and were aborted there "
                       "exactly once; DLE >= SLE everywhere; the clients saw every committed record, "
                       "none twice beyond the last sync, and a produce refused on the mirror topic\n")  # fmt: skip
        return 0

    def client_check(self) -> list[str]:
        """Prints what the Kafka clients saw; returns what is wrong with it."""
        r = self.clients
        if r is None:
            return ["the clients' accounting is missing"]
        self.out.write(
            f"\n    CLIENTS (aiokafka): produced {r.produced} records ({r.committed} committed, {r.aborted} in aborted "
            f"transactions, {r.left_open} in transactions left open); group {GROUP}: consumed {r.consumed_a} on "
            f"{self.source_name}, {r.consumed_b} on B after the switch; duplicates {r.duplicates} (bound: "
            f"{r.duplicate_bound} read on {self.source_name} "
            f"past the group's last commit, which the last sync carried to B); gaps {r.gaps}; held behind open "
            f"transactions {r.held}; "
            + (f"committed transactional records the source's read_committed Fetch never served the live group "
               f"(it serves past the LSO, leaving out open transactions): {r.skipped_by_source}; "
               if self.source_skips_open_transactions else "")
            + "produce to the mirror topic before the stop: "
            f"{'ACCEPTED' if self.refused is None else 'refused (' + self.refused + ')'}\n")  # fmt: skip
        problems = [f"clients: {p}" for p in r.problems]
        if self.refused is None:
            problems.append("clients: a produce to B's mirror topic was accepted before the stop")
        elif self.refused != REFUSED_AS:
            problems.append(f"clients: the produce to B's mirror topic before the stop got {self.refused}, "
                            f"not {REFUSED_AS} (READ_ONLY_TOPIC)")  # fmt: skip
        return problems

    def joined(self, fut: Any, what: str, timeout: float = 90.0) -> Any:
        try:
            return fut.result(timeout)
        except Exception as e:  # noqa: BLE001 - any client failure fails the demo, with its cause
            raise DemoError(f"{what} failed: {type(e).__name__}: {e}") from e

    def close(self) -> None:
        if self.apps is not None:
            self.apps.close()
            self.apps = None
        if self.clock is not None and self.clock.is_alive():
            self.clock.stop()
        self.procs.close()
        if self.broker is not None:
            self.broker.stop()
            self.broker = None


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m streams.demo", description=__doc__.splitlines()[0])
    p.add_argument("--workdir", help="keep everything here (default: a temporary directory, removed at the end)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--keep", action="store_true", help="keep the temporary directory (logs)")
    p.add_argument("--no-audit", action="store_true", help="skip the audit snapshot and its Spark verdict at the end")
    p.add_argument("--from-kafka", action="store_true",
                   help="migrate from a real noida-db broker (a second instance) to model cluster B instead: "
                        "mirror kafka-to-b, failover, clients moving to B; no failback (streams.demo_from_kafka)")
    args = p.parse_args(argv)
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="kip1279-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    if args.from_kafka:
        from streams.demo_from_kafka import FromKafkaDemo

        demo: Demo = FromKafkaDemo(workdir, args.seed, audit=not args.no_audit)
    else:
        demo = Demo(workdir, args.seed, audit=not args.no_audit)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    code = 1
    try:
        code = demo.run()
    except KeyboardInterrupt:
        sys.stdout.write("interrupted; cleaning up\n")
        code = 130
    except Exception as e:  # noqa: BLE001 - any failure: a clear message, non-zero exit
        sys.stdout.write(f"\nDEMO FAILED: {type(e).__name__}: {e}\n(logs in {workdir})\n")
        args.keep = True
    finally:
        demo.close()
        sys.stdout.write(f"demo finished in {time.monotonic() - demo.t0:.1f}s\n")
        if not args.workdir and not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
            if demo.audit_enabled and code != 130:
                sys.stdout.write(f"(temporary {workdir} removed, audit snapshot with it: --workdir DIR or --keep keeps it)\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
