"""The main job with ``--from-kafka``: a live migration from a real Kafka-protocol broker to model cluster B.

    python -m streams.demo --from-kafka [--workdir DIR] [--seed N] [--keep] [--no-audit]

The source is a noida-db broker (its own port and data directory, started and stopped
here like the coordinator's own broker), not a model. aiokafka producers write to it (keyed
records from an idempotent producer, transactions committed and aborted, then transactions left
open) while consumer group ``demo-orders-app`` reads it (read_committed, committing every second).
B's coordinator runs mirror ``kafka-to-b`` with ``bootstrap.servers=127.0.0.1:PORT`` (the Kafka
source port, ``streams.kafka.source``) -> lag 0 -> failover (``--stop``) -> the group resumes on B
from the offsets the last group offset sync wrote, producers on B -> a verdict.

The verdict's evidence comes from the real source over the Kafka protocol (``KafkaSourceCluster``:
Fetch for the raw batches, ListOffsets for log start, HW and LSO, Metadata for the leader
epochs; a plain aiokafka ``read_committed`` consumer for the committed records) and from B's log
through the model's API (the referee). ``verdict_problems`` is pure, so a test can tamper with
the evidence. No failback: a real noida-db lacks KIP-1279's APIs (nothing could truncate it); the
job starts a controller with the source as its destination, which must refuse to start, naming
what is missing (``streams.runner.destination_check``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

from crc32c import crc32c

from clustermodel.client import ClusterClient
from clustermodel.records import read_committed_batches
from coordinator.ports import Batch, IsolationLevel, OpenTransaction, PartitionOffsets, PortError, TopicPartition
from streams.demo import clients as dc
from streams.brokers.noida import LocalBroker
from streams.brokers.own import start_own_broker
from streams.demo.harness import GROUP, PY, TOPICS, Clock, failover_aborts, log_batches, wait_for
from streams.demo.job import Demo

MIRROR = "kafka-to-b"
_CRC_AT, _ATTRIBUTES_AT = 17, 21  # RecordBatch v2: the CRC32C field, and where what it covers starts


class PartitionEvidence(NamedTuple):
    """One partition, as the source and B show it."""

    name: str  # topic-partition
    source_batches: list[Batch]  # Fetch READ_UNCOMMITTED from the real source, log start to HW
    source_offsets: PartitionOffsets  # ListOffsets on the source (log start, HW, LSO) once it was quiet
    source_committed: list[tuple[int, bytes]]  # a read_committed aiokafka consumer on the source, up to its LSO
    source_epoch: int  # the leader epoch in the source's Metadata (SLE)
    b_at_lag0: PartitionOffsets  # B (model API) at lag 0, before the stop
    b_committed: list[tuple[int, bytes]]  # B's log read_committed (model API, records decoded), before the stop
    b_log: list[Batch]  # B's whole log after the failover and B's producers (model API)
    b_epoch: int  # B's leader epoch after the failover (DLE)


def open_transactions(batches: Sequence[Batch]) -> list[OpenTransaction]:
    """The transactions a log leaves open: transactional data with no marker after it."""
    started: dict[int, OpenTransaction] = {}
    for b in batches:
        if b.is_control:
            started.pop(b.producer_id, None)
        elif b.is_transactional and b.producer_id not in started:
            started[b.producer_id] = OpenTransaction(b.producer_id, b.producer_epoch, b.base_offset)
    return sorted(started.values(), key=lambda o: o.first_offset)


def _crc(payload: bytes) -> int:
    return int.from_bytes(payload[_CRC_AT:_ATTRIBUTES_AT], "big")


def _batch_key(b: Batch) -> tuple[Any, ...]:
    return (b.base_offset, b.last_offset, b.leader_epoch, b.producer_id, b.producer_epoch, b.base_sequence,
            b.is_transactional, b.control_type)  # fmt: skip


def verdict_problems(parts: Sequence[PartitionEvidence], client_problems: Sequence[str]) -> list[str]:
    """What is wrong with a migration, from the evidence (empty: the verdict is OK).

    Per partition: B holds the source's batches up to the source's HW byte for byte (same
    offsets, header fields and CRCs, each CRC valid over B's bytes), with nothing else below it;
    B's log start, HW and LSO at lag 0 are the source's; read_committed on B returned what it
    returned on the source; the source's LSO is where its first open transaction starts; each
    transaction open on the source reached B and the failover aborted it there exactly once;
    DLE >= SLE. At least one transaction was open at the failover (else that check proves
    nothing). Then ``client_problems`` (what the aiokafka clients saw).
    """
    problems: list[str] = []
    opened = 0
    for p in parts:
        hw = p.source_offsets.hw
        src = p.source_batches
        on_b = [b for b in p.b_log if b.base_offset < hw]
        if not src or src[-1].next_offset != hw:
            problems.append(f"{p.name}: the source's batches do not reach its HW {hw}")
        if [_batch_key(b) for b in on_b] != [_batch_key(b) for b in src]:
            problems.append(f"{p.name}: B's batches below the source's HW {hw} are not the source's "
                            "(offsets, epochs, producer fields, markers)")  # fmt: skip
        elif any(x.payload != y.payload for x, y in zip(on_b, src)):
            problems.append(f"{p.name}: B's batch bytes differ from the source's")
        if [_crc(b.payload) for b in on_b] != [_crc(b.payload) for b in src]:
            problems.append(f"{p.name}: B's CRCs are not the source's")
        bad = [b.base_offset for b in on_b if crc32c(b.payload[_ATTRIBUTES_AT:]) != _crc(b.payload)]
        if bad:
            problems.append(f"{p.name}: CRC32C mismatch in B's batches at {bad[:5]}")
        so, bo = p.source_offsets, p.b_at_lag0
        for what, s, b in (("log start", so.log_start, bo.log_start), ("HW", so.hw, bo.hw), ("LSO", so.lso, bo.lso)):
            if s != b:
                problems.append(f"{p.name}: B's {what} {b} at lag 0 != the source's {s}")
        if p.b_committed != p.source_committed:
            problems.append(f"{p.name}: read_committed differs: source {len(p.source_committed)} record(s), "
                            f"B {len(p.b_committed)}")  # fmt: skip
        opens = open_transactions(src)
        opened += len(opens)
        if so.lso != (opens[0].first_offset if opens else hw):
            problems.append(f"{p.name}: the source's LSO {so.lso} is not where its first open transaction starts "
                            f"({opens[0].first_offset if opens else hw})")  # fmt: skip
        problems.extend(f"{p.name}: {x}" for x in failover_aborts(p.b_log, opens))
        if p.b_epoch < p.source_epoch:
            problems.append(f"{p.name}: DLE {p.b_epoch} < SLE {p.source_epoch}")
    if not opened:
        problems.append("no transaction was open on the source at the failover")
    return problems + list(client_problems)


def model_read_committed(port: ClusterClient, tp: TopicPartition, upto: int) -> list[tuple[int, bytes]]:
    """(offset, value) a read_committed reader gets from B's log below ``upto``, through the
    model's API: READ_COMMITTED fetches, aborted transactions dropped, the Kafka batches B holds
    decoded by aiokafka's record reader."""
    from aiokafka.record.memory_records import MemoryRecords

    out = []
    for b in read_committed_batches(port, tp, upto):
        if b.is_control:
            continue
        batch = MemoryRecords(bytes(b.payload)).next_batch()
        out.extend((r.offset, r.value) for r in batch if r.offset < upto)
    return out


class FromKafkaDemo(Demo):
    """``Demo``'s processes, CLI, client accounting and audit, with a real broker as the source."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.source_name = "the source"
        self.source_skips_open_transactions = True  # noida-db 0.2.3, see streams.demo.clients.account
        self.source: LocalBroker | None = None
        self.referee: Any = None  # KafkaSourceCluster on the source
        self.failback_problems: list[str] = []

    @property
    def audit_roots(self) -> dict[str, Any]:
        return {"B": self.workdir / "audit" / "B"}

    def run(self) -> int:
        from streams.kafka.source import KafkaSourceCluster

        self.broker, what = start_own_broker(self.broker_kind, self.workdir / "broker")
        self.source = LocalBroker(self.workdir / "source-broker").start()
        src = self.source.bootstrap
        self.say(f"{what} (the coordinator's topics); the SOURCE: a noida-db on {src} (its own data directory)")
        _, line = self.procs.spawn("model-server", [PY, "-m", "clustermodel.server", "--port", "0", "--cluster", "B",
                                                    "--seed", str(self.seed)], ready="PORT")  # fmt: skip
        port = int(line.split()[1])
        b = ClusterClient(port, "B")
        boot_b = b.bootstrap_servers()
        self.say(f"cluster-model server with cluster B on 127.0.0.1:{port}; B's Kafka listeners {boot_b}")
        apps = self.apps = dc.ClientLoop()
        apps.run(dc.create_topics(src, TOPICS, replication_factor=1))
        parts = [(t, p) for t, n in TOPICS.items() for p in range(n)]
        self.coordinator("B", port)
        self.clock = clock = Clock(port, ("B",))
        clock.start()
        stop_s, drain_s = threading.Event(), threading.Event()
        read_s: list[dc.Consumed] = []
        producing = apps.submit(dc.produce_mix(src, "K", list(TOPICS), stop_s, self.seed))
        group_s = apps.submit(dc.consume_group(src, GROUP, list(TOPICS), len(parts), read_s, drain_s, final_commit=False))
        self.say(f"aiokafka on the source: idempotent producer (keyed records), transactional producer (committed "
                 f"and aborted), consumer group {GROUP} (read_committed, commits every second)")  # fmt: skip

        cfg = self.workdir / f"{MIRROR}.properties"
        cfg.write_text(f"bootstrap.servers={src}\nclient.id=kip1279-demo-mirror\nmetadata.refresh.interval.ms=1000\n")
        self.say(f"create mirror {MIRROR} on B (bootstrap.servers={src}) and start its topics")
        self.cli("B", "--create", "--mirror", MIRROR, "--mirror-config", str(cfg))
        self.start_topics("B", MIRROR)
        self.referee = referee = KafkaSourceCluster(src, {"client.id": "kip1279-demo-referee"})
        topics = {t.name: t for t in referee.describe_topics() if t.name in TOPICS}
        tps = {(n, p.partition): TopicPartition(t.topic_id, p.partition) for n, t in topics.items() for p in t.partitions}
        wait_for("the mirror topics on B", lambda: {t.name for t in b.describe_topics()} >= set(TOPICS), 30, clock)
        self.refused = apps.run(dc.refused_produce(boot_b, "orders"), 30)
        self.say(f"produce to B's mirror topic orders before the stop: "
                 f"{'ACCEPTED' if self.refused is None else f'refused ({self.refused})'}")  # fmt: skip
        time.sleep(3)  # mirror under live load
        stop_s.set()
        produced = self.joined(producing, "the source's producers")
        produced += apps.run(dc.leave_open(src, "K", list(TOPICS), 2, self.seed))
        drain_s.set()
        self.joined(group_s, f"group {GROUP} on the source")
        committed_s = apps.run(dc.committed_offsets(src, GROUP, parts))
        self.say(f"the source's producers stopped: {len(produced)} records, 2 transactions left open; group {GROUP} "
                 f"read {len(read_s)} records up to the source's LSO and stopped without committing the last "
                 "second's reads")  # fmt: skip

        src_offsets = {k: referee.list_offsets(tp) for k, tp in tps.items()}

        def caught_up() -> bool:
            try:
                return all(b.list_offsets(tp).hw >= src_offsets[k].hw for k, tp in tps.items())
            except PortError:
                return False

        wait_for(f"{MIRROR} to reach lag 0 (B's HW = the source's HW)", caught_up, 60, clock)
        b_lag0 = {k: b.list_offsets(tp) for k, tp in tps.items()}
        b_committed = {k: model_read_committed(b, tp, src_offsets[k].lso) for k, tp in tps.items()}
        rows = {r["topic"] + "-" + str(r["partition"]): r for r in self.describe_json()}
        self.say("lag 0: " + ", ".join(f"{n}-{p} {rows.get(f'{n}-{p}', {}).get('lag', '?')}" for n, p in sorted(tps))
                 + f"; failover: stop {MIRROR}")  # fmt: skip
        self.cli("B", "--stop", "--mirror", MIRROR, "--topics", ",".join(TOPICS), "--wait", "60")
        ids = [t.topic_id for t in topics.values()]
        wait_for("B's topics to become writable", lambda: all(not t.read_only for t in b.describe_topics(ids)), 30, clock)
        synced_b = apps.run(dc.committed_offsets(boot_b, GROUP, parts))
        stop_b, drain_b = threading.Event(), threading.Event()
        read_b: list[dc.Consumed] = []
        group_b = apps.submit(dc.consume_group(boot_b, GROUP, list(TOPICS), len(parts), read_b, drain_b, final_commit=True))
        producing_b = apps.submit(dc.produce_mix(boot_b, "B", list(TOPICS), stop_b, self.seed + 1))
        self.say(f"B is writable; group {GROUP} resumes on B from the offsets the last group offset sync wrote "
                 f"(its last commit on the source: {'yes' if synced_b == committed_s else 'NO'}); producing on B")  # fmt: skip
        time.sleep(2)
        stop_b.set()
        produced_b = self.joined(producing_b, "B's producers")
        drain_b.set()
        ends_b = self.joined(group_b, f"group {GROUP} on B")
        # noida-db's read_committed Fetch serves past the LSO, leaving out open transactions: the
        # live group on the source misses records whose transaction was open as it read by.
        self.clients = dc.account(produced + produced_b, read_s, read_b, committed_s, synced_b, ends_b,
                                  source_skips_open_transactions=self.source_skips_open_transactions)
        self.say(f"B's producers stopped: {len(produced_b)} records; group {GROUP} read {len(read_b)} records on B "
                 "and committed")  # fmt: skip
        # The referee's reads of the source, over the Kafka protocol (it has been quiet since the
        # producers stopped): raw batches, leader epochs, and a read_committed consumer's records.
        src_committed = apps.run(dc.read_committed(src, {k: o.lso for k, o in src_offsets.items()}))
        apps.close()
        epochs = {(n, p.partition): p.leader_epoch for n, t in topics.items() for p in t.partitions}
        evidence = [PartitionEvidence(
            name=f"{n}-{p}", source_batches=self.source_log(tps[(n, p)], src_offsets[(n, p)].hw),
            source_offsets=src_offsets[(n, p)], source_committed=src_committed[(n, p)], source_epoch=epochs[(n, p)],
            b_at_lag0=b_lag0[(n, p)], b_committed=b_committed[(n, p)], b_log=log_batches(b, tps[(n, p)]),
            b_epoch=b.list_offsets(tps[(n, p)]).leader_epoch) for n, p in sorted(tps)]  # fmt: skip
        self.no_failback(src, port)
        if self.audit_enabled:
            self.await_exports()
        clock.stop()
        self.say(f"describe on B ({MIRROR}):")
        self.cli("B", "--describe", "--mirror", MIRROR)
        code = self.verdict_from_kafka(evidence)
        if self.audit_enabled:
            code = max(code, self.audit())
        return code

    def describe_json(self) -> list[dict[str, Any]]:
        import json

        return json.loads(self.cli("B", "--describe", "--mirror", MIRROR, "--json", show=False))

    def source_log(self, tp: TopicPartition, hw: int) -> list[Batch]:
        out: list[Batch] = []
        offset = self.referee.list_offsets(tp).log_start
        while offset < hw:
            got = self.referee.fetch(tp, offset, 1 << 20, IsolationLevel.READ_UNCOMMITTED).batches
            if not got:
                break
            out.extend(x for x in got if x.base_offset < hw)
            offset = got[-1].next_offset
        return out

    def no_failback(self, src: str, model_port: int) -> None:
        """Failback would be a mirror into the source, run by a coordinator whose destination is
        the source: that controller is started (``destination.bootstrap.servers``) and must refuse."""
        import subprocess

        argv = [PY, "-m", "streams.worker.main", "--controller", "--listener", "127.0.0.1:0", "--bootstrap-server",
                self.broker.bootstrap, "--cluster-name", "K", "--data-dir", str(self.workdir / "data-K"),  # type: ignore[union-attr]
                "--model-port", str(model_port), "--destination-bootstrap-server", src, "--loglevel", "warning"]  # fmt: skip
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
            code, text = done.returncode, (done.stdout + done.stderr).strip()
        except subprocess.TimeoutExpired:
            code, text = None, "still running after 30 s (stopped)"
        refused = code == 2 and "is not a KIP-1279 cluster" in text
        if not refused:
            self.failback_problems.append(f"a controller with the source as its destination did not refuse to start "
                                          f"(exit {code}): {text[-300:]}")  # fmt: skip
        self.say(f"no failback in this mode (the source is a real noida-db without KIP-1279): a controller for the "
                 f"source as a destination (--destination-bootstrap-server {src}) exited with code {code}: {text}")  # fmt: skip

    def verdict_from_kafka(self, evidence: Sequence[PartitionEvidence]) -> int:
        self.out.write("\n    PARTITION   SRC-HW  SRC-LSO  B-HW@LAG0  B-LSO@LAG0  B-LEO  BATCHES  SAME-BYTES  "
                       "COMMITTED(SRC/B)  OPEN@STOP  SLE  DLE\n")  # fmt: skip
        for p in evidence:
            on_b = [x for x in p.b_log if x.base_offset < p.source_offsets.hw]
            same = len(on_b) == len(p.source_batches) and all(x.payload == y.payload for x, y in zip(on_b, p.source_batches))
            self.out.write(f"    {p.name:<11} {p.source_offsets.hw:>6}  {p.source_offsets.lso:>7}  {p.b_at_lag0.hw:>9}  "
                           f"{p.b_at_lag0.lso:>10}  {p.b_log[-1].next_offset if p.b_log else 0:>5}  "
                           f"{len(p.source_batches):>7}  {'yes' if same else 'NO':>10}  "
                           f"{len(p.source_committed):>7}/{len(p.b_committed):<8}  "
                           f"{len(open_transactions(p.source_batches)):>9}  {p.source_epoch:>3}  {p.b_epoch:>3}\n")  # fmt: skip
        problems = verdict_problems(evidence, [*self.client_check(), *self.failback_problems])
        if problems:
            self.out.write("\nVERDICT: FAILED\n" + "".join(f"  - {p}\n" for p in problems))
            return 1
        opened = sum(len(open_transactions(p.source_batches)) for p in evidence)
        self.out.write(f"\nVERDICT: OK - {len(evidence)} partitions migrated from a real noida-db broker: B holds the "
                       "batches the source serves over Fetch byte for byte up to its HW (offsets, producer fields, "
                       "markers, CRCs); B's log start, HW and LSO at lag 0 equal the source's ListOffsets; "
                       "read_committed on B returns what an aiokafka read_committed consumer read on the source; "
                       f"the {opened} partition(s) of transactions open on the source at the failover were aborted on B exactly "
                       "once; DLE >= SLE; the clients missed no committed record across the switch (none from the "
                       "group's last commit on the source on), read none twice beyond the last sync, and had a "
                       "produce refused on the mirror topic before the stop. No failback: the source has no "
                       "KIP-1279 APIs\n")  # fmt: skip
        return 0

    def close(self) -> None:
        if self.referee is not None:
            self.referee.close()
            self.referee = None
        super().close()
        if self.source is not None:
            self.source.stop()
            self.source = None

