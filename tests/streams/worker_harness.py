"""A rig of real processes for the worker robustness tests (crash, poison, rebalance).

One cluster-model server (clusters A and B), and per destination cluster a controller and any
number of ``kip1279-worker`` processes, all on the session's noida-db broker. It reuses the
demo's process management (``streams.demo.job.Processes``: every child is stopped on close and dies
with its parent), its CLI runner (or, with ``cli_process``, ``kafka-cluster-mirrors`` as a process
of its own) and its log helpers, and adds what the tests need: SIGKILL a
worker, restart it with the same arguments (its data directory kept, or its state wiped), read
the ``__mirror_state`` changelog history of every mirror partition and check it, and compare the
two clusters' logs. It never touches the workers' group: a dead member is the product's business
(static membership, see ``streams.worker.membership``).

The topic prefixes (``--cluster-name``) are unique per rig, so rigs share the broker; the model
cluster is passed with ``--model-cluster``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from clustermodel.client import ClusterClient
from clustermodel.workload import Workload
from coordinator.partition_state import MirrorPartitionState
from coordinator.ports import PortError, TopicPartition
from coordinator.states import MirrorState, is_legal_transition
from streams.config import WorkerConfig
from streams.demo.harness import ADMIN, PY, Clock, DemoError, Processes, log_batches, read_changelog, run_cli, shape, wait_for
from streams.worker.membership import IDENTITY_FILE
from streams.state.mirror_state_codec import RecordType

# The workers' group timing (worker.session.timeout.ms etc.). noida-db 0.2.3 never expires a dead
# member (a restarted worker takes its member over by its group.instance.id), so a short session
# buys nothing there; it only checks a session when that member's own heartbeat arrives (engine.rs
# handle_heartbeat), so a live member whose JoinGroup waited longer than the session is thrown out.
# And a round that reaches its rebalance timeout completes without its slow members; with 8 s,
# under load, a worker once got an empty assignment that aiokafka cannot decode (its coordinator
# died: the worker now exits, see ``WorkerExit.watch_membership``). Hence a rebalance
# timeout a loaded machine does not reach, and a session above it plus a heartbeat.
GROUP_TIMING = {"--session-timeout-ms": "45000", "--heartbeat-interval-ms": "500", "--rebalance-timeout-ms": "30000"}
FAUST_ENV: dict[str, str] = {}
PROPS = "bootstrap.servers=model://{src}\nmetadata.refresh.interval.ms=1000\n"


def run_cli_process(endpoint: str, *argv: str, timeout: float = 120.0) -> tuple[int, str]:
    """``kafka-cluster-mirrors`` as a process of its own (``streams.admin.cli:main``, the console script's
    entry point, run from the working directory as the workers are): exit code and output."""
    env = dict(os.environ, KIP1279_PRINCIPAL=ADMIN)
    done = subprocess.run([PY, "-m", "streams.admin.cli", "--bootstrap-server", endpoint, *argv], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=os.getcwd())  # fmt: skip
    return done.returncode, done.stdout + done.stderr

# What a worker logs when a changelog partition's records stop coming during its table recovery:
# the guard's kick (``streams.worker.recovery_guard``), and Faust's own warning after 30 s of it.
_RECOVERY_STALLS = ("table recovery: no record of changelog partition", "No event received for active tp")


class Rig:
    def __init__(self, workdir: Path, bootstrap: str, topics: dict[str, int], *, state_partitions: int = 4,
                 tick: float = 0.1, seed: int = 1) -> None:  # fmt: skip
        self.workdir, self.bootstrap, self.topics = workdir, bootstrap, topics
        self.state_partitions, self.tick, self.seed = state_partitions, tick, seed
        self.procs = Processes(workdir)
        # The table's hand-overs at info: a failed wait prints them (``wait``).
        self.loglevel = os.environ.get("KIP1279_TEST_LOGLEVEL", "warning,streams.worker.table=info,streams.worker.stop_reports=info,faust.tables.recovery=info")
        self.tag = uuid.uuid4().hex[:6]
        self.endpoints: dict[str, str] = {}
        self.workers: dict[str, tuple[str, subprocess.Popen[str]]] = {}
        self.clock: Clock | None = None
        self.port = 0
        self.clients: dict[str, ClusterClient] = {}
        self.ids: dict[str, uuid.UUID] = {}
        self.tps: list[TopicPartition] = []
        # True: every command runs ``kafka-cluster-mirrors`` as its own process (scenario tests);
        # False: its ``main`` in this process, with captured output (cheaper to poll).
        self.cli_process = False
        # The workers' group timing, given to the controllers too: a controller removes a dead
        # member by the session timeout (``streams.admin.members``).
        self.group_timing = dict(GROUP_TIMING)

    # ------------------------------------------------------------------------- processes

    def prefix(self, cluster: str) -> str:
        return f"{cluster}{self.tag}"

    def config(self, cluster: str) -> WorkerConfig:
        return WorkerConfig(bootstrap_servers=self.bootstrap, cluster_name=self.prefix(cluster),
                            state_partitions=self.state_partitions, data_dir=str(self.data_dir(cluster, "")))  # fmt: skip

    def data_dir(self, cluster: str, worker: str) -> Path:
        return self.workdir / f"data-{cluster}{worker}"

    def common(self, cluster: str, data_dir: Path) -> list[str]:
        return ["--bootstrap-server", self.bootstrap, "--cluster-name", self.prefix(cluster), "--data-dir", str(data_dir),
                "--state-partitions", str(self.state_partitions), "--model-port", str(self.port),
                "--model-cluster", cluster, "--loglevel", self.loglevel]  # fmt: skip

    def start(self, clusters: Sequence[str] = ("A", "B")) -> Rig:
        _, line = self.procs.spawn("model-server", [PY, "-m", "clustermodel.server", "--port", "0", "--cluster", "A",
                                                    "--cluster", "B", "--seed", str(self.seed)], ready="PORT")  # fmt: skip
        self.port = int(line.split()[1])
        self.clients = {c: ClusterClient(self.port, c) for c in ("A", "B")}
        self.ids = {name: self.clients["A"].add_topic(name, n).topic_id for name, n in self.topics.items()}
        self.tps = [TopicPartition(self.ids[t], p) for t, n in self.topics.items() for p in range(n)]
        for c in clusters:
            _, line = self.procs.spawn(f"controller-{c}", [PY, "-m", "streams.worker.main", "--controller", "--listener",
                                                           "127.0.0.1:0", "--super-users", "User:demo-admin",
                                                           *self.common(c, self.data_dir(c, "")),
                                                           *(x for kv in self.group_timing.items() for x in kv)],
                                                      ready="LISTENING")  # fmt: skip
            self.endpoints[c] = line.split()[1]
        self.clock = Clock(self.port)
        self.clock.start()
        return self

    def spawn_worker(self, cluster: str, name: str | None = None, data_dir: Path | None = None,
                     extra: Sequence[str] = ()) -> str:  # fmt: skip
        """Starts a worker of ``cluster`` (the ``worker-B`` of the demo by default); ``extra``: more
        worker arguments."""
        name = name or f"worker-{cluster}"
        data_dir = data_dir or self.data_dir(cluster, "")
        argv = [PY, "-m", "streams.worker.main", "--tick-interval", str(self.tick), *self.common(cluster, data_dir),
                *(x for kv in self.group_timing.items() for x in kv), *extra]  # fmt: skip
        # A client id per worker names its group member (``owners``, ``group_members``).
        env = dict(FAUST_ENV, BROKER_CLIENT_ID=self.client_id(name),
                   **json.loads(os.environ.get("KIP1279_TEST_FAUST_ENV", "{}")))  # fmt: skip
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)  # the child inherits them; Faust reads its settings from the environment
        try:
            proc, _ = self.procs.spawn(name, argv)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        self.workers[name] = (cluster, proc)
        return name

    def client_id(self, worker: str) -> str:
        return f"kip1279-{self.tag}-{worker}"

    def kill_worker(self, name: str) -> None:
        """SIGKILL: no clean shutdown, no LeaveGroup, nothing flushed that was not already acknowledged."""
        _, proc = self.workers.pop(name)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        self.procs.procs = [(n, p) for n, p in self.procs.procs if p is not proc]

    def group_members(self, cluster: str) -> list[tuple[str, str, bytes]]:
        """(member id, client id, assignment) of every member of the cluster's worker group."""
        return asyncio.run(group_members(self.bootstrap, self.config(cluster).faust_app_id))

    def owners(self, cluster: str) -> dict[str, set[int]]:
        """Worker name -> the desired-state topic partitions (so table partitions) the group gives it."""
        from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment

        topic = self.config(cluster).desired_state_topic_name
        names = {self.client_id(name): name for name in self.workers}
        out: dict[str, set[int]] = {}
        for _, client, raw in self.group_members(cluster):
            parts: set[int] = set()
            if raw:
                for t, ps in ConsumerProtocolMemberAssignment.decode(raw).assignment:
                    if t == topic:
                        parts.update(ps)
            out[names.get(client, client)] = parts
        return out

    def stop_worker(self, name: str) -> None:
        """SIGTERM (a clean stop, e.g. a scale-down)."""
        _, proc = self.workers.pop(name)
        self.procs.stop(name)
        proc.wait(10)

    def pause_worker(self, name: str) -> None:
        """SIGSTOP: the worker neither processes nor heartbeats (its events wait in its partitions)."""
        self.workers[name][1].send_signal(signal.SIGSTOP)

    def leave_worker(self, name: str, timeout: float = 30.0) -> int:
        """SIGTERM (then SIGCONT, for a paused worker): a clean stop, whose consumer sends LeaveGroup.
        Waits for the exit: killed before its LeaveGroup, it would be a dead member (see above)."""
        _, proc = self.workers.pop(name)
        proc.send_signal(signal.SIGTERM)
        proc.send_signal(signal.SIGCONT)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
            raise DemoError(f"{name} did not stop within {timeout:.0f}s of SIGTERM") from None
        finally:
            self.procs.procs = [(n, p) for n, p in self.procs.procs if p is not proc]
        return code

    def wipe(self, cluster: str, worker: str = "") -> None:
        """Removes RocksDB and the metadata snapshots: state comes back from the changelog and the
        log. The worker's identity (its group.instance.id) stays, as a restart with the same
        arguments keeps it (``streams.worker.membership``)."""
        for d in self.data_dir(cluster, worker).glob("*"):
            for item in d.iterdir() if d.is_dir() else ():
                if item.name != IDENTITY_FILE:
                    shutil.rmtree(item) if item.is_dir() else item.unlink()

    def printed(self, name: str, prefix: str) -> str:
        """The rest of the next line that process ``name`` prints on stdout starting with ``prefix``
        (e.g. ``METRICS HOST:PORT``, printed once its metrics endpoint listens)."""
        proc = next(p for n, p in self.procs.procs if n == name)
        assert proc.stdout is not None
        while line := proc.stdout.readline():
            if line.startswith(prefix):
                return line[len(prefix) :].strip()
        raise DemoError(f"{name} exited ({proc.poll()}) without printing {prefix!r}; see {self.workdir / (name + '.log')}")

    def worker_alive(self, name: str) -> bool:
        return name in self.workers and self.workers[name][1].poll() is None

    def worker_log(self, name: str) -> str:
        p = self.workdir / f"{name}.log"
        return p.read_text(errors="replace") if p.exists() else ""

    def close(self) -> None:
        if self.clock is not None and self.clock.is_alive():
            self.clock.stop()
        for c in self.clients.values():
            c.close()
        # The test is over: the workers are SIGKILLed (a clean stop took 3-4 s each, one after the
        # other; nothing here checks it: leave_worker and stop_worker do, where a test claims it),
        # the controllers get SIGTERM at once, so their shutdowns overlap. The model server is still
        # stopped last.
        for _, proc in self.workers.values():
            if proc.poll() is None:
                proc.kill()
        for name, proc in self.procs.procs:
            if name != "model-server" and proc.poll() is None:
                proc.terminate()
        self.procs.close()

    # ------------------------------------------------------------------------- commands

    def run_cli(self, cluster: str, *argv: str) -> tuple[int, str]:
        return (run_cli_process if self.cli_process else run_cli)(self.endpoints[cluster], *argv)

    def cli(self, cluster: str, *argv: str) -> str:
        code, text = self.run_cli(cluster, *argv)
        if code != 0:
            raise DemoError(f"kafka-cluster-mirrors {' '.join(argv)} on {cluster} failed ({code}): {text.strip()}")
        return text

    def describe(self, cluster: str, mirror: str, *extra: str) -> list[dict[str, Any]]:
        """``--describe --json`` rows, the prototype's array (``extra``: e.g. ``--failed``)."""
        rows: list[dict[str, Any]] = json.loads(self.cli(cluster, "--describe", "--mirror", mirror, "--json", *extra))
        return rows

    def create_mirror(self, cluster: str, mirror: str, src: str, extra: str = "") -> None:
        """``--create`` with the mirror's properties: the source, a 1 s refresh, then ``extra`` lines
        (a later line of the same key wins)."""
        path = self.workdir / f"{mirror}.properties"
        path.write_text(PROPS.format(src=src) + extra)
        self.cli(cluster, "--create", "--mirror", mirror, "--mirror-config", str(path))

    def start_topics(self, cluster: str, mirror: str, timeout: float = 30.0) -> None:
        """``--start`` once the controller has registered the source's topics."""
        deadline = time.monotonic() + timeout
        while True:
            code, text = self.run_cli(cluster, "--start", "--mirror", mirror, "--topics", ",".join(self.topics))
            if code == 0:
                return
            if time.monotonic() > deadline:
                raise DemoError(f"could not start {mirror}: {text.strip()}")
            time.sleep(0.3)

    def stop_topics(self, cluster: str, mirror: str) -> None:
        self.cli(cluster, "--stop", "--mirror", mirror, "--topics", ",".join(self.topics))

    def produce(self, cluster: str, seconds: float, seed: int) -> None:
        """Keyed records and transactions (committed, aborted, left open), then closes the open ones."""
        self.start_producers(cluster, seed)
        time.sleep(seconds)
        self.quiet_producers(cluster)

    def start_producers(self, cluster: str, seed: int) -> None:
        """The clock's producers on ``cluster``, from now until ``quiet_producers``. They use the
        clock's own client: a ClusterClient is one blocking connection, not to be shared between
        threads (a call of the test's thread would read the reply to one of the clock's)."""
        assert self.clock is not None
        with self.clock.lock:
            self.clock.workload = Workload(self.clock.clients[cluster], list(self.topics), seed=seed,
                                           records_per_s=300, batch_size=5, transactional_ratio=0.3,
                                           abort_ratio=0.3, leave_open_ratio=0.15)  # fmt: skip

    def quiet_producers(self, cluster: str) -> None:
        """Stops the clock's producers and aborts the transactions they left open."""
        assert self.clock is not None
        self.clock.quiet()
        c = self.clients[cluster]
        for txn in c.open_transactional_ids():
            c.abort_transaction(txn)

    def wait(self, what: str, predicate: Callable[[], bool], timeout: float = 60.0) -> None:
        try:
            wait_for(what, predicate, timeout, self.clock)
        except DemoError as e:
            stalls = []
            for log_file in sorted(self.workdir.glob("*.log")):  # what CI shows of a wait that never ended
                lines = log_file.read_text(errors="replace").splitlines()
                print(f"--- the last lines of {log_file.name}", *lines[-30:], sep="\n")
                stalls += [f"{log_file.stem}: {line}" for line in lines if any(s in line for s in _RECOVERY_STALLS)][-1:]
            if stalls:  # a worker recovers from it by itself (or not): named in the failure, never passed
                raise DemoError(f"{e}; a table recovery had stalled, the last: {stalls[-1]}") from None
            raise

    # ------------------------------------------------------------------- verification

    def read_only(self, cluster: str) -> dict[str, bool]:
        names = {v: k for k, v in self.ids.items()}
        return {names[t.topic_id]: t.read_only for t in self.clients[cluster].describe_topics(list(self.ids.values()))}

    def history(self, cluster: str, timeout: float = 10.0) -> dict[tuple[str, uuid.UUID, int], list[Any]]:
        """Every ``MirrorPartitionState`` write in the cluster's ``__mirror_state`` changelog, in order."""
        return asyncio.run(read_history(self.bootstrap, self.config(cluster).mirror_state_topic_name, timeout))

    def latest(self, cluster: str, mirror: str) -> dict[TopicPartition, MirrorState]:
        out = {}
        for (name, tid, p), states in self.history(cluster).items():
            if name == mirror and states:
                out[TopicPartition(tid, p)] = states[-1].state
        return out

    def two_workers_mirroring(self, cluster: str, mirror: str, src: str) -> None:
        """``mirror`` of ``src`` on ``cluster``, started, with records, every partition MIRRORING
        and workers ``<cluster>1`` and ``<cluster>2`` each holding table partitions."""
        self.create_mirror(cluster, mirror, src)
        self.spawn_worker(cluster, f"{cluster}1", self.data_dir(cluster, "1"))
        self.spawn_worker(cluster, f"{cluster}2", self.data_dir(cluster, "2"))
        self.start_topics(cluster, mirror)
        self.produce(src, 1.0, seed=1)
        self.wait("MIRRORING", lambda: self.all_in(cluster, mirror, MirrorState.MIRRORING), 60)
        self.wait("both workers holding table partitions",
                  lambda: len(self.owners(cluster)) == 2 and all(self.owners(cluster).values()), 60)  # fmt: skip

    def all_in(self, cluster: str, mirror: str, state: MirrorState) -> bool:
        got = self.latest(cluster, mirror)
        return len(got) == len(self.tps) and all(s is state for s in got.values())

    def caught_up(self, src: str, dst: str) -> bool:
        s, d = self.clients[src], self.clients[dst]
        try:
            return all(d.list_offsets(tp).hw >= s.list_offsets(tp).lso for tp in self.tps)
        except PortError:
            return False

    def in_sync(self, src: str, dst: str) -> bool:
        s, d = self.clients[src], self.clients[dst]
        try:
            for tp in self.tps:
                ls, ld = s.list_offsets(tp), d.list_offsets(tp)
                if (ls.leo, ls.hw, ls.lso) != (ld.leo, ld.hw, ld.lso):
                    return False
        except PortError:
            return False
        return True

    def log_problems(self, src: str, dst: str, *, offsets: bool = True) -> list[str]:
        """The demo's verdict, per partition: same batches up to the source's HW, same LEO/HW/LSO
        (``offsets``; not after a stop, which ends the destination's log with its own batch), no
        transaction open on the destination, DLE >= SLE."""
        s, d = self.clients[src], self.clients[dst]
        problems = []
        for tp in self.tps:
            ls, ld = s.list_offsets(tp), d.list_offsets(tp)
            if shape(log_batches(s, tp), ls.hw) != shape(log_batches(d, tp), ls.hw):
                problems.append(f"{tp}: logs differ below {src}'s HW {ls.hw}")
            if ld.hw < ls.hw:
                problems.append(f"{tp}: {dst}'s HW {ld.hw} < {src}'s HW {ls.hw}")
            for what, a, b in (("LEO", ls.leo, ld.leo), ("HW", ls.hw, ld.hw), ("LSO", ls.lso, ld.lso)):
                if offsets and a != b:
                    problems.append(f"{tp}: {dst}'s {what} {b} != {src}'s {a}")
            if d.open_transactions(tp):
                problems.append(f"{tp}: transaction(s) open on {dst}")
            if ld.leader_epoch < ls.leader_epoch:
                problems.append(f"{tp}: DLE {ld.leader_epoch} < SLE {ls.leader_epoch}")
        return problems


def history_problems(history: dict[tuple[str, uuid.UUID, int], list[Any]]) -> list[str]:
    """Per mirror partition: state_epoch goes up by exactly 1 per write (nothing lost, nothing
    applied twice) and every state change is a legal transition (the first from UNKNOWN)."""
    problems = []
    for key, states in history.items():
        before, epoch = MirrorState.UNKNOWN, None
        for i, st in enumerate(states):
            if epoch is not None and st.state_epoch != epoch + 1:
                problems.append(f"{key}: write {i}: state_epoch {st.state_epoch} after {epoch}")
            if not is_legal_transition(before, st.state):
                problems.append(f"{key}: write {i}: illegal transition {before.name} -> {st.state.name}")
            before, epoch = st.state, st.state_epoch
    return problems


async def read_history(bootstrap: str, topic: str, timeout: float) -> dict[tuple[str, uuid.UUID, int], list[Any]]:
    """Every MirrorPartitionState write of the ``__mirror_state`` changelog, per mirror partition, in order."""
    out: dict[tuple[str, uuid.UUID, int], list[Any]] = defaultdict(list)
    try:
        records = await read_changelog(bootstrap, topic, timeout)
    except DemoError as e:
        if "not found" in str(e):
            return out
        raise
    for rtype, k, value in records:
        if rtype == RecordType.MIRROR_PARTITION_STATE and value is not None:
            out[(k.mirror_name, k.topic_id, k.partition)].append(MirrorPartitionState.from_schema_fields(value))
    return out


async def group_members(bootstrap: str, group: str) -> list[tuple[str, str, bytes]]:
    """The group's members (DescribeGroups): member id, client id, assignment."""
    from aiokafka.admin import AIOKafkaAdminClient

    from aiokafka.errors import GroupCoordinatorNotAvailableError

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="kip1279-test-describe")
    await admin.start()
    try:
        for _ in range(100):  # Apache Kafka: no coordinator until __consumer_offsets is created
            try:
                node = await admin.find_coordinator(group)
                break
            except GroupCoordinatorNotAvailableError:
                await asyncio.sleep(0.1)
        else:
            node = await admin.find_coordinator(group)
        (resp,) = await admin.describe_consumer_groups([group], group_coordinator_id=node)
        # DescribeGroups v0-v3 members: member id, client id, host, metadata, assignment
        return [(m[0], m[1], m[4]) for g in resp.groups for m in g[5]]
    finally:
        await admin.close()
