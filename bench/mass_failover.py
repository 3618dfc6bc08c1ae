"""Mass failover bench: N topics x P partitions mirrored A -> B on one worker, all stopped at once.

    python -m bench.mass_failover [--topics 1000] [--partitions 50] [--setup-timeout S] [--failover-timeout S]

Starts what ``streams.demo.job`` starts (the broker of the coordinator's own topics: Apache Kafka, or
noida-db with ``--broker noida``; cluster-model server with A and B, the
controller and the worker of B; ``--workers 2``: two workers of B sharing its table partitions), creates ``--topics`` x ``--partitions`` topics on A (a few
records in some partitions; the rest idle, the "link flap" case), creates mirror ``a-to-b`` on
B, starts every topic, waits until every partition is MIRRORING and the processes are idle
(``--no-settle``: not idle) -- none of that is timed.
Then ONE CLI call (``kafka-cluster-mirrors --stop --mirror a-to-b --topics '.*' --wait S``)
stops them all; the clock runs from that call until every partition is STOPPED. Progress
(partitions STOPPED out of total) is printed while waiting.

The LAST line is one JSON object: ``mass_failover_50k_seconds`` (the failover time, whatever the
scale; ``null`` if it did not finish), ``mass_failover_200k_seconds`` (the same, only for a run
of 200,000 partitions or more: ``--topics 4000 --partitions 50``), ``transitions_per_s``
(partitions STOPPED per second), ``worker_peak_rss_mb`` (VmHWM of the worker over the whole
run; with several workers, the highest), ``workers``, ``worker_cpu_seconds`` (all workers' CPU
during the failover), ``per_worker`` (each worker's CPU-seconds and peak RSS, setup and failover),
``load_average_1m`` (before and after the failover), ``cpu_seconds_per_1k_partitions`` (every
process's CPU during the failover per 1,000 partitions) with ``speed_index`` (this machine's,
``bench.speed_index``: quote them together), ``writable_seconds`` (until every topic on B
is writable, the topic level's last act; after the CPU figures), plus the scale, the setup time (``setup_seconds``), the peak RSS during the failover
alone, every process's peak RSS (``peak_rss_mb``: worker, controller, model server, broker),
the CPU-seconds each process spent during the failover (``failover_cpu_seconds``), and on a
timeout ``timed_out``, ``reason`` and the partial progress. Every wait is bounded, so the bench
always ends.

The start is measured too (not timed with the failover): ``start_seconds``, ``start_cpu_seconds``
(each process, from the first start request until every partition is MIRRORING),
``start_cpu_seconds_per_1k_partitions``, ``start_failed_peak`` (the most partitions FAILED seen
at once while they start: a start must show none) and ``start_describe_max_seconds`` (the slowest
describe meanwhile). ``--start-only`` ends the run there.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.speed_index import per_1k_partitions, speed_index
from clustermodel.client import ClusterClient
from coordinator.states import MirrorState
from streams.admin.client import ClusterMirrorAdmin
from streams.brokers.own import CHOICES, FLAG_HELP, start_own_broker
from streams.demo.harness import ADMIN, PY, Clock, DemoError, run_cli
from streams.demo.job import Demo

MIRROR = "a-to-b"
PREFIX = "bench-"
IDLE_CORES = 0.15  # the coordinator's processes together, over a second: idle (settle)
_PROGRESS = re.compile(r"^(\d+)/(\d+) partitions (\w+)")


def _status_kb(pid: int, field: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _mb(kb: int | None) -> float | None:
    return None if kb is None else round(kb / 1024, 1)


def _cpu_s(pid: int) -> float | None:
    """utime + stime of ``pid`` in seconds (/proc/PID/stat)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _reset_peak(pid: int) -> bool:
    """Resets VmHWM to the current RSS (Linux: ``echo 5 > /proc/PID/clear_refs``)."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


async def _states(endpoint: str) -> dict[str, int]:
    """Mirror partition states of ``a-to-b`` by name, from one describe."""
    async with ClusterMirrorAdmin(endpoint, principal=ADMIN, client_id="mass-failover-bench") as admin:
        # Counts per state, no offsets: polling must not slow the setup it waits for.
        reply = await admin.describe([MIRROR], offsets=False, counts_only=True)
    counts: dict[str, int] = {}
    for m in reply.response.mirrors:  # type: ignore[attr-defined]
        for t in m.topics:
            for state, n in [(c.state, c.count) for c in t.state_counts] or [(p.state, 1) for p in t.partitions]:
                name = MirrorState(state).name if state in MirrorState._value2member_map_ else str(state)
                counts[name] = counts.get(name, 0) + n
    return counts


async def _start(endpoint: str, names: list[str]) -> list[str]:
    """Starts ``names``; returns those refused (not registered from the source yet, ...)."""
    async with ClusterMirrorAdmin(endpoint, principal=ADMIN, client_id="mass-failover-bench") as admin:
        reply = await admin.start(MIRROR, names)
    r: Any = reply.response
    if r.error_code:
        return list(names)
    accepted = {t.name for t in r.topics if not t.error_code}
    return [n for n in names if n not in accepted]


class Bench:
    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args = args
        self.workdir = workdir
        self.demo = Demo(workdir, args.seed)
        self.t0 = time.monotonic()
        self._setup_peaks: dict[str, int | None] = {}
        self.port = 0  # the cluster-model server's
        self.result: dict[str, Any] = {"topics": args.topics, "partitions_per_topic": args.partitions,
                                       "total_partitions": args.topics * args.partitions,
                                       "state_partitions": args.state_partitions, "no_offsets": args.no_offsets,
                                       "metadata_refresh_ms": args.metadata_refresh_ms}  # fmt: skip

    def say(self, text: str) -> None:
        sys.stdout.write(f"[{time.monotonic() - self.t0:6.1f}s] {text}\n")
        sys.stdout.flush()

    def pid(self, name: str) -> int:
        return next(p.pid for n, p in self.demo.procs.procs if n == name)

    def states(self, timeout: float = 60.0) -> dict[str, int]:
        return asyncio.run(asyncio.wait_for(_states(self.demo.endpoints["B"]), timeout))

    # ------------------------------------------------------------------ setup (not timed)

    def setup(self) -> None:
        a_ = self.args
        total = a_.topics * a_.partitions
        deadline = time.monotonic() + a_.setup_timeout
        self.result["stage"] = "setup"
        d = self.demo
        d.broker, what = start_own_broker(a_.broker, self.workdir / "broker")
        self.result["broker"] = "noida" if hasattr(d.broker, "_proc") else "kafka"
        self.say(what)
        _, line = d.procs.spawn("model-server", [PY, "-m", "clustermodel.server", "--port", "0", "--cluster", "A",
                                                 "--cluster", "B", "--seed", str(a_.seed)], ready="PORT")  # fmt: skip
        port = int(line.split()[1])
        self.say(f"cluster-model server (A, B) on 127.0.0.1:{port}")
        a = ClusterClient(port, "A", timeout=120)
        names = [f"{PREFIX}{i:05d}" for i in range(a_.topics)]
        t = time.monotonic()
        for i in range(0, len(names), 100):
            for r in a.pipeline([("add_topic", (n, a_.partitions)) for n in names[i : i + 100]]):
                if isinstance(r, BaseException):
                    raise DemoError(f"add_topic failed: {r!r}")
        # A few records in some partitions: partitions 0..2 of every 10th topic.
        calls = [("produce", (n, p, [(f"k{j}".encode(), f"v{j}-{n}-{p}".encode()) for j in range(1 + p)]))
                 for n in names[:: 10] for p in range(min(3, a_.partitions))]  # fmt: skip
        for r in a.pipeline(calls):
            if isinstance(r, BaseException):
                raise DemoError(f"produce failed: {r!r}")
        a.close()
        self.result["records_partitions"] = len(calls)
        self.say(f"{a_.topics} topics x {a_.partitions} partitions on A ({total} partitions, "
                 f"{len(calls)} of them with records) in {time.monotonic() - t:.1f}s")  # fmt: skip
        d.clock = Clock(port)
        d.clock.start()
        self.port = port
        self.coordinator(port)
        cfg = self.workdir / f"{MIRROR}.properties"
        cfg.write_text(f"bootstrap.servers=model://A\nmetadata.refresh.interval.ms={self.args.metadata_refresh_ms}\n")
        code, text = run_cli(d.endpoints["B"], "--create", "--mirror", MIRROR, "--mirror-config", str(cfg))
        if code != 0:
            raise DemoError(f"create mirror failed: {text.strip()}")
        self.say(f"mirror {MIRROR} created on B; starting {a_.topics} topics")
        # The start's cost, as the failover's: every process's CPU from the first start request
        # until every partition is MIRRORING (``start_cpu_seconds``, per 1,000 partitions).
        procs = {n: p.pid for n, p in d.procs.procs}
        cpu0 = {n: _cpu_s(pid) for n, pid in procs.items()}
        cpu0["broker"] = self._broker_cpu()
        t_start = time.monotonic()
        todo = names
        while todo:
            if time.monotonic() > deadline:
                raise TimeoutError(f"setup: {len(todo)} topic(s) still not started after {a_.setup_timeout:.0f}s")
            todo = asyncio.run(asyncio.wait_for(_start(d.endpoints["B"], todo), 120))
            if todo:
                time.sleep(1.0)
        self.say(f"all {a_.topics} topics started; waiting until {total} partitions are MIRRORING")
        last, shown = "", 0.0
        failed_peak, describe_max = 0, 0.0
        while True:
            self._check_alive()
            t = time.monotonic()
            try:
                counts = self.states(timeout=max(5.0, min(120.0, deadline - t)))
            except TimeoutError:  # a describe of many partitions can be slow; the deadline still bounds setup
                counts = {}
            took = time.monotonic() - t
            describe_max = max(describe_max, took)
            failed_peak = max(failed_peak, counts.get("FAILED", 0))
            done = counts.get("MIRRORING", 0)
            self.result["setup_progress"] = {"mirroring": done, "states": counts,
                                             "elapsed_s": round(time.monotonic() - self.t0, 1)}  # fmt: skip
            line = f"setup: {done}/{total} partitions MIRRORING ({_fmt(counts)})"
            if line != last or time.monotonic() - shown > 15:
                self.say(f"{line}; describe took {took:.1f}s")
                last, shown = line, time.monotonic()
            if done == total:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"setup did not finish within {a_.setup_timeout:.0f}s: {line}")
            time.sleep(1.0)
        cpu1 = {n: _cpu_s(pid) for n, pid in procs.items()}
        cpu1["broker"] = self._broker_cpu()
        self.result["start_seconds"] = round(time.monotonic() - t_start, 1)
        self.result["start_cpu_seconds"] = {n.replace("-", "_"): round(cpu1[n] - c, 1) for n, c in cpu0.items()
                                            if c is not None and cpu1.get(n) is not None}  # fmt: skip
        self.result["start_cpu_seconds_per_1k_partitions"] = per_1k_partitions(self.result["start_cpu_seconds"], total)
        # FAILED is for what an operator must act on: a start must show none (issue #38).
        self.result["start_failed_peak"] = failed_peak
        self.result["start_describe_max_seconds"] = round(describe_max, 2)
        self.say(f"start: {self.result['start_seconds']}s, CPU-s {self.result['start_cpu_seconds']}, "
                 f"peak FAILED {failed_peak}, slowest describe {describe_max:.2f}s")  # fmt: skip
        self.result["setup_seconds"] = round(time.monotonic() - self.t0, 1)
        rss = [_status_kb(self.pid(n), "VmRSS") for n in self.workers()]
        hwm = [_status_kb(self.pid(n), "VmHWM") for n in self.workers()]
        self.result["worker_rss_before_failover_mb"] = _mb(max((x for x in rss if x is not None), default=None))
        self.result["worker_peak_rss_setup_mb"] = _mb(max((x for x in hwm if x is not None), default=None))
        self._setup_peaks = dict(zip(self.workers(), hwm))
        self.result["load_average_1m"] = [round(os.getloadavg()[0], 2)]  # before the failover, then after it

    def workers(self) -> list[str]:
        """The workers' process names: ``worker-B``, then ``worker-B-2``, ..."""
        return ["worker-B"] + [f"worker-B-{i}" for i in range(2, self.args.workers + 1)]

    def coordinator(self, port: int) -> None:
        """B's controller and worker, as ``Demo.coordinator`` starts them, with the bench's knobs."""
        d, a_ = self.demo, self.args
        common = ["--bootstrap-server", d.broker.bootstrap, "--cluster-name", "B",  # type: ignore[union-attr]
                  "--state-partitions", str(a_.state_partitions), "--model-port", str(port)]  # fmt: skip
        data = ["--data-dir", str(self.workdir / "data-B")]
        extra = ["--no-offsets"] if a_.no_offsets else []
        _, line = d.procs.spawn("controller-B", [PY, "-m", "streams.worker.main", "--controller", "--listener", "127.0.0.1:0",
                                                 "--super-users", ADMIN, "--loglevel", a_.controller_loglevel, *extra, *common, *data],
                                        ready="LISTENING")  # fmt: skip
        d.endpoints["B"] = line.split()[1]
        for name in self.workers():  # each its own data directory (RocksDB, member identity)
            mine = data if name == "worker-B" else ["--data-dir", str(self.workdir / f"data-{name}")]
            d.procs.spawn(name, [PY, "-m", "streams.worker.main", "--tick-interval", str(a_.tick_interval),
                                 "--loglevel", a_.worker_loglevel, *common, *mine])  # fmt: skip
        self.say(f"coordinator of B: controller on {d.endpoints['B']}{' (--no-offsets)' if a_.no_offsets else ''}, "
                 f"{a_.workers} worker(s) started ({a_.state_partitions} state partitions, tick {a_.tick_interval}s)")  # fmt: skip

    def _check_alive(self) -> None:
        for name, proc in self.demo.procs.procs:
            if proc.poll() is not None:
                raise DemoError(f"{name} exited with {proc.returncode}; see {self.workdir / (name + '.log')}")
        if self.demo.clock is not None and self.demo.clock.error is not None:
            raise DemoError(f"model clock failed: {self.demo.clock.error!r}")

    def settle(self) -> None:
        """Until the mirror is idle: every partition reached MIRRORING, but the workers still ran
        the first fetch round of the last ones (~0.3 s of a worker per table partition); a stop
        issued then raced them. A failover of an idle, caught-up mirror starts from quiet
        processes: the workers', the model server's and the controller's CPU together under
        ``IDLE_CORES`` over a second (at most ``--settle-timeout`` seconds; not timed)."""
        pids = [self.pid(n) for n in (*self.workers(), "model-server", "controller-B")]
        start = time.monotonic()
        before = sum(_cpu_s(p) or 0.0 for p in pids)
        while time.monotonic() - start < self.args.settle_timeout:
            time.sleep(1.0)
            now = sum(_cpu_s(p) or 0.0 for p in pids)
            busy, before = now - before, now
            if busy < IDLE_CORES:
                break
        self.result["settle_seconds"] = round(time.monotonic() - start, 1)
        self.say(f"settled in {self.result['settle_seconds']}s (not counted)")

    # ------------------------------------------------------------------ the failover (timed)

    def failover(self) -> None:
        a_ = self.args
        total = a_.topics * a_.partitions
        self.result["stage"] = "failover"
        workers = [self.pid(n) for n in self.workers()]
        self.result["peak_reset"] = all([_reset_peak(w) for w in workers])
        progress: dict[str, Any] = {"done": 0, "total": total, "at": 0.0}
        printed = [0.0]
        t0 = time.monotonic()

        class Err(io.TextIOBase):
            def write(self_, s: str) -> int:  # noqa: N805
                for ln in s.splitlines():
                    m = _PROGRESS.match(ln)
                    now = time.monotonic() - t0
                    if m:
                        progress.update(done=int(m.group(1)), total=int(m.group(2)), at=now)
                        if now - printed[0] < 1.0 and int(m.group(1)) != int(m.group(2)):
                            continue  # at most one progress line a second
                        printed[0] = now
                    self.say(f"  +{now:6.1f}s  {ln}")
                return len(s)

        out, err = io.StringIO(), Err()
        box: dict[str, Any] = {}

        def call() -> None:
            os.environ["KIP1279_PRINCIPAL"] = ADMIN
            from streams.admin import cli
            try:
                box["code"] = cli.main(["--bootstrap-server", self.demo.endpoints["B"], "--stop", "--mirror", MIRROR,
                                        "--topics", ".*", "--wait", str(a_.failover_timeout)], out=out, err=err)  # type: ignore[arg-type]  # fmt: skip
            except BaseException as e:  # noqa: BLE001 - reported below
                box["error"] = e
            box["end"] = time.monotonic()

        procs = {n: p.pid for n, p in self.demo.procs.procs}
        cpu0 = {n: _cpu_s(pid) for n, pid in procs.items()}
        cpu0["broker"] = self._broker_cpu()
        spies = self._profile()
        self.say(f"FAILOVER: kafka-cluster-mirrors --stop --mirror {MIRROR} --topics '.*' --wait {a_.failover_timeout:.0f}")
        th = threading.Thread(target=call, daemon=True, name="cli-stop")
        self.result["stop_called_at"] = round(time.time(), 3)  # to line the processes' logs up with the call
        th.start()
        th.join(a_.failover_timeout + 30)  # the CLI bounds its own wait; this bounds a hung admin call
        elapsed = box.get("end", time.monotonic()) - t0
        cpu1 = {n: _cpu_s(pid) for n, pid in procs.items()}
        cpu1["broker"] = self._broker_cpu()
        self.result.setdefault("load_average_1m", []).append(round(os.getloadavg()[0], 2))
        # CPU-seconds each process spent during the failover (where the time goes).
        self.result["failover_cpu_seconds"] = {n.replace("-", "_"): round(cpu1[n] - c, 1) for n, c in cpu0.items()
                                               if c is not None and cpu1.get(n) is not None}  # fmt: skip
        for sp in spies:
            try:
                sp.wait(max(1.0, a_.profile + 10 - (time.monotonic() - t0)))
            except subprocess.TimeoutExpired:
                sp.kill()
        accepted = sum(1 for ln in out.getvalue().splitlines() if ln.endswith(": stopped"))
        self.result["topics_accepted_by_stop"] = accepted
        peaks = [_status_kb(w, "VmHWM") for w in workers]
        self.result["worker_peak_rss_failover_mb"] = (_mb(max(x for x in peaks if x is not None))
                                                      if self.result["peak_reset"] and any(peaks) else None)  # fmt: skip
        self.result["workers"] = len(workers)
        # Each worker's own figures: with several, whether they share the work or each does it all.
        self.result["per_worker"] = {n: {"cpu_seconds": self.result["failover_cpu_seconds"].get(n.replace("-", "_")),
                                         "peak_rss_setup_mb": _mb(self._setup_peaks.get(n)),
                                         "peak_rss_failover_mb": _mb(p) if self.result["peak_reset"] else None}
                                     for n, p in zip(self.workers(), peaks)}  # fmt: skip
        # All processes' CPU per 1,000 partitions: the figure that travels between machines,
        # with the machine's speed index beside it (``bench.speed_index``).
        self.result["cpu_seconds_per_1k_partitions"] = per_1k_partitions(self.result["failover_cpu_seconds"],
                                                                         a_.topics * a_.partitions)  # fmt: skip
        self.result["worker_cpu_seconds"] = round(sum(v for k, v in self.result["failover_cpu_seconds"].items()
                                                      if k.startswith("worker_B")), 1)  # fmt: skip
        done = progress["done"]
        if box.get("code") == 0 and done == total:
            self.result["mass_failover_50k_seconds"] = round(elapsed, 2)
            if total >= 200_000:
                self.result["mass_failover_200k_seconds"] = round(elapsed, 2)
            self.result["transitions_per_s"] = round(total / elapsed, 1)
            self.result["stage"] = "done"
            self.say(f"all {total} partitions STOPPED {elapsed:.2f}s after the stop call "
                     f"({total / elapsed:.0f} transitions/s)")  # fmt: skip
            self._wait_writable(t0)
            return
        # Partial: how far it got, and the rate so far.
        try:
            counts = self.states()
            done = counts.get("STOPPED", 0)
            self.result["final_states"] = counts
        except Exception as e:  # noqa: BLE001
            self.result["final_states"] = f"describe failed: {e!r}"
        elapsed = time.monotonic() - t0
        if total >= 200_000:
            self.result["mass_failover_200k_seconds"] = None
        self.result.update(mass_failover_50k_seconds=None, timed_out=True, stopped_partitions=done,
                           transitions_per_s=round(done / elapsed, 1) if elapsed > 0 else None,
                           partial_elapsed_seconds=round(elapsed, 1))  # fmt: skip
        reason = box.get("error") or (f"CLI exit {box['code']}" if "code" in box else "CLI call did not return")
        tail = out.getvalue().strip().splitlines()[-3:]
        self.result["reason"] = (f"not all partitions STOPPED within {a_.failover_timeout:.0f}s "
                                 f"({done}/{total}); {reason}" + (f"; {' | '.join(tail)}" if tail else ""))  # fmt: skip
        self.say(f"TIMED OUT: {self.result['reason']}")

    def _wait_writable(self, t0: float, timeout: float = 60.0) -> None:
        """``writable_seconds``: from the stop call until every topic on B is writable (the topic
        level's last act, after the CPU figures above; None if not within ``timeout``)."""
        b = ClusterClient(self.port, "B", timeout=60)
        try:
            while time.monotonic() - t0 < self.result["mass_failover_50k_seconds"] + timeout:
                left = sum(1 for t in b.describe_topics() if t.name.startswith(PREFIX) and t.read_only)
                if not left:
                    self.result["writable_seconds"] = round(time.monotonic() - t0, 2)
                    self.say(f"every topic on B writable {self.result['writable_seconds']:.2f}s after the stop call")
                    return
                time.sleep(0.25)
            self.result["writable_seconds"] = None
        finally:
            b.close()

    def _broker_proc(self) -> Any:
        """The broker's process: noida-db's, or the Kafka node's JVM."""
        b = self.demo.broker
        return getattr(b, "_proc", None) or next((n.proc for n in getattr(b, "nodes", ())), None)

    def _broker_cpu(self) -> float | None:
        proc = self._broker_proc()
        return _cpu_s(proc.pid) if proc is not None else None

    def _profile(self) -> list[subprocess.Popen[bytes]]:
        """``--profile S``: py-spy records every worker, the model server and the controller for the failover's first S seconds."""
        if not self.args.profile:
            return []
        spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        out = []
        named = [("worker" + n.removeprefix("worker-B"), self.pid(n)) for n in self.workers()]  # worker, worker-2, ...
        for name, pid in (*named, ("model-server", self.pid("model-server")), ("controller", self.pid("controller-B"))):
            path = self.workdir / f"profile-{name}.txt"  # collapsed stacks (flamegraph.pl / speedscope input)
            out.append(subprocess.Popen([spy, "record", "-d", str(int(self.args.profile)), "-r", "50", "-f", "raw",
                                         "-o", str(path), "--pid", str(pid)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))  # fmt: skip
            self.result.setdefault("profiles", []).append(str(path))
        return out

    def finish(self) -> None:
        with_pid = {n: p.pid for n, p in self.demo.procs.procs}
        hwm = [_status_kb(with_pid[n], "VmHWM") for n in self.workers() if n in with_pid]
        if any(x is not None for x in hwm):
            self.result["worker_peak_rss_mb"] = _mb(max(x for x in hwm if x is not None))
            if self.result.get("peak_reset"):  # VmHWM was reset before the failover: the overall peak
                self.result["worker_peak_rss_mb"] = max(x for x in (self.result["worker_peak_rss_mb"],
                                                        self.result.get("worker_peak_rss_setup_mb")) if x is not None)  # fmt: skip
        for n in ("model-server", "controller-B"):
            if n in with_pid:
                self.result[f"{n.replace('-', '_')}_peak_rss_mb"] = _mb(_status_kb(with_pid[n], "VmHWM"))
        broker = self._broker_proc()
        if broker is not None:
            self.result["broker_peak_rss_mb"] = _mb(_status_kb(broker.pid, "VmHWM"))
        # Every process's peak RSS over the whole run, in one place.
        self.result["peak_rss_mb"] = {n: self.result.get(k) for n, k in (
            ("worker", "worker_peak_rss_mb"), ("controller", "controller_B_peak_rss_mb"),
            ("model_server", "model_server_peak_rss_mb"), ("broker", "broker_peak_rss_mb"))}  # fmt: skip


class _StartOnly(Exception):
    """``--start-only``: the run ends after the start (no failover)."""


def _fmt(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "no partitions yet"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.mass_failover", description=__doc__.splitlines()[0])
    p.add_argument("--topics", type=int, default=1000)
    p.add_argument("--partitions", type=int, default=50, help="partitions per topic")
    p.add_argument("--setup-timeout", type=float, default=900.0, help="seconds for setup (not timed)")
    p.add_argument("--failover-timeout", type=float, default=300.0, help="seconds to wait for all STOPPED")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--broker", choices=CHOICES, help=FLAG_HELP)
    p.add_argument("--workers", type=int, default=1, help="workers of B (they share the table partitions)")
    p.add_argument("--state-partitions", type=int, default=8, help="mirror.state.topic.num.partitions (demo: 8)")
    p.add_argument("--tick-interval", type=float, default=0.2, help="worker tick interval (demo: 0.2)")
    p.add_argument("--metadata-refresh-ms", type=int, default=30000,
                   help="the mirror's metadata.refresh.interval.ms (coordinator default: 30000; demo: 1000)")
    p.add_argument("--no-offsets", action="store_true",
                   help="controller describe without source HW / dest LEO (2 model calls per partition less)")
    p.add_argument("--worker-loglevel", default="warning", help="the worker's log level (debug: per-round timings)")
    p.add_argument("--controller-loglevel", default="warning", help="the controller's log level (info: each command's append)")
    p.add_argument("--workdir", help="keep everything here (default: a temporary directory)")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory (logs)")
    p.add_argument("--profile", type=float, default=0.0, metavar="SECONDS",
                   help="py-spy record every worker, the model server and the controller for the failover's first SECONDS (collapsed stacks in the workdir)")
    p.add_argument("--settle-timeout", type=float, default=60.0,
                   help="seconds at most to wait after setup for the processes to go idle (not timed)")
    p.add_argument("--no-settle", action="store_true",
                   help="stop as soon as every partition is MIRRORING (racing the workers' first fetch rounds)")
    p.add_argument("--hold", type=float, default=0.0, help="seconds to keep the processes up before the stop (profiling)")
    p.add_argument("--start-only", action="store_true",
                   help="end after the start (its CPU-seconds, peak FAILED, slowest describe); no failover")
    args = p.parse_args(argv)
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="kip1279-massfail-"))
    workdir.mkdir(parents=True, exist_ok=True)
    bench = Bench(args, workdir)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    code = 1
    try:
        bench.setup()
        bench.say(f"setup done in {bench.result['setup_seconds']}s (not counted); worker pid {bench.pid('worker-B')}, "
                  f"model server pid {bench.pid('model-server')}")  # fmt: skip
        if args.start_only:
            bench.result["stage"] = "done"
            raise _StartOnly
        if not args.no_settle:
            bench.settle()
        if args.hold:
            time.sleep(args.hold)
        bench.failover()
        code = 0 if bench.result.get("stage") == "done" else 1
    except _StartOnly:
        code = 0
    except KeyboardInterrupt:
        bench.result.update(timed_out=False, reason="interrupted")
        code = 130
    except Exception as e:  # noqa: BLE001 - any failure: the reason in the JSON, non-zero exit
        bench.result.setdefault("mass_failover_50k_seconds", None)
        bench.result.update(timed_out=isinstance(e, TimeoutError), reason=f"{type(e).__name__}: {e}")
        bench.say(f"FAILED in {bench.result.get('stage')}: {type(e).__name__}: {e} (logs in {workdir})")
        args.keep = True
    finally:
        try:
            bench.finish()
        finally:
            bench.demo.close()
            if not args.workdir and not args.keep:
                shutil.rmtree(workdir, ignore_errors=True)
    r = bench.result
    for k in ("mass_failover_50k_seconds", "transitions_per_s", "worker_peak_rss_mb", "cpu_seconds_per_1k_partitions"):
        r.setdefault(k, None)
    r["speed_index"] = speed_index()  # measured after the run, with the machine as quiet as it was
    r["workdir"] = str(workdir) if (args.workdir or args.keep) else None
    sys.stdout.write(json.dumps(r, sort_keys=False) + "\n")
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())
