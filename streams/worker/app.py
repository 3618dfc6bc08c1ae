"""The coordinator's Faust app: a metadata agent, a partition agent and a tick timer.

Topics (every name carries the destination cluster's prefix, see ``streams.config``):

- the metadata log (one partition) is followed by the **metadata follower** (a Faust task, ``streams.worker.follower``):
  ``MetadataLogLoader`` + ``Replayer``: the latest snapshot, then the tail, then the live log,
  snapshotting every N records / T ms. Each published ``(delta, image)`` goes through
  ``local_changes(delta, owns=...)``; every changed topic becomes one desired-state event per
  table partition (of those this worker owns) that holds some of its partitions, on the
  desired-state topic (murmur2 of a mirror partition's key).
- the desired-state topic and the tick topic (both ``mirror.state.topic.num.partitions``
  partitions, co-partitioned with the ``mirror_state`` table) feed one **partition agent**.
- a **timer** sends a tick to each owned table partition that has something to do
  (``streams.worker.ticks``), straight to that partition; the agent then steps the mirror
  partitions of that table partition that may decide something new, in one go.

Per event of table partition ``p`` the agent (1) writes the state writes waiting for ``p`` into
the table (RocksDB; changelog ``__mirror_state``) and waits for the changelog to acknowledge
them, then (2) drives every mirror partition of ``p`` in a bounded thread pool (blocking port
calls never run on the loop), one job per cluster mirror so a slow or dead source stalls only
its own mirror's partitions, and goes back to (1), a few rounds at most. Table partitions step
side by side, one task each (``streams.worker.steps``): while ``p``'s writes are acknowledged,
the job of ``q`` runs. Within a round the
steps of one state run on (each is idempotent and resumes after a crash) and end up as one
write; a second change of state, and the one STOPPING step whose inputs a crash could not
recompute, wait for the round's writes to be durable (``may_step_before_durable``). That is
what makes every workflow resumable after a SIGKILL with nothing applied twice. The steps reuse
``MirrorRunner``'s logic over ``WorkerStateStore``: reads see the table's states plus writes not
yet persisted; writes are fenced (``check_write``) and queued per partition.

FAILED retries, the topic level (create, read-only, writable after a stop), the fetch round and
the metadata sync (epoch check, configs, groups, ACLs) all run off the same tick.

A topic that leaves its mirror (above all, a deleted mirror's topics) is forgotten at once: its
states are dropped, the owner of each table partition writes tombstones for the
MirrorPartitionState and LastMirrorEpochs keys into ``__mirror_state``, and late steps or events
of that membership are dropped (their applied metadata offset is not after the departure). A
worker that was down meanwhile finds the departure in its replay, or, at the latest, finds keys
whose mirror no longer holds the topic when it takes their table partition. So a mirror
re-created under the same name starts from UNKNOWN. The LME that a failback asks for is the
other cluster's (``last_mirrored_epoch`` on the source port), which a delete here never touches.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import struct
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from coordinator.changes import local_changes
from coordinator.fencing import OwnerFence
from coordinator.image import EMPTY_IMAGE, MetadataImage, TopicCut
from coordinator.partition_state import MirrorPartitionKey
from coordinator.states import DesiredState
from coordinator.workflows.config import MirrorConfig, is_connection_config
from records.framing import MetadataRecordSerde
from streams.config import WorkerConfig, ensure_topics
from streams.runner.runner import MirrorRunner
from streams.state.metadata_log import MetadataLogLoader
from streams.state.desired_state import EPOCH_HEADER, OFFSET_HEADER, decode_desired_state
from streams.state.mirror_state import make_app, make_desired_state_topic, make_mirror_state_table
from streams.state.mirror_state_codec import default_codec
from streams.runner.syncer import MirrorStats
from streams.worker.exits import WorkerExit
from streams.worker.follower import WorkerMetadataFollower
from streams.worker.recovery_guard import RecoveryGuard, RecoveryGuardService
from streams.worker.reports import WorkerReports
from streams.worker.stop_reports import StopReporter
from streams.worker.table import OtherWorkersStates, WorkerTable
from streams.worker.ports import PortFactory, model_server_ports
from streams.worker.state_store import WorkerStateStore
from streams.worker.copier import CopyPath
from streams.worker.mirror_jobs import MirrorJob, ask_for_the_view, cyclic_gc_paused, full_jitter, run_job, waits_on_others
from streams.worker.ownership import WorkerOwnership
from streams.worker.profiling import profiled_job
from streams.worker.topics import tick_topic_name, worker_topic_specs
from streams.worker.steps import StepTasks, step_rounds
from streams.worker.ticks import IDLE_INTERVAL_S, TickPlan

log = logging.getLogger(__name__)
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
Desired = dict[uuid.UUID, tuple[DesiredState, int]]


# ---------------------------------------------------------------------------------- worker


class _DesiredView:
    """``MirrorRunner.metadata``: the desired state per topic of one mirror (newest wins:
    the worker's own image, or a desired-state event that is ahead of it)."""

    def __init__(self, worker: CoordinatorWorker, mirror_name: str) -> None:
        self.worker, self.mirror_name = worker, mirror_name

    def latest(self, mirror_name: str) -> Desired:
        return self.worker.desired_for(mirror_name)

    def cut(self, mirror_name: str, topic_id: uuid.UUID) -> TopicCut | None:
        """The --consistent-cut of the topic's newest desired state: the image's, or an event's ahead of it."""
        w = self.worker
        m = w.image.mirrors.topics.get(topic_id)
        ev = w.event_cuts.get((mirror_name, topic_id))
        if ev is not None and (m is None or m.mirror_name != mirror_name or m.last_change_offset < ev[1]):
            return ev[0]
        return m.cut if m is not None and m.mirror_name == mirror_name else None


class CoordinatorWorker:
    """One destination cluster's stream worker (see the module docstring)."""

    def __init__(
        self,
        config: WorkerConfig,
        *,
        ports: PortFactory | None = None,
        tick_interval: float = 0.25,
        max_rounds: int = 10,
        step_timeout: float = 10.0,
        threads: int = 4,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        idle_tick_interval: float = IDLE_INTERVAL_S,
        **app_overrides: Any,
    ) -> None:
        self.config = config
        self.ports = ports or model_server_ports(config)
        self.tick_interval = tick_interval
        self.ticks = TickPlan(self, idle_tick_interval)
        self.copier = CopyPath(self)  # moved partitions are copied without a tick
        self.max_rounds = max_rounds
        self.step_timeout = step_timeout
        self.clock_ms = clock_ms
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="kip1279-ports")
        self.app = make_app(config, **app_overrides)
        self.table = make_mirror_state_table(self.app, config)
        self.desired_topic = make_desired_state_topic(self.app, config)
        self.tick_topic_name = tick_topic_name(config)
        self.tick_topic = self.app.topic(self.tick_topic_name, key_type=bytes, value_type=bytes, key_serializer="raw",
                                         value_serializer="raw", partitions=config.state_partitions)  # fmt: skip
        channel = self.app.topic(config.desired_state_topic_name, self.tick_topic_name, key_type=bytes,
                                 value_type=bytes, key_serializer="raw", value_serializer="raw",
                                 partitions=config.state_partitions)  # fmt: skip
        self.store = WorkerStateStore(config.state_partitions)
        self.image: MetadataImage = EMPTY_IMAGE
        self.event_desired: dict[tuple[str, uuid.UUID], tuple[DesiredState, int]] = {}
        self.event_cuts: dict[tuple[str, uuid.UUID], tuple[TopicCut | None, int]] = {}  # the events' cuts, same keys
        self._desired_version = 0  # moves with every change of event_desired: desired_for's cache
        self._desired_cache: dict[str, tuple[tuple[Any, int], Desired]] = {}
        self._by_mirror: dict[int, tuple[list[MirrorPartitionKey], dict[str, list[MirrorPartitionKey]]]] = {}
        self.mirrors: dict[str, MirrorJob] = {}
        self.stats: dict[str, MirrorStats] = {}  # per mirror, across its runners (``streams.worker.metrics``)
        self.on_changelog_write: Callable[[float], None] = lambda seconds: None
        self.follower = WorkerMetadataFollower(config, self._publish)
        # The follower's, shared: readiness, metrics and describe read them from the worker.
        self.caught_up = self.follower.caught_up
        self.replayer = self.follower.replayer
        self.poison_offsets = self.follower.poison_offsets
        self.other_workers = OtherWorkersStates(config, self.store, tick_interval, step_timeout, lambda: self.image,
                                                self.desired_for)  # fmt: skip
        self.table_partitions = WorkerTable(config, self.table, self.store, lambda: self.image,
                                            lambda seconds: self.on_changelog_write(seconds))  # fmt: skip
        self.ownership = WorkerOwnership(self)
        self._last_step: dict[int, float] = {}
        self._last_step_ms: dict[int, int] = {}  # clock_ms at the start of each partition's last step
        self._serde = MetadataRecordSerde(default_codec().schemas)
        self._record_cls = default_codec().schemas.struct("MirrorTopicStateChangeRecord")
        self._record_key = default_codec().schemas.spec("MirrorTopicStateChangeRecord").api_key
        self.steps = StepTasks(self.step_partition, lambda: bool(getattr(self.app, "rebalancing", False)))
        self._mirror_lock = asyncio.Lock()  # steps of several table partitions: one runner built per mirror
        self.agent = self.app.agent(channel, name=f"{config.faust_app_id}.mirror-partitions")(self._process)
        self.app.timer(tick_interval, name=f"{config.faust_app_id}.ticks")(self._send_ticks)
        self.app.task(self._follow_metadata)
        # Liveness: the process's exit code and how to stop it (``run_worker`` sets ``on_fatal``).
        self.exit = WorkerExit(self.app, config.faust_app_id, lambda: self.group_consumer())
        # Faust's table recovery never seeks a changelog partition again: a stalled one is sought here.
        # It also ends the recovery of a changelog partition whose log ends with a transaction marker.
        self.recovery_guard = RecoveryGuard(self.app, config.recovery_stall_ms / 1000, bootstrap=config.bootstrap_servers)
        every = min(0.25, max(0.1, config.recovery_stall_ms / 4000))
        self.app.add_dependency(RecoveryGuardService(self.recovery_guard, every))
        self.app.on_before_shutdown.connect(self._before_shutdown)
        # A rebalance revokes table partitions once the jobs under way and their writes have ended (``StepTasks.hold``).
        self.app.on_partitions_revoked.connect(self._hold_steps)
        self.app.on_rebalance_complete.connect(self.steps.resume)
        # Sync status (for the controller's describe) and audit snapshots, each on its own timer.
        instance = config.group_instance_id or f"{config.client_id}-{uuid.uuid4().hex[:8]}"
        self.reports = WorkerReports(config, self.store, instance, self.ports, lambda: self.image, clock_ms,
                                     self.table_partitions.changelog_producer)  # fmt: skip
        self.stop_reporter = StopReporter(config, self.store, instance, self.table_partitions.changelog_producer, clock_ms)
        self.app.timer(1.0, name=f"{config.faust_app_id}.sync-status")(self._publish_sync_status)
        if self.reports.audit_exporter is not None:
            self.app.timer(config.audit_export_interval_ms / 1000, name=f"{config.faust_app_id}.audit-export")(
                self._export_audit)  # fmt: skip

    # ------------------------------------------------------------------------ membership

    def group_consumer(self) -> Any:
        return self.ownership.group_consumer()

    def owner_fence(self) -> OwnerFence | None:
        """The token of this worker's writes to the clusters (``streams.worker.ownership``)."""
        return self.ownership.fence()

    def still_owner(self, fence: OwnerFence, partition: int | None) -> bool:
        return self.ownership.still_owner(fence, partition)

    async def _before_shutdown(self, sender: Any = None, **_: Any) -> None:
        # The consumer is still in the group here; it closes without leaving (static member).
        self.exit.note_member()
        await self.steps.stop()
        await self.reports.stop(self.table_partitions.producer)

    async def _hold_steps(self, sender: Any = None, *_: Any, **__: Any) -> None:
        await self.steps.hold(self.config.rebalance_timeout_ms / 1000 * 0.8)

    async def _publish_sync_status(self) -> None:
        if self.caught_up.is_set():
            await self.reports.publish_sync_status({n: m.runner for n, m in self.mirrors.items()}, self.stats)
            await self.stop_reporter.report(self.image)  # a stop that reached the image after the last step

    async def _export_audit(self) -> None:
        """By the owner of table partition 0 only: one writer per store."""
        if self.caught_up.is_set() and 0 in self.owned_partitions():
            await self.reports.export_audit()

    # ---------------------------------------------------------------- the metadata follower

    @property
    def loader(self) -> MetadataLogLoader | None:
        return self.follower.loader

    async def _follow_metadata(self) -> None:
        c = self.config
        await ensure_topics(c.bootstrap_servers, worker_topic_specs(c))
        try:
            await self.follower.run()
        finally:
            await self.other_workers.stop()
            await self.table_partitions.stop()

    async def _publish(self) -> None:
        delta, image = self.replayer.publish()
        changes = local_changes(delta, image)
        self.image = image
        owned = self.owned_partitions()
        # Every changed key is registered for its table partition; events go one per owned table
        # partition holding changed keys: an event only wakes the owner of its table partition,
        # which is this worker, whose image (just published) has every topic's desired state.
        # (One per mirror partition cost 50,000 sends and agent events for a mass failover of
        # 50,000 partitions; one per topic and table partition still 8,000.) The event carries
        # one of the topics, should it reach another owner after a rebalance: that owner's own
        # image gives the others.
        self._forget_removed(changes.removed, changes.removed_at)
        events: dict[int, MirrorPartitionKey] = {}
        for kind in ("stop", "pause", "start", "resume", "added", "leader_changes"):
            for k in getattr(changes, kind):
                key = MirrorPartitionKey(k.mirror_name, k.topic_id, k.partition)
                p = self.store.partition_of(key)
                self.table_partitions.add_key(p, key)
                if p in owned and p not in events and image.mirror_topic(k.topic_id) is not None:
                    events[p] = key
        sent = 0
        for p, key in events.items():
            topic_id = key.topic_id
            m = image.mirror_topic(topic_id)
            if m is None:
                continue
            record = self._record_cls(topic_id=topic_id, mirror_name=m.mirror_name, desired_state=int(m.desired_state))
            headers = [(OFFSET_HEADER, _INT64.pack(max(m.last_change_offset, 0))),
                       (EPOCH_HEADER, _INT32.pack(max(image.provenance.epoch, 0)))]  # fmt: skip
            await self.desired_topic.send(key=default_codec().state_key(key.mirror_name, key.topic_id, key.partition),
                                          value=self._serde.encode(record, 0), partition=p, headers=headers)  # fmt: skip
            sent += 1
        if sent:
            log.info("metadata offset %d: %d desired-state event(s)", image.offset, sent)

    def _forget_removed(self, removed: Iterable[Any], removed_at: Mapping[tuple[str, uuid.UUID], int]) -> None:
        """Topics that left a mirror (a deleted mirror's above all): their states are forgotten and
        tombstoned by the owners of their table partitions; the mirror's runner is rebuilt (or, for
        a deleted mirror, closed) once its running job is over."""
        for k in removed:
            key = MirrorPartitionKey(k.mirror_name, k.topic_id, k.partition)
            offset = removed_at.get((k.mirror_name, k.topic_id), self.image.offset)
            self.store.remove(key, offset)
            if self.store.get(key) is None:  # no state of a newer membership either
                self.table_partitions.drop_key(self.store.partition_of(key), key)
        for (name, tid), offset in removed_at.items():
            got = self.event_desired.get((name, tid))
            if got is not None and got[1] <= offset:
                del self.event_desired[(name, tid)]
                self.event_cuts.pop((name, tid), None)
                self._desired_version += 1
            m = self.mirrors.get(name)
            if m is not None:
                m.retired = True
                if m.busy is None:
                    self._close_mirror(name, m)

    def desired_for(self, mirror_name: str) -> Desired:
        """The newest desired state per topic of a mirror (read only: one dict until the image or an event moves it)."""
        image, version = self.image, self._desired_version
        got = self._desired_cache.get(mirror_name)
        if got is not None and got[0][0] is image and got[0][1] == version:
            return got[1]
        out: Desired = {}
        mirrors = self.image.mirrors
        for m in mirrors.topics.values():
            if m.mirror_name == mirror_name:
                out[m.topic_id] = (m.desired_state, max(m.last_change_offset, 0))
        for (name, tid), (want, offset) in list(self.event_desired.items()):
            if name == mirror_name and (tid not in out or out[tid][1] < offset):
                out[tid] = (want, offset)
        self._desired_cache[mirror_name] = ((image, version), out)
        return out

    # ------------------------------------------------------------------------- ticks

    def owned_partitions(self) -> set[int]:
        try:
            assignment = self.app.consumer.assignment()
        except Exception:  # noqa: BLE001 - no consumer yet
            return set()
        return {tp.partition for tp in assignment if tp.topic == self.tick_topic_name}

    async def _send_ticks(self) -> None:
        if not self.caught_up.is_set():
            return
        now = self.clock_ms()
        await self.ticks.send(self.ticks.wanted(now), now)
        if self.loader is not None:
            try:
                await self.loader.maybe_snapshot()
            except Exception as e:  # noqa: BLE001 - a failed snapshot only lengthens the next replay
                log.error("metadata snapshot failed: %s", e)

    @staticmethod
    def tick_value(now_ms: int) -> bytes:
        return _INT64.pack(now_ms)

    # ------------------------------------------------------------------ the partition agent

    async def _process(self, stream: Any) -> None:
        async for event in stream.events():
            msg = event.message
            p = msg.partition
            if msg.topic != self.tick_topic_name:
                try:
                    change = decode_desired_state(msg.key, msg.value, msg.headers)
                except Exception as e:  # noqa: BLE001 - a bad event is skipped, never a crash loop
                    log.error("undecodable desired-state event at %s[%d]@%d: %s", msg.topic, p, msg.offset, e)
                    continue
                if change.mirror_name is not None and not self.store.outlived(
                        MirrorPartitionKey(change.mirror_name, change.topic_id, change.partition), change.metadata_offset):
                    k = (change.mirror_name, change.topic_id)
                    if k not in self.event_desired or self.event_desired[k][1] < change.metadata_offset:
                        self.event_desired[k] = (DesiredState(change.desired_state), change.metadata_offset)
                        self.event_cuts[k] = (change.cut, change.metadata_offset)
                        self._desired_version += 1
                    self.table_partitions.add_key(p, MirrorPartitionKey(change.mirror_name, change.topic_id, change.partition))
                if time.monotonic() - self._last_step.get(p, 0.0) < 0.05:
                    self.ticks.ask(p)
                    continue  # a burst of events: the next tick (or event) steps the partition
            elif len(msg.value or b"") == 8 and _INT64.unpack(msg.value)[0] < self._last_step_ms.get(p, -1):
                continue  # sent before the last step of this partition began: that step covered it
            if not self.caught_up.is_set():
                continue
            self.steps.request(p)  # table partitions step side by side (``streams.worker.steps``)

    async def _sync_ownership(self) -> None:
        await self.ownership.sync(self.owned_partitions(), bool(getattr(self.app, "rebalancing", False)))

    async def _mirror(self, name: str) -> MirrorJob | None:
        async with self._mirror_lock:
            return await self._mirror_locked(name)

    async def _mirror_locked(self, name: str) -> MirrorJob | None:
        m = self.mirrors.get(name)
        if m is not None:
            current = self.image.mirrors.get(name)
            if (not m.retired and m.busy is None and current is not None and m.configs is not None
                    and current.configs != m.configs):
                changed = sorted(k for k in set(current.configs) | set(m.configs)
                                 if current.configs.get(k) != m.configs.get(k))  # fmt: skip
                new = MirrorConfig.from_properties(dict(current.configs))
                if any(is_connection_config(k) for k in changed) or new.num_fetchers != m.runner.config.num_fetchers:
                    # New connections (bootstrap.servers, security) or fetchers: a new runner.
                    # State is in the table, so it resumes.
                    log.info("mirror %s: config changed (%s): rebuilding its runner", name, ", ".join(changed))
                    m.retired = True
                else:
                    # Settings only (a stop's mirror.topics.exclude, say): the runner keeps its
                    # fetchers, settled partitions and progress; a rebuild would re-adopt every
                    # partition, seconds at 200,000 of them, at the start of a failover.
                    log.info("mirror %s: config changed (%s): applied from the next round", name, ", ".join(changed))
                    m.runner.reconfigure(new)
                    m.configs = current.configs
            if not m.retired:
                return m
            if m.busy is not None:
                return None  # the old membership's job is still running: never two jobs per mirror
            self._close_mirror(name, m)
        image = self.image.mirrors.get(name)
        if image is None:
            return None
        loop = asyncio.get_running_loop()

        def build() -> MirrorJob:
            ports = self.ports(name, image)
            runner = MirrorRunner(name, ports[0], ports[1], MirrorConfig.from_properties(dict(image.configs)),
                                  store=self.store, metadata=_DesiredView(self, name),  # type: ignore[arg-type]
                                  stats=self.stats.setdefault(name, MirrorStats()),
                                  jitter=full_jitter, long_poll=True)  # fmt: skip
            runner.impacts.prediction = lambda topic_id: self.image.mirrors.impacts.get(topic_id)
            return MirrorJob(runner, ports, image.configs)

        m = self.mirrors[name] = await loop.run_in_executor(self.pool, build)
        self.ticks.watch(name, m.runner, loop)
        return m

    async def step_partition(self, partition: int) -> None:
        """Steps every mirror partition of ``partition``; state writes are made durable between steps."""
        self._last_step[partition] = time.monotonic()
        self._last_step_ms[partition] = self.clock_ms()
        await self._sync_ownership()
        if partition not in self.store.owned:
            return
        fence = self.owner_fence()
        if fence is not None and not self.still_owner(fence, partition):
            return  # fenced out, or rejoining: nothing is written until the view is the new generation's
        await self._read_other_workers_states()
        await self.table_partitions.persist(partition)
        keys = self.table_partitions.keys_of(partition)
        cached = self._by_mirror.get(partition)
        if cached is None or cached[0] is not keys:  # grouped again only when keys come or go
            grouped: dict[str, list[MirrorPartitionKey]] = defaultdict(list)
            for k in keys:
                grouped[k.mirror_name].append(k)
            cached = self._by_mirror[partition] = (keys, grouped)
        by_mirror = dict(cached[1])
        for name in self.image.mirrors.mirrors:
            by_mirror.setdefault(name, [])
        await step_rounds(self, partition, by_mirror)
        await self._claim_again_if_current()
        await self.stop_reporter.report(self.image)
        ask_for_the_view(self, partition)

    async def _claim_again_if_current(self) -> None:
        await self.ownership.claim_again_if_current(list(self.mirrors.values()), self.pool)

    async def _read_other_workers_states(self) -> None:
        """While other workers own some table partitions and the topic level of a stopping topic
        this worker leads waits on them (``waits_on_others``), their states from the changelog
        (``OtherWorkersStates``): the topic turns writable once every partition of it is STOPPED,
        not only those this worker holds."""
        await self.other_workers.refresh(lambda: waits_on_others(self))

    def _job_done(self, m: MirrorJob, fut: Any) -> None:
        m.busy = None
        if not fut.cancelled() and fut.exception() is not None:
            log.error("mirror %s: step failed: %r", m.runner.mirror_name, fut.exception())
        if m.retired:
            self._close_mirror(m.runner.mirror_name, m)
        else:
            self.copier.job_done(m)

    def _close_mirror(self, name: str, m: MirrorJob) -> None:
        if self.mirrors.get(name) is m:
            del self.mirrors[name]
        m.close()

    def _paused_job(self, m: MirrorJob, keys: list[MirrorPartitionKey], now_ms: int, partition: int | None = None) -> None:
        with cyclic_gc_paused(), profiled_job():
            self._job(m, keys, now_ms, partition)

    def _job(self, m: MirrorJob, keys: list[MirrorPartitionKey], now_ms: int, partition: int | None = None) -> None:
        run_job(self, m, keys, now_ms, partition)

    # ---------------------------------------------------------------------------- lifecycle

    def describe(self) -> dict[str, Any]:
        return {"transitions": self.store.transitions, "writes": self.store.writes,
                "owned": sorted(self.store.owned), "poison_offsets": list(self.poison_offsets),
                "metadata_offset": self.image.offset}  # fmt: skip

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        for m in self.mirrors.values():
            m.close()

