"""kill -9 of the active controller among three ``kip1279-controller`` processes (issue #36), at
seeded points: while a ``--stop`` is in flight, and idle. After each: the ``--stop`` exits 0 and
was applied once, a standby took over within its session timeout, the killed one, restarted,
answers again, and the log's terms only go up. KIP1279_SEED picks the kill's delay."""

from __future__ import annotations

import asyncio
import io
import os
import random
import time
from pathlib import Path
from typing import Any

import pytest

from streams.admin import cli
from controller_rig import ADMIN, TOPICS, ControllerRig

pytestmark = pytest.mark.brokers("noida-db", "apache-kafka")

SESSION_S = 2.0  # controller.session.timeout.ms's default
# A restarted controller serves within 5 s of its start once Python is up. The wall time from
# spawn (Python's start-up included: ~1.4 CPU-s of imports) is reported, not bounded: on a
# shared machine it is the scheduler's figure.
START_BOUND_S = 5.0
SCENARIOS_ENV = "KIP1279_KAFKA_SCENARIOS"  # tests/streams/conftest.py: 0 leaves slow Kafka scenarios out


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    os.environ["KIP1279_PRINCIPAL"] = ADMIN
    try:
        return cli.main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()
    finally:
        os.environ.pop("KIP1279_PRINCIPAL", None)


async def test_kill_9_of_the_active_controller_at_seeded_points(kafka_broker: object, tmp_path: Path) -> None:
    seed = int(os.environ.get("KIP1279_SEED", "36"))
    rng = random.Random(seed)
    rig = ControllerRig.create(kafka_broker.bootstrap, tmp_path)  # type: ignore[attr-defined]
    figures: list[str] = []
    try:
        await rig.seed()
        for m in rig.members:
            rig.spawn(m)
        cold = [await rig.answers_reads(m) for m in rig.members]
        figures.append("cold start to serving: " + ", ".join(f"{s:.2f}" for s in cold))
        active = await rig.active()

        # 1. The active one dies while a --stop is in flight.
        stop = asyncio.create_task(asyncio.to_thread(run_cli, "--bootstrap-server", rig.bootstrap, "--stop",
                                                     "--mirror", "a-to-b", "--topics", "t0"))  # fmt: skip
        await asyncio.sleep(rng.uniform(0.0, 0.08))
        killed_at = rig.kill(active)
        successor = await rig.active(exclude=active)
        takeover = time.monotonic() - killed_at
        code, out, err = await stop
        assert code == 0, (out, err)
        assert "t0" in out and "Error" not in out, out
        rig.spawn(active)
        restart = await rig.answers_reads(active)
        started = rig.start_seconds(active)
        figures.append(f"stop in flight (seed {seed}): writes refused {takeover:.2f} s, restart to serving "
                       f"{restart:.2f} s (its start {started:.2f} s)")  # fmt: skip
        assert takeover <= SESSION_S + 1.5, figures
        assert started <= START_BOUND_S, figures

        # 2. The new active one dies idle; the next --stop goes to whoever took over.
        killed_at = rig.kill(successor)
        third = await rig.active(exclude=successor)
        takeover = time.monotonic() - killed_at
        rig.spawn(successor)
        code, out, err = await asyncio.to_thread(run_cli, "--bootstrap-server", rig.bootstrap, "--stop",
                                                 "--mirror", "a-to-b", "--topics", "t1")  # fmt: skip
        assert code == 0, (out, err)
        restart = await rig.answers_reads(successor)
        started = rig.start_seconds(successor)
        figures.append(f"idle: writes refused {takeover:.2f} s, restart to serving {restart:.2f} s (its start {started:.2f} s)")
        assert takeover <= SESSION_S + 1.5, figures
        assert started <= START_BOUND_S, figures
        assert third is not successor

        # The state history: one stop per topic asked, terms that only go up.
        messages = await rig.log_messages()
        stops = [m.topic_id for m in messages if type(m).__name__ == "MirrorTopicStateChangeRecord" and m.desired_state == 1]
        assert sorted(stops) == sorted([TOPICS["t0"], TOPICS["t1"]]), stops
        epochs = [m.epoch for m in messages if type(m).__name__ == "ClusterMirrorControllerRecord"]
        assert len(epochs) >= 3 and epochs == sorted(set(epochs)), epochs
        print("\n" + "\n".join(figures))
    finally:
        rig.close()


@pytest.mark.slow
async def test_kill_9_of_the_kafka_node_leading_the_metadata_log_at_rf_3(apache_kafka_3: object, tmp_path: Path) -> None:
    """The coordinator's own topics at replication factor 3 and min.insync.replicas 2, on three
    brokers: the one leading the metadata log dies while a --stop is in flight. The stop exits 0
    and applies once, and writes are accepted again once Kafka has elected a new leader."""
    from controller_rig import partition_leader

    if os.environ.get(SCENARIOS_ENV) == "0":
        pytest.skip(f"slow scenario on Apache Kafka left out by {SCENARIOS_ENV}=0")
    seed = int(os.environ.get("KIP1279_SEED", "36"))
    rng = random.Random(seed)
    cluster: Any = apache_kafka_3
    rig = ControllerRig.create(cluster.bootstrap, tmp_path, replication=3, min_insync=2)
    killed: int | None = None
    try:
        await rig.seed()
        for m in rig.members:
            rig.spawn(m)
        for m in rig.members:
            await rig.answers_reads(m, timeout=60)
        await rig.active()
        killed = await partition_leader(cluster.bootstrap, rig.cfg.metadata_topic_name)
        stop = asyncio.create_task(asyncio.to_thread(run_cli, "--bootstrap-server", rig.bootstrap, "--retry-timeout", "60",
                                                     "--stop", "--mirror", "a-to-b", "--topics", "t0"))  # fmt: skip
        await asyncio.sleep(rng.uniform(0.0, 0.08))
        killed_at = time.monotonic()
        cluster.stop_node(killed, kill=True)
        code, out, err = await stop
        stopped_after = time.monotonic() - killed_at
        assert code == 0, (out, err)
        await rig.active()
        writable_after = time.monotonic() - killed_at
        messages = await rig.log_messages()
        stops = [m.topic_id for m in messages if type(m).__name__ == "MirrorTopicStateChangeRecord" and m.desired_state == 1]
        assert stops == [TOPICS["t0"]], stops
        epochs = [m.epoch for m in messages if type(m).__name__ == "ClusterMirrorControllerRecord"]
        assert epochs == sorted(set(epochs)), epochs
        print(f"\nKafka node {killed} (the metadata log's leader) killed (seed {seed}): the --stop answered "
              f"{stopped_after:.2f} s later, writes accepted {writable_after:.2f} s later; terms {epochs}")
        assert writable_after <= 30, writable_after
    finally:
        rig.close()
        if killed is not None:
            cluster.start_node(killed)
