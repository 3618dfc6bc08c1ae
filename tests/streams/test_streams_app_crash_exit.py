"""A worker whose Faust app crashes exits (``WorkerExit.watch_crash``): a real
``kip1279-worker`` process on the session's noida-db broker, crashed by a real fault."""

from __future__ import annotations

import asyncio
import inspect
import subprocess
import sys
import time
import uuid
from pathlib import Path

from worker_harness import group_members

from streams.brokers.noida import LocalBroker, free_port
from streams.config import WorkerConfig
from streams.state.mirror_state import make_app, make_mirror_state_table
from streams.worker.exits import EXIT_CRASHED
from streams.worker.worker_role import _stop_self

ROOT = Path(__file__).resolve().parents[2]


async def _members(bootstrap: str, group: str) -> list[str]:
    return [member for member, _, _ in await group_members(bootstrap, group)]


def test_a_worker_whose_table_store_is_corrupt_exits_with_exit_crashed(broker: LocalBroker, tmp_path: Path) -> None:
    """The fault: every table partition's RocksDB is corrupt (a CURRENT file without its newline).
    Faust opens a store on partition assignment, RocksDB refuses, and the app crashes: the worker
    says why once and exits with ``EXIT_CRASHED``. (It cannot leave its group: Faust's stop of the
    crashed consumer has reset its member id; its restart takes the static member over.)"""
    cfg = WorkerConfig(bootstrap_servers=broker.bootstrap, cluster_name=f"crash{uuid.uuid4().hex[:6]}",
                       state_partitions=2, data_dir=str(tmp_path / "data"))  # fmt: skip
    store = make_mirror_state_table(make_app(cfg), cfg).data  # the worker's own paths; nothing opened
    for p in range(cfg.state_partitions):
        path = store.partition_path(p)
        path.mkdir(parents=True)
        (path / "CURRENT").write_text("MANIFEST-000001")  # no trailing newline: "Corruption"
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "streams.worker.main", "--bootstrap-server", broker.bootstrap,
                           "--cluster-name", cfg.cluster_name, "--data-dir", cfg.data_dir, "--state-partitions", "2",
                           "--heartbeat-interval-ms", "500", "--loglevel", "info",
                           "--model-port", str(free_port("127.0.0.1"))],  # no mirror: never called
                          capture_output=True, text=True, timeout=75, cwd=ROOT)  # fmt: skip
    took = time.monotonic() - started
    out = done.stdout + done.stderr
    assert done.returncode == EXIT_CRASHED, out[-4000:]
    assert took < 60, f"{took:.1f} s"
    said = [line for line in out.splitlines() if " ERROR streams.worker.app: " in line]
    assert len(said) == 1, said
    assert "Faust app crashed" in said[0] and "Corruption" in said[0], said[0]
    assert f"exiting with code {EXIT_CRASHED}" in said[0], said[0]


# The fault of a running worker: one of its tasks raises, as the metadata follower's once did, and
# the stop Faust then begins hangs in the consumer's commit, as it did then ("[^--Consumer]:
# Warning: Task timed out!" five minutes on; the commit goes through the consumer thread, which
# the crash is stopping). Both are the test's doing (no real fault is reachable once the worker
# runs); the worker, its stop and its exit are real. The stop's grace is shortened from 30 s to
# GRACE_S, which still leaves a clean stop (2-4 s here) time to reach the hung commit: the backstop
# is what is tested, not its delay (asserted separately), and waiting 30 s proved nothing more.
GRACE_S = 10
FAILING_TASK = """
import asyncio, sys
import streams.worker.main
import streams.worker.worker_role
streams.worker.worker_role._stop_self.__defaults__ = (GRACE_S, *streams.worker.worker_role._stop_self.__defaults__[1:])
from streams.worker.app import CoordinatorWorker

class Failing(CoordinatorWorker):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.app.task(self._fail)

    async def _fail(self):
        await self.caught_up.wait()
        await asyncio.sleep(2.0)  # a few ticks and membership checks: the worker is running

        async def never(*args, **kwargs):
            await asyncio.Event().wait()

        self.app.consumer.commit = never
        raise RuntimeError("boom")

streams.worker.worker_role.CoordinatorWorker = Failing
sys.exit(streams.worker.main.main(sys.argv[1:]))
""".replace("GRACE_S", str(GRACE_S))


def test_a_crashed_worker_whose_stop_hangs_leaves_its_group_and_exits(broker: LocalBroker, tmp_path: Path) -> None:
    cfg = WorkerConfig(bootstrap_servers=broker.bootstrap, cluster_name=f"crash{uuid.uuid4().hex[:6]}",
                       state_partitions=2, data_dir=str(tmp_path / "data"))  # fmt: skip
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", FAILING_TASK, "--bootstrap-server", broker.bootstrap,
                           "--cluster-name", cfg.cluster_name, "--data-dir", cfg.data_dir, "--state-partitions", "2",
                           "--heartbeat-interval-ms", "500", "--loglevel", "info",
                           "--model-port", str(free_port("127.0.0.1"))],
                          capture_output=True, text=True, timeout=75, cwd=ROOT)  # fmt: skip
    took = time.monotonic() - started
    out = done.stdout + done.stderr
    assert done.returncode == EXIT_CRASHED, out[-4000:]
    assert took < GRACE_S + 30, f"{took:.1f} s"
    said = [line for line in out.splitlines() if " ERROR streams.worker.app: " in line]
    assert len(said) == 1 and "Faust app crashed: RuntimeError('boom')" in said[0], said
    assert f"the worker's stop has not finished after {GRACE_S} s; exiting with code {EXIT_CRASHED}" in out
    assert inspect.signature(_stop_self).parameters["grace_s"].default == 30.0  # the product's grace
    assert " left group " in out  # even so, as a clean stop does: the other workers need not wait for it
    assert asyncio.run(_members(broker.bootstrap, cfg.faust_app_id)) == []
