"""The cluster mirror controller: validates and authorizes admin commands, and alone appends
their records to the metadata log (as KRaft's active controller).

One request at a time, like KRaft's single-threaded controller: validate against the current
image -> append the records atomically -> wait until the log has been replayed past them ->
answer.

Several controllers may serve one destination cluster (issue #36): each follows the log and
serves reads; one is active and alone appends. Which one, its term, NOT_CONTROLLER and the
requests the log already answered (a retry gets the first answer, nothing is applied twice) are
``streams.admin.control_plane``. Reads (list, describe) see only committed state. Validation is
a pluggable callable ``(request, image, states) -> (records, response)``; the default wires
``coordinator.admin`` (``streams.admin.validator``).

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
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec

from coordinator import admin
from coordinator.delta import ProblemKind, Replayer
from coordinator.image import AclOperation, AclPermissionType, AclResourceType, MetadataImage, PatternType
from coordinator.states import ErrorCode
from aiokafka.errors import InvalidProducerEpoch, ProducerFenced

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
from streams.state.metadata_log import MetadataLogLoader, MetadataLogReader
from streams.state.snapshots import SnapshotPolicy, SnapshotStore
from streams.config import dlq_topic_spec, ensure_topics, metadata_topic_spec
from streams.state.mirror_state_codec import mirror_state_topic_spec
from streams.state.stop_reports import StopReportsView, stop_reports_topic_spec
from streams.state.sync_status import SyncStatusView, sync_status_topic_spec
from streams.state.changelog_view import MirrorStateChangelogView
from streams.admin.members import DeadMemberRemover
from streams.admin.validator import AdminRequest, StatusSource, Validator, coordinator_validator
from streams.admin.control_plane import ControlPlane
from streams.admin.election import controllers_topic_spec
from streams.admin.progress import ProgressCounts
from streams.admin.cut import attach_cuts, plan_stop_cut
from streams.admin.preview import PreviewPorts, Refused, predict_stop, serve_preview, with_impact_record
from streams.admin.responses import describe_config, error_response

log = logging.getLogger(__name__)
ANONYMOUS = "User:ANONYMOUS"
BUSY_AFTER_REQUEST_S = 2.0  # a snapshot due waits while requests came this recently (``_serving``)
FENCED = (ProducerFenced, InvalidProducerEpoch)


def _snapshot_subdir(controller_id: str) -> str:
    # Controllers sharing a data directory keep their snapshots apart.
    return "controller" if not controller_id else "controller-" + "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in controller_id)


class NotController(Exception):
    """This controller is not (or no longer) the active one."""


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
        # Which controller is active, its term, the requests the log answered: its own class.
        self.control = ControlPlane(self, config, self.schemas, on_active=self._became_active,
                                    on_standby=self._became_standby)  # fmt: skip
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
        self.control.replayed(record)

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
        await self.control.start()
        log.info("controller %s started as %s in %.2f s (catch-up %.2f s, to %d)", self.controller_id,
                 "the active controller" if self.active else "a standby", time.monotonic() - started,
                 caught_up - started, self.loader.next_offset)  # fmt: skip

    # -- the control plane (``streams.admin.control_plane``) ----------------------------------------

    @property
    def active(self) -> bool:
        return self.control.active

    @property
    def controller_id(self) -> str:
        return self.control.controller_id

    @property
    def active_endpoint(self) -> str | None:
        return self.control.active_endpoint

    async def step_down(self, why: str) -> None:
        await self.control.step_down(why)

    async def wait_active(self, timeout: float) -> None:
        await self.control.wait_active(timeout)

    async def _became_active(self) -> None:
        self._members = asyncio.create_task(self.members.run(), name="kip1279-controller-members")

    async def _became_standby(self) -> None:
        members, self._members = self._members, None
        if members is not None:
            members.cancel()
            with contextlib.suppress(BaseException):
                await members

    async def read_to(self, end: int) -> None:
        """Until the follower has applied every record below ``end`` (control markers included)."""
        while self._applying or await self.reader.position() < end:
            if not self.following:
                raise RuntimeError("the controller stopped following the metadata log")
            await asyncio.sleep(0.01)

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
        await self.control.stop()
        for task in (self._follow, self._timer, self._members):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._follow = self._timer = self._members = None
        for part in (self.status, self.sync_view, self.stop_reports, self.reader, self.dlq):
            if part is not None:
                with contextlib.suppress(Exception):
                    await part.stop()

    async def append(self, records: Sequence[ApiMessageAndVersion], timeout: float = 30.0) -> list[int]:
        """Appends records and returns once the image includes them (read-your-writes). Raises
        NotController on a standby, and on a controller fenced by a newer one (it steps down)."""
        writer = self.control.writer
        if not self.active or writer is None:
            raise NotController(self.control.not_active_message())
        try:
            offsets = await writer.append(records)
        except FENCED as e:
            await self.step_down(f"the metadata log's writer was fenced ({type(e).__name__})")
            raise NotController(self.control.not_active_message()) from None
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
            answered = self.control.answered(rid, api, header.api_version)
            if answered is not None:  # a retry: the first attempt's answer, from the log
                return answered
            if not self.active:
                return self.control.not_controller(api), self.metadata_offset
        describe = api == "DescribeClusterMirrors"
        async with self._lock:
            if api in STATE_CHANGING:  # the first attempt may have been served while this one waited
                answered = self.control.answered(rid, api, header.api_version)
                if answered is not None:
                    return answered
                if not self.active:
                    return self.control.not_controller(api), self.metadata_offset
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
                    records.append(self.control.request_record(rid, header, response))
                try:
                    await self.append(records)
                except NotController:
                    return self.control.not_controller(api), self.metadata_offset
                except Exception as e:  # noqa: BLE001 - the client gets an error, the controller stays up
                    log.error("%s: append to the metadata log failed: %s", api, scrub(str(e), secrets))
                    return error_response(self.schemas, api, ErrorCode.UNKNOWN_SERVER_ERROR, "metadata log append failed"), self.metadata_offset
                self.on_command(api, records)
            return response, self.metadata_offset

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
