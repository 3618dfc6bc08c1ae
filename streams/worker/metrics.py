"""Prometheus metrics and health of a worker or a controller: one module that reads state.

Nothing here is called from the core or from a worker's round. The figures are read when
Prometheus scrapes (``WorkerCollector``, ``ControllerCollector``), from what the worker keeps
anyway: the table's states, each runner's (source HW, destination LEO) per partition and its
``MirrorStats`` counters, the published metadata image. Only what has no state to read is
observed as it happens, through hooks of the shell: a partition's STOPPING -> STOPPED and a FAILED
retry as the changelog acknowledges them (``on_landed``), a changelog write's latency, and the
duration of a stop request (the controller). So a round of 50,000 partitions pays nothing.

Each process has its own ``CollectorRegistry`` (never the global one), served with ``/healthz``
and ``/readyz`` by ``MetricsServer`` on ``metrics.listener`` (loopback). Scrapes render on a
thread: the event loop keeps running while 50,000 series are formatted.

Names follow Prometheus (``_total`` counters, ``_seconds`` histograms, lags in ``_offsets``); the
README maps each to the prototype's JMX name (``MirrorMetadataManager``, ``MirrorFetcherManager``).
No ``_created`` series: prometheus_client would serve them as gauge families of their own
(``kip1279_changelog_write_seconds_created``), which only say when the process started.
The alert rules and the dashboard that read these names are in ``ops/``.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

from prometheus_client import (CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, disable_created_metrics,
                               generate_latest)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from coordinator.readiness import failover_readiness
from coordinator.partition_state import MirrorPartitionKey, MirrorPartitionState
from coordinator.states import DesiredState, MirrorState
from coordinator.workflows.config import stored_config_problems
from coordinator.workflows.fetcher import lag
from streams.runner.syncer import SYNC_KINDS
from streams.worker.membership import coordination_failure

log = logging.getLogger(__name__)
disable_created_metrics()  # process-wide in prometheus_client; our processes serve only these registries

STATES = tuple(s for s in MirrorState)
LAG_STATES = (MirrorState.MIRRORING, MirrorState.PAUSED)  # the states whose lag is shown
# STOPPING -> STOPPED takes a few ticks; a stop request of many topics, up to minutes.
STOP_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
WRITE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
STOP_TRACK_TIMEOUT_S = 3600.0  # a stop request not done by then is no longer timed
Check = Callable[[], tuple[bool, str]]


def _topic_name(image: Any, topic_id: uuid.UUID) -> str:
    topic = image.topics.get(topic_id)
    return topic.name if topic is not None else str(topic_id)


# ------------------------------------------------------------------------------ the worker


class WorkerMetrics:
    """A worker's registry: the collector over its state plus the observed histograms."""

    def __init__(self, worker: Any, *, lag_max_series: int | None = None, ready_max_lag: int | None = None) -> None:
        cfg = worker.config
        self.worker = worker
        self.lag_max_series = cfg.metrics_lag_max_series if lag_max_series is None else lag_max_series
        self.ready_max_lag = cfg.failover_ready_max_lag if ready_max_lag is None else ready_max_lag
        self.metadata_lag = -1  # refreshed before each scrape (-1: unknown)
        self.checks: tuple[bool, bool] | None = None  # /healthz and /readyz, refreshed before each scrape
        self.registry = CollectorRegistry(auto_describe=False)
        self.stop_seconds = Histogram("kip1279_mirror_partition_stop_seconds",
                                      "Time a mirror partition took from STOPPING to STOPPED",
                                      ["mirror"], buckets=STOP_BUCKETS, registry=self.registry)  # fmt: skip
        self.retries = Counter("kip1279_mirror_failed_retries", "Automatic retries of FAILED mirror partitions",
                               ["mirror"], registry=self.registry)  # fmt: skip
        self.changelog_write = Histogram("kip1279_changelog_write_seconds",
                                         "Time until __mirror_state acknowledged a table partition's writes",
                                         buckets=WRITE_BUCKETS, registry=self.registry)  # fmt: skip
        self.registry.register(WorkerCollector(self))

    def attach(self) -> None:
        """Hooks the worker's shell (state writes landing, changelog writes)."""
        self.worker.store.on_landed = self.on_landed
        self.worker.on_changelog_write = self.changelog_write.observe

    def on_landed(self, key: MirrorPartitionKey, before: MirrorPartitionState | None, after: MirrorPartitionState) -> None:
        """A state write the changelog acknowledged (only changes of state, and writes out of FAILED)."""
        if before is None:
            return
        if before.state is MirrorState.STOPPING and after.state is MirrorState.STOPPED:
            self.stop_seconds.labels(key.mirror_name).observe(max(0, after.entered_at_ms - before.entered_at_ms) / 1000)
        elif before.state is MirrorState.FAILED and after.applied_offset == before.applied_offset:
            self.retries.labels(key.mirror_name).inc()  # a newer command (a restart) is no retry

    async def refresh(self) -> None:
        """What the scrape needs from the network: the metadata log's lag."""
        loader = self.worker.loader
        self.metadata_lag = await _metadata_lag(loader.reader) if loader is not None else -1
        self.checks = (self.health()[0], self.readiness()[0])  # on the loop, as /healthz and /readyz
        _zeros(self.worker.image, self.stop_seconds, self.retries)

    def health(self) -> tuple[bool, str]:
        """The event loop answers (this runs on it), and the group membership is alive."""
        w = self.worker
        if w.exit.exit_code:
            return False, f"exiting with code {w.exit.exit_code}"
        reason = coordination_failure(w.group_consumer())
        if reason is not None:
            return False, f"out of group {w.config.faust_app_id}: {reason}"
        return True, "ok"

    def readiness(self) -> tuple[bool, str]:
        """The metadata log replayed up to its end, and table recovery done."""
        w = self.worker
        if not w.caught_up.is_set():
            return False, "replaying the metadata log"
        app = w.app
        if app.in_recovery or not app.tables.recovery.completed.is_set():
            return False, "recovering the table from the changelog"
        return True, "ok"


class WorkerCollector(Collector):
    """Reads the worker's state at scrape time (on a thread: only atomic copies are taken)."""

    def __init__(self, metrics: WorkerMetrics) -> None:
        self.m = metrics

    def collect(self) -> Iterator[Any]:  # noqa: C901 - one family after the other
        w = self.m.worker
        image = w.image
        with w.store.lock:
            durable = w.store.durable.copy()
        stats = w.stats.copy()
        mirrors = w.mirrors.copy()
        names = sorted(set(image.mirrors.mirrors) | {k.mirror_name for k in durable} | set(stats))
        now_ms = w.clock_ms()

        states: dict[str, dict[MirrorState, int]] = {n: dict.fromkeys(STATES, 0) for n in names}
        entered: dict[str, dict[MirrorState, int]] = {n: {} for n in names}  # the oldest entry per state
        by_mirror: dict[str, dict[Any, MirrorState]] = defaultdict(dict)
        for key, st in durable.items():
            n = key.mirror_name
            states[n][st.state] += 1
            by_mirror[n][key.topic_partition] = st.state
            oldest = entered[n].get(st.state)
            if oldest is None or st.entered_at_ms < oldest:
                entered[n][st.state] = st.entered_at_ms
        fam = GaugeMetricFamily("kip1279_mirror_partitions", "Mirror partitions (of this worker's table partitions) "
                                "per state", labels=["mirror", "state"])  # fmt: skip
        for n in names:
            for s, count in states[n].items():
                fam.add_metric([n, s.name], count)
        yield fam
        age = GaugeMetricFamily("kip1279_mirror_partition_state_age_seconds", "How long the partition that entered "
                                "the state first has been in it (0: none in it); a stuck STOPPING, a long PAUSED",
                                labels=["mirror", "state"])  # fmt: skip
        for n in names:
            for s in STATES:
                since = entered[n].get(s)
                age.add_metric([n, s.name], 0 if since is None else max(0, now_ms - since) / 1000)
        yield age
        failed = GaugeMetricFamily("kip1279_mirror_failed_partitions", "Mirror partitions in FAILED", labels=["mirror"])
        for n in names:
            failed.add_metric([n], states[n][MirrorState.FAILED])
        yield failed

        # Lag: source HW - destination LEO of the last fetch, for partitions that are MIRRORING, and
        # for PAUSED ones the lag of their last fetch before the pause (a lower bound: nothing is
        # fetched while paused; kip1279_mirror_partition_state_age_seconds says for how long).
        lags: dict[str, dict[Any, int]] = {}
        mirroring: dict[str, dict[Any, int]] = {}  # what failover readiness reads
        for n in names:
            m = mirrors.get(n)
            progress = m.runner.progress.copy() if m is not None else {}
            mine = by_mirror.get(n, {})
            lags[n] = {tp: lag(hw, leo) for tp, (hw, leo) in progress.items() if mine.get(tp) in LAG_STATES}
            mirroring[n] = {tp: v for tp, v in lags[n].items() if mine[tp] is MirrorState.MIRRORING}
        per = GaugeMetricFamily("kip1279_mirror_partition_lag_offsets", "Source HW minus destination LEO, in offsets, "
                                "at the partition's last fetch (MIRRORING; PAUSED: before the pause); the largest "
                                "metrics.partition.lag.max.series", labels=["mirror", "topic", "partition"])  # fmt: skip
        every = ((v, n, tp) for n, ls in lags.items() for tp, v in ls.items())
        total = sum(len(ls) for ls in lags.values())
        cap = self.m.lag_max_series
        for v, n, tp in (heapq.nlargest(cap, every, key=lambda x: x[0]) if total > cap else every):
            per.add_metric([n, _topic_name(image, tp.topic_id), str(tp.partition)], v)
        yield per
        mx = GaugeMetricFamily("kip1279_mirror_max_lag_offsets", "The largest partition lag of the mirror, in offsets "
                               "(MIRRORING and PAUSED partitions)", labels=["mirror"])  # fmt: skip
        for n in names:
            mx.add_metric([n], max(lags[n].values(), default=0))
        yield mx

        fetch = {f: CounterMetricFamily(f"kip1279_mirror_fetch_{f}", h, labels=["mirror"]) for f, h in (
            ("bytes", "Bytes fetched from the source"), ("records", "Records fetched from the source"),
            ("requests", "Fetch requests sent to the source (one per pipelined wave of partitions)"),
            ("errors", "Partition fetches that failed"))}  # fmt: skip
        errors = CounterMetricFamily("kip1279_mirror_sync_errors", "Failed syncs per kind", labels=["mirror", "kind"])
        success = GaugeMetricFamily("kip1279_mirror_sync_last_success_timestamp_seconds",
                                    "When a sync of each kind last ran without error", labels=["mirror", "kind"])  # fmt: skip
        for n in sorted(stats):
            s = stats[n]
            for f, fam_f in fetch.items():
                fam_f.add_metric([n], getattr(s, f"fetch_{f}"))
            for kind in SYNC_KINDS:
                errors.add_metric([n, kind], s.sync_errors[kind])
                if s.sync_success_ms[kind] >= 0:
                    success.add_metric([n, kind], s.sync_success_ms[kind] / 1000)
        yield from fetch.values()
        yield errors
        yield success
        unusable = GaugeMetricFamily("kip1279_mirror_config_errors", "Stored configs of the mirror it cannot use "
                                     "(left out; kafka-cluster-mirrors --describe says why)", labels=["mirror", "config"])  # fmt: skip
        for n in names:
            m_image = image.mirrors.mirrors.get(n)
            for key in sorted(stored_config_problems(m_image.configs) if m_image is not None else ()):
                unusable.add_metric([n, key], 1)
        yield unusable

        ready = GaugeMetricFamily("kip1279_mirror_failover_ready", "1 when a failover now would lose little: lag "
                                  "under metrics.failover.ready.max.lag, group offsets synced within two sync "
                                  "intervals, topic configs and ACLs synced clean, no partition FAILED",
                                  labels=["mirror"])  # fmt: skip
        for n in names:
            m = mirrors.get(n)
            interval = m.runner.config.metadata_refresh_interval_ms if m is not None else 0
            ready.add_metric([n], int(failover_ready(states[n], mirroring[n], stats.get(n), interval, now_ms,
                                                     self.m.ready_max_lag)))  # fmt: skip
        yield ready

        applied = GaugeMetricFamily("kip1279_metadata_log_applied_offset", "Offset of the last metadata record "
                                    "in the published image")  # fmt: skip
        applied.add_metric([], image.offset)
        yield applied
        yield _lag_family(self.m.metadata_lag)
        yield from _check_families(self.m.checks)


def failover_ready(states: dict[MirrorState, int], lags: dict[Any, int], stats: Any, interval_ms: int, now_ms: int,
                   max_lag: int) -> bool:  # fmt: skip
    """The issue's rule (``coordinator.readiness``), over one worker's partitions of a mirror."""
    syncs = stats.sync_success_ms if stats is not None else {}
    return failover_readiness(states, lags, max_lag, syncs, interval_ms, now_ms).ready is True


# -------------------------------------------------------------------------- the controller


class ControllerMetrics:
    """A controller's registry: the metadata log it writes, and how long stop requests take."""

    def __init__(self, controller: Any, poll_s: float = 0.5) -> None:
        self.controller = controller
        self.poll_s = poll_s
        self.applied = -1
        self.metadata_lag = -1
        self.checks: tuple[bool, bool] | None = None
        self.registry = CollectorRegistry(auto_describe=False)
        self.stop_request_seconds = Histogram("kip1279_mirror_stop_request_seconds",
                                              "Time from a stop request until every partition it named is STOPPED",
                                              ["mirror"], buckets=STOP_BUCKETS, registry=self.registry)  # fmt: skip
        self.registry.register(ControllerCollector(self))
        self._tasks: set[asyncio.Task[None]] = set()

    def attach(self) -> None:
        self.controller.on_command = self.on_command

    def on_command(self, api: str, records: Sequence[Any]) -> None:
        """Records appended for a request: a stop is timed until its partitions are all STOPPED."""
        if api != "StopMirrorTopics":
            return
        started = time.monotonic()
        topics: dict[str, set[uuid.UUID]] = defaultdict(set)
        for r in records:
            msg = r.message
            if getattr(msg, "desired_state", None) == int(DesiredState.STOP):
                topics[msg.mirror_name].add(msg.topic_id)
        for mirror, ids in topics.items():
            task = asyncio.get_running_loop().create_task(self._time_stop(mirror, ids, started))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _time_stop(self, mirror: str, topic_ids: set[uuid.UUID], started: float) -> None:
        c = self.controller
        while time.monotonic() - started < STOP_TRACK_TIMEOUT_S:
            await asyncio.sleep(self.poll_s)
            try:
                statuses = await c.status.statuses(offsets=False, mirrors=[mirror])
            except Exception as e:  # noqa: BLE001 - the next poll tries again
                log.debug("stop request of %s: states unavailable: %r", mirror, e)
                continue
            image = c.image
            keys = [(mirror, tid, p) for tid in topic_ids if (t := image.topics.get(tid)) is not None
                    for p in t.partitions]  # fmt: skip
            if keys and all((s := statuses.get(k)) is not None and s.state is MirrorState.STOPPED for k in keys):
                self.stop_request_seconds.labels(mirror).observe(time.monotonic() - started)
                return

    async def refresh(self) -> None:
        c = self.controller
        self.applied = c.metadata_offset  # on the loop: the image is built here
        self.metadata_lag = await _metadata_lag(c.reader)
        self.checks = (self.health()[0], self.readiness()[0])
        _zeros(c.image, self.stop_request_seconds)

    def health(self) -> tuple[bool, str]:
        if not self.controller.following:
            return False, "the metadata log follower stopped"
        return True, "ok"

    def readiness(self) -> tuple[bool, str]:
        if self.controller.address is None:
            return False, "replaying the metadata log"
        return True, "ok"

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


class ControllerCollector(Collector):
    def __init__(self, metrics: ControllerMetrics) -> None:
        self.m = metrics

    def collect(self) -> Iterator[Any]:
        applied = GaugeMetricFamily("kip1279_metadata_log_applied_offset", "Offset of the last metadata record "
                                    "in the committed image")  # fmt: skip
        applied.add_metric([], self.m.applied)
        yield applied
        yield _lag_family(self.m.metadata_lag)
        yield from _check_families(self.m.checks)


def _zeros(image: Any, *per_mirror: Any) -> None:
    """Every mirror's series of the observed metrics, at 0 before its first observation: rate()
    and increase() never see the step of a series whose first sample already counts it."""
    for name in image.mirrors.mirrors:
        for metric in per_mirror:
            metric.labels(name)


async def _metadata_lag(reader: Any) -> int:
    try:
        return int(await asyncio.wait_for(reader.lag(), 2.0))
    except Exception as e:  # noqa: BLE001 - the lag shows -1 rather than failing the scrape
        log.debug("metadata log lag unavailable: %r", e)
        return -1


def _lag_family(value: int) -> GaugeMetricFamily:
    fam = GaugeMetricFamily("kip1279_metadata_log_lag_offsets", "Metadata log offsets up to its high-water mark "
                            "not read yet (-1: unknown)")  # fmt: skip
    fam.add_metric([], value)
    return fam


def _check_families(checks: tuple[bool, bool] | None) -> Iterator[GaugeMetricFamily]:
    """/healthz and /readyz as gauges, for alert rules (Prometheus scrapes /metrics only)."""
    if checks is None:  # not refreshed: a registry read outside MetricsServer
        return
    for (name, helptext), ok in zip((("kip1279_healthy", "1 while /healthz answers 200"),
                                     ("kip1279_ready", "1 while /readyz answers 200")), checks):  # fmt: skip
        fam = GaugeMetricFamily(name, helptext)
        fam.add_metric([], int(ok))
        yield fam


# ------------------------------------------------------------------------------ the server


class MetricsServer:
    """``/metrics``, ``/healthz`` and ``/readyz`` on the process's event loop (aiohttp)."""

    def __init__(self, address: tuple[str, int], registry: CollectorRegistry, *, health: Check, ready: Check,
                 refresh: Callable[[], Awaitable[None]] | None = None) -> None:  # fmt: skip
        self.address = address
        self.registry, self.health, self.ready, self.refresh = registry, health, ready, refresh
        self._runner: Any = None
        self.port = 0

    async def start(self) -> tuple[str, int]:
        from aiohttp import web

        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._check(self.health))
        app.router.add_get("/readyz", self._check(self.ready))
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self.address[0], self.address[1], reuse_address=True)
        await site.start()
        self._runner = runner
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        log.info("metrics, /healthz and /readyz on http://%s:%d", self.address[0], self.port)
        return self.address[0], self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _metrics(self, request: Any) -> Any:
        from aiohttp import web

        if self.refresh is not None:
            await self.refresh()
        body = await asyncio.to_thread(generate_latest, self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    @staticmethod
    def _check(check: Check) -> Callable[[Any], Awaitable[Any]]:
        async def handler(request: Any) -> Any:
            from aiohttp import web

            try:
                ok, why = check()
            except Exception as e:  # noqa: BLE001 - a check that breaks says unhealthy, not 500
                ok, why = False, f"check failed: {e!r}"
            return web.Response(status=200 if ok else 503, text=why + "\n")

        return handler


# ------------------------------------------------------------------------------ wiring


async def _listen(address: tuple[str, int], metrics: WorkerMetrics | ControllerMetrics) -> MetricsServer:
    """Attaches ``metrics``, serves them on ``address`` and prints ``METRICS HOST:PORT``."""
    metrics.attach()
    server = MetricsServer(address, metrics.registry, health=metrics.health, ready=metrics.readiness,
                           refresh=metrics.refresh)  # fmt: skip
    host, port = await server.start()
    print(f"METRICS {host}:{port}", flush=True)
    return server


async def serve_worker(worker: Any) -> MetricsServer:
    """Serves the worker's metrics and health on ``metrics.listener`` until its app shuts down;
    prints ``METRICS HOST:PORT`` once it listens."""
    server = await _listen(worker.config.metrics_address, WorkerMetrics(worker))

    async def stop(sender: Any = None, **_: Any) -> None:
        await server.stop()

    worker.app.on_before_shutdown.connect(stop)
    return server


async def serve_controller(controller: Any) -> Callable[[], Awaitable[None]]:
    """Serves the controller's metrics and health; returns what stops them."""
    metrics = ControllerMetrics(controller)
    server = await _listen(controller.config.metrics_address, metrics)

    async def stop() -> None:
        await server.stop()
        await metrics.close()

    return stop
