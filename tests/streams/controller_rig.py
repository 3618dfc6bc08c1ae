"""Controller processes for the kill -9 scenarios (issue #36), and ``bench/controller_failover.py``.

Several ``kip1279-controller`` processes serve one destination cluster (each its own id, listener
and data directory). The rig seeds the metadata log before any of them starts (a mirror with two
started topics, their partitions MIRRORING on ``__mirror_state``, as workers would have them),
SIGKILLs one, restarts it with the same arguments, and times what an operator sees: how long
writes are refused (a probe that changes nothing: AlterClusterMirrorConfigs with validate_only,
which a standby refuses with NOT_CONTROLLER), and how long a restarted one takes to answer.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer

from coordinator.states import MirrorState
from records.framing import ApiMessageAndVersion
from records.registry import default_schemas
from streams.admin.client import ClusterMirrorAdmin
from streams.brokers.noida import free_port
from streams.config import WorkerConfig, ensure_topics, metadata_topic_spec
from streams.demo.harness import _die_with_parent
from streams.state import mirror_state_codec as mss
from streams.state.metadata_log import MetadataLogReader, MetadataLogWriter

S = default_schemas()
ADMIN = "User:admin"
MIRROR = "a-to-b"
TOPICS = {f"t{i}": uuid.UUID(int=500 + i) for i in range(3)}
NOT_CONTROLLER = 41


def amv(name: str, /, **fields: object) -> ApiMessageAndVersion:
    return ApiMessageAndVersion(S.struct(name)(**fields), 0, S.spec(name).api_key)  # type: ignore[arg-type]


@dataclass
class Member:
    name: str
    port: int
    argv: list[str]
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    serving_cpu_s: float = 0.0  # the process's CPU (user + system) when it first answered --describe

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"


@dataclass
class ControllerRig:
    cfg: WorkerConfig
    workdir: Path
    members: list[Member] = field(default_factory=list)

    @classmethod
    def create(cls, bootstrap: str, workdir: Path, n: int = 3, partitions: int = 8, replication: int = 1,
               min_insync: int = 0) -> ControllerRig:  # fmt: skip
        name = f"ha{uuid.uuid4().hex[:6]}"
        cfg = WorkerConfig(bootstrap_servers=bootstrap, cluster_name=name, state_partitions=4, data_dir=str(workdir),
                           replication_factor=replication, min_insync_replicas=min_insync)  # fmt: skip
        rig = cls(cfg, workdir)
        for i in range(1, n + 1):
            props = workdir / f"c{i}.properties"
            props.write_text(f"cluster.name={name}\nmirror.state.topic.num.partitions=4\ndata.dir={workdir / f'c{i}'}\n"
                             f"controller.id=c{i}\nmirror.state.topic.replication.factor={replication}\n"
                             f"mirror.state.topic.min.insync.replicas={min_insync}\n")  # fmt: skip
            port = free_port()
            argv = [sys.executable, "-c", "from streams.admin.cli import controller_main; import sys; sys.exit(controller_main())",
                    "--config", str(props), "--bootstrap-server", bootstrap, "--listener", f"127.0.0.1:{port}",
                    "--super-users", ADMIN]  # fmt: skip
            rig.members.append(Member(f"c{i}", port, argv))
        rig.partitions = partitions  # type: ignore[attr-defined]
        return rig

    @property
    def bootstrap(self) -> str:
        return ",".join(m.endpoint for m in self.members)

    async def seed(self) -> None:
        """The mirror and its started topics in the log, every partition MIRRORING."""
        c = self.cfg
        await ensure_topics(c.bootstrap_servers, [metadata_topic_spec(c.metadata_topic_name, c.replication_factor),
                                                  mss.mirror_state_topic_spec(c)], min_insync_replicas=c.min_insync_replicas)  # fmt: skip
        n = getattr(self, "partitions", 8)
        records = [amv("ConfigRecord", resource_type=64, resource_name=MIRROR, name="bootstrap.servers", value="127.0.0.1:1")]
        for topic, tid in TOPICS.items():
            records.append(amv("TopicRecord", name=topic, topic_id=tid))
            records += [amv("PartitionRecord", partition_id=p, topic_id=tid, replicas=(1,), isr=(1,), leader=1) for p in range(n)]
            records.append(amv("MirrorTopicStateChangeRecord", topic_id=tid, mirror_name=MIRROR, desired_state=0))
        async with MetadataLogWriter(c.bootstrap_servers, c.metadata_topic_name) as writer:
            await writer.append(records)
        codec = mss.default_codec()
        producer = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers)
        await producer.start()
        try:
            for tid in TOPICS.values():
                for p in range(n):
                    key = codec.state_key(MIRROR, tid, p)
                    value = codec.encode_value(codec.state_value(state=int(MirrorState.MIRRORING), retry_attempt=0, error_message=None))
                    await producer.send(c.mirror_state_topic_name, key=key, value=value,
                                        partition=mss.partition_for_key(key, c.state_partitions))  # fmt: skip
            await producer.flush()
        finally:
            await producer.stop()

    def spawn(self, m: Member) -> None:
        log = open(self.workdir / f"{m.name}.log", "ab")  # noqa: SIM115 - the child holds it
        env = dict(os.environ, KIP1279_PRINCIPAL=ADMIN)
        m.started_at = time.monotonic()
        m.proc = subprocess.Popen(m.argv, stdout=log, stderr=log, preexec_fn=_die_with_parent, env=env)

    def kill(self, m: Member) -> float:
        assert m.proc is not None
        m.proc.send_signal(signal.SIGKILL)
        m.proc.wait(10)
        return time.monotonic()

    def close(self) -> None:
        for m in self.members:
            if m.proc is not None and m.proc.poll() is None:
                m.proc.terminate()
                try:
                    m.proc.wait(5)
                except subprocess.TimeoutExpired:
                    m.proc.kill()
                    m.proc.wait(5)

    # -- what an operator sees ---------------------------------------------------------------------

    async def answers_reads(self, m: Member, timeout: float = 30.0) -> float:
        """Seconds from ``m``'s (re)start until it answers --describe."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                async with ClusterMirrorAdmin(m.endpoint, principal=ADMIN, retry_timeout=0, timeout=2) as a:
                    if (await a.describe([MIRROR], offsets=False)).response.error_code == 0:  # type: ignore[attr-defined]
                        took = time.monotonic() - m.started_at
                        m.serving_cpu_s = cpu_seconds(m)
                        return took
            except Exception:  # noqa: BLE001 - not up yet
                pass
            await asyncio.sleep(0.05)
        raise TimeoutError(f"{m.name} did not answer --describe within {timeout} s; see {self.workdir / (m.name + '.log')}")

    async def accepts_writes(self, m: Member, timeout: float = 60.0) -> float:
        """Seconds from ``m``'s (re)start until it accepts a write (it is the active one)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                code, _ = await self.write_probe(m)
                if code != NOT_CONTROLLER:
                    return time.monotonic() - m.started_at
            except Exception:  # noqa: BLE001 - not up yet
                pass
            await asyncio.sleep(0.05)
        raise TimeoutError(f"{m.name} accepted no write within {timeout} s; see {self.workdir / (m.name + '.log')}")

    def start_seconds(self, m: Member) -> float:
        """What its last start took once Python was up (its log's "started as ... in X s")."""
        text = (self.workdir / f"{m.name}.log").read_text(errors="replace")
        found = re.findall(r"controller \S+ started as .*? in ([0-9.]+) s", text)
        assert found, f"{m.name} logged no start"
        return float(found[-1])

    async def write_probe(self, m: Member) -> tuple[int, str | None]:
        """(error code, active endpoint) of a write that changes nothing, sent to ``m`` alone."""
        async with ClusterMirrorAdmin(m.endpoint, principal=ADMIN, retry_timeout=0, timeout=2) as a:
            body = a._req("AlterClusterMirrorConfigs", mirror_name=MIRROR, configs=[], validate_only=True)
            reply = await a._call_once("AlterClusterMirrorConfigs", body, 0, None)
            return reply.response.error_code, reply.active_controller  # type: ignore[attr-defined]

    async def active(self, timeout: float = 30.0, exclude: Member | None = None) -> Member:
        """The member that accepts writes (polled until one does)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for m in self.members:
                if m is exclude or m.proc is None or m.proc.poll() is not None:
                    continue
                try:
                    code, _ = await self.write_probe(m)
                except Exception:  # noqa: BLE001 - down or not listening yet
                    continue
                if code != NOT_CONTROLLER:
                    return m
            await asyncio.sleep(0.02)
        raise TimeoutError("no controller accepts writes")

    async def log_messages(self) -> list[Any]:
        c = self.cfg
        async with MetadataLogReader(c.bootstrap_servers, c.metadata_topic_name, dlq=None) as reader:
            return [e.record.message async for e in reader.read(0, follow=False)]  # type: ignore[union-attr]


def cpu_seconds(m: Member) -> float:
    """User + system CPU seconds of ``m``'s running process so far (Linux: /proc/PID/stat)."""
    assert m.proc is not None
    fields = Path(f"/proc/{m.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


_OPEN_TRANSACTION = r"""
import asyncio, sys
from aiokafka import AIOKafkaProducer
async def main():
    p = AIOKafkaProducer(bootstrap_servers=sys.argv[1], transactional_id=sys.argv[2], enable_idempotence=True, acks="all")
    await p.start()
    await p.begin_transaction()
    await (await p.send(sys.argv[3], bytes.fromhex(sys.argv[4]), partition=0))
    print("open", flush=True)
    await asyncio.sleep(600)
asyncio.run(main())
"""


def die_inside_a_transaction(cfg: WorkerConfig) -> None:
    """The log's writer dies (kill -9) inside a transaction, as a controller killed mid-append."""
    from records.framing import MetadataRecordSerde

    value = MetadataRecordSerde(S).encode(S.struct("NoOpRecord")(), 0)
    die_inside_a_transaction_on(cfg.bootstrap_servers, f"kip1279-controller-{cfg.metadata_topic_name}",
                                cfg.metadata_topic_name, value)  # fmt: skip


def die_inside_a_transaction_on(bootstrap: str, transactional_id: str, topic: str, value: bytes) -> None:
    """A producer of ``transactional_id`` appends ``value`` to ``topic``'s partition 0 inside a
    transaction and is SIGKILLed there."""
    child = subprocess.Popen([sys.executable, "-c", _OPEN_TRANSACTION, bootstrap, transactional_id, topic, value.hex()],
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "open"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)


async def partition_leader(bootstrap: str, topic: str) -> int:
    """The broker id leading ``topic``'s partition 0."""
    from aiokafka import TopicPartition
    from aiokafka.client import AIOKafkaClient

    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    try:
        client.add_topic(topic)
        await client.force_metadata_update()
        leader = client.cluster.leader_for_partition(TopicPartition(topic, 0))
        assert leader is not None and leader >= 0, leader
        return int(leader)
    finally:
        await client.close()
