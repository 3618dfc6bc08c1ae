"""The cluster mirror controller: validates and authorizes admin commands, and alone appends
their records to the metadata log (as KRaft's active controller).

One request at a time, like KRaft's single-threaded controller: validate against the current
image -> append the records atomically -> wait until the log has been replayed past them ->
answer.

Several controllers may serve one destination cluster (issue #36): each follows the log and
serves reads; one is active and alone appends. They publish heartbeats
(``streams.admin.election``); a standby takes over once the active has been silent for
``controller.session.timeout.ms``, by fencing the log's writer (its transactional id) and
appending a ``ClusterMirrorControllerRecord`` that names it. A standby, or an active one fenced
by another (it steps down and stays a standby), answers a state-changing request with
NOT_CONTROLLER and the active's endpoint. Such a request that carries a request ID is appended
with a ``ClusterMirrorRequestRecord`` holding its answer: a retry gets that answer from any
controller, and nothing is applied twice. Reads (list, describe) see only committed state. Validation is a pluggable callable
``(request, image, states) -> (records, response)``; the default wires ``coordinator.admin``.

The per-partition states come from a ``StatusSource``; the default follows ``__mirror_state``
(the Faust table's changelog) with a plain consumer, so describe shows what the workers
persisted: state, retry attempt and error. Source HW and destination LEO come from an
optional batched offsets lookup (the cluster ports), -1 until one is given; only describe asks
for them, looked up for the request unless it allows older ones (``OffsetsMaxAgeMs``), and
each partition's answer says how old its offsets are.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import logging
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import msgspec

from coordinator import admin
from coordinator.delta import ProblemKind, Replayer
from coordinator.readiness import SyncReport
from coordinator.state_counts import StateTally
from coordinator.image import AclOperation, AclPermissionType, AclResourceType, MetadataImage, PatternType
from coordinator.states import ErrorCode
from aiokafka.errors import InvalidProducerEpoch, ProducerFenced

from coordinator.election import Heartbeat, should_take_over
from coordinator.image import ActiveController
from records.framing import ApiMessageAndVersion
from records.registry import SchemaSet, default_schemas
from streams.admin.client import (
    API_NAMES,
    STATE_CHANGING,
    ProtocolError,
    RequestHeader,
    decode_request_header,
    encode_response,
    read_frame,
    scrub,
    secret_values,
)
from streams import tls
from streams.config import WorkerConfig
from streams.state.dead_letters import DeadLetterQueue
from streams.state.metadata_log import MetadataLogLoader, MetadataLogReader, MetadataLogWriter
from streams.state.snapshots import SnapshotPolicy, SnapshotStore
from streams.config import dlq_topic_spec, ensure_topics, metadata_topic_spec
from streams.state.mirror_state import mirror_state_topic_spec
from streams.state.stop_reports import StopReportsView, stop_reports_topic_spec
from streams.state.sync_status import SyncStatusView, sync_status_topic_spec
from streams.state.changelog_view import MirrorStateChangelogView, PartitionStatus, StateKey
from streams.admin.members import DeadMemberRemover
from streams.admin.election import HeartbeatChannel, controllers_topic_spec
from streams.admin.progress import ProgressCounts
from streams.admin.cut import attach_cuts, plan_stop_cut
from streams.admin.preview import PreviewPorts, Refused, predict_stop, serve_preview, with_impact_record
from streams.admin.responses import alter_configs_response, describe_config, describe_response, error_response, list_response, names, topic_response

log = logging.getLogger(__name__)
ANONYMOUS = "User:ANONYMOUS"
BUSY_AFTER_REQUEST_S = 2.0  # a snapshot due waits while requests came this recently (``_serving``)
FENCED = (ProducerFenced, InvalidProducerEpoch)
MAX_KEPT_RESPONSE_BYTES = 512 * 1024  # a request's answer kept in the log (ClusterMirrorRequestRecord)


def _snapshot_subdir(controller_id: str) -> str:
    # Controllers sharing a data directory keep their snapshots apart.
    return "controller" if not controller_id else "controller-" + "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in controller_id)


class NotController(Exception):
    """This controller is not (or no longer) the active one."""


class AdminRequest(NamedTuple):
    header: RequestHeader
    api: str  # e.g. "StopMirrorTopics"
    body: msgspec.Struct
    principal: admin.Principal
    # Describe only: the workers' sync reports per mirror (None: not known to this controller).
    syncs: Mapping[str, Sequence[SyncReport]] | None = None
    # A StateCountsOnly describe: the counts per state kept as the changelog is read (None: walk the states).
    tally: StateTally | None = None
    # List only: the cluster ID each mirror's source last answered, by mirror.
    source_cluster_ids: Mapping[str, str] | None = None


Validator = Callable[[AdminRequest, MetadataImage, Mapping[StateKey, PartitionStatus]],
                     tuple[Sequence[ApiMessageAndVersion], msgspec.Struct]]  # fmt: skip


class StatusSource(Protocol):
    async def start(self) -> None: ...
    async def stop(self) -> None: ...

    async def statuses(self, offsets: bool = True, mirrors: Collection[str] | None = None,
                       max_age: float = 0.0) -> Mapping[StateKey, PartitionStatus]:  # fmt: skip
        """Every partition's status; source HW / destination LEO only with ``offsets``, and then
        only for ``mirrors`` (None: all) -- the others keep -1. Offsets are looked up for this
        call unless ones at most ``max_age`` seconds old are at hand."""
        ...


# -------------------------------------------------------------------- the default validator


def coordinator_validator(schemas: SchemaSet | None = None, ready_max_lag: int = 1000) -> Validator:
    """``coordinator.admin`` behind the controller's validator interface; ``ready_max_lag`` is
    the lag a describe still calls ready for a failover (``metrics.failover.ready.max.lag``)."""
    s = schemas or default_schemas()

    def validate(req: AdminRequest, image: MetadataImage, statuses: Mapping[StateKey, PartitionStatus]):  # noqa: ANN202
        b: Any = req.body
        states = {k: v.state for k, v in statuses.items()}
        who = req.principal
        svo = getattr(b, "state_validation_offset", -1)
        api = req.api
        if api == "CreateClusterMirror":
            config = {c.name: c.value for c in b.config}
            r = admin.create_cluster_mirror(image, b.mirror_name, config, principal=who, schemas=s)
            return r.records, topic_response(s, api, r.response, secret_values(config))
        if api == "DeleteClusterMirror":
            r = admin.delete_cluster_mirror(image, b.mirror_name, states=states, state_validation_offset=svo, principal=who, schemas=s)
        elif api == "StartMirrorTopics":
            r = admin.start_mirror_topics(image, b.mirror_name, names(b), include_patterns=b.include_patterns,
                                          exclude_patterns=b.exclude_patterns, states=states,
                                          state_validation_offset=svo, principal=who, schemas=s)  # fmt: skip
        elif api == "StopMirrorTopics":
            r = admin.stop_mirror_topics(image, b.mirror_name, names(b), patterns=b.patterns, states=states,
                                         state_validation_offset=svo, principal=who, schemas=s)  # fmt: skip
        elif api == "PauseMirrorTopics":
            r = admin.pause_mirror_topics(image, b.mirror_name, names(b), states=states, state_validation_offset=svo, principal=who, schemas=s)
        elif api == "ResumeMirrorTopics":
            r = admin.resume_mirror_topics(image, b.mirror_name, names(b), states=states, state_validation_offset=svo, principal=who, schemas=s)
        elif api == "AlterClusterMirrorConfigs":
            changes = [(c.name, admin.ConfigOp(c.config_operation) if c.config_operation in (0, 1) else c.config_operation,
                        c.value) for c in b.configs]  # fmt: skip
            r = admin.alter_cluster_mirror_configs(image, b.mirror_name, changes, validate_only=b.validate_only,
                                                   principal=who, schemas=s)  # fmt: skip
            return r.records, alter_configs_response(s, r.response, secret_values({c.name: c.value for c in b.configs}))
        elif api == "DescribeClusterMirrorConfigs":
            code, message, configs = admin.describe_cluster_mirror_configs(image, b.mirror_name, principal=who)
            ccls = s.nested(f"{api}Response", "DescribeConfigsResourceResult")
            return (), s.struct(f"{api}Response")(throttle_time_ms=0, error_code=int(code), error_message=message,
                                                  configs=[ccls(name=c.name, value=c.value, is_sensitive=c.sensitive)
                                                           for c in configs])  # fmt: skip
        elif api == "ListClusterMirrors":
            return (), list_response(s, admin.list_cluster_mirrors(image, b.include_topic_names, principal=who,
                                                                   source_cluster_ids=req.source_cluster_ids))  # fmt: skip
        elif api == "DescribeClusterMirrors":
            counts_only = getattr(b, "state_counts_only", False)
            tally = req.tally if counts_only else None
            described = admin.describe_cluster_mirrors(image, list(b.mirror_names or ()), states=states, principal=who,
                                                       tally=tally)  # fmt: skip
            return (), describe_response(s, described, statuses, ready_max_lag, req.syncs, counts_only=counts_only)
        else:
            return (), error_response(s, api, ErrorCode.INVALID_REQUEST, f"unsupported API {api}")
        return r.records, topic_response(s, api, r.response, ())

    return validate


# ---------------------------------------------------------------- states from __mirror_state


# ------------------------------------------------------------------------------ controller


class ClusterMirrorController:
    def __init__(self, config: WorkerConfig, *, validator: Validator | None = None, status: StatusSource | None = None,
                 super_users: frozenset[str] = frozenset(), snapshot_policy: SnapshotPolicy | None = None,
                 schemas: SchemaSet | None = None) -> None:  # fmt: skip
        self.config = config
        self.schemas = schemas or default_schemas()
        self.validator = validator or coordinator_validator(self.schemas, config.failover_ready_max_lag)
        self.status = status or MirrorStateChangelogView(
            config.bootstrap_servers, config.mirror_state_topic_name, config.state_partitions)
        self.sync_view = SyncStatusView(config.bootstrap_servers, config.sync_status_topic_name)
        self.stop_reports = StopReportsView(config.bootstrap_servers, config.stop_reports_topic_name, config.state_partitions)
        self.progress = ProgressCounts(self.status, self.stop_reports, config.state_partitions)
        # The workers' group: dead members a broker does not expire are removed (see its module).
        self.members = DeadMemberRemover(config, self.sync_view)
        self.super_users = super_users
        # The admin listener's TLS, checked before anything starts: a bad key store or a
        # non-loopback bind without TLS stops the controller here, with the reason.
        self.listener_ssl = tls.server_context(tls.admin_listener_ssl(config.extra))
        tls.check_bind(config.controller_address[0], self.listener_ssl is not None)
        topic = config.metadata_topic_name
        self.writer: MetadataLogWriter | None = None  # while active
        self.active = False
        self.controller_id = config.controller_id  # set at start when empty
        self.instance = uuid.uuid4().hex
        self.term: ActiveController | None = None  # the ClusterMirrorControllerRecord of our term
        self.heartbeats = HeartbeatChannel(config.bootstrap_servers, config.controllers_topic_name)
        self._election: asyncio.Task[None] | None = None
        self._step_downs: set[asyncio.Task[None]] = set()
        self.dlq = DeadLetterQueue(config.bootstrap_servers, topic)
        self.reader = MetadataLogReader(config.bootstrap_servers, topic, dlq=self.dlq, client_id="kip1279-controller")
        self.replayer = Replayer(schemas=self.schemas)
        policy = snapshot_policy or SnapshotPolicy(config.snapshot_max_records, config.snapshot_max_interval_ms)
        self.loader = MetadataLogLoader(
            self.reader, SnapshotStore(config.snapshot_dir / _snapshot_subdir(config.controller_id)), policy=policy,
            replay=self._replay,
            to_records=lambda: None if self.replayer.in_transaction else self.image.to_records(self.schemas),
            on_poison=self._on_poison, busy=self._serving,
        )  # fmt: skip
        self._last_request = -BUSY_AFTER_REQUEST_S  # monotonic time of the last admin request
        self._applied = asyncio.Condition()
        self._applying = False  # the follower is folding a fetched batch in
        self._lock = asyncio.Lock()  # one command at a time
        self._follow: asyncio.Task[None] | None = None
        self._timer: asyncio.Task[None] | None = None
        self._members: asyncio.Task[None] | None = None
        self._server: asyncio.base_events.Server | None = None
        self.address: tuple[str, int] | None = None
        self._image: MetadataImage | None = None
        self._image_stale = True
        # The cluster ID each mirror's source last answered (kept by whoever talks to the sources:
        # the topic registration of ``streams.worker.main``); --list shows it.
        self.source_cluster_ids: dict[str, str] = {}
        # Told of the records each request appended (``streams.worker.metrics`` times stop requests).
        self.on_command: Callable[[str, Sequence[ApiMessageAndVersion]], None] = lambda api, records: None
        # The mirror's (source, destination) ports for PreviewMirrorTopics; None: no preview here.
        self.preview_ports: PreviewPorts | None = None

    def _replay(self, offset: int, epoch: int, record: ApiMessageAndVersion) -> None:
        problem = self.replayer.replay(record, offset, epoch)
        if problem is not None:
            log.error("metadata record at offset %d not applied: %s", offset, problem.message)
        self._image_stale = True
        m = record.message
        if self.active and type(m).__name__ == "ClusterMirrorControllerRecord" and \
                ActiveController(m.controller_id, m.endpoint, m.epoch) != self.term:  # type: ignore[attr-defined]
            self._spawn_step_down(f"controller {m.controller_id} at {m.endpoint} took over in epoch {m.epoch}")  # type: ignore[attr-defined]

    def _on_poison(self, entry: Any) -> None:
        self.replayer.delta.report(entry.offset, entry.leader_epoch, ProblemKind.UNDECODABLE, entry.record.error)
        self._image_stale = True

    @property
    def image(self) -> MetadataImage:
        """The committed image; rebuilt only when records were applied since the last call."""
        if self._image is None or self._image_stale:
            _, self._image = self.replayer.publish()  # start a fresh delta: unchanged parts stay shared
            self._image_stale = False
        return self._image

    @property
    def metadata_offset(self) -> int:
        return self.image.offset

    async def start(self, listen: bool = True) -> None:
        c = self.config
        started = time.monotonic()
        await ensure_topics(c.bootstrap_servers, [metadata_topic_spec(c.metadata_topic_name, c.replication_factor),
                                                  dlq_topic_spec(c.metadata_topic_name, c.replication_factor),
                                                  mirror_state_topic_spec(c), sync_status_topic_spec(c),
                                                  stop_reports_topic_spec(c),
                                                  controllers_topic_spec(c.controllers_topic_name, c.replication_factor)],
                            min_insync_replicas=c.min_insync_replicas)  # fmt: skip
        await self.dlq.start()
        await self.reader.start()
        await self.status.start()
        await self.sync_view.start()
        await self.loader.catch_up()
        self._follow = asyncio.create_task(self._run_follow(), name="kip1279-controller-follow")
        self._timer = asyncio.create_task(self._snapshot_timer(), name="kip1279-controller-snapshots")
        caught_up = time.monotonic()
        if listen:
            host, port = c.controller_address
            self._server = await asyncio.start_server(self._serve, host, port, ssl=self.listener_ssl)
            sock = self._server.sockets[0].getsockname()
            self.address = (sock[0], sock[1])
            if self.listener_ssl is not None:
                log.info("controller for %s listening on %s:%d (SSL, client certificates required: the "
                         "principal is the certificate's subject)", c.metadata_topic_name, *self.address)  # fmt: skip
            else:
                log.warning("controller for %s listening on %s:%d (PLAINTEXT, local mode: loopback only, the "
                            "principal is the one the client claims; set admin.listener.ssl.* for TLS)",
                            c.metadata_topic_name, *self.address)  # fmt: skip
        if not self.controller_id:
            self.controller_id = f"{self.address[0]}:{self.address[1]}" if self.address else f"controller-{self.instance}"
        # One election round now: a lone controller (or one whose active is gone) serves at once.
        await self.heartbeats.start()
        await self._election_round()
        self._election = asyncio.create_task(self._run_election(), name="kip1279-controller-election")
        log.info("controller %s started as %s in %.2f s (catch-up %.2f s, to %d)", self.controller_id,
                 "the active controller" if self.active else "a standby", time.monotonic() - started,
                 caught_up - started, self.loader.next_offset)  # fmt: skip

    # -- the election ---------------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        return f"{self.address[0]}:{self.address[1]}" if self.address else ""

    @property
    def active_endpoint(self) -> str | None:
        """Where the active controller listens, as the log last said (None: no controller yet)."""
        if self.active:
            return self.endpoint or None
        c = self.image.control.controller
        return c.endpoint if c is not None and c.endpoint else None

    def _heartbeat(self) -> Heartbeat:
        epoch = self.term.epoch if self.term is not None else -1
        return Heartbeat(self.controller_id, self.instance, self.endpoint, self.active, epoch, int(time.time() * 1000))

    async def _election_round(self) -> None:
        try:
            await self.heartbeats.publish(self._heartbeat())
            beats = await self.heartbeats.poll()
        except Exception as e:  # noqa: BLE001 - the next round tries again
            log.warning("controller heartbeats on %s failed: %s", self.config.controllers_topic_name, e)
            return
        if not self.active and should_take_over(self.controller_id, self.instance, beats, int(time.time() * 1000),
                                                self.config.controller_session_timeout_ms):  # fmt: skip
            await self._take_over()

    async def _run_election(self) -> None:
        period = self.config.controller_session_timeout_ms / 5000
        while True:
            await asyncio.sleep(period)
            await self._election_round()

    async def _take_over(self) -> None:
        """Fence the log's writer, read the log to its end, append our term's record. Only the
        append holds the request lock: reads go on being served while Kafka answers the rest."""
        t0 = time.monotonic()
        writer = MetadataLogWriter(self.config.bootstrap_servers, self.config.metadata_topic_name)
        try:
            await writer.start()  # init_transactions: every older writer is fenced from here on
            await asyncio.wait_for(self._read_to(writer.start_end_offset), 30.0)
            async with self._lock:  # no request is served between the fencing and our term's record
                self.writer, self.active = writer, True
                self.term = ActiveController(self.controller_id, self.endpoint, writer.epoch)
                cls = self.schemas.struct("ClusterMirrorControllerRecord")
                key = self.schemas.spec("ClusterMirrorControllerRecord").api_key
                await self.append([ApiMessageAndVersion(cls(controller_id=self.term.controller_id, endpoint=self.term.endpoint,
                                                            epoch=self.term.epoch), 0, key)])  # type: ignore[arg-type]  # fmt: skip
        except Exception as e:  # noqa: BLE001 - fenced by another in the meantime, or the log is down
            log.warning("controller %s did not take over: %r", self.controller_id, e)
            self.active, self.writer, self.term = False, None, None
            with contextlib.suppress(Exception):
                await writer.stop()
            return
        self._members = asyncio.create_task(self.members.run(), name="kip1279-controller-members")
        log.warning("controller %s at %s is the active controller (epoch %d), taken over in %.2f s",
                    self.controller_id, self.endpoint, self.term.epoch, time.monotonic() - t0)  # fmt: skip
        with contextlib.suppress(Exception):
            await self.heartbeats.publish(self._heartbeat())

    async def _read_to(self, end: int) -> None:
        """Until the follower has applied every record below ``end`` (control markers included)."""
        while self._applying or await self.reader.position() < end:
            if not self.following:
                raise RuntimeError("the controller stopped following the metadata log")
            await asyncio.sleep(0.01)

    def _spawn_step_down(self, why: str) -> None:
        task = asyncio.create_task(self.step_down(why))
        self._step_downs.add(task)
        task.add_done_callback(self._step_downs.discard)

    async def step_down(self, why: str) -> None:
        """Stop writing (a newer controller fenced this one) and stay on as a standby."""
        if not self.active:
            return
        self.active = False
        writer, self.writer, self.term = self.writer, None, None
        log.warning("controller %s steps down and is a standby now: %s", self.controller_id, why)
        members, self._members = self._members, None
        if members is not None:
            members.cancel()
            with contextlib.suppress(BaseException):
                await members
        if writer is not None:
            with contextlib.suppress(Exception):
                await writer.stop()
        with contextlib.suppress(Exception):
            await self.heartbeats.publish(self._heartbeat())

    async def wait_active(self, timeout: float) -> None:
        """Until this controller is the active one (tests, and the main job's start)."""
        deadline = time.monotonic() + timeout
        while not self.active:
            if time.monotonic() > deadline:
                raise TimeoutError(f"controller {self.controller_id} is not active after {timeout} s")
            await asyncio.sleep(0.05)

    def _serving(self) -> bool:
        """Served an admin request in the last ``BUSY_AFTER_REQUEST_S``: a snapshot due waits
        (``MetadataLogLoader.busy``), as a stop and its --wait polls come one after the other."""
        return time.monotonic() - self._last_request < BUSY_AFTER_REQUEST_S

    @property
    def following(self) -> bool:
        """False once the metadata log follower has stopped (appends then time out)."""
        return self._follow is None or not self._follow.done()

    async def _run_follow(self) -> None:
        try:
            async for entries in self.reader.read_batches(self.loader.next_offset, follow=True):
                self._applying = True
                for entry in entries:
                    self.loader.apply(entry)
                self._applying = False
                async with self._applied:
                    self._applied.notify_all()
                await self.loader.maybe_snapshot()
        except asyncio.CancelledError:
            raise
        except Exception:
            # Appends now time out and answer an error instead of hanging; the log says why.
            log.exception("the controller stopped following %s", self.config.metadata_topic_name)
            raise

    async def _snapshot_timer(self) -> None:
        # A quiet log still gets its time-based snapshot (records alone only trigger the count),
        # and one deferred while requests came (``_serving``) is written once they stop.
        period = max(1.0, min(self.loader.policy.max_interval_ms / 1000, BUSY_AFTER_REQUEST_S))
        while True:
            await asyncio.sleep(period)
            try:
                await self.loader.maybe_snapshot()
            except Exception as e:  # noqa: BLE001 - a failed snapshot only lengthens the next replay
                log.error("metadata snapshot failed: %s", e)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for task in (self._election, self._follow, self._timer, self._members, *self._step_downs):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._election = self._follow = self._timer = self._members = None
        # A last heartbeat that leaves: a standby takes over at its next round, not a session later.
        self.active = False
        with contextlib.suppress(Exception):
            await self.heartbeats.publish(self._heartbeat()._replace(leaving=True))
        writer, self.writer = self.writer, None
        for part in (self.heartbeats, self.status, self.sync_view, self.stop_reports, self.reader, self.dlq, writer):
            if part is not None:
                with contextlib.suppress(Exception):
                    await part.stop()

    async def append(self, records: Sequence[ApiMessageAndVersion], timeout: float = 30.0) -> list[int]:
        """Appends records and returns once the image includes them (read-your-writes). Raises
        NotController on a standby, and on a controller fenced by a newer one (it steps down)."""
        writer = self.writer
        if not self.active or writer is None:
            raise NotController(self._not_active_message())
        try:
            offsets = await writer.append(records)
        except FENCED as e:
            await self.step_down(f"the metadata log's writer was fenced ({type(e).__name__})")
            raise NotController(self._not_active_message()) from None
        if offsets:
            last = offsets[-1]
            async with self._applied:
                await asyncio.wait_for(self._applied.wait_for(lambda: self.loader.next_offset > last), timeout)
        return offsets

    async def discover(self, mirror_name: str, source_topics: Mapping[str, uuid.UUID]) -> tuple[str, ...]:
        """Starts the source topics a started pattern of the mirror selects and no mirror holds
        (``admin.discover_mirror_topics``), in turn with the admin commands. Returns their names
        (none on a standby: the active controller discovers)."""
        if not self.active:
            return ()
        async with self._lock:
            found = admin.discover_mirror_topics(self.image, mirror_name, source_topics, schemas=self.schemas)
            if not found.records:
                return ()
            # Partition states only now: a start must not race a stop still under way.
            statuses = await self.status.statuses(offsets=False)
            found = admin.discover_mirror_topics(self.image, mirror_name, source_topics, schemas=self.schemas,
                                                 states={k: v.state for k, v in statuses.items()})  # fmt: skip
            if found.records:
                await self.append(list(found.records))
        names = tuple(t.name for t in found.response.topics)
        if names:
            log.info("mirror %s: discovered and started %d topic(s): %s", mirror_name, len(names), ", ".join(names))
        return names

    async def create_acls(self, principal: str, operations: Sequence[AclOperation], mirror: str = "*",
                          pattern: PatternType = PatternType.LITERAL, deny: bool = False, host: str = "*") -> list[int]:  # fmt: skip
        """Bootstrap ClusterMirror ACLs (there is no CreateAcls RPC in this project yet)."""
        cls = self.schemas.struct("AccessControlEntryRecord")
        key = self.schemas.spec("AccessControlEntryRecord").api_key
        perm = AclPermissionType.DENY if deny else AclPermissionType.ALLOW
        records = [ApiMessageAndVersion(cls(id=uuid.uuid4(), resource_type=int(AclResourceType.CLUSTER_MIRROR),
                                            resource_name=mirror, pattern_type=int(pattern), principal=principal,
                                            host=host, operation=int(op), permission_type=int(perm)), 0, key)
                   for op in operations]  # type: ignore[arg-type]  # fmt: skip
        return await self.append(records)

    async def handle(self, header: RequestHeader, body: msgspec.Struct, peer_host: str = "127.0.0.1", *,
                     authenticated: str | None = None) -> tuple[msgspec.Struct, int]:  # fmt: skip
        """Validates, appends, answers. Returns the response and the metadata offset it reflects.

        ``authenticated``: the principal of the connection's client certificate; with it, the
        principal the request claims is ignored."""
        api = API_NAMES[header.api_key]
        self._last_request = time.monotonic()
        who = admin.Principal(authenticated or header.principal or ANONYMOUS, peer_host, self.super_users)
        req = AdminRequest(header, api, body, who)
        if api == "ListClusterMirrors":
            req = req._replace(source_cluster_ids=dict(self.source_cluster_ids))
        if api == "PreviewMirrorTopics":  # reads only: nothing to append, no need for the lock
            statuses = await self.status.statuses(offsets=False, mirrors={body.mirror_name})  # type: ignore[attr-defined]
            states = {k: v.state for k, v in statuses.items()}
            return await serve_preview(self.image, body, who, states, self.preview_ports, self.schemas), self.metadata_offset
        rid = header.request_id if api in STATE_CHANGING else None
        if api in STATE_CHANGING:
            answered = self._answered(rid, api, header.api_version)
            if answered is not None:  # a retry: the first attempt's answer, from the log
                return answered
            if not self.active:
                return self._not_controller(api), self.metadata_offset
        describe = api == "DescribeClusterMirrors"
        async with self._lock:
            if api in STATE_CHANGING:  # the first attempt may have been served while this one waited
                answered = self._answered(rid, api, header.api_version)
                if answered is not None:
                    return answered
                if not self.active:
                    return self._not_controller(api), self.metadata_offset
            # Only describe shows offsets; the commands validate against states alone.
            mirrors = (set(getattr(body, "mirror_names", None) or ()) or None) if describe else None
            counts_only = describe and getattr(body, "state_counts_only", False)
            with_offsets = describe and getattr(body, "include_offsets", True) and not counts_only
            state_counts = getattr(self.status, "state_counts", None) if counts_only else None
            if state_counts is not None:
                # A progress poll: counts kept as the changelog is read, no walk over every state.
                statuses = {}
                req = req._replace(tally=await self.progress.counts(self.image, mirrors))
            elif with_offsets:
                max_age = max(0, getattr(body, "offsets_max_age_ms", 0)) / 1000
                statuses = await self.status.statuses(offsets=True, mirrors=mirrors, max_age=max_age)
            else:
                statuses = await self.status.statuses(offsets=False, mirrors=mirrors)
            image = self.image  # built on the loop; once built it is immutable
            if describe:
                req = req._replace(syncs=await self.sync_view.reports())
                # A describe of 50k partitions is ~0.2 s of CPU; on a thread the loop keeps serving.
                # The response codec is made here first: made on two threads at once, it could
                # differ from the one encode_response looks up.
                self.schemas.codec(f"{api}Response")
                if req.tally is not None:  # a few counts per topic: on the loop, where the tally changes
                    records, response = self.validator(req, image, statuses)
                else:
                    records, response = await asyncio.to_thread(self.validator, req, image, statuses)
            else:
                prediction, cuts = None, None
                states = {k: v.state for k, v in statuses.items()} if api == "StopMirrorTopics" else {}
                if api == "StopMirrorTopics" and getattr(body, "consistent_cut", False):  # planned, or refused
                    planned = await plan_stop_cut(image, body, who, states, self.preview_ports, self.schemas)
                    if isinstance(planned, Refused):
                        return error_response(self.schemas, api, planned.code, planned.message), self.metadata_offset
                    cuts, prediction = planned
                elif api == "StopMirrorTopics":  # the stop's impact, predicted as at the cut (issue #26)
                    prediction = await predict_stop(image, body, who, states, self.preview_ports, self.schemas)
                records, response = self.validator(req, image, statuses)
                if cuts is not None:
                    records = attach_cuts(records, cuts, self.schemas)
                if prediction is not None and records:  # it travels with the stop, in the same append
                    records = with_impact_record(self.schemas, body.mirror_name, prediction, records)  # type: ignore[attr-defined]
            secrets = secret_values({c.name: c.value for c in getattr(body, "config", None) or getattr(body, "configs", [])})
            code = getattr(response, "error_code", 0)
            log.info("%s %s by %s from %s: error %d, %d record(s)%s", api, getattr(body, "mirror_name", ""),
                     who.name, peer_host, code, len(records), describe_config(body))  # fmt: skip
            if records:
                records = list(records)
                if rid is not None:  # kept with the request's answer: a retry is answered from the log
                    records.append(self._request_record(rid, header, response))
                try:
                    await self.append(records)
                except NotController:
                    return self._not_controller(api), self.metadata_offset
                except Exception as e:  # noqa: BLE001 - the client gets an error, the controller stays up
                    log.error("%s: append to the metadata log failed: %s", api, scrub(str(e), secrets))
                    return error_response(self.schemas, api, ErrorCode.UNKNOWN_SERVER_ERROR, "metadata log append failed"), self.metadata_offset
                self.on_command(api, records)
            return response, self.metadata_offset

    def _not_active_message(self) -> str:
        where = self.active_endpoint
        return f"controller {self.controller_id} is not the active controller" + (
            f"; the active controller is at {where}" if where else "; no active controller is known yet")

    def _not_controller(self, api: str) -> msgspec.Struct:
        return error_response(self.schemas, api, ErrorCode.NOT_CONTROLLER, self._not_active_message())

    def _request_record(self, rid: uuid.UUID, header: RequestHeader, response: msgspec.Struct) -> ApiMessageAndVersion:
        encoded = self.schemas.encode(response, header.api_version)
        if len(encoded) > MAX_KEPT_RESPONSE_BYTES and getattr(response, "topics", None):
            # A record must stay under the log's max.message.bytes: a mass stop's answer keeps
            # its refused topics only (the accepted ones are in the log's own records).
            kept = [t for t in response.topics if t.error_code]  # type: ignore[attr-defined]
            encoded = self.schemas.encode(msgspec.structs.replace(response, topics=kept), header.api_version)
        cls = self.schemas.struct("ClusterMirrorRequestRecord")
        key = self.schemas.spec("ClusterMirrorRequestRecord").api_key
        return ApiMessageAndVersion(cls(request_id=rid, api_key=header.api_key, api_version=header.api_version,
                                        response=encoded), 0, key)  # type: ignore[arg-type]  # fmt: skip

    def _answered(self, rid: uuid.UUID | None, api: str, version: int) -> tuple[msgspec.Struct, int] | None:
        """The answer a request with this ID got, if the log has it."""
        applied = self.image.control.requests.get(rid) if rid is not None else None
        if applied is None:
            return None
        log.info("%s request %s is a retry: answered as first applied", api, rid)
        return self.schemas.decode(f"{api}Response", applied.response, applied.api_version), self.metadata_offset

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername") or ("?", 0)
        authenticated = None
        try:
            ssl_object = writer.get_extra_info("ssl_object")
            if ssl_object is not None:  # the handshake required a certificate our trust store vouches for
                authenticated = tls.principal_of(ssl_object.getpeercert(binary_form=True))
                log.debug("admin connection from %s authenticated as %s", peer[0], authenticated)
            while True:
                frame = await read_frame(reader)
                if frame is None:
                    break
                header, pos = decode_request_header(frame)
                api = API_NAMES.get(header.api_key)
                if api is None or header.api_version != 0:
                    log.warning("unsupported api key %d v%d from %s; closing", header.api_key, header.api_version, peer[0])
                    break
                try:
                    body = self.schemas.decode(f"{api}Request", frame[pos:], header.api_version)
                except Exception as e:  # noqa: BLE001 - a malformed request gets INVALID_REQUEST
                    response, offset = error_response(self.schemas, api, ErrorCode.INVALID_REQUEST, f"malformed {api} request: {e}"), self.metadata_offset
                else:
                    try:
                        response, offset = await self.handle(header, body, peer[0], authenticated=authenticated)
                    except Exception:  # noqa: BLE001 - a validator bug answers an error, never kills the controller
                        log.exception("%s failed", api)
                        response = error_response(self.schemas, api, ErrorCode.UNKNOWN_SERVER_ERROR, f"{api} failed on the controller")
                        offset = self.metadata_offset
                args = (header.correlation_id, offset, response, header.api_version, self.schemas)
                if api == "DescribeClusterMirrors":  # megabytes at 50k partitions: encoded off the loop
                    writer.write(await asyncio.to_thread(encode_response, *args))
                elif getattr(response, "error_code", 0) == ErrorCode.NOT_CONTROLLER:
                    writer.write(encode_response(*args, active_controller=self.active_endpoint))
                else:
                    writer.write(encode_response(*args))
                await writer.drain()
        except (ProtocolError, asyncio.IncompleteReadError, ConnectionError, ssl.SSLError, ValueError) as e:
            log.warning("admin connection from %s dropped: %s", peer[0], e)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


async def run_controller(config: WorkerConfig, super_users: frozenset[str] = frozenset()) -> None:
    """Run a controller until cancelled (``kafka-cluster-mirrors --run-controller``)."""
    controller = ClusterMirrorController(config, super_users=super_users)
    await controller.start()
    try:
        await asyncio.Event().wait()
    finally:
        await controller.stop()
