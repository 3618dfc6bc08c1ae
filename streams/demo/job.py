"""The main job: failover and failback between two model clusters, end to end, on loopback.

Run by ``python -m streams.demo`` (``streams/demo/__main__.py``).

``--from-kafka`` runs a migration from a real noida-db broker to B instead (``streams.demo.from_kafka``).

Starts the broker of the coordinator's own topics (Apache Kafka, or noida-db with ``--broker noida``:
``streams.brokers.own``), the cluster-model server (clusters A and B), and one coordinator
per destination cluster (SPEC, "One coordinator per destination cluster"): a controller and a
worker for B (mirror ``a-to-b``) and a controller and a worker for A (mirror ``b-to-a``), each
a separate process with its own topic prefix. The applications are aiokafka clients on the
model's Kafka listeners (``streams.demo.clients``); the model's own API only referees and moves
the model's clock. Then:
producers on A (keyed records, transactions committed and aborted) and consumer group
``demo-orders-app`` reading A -> ``a-to-b`` catches up; a produce to B's mirror topic is refused
-> A's producers leave transactions open and stop, the group reads to A's LSO and stops ->
failover (``--stop --dry-run`` first, then ``--stop``, with transactions still open on A: copied to B, aborted there once each;
its last group offset sync carries the group's last commit to B) -> the group resumes on B,
producers on B (again leaving transactions open) -> failback (``b-to-a``) -> A catches up with
B's HW -> describe and a verdict computed from the two clusters' logs and what the clients saw -> ``--promote``
of ``b-to-a`` (A writable again; what it reports at the cut is printed) -> the audit verdict (Spark)
on the snapshots the workers export every second (``audit.export.*``: states, transitions from
``__mirror_state``, the clusters' offsets and leader epochs) to Parquet, one store per
coordinator under ``<workdir>/audit/<cluster>``; ``--no-audit`` turns both off. Where bin/setup
built Prometheus, it scrapes every worker and controller with ops/prometheus's rules, and the job
ends with its line: ``alerts: none firing``, or which fire. Every process is stopped on exit, on failure and on Ctrl-C.
Exit 0 on success, 1 with the reason otherwise (also when the audit fails).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clustermodel.client import ClusterClient
from streams.demo import clients as dc
from streams.demo.clients import ClientLoop
from coordinator.ports import PortError, TopicPartition
from streams.brokers.own import start_own_broker
from streams.demo import prometheus as prom
from streams.demo.verdicts import compare_clusters, spark_audit
from streams.demo.harness import ADMIN, Clock, DemoError, GROUP, PY, Processes, REFUSED_AS, TOPICS, run_cli, wait_for


class Demo:
    def __init__(self, workdir: Path, seed: int, out: Any = sys.stdout, audit: bool = True,
                 broker: str | None = None, ha: bool = False) -> None:  # fmt: skip
        self.workdir, self.seed, self.out, self.audit_enabled = workdir, seed, out, audit
        # The HA setup (issue #36): 3 Kafka brokers, the coordinator's topics at RF 3 and
        # min.insync.replicas 2, 3 controllers and 2 workers per destination cluster.
        self.ha = ha
        self.procs = Processes(workdir)
        self.broker_kind = broker  # None: Apache Kafka where it can run (``streams.brokers.own``)
        self.broker: Any = None
        self.clock: Clock | None = None
        self.apps: ClientLoop | None = None
        self.clients: dc.ClientReport | None = None
        self.refused: str | None = None
        self.endpoints: dict[str, str] = {}
        # Prometheus scrapes every worker and controller where bin/setup built it.
        self.metrics: dict[str, list[str]] | None = None if prom.missing_reason() else {
            prom.WORKER_JOB: [], prom.CONTROLLER_JOB: []}  # fmt: skip
        self.prometheus: prom.LocalPrometheus | None = None
        self.starting: list[tuple[str, Any]] = []  # workers whose METRICS line is not read yet
        self.source_name = "A"  # the cluster the applications leave at the failover (client_check's wording)
        self.source_skips_open_transactions = False  # see streams.demo.clients.account
        self.t0 = time.monotonic()

    def say(self, text: str) -> None:
        self.out.write(f"[{time.monotonic() - self.t0:5.1f}s] {text}\n")
        self.out.flush()

    def coordinator(self, cluster: str, model_port: int) -> None:
        common = ["--bootstrap-server", self.broker.bootstrap, "--cluster-name", cluster,  # type: ignore[union-attr]
                  "--state-partitions", "8", "--model-port", str(model_port), "--loglevel", "warning"]  # fmt: skip
        if self.ha:
            props = self.workdir / "ha.properties"
            props.write_text("mirror.state.topic.replication.factor=3\nmirror.state.topic.min.insync.replicas=2\n")
            common += ["--config", str(props)]
        metrics = [] if self.metrics is None else ["--metrics-listener", "127.0.0.1:0"]
        n_controllers, n_workers = (3, 2) if self.ha else (1, 1)
        endpoints = []
        for i in range(1, n_controllers + 1):
            name = f"controller-{cluster}" + (f"-{i}" if self.ha else "")
            data = self.workdir / (f"data-{cluster}-c{i}" if self.ha else f"data-{cluster}")
            proc, line = self.procs.spawn(name, [PY, "-m", "streams.worker.main", "--controller", "--listener", "127.0.0.1:0",
                                                 "--super-users", ADMIN, "--data-dir", str(data), *common, *metrics],
                                          ready="LISTENING")  # fmt: skip
            endpoints.append(line.split()[1])
            if self.metrics is not None:  # printed right after LISTENING
                self.metrics[prom.CONTROLLER_JOB].append(self.printed(name, proc, "METRICS"))
        self.endpoints[cluster] = ",".join(endpoints)
        audit = ["--audit-export-dir", str(self.workdir / "audit"), "--audit-export-interval-ms", "1000"]
        for i in range(1, n_workers + 1):
            name = f"worker-{cluster}" + (f"-{i}" if self.ha else "")
            data = self.workdir / (f"data-{cluster}-w{i}" if self.ha else f"data-{cluster}")
            worker, _ = self.procs.spawn(name, [PY, "-m", "streams.worker.main", "--tick-interval", "0.2",
                                                "--data-dir", str(data), *common, *(audit if self.audit_enabled else []),
                                                *metrics])  # fmt: skip
            self.starting.append((name, worker))
        self.say(f"coordinator of cluster {cluster}: controller{'s' if self.ha else ''} on {self.endpoints[cluster]}, "
                 f"{n_workers} worker{'s' if self.ha else ''} started")  # fmt: skip

    def printed(self, name: str, proc: Any, prefix: str) -> str:
        """The address a process prints after ``prefix`` (its next such line on stdout)."""
        for line in proc.stdout:
            if line.startswith(prefix):
                return str(line.split()[1])
        raise DemoError(f"{name} exited with {proc.wait()} before printing {prefix}; see {self.procs.logdir / (name + '.log')}")

    def cli(self, cluster: str, *argv: str, show: bool = True) -> str:
        code, text = run_cli(self.endpoints[cluster], *argv)
        if show:
            for line in text.rstrip().splitlines():
                self.out.write(f"    {line}\n")
        if code != 0:
            raise DemoError(f"kafka-cluster-mirrors {' '.join(argv)} failed ({code}): {text.strip()}")
        return text

    def preview(self, open_on_a: int) -> None:
        """``--stop --dry-run`` before the failover: nothing lost (lag 0), A's open transactions,
        copied to B, named as the ones the stop will abort."""
        argv = ("--stop", "--dry-run", "--mirror", "a-to-b", "--topics", ",".join(TOPICS))
        code, text = run_cli(self.endpoints["B"], *argv)
        for line in text.rstrip().splitlines():
            self.out.write(f"    {line}\n")
        expected = f"would lose 0 records on 0 partitions; would abort {open_on_a} transactions"
        if code != (3 if open_on_a else 0) or (open_on_a and expected not in text):
            raise DemoError(f"kafka-cluster-mirrors {' '.join(argv)}: exit {code}, expected '{expected}'")

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
        self.broker, what = start_own_broker(self.broker_kind, self.workdir / "broker", brokers=3 if self.ha else 1)
        self.say(f"{what} (the coordinators' own topics)")
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
        if self.metrics is not None:
            for name, worker in self.starting:  # read once both coordinators start: they start side by side
                self.metrics[prom.WORKER_JOB].append(self.printed(name, worker, "METRICS"))
            self.prometheus = prom.LocalPrometheus(self.workdir / "prometheus", self.metrics).start()
            self.say(f"Prometheus on {self.prometheus.url} scrapes both workers and controllers "
                     "(ops/prometheus/kip1279-rules.yml)")  # fmt: skip
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
                 "(copied open); what the failover would cost (--stop --dry-run):")  # fmt: skip
        self.preview(sum(map(len, a_open.values())))
        self.say("failover: stop a-to-b")
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
        clock.stop()
        left_open = sum(len(b.open_transactions(tp)) for tp in tps)
        self.say(f"A matches B: same LEO, HW and LSO on every partition ({left_open} transaction(s) B's producers "
                 "left open are open on A too, as on B)")  # fmt: skip
        self.say("describe on B (a-to-b) and on A (b-to-a):")
        self.cli("B", "--describe", "--mirror", "a-to-b")
        self.cli("A", "--describe", "--mirror", "b-to-a")
        code = self.verdict(a, b, tps, a_before, b_at_stop, a_open)
        self.clock = clock = Clock(port)  # the promote's stop needs the model's replication again
        clock.start()
        code = max(code, self.promote(a, ids, left_open))
        if self.audit_enabled:
            self.await_exports()
        clock.stop()
        # Read before the audit stops every process (Prometheus too); printed last.
        alerts = prom.alerts_line(self.prometheus) if self.prometheus is not None else None
        if self.audit_enabled:
            code = max(code, self.audit())
        if alerts is not None:
            self.say(alerts)
        return code

    def promote(self, a: ClusterClient, ids: dict[str, Any], left_open: int) -> int:
        """The failback's last step, once the verdict has compared the logs: ``--promote`` of b-to-a
        makes A the writable primary again. Lag 0 and every group synced hold already; the
        transactions B's producers left open (copied to A) are aborted on A by the stop
        (``--abort-open-transactions``), as the promote reports at the cut."""
        self.say("failback complete: promote b-to-a (waits for lag 0 and a group sync after the last commit, "
                 "then stops; --abort-open-transactions for those B's producers left open):")  # fmt: skip
        argv = ("--promote", "--mirror", "b-to-a", "--topics", ",".join(TOPICS), "--abort-open-transactions",
                "--timeout", "60")  # fmt: skip
        code, text = run_cli(self.endpoints["A"], *argv)
        for line in text.rstrip().splitlines():
            self.out.write(f"    {line}\n")
        expected = f"would lose 0 records on 0 partitions; would abort {left_open} transactions"
        problems = []
        if code != (3 if left_open else 0) or "Promoted: stopped" not in text or (left_open and expected not in text):
            problems.append(f"kafka-cluster-mirrors {' '.join(argv)}: exit {code}, expected 'Promoted' and '{expected}'")
        try:
            wait_for("A's topics to become writable", lambda: all(
                not t.read_only for t in a.describe_topics(list(ids.values()))), 30, self.clock)  # fmt: skip
        except DemoError as e:
            problems.append(str(e))
        opened = sum(len(a.open_transactions(TopicPartition(tid, p))) for t, tid in ids.items() for p in range(TOPICS[t]))
        if opened:
            problems.append(f"{opened} transaction(s) still open on A after the promote")
        if problems:
            self.out.write("\nPROMOTE: FAILED\n" + "".join(f"  - {p}\n" for p in problems))
            return 1
        self.out.write(f"\nPROMOTE: OK - b-to-a stopped at lag 0; A is writable; the {left_open} transaction(s) "
                       "open on A were aborted there, as the promote said at the cut\n")  # fmt: skip
        return 0

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
        self.close()
        return spark_audit(self.audit_roots, self.say, self.out, self.workdir)

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
        problems = compare_clusters(a, b, tps, b_at_stop, a_open, self.out)
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

    def close(self, kill_workers: bool = False) -> None:
        """Stops everything; ``kill_workers``: SIGKILL the workers first rather than wait for their
        clean stops one after the other (3-4 s each), for a run that is over."""
        if kill_workers:
            for name, proc in self.procs.procs:
                if name.startswith("worker-") and proc.poll() is None:
                    proc.kill()
        if self.prometheus is not None:
            self.prometheus.stop()
            self.prometheus = None
        if self.apps is not None:
            self.apps.close()
            self.apps = None
        if self.clock is not None and self.clock.is_alive():
            self.clock.stop()
        self.procs.close()
        if self.broker is not None:
            self.broker.stop()
            self.broker = None

