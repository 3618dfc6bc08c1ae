"""What both main jobs share: the demo's constants, its processes and the model clock, CLI runs, waits,
and the reads of both clusters' logs that the verdicts are computed from."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from clustermodel.client import ClusterClient
from clustermodel.workload import Workload
from coordinator.ports import ControlType, IsolationLevel, TopicPartition
from streams.admin import cli


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
    """Every committed record of ``topic`` (a ``__mirror_state`` changelog) up to its LSO, decoded:
    (record type, key, value or None), partition by partition, in offset order."""
    from aiokafka import AIOKafkaConsumer, TopicPartition as KTP

    from streams.state.mirror_state_codec import decode_changelog_record

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
                                client_id="kip1279-demo-audit", isolation_level="read_committed")  # fmt: skip
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
